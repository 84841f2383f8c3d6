//! The process's reports to the ledger: a sign of life every [`INTERVAL`] while its worker
//! runs, and a last one once it has stopped cleanly (see [`crate::ledger::WorkerReport`]). A
//! failed report is logged and retried at the next tick; it never stops the worker, and nothing
//! that keeps jobs safe depends on it.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::ledger::{Ledger, WorkerReport};

/// How often a running worker reports.
pub const INTERVAL: Duration = Duration::from_secs(5);

fn capacity(report: &WorkerReport, limits: &crate::provider::limits::Limits) -> i64 {
    let soon = std::time::Instant::now() + CHANGED_AFTER;
    i64::try_from(limits.capacity_at(soon))
        .unwrap_or(i64::MAX)
        .min(report.max_in_flight)
}

/// How long a running worker may go without a report before it counts as silent: three
/// intervals, so that one slow write does not raise the alarm.
pub const SILENT_AFTER: Duration = Duration::from_secs(3 * INTERVAL.as_secs());

/// The database-clock instant (µs) before which a running worker's latest report makes it
/// silent, judged at `now`: the one rule of `/workers` and of the `fenceline_workers` gauge.
pub fn quiet_since(now: i64) -> i64 {
    now - SILENT_AFTER.as_micros() as i64
}

/// The earliest latest report (µs) of a worker still listed, judged at `now`.
pub fn listed_since(now: i64) -> i64 {
    now - LISTED_FOR.as_micros() as i64
}

/// How long a worker is still listed (`/workers`) and counted (`/metrics`) after its latest
/// report.
pub const LISTED_FOR: Duration = Duration::from_secs(24 * 3600);

/// How often a changed capacity is reported, at most: the dispatcher keeps the queue within
/// twice the fleet's capacity, so a worker a provider slows down says so soon.
const CHANGED_AFTER: Duration = Duration::from_secs(1);

/// Reports `report` now and every [`INTERVAL`] until `stop`, with the capacity `limits` allow
/// (reported within a second when it changes), then records the stop. Run it in the stage
/// after the worker's, so that a worker still draining its calls reports as alive.
pub async fn run(
    ledger: Ledger,
    mut report: WorkerReport,
    limits: crate::provider::limits::Limits,
    stop: CancellationToken,
) {
    loop {
        report.capacity = capacity(&report, &limits);
        if let Err(error) = ledger.report_worker(&report).await {
            tracing::warn!(%error, "could not report this worker to the ledger");
        }
        let next = tokio::time::Instant::now() + INTERVAL;
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep_until(next) => break,
                _ = tokio::time::sleep(CHANGED_AFTER) => {
                    if capacity(&report, &limits) != report.capacity {
                        break;
                    }
                }
            }
        }
        if stop.is_cancelled() {
            break;
        }
    }
    if let Err(error) = ledger.worker_stopped(&report.worker_id).await {
        tracing::warn!(%error, "could not record this worker's stop in the ledger");
    }
}
