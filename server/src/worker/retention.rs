//! The retention task: prunes terminal records older than the configured keep period, once at
//! start and then every `interval`, recording each run (see [`crate::ledger::Ledger::prune`]).
//! Safe in several processes: deleting what is already gone deletes nothing.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::ledger::Ledger;

pub async fn run(ledger: Ledger, keep: Duration, interval: Duration, shutdown: CancellationToken) {
    loop {
        match ledger.prune(keep).await {
            Ok(pruned) if pruned.jobs > 0 => {
                tracing::info!(
                    jobs = pruned.jobs,
                    outbox = pruned.outbox,
                    queue_messages = pruned.queue_messages,
                    rejected_messages = pruned.rejected_messages,
                    "retention pruned old records"
                )
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "retention run failed"),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(interval) => {}
        }
    }
}
