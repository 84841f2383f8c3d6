//! `fenceline rerun`: a finished job runs again as a new, linked job.

use fenceline::settings::Settings;

pub(super) async fn run(
    settings: &Settings,
    job_id: &str,
    reason: &str,
    operator: &str,
    seen_events: Option<i64>,
) -> anyhow::Result<()> {
    let ledger = super::open_ledger(settings).await?;
    let actor = super::acting_operator(&ledger, operator).await?;
    let created = ledger
        .run_again(job_id, seen_events, &actor, reason)
        .await
        .map_err(super::refused_plainly)?;
    match created {
        fenceline::ledger::Created::New(new) => {
            println!("{job_id} runs again as {}", new.job_id)
        }
        fenceline::ledger::Created::Existing(new) => println!(
            "{job_id} was already run again from that view, as {}; nothing new was made",
            new.job_id
        ),
    }
    Ok(())
}
