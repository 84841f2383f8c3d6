//! The `fenceline` subcommands, one file each. [`run`] hands the command line to its file;
//! every command that works on the ledger opens it one way, [`open_ledger`] (connected and
//! migrated), except `serve`, `worker` and `migrate`, which migrate as a deployment does
//! (marking a production database), and `soak check`, which only reads.

mod bench;
mod bulk;
mod cancel;
mod decide;
mod dlq;
mod doctor;
mod drill;
mod migrate;
mod operator;
mod queue;
mod rerun;
mod serve;
mod soak;
mod submit;
mod token;
mod worker;

use anyhow::Context;

use fenceline::ledger::{Ledger, LedgerOptions};
use fenceline::settings::{Command, DrillCommand, Settings, SoakCommand};

/// Runs `command` with `settings`.
pub(crate) async fn run(settings: &Settings, command: &Command) -> anyhow::Result<()> {
    match command {
        Command::Serve(_) => serve::run(settings).await,
        Command::Worker(_) => worker::run(settings).await,
        Command::Migrate => migrate::run(settings).await,
        Command::Doctor(_) => doctor::run(settings).await,
        Command::Token(command) => token::run(settings, command).await,
        Command::Operator(command) => operator::run(settings, command).await,
        Command::Queue(command) => queue::run(command).await,
        Command::Submit(args) => submit::run(args).await,
        Command::Decide(args) => decide::run(settings, args).await,
        Command::Bulk(command) => bulk::run(settings, command).await,
        Command::Cancel {
            job_id,
            epoch,
            reason,
            operator,
        } => cancel::run(settings, job_id, *epoch, reason, operator).await,
        Command::Rerun {
            job_id,
            reason,
            operator,
            seen_events,
        } => rerun::run(settings, job_id, reason, operator, *seen_events).await,
        Command::DlqReplay { max, operator, .. } => dlq::replay(settings, *max, operator).await,
        Command::Bench(command) => bench::run(settings, command).await,
        Command::Drill(DrillCommand::List) => drill::list(),
        Command::Drill(DrillCommand::Run(args)) => drill::run(settings, args).await,
        Command::Soak(SoakCommand::Check(args)) => soak::check(settings, args).await,
        Command::Soak(SoakCommand::ResponsesServer(args)) => soak::responses_server(args).await,
    }
}

/// The ledger the settings name, connected and migrated.
async fn open_ledger(settings: &Settings) -> anyhow::Result<Ledger> {
    open_ledger_with(settings, &settings.ledger.options).await
}

/// The same, with other connection options.
async fn open_ledger_with(settings: &Settings, options: &LedgerOptions) -> anyhow::Result<Ledger> {
    let ledger = Ledger::connect(&settings.ledger.url, options).await?;
    ledger.migrate().await?;
    Ok(ledger)
}

/// The operator a CLI action is taken as: one that exists, is enabled and may act.
async fn acting_operator(ledger: &Ledger, name: &str) -> anyhow::Result<fenceline::job::Actor> {
    let operator = ledger
        .operator(name)
        .await?
        .filter(|o| !o.is_disabled())
        .with_context(|| format!("no enabled operator named {name}"))?;
    anyhow::ensure!(
        operator.role.allows(fenceline::operators::Role::Operator),
        "{name} is a {}: only operators and admins act on jobs",
        operator.role
    );
    Ok(fenceline::job::Actor::Operator(operator.name))
}

/// A refused transition said as the console says it.
fn refused_plainly(error: fenceline::ledger::LedgerError) -> anyhow::Error {
    match error {
        fenceline::ledger::LedgerError::Refused { refusal, .. } => anyhow::anyhow!(
            "refused, nothing changed: {refusal} (the job changed since you looked, or the \
             decision does not apply)"
        ),
        other => other.into(),
    }
}
