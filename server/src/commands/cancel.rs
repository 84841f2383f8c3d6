//! `fenceline cancel`: a started job fails for good at a new epoch, as a named operator.

use anyhow::Context;

use fenceline::settings::Settings;

pub(super) async fn run(
    settings: &Settings,
    job_id: &str,
    epoch: i64,
    reason: &str,
    operator: &str,
) -> anyhow::Result<()> {
    let ledger = super::open_ledger(settings).await?;
    let actor = super::acting_operator(&ledger, operator).await?;
    let job = ledger
        .job(job_id)
        .await?
        .with_context(|| format!("no job {job_id}"))?;
    ledger
        .cancel(job_id, epoch, job.state, &actor, reason)
        .await
        .map_err(super::refused_plainly)?;
    println!("cancelled {job_id}: failed_terminal at epoch {}", epoch + 1);
    Ok(())
}
