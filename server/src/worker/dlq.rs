//! Dead-letter replay, inspected: a message's transport history says nothing about its job's
//! outcome, so each dead letter is checked against the ledger before anything is sent again.
//! Terminal job → the dead letter is dropped; `unknown` → it stays until a decision is
//! recorded; workable → the job is re-dispatched through the outbox (same job id, deadline and
//! cumulative attempt budget) and the dead letter is dropped; not a job message → it stays.

use std::time::Duration;

use crate::job::detail;
use crate::job::message;
use crate::job::{Actor, EventKind, JobState};
use crate::ledger::{Ledger, LedgerError, NewEvent};
use crate::queue::{Queue, QueueError};

/// What one replay pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Replay {
    pub redispatched: usize,
    pub dropped_terminal: usize,
    pub awaiting_decision: usize,
    pub not_job_messages: usize,
    /// Each inspected job, and what was done with its letter.
    pub jobs: Vec<Inspected>,
}

/// One inspected dead letter's job: as it stood when inspected, and the letter's fate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inspected {
    pub job_id: String,
    pub state: JobState,
    pub epoch: i64,
    pub action: &'static str,
}

#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("this queue has no dead-letter queue")]
    NoDeadLetterQueue,
    #[error(transparent)]
    Queue(#[from] QueueError),
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

/// Replays up to `max` dead letters of `queue`, inspecting the ledger first.
pub async fn replay_inspected<Q: Queue>(
    ledger: &Ledger,
    queue: &Q,
    actor: &Actor,
    max: usize,
) -> Result<Replay, ReplayError> {
    let dlq = queue.dead_letters().ok_or(ReplayError::NoDeadLetterQueue)?;
    let mut replay = Replay::default();
    let mut seen = 0;
    while seen < max {
        // Hidden for a minute while inspected; what stays becomes visible again.
        let batch = dlq
            .receive(
                (max - seen).min(10),
                Duration::from_secs(60),
                Duration::ZERO,
            )
            .await?;
        if batch.is_empty() {
            break;
        }
        seen += batch.len();
        for dead in batch {
            let Ok(msg) = message::parse(&dead.body) else {
                replay.not_job_messages += 1;
                continue;
            };
            let Some(job) = ledger.job(&msg.job_id).await? else {
                replay.not_job_messages += 1;
                continue;
            };
            // Each inspected letter's fate goes on its job's timeline, with who replayed.
            let action = match job.state {
                state if state.is_terminal() => {
                    dlq.delete(&dead.receipt).await?;
                    replay.dropped_terminal += 1;
                    "dropped_terminal"
                }
                JobState::Unknown => {
                    replay.awaiting_decision += 1;
                    "kept_awaiting_decision"
                }
                _ => {
                    ledger.redispatch(&job.job_id, "dlq_replay").await?;
                    dlq.delete(&dead.receipt).await?;
                    replay.redispatched += 1;
                    "redispatched"
                }
            };
            let event = NewEvent::new(EventKind::Replayed, actor).detail(detail::Replayed {
                from: "dead_letter_queue".to_owned(),
                action: action.to_owned(),
                message_id: dead.message_id.clone(),
                receive_count: Some(i64::from(dead.receive_count)),
                state: job.state.as_str().to_owned(),
            });
            ledger.record_event(&job.job_id, &event).await?;
            replay.jobs.push(Inspected {
                job_id: job.job_id.clone(),
                state: job.state,
                epoch: job.owner_epoch,
                action,
            });
        }
    }
    Ok(replay)
}
