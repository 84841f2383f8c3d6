//! `/`: jobs by state now, the activity charts of a window, and what retention keeps.

use std::collections::HashMap;

use fenceline_app::console::{Chart, Figure, Overview, Window};

use super::charts;
use crate::job::{EventKind, JobState};
use crate::ledger::LedgerError;
use crate::time::human_duration;

use super::format::ago;
use super::LedgerConsole;

impl LedgerConsole {
    /// What the retention policy keeps, from the latest recorded run (a run is recorded by
    /// whichever process prunes, so this is true across processes).
    pub(super) async fn retention_note(&self) -> Result<String, LedgerError> {
        let Some(run) = self.ledger.last_retention_run().await? else {
            return Ok(
                "Jobs, attempts, results and events are kept indefinitely: retention is \
                       off (FENCELINE_RETENTION_DAYS prunes terminal records after that many \
                       days)."
                    .into(),
            );
        };
        let now = self.ledger.now_us().await?;
        let days = run.keep.as_secs_f64() / 86_400.0;
        let p = &run.pruned;
        Ok(format!(
            "Terminal jobs, with their attempts, results and events, are kept for {days:.0} \
             days, then pruned; live jobs are never pruned. The last retention run, {}, \
             removed {} jobs, {} sent outbox rows, {} queue messages and {} refused-message \
             records.",
            ago(now, run.ran_at),
            p.jobs,
            p.outbox,
            p.queue_messages,
            p.rejected_messages
        ))
    }

    pub(super) async fn build_overview(&self, window: Window) -> Result<Overview, LedgerError> {
        // Exact up to 10,000 per state (fast at any size), like the jobs list.
        let counts: Vec<(JobState, i64)> = self
            .counts_in(self.tenants.as_deref(), 10_000)
            .await?
            .into_iter()
            .map(|(s, n, _)| (s, n))
            .collect();
        let in_flight = counts
            .iter()
            .find(|(s, _)| *s == JobState::Running)
            .map_or(0, |(_, n)| *n);
        let now = self.ledger.now_us().await?;
        let buckets = 24usize;
        let start = now - window.seconds() * 1_000_000;
        let width = window.seconds() * 1_000_000 / buckets as i64;
        let bucket_label = format!("{} each", human_duration(width));
        let kinds = [
            EventKind::JobCreated,
            EventKind::DuplicateSuppressed,
            EventKind::ResultRejected,
            EventKind::VisibilityRenewalFailed,
            EventKind::LeaseRenewalFailed,
            EventKind::DeleteFailed,
        ];
        let activity = self.ledger.activity(&kinds, start, width).await?;
        let redeliveries = self.ledger.redeliveries(start, width).await?;
        let finished = self.ledger.finished_buckets(start, width).await?;
        let series = |of: &[crate::ledger::Bucket<EventKind>], kind: EventKind| -> Vec<i64> {
            let mut v = vec![0; buckets];
            for b in of.iter().filter(|b| b.kind == kind) {
                if let Some(slot) = usize::try_from(b.bucket).ok().and_then(|i| v.get_mut(i)) {
                    *slot += b.count;
                }
            }
            v
        };
        let mut by_outcome: HashMap<&str, Vec<i64>> = HashMap::new();
        for b in &finished {
            let key = match b.kind {
                JobState::Succeeded => "succeeded",
                JobState::Expired => "expired",
                _ => "failed_terminal",
            };
            let series = by_outcome.entry(key).or_insert_with(|| vec![0; buckets]);
            if let Some(slot) = usize::try_from(b.bucket)
                .ok()
                .and_then(|i| series.get_mut(i))
            {
                *slot += b.count;
            }
        }
        let total = |v: &[i64]| v.iter().sum::<i64>();
        let figure = |label: &str, v: &[i64]| Figure {
            label: label.into(),
            value: total(v).to_string(),
        };
        let created = series(&activity, EventKind::JobCreated);
        let outcome = |k: &str| {
            by_outcome
                .get(k)
                .cloned()
                .unwrap_or_else(|| vec![0; buckets])
        };
        let (succeeded, failed, expired) = (
            outcome("succeeded"),
            outcome("failed_terminal"),
            outcome("expired"),
        );
        let redelivered = series(&redeliveries, EventKind::DeliveryReceived);
        let suppressed = series(&activity, EventKind::DuplicateSuppressed);
        let rejected = series(&activity, EventKind::ResultRejected);
        let vis_failed = series(&activity, EventKind::VisibilityRenewalFailed);
        let lease_failed = series(&activity, EventKind::LeaseRenewalFailed);
        let delete_failed = series(&activity, EventKind::DeleteFailed);

        let mut charts = vec![
            Chart {
                title: "Jobs accepted and finished".into(),
                svg: charts::bars(
                    buckets,
                    &bucket_label,
                    &[
                        ("accepted".into(), "c-created".into(), created.clone()),
                        ("succeeded".into(), "c-succeeded".into(), succeeded.clone()),
                        ("failed".into(), "c-failed".into(), failed.clone()),
                        ("expired".into(), "c-expired".into(), expired.clone()),
                    ],
                ),
                figures: vec![
                    figure("accepted", &created),
                    figure("succeeded", &succeeded),
                    figure("failed", &failed),
                    figure("expired", &expired),
                ],
            },
            Chart {
                title: "Redeliveries and duplicate inference suppressed".into(),
                svg: charts::bars(
                    buckets,
                    &bucket_label,
                    &[
                        (
                            "redeliveries".into(),
                            "c-redelivery".into(),
                            redelivered.clone(),
                        ),
                        (
                            "duplicates suppressed".into(),
                            "c-suppressed".into(),
                            suppressed.clone(),
                        ),
                    ],
                ),
                figures: vec![
                    figure("redeliveries", &redelivered),
                    figure("duplicates suppressed", &suppressed),
                ],
            },
            Chart {
                title: "Stale results rejected".into(),
                svg: charts::bars(
                    buckets,
                    &bucket_label,
                    &[("rejected".into(), "c-rejected".into(), rejected.clone())],
                ),
                figures: vec![figure("stale results rejected", &rejected)],
            },
            Chart {
                title: "Renewal failures and failed deletes".into(),
                svg: charts::bars(
                    buckets,
                    &bucket_label,
                    &[
                        (
                            "visibility renewals failed".into(),
                            "c-vis-failed".into(),
                            vis_failed.clone(),
                        ),
                        (
                            "lease renewals failed".into(),
                            "c-lease-failed".into(),
                            lease_failed.clone(),
                        ),
                        (
                            "deletes failed".into(),
                            "c-delete-failed".into(),
                            delete_failed.clone(),
                        ),
                    ],
                ),
                figures: vec![
                    figure("visibility renewals failed", &vis_failed),
                    figure("lease renewals failed", &lease_failed),
                    figure("deletes failed", &delete_failed),
                ],
            },
        ];
        let labels = ["< 1s", "< 10s", "< 1m", "< 10m", "< 1h", "≥ 1h"];
        let (took, tries) = self
            .ledger
            .finished_histograms(
                start,
                &[
                    1_000_000,
                    10_000_000,
                    60_000_000,
                    600_000_000,
                    3_600_000_000,
                ],
            )
            .await?;
        let finished_total: i64 = took.iter().sum();
        let to_terminal: Vec<(String, i64)> = labels
            .iter()
            .zip(&took)
            .map(|(l, n)| ((*l).to_owned(), *n))
            .collect();
        let attempts: Vec<(String, i64)> = ["0", "1", "2", "3", "4", "5+"]
            .iter()
            .zip(&tries)
            .map(|(l, n)| ((*l).to_owned(), *n))
            .collect();
        charts.push(Chart {
            title: "Time to terminal".into(),
            svg: charts::histogram(&to_terminal, "c-succeeded"),
            figures: vec![Figure {
                label: "jobs finished".into(),
                value: finished_total.to_string(),
            }],
        });
        charts.push(Chart {
            title: "Attempts per finished job".into(),
            svg: charts::histogram(&attempts, "c-created"),
            figures: vec![Figure {
                label: "attempts used (5+ counted as 5)".into(),
                value: tries
                    .iter()
                    .enumerate()
                    .map(|(i, n)| i as i64 * n)
                    .sum::<i64>()
                    .to_string(),
            }],
        });
        Ok(Overview {
            window,
            counts: counts
                .into_iter()
                .map(|(s, n)| (s.as_str().to_owned(), n))
                .collect(),
            in_flight,
            // The charts count every tenant's events: not for an operator limited to some.
            charts: if self.tenants.is_some() {
                Vec::new()
            } else {
                charts
            },
            retention: self.retention_note().await?,
            queue: self.queue.description.clone(),
        })
    }
}
