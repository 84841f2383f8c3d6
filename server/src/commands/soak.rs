//! `fenceline soak check`: the invariants, checked over every job of the ledger.

use fenceline::ledger::Ledger;
use fenceline::settings::{Settings, SoakCheckArgs};

pub(super) async fn check(settings: &Settings, args: &SoakCheckArgs) -> anyhow::Result<()> {
    let ledger = Ledger::connect(&settings.ledger.url, &settings.ledger.options).await?;
    let verdict = fenceline::soak::check(&ledger, args.tenant.as_deref(), args.expect).await?;
    ledger.close().await;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&verdict)?);
    } else {
        print!("{}", verdict.render());
    }
    if !verdict.holds() {
        std::process::exit(1);
    }
    Ok(())
}
