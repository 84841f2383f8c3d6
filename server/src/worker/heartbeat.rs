//! The heartbeat: one task per worker renews queue visibility and ledger leases of every
//! in-flight job, separately and in batches, on each job's own schedule, within the fixed
//! deadline and the 12-hour visibility cap. It records each renewal's outcome (a timed-out
//! renewal is uncertain, not a success) and stops a job's work when its lease is lost, its
//! deadline is reached, or the progress rule fails.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::json;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::Shared;
use crate::job::{Actor, EventKind};
use crate::ledger::{DeliveryRef, NewEvent};
use crate::provider::{Progress, Provider};
use crate::queue::{Queue, ReceiptHandle, MAX_BATCH, VISIBILITY_CAP};

/// Why a job's local work must stop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    /// The ledger refused to renew the lease (another owner, or expiry), or renewals kept
    /// failing until the lease was nearly over.
    LeaseLost(String),
    /// No provider progress for longer than the progress rule allows.
    NoProgress,
    /// The job's fixed deadline was reached.
    DeadlineReached,
    /// The worker is shutting down.
    Shutdown,
}

impl StopReason {
    pub fn code(&self) -> &str {
        match self {
            StopReason::LeaseLost(code) => code,
            StopReason::NoProgress => "no_progress",
            StopReason::DeadlineReached => "deadline_reached",
            StopReason::Shutdown => "shutdown",
        }
    }
}

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// One job this worker owns and is working on.
pub(crate) struct InFlight {
    pub(crate) epoch: i64,
    pub(crate) receipt: ReceiptHandle,
    pub(crate) delivery: DeliveryRef,
    pub(crate) first_receive_at_ms: i64,
    pub(crate) deadline_at_ms: i64,
    pub(crate) lease_until_ms: i64,
    pub(crate) next_renewal: Instant,
    pub(crate) progress: Progress,
    pub(crate) stop: watch::Sender<Option<StopReason>>,
}

/// The jobs in flight in this worker, by job id.
#[derive(Clone, Default)]
pub(crate) struct Registry(Arc<Mutex<HashMap<String, InFlight>>>);

impl Registry {
    pub(crate) fn insert(&self, job_id: &str, entry: InFlight) {
        self.0
            .lock()
            .expect("registry lock")
            .insert(job_id.to_owned(), entry);
    }

    pub(crate) fn remove(&self, job_id: &str) {
        self.0.lock().expect("registry lock").remove(job_id);
    }

    pub(crate) fn len(&self) -> usize {
        self.0.lock().expect("registry lock").len()
    }

    pub(crate) fn stop_all(&self, reason: StopReason) {
        for entry in self.0.lock().expect("registry lock").values() {
            let _ = entry.stop.send(Some(reason.clone()));
        }
    }
}

/// Renewal lateness samples (milliseconds past each renewal's schedule).
#[derive(Clone, Default)]
pub struct RenewalStats(Arc<Mutex<Vec<u32>>>);

impl RenewalStats {
    fn record(&self, late_ms: u32) {
        self.0.lock().expect("stats lock").push(late_ms);
    }

    /// `(count, p50, p99, max)` in milliseconds.
    pub fn summary(&self) -> (usize, u32, u32, u32) {
        let mut samples = self.0.lock().expect("stats lock").clone();
        if samples.is_empty() {
            return (0, 0, 0, 0);
        }
        samples.sort_unstable();
        let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
        (
            samples.len(),
            at(0.5),
            at(0.99),
            *samples.last().unwrap_or(&0),
        )
    }

    pub fn clear(&self) {
        self.0.lock().expect("stats lock").clear();
    }
}

struct Due {
    /// When this renewal was due, for the lateness measure.
    scheduled: Instant,
    job_id: String,
    epoch: i64,
    receipt: ReceiptHandle,
    delivery: DeliveryRef,
    visibility: Option<Duration>,
}

pub(crate) async fn run<Q: Queue, P: Provider>(
    shared: Arc<Shared<Q, P>>,
    shutdown: CancellationToken,
) {
    // Fine enough that a renewal waits at most a small fraction of its interval.
    let tick = (shared.config.timings.heartbeat / 100)
        .clamp(Duration::from_millis(10), Duration::from_millis(200));
    let mut interval = tokio::time::interval(tick);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Rounds overlap, so one slow round does not delay the next jobs' renewals; a job is in
    // at most one round because collecting it moves its next renewal forward.
    let mut rounds = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = interval.tick() => {}
        }
        while rounds.try_join_next().is_some() {}
        if rounds.len() >= 8 {
            continue;
        }
        let shared = Arc::clone(&shared);
        rounds.spawn(async move { renew_due(&shared).await });
    }
    while rounds.join_next().await.is_some() {}
}

/// Collects the jobs whose renewal is due, stopping those past the deadline or without
/// progress.
fn collect_due<Q: Queue, P: Provider>(shared: &Shared<Q, P>) -> Vec<Due> {
    let t = &shared.config.timings;
    let now = Instant::now();
    let wall = now_ms();
    let mut due = Vec::new();
    let mut entries = shared.registry.0.lock().expect("registry lock");
    for (job_id, entry) in entries.iter_mut() {
        if entry.next_renewal > now {
            continue;
        }
        if wall >= entry.deadline_at_ms {
            let _ = entry.stop.send(Some(StopReason::DeadlineReached));
            continue;
        }
        if entry.progress.idle_ms() > t.progress_timeout.as_millis() as i64 {
            let _ = entry.stop.send(Some(StopReason::NoProgress));
            continue;
        }
        let scheduled = entry.next_renewal;
        entry.next_renewal = now + t.heartbeat;
        // Never ask past the deadline (plus the margin) or past the 12-hour cap.
        let to_deadline =
            Duration::from_millis((entry.deadline_at_ms - wall).max(0) as u64) + t.margin;
        let cap_left =
            (entry.first_receive_at_ms + VISIBILITY_CAP.as_millis() as i64 - wall).max(0) as u64;
        let cap_left = Duration::from_millis(cap_left).saturating_sub(t.margin);
        let visibility = t.visibility.min(to_deadline).min(cap_left);
        due.push(Due {
            scheduled,
            job_id: job_id.clone(),
            epoch: entry.epoch,
            receipt: entry.receipt.clone(),
            delivery: entry.delivery.clone(),
            visibility: (!visibility.is_zero()).then_some(visibility),
        });
    }
    due
}

async fn renew_due<Q: Queue, P: Provider>(shared: &Arc<Shared<Q, P>>) {
    let due = collect_due(shared);
    if due.is_empty() {
        return;
    }
    let actor = Actor::Worker(shared.config.worker_id.clone());
    // Visibility and lease renew separately: one succeeding proves nothing about the other.
    let visibility = renew_visibility(shared, &due);
    let leases: Vec<(String, i64)> = due.iter().map(|d| (d.job_id.clone(), d.epoch)).collect();
    let lease = shared.ledger.renew_leases(
        &shared.config.worker_id,
        &leases,
        shared.config.timings.lease,
    );
    let asked = Instant::now();
    let visibility = async {
        let out = visibility.await;
        (out, asked.elapsed())
    };
    let lease = async {
        let out = lease.await;
        (out, asked.elapsed())
    };
    let ((visibility, visibility_took), (lease, lease_took)) = tokio::join!(visibility, lease);
    tracing::debug!(
        jobs = due.len(),
        ?visibility_took,
        ?lease_took,
        "heartbeat round"
    );
    // Lateness counts until both renewals have answered, not until they were asked.
    let done = Instant::now();
    for d in &due {
        let late = done.duration_since(d.scheduled).as_millis();
        shared.stats.record(u32::try_from(late).unwrap_or(u32::MAX));
    }

    let mut events = Vec::with_capacity(due.len());
    {
        use crate::metrics::{Renewal, METRICS};
        for outcome in visibility.iter().flatten() {
            match &outcome.1 {
                Ok(()) => METRICS.renewal(Renewal::VisibilityOk, 1),
                Err(e) if e.is_uncertain() => METRICS.renewal(Renewal::VisibilityUncertain, 1),
                Err(_) => METRICS.renewal(Renewal::VisibilityFailed, 1),
            }
        }
        match &lease {
            Ok(renewals) => {
                let ok = renewals.iter().filter(|r| r.outcome.is_ok()).count() as u64;
                METRICS.renewal(Renewal::LeaseOk, ok);
                METRICS.renewal(Renewal::LeaseRefused, renewals.len() as u64 - ok);
            }
            Err(_) => METRICS.renewal(Renewal::LeaseFailed, due.len() as u64),
        }
    }
    for (d, outcome) in due.iter().zip(visibility) {
        let event = match outcome {
            None => NewEvent::new(EventKind::VisibilityRenewalFailed, &actor)
                .detail(json!({ "reason": "cap_or_deadline", "uncertain": false })),
            Some((timeout, Ok(()))) => NewEvent::new(EventKind::VisibilityRenewed, &actor)
                .detail(json!({ "timeout_ms": timeout.as_millis() as i64 })),
            Some((_, Err(error))) => NewEvent::new(EventKind::VisibilityRenewalFailed, &actor)
                .detail(json!({ "error": error.code(), "uncertain": error.is_uncertain() })),
        };
        events.push((
            d.job_id.clone(),
            event.epoch(d.epoch).delivery(d.delivery.clone()),
        ));
    }
    if let Err(error) = shared.ledger.record_events(&events).await {
        tracing::warn!(%error, "could not record visibility renewals");
    }

    match lease {
        Ok(renewals) => {
            let mut entries = shared.registry.0.lock().expect("registry lock");
            for renewal in renewals {
                match renewal.outcome {
                    Ok(until_us) => {
                        if let Some(entry) = entries.get_mut(&renewal.job_id) {
                            entry.lease_until_ms = until_us / 1000;
                        }
                    }
                    Err(refusal) => {
                        if let Some(entry) = entries.get(&renewal.job_id) {
                            let _ = entry
                                .stop
                                .send(Some(StopReason::LeaseLost(refusal.code().into())));
                        }
                    }
                }
            }
        }
        Err(error) => {
            // The ledger did not answer: the lease is not renewed. Stop work whose lease is
            // about to run out rather than let it run on unfenced.
            tracing::warn!(%error, "lease renewal failed");
            let wall = now_ms();
            let margin = shared.config.timings.margin.as_millis() as i64;
            let entries = shared.registry.0.lock().expect("registry lock");
            for d in &due {
                if let Some(entry) = entries.get(&d.job_id) {
                    if entry.lease_until_ms - wall <= margin {
                        let _ = entry
                            .stop
                            .send(Some(StopReason::LeaseLost("renewal_failed".into())));
                    }
                }
            }
        }
    }
}

type VisibilityOutcome = Option<(Duration, Result<(), crate::queue::QueueError>)>;

async fn renew_visibility<Q: Queue, P: Provider>(
    shared: &Shared<Q, P>,
    due: &[Due],
) -> Vec<VisibilityOutcome> {
    let mut outcomes: Vec<VisibilityOutcome> = vec![None; due.len()];
    let wanted: Vec<(usize, ReceiptHandle, Duration)> = due
        .iter()
        .enumerate()
        .filter_map(|(i, d)| d.visibility.map(|v| (i, d.receipt.clone(), v)))
        .collect();
    let mut batches = tokio::task::JoinSet::new();
    for chunk in wanted.chunks(MAX_BATCH) {
        let queue = shared.queue.clone();
        let chunk = chunk.to_vec();
        batches.spawn(async move {
            let entries: Vec<_> = chunk.iter().map(|(_, r, v)| (r.clone(), *v)).collect();
            let results = match queue.change_visibility_batch(&entries).await {
                Ok(results) => results,
                Err(error) => vec![Err(error); chunk.len()],
            };
            chunk
                .into_iter()
                .zip(results)
                .map(|((i, _, v), r)| (i, v, r))
                .collect::<Vec<_>>()
        });
    }
    while let Some(joined) = batches.join_next().await {
        if let Ok(results) = joined {
            for (i, timeout, result) in results {
                outcomes[i] = Some((timeout, result));
            }
        }
    }
    outcomes
}

/// The delivery reference events carry: never the handle itself.
pub(crate) fn delivery_ref(
    message_id: &str,
    receive_count: u32,
    receipt: &ReceiptHandle,
) -> DeliveryRef {
    DeliveryRef {
        message_id: message_id.to_owned(),
        receive_count: i64::from(receive_count),
        handle_hash: receipt.fingerprint(),
    }
}
