//! The outbox dispatcher: sends due outbox rows to the queue and marks them dispatched, a round
//! at a time. A round is what one request to the queue carries ([`Queue::send_round`]: ten
//! messages on SQS), so it lasts one request, well inside its rows' lock, and is recorded before
//! the next: a slow queue, a lost database or a dispatcher that dies leaves at most one round
//! sent but unrecorded, sent again after its lock lapses (duplicates carry the same job id and
//! are harmless), and several dispatchers share a backlog. Safe in several processes: rows are
//! claimed with a lock. A queue kept in the ledger itself (the embedded queue) takes a round in
//! one transaction of the ledger's instead ([`Ledger::dispatch_into`]): nothing is ever sent
//! but unrecorded there.
//!
//! It is also where flow control meters work ([`Meter`]): rows go in fair-queue order, so
//! tenants take turns however long one's backlog is; a tenant with a cap has at most that many
//! jobs sent or running; and the queue is kept short — within about twice what the live workers
//! can hold — so jobs wait in the ledger, where their turn is decided, rather than in a queue
//! that cannot be read by tenant, and a quiet tenant's new job starts within a few calls' time.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::faults::{FaultPoint, Faults};
use crate::job::message::JobMessage;
use crate::ledger::{Ledger, LedgerError};
use crate::metrics::Metrics;
use crate::queue::{Queue, MAX_BATCH};

/// How soon a metered dispatcher looks again when the queue had no room.
const FULL: Duration = Duration::from_millis(25);

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

/// How a dispatcher keeps the queue short.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Meter {
    /// Within twice what the live workers of the queue report they can hold (at least a
    /// round's worth).
    Fleet,
    /// Within this many messages waiting.
    Fixed(usize),
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
    /// How the queue is kept short; `None` sends whatever is due.
    pub meter: Option<Meter>,
}

impl Default for Lane {
    fn default() -> Self {
        Lane {
            drill_run: String::new(),
            lock: LOCK,
            faults: None,
            meter: None,
        }
    }
}

impl Lane {
    /// The lane of every job no drill made, metered as `serve` and `worker` run it.
    pub fn metered(meter: Meter) -> Lane {
        Lane {
            meter: Some(meter),
            ..Lane::default()
        }
    }
}

/// How long what the ledger says of the fleet and of tenants' shares is taken as current.
const RECHECK: Duration = Duration::from_secs(1);

/// What a metered dispatcher keeps between rounds.
#[derive(Debug, Default)]
pub struct Metering {
    fleet: Option<(i64, Instant)>,
    shares: Option<(Vec<crate::ledger::TenantShare>, Instant)>,
    /// The queue could not say how many messages wait (said once).
    blind: bool,
}

/// A round's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Round {
    pub sent: usize,
    /// The queue had no room for more: the next round waits for workers to take some.
    pub full: bool,
}

impl Metering {
    async fn fleet<Q: Queue>(&mut self, ledger: &Ledger, queue: &Q) -> i64 {
        match self.fleet {
            Some((n, at)) if at.elapsed() < RECHECK => n,
            _ => {
                let n = ledger
                    .fleet_capacity(&queue.describe(), super::presence::SILENT_AFTER)
                    .await
                    .unwrap_or(0);
                self.fleet = Some((n, Instant::now()));
                n
            }
        }
    }

    async fn shares(&mut self, ledger: &Ledger) -> Vec<crate::ledger::TenantShare> {
        match &self.shares {
            Some((shares, at)) if at.elapsed() < RECHECK => shares.clone(),
            _ => {
                let shares = ledger.tenant_shares().await.unwrap_or_default();
                self.shares = Some((shares.clone(), Instant::now()));
                shares
            }
        }
    }

    /// How many more messages the queue takes now (`None`: as many as are due, the queue
    /// cannot say how many wait), and each capped tenant's room.
    async fn room<Q: Queue>(
        &mut self,
        ledger: &Ledger,
        queue: &Q,
        meter: Meter,
    ) -> Result<(Option<usize>, HashMap<String, i64>), LedgerError> {
        let mut caps = HashMap::new();
        for share in self.shares(ledger).await {
            if let Some(cap) = share.max_in_flight {
                let held = ledger.tenant_in_flight(&share.tenant).await?;
                caps.insert(share.tenant, (cap - held).max(0));
            }
        }
        let target = match meter {
            Meter::Fixed(n) => n,
            Meter::Fleet => {
                let fleet = usize::try_from(self.fleet(ledger, queue).await).unwrap_or(0);
                (2 * fleet).max(MAX_BATCH)
            }
        };
        let waiting = match queue.depth().await {
            Ok(depth) => usize::try_from(depth.visible + depth.delayed).unwrap_or(0),
            Err(error) => {
                if !self.blind {
                    self.blind = true;
                    tracing::warn!(%error, "the queue does not say how many messages wait: \
                        dispatching without keeping it short");
                }
                return Ok((None, caps));
            }
        };
        Ok((Some(target.saturating_sub(waiting)), caps))
    }
}

/// New jobs may go straight to a queue in the ledger only while nothing waits for its turn in
/// the outbox (a round took fewer rows than it asked for) and the queue has room left; never a
/// capped tenant's. Without a meter (`room` unknown), nothing changes.
fn meter_direct(
    ledger: &Ledger,
    room: Option<usize>,
    caps: &HashMap<String, i64>,
    asked: u32,
    taken: usize,
) {
    let Some(room) = room else {
        return;
    };
    let left = if taken < asked as usize {
        room.saturating_sub(taken)
    } else {
        0
    };
    let capped: HashSet<String> = caps.keys().cloned().collect();
    ledger.meter_direct(i64::try_from(left).unwrap_or(i64::MAX), capped);
}

/// Sends one round of due rows, counting them in `metrics`; returns how many were sent.
pub async fn dispatch_once<Q: Queue>(
    ledger: &Ledger,
    queue: &Q,
    limit: u32,
    metrics: &Metrics,
) -> Result<usize, LedgerError> {
    let mut metering = Metering::default();
    let lane = Lane::default();
    let round = dispatch_lane(ledger, queue, limit, metrics, &lane, &mut metering).await?;
    Ok(round.sent)
}

/// [`dispatch_once`] for one lane, metered as it says.
pub async fn dispatch_lane<Q: Queue>(
    ledger: &Ledger,
    queue: &Q,
    limit: u32,
    metrics: &Metrics,
    lane: &Lane,
    metering: &mut Metering,
) -> Result<Round, LedgerError> {
    let (room, caps) = match lane.meter {
        Some(meter) => metering.room(ledger, queue, meter).await?,
        None => (None, HashMap::new()),
    };
    let asked = room.map_or(limit, |room| {
        limit.min(u32::try_from(room).unwrap_or(u32::MAX))
    });
    // A queue kept in the ledger itself takes the whole round in one transaction of it: rows
    // claimed, messages written, rows recorded as sent. A drill's lane goes the long way,
    // where its faults are armed.
    let kept = match (&lane.faults, lane.drill_run.as_str()) {
        (None, "") => queue.kept_in(ledger),
        _ => None,
    };
    if let (Some((name, sent)), true) = (&kept, asked > 0) {
        let done = ledger
            .dispatch_into(name, &queue.describe(), asked, &caps)
            .await?;
        if !done.is_empty() {
            sent.notify_waiters();
        }
        metrics.dispatch(done.len() as u64, 0);
        meter_direct(ledger, room, &caps, asked, done.len());
        return Ok(Round {
            sent: done.len(),
            full: room.is_some_and(|room| room <= done.len()),
        });
    }
    let mut items = if asked == 0 {
        Vec::new()
    } else {
        ledger
            .claim_outbox_capped(asked, lane.lock, &lane.drill_run, &caps)
            .await?
    };
    if lane.drill_run.is_empty() {
        meter_direct(ledger, room, &caps, asked, items.len());
    }
    let full = room.is_some_and(|room| room <= items.len());
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
    ledger
        .mark_dispatched(&sent, &queue.describe(), &lane.drill_run)
        .await?;
    Ok(Round {
        sent: sent.len(),
        full,
    })
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
    let mut metering = Metering::default();
    loop {
        let sent = dispatch_lane(&ledger, &queue, round, &metrics, &lane, &mut metering).await;
        let pause = match sent {
            // The queue is full: look again soon, as workers take messages.
            Ok(Round { full: true, .. }) => FULL.min(idle),
            Ok(Round { sent: 0, .. }) => idle,
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
