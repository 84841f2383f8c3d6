//! `/jobs/{job_id}`: where the job stands, its attempts and decisions, and its timeline in
//! folded, paged runs.

use fenceline_app::console::{
    AttemptRow, DecisionRow, JobDetail, SpendView, Timeline, TimelineQuery, TimelineRow,
};

use crate::job::detail;
use crate::job::{EventKind, JobId, JobState};
use crate::ledger::{
    Attempt, AttemptOutcome, Event, Job, JobSpend, LedgerError, Run, RunKind, RENEWAL_KINDS,
    TRANSPORT_KINDS,
};
use crate::provider::prices::Usd;

use super::format::{event_row, left};
use super::swimlane::swimlane_of;
use super::{LedgerConsole, FOLD_MIN, PAGE_RUNS};
use crate::time::{clock_in, day_in, human_duration};
use fenceline_app::console::Zoom;

/// A job's swimlane chart, with the key events it was drawn from and the instant it ends at.
pub(super) struct Lane {
    pub(super) svg: fenceline_app::svg::Svg,
    pub(super) key: Vec<Event>,
    pub(super) end: i64,
}

/// At most this many events of an opened run are shown.
const OPEN_MAX: i64 = 2000;

/// The attempt budget as spent: attempts that may have run the model, out of the budget, and
/// the refusals besides, which spend none.
fn attempts_used(job: &Job) -> String {
    let unrun = job.attempt_count - job.budget_used;
    let used = format!("{} of {}", job.budget_used, job.max_attempts);
    match unrun {
        0 => used,
        1 => format!(
            "{used}, and 1 the provider never ran (refused, or held back for its limit), \
             which spends none"
        ),
        n => format!(
            "{used}, and {n} the provider never ran (refused, or held back for its limit), \
             which spend none"
        ),
    }
}

/// What a job waits for after its provider refused its last attempt: the provider, until the
/// time it named (in `at`'s words).
fn waiting_for(
    job: &Job,
    last: Option<&Attempt>,
    now: i64,
    at: impl Fn(i64) -> String,
) -> Option<String> {
    let retry_at = job.retry_at.filter(|t| *t > now)?;
    let last = last.filter(|a| a.outcome == AttemptOutcome::Throttled)?;
    if job.state != JobState::RetryAuthorized {
        return None;
    }
    let what = match last.error_code.as_deref() {
        Some("rate_limited") | Some(crate::worker::HELD_BY_LIMIT) => "the provider's rate limit",
        Some("connect_failed") => "the provider, which refused the connection,",
        Some(_) => "the provider, which said it was overloaded,",
        None => "the provider",
    };
    Some(format!(
        "{what} until {} ({}); no attempt of the budget was spent",
        at(retry_at),
        super::format::left(now, retry_at)
    ))
}

/// Tokens with thousands separated: 12,345.
fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// An attempt's tokens and cost as its row shows them.
fn attempt_spend(a: &Attempt) -> (Option<String>, Option<String>) {
    let Some(spend) = a.spend() else {
        return (None, None);
    };
    let u = spend.usage;
    let mut tokens = format!("{} in · {} out", count(u.input), count(u.output));
    if u.cached > 0 {
        tokens.push_str(&format!(" ({} cached)", count(u.cached)));
    }
    if u.reasoning > 0 {
        tokens.push_str(&format!(" ({} reasoning)", count(u.reasoning)));
    }
    let cost = match spend.cost {
        Some(nusd) => Usd(nusd).to_string(),
        None => format!("no price for {}", spend.model),
    };
    (Some(tokens), Some(cost))
}

fn plural(n: usize, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

/// What each provider's attempts spent, when more than one provider was called: in the
/// order the attempts first went to each.
fn by_provider(attempts: &[Attempt]) -> Option<String> {
    let mut each: Vec<(&str, u64, i64, bool)> = Vec::new();
    for a in attempts {
        let at = match each.iter().position(|(p, ..)| *p == a.provider) {
            Some(at) => at,
            None => {
                each.push((&a.provider, 0, 0, false));
                each.len() - 1
            }
        };
        if let Some(spend) = a.spend() {
            let row = &mut each[at];
            row.1 += spend.usage.total();
            row.2 += spend.cost.unwrap_or(0);
            row.3 |= spend.cost.is_none();
        }
    }
    (each.len() > 1).then(|| {
        each.iter()
            .map(
                |(provider, tokens, nusd, unpriced)| match (tokens, unpriced) {
                    (0, _) => format!("{provider}: no usage"),
                    (_, true) => format!(
                        "{provider}: {} tokens, {} priced",
                        count(*tokens),
                        Usd(*nusd)
                    ),
                    _ => format!("{provider}: {} tokens, {}", count(*tokens), Usd(*nusd)),
                },
            )
            .collect::<Vec<_>>()
            .join(" · ")
    })
}

/// The job's spend in sentence parts.
fn spend_view(s: &JobSpend, attempts: &[Attempt]) -> SpendView {
    let spent = if s.tokens == 0 {
        "no usage reported".to_owned()
    } else if s.unpriced > 0 {
        format!(
            "{} tokens, {} ({} without a price)",
            count(s.tokens),
            Usd(s.spent),
            plural(s.unpriced, "attempt", "attempts")
        )
    } else {
        format!("{} tokens, {}", count(s.tokens), Usd(s.spent))
    };
    SpendView {
        spent,
        duplicate: (s.duplicate_attempts > 0).then(|| {
            format!(
                "{} on {} not accepted",
                Usd(s.duplicate),
                plural(s.duplicate_attempts, "answer", "answers")
            )
        }),
        at_risk: (s.at_risk_attempts > 0).then(|| {
            let whose = plural(
                s.at_risk_attempts,
                "attempt whose outcome is unknown",
                "attempts whose outcome is unknown",
            );
            match s.at_risk {
                Some(bound) => format!("at most {} on {whose}", Usd(bound)),
                None => format!(
                    "unbounded on {whose} (no price for the model, or no max_tokens in its \
                     parameters)"
                ),
            }
        }),
        by_provider: by_provider(attempts),
    }
}

impl LedgerConsole {
    pub(super) async fn build_job(
        &self,
        job_id: String,
        zoom: Option<Zoom>,
    ) -> Result<Option<JobDetail>, LedgerError> {
        let Ok(id) = job_id.parse::<JobId>() else {
            return Ok(None);
        };
        let Some(job) = self
            .ledger
            .job(id.as_str())
            .await?
            .filter(|j| self.covers(&j.tenant))
        else {
            return Ok(None);
        };
        let (now, attempts, decisions, event_count, reruns) = tokio::join!(
            self.ledger.now_us(),
            self.ledger.attempts(&job.job_id),
            self.ledger.decisions(&job.job_id),
            self.ledger.event_count(&job.job_id),
            self.ledger.rerun_links(&job.job_id),
        );
        let (now, attempts, decisions, event_count) = (now?, attempts?, decisions?, event_count?);
        let Lane { svg, key, end } = self.swimlane(&job, &attempts, now, zoom).await?;
        let (incidents, pin_to) = self.incident_links(&job.job_id).await?;
        let spend = self
            .ledger
            .job_spend(
                &job,
                &attempts,
                &self.queue.prices,
                &self.queue.default_model,
            )
            .await?;
        let drill = job.drill_run.clone();
        let traces = match &self.queue.trace_url {
            Some(_) => self.ledger.job_traces(&job.job_id).await?,
            None => Vec::new(),
        };
        let trace_of = |attempt_no: i64| {
            let template = self.queue.trace_url.as_deref()?;
            let (_, traceparent) = traces.iter().find(|(n, _)| *n == attempt_no)?;
            trace_link(template, traceparent)
        };
        Ok(Some(JobDetail {
            job_id: job.job_id.clone(),
            tenant: job.tenant.clone(),
            idempotency_key: job.idempotency_key.clone(),
            state: job.state.as_str().into(),
            terminal: job.state.is_terminal(),
            cancellable: job.state.cancellable(),
            epoch: job.owner_epoch,
            owner: job.owner_id.clone(),
            lease: (job.state == JobState::Running)
                .then(|| {
                    job.owner_until
                        .map(|u| format!("{} ({})", self.at(u), left(now, u)))
                })
                .flatten(),
            deadline: self.at(job.deadline_at),
            deadline_left: if job.state.is_terminal() {
                "closed".into()
            } else {
                left(now, job.deadline_at)
            },
            attempts_used: attempts_used(&job),
            waiting_for: waiting_for(&job, attempts.last(), now, |t| self.at(t)),
            route: (job.route.step > 0).then(|| {
                format!(
                    "{} · {} (moved on {} along its fallback route)",
                    job.route.provider.as_deref().unwrap_or("—"),
                    job.route.model.as_deref().unwrap_or("—"),
                    match job.route.step {
                        1 => "once".to_owned(),
                        n => format!("{n} times"),
                    }
                )
            }),
            result_ref: job.result_ref.clone(),
            error_code: job.error_code.clone(),
            recovery_reason: job.recovery_reason.clone(),
            replay_policy: job.replay_policy.as_str().replace('_', " "),
            created: self.at(job.created_at),
            terminal_at: job.terminal_at.map(|t| self.at(t)),
            event_count,
            attempts: attempts
                .iter()
                .map(|a| (a, attempt_spend(a)))
                .map(|(a, (tokens, cost))| AttemptRow {
                    attempt_no: a.attempt_no,
                    epoch: a.epoch,
                    worker: a.worker_id.clone(),
                    provider: a.provider.clone(),
                    provider_request_id: a.provider_request_id.clone(),
                    submitted_id: a.submitted_id.clone(),
                    tokens,
                    cost,
                    started: self.at(a.started_at),
                    finished: a.finished_at.map(|t| self.at(t)),
                    duration: a.finished_at.map(|f| human_duration(f - a.started_at)),
                    outcome: a.outcome.as_str().into(),
                    error_code: a.error_code.clone(),
                    accepted: a.result_ref.is_some() && a.result_ref == job.result_ref,
                    after: after_the_attempt(a, &key, job.created_at),
                    trace_url: trace_of(a.attempt_no),
                    zoom: {
                        let to = a.finished_at.unwrap_or(end.max(a.started_at));
                        // A little either side, so its edges and neighbours show.
                        let pad = ((to - a.started_at) / 10).max(50_000);
                        Zoom {
                            from_ms: ((a.started_at - pad - job.created_at) / 1_000).max(0),
                            to_ms: (to + pad - job.created_at) / 1_000 + 1,
                        }
                    },
                })
                .collect(),
            spend: spend_view(&spend, &attempts),
            decisions: decisions
                .iter()
                .map(|d| DecisionRow {
                    at: self.at(d.decided_at),
                    actor: d.actor.clone(),
                    decision: d.decision.clone(),
                    seen_epoch: d.seen_epoch,
                    new_epoch: d.new_epoch,
                    to_state: d.to_state.clone(),
                    reason: d.reason.clone(),
                    evidence: d.evidence.clone(),
                })
                .collect(),
            swimlane: svg,
            drill,
            trace_url: trace_of(0),
            reruns: reruns?,
            incidents,
            pin_to,
        }))
    }

    /// The swimlane chart of `job` as of `now`: the whole job, or `zoom` (milliseconds after
    /// its creation).
    pub(super) async fn swimlane(
        &self,
        job: &Job,
        attempts: &[Attempt],
        now: i64,
        zoom: Option<Zoom>,
    ) -> Result<Lane, LedgerError> {
        // Transitions always; transport facts (deliveries, duplicates, dispatches) one by one
        // while they are few, in buckets when a storm of them would bury the chart.
        const TRANSPORT_SHOWN: i64 = 150;
        let (last_event, transport) = tokio::join!(
            self.ledger.last_event(&job.job_id),
            self.ledger
                .kind_count_capped(&job.job_id, &TRANSPORT_KINDS, TRANSPORT_SHOWN + 1),
        );
        let mut bucketed: Vec<EventKind> = RENEWAL_KINDS.to_vec();
        if transport? > TRANSPORT_SHOWN {
            bucketed.extend(TRANSPORT_KINDS);
        }
        // The chart covers what happened, and up to now while the job is under way or waits
        // (`unknown` for a decision, `retry_authorized` for a worker): a wait is drawn across a
        // compressed break, so the work before it keeps its scale.
        let last = last_event?
            .map_or(job.created_at, |(_, at)| at)
            .max(job.terminal_at.unwrap_or(job.created_at))
            .max(
                attempts
                    .iter()
                    .map(|a| a.finished_at.unwrap_or(a.started_at))
                    .max()
                    .unwrap_or(0),
            );
        let waiting = matches!(
            job.state,
            JobState::Running | JobState::Unknown | JobState::RetryAuthorized
        );
        let end = if waiting { now.max(last) } else { last };
        let (from, to) = match zoom {
            Some(z) => (
                (job.created_at + z.from_ms * 1_000).max(job.created_at),
                (job.created_at + z.to_ms * 1_000).min(end.max(job.created_at + 1)),
            ),
            None => (job.created_at, end),
        };
        let width = ((to - from) / 120).max(1);
        // The transitions drawn one by one and the counts drawn in buckets, side by side.
        let (key, buckets) = tokio::join!(
            self.ledger.key_events(&job.job_id, &bucketed, 650),
            self.ledger
                .kind_buckets(&job.job_id, &bucketed, from, width)
        );
        let (key, buckets) = (key?, buckets?);
        Ok(Lane {
            svg: swimlane_of(job, attempts, &key, &buckets, (from, to), end, width),
            key,
            end,
        })
    }

    pub(super) async fn build_timeline(
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
        let Some(job) = self
            .ledger
            .job(&job_id)
            .await?
            .filter(|j| self.covers(&j.tenant))
        else {
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
        // This page's runs and where the page before starts: two scans, side by side.
        let (runs, before) = tokio::join!(
            self.ledger.timeline_runs(&job_id, after, PAGE_RUNS + 1),
            async {
                if after > 0 {
                    self.ledger
                        .timeline_run_before(&job_id, after, PAGE_RUNS)
                        .await
                        .map(|first| Some(first.map_or(0, |first| first - 1)))
                } else {
                    Ok(None)
                }
            }
        );
        let (mut runs, previous) = (runs?, before?);
        let next = (runs.len() > PAGE_RUNS as usize).then(|| {
            runs.truncate(PAGE_RUNS as usize);
            runs.last().map_or(0, |r| r.first_seq)
        });
        // The events of the runs shown unfolded (at most a page's worth of an opened one),
        // all read at once.
        let unfolded = |run: &Run| run.len() < FOLD_MIN || query.open == Some(run.first_seq);
        let seqs: Vec<i64> = runs
            .iter()
            .filter(|run| unfolded(run))
            .flat_map(|run| run.first_seq..=run.last_seq.min(run.first_seq + OPEN_MAX - 1))
            .collect();
        let mut events = self
            .ledger
            .events_numbered(&job_id, &seqs)
            .await?
            .into_iter()
            .peekable();
        let mut rows = Vec::with_capacity(runs.len());
        // The first row of the page, and the first of each new day, carries its date.
        let mut shown_day = None;
        for run in &runs {
            if !unfolded(run) {
                let refusals = match run.kind {
                    RunKind::Throttled => Some(
                        self.ledger
                            .kind_count_between(
                                &job_id,
                                EventKind::Throttled,
                                run.first_seq,
                                run.last_seq,
                            )
                            .await?,
                    ),
                    _ => None,
                };
                rows.push(TimelineRow::Folded {
                    kind: run.kind.as_str().to_owned(),
                    first_seq: run.first_seq,
                    last_seq: run.last_seq,
                    first_at: clock_in(run.first_at, self.zone),
                    last_at: clock_in(run.last_at, self.zone),
                    refusals,
                });
                continue;
            }
            while let Some(e) = events.next_if(|e| e.seq <= run.last_seq) {
                let day = day_in(e.at, self.zone);
                let with_date = shown_day != Some(day);
                shown_day = Some(day);
                rows.push(TimelineRow::Event(event_row(
                    job.created_at,
                    &e,
                    self.zone,
                    with_date,
                )));
            }
        }
        Ok(Timeline {
            rows,
            previous,
            next,
            total,
        })
    }
}

/// What became of an attempt's call once the ledger had settled the attempt without it, as
/// its fenced-out worker recorded: stopped after running so long, never sent, or a late
/// answer rejected and kept as evidence.
/// The trace viewer's address of the span `traceparent` names: `{trace_id}` and `{span_id}`
/// filled in (both hexadecimal, so nothing else can enter the address).
fn trace_link(template: &str, traceparent: &str) -> Option<String> {
    let (trace_id, span_id) = crate::telemetry::ids(traceparent)?;
    Some(
        template
            .replace("{trace_id}", trace_id)
            .replace("{span_id}", span_id),
    )
}

fn after_the_attempt(a: &Attempt, key: &[Event], start: i64) -> Option<String> {
    let mine = |e: &&Event| e.attempt_no == Some(a.attempt_no) && e.epoch == a.epoch;
    key.iter().filter(mine).find_map(|e| match e.kind {
        EventKind::LeaseLost => {
            let lost = e.detail_as::<detail::LeaseLost>()?;
            let reason = if lost.reason.is_empty() {
                "fenced out".to_owned()
            } else {
                lost.reason
            };
            match lost.call.as_deref() {
                Some("stopped") => Some(format!(
                    "its call ran {} and was stopped by {} at +{} ({reason}, #{})",
                    human_duration(lost.call_ran_ms.unwrap_or(0) * 1_000),
                    e.actor,
                    human_duration(e.at - start),
                    e.seq
                )),
                Some("not_sent") => Some(format!(
                    "its request was never sent: {} was fenced out at +{} ({reason}, #{})",
                    e.actor,
                    human_duration(e.at - start),
                    e.seq
                )),
                _ => None,
            }
        }
        EventKind::ResultRejected => {
            let rejected = e.detail_as::<detail::ResultRejected>()?;
            Some(format!(
                "its answer came at +{} and was rejected ({}, #{}){}",
                human_duration(e.at - start),
                rejected.reason,
                e.seq,
                if rejected.evidence_ref.is_some() {
                    ", kept as evidence"
                } else {
                    ""
                }
            ))
        }
        _ => None,
    })
}
