//! `/`: jobs by state now, the activity charts of a window, and what retention keeps.

use fenceline_app::console::{
    Chart, Figure, Overview, TenantFlowRow, Waiting, Window, WorkerPresence, WorkerStatus,
};

use super::{charts, plot};
use crate::job::{EventKind, JobState};
use crate::ledger::{Drills, LedgerError, WindowSpend, FINISHED, REDELIVERED};
use crate::provider::prices::Usd;
use crate::worker::presence::{listed_since, quiet_since};

use super::format::ago;
use super::LedgerConsole;

/// What a window's answers cost, in a sentence.
fn spend_line(window: Window, s: &WindowSpend) -> String {
    let mut line = format!(
        "Answers in the last {} cost {} ({} {}, drills left out)",
        window.as_str(),
        Usd(s.spent),
        s.answers,
        if s.answers == 1 { "answer" } else { "answers" }
    );
    if s.duplicate_answers > 0 {
        line.push_str(&format!(
            "; {} of it on {} {} not accepted (duplicate spend)",
            Usd(s.duplicate),
            s.duplicate_answers,
            if s.duplicate_answers == 1 {
                "answer"
            } else {
                "answers"
            }
        ));
    }
    line.push('.');
    line
}

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
            .counts_in(self.tenants.as_deref(), 10_000, Drills::Apart)
            .await?
            .into_iter()
            .map(|(s, n, _)| (s, n))
            .collect();
        let in_flight = counts
            .iter()
            .find(|(s, _)| *s == JobState::Running)
            .map_or(0, |(_, n)| *n);
        let now = self.ledger.now_us().await?;
        let grid = plot::Buckets::of(window, now, self.zone);
        let (buckets, start, width) = (grid.count, grid.start, grid.width);
        let activity = self.ledger.activity(start, width, buckets).await?;
        let series = |kind: EventKind| activity.of(kind.as_str(), buckets);
        let outcome =
            |state: JobState| activity.of(&format!("{FINISHED}{}", state.as_str()), buckets);
        let chart = |title: &str, lines: Vec<plot::Series>| Chart {
            title: title.into(),
            svg: plot::time_series(&grid, &lines, plot::WIDE),
            narrow: plot::time_series(&grid, &lines, plot::NARROW),
            figures: lines
                .iter()
                .enumerate()
                .map(|(i, s)| Figure {
                    label: s.label.clone(),
                    value: s.counts.iter().sum::<i64>().to_string(),
                    class: Some(plot::series_class(s, i, lines.len())),
                })
                .collect(),
        };
        let mut charts = vec![
            chart(
                "Jobs accepted and finished",
                vec![
                    plot::Series::new("accepted", "c-created", series(EventKind::JobCreated)),
                    plot::Series::new("succeeded", "c-succeeded", outcome(JobState::Succeeded)),
                    plot::Series::new("failed", "c-failed", outcome(JobState::FailedTerminal)),
                    plot::Series::new("expired", "c-expired", outcome(JobState::Expired)),
                ],
            ),
            chart(
                "Redeliveries and duplicate inference suppressed",
                vec![
                    plot::Series::new(
                        "redeliveries",
                        "c-redelivery",
                        activity.of(REDELIVERED, buckets),
                    ),
                    plot::Series::new(
                        "duplicates suppressed",
                        "c-suppressed",
                        series(EventKind::DuplicateSuppressed),
                    ),
                ],
            ),
            chart(
                "Stale results rejected",
                vec![plot::Series::new(
                    "stale results rejected",
                    "c-rejected",
                    series(EventKind::ResultRejected),
                )],
            ),
            chart(
                "Throttled calls: refused by a provider or held for its limit",
                vec![plot::Series::new(
                    "throttled (never ran, no budget spent)",
                    "c-throttled",
                    series(EventKind::Throttled),
                )],
            ),
            chart(
                "Renewal failures and failed deletes",
                vec![
                    plot::Series::new(
                        "visibility renewals failed",
                        "c-vis-failed",
                        series(EventKind::VisibilityRenewalFailed),
                    ),
                    plot::Series::new(
                        "lease renewals failed",
                        "c-lease-failed",
                        series(EventKind::LeaseRenewalFailed),
                    ),
                    plot::Series::new(
                        "deletes failed",
                        "c-delete-failed",
                        series(EventKind::DeleteFailed),
                    ),
                ],
            ),
        ];
        let spend = self.ledger.spend_buckets(start, width, buckets).await?;
        let micro = |of: fn(&WindowSpend) -> i64| spend.iter().map(|b| of(b) / 1_000).collect();
        charts.push(chart(
            "Model spend, in millionths of a dollar (µ$)",
            vec![
                plot::Series::new("spend", "c-created", micro(|b| b.spent)),
                plot::Series::new(
                    "duplicate spend (answers not accepted)",
                    "c-rejected",
                    micro(|b| b.duplicate),
                ),
            ],
        ));
        let window_spend = spend
            .iter()
            .fold(WindowSpend::default(), |sum, b| WindowSpend {
                answers: sum.answers + b.answers,
                spent: sum.spent.saturating_add(b.spent),
                duplicate_answers: sum.duplicate_answers + b.duplicate_answers,
                duplicate: sum.duplicate.saturating_add(b.duplicate),
            });
        // The ledger's time-to-terminal bins (see `ledger::rollup`).
        let labels = ["< 1s", "< 10s", "< 1m", "< 10m", "< 1h", "≥ 1h"];
        let (took, tries) = (activity.took.clone(), activity.tries.clone());
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
            svg: charts::histogram(&to_terminal, "c-succeeded", plot::WIDE),
            narrow: charts::histogram(&to_terminal, "c-succeeded", plot::NARROW),
            figures: vec![Figure {
                label: "jobs finished".into(),
                value: finished_total.to_string(),
                class: None,
            }],
        });
        charts.push(Chart {
            title: "Attempts per finished job".into(),
            svg: charts::histogram(&attempts, "c-created", plot::WIDE),
            narrow: charts::histogram(&attempts, "c-created", plot::NARROW),
            figures: vec![Figure {
                label: "attempts used (5+ counted as 5)".into(),
                value: tries
                    .iter()
                    .enumerate()
                    .map(|(i, n)| i as i64 * n)
                    .sum::<i64>()
                    .to_string(),
                class: None,
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
            // Only an operator who may see the drill tenant's jobs hears of them.
            drill_jobs: if self.tenants.is_some() {
                0
            } else {
                self.ledger.drill_job_count().await?
            },
            workers: self.worker_presence(now).await?,
            oldest_ready: self.oldest_ready().await?,
            tenants: self.tenant_flow().await?,
            spend: self
                .tenants
                .is_none()
                .then(|| spend_line(window, &window_spend)),
        })
    }

    /// Per tenant of the operator's, what waits for its turn and what runs, with its share.
    pub(super) async fn tenant_flow(&self) -> Result<Vec<TenantFlowRow>, LedgerError> {
        let (flows, shares) = tokio::join!(
            self.ledger.tenant_flow(self.tenants.as_deref()),
            self.ledger.tenant_shares()
        );
        let shares = shares?;
        Ok(flows?
            .into_iter()
            .map(|f| {
                let share = shares.iter().find(|s| s.tenant == f.tenant);
                TenantFlowRow {
                    weight: share.map_or(1, |s| s.weight),
                    cap: share.and_then(|s| s.max_in_flight),
                    tenant: f.tenant,
                    waiting: f.waiting,
                    due: f.due,
                    running: f.running,
                }
            })
            .collect())
    }

    /// The oldest ready job of the operator's tenants, outside drills.
    async fn oldest_ready(&self) -> Result<Option<Waiting>, LedgerError> {
        let oldest = match self.tenants.as_deref() {
            None => self.ledger.oldest_ready(None).await?,
            Some(tenants) => {
                let mut oldest: Option<(String, i64)> = None;
                for tenant in tenants {
                    if let Some(found) = self.ledger.oldest_ready(Some(tenant)).await? {
                        if oldest.as_ref().is_none_or(|o| found.0 < o.0) {
                            oldest = Some(found);
                        }
                    }
                }
                oldest
            }
        };
        Ok(oldest.map(|(job_id, waited)| Waiting {
            job_id,
            waited: crate::time::human_duration(waited.max(0)),
        }))
    }

    /// The workers by their latest reports and, when some are silent, the running jobs they
    /// own: those are found only then, since counting owners walks every running job.
    async fn worker_presence(&self, now: i64) -> Result<WorkerPresence, LedgerError> {
        let (alive, silent, stopped) = self
            .ledger
            .worker_statuses(listed_since(now), quiet_since(now))
            .await?;
        let mut presence = WorkerPresence {
            alive,
            silent,
            stopped,
            listed_for: super::workers::listed_for(),
            ..WorkerPresence::default()
        };
        if silent > 0 {
            for worker in self
                .ledger
                .workers_seen(listed_since(now), now, self.tenants.as_deref())
                .await?
            {
                if super::workers::status(&worker, now) == WorkerStatus::Silent {
                    presence.silent_jobs += worker.held;
                    presence.silent_lapsed += worker.lapsed;
                }
            }
        }
        Ok(presence)
    }
}
