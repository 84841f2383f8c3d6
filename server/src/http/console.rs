//! The console port implemented over the ledger: view models for the pages, formatted for
//! operators (UTC times, durations, short fingerprints), never carrying inputs, answers or
//! receipt handles.

use std::collections::HashMap;

use fenceline_app::console::{
    AttemptRow, Chart, Console, DeadLetterRow, DeadLetters, DecisionRow, EventRow, Figure,
    JobDetail, JobRow, JobsPage, JobsQuery, Overview, Pending, Timeline, TimelineQuery,
    TimelineRow, UnknownPage, UnknownRow, Window,
};

use super::charts::{self, human_duration, Mark};
use super::time::rfc3339_us;
use crate::job::{JobId, JobState};
use crate::ledger::{
    detail_text, Event, Job, JobFilter, Ledger, LedgerError, RENEWAL_KINDS, TRANSPORT_KINDS,
};
use crate::worker::message;

/// Runs of at least this many same-kind events fold into one row.
const FOLD_MIN: i64 = 4;
/// Rows (events or folded runs) per timeline page.
const PAGE_RUNS: u32 = 200;
/// Jobs per list page.
const PAGE_JOBS: u32 = 50;

/// Where the console finds dead letters.
#[derive(Debug, Clone)]
pub struct QueueInfo {
    /// As shown to operators, e.g. `embedded:jobs`.
    pub description: String,
    /// The embedded dead-letter queue's name, when the queue is embedded.
    pub embedded_dead_letters: Option<String>,
}

impl Default for QueueInfo {
    fn default() -> Self {
        QueueInfo {
            description: "embedded:jobs".into(),
            embedded_dead_letters: Some("jobs-dlq".into()),
        }
    }
}

pub struct LedgerConsole {
    ledger: Ledger,
    queue: QueueInfo,
}

impl LedgerConsole {
    pub fn new(ledger: Ledger, queue: QueueInfo) -> Self {
        LedgerConsole { ledger, queue }
    }
}

fn shown(e: LedgerError) -> String {
    if e.is_unavailable() {
        "the ledger database is unavailable; this page will work again once it answers".into()
    } else {
        tracing::error!(error = %e, "console query failed");
        "an internal error occurred (logged on the server)".into()
    }
}

/// `2026-11-30 09:15:02` (UTC, seconds).
pub(crate) fn short_time(us: i64) -> String {
    let full = rfc3339_us(us);
    format!("{} {}", &full[..10], &full[11..19])
}

/// `09:15:02.123`.
fn clock(us: i64) -> String {
    rfc3339_us(us)[11..23].to_owned()
}

fn ago(now: i64, us: i64) -> String {
    let d = now - us;
    if d < 0 {
        format!("in {}", human_duration(-d))
    } else {
        format!("{} ago", human_duration(d))
    }
}

fn left(now: i64, deadline: i64) -> String {
    if deadline <= now {
        format!("passed {} ago", human_duration(now - deadline))
    } else {
        format!("{} left", human_duration(deadline - now))
    }
}

fn job_row(now: i64, j: &Job) -> JobRow {
    JobRow {
        job_id: j.job_id.clone(),
        tenant: j.tenant.clone(),
        state: j.state.as_str().into(),
        epoch: j.owner_epoch,
        attempts: format!("{}/{}", j.attempt_count, j.max_attempts),
        created: short_time(j.created_at),
        updated: ago(now, j.updated_at),
        deadline: if j.state.is_terminal() {
            "—".into()
        } else {
            left(now, j.deadline_at)
        },
        error_code: j.error_code.clone(),
    }
}

/// Parses `2026-11-30T09:15`, `2026-11-30T09:15:30` or `2026-11-30` as UTC milliseconds.
fn parse_utc_ms(s: &str) -> Option<i64> {
    let s = s.trim().trim_end_matches('Z');
    let (date, time) = s.split_once(['T', ' ']).unwrap_or((s, "00:00"));
    let mut d = date.split('-').map(|p| p.parse::<i64>());
    let (y, m, day) = (d.next()?.ok()?, d.next()?.ok()?, d.next()?.ok()?);
    let mut t = time.split(':').map(|p| p.parse::<f64>());
    let (hh, mm) = (t.next()?.ok()?, t.next().unwrap_or(Ok(0.0)).ok()?);
    let ss = t.next().unwrap_or(Ok(0.0)).ok()?;
    if !(1..=12).contains(&m) || !(1..=31).contains(&day) {
        return None;
    }
    // Days from civil (H. Hinnant).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400_000 + ((hh * 3600.0 + mm * 60.0 + ss) * 1000.0) as i64)
}

fn event_row(created_at: i64, e: &Event) -> EventRow {
    EventRow {
        seq: e.seq,
        at: clock(e.at),
        offset: format!("+{}", human_duration(e.at - created_at)),
        kind: e.kind.clone(),
        epoch: e.epoch,
        actor: e.actor.clone(),
        delivery: e.delivery.as_ref().map(|d| {
            format!(
                "{} r{} #{}",
                d.message_id.chars().take(8).collect::<String>(),
                d.receive_count,
                d.handle_hash
            )
        }),
        attempt_no: e.attempt_no,
        deadline_left: e.deadline_left_ms.map(|ms| {
            if ms <= 0 {
                "passed".into()
            } else {
                human_duration(ms * 1000)
            }
        }),
        detail: detail_text(&e.detail),
    }
}

impl LedgerConsole {
    /// What the retention policy keeps, from the latest recorded run (a run is recorded by
    /// whichever process prunes, so this is true across processes).
    async fn retention_note(&self) -> Result<String, LedgerError> {
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

    async fn build_overview(&self, window: Window) -> Result<Overview, LedgerError> {
        // Exact up to 10,000 per state (fast at any size), like the jobs list.
        let counts: Vec<(JobState, i64)> = self
            .ledger
            .count_by_state_capped(None, 10_000)
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
            "job_created",
            "duplicate_suppressed",
            "result_rejected",
            "visibility_renewal_failed",
            "lease_renewal_failed",
            "delete_failed",
        ];
        let activity = self.ledger.activity(&kinds, start, width).await?;
        let redeliveries = self.ledger.redeliveries(start, width).await?;
        let finished = self.ledger.finished_buckets(start, width).await?;
        let series_of = |kind: &str| -> Vec<i64> {
            let mut v = vec![0; buckets];
            for b in activity
                .iter()
                .chain(redeliveries.iter())
                .filter(|b| b.kind == kind)
            {
                if let Some(slot) = usize::try_from(b.bucket).ok().and_then(|i| v.get_mut(i)) {
                    *slot += b.count;
                }
            }
            v
        };
        let mut by_outcome: HashMap<&str, Vec<i64>> = HashMap::new();
        for b in &finished {
            let key = match b.kind.as_str() {
                "succeeded" => "succeeded",
                "expired" => "expired",
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
        let created = series_of("job_created");
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
        let redelivered = series_of("redelivery");
        let suppressed = series_of("duplicate_suppressed");
        let rejected = series_of("result_rejected");
        let vis_failed = series_of("visibility_renewal_failed");
        let lease_failed = series_of("lease_renewal_failed");
        let delete_failed = series_of("delete_failed");

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
            charts,
            retention: self.retention_note().await?,
            queue: self.queue.description.clone(),
        })
    }

    async fn build_jobs(&self, query: JobsQuery) -> Result<JobsPage, LedgerError> {
        let now = self.ledger.now_us().await?;
        // Exact up to 10,000 per state: enough to act on, and fast over millions of jobs.
        const CAP: i64 = 10_000;
        let capped = self
            .ledger
            .count_by_state_capped(query.tenant.as_deref(), CAP)
            .await?;
        let shown = |n: i64, over: bool| {
            let digits = n.to_string();
            let mut grouped = String::new();
            for (i, c) in digits.chars().enumerate() {
                if i > 0 && (digits.len() - i).is_multiple_of(3) {
                    grouped.push(',');
                }
                grouped.push(c);
            }
            if over {
                grouped.push('+');
            }
            grouped
        };
        let total = shown(
            capped.iter().map(|(_, n, _)| n).sum(),
            capped.iter().any(|(_, _, over)| *over),
        );
        let counts: Vec<(String, String)> = capped
            .iter()
            .map(|(s, n, over)| (s.as_str().to_owned(), shown(*n, *over)))
            .collect();
        if let Some(needle) = &query.q {
            let found = self.ledger.find_jobs(needle).await?;
            let notice = found
                .is_empty()
                .then(|| format!("No job has the id or idempotency key “{needle}”."));
            return Ok(JobsPage {
                rows: found.iter().map(|j| job_row(now, j)).collect(),
                next: None,
                counts,
                total,
                notice,
            });
        }
        let mut notice = None;
        let state = match query.state.as_deref().map(str::parse::<JobState>) {
            Some(Ok(s)) => Some(s),
            Some(Err(_)) => {
                notice = Some("That is not a job state; showing every state.".to_owned());
                None
            }
            None => None,
        };
        let from_id = match query.created_after.as_deref() {
            Some(text) => match parse_utc_ms(text) {
                Some(ms) => Some(JobId::lower_bound_at(ms)),
                None => {
                    notice = Some(format!(
                        "“{text}” is not a date and time; the filter is ignored."
                    ));
                    None
                }
            },
            None => None,
        };
        let before = query
            .before
            .as_deref()
            .and_then(|b| b.parse::<JobId>().ok())
            .map(|id| id.to_string());
        let page = self
            .ledger
            .list_jobs(&JobFilter {
                tenant: query.tenant.clone(),
                state,
                before,
                from_id,
                limit: PAGE_JOBS,
            })
            .await?;
        Ok(JobsPage {
            rows: page.jobs.iter().map(|j| job_row(now, j)).collect(),
            next: page.next,
            counts,
            total,
            notice,
        })
    }

    async fn build_job(&self, job_id: String) -> Result<Option<JobDetail>, LedgerError> {
        let Ok(id) = job_id.parse::<JobId>() else {
            return Ok(None);
        };
        let Some(job) = self.ledger.job(id.as_str()).await? else {
            return Ok(None);
        };
        let now = self.ledger.now_us().await?;
        let attempts = self.ledger.attempts(&job.job_id).await?;
        let decisions = self.ledger.decisions(&job.job_id).await?;
        let event_count = self.ledger.event_count(&job.job_id).await?;
        // Transitions always; transport facts (deliveries, duplicates, dispatches) one by one
        // while they are few, in buckets when a storm of them would bury the chart.
        let transport_count: i64 = self
            .ledger
            .kind_buckets(&job.job_id, &TRANSPORT_KINDS, job.created_at, i64::MAX / 4)
            .await?
            .iter()
            .map(|b| b.count)
            .sum();
        let mut bucketed: Vec<&str> = RENEWAL_KINDS.to_vec();
        if transport_count > 150 {
            bucketed.extend(TRANSPORT_KINDS);
        }
        let key = self.ledger.key_events(&job.job_id, &bucketed, 650).await?;
        let end = job
            .terminal_at
            .unwrap_or(now)
            .max(key.last().map_or(job.created_at, |e| e.at));
        let width = ((end - job.created_at) / 120).max(1);
        let buckets = self
            .ledger
            .kind_buckets(&job.job_id, &bucketed, job.created_at, width)
            .await?;
        let svg = swimlane_of(&job, &attempts, &key, &buckets, end, width);
        let drill = key
            .iter()
            .find(|e| e.kind == "job_created")
            .and_then(|e| e.detail.get("drill_id"))
            .and_then(|d| d.as_str())
            .map(str::to_owned);
        Ok(Some(JobDetail {
            job_id: job.job_id.clone(),
            tenant: job.tenant.clone(),
            idempotency_key: job.idempotency_key.clone(),
            state: job.state.as_str().into(),
            terminal: job.state.is_terminal(),
            epoch: job.owner_epoch,
            owner: job.owner_id.clone(),
            lease: (job.state == JobState::Running)
                .then(|| {
                    job.owner_until
                        .map(|u| format!("{} ({})", short_time(u), left(now, u)))
                })
                .flatten(),
            deadline: short_time(job.deadline_at),
            deadline_left: if job.state.is_terminal() {
                "closed".into()
            } else {
                left(now, job.deadline_at)
            },
            attempts_used: format!("{} of {}", job.attempt_count, job.max_attempts),
            result_ref: job.result_ref.clone(),
            error_code: job.error_code.clone(),
            recovery_reason: job.recovery_reason.clone(),
            replay_policy: job.replay_policy.as_str().replace('_', " "),
            created: short_time(job.created_at),
            terminal_at: job.terminal_at.map(short_time),
            event_count,
            attempts: attempts
                .iter()
                .map(|a| AttemptRow {
                    attempt_no: a.attempt_no,
                    epoch: a.epoch,
                    worker: a.worker_id.clone(),
                    provider: a.provider.clone(),
                    provider_request_id: a.provider_request_id.clone(),
                    started: short_time(a.started_at),
                    finished: a.finished_at.map(short_time),
                    duration: a.finished_at.map(|f| human_duration(f - a.started_at)),
                    outcome: a.outcome.as_str().into(),
                    error_code: a.error_code.clone(),
                    accepted: a.result_ref.is_some() && a.result_ref == job.result_ref,
                })
                .collect(),
            decisions: decisions
                .iter()
                .map(|d| DecisionRow {
                    at: short_time(d.decided_at),
                    actor: d.actor.clone(),
                    decision: d.decision.clone(),
                    seen_epoch: d.seen_epoch,
                    new_epoch: d.new_epoch,
                    to_state: d.to_state.clone(),
                    reason: d.reason.clone(),
                })
                .collect(),
            swimlane_svg: svg,
            drill,
        }))
    }

    async fn build_timeline(
        &self,
        job_id: String,
        query: TimelineQuery,
    ) -> Result<Timeline, LedgerError> {
        let Ok(id) = job_id.parse::<JobId>() else {
            return Ok(Timeline {
                rows: vec![],
                previous: None,
                next: None,
                total: 0,
            });
        };
        let job_id = id.to_string();
        let Some(job) = self.ledger.job(&job_id).await? else {
            return Ok(Timeline {
                rows: vec![],
                previous: None,
                next: None,
                total: 0,
            });
        };
        let total = self.ledger.event_count(&job_id).await?;
        let after = match query.around {
            Some(seq) => self
                .ledger
                .timeline_run_of(&job_id, seq)
                .await?
                .map_or(0, |first| first - 1),
            None => query.after.unwrap_or(0).max(0),
        };
        let mut runs = self
            .ledger
            .timeline_runs(&job_id, after, PAGE_RUNS + 1)
            .await?;
        let next = (runs.len() > PAGE_RUNS as usize).then(|| {
            runs.truncate(PAGE_RUNS as usize);
            runs.last().map_or(0, |r| r.first_seq)
        });
        let previous = if after > 0 {
            Some(
                self.ledger
                    .timeline_run_before(&job_id, after, PAGE_RUNS)
                    .await?
                    .map_or(0, |first| first - 1),
            )
        } else {
            None
        };
        let mut rows = Vec::with_capacity(runs.len());
        let mut i = 0;
        while i < runs.len() {
            let run = &runs[i];
            let folded = run.len() >= FOLD_MIN && query.open != Some(run.first_seq);
            if folded {
                rows.push(TimelineRow::Folded {
                    kind: run.kind.clone(),
                    first_seq: run.first_seq,
                    last_seq: run.last_seq,
                    first_at: clock(run.first_at),
                    last_at: clock(run.last_at),
                });
                i += 1;
                continue;
            }
            // A block of consecutive unfolded runs: one query for its events.
            let first = run.first_seq;
            let mut last = run.last_seq;
            let mut j = i + 1;
            while j < runs.len()
                && !(runs[j].len() >= FOLD_MIN && query.open != Some(runs[j].first_seq))
            {
                last = runs[j].last_seq;
                j += 1;
            }
            for e in self.ledger.events_between(&job_id, first, last).await? {
                rows.push(TimelineRow::Event(event_row(job.created_at, &e)));
            }
            i = j;
        }
        Ok(Timeline {
            rows,
            previous,
            next,
            total,
        })
    }

    async fn build_unknown(&self, after: Option<String>) -> Result<UnknownPage, LedgerError> {
        const PAGE: u32 = 100;
        let now = self.ledger.now_us().await?;
        // `after` is `<updated_at>.<job_id>` from a previous page; anything else starts over.
        let cursor = after
            .as_deref()
            .and_then(|a| a.split_once('.'))
            .and_then(|(at, id)| Some((at.parse::<i64>().ok()?, id.to_owned())));
        let first = cursor.is_none();
        let cursor = cursor.unwrap_or((i64::MIN, String::new()));
        let page = self.ledger.unknown_jobs(&cursor, PAGE + 1).await?;
        let next = (page.len() > PAGE as usize)
            .then(|| &page[PAGE as usize - 1])
            .map(|u| format!("{}.{}", u.job.updated_at, u.job.job_id));
        let mut rows = Vec::with_capacity(page.len());
        for unknown in page.into_iter().take(PAGE as usize) {
            let job = &unknown.job;
            let last = self.ledger.attempts(&job.job_id).await?.into_iter().last();
            let retrieval = if unknown.retrieval_unsupported {
                "not possible: needs a decision"
            } else if unknown.last_request.is_some() {
                "being asked"
            } else {
                "no request id: needs a decision"
            };
            rows.push(UnknownRow {
                job_id: job.job_id.clone(),
                tenant: job.tenant.clone(),
                epoch: job.owner_epoch,
                since: ago(now, job.updated_at),
                last_attempt: last.map(|a| {
                    format!(
                        "#{} by {} at epoch {}, {}",
                        a.attempt_no,
                        a.worker_id,
                        a.epoch,
                        a.outcome.as_str().replace('_', " ")
                    )
                }),
                provider_request_id: unknown.last_request,
                deadline_left: left(now, job.deadline_at),
                recovery_reason: job.recovery_reason.clone(),
                replay_policy: job.replay_policy.as_str().replace('_', " "),
                retrieval: retrieval.into(),
            });
        }
        let total = self
            .ledger
            .count_by_state_capped(None, 10_000)
            .await?
            .into_iter()
            .find(|(state, _, _)| *state == JobState::Unknown)
            .map_or("0".into(), |(_, n, capped)| {
                if capped {
                    format!("{n}+")
                } else {
                    n.to_string()
                }
            });
        Ok(UnknownPage {
            rows,
            total,
            next,
            first,
        })
    }

    async fn build_dead_letters(&self) -> Result<DeadLetters, LedgerError> {
        let Some(dlq) = &self.queue.embedded_dead_letters else {
            return Ok(DeadLetters {
                queue: format!("{}-dlq", self.queue.description),
                rows: vec![],
                notice: Some(
                    "SQS lists dead letters only by receiving them. `fenceline dlq-replay` inspects \
                     and replays them; the SQS console shows their count."
                        .into(),
                ),
            });
        };
        let now = self.ledger.now_us().await?;
        let mut rows = Vec::new();
        for (message_id, body, receives, since) in
            self.ledger.embedded_dead_letters(dlq, 200).await?
        {
            let parsed = message::parse(&body).ok();
            let job = match &parsed {
                Some(m) => self.ledger.job(&m.job_id).await?,
                None => None,
            };
            let note = match (&parsed, &job) {
                (None, _) => "kept: not a job message".to_owned(),
                (Some(_), None) => "kept: no such job in the ledger".to_owned(),
                (Some(_), Some(j)) if j.state.is_terminal() => {
                    format!("dropped: the job is already {}", j.state)
                }
                (Some(_), Some(j)) if j.state == JobState::Unknown => {
                    "kept until a decision is recorded".to_owned()
                }
                (Some(_), Some(_)) => {
                    "re-dispatched with the same job id, deadline and attempt budget".to_owned()
                }
            };
            rows.push(DeadLetterRow {
                message_id,
                job_id: parsed.as_ref().map(|m| m.job_id.clone()),
                tenant: job.as_ref().map(|j| j.tenant.clone()),
                state: job.as_ref().map(|j| j.state.as_str().to_owned()),
                receive_count: receives,
                dead_since: ago(now, since),
                note,
            });
        }
        Ok(DeadLetters {
            queue: format!("embedded:{dlq}"),
            rows,
            notice: None,
        })
    }
}

/// The swimlane marks of one job.
fn swimlane_of(
    job: &Job,
    attempts: &[crate::ledger::Attempt],
    key: &[Event],
    renewals: &[crate::ledger::Bucket],
    end: i64,
    width: i64,
) -> String {
    let mut marks = Vec::new();
    let start = job.created_at;
    // Lease windows: each owner epoch from its claim to the next ownership change.
    let owners: Vec<&Event> = key
        .iter()
        .filter(|e| {
            matches!(
                e.kind.as_str(),
                "claimed"
                    | "recovery_claimed"
                    | "decision_recorded"
                    | "state_changed"
                    | "result_accepted"
                    | "deadline_expired"
                    | "budget_exhausted"
            )
        })
        .collect();
    for (i, e) in owners
        .iter()
        .enumerate()
        .filter(|(_, e)| e.kind == "claimed")
    {
        let until = owners[i + 1..].first().map_or(end, |n| n.at);
        marks.push(Mark::Span {
            lane: 2,
            from: e.at,
            to: until,
            class: "lease".into(),
            label: format!("epoch {} · {}", e.epoch, e.actor),
            title: format!(
                "epoch {} owned by {} from +{}",
                e.epoch,
                e.actor,
                human_duration(e.at - start)
            ),
        });
    }
    for a in attempts {
        let to = a.finished_at.unwrap_or(end);
        let accepted = a.result_ref.is_some() && a.result_ref == job.result_ref;
        marks.push(Mark::Span {
            lane: 3,
            from: a.started_at,
            to,
            class: format!(
                "attempt outcome-{}{}",
                a.outcome.as_str(),
                if accepted { " accepted" } else { "" }
            ),
            label: format!(
                "#{} {}{}",
                a.attempt_no,
                a.outcome.as_str().replace('_', " "),
                if accepted { " ★" } else { "" }
            ),
            title: format!(
                "attempt {} at epoch {} by {}: {}{}",
                a.attempt_no,
                a.epoch,
                a.worker_id,
                a.outcome.as_str(),
                if accepted {
                    " (the accepted result)"
                } else {
                    ""
                }
            ),
        });
    }
    for e in key {
        let at = e.at;
        let title = |what: &str| {
            format!(
                "#{} {} at +{} by {}",
                e.seq,
                what,
                human_duration(at - start),
                e.actor
            )
        };
        let point = |lane: usize, class: &str, symbol: char, what: &str| Mark::Point {
            lane,
            at,
            class: class.into(),
            symbol,
            title: title(what),
        };
        let mark = match e.kind.as_str() {
            "delivery_received" => {
                let n = e.delivery.as_ref().map_or(0, |d| d.receive_count);
                Some(point(
                    0,
                    if n > 1 { "redelivery" } else { "delivery" },
                    '▼',
                    &format!("receive {n}"),
                ))
            }
            "duplicate_suppressed" => Some(point(0, "suppressed", '⊘', "duplicate suppressed")),
            "delivery_deferred" => Some(point(0, "deferred", '…', "delivery deferred")),
            "delivery_acked_terminal" => {
                Some(point(0, "acked", '✓', "acknowledged: job already terminal"))
            }
            "claimed" | "recovery_claimed" => Some(point(
                4,
                "epoch",
                '◆',
                &format!("{} → epoch {}", e.kind.replace('_', " "), e.epoch),
            )),
            "decision_recorded" => Some(point(
                4,
                "decision",
                '⚑',
                &format!("decision: {}", detail_text(&e.detail)),
            )),
            "result_accepted" => Some(point(4, "commit", '★', "result accepted (terminal commit)")),
            "result_rejected" => Some(point(
                4,
                "rejected",
                '✗',
                &format!("result rejected: {}", detail_text(&e.detail)),
            )),
            "deadline_expired" => Some(point(4, "expired", '⌛', "deadline expired")),
            "budget_exhausted" => Some(point(4, "failed", '■', "attempt budget spent")),
            "lease_lost" => Some(point(2, "failed", '✗', "lease lost")),
            "dispatched" => Some(point(5, "dispatched", '↑', "dispatched to the queue")),
            "message_deleted" => Some(point(
                5,
                "deleted",
                '✓',
                &format!("message deleted ({})", detail_text(&e.detail)),
            )),
            "delete_failed" => Some(point(
                5,
                "failed",
                '✗',
                &format!("delete failed ({})", detail_text(&e.detail)),
            )),
            "moved_to_dlq" => Some(point(5, "failed", '⇣', "moved to the dead-letter queue")),
            _ => None,
        };
        marks.extend(mark);
    }
    for b in renewals {
        let failed = b.kind.ends_with("failed");
        let (lane, class) = match b.kind.as_str() {
            k if k.starts_with("visibility") => {
                (1, if failed { "renew-failed" } else { "renew-ok" })
            }
            k if k.starts_with("lease") => (2, if failed { "renew-failed" } else { "renew-ok" }),
            "dispatched" => (5, "dispatched"),
            "duplicate_suppressed" => (0, "suppressed"),
            "delivery_acked_terminal" => (0, "acked"),
            _ => (0, "delivery"),
        };
        let from = start + b.bucket * width;
        marks.push(Mark::Density {
            lane,
            from,
            to: from + width,
            count: b.count,
            class: class.into(),
            title: b.kind.replace('_', " "),
        });
    }
    charts::swimlane(start, end, &marks)
}

impl Console for LedgerConsole {
    fn overview(&self, window: Window) -> Pending<'_, Overview> {
        Box::pin(async move { self.build_overview(window).await.map_err(shown) })
    }

    fn jobs(&self, query: JobsQuery) -> Pending<'_, JobsPage> {
        Box::pin(async move { self.build_jobs(query).await.map_err(shown) })
    }

    fn job(&self, job_id: String) -> Pending<'_, Option<JobDetail>> {
        Box::pin(async move { self.build_job(job_id).await.map_err(shown) })
    }

    fn timeline(&self, job_id: String, query: TimelineQuery) -> Pending<'_, Timeline> {
        Box::pin(async move { self.build_timeline(job_id, query).await.map_err(shown) })
    }

    fn unknown(&self, after: Option<String>) -> Pending<'_, UnknownPage> {
        Box::pin(async move { self.build_unknown(after).await.map_err(shown) })
    }

    fn dead_letters(&self) -> Pending<'_, DeadLetters> {
        Box::pin(async move { self.build_dead_letters().await.map_err(shown) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operators_can_type_times_as_browsers_send_them() {
        assert_eq!(parse_utc_ms("1970-01-01T00:00"), Some(0));
        assert_eq!(parse_utc_ms("2023-11-14T22:13:20"), Some(1_700_000_000_000));
        assert_eq!(parse_utc_ms("2000-02-29"), Some(951_782_400_000));
        assert_eq!(parse_utc_ms("yesterday"), None);
        assert_eq!(parse_utc_ms("2023-13-01"), None);
    }
}
