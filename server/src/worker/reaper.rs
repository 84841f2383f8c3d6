//! The reaper: recovers jobs whose lease expired (epoch + 1, then the state table), expires
//! jobs past their fixed deadline, applies pre-approved replay policies, re-dispatches
//! workable jobs whose message went missing, and — in a task of its own — reconciles
//! `unknown` jobs through the provider's retrieval mechanism. Every action is a guarded
//! ledger write, so several reapers may run.
//!
//! Fairness: each duty's set shrinks as it is worked (an expired job is no longer live, a
//! recovered one no longer running, a replayed one no longer `unknown`), except retrieval,
//! which may leave a job as it was; it walks the `unknown` jobs with a cursor instead, so
//! every job gets its turn however many wait. Retrievals run concurrently, each within a
//! short bound, so a slow provider never holds up lease recovery or deadlines.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::job::detail;
use crate::job::{Actor, EventKind, JobState};
use crate::ledger::{Decision, Ledger, LedgerError, NewEvent, UnknownForRetrieval};
use crate::provider::{Provider, Retrieval};

/// Jobs taken per duty per round.
const PAGE: u32 = 100;
/// Retrievals in flight at once.
const RETRIEVALS_AT_ONCE: usize = 8;

/// What one round did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Round {
    pub recovered: usize,
    pub expired: usize,
    /// Pre-approved replay policies applied.
    pub replayed: usize,
    pub redispatched: usize,
    /// Moves to a dead-letter queue put on their job's timeline (embedded queue).
    pub dead_letters_noted: usize,
}

/// Puts the embedded queue's moves to its dead-letter queue on each job's timeline
/// (`moved_to_dlq`): operators alarm on dead letters and must find why on the job. SQS moves
/// letters out of sight; there the inspected replay records what it finds.
async fn note_dead_letters(ledger: &Ledger) -> Result<usize, LedgerError> {
    let moves = ledger.dead_letters_to_note(PAGE).await?;
    let events: Vec<(String, NewEvent)> = moves
        .iter()
        .filter_map(|m| {
            let job = crate::job::message::parse(&m.body).ok()?;
            let event =
                NewEvent::new(EventKind::MovedToDlq, &Actor::System).detail(detail::MovedToDlq {
                    reason: "max_receive_count".to_owned(),
                    message_id: Some(m.message_id.clone()),
                    receive_count: Some(m.receive_count),
                    from: Some(m.from_queue.clone()),
                });
            Some((job.job_id, event))
        })
        .collect();
    ledger.record_events(&events).await?;
    let ids: Vec<i64> = moves.iter().map(|m| m.id).collect();
    ledger.mark_dead_letters_noted(&ids).await?;
    Ok(events.len())
}

pub async fn reap_once(ledger: &Ledger, quiet: Duration) -> Result<Round, LedgerError> {
    let mut round = Round::default();
    for job_id in ledger.past_deadline(PAGE).await? {
        if ledger.expire_if_due(&job_id, &Actor::System).await? {
            round.expired += 1;
        }
    }
    for job_id in ledger.expired_leases(PAGE).await? {
        match ledger
            .recovery_claim(&job_id, &Actor::System, "lease_expired", true)
            .await
        {
            Ok(recovered) => {
                round.recovered += 1;
                if recovered.state == JobState::Unknown
                    && ledger.apply_replay_policy(&job_id, recovered.epoch).await?
                {
                    round.replayed += 1;
                }
            }
            Err(LedgerError::Refused { .. }) => {}
            Err(error) => return Err(error),
        }
    }
    // Jobs that became `unknown` elsewhere (a worker's hand-back, a process that died) and
    // carry a replay policy.
    for (job_id, epoch) in ledger.unknown_replayable(PAGE).await? {
        if ledger.apply_replay_policy(&job_id, epoch).await? {
            round.replayed += 1;
        }
    }
    round.dead_letters_noted = note_dead_letters(ledger).await?;
    for job_id in ledger.quiet_workable(PAGE, quiet).await? {
        if let Some(job) = ledger.job(&job_id).await? {
            if matches!(job.state, JobState::Ready | JobState::RetryAuthorized) {
                ledger.redispatch(&job_id, "reaper").await?;
                round.redispatched += 1;
            }
        }
    }
    Ok(round)
}

/// Where provider retrieval stands in its walk over the `unknown` jobs.
#[derive(Debug, Clone)]
pub struct RetrievalCursor((i64, String));

impl Default for RetrievalCursor {
    fn default() -> Self {
        RetrievalCursor((i64::MIN, String::new()))
    }
}

/// What one retrieval round did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Reconciled {
    /// Jobs whose provider was asked.
    pub asked: usize,
    /// Settled by the provider's answer: found (→ `succeeded`) or never executed (→ retry).
    pub settled: usize,
    /// Marked `retrieval_unsupported`: they wait for an operator's decision.
    pub unsupported: usize,
    /// No conclusive answer within `per_call`: asked again on a later pass.
    pub inconclusive: usize,
}

/// Asks the provider about the next page of `unknown` jobs after `cursor`, a few at a time,
/// each within `per_call`. A job the provider cannot help (no retrieval mechanism, or it is
/// switched off) gets one `retrieval_unsupported` event and is not asked again at that epoch.
pub async fn reconcile_once<P: Provider + Clone>(
    ledger: &Ledger,
    provider: &P,
    cursor: &mut RetrievalCursor,
    per_call: Duration,
) -> Result<Reconciled, LedgerError> {
    let page = ledger.unknown_for_retrieval(&cursor.0, PAGE).await?;
    match page.last() {
        Some(last) if page.len() == PAGE as usize => {
            cursor.0 = (last.updated_at, last.job_id.clone());
        }
        // The end of the walk: start again from the oldest next time.
        _ => *cursor = RetrievalCursor::default(),
    }
    let mut done = Reconciled::default();
    // Only the provider an attempt went to knows of it: a job whose last attempt ran on
    // another (its route moved it on) cannot be helped by asking this one.
    let (mine, elsewhere): (Vec<_>, Vec<_>) = page
        .into_iter()
        .filter(|job| job.last_request.is_some())
        .partition(|job| job.last_provider.as_deref() == Some(provider.name()));
    for job in &elsewhere {
        let ran_on = job.last_provider.as_deref().unwrap_or("another provider");
        let event = NewEvent::new(EventKind::RetrievalUnsupported, &Actor::System)
            .epoch(job.epoch)
            .detail(detail::RetrievalUnsupported {
                why: format!(
                    "its last attempt went to {ran_on}, whose retrieval is not asked: this job \
                     needs a decision"
                ),
            });
        ledger.record_event(&job.job_id, &event).await?;
        done.unsupported += 1;
    }
    let mut pending = mine.into_iter();
    let mut asking = tokio::task::JoinSet::new();
    loop {
        while asking.len() < RETRIEVALS_AT_ONCE {
            let Some(job) = pending.next() else { break };
            let provider = provider.clone();
            asking.spawn(async move {
                let id = job.last_request.clone().unwrap_or_default();
                let answer = tokio::time::timeout(per_call, provider.retrieve(&id))
                    .await
                    .unwrap_or(Retrieval::Inconclusive);
                (job, answer)
            });
        }
        let Some(joined) = asking.join_next().await else {
            break;
        };
        let Ok((job, answer)) = joined else { continue };
        done.asked += 1;
        match settle(ledger, &job, answer).await? {
            Settled::Decided => done.settled += 1,
            Settled::Unsupported => done.unsupported += 1,
            Settled::Open => done.inconclusive += 1,
        }
    }
    Ok(done)
}

enum Settled {
    Decided,
    Unsupported,
    Open,
}

async fn settle(
    ledger: &Ledger,
    job: &UnknownForRetrieval,
    answer: Retrieval,
) -> Result<Settled, LedgerError> {
    let id = job.last_request.as_deref().unwrap_or_default();
    let (decision, reason) = match answer {
        Retrieval::Found(answer) => (
            Decision::ResolveSucceeded {
                result: answer,
                evidence: format!("retrieved from the provider by request {id}"),
            },
            "provider retrieval found the answer",
        ),
        Retrieval::NeverExecuted => (
            Decision::AuthorizeRetry,
            "provider retrieval shows the request never executed",
        ),
        Retrieval::Unsupported => {
            let event = NewEvent::new(EventKind::RetrievalUnsupported, &Actor::System)
                .epoch(job.epoch)
                .detail(detail::RetrievalUnsupported {
                    why: "the provider offers no retrieval (or it is switched off): this job \
                          needs a decision"
                        .to_owned(),
                });
            ledger.record_event(&job.job_id, &event).await?;
            return Ok(Settled::Unsupported);
        }
        Retrieval::Inconclusive => return Ok(Settled::Open),
    };
    match ledger
        .decide(&job.job_id, job.epoch, &decision, &Actor::System, reason)
        .await
    {
        Ok(_) => Ok(Settled::Decided),
        Err(LedgerError::Refused { .. }) => Ok(Settled::Open),
        Err(error) => Err(error),
    }
}

/// Cancels at the provider the requests running in the background that no job waits for any
/// more (a held attempt whose job an operator cancelled, say), a few at a time, each on its
/// job's timeline (`upstream_cancelled`, why: the job's state); how many were asked.
pub async fn cancel_orphaned_once<P: Provider>(
    ledger: &Ledger,
    provider: &P,
) -> Result<usize, LedgerError> {
    if !provider.retains() {
        return Ok(0);
    }
    let orphans = ledger.orphaned_responses(provider.name(), 20).await?;
    for orphan in &orphans {
        let answer =
            match tokio::time::timeout(RETRIEVAL_BOUND, provider.cancel(&orphan.provider_id)).await
            {
                Ok(Ok(())) => "cancelled".to_owned(),
                Ok(Err(code)) => code,
                Err(_) => "timeout".to_owned(),
            };
        let event = NewEvent::new(EventKind::UpstreamCancelled, &Actor::System)
            .epoch(orphan.epoch)
            .attempt(orphan.attempt_no)
            .detail(detail::UpstreamCancelled {
                provider_id: orphan.provider_id.clone(),
                why: orphan.state.clone(),
                answer,
            });
        ledger.record_event(&orphan.job_id, &event).await?;
    }
    Ok(orphans.len())
}

/// Reaps every `interval` until `shutdown`, and runs provider retrieval beside it in its own
/// task. Workable jobs quiet for `quiet` are re-sent.
pub async fn run<P: Provider + Clone>(
    ledger: Ledger,
    provider: P,
    interval: Duration,
    quiet: Duration,
    shutdown: CancellationToken,
) {
    let retrieval = tokio::spawn(run_retrieval(
        ledger.clone(),
        provider,
        interval,
        shutdown.clone(),
    ));
    let mut pruned_at = tokio::time::Instant::now();
    loop {
        if let Err(error) = reap_once(&ledger, quiet).await {
            tracing::warn!(%error, "reaper round failed");
        }
        // Expired console sessions and old sign-in failures go every few minutes.
        if pruned_at.elapsed() >= SESSION_PRUNE_EVERY {
            pruned_at = tokio::time::Instant::now();
            if let Err(error) = ledger.prune_sessions().await {
                tracing::warn!(%error, "pruning expired sessions failed");
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(interval) => {}
        }
    }
    let _ = retrieval.await;
}

/// How often the reaper deletes expired console sessions and old sign-in failures.
const SESSION_PRUNE_EVERY: Duration = Duration::from_secs(300);

/// How long one provider lookup may take before it counts as inconclusive.
const RETRIEVAL_BOUND: Duration = Duration::from_secs(10);

async fn run_retrieval<P: Provider + Clone>(
    ledger: Ledger,
    provider: P,
    interval: Duration,
    shutdown: CancellationToken,
) {
    let mut cursor = RetrievalCursor::default();
    loop {
        let round = tokio::select! {
            _ = shutdown.cancelled() => return,
            round = reconcile_once(&ledger, &provider, &mut cursor, RETRIEVAL_BOUND) => round,
        };
        if let Err(error) = round {
            tracing::warn!(%error, "provider retrieval round failed");
        }
        let cancelled = tokio::select! {
            _ = shutdown.cancelled() => return,
            cancelled = cancel_orphaned_once(&ledger, &provider) => cancelled,
        };
        if let Err(error) = cancelled {
            tracing::warn!(%error, "cancelling orphaned responses failed");
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(interval) => {}
        }
    }
}
