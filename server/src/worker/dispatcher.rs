//! The outbox dispatcher: sends due outbox rows to the queue and marks them dispatched, a round
//! at a time. A round is what one request to the queue carries ([`Queue::send_round`]: ten
//! messages on SQS), so it lasts one request, well inside its rows' lock, and is recorded before
//! the next: a slow queue, a lost database or a dispatcher that dies leaves at most one round
//! sent but unrecorded, sent again after its lock lapses (duplicates carry the same job id and
//! are harmless), and several dispatchers share a backlog. Safe in several processes: rows are
//! claimed with a lock.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::message::JobMessage;
use crate::drill::faults::{FaultPoint, Faults};
use crate::ledger::{Ledger, LedgerError};
use crate::metrics::Metrics;
use crate::queue::Queue;

/// How long a claimed row is held before another dispatcher may send it again.
const LOCK: Duration = Duration::from_secs(30);

/// How long a row whose send failed waits before the next try: a second after the first
/// failure, doubled with each one after, at most a minute. A queue that is struggling (sends
/// timing out) is not asked again at once for everything it could not take.
fn retry_after(send_attempts: i64) -> Duration {
    super::doubled(
        Duration::from_secs(1),
        send_attempts,
        Duration::from_secs(60),
    )
}

/// Which outbox rows a dispatcher sends, and how.
#[derive(Debug, Clone)]
pub struct Lane {
    /// `""` for every job no drill made; a drill's run id for that run's jobs only.
    pub drill_run: String,
    /// How long a claimed row is held before it may be sent again.
    pub lock: Duration,
    /// A drill's per-job faults.
    pub faults: Option<Faults>,
}

impl Default for Lane {
    fn default() -> Self {
        Lane {
            drill_run: String::new(),
            lock: LOCK,
            faults: None,
        }
    }
}

/// Sends one round of due rows, counting them in `metrics`; returns how many were sent.
pub async fn dispatch_once<Q: Queue>(
    ledger: &Ledger,
    queue: &Q,
    limit: u32,
    metrics: &Metrics,
) -> Result<usize, LedgerError> {
    dispatch_lane(ledger, queue, limit, metrics, &Lane::default()).await
}

/// [`dispatch_once`] for one lane.
pub async fn dispatch_lane<Q: Queue>(
    ledger: &Ledger,
    queue: &Q,
    limit: u32,
    metrics: &Metrics,
    lane: &Lane,
) -> Result<usize, LedgerError> {
    let mut items = ledger
        .claim_outbox(limit, lane.lock, &lane.drill_run)
        .await?;
    if let Some(faults) = &lane.faults {
        // The dispatcher died holding these rows: they stay claimed, unsent, until the lock
        // lapses and a dispatcher sends them again.
        items.retain(|item| {
            faults
                .fire(&item.job_id, FaultPoint::DispatchCrashBeforeSend)
                .is_none()
        });
    }
    let bodies: Vec<String> = items
        .iter()
        .map(|item| JobMessage::body(&item.job_id, &item.tenant))
        .collect();
    let results = queue.send_all(&bodies).await;
    let mut sent = Vec::with_capacity(items.len());
    for (item, result) in items.iter().zip(results) {
        match result {
            Ok(message_id) => sent.push((item.clone(), message_id)),
            Err(error) => {
                let retry_in = retry_after(item.send_attempts);
                ledger.dispatch_failed(item, error.code(), retry_in).await?
            }
        }
    }
    metrics.dispatch(sent.len() as u64, (items.len() - sent.len()) as u64);
    ledger.mark_dispatched(&sent, &queue.describe()).await?;
    Ok(sent.len())
}

/// Dispatches until `shutdown`, polling every `idle` when there is nothing to send.
pub async fn run<Q: Queue>(
    ledger: Ledger,
    queue: Q,
    idle: Duration,
    metrics: Metrics,
    shutdown: CancellationToken,
) {
    run_lane(ledger, queue, idle, metrics, Lane::default(), shutdown).await
}

/// [`run`] for one lane.
pub async fn run_lane<Q: Queue>(
    ledger: Ledger,
    queue: Q,
    idle: Duration,
    metrics: Metrics,
    lane: Lane,
    shutdown: CancellationToken,
) {
    let round = u32::try_from(queue.send_round()).unwrap_or(u32::MAX);
    loop {
        let pause = match dispatch_lane(&ledger, &queue, round, &metrics, &lane).await {
            Ok(0) => idle,
            Ok(_) => Duration::ZERO,
            Err(error) => {
                tracing::warn!(%error, "dispatch failed");
                idle.max(Duration::from_millis(500))
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(pause) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_send_waits_longer_each_time_up_to_a_minute() {
        let waits: Vec<u64> = (1..=9).map(|n| retry_after(n).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(retry_after(0), Duration::from_secs(1));
        assert_eq!(retry_after(i64::MAX), Duration::from_secs(60));
    }
}
