//! `fenceline serve`: the API, health and console, with a worker, the outbox dispatcher and
//! the reaper unless `--no-worker`; prints where to sign in.

use anyhow::Context;

use fenceline::settings::Settings;
use fenceline::startup::{runtime, shutdown_signal, Application, Supervisor};

pub(super) async fn run(settings: &Settings) -> anyhow::Result<()> {
    let app = Application::build(settings)
        .await
        .context("starting fenceline")?;
    let addr = app.local_addr();
    let ledger = app.ledger().clone();
    let metrics = app.metrics().clone();
    let backend = ledger.backend().as_str();
    let first_password = fenceline::startup::first_operator(&ledger, settings.environment)
        .await
        .context("checking that someone can sign in")?;
    let mut supervisor = Supervisor::default();
    if settings.http.run_worker {
        runtime::start(&mut supervisor, &ledger, settings, &metrics).await?;
    }
    let stop = supervisor.stages().front.clone();
    supervisor.spawn("http", true, async move {
        if let Err(error) = app
            .run_until_stopped(async move { stop.cancelled().await })
            .await
        {
            tracing::error!(%error, "the HTTP server failed");
        }
    });
    tracing::info!(%addr, database = backend, "fenceline is serving");
    println!("Fenceline is running on the {backend} ledger.");
    let console = settings.console_url(addr);
    println!("  Console: {console}/");
    match first_password {
        // Shown once, here only: never logged. Only its argon2id hash is stored.
        Some(password) => {
            println!("  Sign in at {console}/login as admin, password: {password}");
            println!("  (shown once; change it with: fenceline operator reset admin)");
        }
        None => println!("  Sign in at {console}/login"),
    }
    println!("  API:     http://{addr}/api/v1  (reference: http://{addr}/api, OpenAPI: http://{addr}/api/v1/openapi.json)");
    println!("  Create an API token with: fenceline token add <tenant>");
    supervisor
        .run_until_stopped(&ledger, shutdown_signal())
        .await;
    tracing::info!("fenceline stopped");
    Ok(())
}
