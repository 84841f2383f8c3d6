//! `fenceline soak check`: the invariants, checked over every job of the ledger; and `fenceline
//! soak responses-server`: the stand-in for background responses the soak's workers call.

use std::time::Duration;

use fenceline::ledger::Ledger;
use fenceline::provider::stand_in::{self, StandInConfig};
use fenceline::settings::{ResponsesServerArgs, Settings, SoakCheckArgs};

pub(super) async fn check(settings: &Settings, args: &SoakCheckArgs) -> anyhow::Result<()> {
    let ledger = Ledger::connect(&settings.ledger.url, &settings.ledger.options).await?;
    let provider = &settings.provider;
    let pricing = (&provider.prices, provider.default_model());
    let verdict = fenceline::soak::check(
        &ledger,
        args.tenant.as_deref(),
        args.expect,
        pricing,
        args.max_unknown,
    )
    .await?;
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

pub(super) async fn responses_server(args: &ResponsesServerArgs) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(args.bind).await?;
    eprintln!(
        "background responses stand-in on http://{}/v1",
        listener.local_addr()?
    );
    let config = StandInConfig {
        latency: Duration::from_millis(args.latency_ms),
        lose_rate: args.lose_rate,
        lose_create_rate: args.lose_create_rate.unwrap_or(args.lose_rate),
    };
    stand_in::serve(listener, config).await?;
    Ok(())
}
