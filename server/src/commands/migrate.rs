//! `fenceline migrate`: apply the migrations and exit.

use anyhow::Context;

use fenceline::ledger::Ledger;
use fenceline::settings::Settings;

pub(super) async fn run(settings: &Settings) -> anyhow::Result<()> {
    let (url, options) = (&settings.ledger.url, &settings.ledger.options);
    let ledger = Ledger::connect(url, options).await?;
    fenceline::startup::migrate(&ledger, settings.environment)
        .await
        .context("migrating the ledger")?;
    let marked = if ledger.marked_production().await? {
        " (marked production: drills refuse it)"
    } else {
        ""
    };
    println!("migrated the {} ledger{marked}", ledger.backend().as_str());
    Ok(())
}
