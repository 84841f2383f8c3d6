//! The chaos soak's checker: reads only the ledger (jobs and their timelines) after a run and
//! says whether the invariants of `domain.md` held for every job, with the job ids of any that
//! did not, and why every job that reached the model more than once did.
//!
//! Checked per job, from its events in order:
//! - **two accepted results** — more than one `result_accepted`;
//! - **stale-epoch commits accepted** — a `result_accepted` under an epoch older than one the
//!   timeline had already reached;
//! - **deletes before a durable outcome** — `message_deleted` under an epoch whose provider
//!   attempt had no durable outcome yet (no `attempt_finished`, accepted result or state change
//!   under that epoch, or a hand-back naming it), while the job was not terminal. A delete is
//!   judged by the epoch it was made under: an owner that recorded its failure deletes its
//!   message, and a copy of that message a second receiver took meanwhile (a standard queue
//!   may deliver one at any time) goes with it, while the second owner works on under its own
//!   lease and the outbox's re-dispatch. A stale owner deleting without an outcome is caught;
//!   that copy's delete is not;
//! - **second attempts after an uncertain one without a decision** — an `attempt_started`
//!   after the job went `unknown` and before a `decision_recorded`;
//! - **over budget** — more attempts than `max_attempts`;
//! - **timeline gaps** — events not numbered 1, 2, 3… without a hole, or a number the job
//!   handed out that no event holds;
//! - **lost** — neither terminal nor `unknown` (waiting for a decision) when the run is over,
//!   and jobs the run submitted that the ledger does not have.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::job::detail;
use crate::job::EventKind;
use crate::ledger::{Attempt, Event, Job, JobFilter, JobSpend, Ledger, LedgerError};
use crate::provider::prices::{Prices, Usd};

/// What the checker found.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Verdict {
    /// Jobs checked.
    pub jobs: u64,
    /// Jobs the run said it submitted, when it said.
    pub expected: Option<u64>,
    /// Jobs per final state.
    pub by_state: BTreeMap<String, u64>,
    pub two_accepted: Vec<String>,
    pub stale_commits_accepted: Vec<String>,
    pub deletes_before_outcome: Vec<String>,
    pub attempts_after_uncertain_without_decision: Vec<String>,
    pub over_budget: Vec<String>,
    pub timeline_gaps: Vec<String>,
    pub lost: Vec<String>,
    /// Submitted jobs the ledger does not have.
    pub missing: u64,
    /// Jobs that reached the model more than once, by what preceded each later attempt.
    pub repeated_calls: BTreeMap<String, u64>,
    /// Attempts in flight a new owner adopted by their provider id instead of running again.
    pub adoptions: u64,
    /// Jobs left `unknown`, by whether their last attempt's provider id had been kept.
    pub unknown_by_window: BTreeMap<String, u64>,
    /// Tokens every answer reported, and their known cost (nano-dollars).
    pub tokens: u64,
    pub spent: i64,
    /// The known cost of answers that were not accepted, as the ledger reports it per job.
    pub duplicate_spend: i64,
    /// The same, summed again here over every attempt with a known cost whose result is not
    /// its job's: must equal `duplicate_spend`.
    pub duplicate_recount: i64,
    /// The most the attempts of unknown outcome may have cost, and how many of them had no
    /// bound (no price or no output limit).
    pub at_risk: i64,
    pub at_risk_attempts: u64,
    pub at_risk_unbounded: u64,
    /// The largest share of jobs that may end `unknown`, each before its provider id was
    /// kept, when the run asks for one.
    pub max_unknown: Option<f64>,
}

impl Verdict {
    /// Whether every invariant held.
    pub fn holds(&self) -> bool {
        self.two_accepted.is_empty()
            && self.stale_commits_accepted.is_empty()
            && self.deletes_before_outcome.is_empty()
            && self.attempts_after_uncertain_without_decision.is_empty()
            && self.over_budget.is_empty()
            && self.timeline_gaps.is_empty()
            && self.lost.is_empty()
            && self.missing == 0
            && self.duplicate_spend == self.duplicate_recount
            && self.unknown_within_bound()
            && self.jobs > 0
    }

    /// Jobs that ended `unknown`.
    fn unknown(&self) -> u64 {
        self.by_state.get("unknown").copied().unwrap_or(0)
    }

    /// Whether the `unknown` jobs stay within the bound the run asked for, each lost before
    /// its provider id was kept.
    fn unknown_within_bound(&self) -> bool {
        let Some(max) = self.max_unknown else {
            return true;
        };
        let after_kept = self.unknown_by_window.get(AFTER_KEPT).copied().unwrap_or(0);
        after_kept == 0 && self.unknown() as f64 <= max * self.jobs as f64
    }

    /// The verdict as people read it.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let line = |out: &mut String, name: &str, ids: &[String]| {
            let shown: Vec<&str> = ids.iter().take(5).map(String::as_str).collect();
            out.push_str(&format!(
                "{:<58} {}{}\n",
                name,
                ids.len(),
                if shown.is_empty() {
                    String::new()
                } else {
                    format!(
                        "  ({}{})",
                        shown.join(", "),
                        if ids.len() > 5 { ", …" } else { "" }
                    )
                }
            ));
        };
        out.push_str(&format!(
            "jobs checked: {}{}\n",
            self.jobs,
            self.expected
                .map(|n| format!(" of {n} submitted"))
                .unwrap_or_default()
        ));
        line(
            &mut out,
            "jobs with two accepted results",
            &self.two_accepted,
        );
        line(
            &mut out,
            "stale-epoch commits accepted",
            &self.stale_commits_accepted,
        );
        line(
            &mut out,
            "deletes before a durable outcome",
            &self.deletes_before_outcome,
        );
        line(
            &mut out,
            "second attempts after an uncertain one without a decision",
            &self.attempts_after_uncertain_without_decision,
        );
        line(
            &mut out,
            "jobs over their attempt budget",
            &self.over_budget,
        );
        line(
            &mut out,
            "jobs whose timeline has a gap",
            &self.timeline_gaps,
        );
        line(
            &mut out,
            "lost jobs (neither terminal nor unknown)",
            &self.lost,
        );
        out.push_str(&format!(
            "{:<58} {}\n",
            "submitted jobs missing from the ledger", self.missing
        ));
        out.push_str("repeated provider calls, by what preceded them:\n");
        if self.repeated_calls.is_empty() {
            out.push_str("  none\n");
        }
        for (why, n) in &self.repeated_calls {
            out.push_str(&format!("  {n:>6}  {why}\n"));
        }
        out.push_str(&format!(
            "{:<58} {}\n",
            "attempts adopted by a new owner (not run again)", self.adoptions
        ));
        out.push_str("unknown jobs, by where their attempt was lost:\n");
        if self.unknown_by_window.is_empty() {
            out.push_str("  none\n");
        }
        for (window, n) in &self.unknown_by_window {
            out.push_str(&format!("  {n:>6}  {window}\n"));
        }
        out.push_str(&format!(
            "{:<58} {} tokens, {}\n",
            "spend (every answer that reported usage)",
            self.tokens,
            Usd(self.spent)
        ));
        out.push_str(&format!(
            "{:<58} {} (recounted over attempts not accepted: {}{})\n",
            "duplicate spend (answers not accepted)",
            Usd(self.duplicate_spend),
            Usd(self.duplicate_recount),
            if self.duplicate_spend == self.duplicate_recount {
                ", equal"
            } else {
                ", DIFFERENT"
            }
        ));
        out.push_str(&format!(
            "{:<58} at most {} on {} attempts of unknown outcome{}\n",
            "at-risk spend",
            Usd(self.at_risk),
            self.at_risk_attempts,
            if self.at_risk_unbounded > 0 {
                format!(" ({} of them without a bound)", self.at_risk_unbounded)
            } else {
                String::new()
            }
        ));
        if let Some(max) = self.max_unknown {
            out.push_str(&format!(
                "{:<58} {} of {} ({:.2} %; at most {:.2} %, each before its id was kept){}\n",
                "unknown jobs within the bound",
                self.unknown(),
                self.jobs,
                100.0 * self.unknown() as f64 / self.jobs.max(1) as f64,
                100.0 * max,
                if self.unknown_within_bound() {
                    ""
                } else {
                    " — EXCEEDED"
                }
            ));
        }
        out.push_str("jobs per final state:\n");
        for (state, n) in &self.by_state {
            out.push_str(&format!("  {n:>6}  {state}\n"));
        }
        out.push_str(if self.holds() {
            "verdict: every invariant held\n"
        } else if self.jobs == 0 {
            "verdict: FAILED — no job to check\n"
        } else {
            "verdict: FAILED\n"
        });
        out
    }

    fn count_spend(&mut self, job: &Job, attempts: &[Attempt], spend: &JobSpend) {
        self.tokens += spend.tokens;
        self.spent += spend.spent;
        self.duplicate_spend += spend.duplicate;
        self.duplicate_recount += attempts
            .iter()
            .filter(|a| a.result_ref != job.result_ref)
            .filter_map(|a| a.cost_nusd)
            .sum::<i64>();
        self.at_risk_attempts += spend.at_risk_attempts as u64;
        match spend.at_risk {
            Some(bound) => self.at_risk += bound,
            None => self.at_risk_unbounded += spend.at_risk_attempts as u64,
        }
    }

    fn judge(&mut self, job: &Job, events: &[Event]) {
        let id = || job.job_id.clone();
        *self
            .by_state
            .entry(job.state.as_str().to_owned())
            .or_default() += 1;
        let mut highest_epoch = 0;
        let mut accepted = 0;
        // Epochs whose attempt has no durable outcome yet, and whether the job is terminal.
        let mut undecided = std::collections::BTreeSet::new();
        let mut terminal = false;
        let mut uncertain = false;
        let mut started = 0;
        let mut refused = 0;
        let mut why_again: Option<String> = None;
        let (mut stale, mut early, mut unexplained) = (false, false, false);
        // Whether the latest attempt's provider id was kept.
        let mut kept = false;
        for e in events {
            match e.kind {
                EventKind::AttemptSubmitted => kept = true,
                EventKind::ResultAccepted => {
                    accepted += 1;
                    stale |= e.epoch < highest_epoch;
                    terminal = true;
                }
                EventKind::AttemptStarted => {
                    kept = false;
                    undecided.insert(e.epoch);
                    unexplained |= uncertain;
                    started += 1;
                    if started > 1 {
                        let why = why_again
                            .take()
                            .unwrap_or_else(|| "nothing recorded (unexplained)".to_owned());
                        *self.repeated_calls.entry(why).or_default() += 1;
                    }
                }
                EventKind::AttemptFinished => {
                    undecided.remove(&e.epoch);
                    let outcome = e
                        .detail_as::<detail::AttemptFinished>()
                        .unwrap_or_default()
                        .outcome;
                    // The provider confirmed it never ran it: no part of the budget.
                    refused += i64::from(outcome == "throttled");
                    why_again = Some(format!("after an attempt that ended {outcome}"));
                }
                EventKind::RecoveryClaimed
                    if e.detail_as::<detail::RecoveryClaimed>()
                        .is_some_and(|r| r.adopted_attempt.is_some()) =>
                {
                    // A worker's adoption; the reaper's hold for one is not.
                    if e.actor.starts_with("worker:") {
                        self.adoptions += 1;
                    }
                    // The adopted attempt passes to the new epoch: its outcome is awaited there.
                    undecided.insert(e.epoch);
                }
                EventKind::RecoveryClaimed | EventKind::LeaseLost => {
                    why_again = Some(format!("after {}", e.kind.as_str().replace('_', " ")));
                }
                EventKind::StateChanged => {
                    undecided.remove(&e.epoch);
                    let change = e.detail_as::<detail::StateChanged>();
                    if let Some(by) = change.as_ref().and_then(|c| c.released_by_epoch) {
                        undecided.remove(&by);
                    }
                    let to = change.map(|c| c.to);
                    terminal |= to
                        .as_deref()
                        .and_then(|to| to.parse::<crate::job::JobState>().ok())
                        .is_some_and(|to| to.is_terminal());
                    uncertain |= to.as_deref() == Some("unknown");
                }
                EventKind::DecisionRecorded => {
                    uncertain = false;
                    let decision = e
                        .detail_as::<detail::DecisionRecorded>()
                        .map(|d| d.decision)
                        .unwrap_or_else(|| "a decision".to_owned());
                    why_again = Some(format!(
                        "after a recorded decision ({}, by {})",
                        decision.replace('_', " "),
                        e.actor.split(':').next().unwrap_or("someone")
                    ));
                }
                EventKind::MessageDeleted => early |= !terminal && undecided.contains(&e.epoch),
                _ => {}
            }
            highest_epoch = highest_epoch.max(e.epoch);
        }
        if accepted > 1 {
            self.two_accepted.push(id());
        }
        if stale {
            self.stale_commits_accepted.push(id());
        }
        if early {
            self.deletes_before_outcome.push(id());
        }
        if unexplained {
            self.attempts_after_uncertain_without_decision.push(id());
        }
        // The budget counts the attempts that may have run the model, as the ledger does.
        if started - refused > job.max_attempts {
            self.over_budget.push(id());
        }
        // Every number the job handed out is held by one event, in order from 1.
        let numbered = events.iter().zip(1..).all(|(e, n)| e.seq == n);
        if !numbered || job.next_event_seq != events.len() as i64 + 1 {
            self.timeline_gaps.push(id());
        }
        if !job.state.is_terminal() && job.state != crate::job::JobState::Unknown {
            self.lost.push(id());
        }
        if job.state == crate::job::JobState::Unknown {
            let window = if kept {
                AFTER_KEPT
            } else {
                "before a provider id was kept (sent, no id read; or a provider that keeps none)"
            };
            *self.unknown_by_window.entry(window.to_owned()).or_default() += 1;
        }
    }
}

/// How an `unknown` job whose attempt's provider id was kept is counted: adoption should have
/// settled it.
const AFTER_KEPT: &str = "after the provider's id was kept";

/// Checks every job of `tenant` (every tenant when `None`); `expected` is how many the run
/// submitted.
pub async fn check(
    ledger: &Ledger,
    tenant: Option<&str>,
    expected: Option<u64>,
    (prices, default_model): (&Prices, &str),
    max_unknown: Option<f64>,
) -> Result<Verdict, LedgerError> {
    let mut verdict = Verdict {
        expected,
        max_unknown,
        ..Verdict::default()
    };
    let mut before = None;
    loop {
        let page = ledger
            .list_jobs(&JobFilter {
                tenant: tenant.map(str::to_owned),
                before: before.clone(),
                limit: 500,
                ..JobFilter::default()
            })
            .await?;
        for job in &page.jobs {
            let events = ledger.all_events(&job.job_id).await?;
            verdict.jobs += 1;
            verdict.judge(job, &events);
            let attempts = ledger.attempts(&job.job_id).await?;
            let spend = ledger
                .job_spend(job, &attempts, prices, default_model)
                .await?;
            verdict.count_spend(job, &attempts, &spend);
        }
        match page.next {
            Some(next) => before = Some(next),
            None => break,
        }
    }
    verdict.missing = expected.map_or(0, |n| n.saturating_sub(verdict.jobs));
    Ok(verdict)
}
