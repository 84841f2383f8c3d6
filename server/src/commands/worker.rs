//! `fenceline worker`: a worker, the outbox dispatcher and the reaper, no HTTP.

use anyhow::Context;

use fenceline::ledger::Ledger;
use fenceline::settings::Settings;
use fenceline::startup::{runtime, shutdown_signal, Supervisor};

pub(super) async fn run(settings: &Settings) -> anyhow::Result<()> {
    let ledger = Ledger::connect(&settings.ledger.url, &settings.ledger.options)
        .await
        .context("opening the ledger")?;
    fenceline::startup::migrate(&ledger, settings.environment)
        .await
        .context("migrating the ledger")?;
    let mut supervisor = Supervisor::default();
    if let Some(bind) = settings.worker.health_bind {
        // Answers while the worker drains too: it is alive until it has stopped.
        let listener = tokio::net::TcpListener::bind(bind)
            .await
            .with_context(|| format!("binding the health listener on {bind}"))?;
        tracing::info!(%bind, "health: /healthz and /readyz");
        let stop = supervisor.stages().back.clone();
        let probes = fenceline::http::probes(ledger.clone());
        supervisor.spawn("health", false, async move {
            let _ = axum::serve(listener, probes)
                .with_graceful_shutdown(stop.cancelled_owned())
                .await;
        });
    }
    let metrics = fenceline::metrics::Metrics::default();
    runtime::start(&mut supervisor, &ledger, settings, &metrics).await?;
    supervisor
        .run_until_stopped(&ledger, shutdown_signal())
        .await;
    tracing::info!("fenceline worker stopped");
    Ok(())
}
