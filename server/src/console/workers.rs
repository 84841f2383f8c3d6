//! `/workers`: the worker processes that reported lately and the running jobs each owns now.

use fenceline_app::console::{ProviderLimitRow, WorkerRow, WorkerStatus, WorkersPage};

use crate::ledger::{LedgerError, WorkerSeen};
use crate::time::human_duration;
use crate::worker::presence::{listed_since, quiet_since, INTERVAL, LISTED_FOR};

use super::format::ago;
use super::LedgerConsole;

/// What a worker's latest report says of it at `now`: the one rule of `/workers` and of the
/// overview's line about workers.
pub(super) fn status(worker: &WorkerSeen, now: i64) -> WorkerStatus {
    match &worker.reported {
        None => WorkerStatus::Unreported,
        Some(r) if r.stopped_at.is_some() => WorkerStatus::Stopped,
        Some(r) if r.seen_at < quiet_since(now) => WorkerStatus::Silent,
        Some(_) => WorkerStatus::Alive,
    }
}

/// How long a worker stays listed after its last report, as the pages say it: "24 hours".
pub(super) fn listed_for() -> String {
    format!("{} hours", LISTED_FOR.as_secs() / 3600)
}

impl LedgerConsole {
    pub(super) async fn build_workers(&self) -> Result<WorkersPage, LedgerError> {
        let now = self.ledger.now_us().await?;
        let seen = self
            .ledger
            .workers_seen(listed_since(now), now, self.tenants.as_deref())
            .await?;
        let mut rows: Vec<WorkerRow> = seen
            .into_iter()
            .map(|w| {
                let status = status(&w, now);
                let lease = w.lease_until.map(|until| {
                    if until > now {
                        format!("ends in {}", human_duration(until - now))
                    } else {
                        format!("lapsed {}", ago(now, until))
                    }
                });
                WorkerRow {
                    worker_id: w.worker_id,
                    status,
                    last_report: w.reported.as_ref().map(|r| ago(now, r.seen_at)),
                    started: w.reported.as_ref().map(|r| self.at(r.started_at)),
                    queue: w.reported.as_ref().map(|r| r.queue.clone()),
                    provider: w.reported.as_ref().map(|r| r.provider.clone()),
                    max_in_flight: w.reported.as_ref().map(|r| r.max_in_flight),
                    // Below its width only while it runs and a provider holds it there.
                    capacity: w
                        .reported
                        .as_ref()
                        .filter(|_| status == WorkerStatus::Alive)
                        .and_then(|r| r.capacity),
                    held: w.held,
                    lapsed: w.lapsed,
                    lease,
                }
            })
            .collect();
        // What needs a look first: silent workers (their jobs wait for the reaper), then the
        // living, then the rest; by id within each.
        let rank = |s: WorkerStatus| match s {
            WorkerStatus::Silent => 0,
            WorkerStatus::Alive => 1,
            WorkerStatus::Unreported => 2,
            WorkerStatus::Stopped => 3,
        };
        rows.sort_by(|a, b| {
            rank(a.status)
                .cmp(&rank(b.status))
                .then_with(|| a.worker_id.cmp(&b.worker_id))
        });
        let providers = self
            .ledger
            .provider_limits()
            .await?
            .into_iter()
            .map(|l| ProviderLimitRow {
                provider: l.provider,
                model: l.model,
                limited_until: l.limited_until.map(|u| self.at(u)),
                limit: l.limit_name,
                concurrency: l.concurrency,
                rate: l.rate_per_s.map(|r| format!("{r:.1}/s")),
                recent_refusals: l.recent_refusals,
                refusals: l.refusals,
                limited_for: human_duration(l.limited_us),
                updated: format!("{} by {}", ago(now, l.updated_at), l.updated_by),
            })
            .collect();
        Ok(WorkersPage {
            providers,
            rows,
            listed_for: listed_for(),
            report_every: format!("{} s", INTERVAL.as_secs()),
        })
    }
}
