//! The `fenceline` binary: parses the command line and runs one command.

use anyhow::Context;
use clap::Parser;

use fenceline::config::{self, BenchCommand, Cli, Command, ServeArgs, TokenCommand};
use fenceline::ledger::Ledger;
use fenceline::startup::{shutdown_signal, Application};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("FENCELINE_LOG")
                .unwrap_or_else(|_| "info,sqlx=warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();

    let cli = Cli::parse();
    let options = config::ledger_options(&cli);
    match cli.command.as_ref() {
        None => serve(&cli, &ServeArgs::default()).await,
        Some(Command::Serve(args)) => serve(&cli, args).await,
        Some(Command::Migrate) => {
            let ledger = Ledger::connect(&cli.database_url, &options).await?;
            ledger.migrate().await.context("migrating the ledger")?;
            println!("migrated the {} ledger", ledger.backend().as_str());
            Ok(())
        }
        Some(Command::Token(TokenCommand::Add { tenant, name })) => {
            let ledger = Ledger::connect(&cli.database_url, &options).await?;
            ledger.migrate().await?;
            let token = ledger.add_token(tenant, name).await?;
            eprintln!("API token for tenant {tenant:?} (shown once; only its hash is stored):");
            println!("{token}");
            Ok(())
        }
        Some(Command::Bench(BenchCommand::Ledger(args))) => {
            let report = fenceline::bench::ledger(&cli.database_url, &options, args).await?;
            println!("{report}");
            Ok(())
        }
    }
}

async fn serve(cli: &Cli, args: &ServeArgs) -> anyhow::Result<()> {
    let options = config::ledger_options(cli);
    let app = Application::build(&cli.database_url, &options, args.bind, args.max_body_bytes)
        .await
        .context("starting fenceline")?;
    let addr = app.local_addr();
    let backend = app.ledger().backend().as_str();
    tracing::info!(%addr, database = backend, "fenceline is serving");
    println!("Fenceline is running on the {backend} ledger.");
    println!("  Console: http://{addr}/");
    println!("  API:     http://{addr}/api/v1  (OpenAPI: http://{addr}/api/v1/openapi.json)");
    println!("  Create an API token with: fenceline token add <tenant>");
    app.run_until_stopped(shutdown_signal()).await?;
    tracing::info!("fenceline stopped");
    Ok(())
}
