//! The fleet's shared word on provider limits: each worker process tells the ledger what its
//! calls learned (refusals, the pause they asked for, the concurrency it runs at) and takes
//! what the others learned, so a fleet slows down together instead of each process finding
//! the limit on its own. Nothing that keeps jobs safe depends on it: a process that cannot
//! reach the ledger still paces its own calls by what it sees.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::ledger::{Ledger, LimitReport};
use crate::provider::limits::{Key, LimitView, Limits};

/// How often a process exchanges with the fleet.
pub const SYNC_EVERY: Duration = Duration::from_millis(500);
/// How often it reports its limits' concurrency and rate with nothing new to say.
const REPORT_EVERY: Duration = Duration::from_secs(5);

fn report(view: &LimitView, refusals: u64, limited: Duration) -> LimitReport {
    LimitReport {
        provider: view.key.provider.clone(),
        model: view.key.model.clone(),
        refusals,
        paused_for_us: view
            .paused_for
            .map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX)),
        limit_name: view.pause_limit.clone(),
        limited_us: i64::try_from(limited.as_micros()).unwrap_or(i64::MAX),
        concurrency: i64::try_from(view.concurrency).unwrap_or(i64::MAX),
        rate_per_s: view.rate_per_s,
    }
}

/// One exchange: what `limits` learned since the last goes to the ledger (every limit's state
/// when `everything`), and the fleet's pauses still running come back into `limits`.
pub async fn exchange(
    ledger: &Ledger,
    limits: &Limits,
    worker_id: &str,
    providers: &[&str],
    everything: bool,
) -> Result<(), crate::ledger::LedgerError> {
    let fresh = limits.take_fresh();
    let mut reports: Vec<LimitReport> = fresh
        .iter()
        .map(|f| report(&f.view, f.refusals, f.limited))
        .collect();
    if everything {
        for view in limits.views() {
            if !reports
                .iter()
                .any(|r| r.provider == view.key.provider && r.model == view.key.model)
            {
                let mut quiet = report(&view, 0, Duration::ZERO);
                // Only a fresh refusal sets the fleet's pause.
                quiet.paused_for_us = None;
                reports.push(quiet);
            }
        }
    }
    ledger.report_limits(worker_id, &reports).await?;
    for &provider in providers {
        for (model, left_us, limit) in ledger.fleet_pauses(provider).await? {
            let left = Duration::from_micros(u64::try_from(left_us).unwrap_or(0));
            limits.pause_from_fleet(&Key::new(provider, &model), left, &limit);
        }
    }
    Ok(())
}

/// Exchanges with the fleet every [`SYNC_EVERY`] until `stop`.
pub async fn run(
    ledger: Ledger,
    limits: Limits,
    worker_id: String,
    providers: Vec<String>,
    stop: CancellationToken,
) {
    let providers: Vec<&str> = providers.iter().map(String::as_str).collect();
    let mut last_full = tokio::time::Instant::now();
    loop {
        let everything = last_full.elapsed() >= REPORT_EVERY;
        if everything {
            last_full = tokio::time::Instant::now();
        }
        if let Err(error) = exchange(&ledger, &limits, &worker_id, &providers, everything).await {
            tracing::warn!(%error, "could not exchange provider limits with the fleet");
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(SYNC_EVERY) => {}
        }
    }
}
