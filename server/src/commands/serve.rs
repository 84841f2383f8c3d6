//! `fenceline serve`: the API, health and console, with a worker, the outbox dispatcher and
//! the reaper unless `--no-worker`; prints where to sign in.

use anyhow::Context;

use fenceline::settings::Settings;
use fenceline::startup::{runtime, shutdown_signal, Application, Supervisor};

/// Where the alerts count dead letters: the embedded queue's `<name>-dlq`, or SQS's.
async fn dead_letters(
    ledger: &fenceline::ledger::Ledger,
    settings: &Settings,
) -> fenceline::alerts::DeadLetters {
    use fenceline::alerts::DeadLetters;
    use fenceline::settings::QueueKind;
    let name = format!("{}-dlq", settings.queue.name);
    match settings.queue.kind {
        QueueKind::Embedded => DeadLetters::Embedded(name),
        QueueKind::Sqs => {
            let mut dlq = settings.queue.clone();
            dlq.name = name;
            match runtime::plain_queue(ledger, &dlq).await {
                Ok(queue) => DeadLetters::Queue(queue),
                Err(error) => {
                    tracing::warn!(%error, "the dead-letter queue cannot be opened: no alert counts it");
                    DeadLetters::None
                }
            }
        }
    }
}

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
    let alerts = fenceline::alerts::Alerts::new(
        ledger.clone(),
        settings.http.alerts.clone(),
        settings.console_url(addr),
        dead_letters(&ledger, settings).await,
    );
    supervisor.spawn(
        "alerts",
        false,
        alerts.run(supervisor.stages().back.clone()),
    );
    supervisor.spawn(
        "bulk actions",
        false,
        fenceline::bulk::run(ledger.clone(), supervisor.stages().back.clone()),
    );
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
