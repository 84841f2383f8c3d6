//! `fenceline bulk`: actions by filter from a terminal, as a named operator.

use anyhow::Context;

use fenceline::bulk::BulkKind;
use fenceline::console::{LedgerConsole, QueueInfo};
use fenceline::settings::{BulkCommand, BulkPreviewArgs, Settings};

/// Jobs printed.
const SHOWN: u32 = 20;

pub(super) async fn run(settings: &Settings, command: &BulkCommand) -> anyhow::Result<()> {
    let ledger = &super::open_ledger(settings).await?;
    match command {
        BulkCommand::Preview(args) => preview(ledger, settings, args).await,
        BulkCommand::Confirm {
            bulk_id,
            reason,
            operator,
        } => {
            let actor = super::acting_operator(ledger, operator).await?;
            let reason = fenceline_app::action::Reason::parse(reason)
                .map_err(|no| anyhow::anyhow!("a bulk action needs {no}"))?;
            anyhow::ensure!(
                ledger
                    .confirm_bulk(*bulk_id, &actor.to_string(), reason.as_str())
                    .await?,
                "bulk action {bulk_id} is not a preview of {operator}'s made within 15 minutes \
                 (confirmed already, or lapsed): nothing changed"
            );
            println!(
                "bulk action {bulk_id} confirmed: `fenceline serve` acts on its jobs in the \
                 background; follow it with `fenceline bulk show {bulk_id}`"
            );
            Ok(())
        }
        BulkCommand::Show { bulk_id } => show(ledger, *bulk_id).await,
    }
}

async fn preview(
    ledger: &fenceline::ledger::Ledger,
    settings: &Settings,
    args: &BulkPreviewArgs,
) -> anyhow::Result<()> {
    super::acting_operator(ledger, &args.operator).await?;
    let operator = ledger
        .operator(&args.operator)
        .await?
        .context("no such operator")?;
    let kind: BulkKind = args.action.parse().map_err(anyhow::Error::msg)?;
    let query = fenceline_app::console::JobsQuery {
        state: args.state.clone(),
        tenant: args.tenant.clone(),
        key_prefix: args.key_prefix.clone(),
        created_after: args.created_after.clone(),
        created_before: args.created_before.clone(),
        worker: args.worker.clone(),
        error_code: args.error_code.clone(),
        with_drills: args.with_drills,
        ..Default::default()
    };
    let filter_text = fenceline::console::filter_text(&query);
    let filter = LedgerConsole::new(ledger.clone(), QueueInfo::default())
        .for_tenants(operator.tenants.clone())
        .bulk_filter(&query)
        .await?
        .map_err(|bad| {
            anyhow::anyhow!("--{} must be {}", bad.name.replace('_', "-"), bad.expected)
        })?;
    let bulk_id = fenceline::bulk::preview(
        ledger,
        &operator,
        kind,
        &filter,
        &filter_text,
        settings.http.bulk_cap,
    )
    .await?;
    show(ledger, bulk_id).await?;
    println!(
        "nothing changed; confirm within 15 minutes with: fenceline bulk confirm {bulk_id} \
         --operator {} --reason \"…\"",
        operator.name
    );
    Ok(())
}

async fn show(ledger: &fenceline::ledger::Ledger, bulk_id: i64) -> anyhow::Result<()> {
    let bulk = ledger
        .bulk_action(bulk_id)
        .await?
        .with_context(|| format!("no bulk action {bulk_id}"))?;
    println!(
        "bulk action {bulk_id}: {} on {} jobs matching {} ({}); {} applied, {} moved on (left \
         alone), {} refused",
        bulk.action,
        bulk.total,
        if bulk.filter.is_empty() {
            "every job"
        } else {
            &bulk.filter
        },
        bulk.status,
        bulk.applied,
        bulk.moved_on,
        bulk.refused
    );
    for job in ledger.bulk_jobs(bulk_id, None, SHOWN).await? {
        println!(
            "  {} {} at epoch {}: {}",
            job.job_id,
            job.state,
            job.epoch,
            job.outcome.as_deref().unwrap_or("—")
        );
    }
    if bulk.total > i64::from(SHOWN) {
        println!("  … and {} more", bulk.total - i64::from(SHOWN));
    }
    Ok(())
}
