//! The heartbeat: one task per worker renews queue visibility and ledger leases of every
//! in-flight job, separately and in batches, on each job's own schedule, within the fixed
//! deadline and the 12-hour visibility cap. It records each renewal's outcome (a timed-out
//! renewal is uncertain, not a success) and stops a job's work when its lease is lost, its
//! deadline is reached, or the progress rule fails.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::faults::sabotage::Safeguard;
use crate::job::detail;

use super::Shared;
use crate::job::{Actor, EventKind};
use crate::ledger::{
    DeliveryRef, LedgerError, NewEvent, RenewBoth, Renewal, RenewedWithVisibility, VisibilityChange,
};
use crate::metrics::{Outcome, RenewalKind};
use crate::provider::{Progress, Provider};
use crate::queue::{Queue, QueueError, ReceiptHandle, VISIBILITY_CAP};

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

/// The wall clock in milliseconds: only for the queue's own timestamps (first receive), never
/// compared with the ledger's clock.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// One job this worker owns and is working on, at one epoch.
pub(crate) struct InFlight {
    pub(crate) receipt: ReceiptHandle,
    pub(crate) delivery: DeliveryRef,
    pub(crate) first_receive_at_ms: i64,
    /// The job's fixed deadline, on this process's monotonic clock.
    pub(crate) deadline: Instant,
    /// Until when the ledger has *confirmed* this owner's lease, on the monotonic clock:
    /// measured from just before the request whose answer granted it, so never later than
    /// the lease the database holds. Work stops before it, whatever the renewals are doing.
    pub(crate) lease_confirmed_until: Instant,
    pub(crate) next_renewal: Instant,
    pub(crate) progress: Progress,
    pub(crate) stop: watch::Sender<Option<StopReason>>,
    /// The delivery's trace span: each renewal's span goes under it.
    pub(crate) span: tracing::Span,
}

impl InFlight {
    fn stop(&self, reason: StopReason) {
        if self.stop.borrow().is_none() {
            let _ = self.stop.send(Some(reason));
        }
    }
}

/// What is left of a delivery's 12-hour visibility chain (counted from its first receive, on
/// the queue's clock), less `margin`: no visibility change may reach past it.
pub(crate) fn cap_left(first_receive_at_ms: i64, now_ms: i64, margin: Duration) -> Duration {
    let left = first_receive_at_ms + VISIBILITY_CAP.as_millis() as i64 - now_ms;
    Duration::from_millis(u64::try_from(left).unwrap_or(0)).saturating_sub(margin)
}

/// A database time span (`later - earlier`, microseconds) as a duration, never negative.
pub(crate) fn db_span(earlier_us: i64, later_us: i64) -> Duration {
    Duration::from_micros(u64::try_from(later_us - earlier_us).unwrap_or(0))
}

/// The jobs in flight in this worker, by job id *and epoch*: the same process may take a job
/// again while an older, fenced-out task for it is still winding down, and each task must
/// only ever touch its own entry.
#[derive(Clone, Default)]
pub(crate) struct Registry(Arc<Mutex<HashMap<(String, i64), InFlight>>>);

impl Registry {
    /// Registers work in flight until the returned guard is dropped: however the work ends —
    /// returned, cancelled with its task, or panicked — the heartbeat stops renewing its lease,
    /// so a job whose work is gone is recovered when its lease runs out, not at its deadline.
    pub(crate) fn insert(&self, job_id: &str, epoch: i64, entry: InFlight) -> Registered {
        let key = (job_id.to_owned(), epoch);
        self.0
            .lock()
            .expect("registry lock")
            .insert(key.clone(), entry);
        Registered {
            registry: self.clone(),
            key,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.0.lock().expect("registry lock").len()
    }

    pub(crate) fn stop_all(&self, reason: StopReason) {
        for entry in self.0.lock().expect("registry lock").values() {
            entry.stop(reason.clone());
        }
    }

    /// Stops work whose deadline has come or whose confirmed lease is within `margin` of
    /// running out. Runs on every heartbeat tick, independently of renewals in flight, so a
    /// renewal that hangs (a locked row, a network black hole) cannot keep a call running
    /// past the lease another worker may then recover.
    pub(crate) fn enforce_bounds(
        &self,
        margin: Duration,
        frozen: impl Fn(&str) -> bool,
        stop_unconfirmed: bool,
    ) {
        let now = Instant::now();
        for ((job_id, _), entry) in self.0.lock().expect("registry lock").iter() {
            if frozen(job_id) {
                continue;
            }
            if now >= entry.deadline {
                entry.stop(StopReason::DeadlineReached);
            } else if stop_unconfirmed && now + margin >= entry.lease_confirmed_until {
                entry.stop(StopReason::LeaseLost("lease_unconfirmed".into()));
            }
        }
    }
}

/// One entry of the [`Registry`], removed when this is dropped.
pub(crate) struct Registered {
    registry: Registry,
    key: (String, i64),
}

impl Drop for Registered {
    fn drop(&mut self) {
        // A poisoned lock means a panic while it was held: the entry goes with the process.
        if let Ok(mut entries) = self.registry.0.lock() {
            entries.remove(&self.key);
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
    /// What was left of the deadline when the renewal was asked.
    deadline_left: Duration,
    /// The job's delivery span.
    span: tracing::Span,
}

pub(crate) async fn run<Q: Queue, P: Provider>(
    shared: Arc<Shared<Q, P>>,
    shutdown: CancellationToken,
) {
    let mut interval = tokio::time::interval(tick(&shared.config.timings));
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Rounds overlap, so one slow round does not delay the next jobs' renewals; a job is in
    // at most one round because collecting it moves its next renewal forward.
    let mut rounds = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = interval.tick() => {}
        }
        shared.registry.enforce_bounds(
            shared.config.timings.margin,
            |job| frozen(&shared, job),
            !sabotaged(&shared, Safeguard::StopOnUnconfirmedLease),
        );
        while rounds.try_join_next().is_some() {}
        if rounds.len() >= 8 {
            continue;
        }
        let shared = Arc::clone(&shared);
        rounds.spawn(async move { renew_due(&shared).await });
    }
    while rounds.join_next().await.is_some() {}
}

/// Whether a test switched this safeguard off (never outside test builds).
fn sabotaged<Q: Queue, P: Provider>(shared: &Shared<Q, P>, safeguard: Safeguard) -> bool {
    shared
        .config
        .faults
        .as_ref()
        .is_some_and(|f| f.disabled(safeguard))
}

/// Whether a drill froze this job's worker (a paused process renews nothing, checks nothing).
fn frozen<Q: Queue, P: Provider>(shared: &Shared<Q, P>, job_id: &str) -> bool {
    shared
        .config
        .faults
        .as_ref()
        .is_some_and(|f| f.paused_until(job_id, &shared.config.worker_id).is_some())
}

/// How often the heartbeat looks for renewals due: fine enough that a renewal waits at most a
/// small fraction of its interval.
fn tick(t: &super::Timings) -> Duration {
    (t.heartbeat / 100).clamp(Duration::from_millis(10), Duration::from_millis(200))
}

/// The latest schedule a look at `now` asks: every renewal falling due before the heartbeat's
/// next look, so each is asked a fraction of its interval early rather than up to a tick late.
fn due_by(now: Instant, t: &super::Timings) -> Instant {
    now + tick(t)
}

/// The renewal after one scheduled at `scheduled` and asked at `now`: an interval after its own
/// schedule, less one look, so that asked up to a look early it comes back no later than an
/// interval after it was asked. Each job keeps the phase its call began with, and the
/// renewals stay as spread out as the calls that started them. Counted from the look instead,
/// every renewal a look asked came due again at one instant, and where two of those instants
/// fell between two later looks, one round took both. A renewal asked over half an interval
/// late (its process starved) waits half an interval before the next.
fn next_after(scheduled: Instant, now: Instant, t: &super::Timings) -> Instant {
    (scheduled + t.heartbeat.saturating_sub(tick(t))).max(now + t.heartbeat / 2)
}

/// Collects the jobs whose renewal is due ([`due_by`]), stopping those past the deadline or
/// without progress.
fn collect_due<Q: Queue, P: Provider>(shared: &Shared<Q, P>) -> Vec<Due> {
    let t = &shared.config.timings;
    let now = Instant::now();
    let asked_up_to = due_by(now, t);
    let wall = now_ms();
    let mut due = Vec::new();
    let mut entries = shared.registry.0.lock().expect("registry lock");
    for ((job_id, epoch), entry) in entries.iter_mut() {
        if entry.next_renewal > asked_up_to || frozen(shared, job_id) {
            continue;
        }
        if now >= entry.deadline {
            entry.stop(StopReason::DeadlineReached);
            continue;
        }
        if entry.progress.idle_ms() > t.progress_timeout.as_millis() as i64 {
            entry.stop(StopReason::NoProgress);
            continue;
        }
        let scheduled = entry.next_renewal;
        entry.next_renewal = next_after(scheduled, now, t);
        // Never ask past the deadline (plus the margin) or past the 12-hour cap.
        let to_deadline = if sabotaged(shared, Safeguard::CapRenewalsAtDeadline) {
            t.visibility
        } else {
            entry.deadline.saturating_duration_since(now) + t.margin
        };
        let cap_left = cap_left(entry.first_receive_at_ms, wall, t.margin);
        let visibility = t.visibility.min(to_deadline).min(cap_left);
        due.push(Due {
            scheduled,
            job_id: job_id.clone(),
            epoch: *epoch,
            receipt: entry.receipt.clone(),
            delivery: entry.delivery.clone(),
            visibility: (!visibility.is_zero()).then_some(visibility),
            deadline_left: entry.deadline.saturating_duration_since(now),
            span: entry.span.clone(),
        });
    }
    due
}

async fn renew_due<Q: Queue, P: Provider>(shared: &Arc<Shared<Q, P>>) {
    use tracing::Instrument;
    let due = collect_due(shared);
    if due.is_empty() {
        return;
    }
    let round = tracing::info_span!(
        target: crate::telemetry::TARGET,
        "heartbeat.round",
        worker = shared.config.worker_id.as_str(),
        jobs = due.len(),
    );
    // Each job's renewal also shows in its own trace, under its delivery, for the round.
    let _renewals: Vec<tracing::Span> = if crate::telemetry::enabled() {
        due.iter()
            .map(|d| {
                let span = tracing::info_span!(
                    target: crate::telemetry::TARGET,
                    parent: &d.span,
                    "heartbeat.renewal",
                    job_id = d.job_id.as_str(),
                    epoch = d.epoch,
                    deadline_left_ms = d.deadline_left.as_millis() as u64,
                );
                span.follows_from(&round);
                span
            })
            .collect()
    } else {
        Vec::new()
    };
    renew_round(shared, due).instrument(round).await;
}

/// One round's renewals.
async fn renew_round<Q: Queue, P: Provider>(shared: &Arc<Shared<Q, P>>, due: Vec<Due>) {
    let actor = Actor::Worker(shared.config.worker_id.clone());
    // Visibility and lease renew separately: one succeeding proves nothing about the other.
    let t = &shared.config.timings;
    // Every ledger call on this path is bounded: a hung renewal must neither pile rounds up
    // nor be mistaken for a renewal (the bounds check stops the work meanwhile). A slow answer
    // is still worth having while the lease it extends has not run out.
    let bound = t
        .heartbeat
        .max(t.lease.saturating_sub(t.margin))
        .max(Duration::from_millis(500));
    // Where the queue is a table of the ledger itself, a job's visibility changes in the
    // transaction that renews its lease, each still its own compare-and-set; elsewhere (SQS,
    // injected faults) the two go side by side. A drill's `lease.renew` fault keeps a job's
    // lease renewal from getting through, and its visibility apart.
    let mut apart = Vec::new();
    let mut leases = Vec::new();
    let mut together = Vec::new();
    let mut both = Vec::new();
    for d in due {
        let lease_faulted = shared.config.faults.as_ref().is_some_and(|f| {
            f.fire(&d.job_id, crate::faults::FaultPoint::LeaseRenew)
                .is_some()
        });
        let in_ledger = (!lease_faulted)
            .then(|| {
                let timeout = d.visibility.unwrap_or_default();
                shared
                    .queue
                    .visibility_in(&shared.ledger, &d.receipt, timeout)
            })
            .flatten();
        match in_ledger {
            Some(message) => {
                both.push(RenewBoth {
                    job_id: d.job_id.clone(),
                    epoch: d.epoch,
                    visibility: d.visibility.map(|timeout| (message, timeout)),
                });
                together.push(d);
            }
            None => {
                if !lease_faulted {
                    leases.push((d.job_id.clone(), d.epoch));
                }
                apart.push(d);
            }
        }
    }
    let asked = Instant::now();
    let apart_renewed = renew_apart(shared, &apart, &leases, bound, asked);
    let together = Arc::new(together);
    let together_renewed = async {
        if both.is_empty() {
            return;
        }
        // The transaction runs to its end in a task of its own, which alone records what came
        // of its visibility changes: a round that stops waiting for it cannot record them
        // again as uncertain after they were committed.
        let task = tokio::spawn(renew_together(
            Arc::clone(shared),
            Arc::clone(&together),
            both,
            actor.clone(),
            bound,
        ));
        let answered = async {
            task.await
                .unwrap_or_else(|_| Err(LedgerError::Corrupt("renewal task failed".into())))
        };
        match within(bound, answered).await {
            Ok(renewed) => {
                let answered: Vec<&Renewal> = renewed.renewed.iter().map(|(r, _)| r).collect();
                apply_leases(shared, asked, Ok(answered), renewed.renewed.len());
                if let Some(error) = &renewed.failed {
                    let left = together.len() - renewed.renewed.len();
                    apply_leases(shared, asked, Err(error), left);
                }
            }
            Err(error) => apply_leases(shared, asked, Err(&error), together.len()),
        }
    };
    let ((visibility, _), ()) = tokio::join!(apart_renewed, together_renewed);
    // Lateness counts until both renewals have answered, not until they were asked.
    let done = Instant::now();
    for d in apart.iter().chain(together.iter()) {
        let late = done.duration_since(d.scheduled).as_millis();
        shared.stats.record(u32::try_from(late).unwrap_or(u32::MAX));
    }
    tracing::debug!(
        apart = apart.len(),
        together = together.len(),
        took = ?done.duration_since(asked),
        "heartbeat round"
    );
    record_apart(shared, &actor, &apart, visibility, bound).await;
}

/// One round's renewals of jobs whose messages are in the ledger's own queue, in one
/// transaction a chunk, and what came of their visibility changes: those answered are on their
/// timelines already and counted here; those left without an answer (their chunk failed, or its
/// answer was lost) are recorded as uncertain, in a place of their own, once.
async fn renew_together<Q: Queue, P: Provider>(
    shared: Arc<Shared<Q, P>>,
    together: Arc<Vec<Due>>,
    both: Vec<RenewBoth>,
    actor: Actor,
    bound: Duration,
) -> Result<RenewedWithVisibility, LedgerError> {
    let event = |i: usize, change: Option<&VisibilityChange>| {
        let d: &Due = &together[i];
        let outcome = change.map(|c| {
            let timeout = d.visibility.unwrap_or_default();
            (timeout, crate::queue::embedded::visibility_answer(*c))
        });
        visibility_event(&actor, d, outcome)
    };
    let renewed = shared
        .ledger
        .renew_leases_with_visibility(
            &shared.config.worker_id,
            &both,
            shared.config.timings.lease,
            VISIBILITY_CAP,
            event,
        )
        .await;
    let metrics = &shared.config.metrics;
    let mut answered = std::collections::HashSet::with_capacity(renewed.renewed.len());
    for (renewal, change) in &renewed.renewed {
        answered.insert((renewal.job_id.as_str(), renewal.epoch));
        if let Some(change) = change {
            let answer = crate::queue::embedded::visibility_answer(*change);
            metrics.renewal(RenewalKind::Visibility, counted_as(&answer), 1);
        }
    }
    if let Some(error) = &renewed.failed {
        let queue_error = match error {
            LedgerError::TimedOut => QueueError::Timeout,
            other => crate::queue::embedded::unavailable(other),
        };
        let events: Vec<(String, NewEvent)> = together
            .iter()
            .filter(|d| !answered.contains(&(d.job_id.as_str(), d.epoch)))
            .map(|d| {
                let timeout = d.visibility.unwrap_or_default();
                let outcome = d.visibility.map(|_| (timeout, Err(queue_error.clone())));
                if outcome.is_some() {
                    metrics.renewal(RenewalKind::Visibility, Outcome::Uncertain, 1);
                }
                (d.job_id.clone(), visibility_event(&actor, d, outcome))
            })
            .collect();
        record_within(bound, shared.ledger.record_events(&events)).await;
    }
    Ok(renewed)
}

/// Visibility through the queue and leases in the ledger, side by side; each lease confirmed
/// (or its work stopped) the moment the ledger answers.
async fn renew_apart<Q: Queue, P: Provider>(
    shared: &Shared<Q, P>,
    due: &[Due],
    leases: &[(String, i64)],
    bound: Duration,
    asked: Instant,
) -> (Vec<VisibilityOutcome>, Result<Vec<Renewal>, LedgerError>) {
    if due.is_empty() {
        return (Vec::new(), Ok(Vec::new()));
    }
    let visibility = renew_visibility(shared, due);
    let lease = async {
        let renewed = shared.ledger.renew_leases(
            &shared.config.worker_id,
            leases,
            shared.config.timings.lease,
        );
        let lease = within(bound, renewed).await;
        apply_leases(
            shared,
            asked,
            lease.as_ref().map(|r| r.iter().collect()),
            due.len(),
        );
        lease
    };
    tokio::join!(visibility, lease)
}

/// The event for a visibility renewal's outcome (`None`: not asked, the cap or the deadline
/// reached).
fn visibility_event(actor: &Actor, d: &Due, outcome: VisibilityOutcome) -> NewEvent {
    let event = match outcome {
        None => NewEvent::new(EventKind::VisibilityRenewalFailed, actor).detail(
            detail::VisibilityRenewalFailed {
                reason: Some("cap_or_deadline".to_owned()),
                error: None,
                uncertain: false,
            },
        ),
        Some((timeout, Ok(()))) => {
            NewEvent::new(EventKind::VisibilityRenewed, actor).detail(detail::VisibilityRenewed {
                timeout_ms: timeout.as_millis() as i64,
                deadline_left_ms: Some(d.deadline_left.as_millis() as i64),
            })
        }
        Some((_, Err(error))) => NewEvent::new(EventKind::VisibilityRenewalFailed, actor).detail(
            detail::VisibilityRenewalFailed {
                reason: None,
                error: Some(error.code().to_owned()),
                uncertain: error.is_uncertain(),
            },
        ),
    };
    event.epoch(d.epoch).delivery(d.delivery.clone())
}

/// Metrics and events of the renewals made side by side: each visibility outcome takes the
/// next number on its job's timeline when it is written. Its lease renewal reserved none, so a
/// write that never happens (timed out, the worker paused or killed, the ledger restarting)
/// leaves the outcome unrecorded, never a hole.
async fn record_apart<Q: Queue, P: Provider>(
    shared: &Shared<Q, P>,
    actor: &Actor,
    due: &[Due],
    visibility: Vec<VisibilityOutcome>,
    bound: Duration,
) {
    if due.is_empty() {
        return;
    }
    let metrics = &shared.config.metrics;
    for (_, answer) in visibility.iter().flatten() {
        metrics.renewal(RenewalKind::Visibility, counted_as(answer), 1);
    }
    let events: Vec<(String, NewEvent)> = due
        .iter()
        .zip(visibility)
        .map(|(d, outcome)| (d.job_id.clone(), visibility_event(actor, d, outcome)))
        .collect();
    record_within(bound, shared.ledger.record_events(&events)).await;
}

/// A lease renewal's answer, or [`LedgerError::TimedOut`] when none came within `bound`.
async fn within<T>(
    bound: Duration,
    renewed: impl std::future::Future<Output = Result<T, LedgerError>>,
) -> Result<T, LedgerError> {
    tokio::time::timeout(bound, renewed)
        .await
        .unwrap_or(Err(LedgerError::TimedOut))
}

/// Visibility renewals' events, recorded within `bound`; a failure is logged, never retried
/// (the next round renews again).
async fn record_within(
    bound: Duration,
    recorded: impl std::future::Future<Output = Result<(), LedgerError>>,
) {
    match tokio::time::timeout(bound, recorded).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => tracing::warn!(%error, "could not record visibility renewals"),
        Err(_) => tracing::warn!("recording visibility renewals timed out"),
    }
}

/// How a visibility renewal's answer counts in the metrics.
fn counted_as(answer: &Result<(), QueueError>) -> Outcome {
    match answer {
        Ok(()) => Outcome::Ok,
        Err(e) if e.is_uncertain() => Outcome::Uncertain,
        Err(_) => Outcome::Failed,
    }
}

/// What the lease renewals of `asked` came to: each renewed lease confirmed on this worker's
/// clock, each refused one's work stopped. Applied as soon as the ledger answers, never after
/// the queue's answer to the same round's visibility changes: a queue slow to answer must not
/// let the bounds check stop a call whose lease the ledger did renew.
fn apply_leases<Q: Queue, P: Provider>(
    shared: &Shared<Q, P>,
    asked: Instant,
    lease: Result<Vec<&Renewal>, &LedgerError>,
    jobs: usize,
) {
    if jobs == 0 {
        return;
    }
    let metrics = &shared.config.metrics;
    match lease {
        Ok(renewals) => {
            let ok = renewals.iter().filter(|r| r.outcome.is_ok()).count() as u64;
            metrics.renewal(RenewalKind::Lease, Outcome::Ok, ok);
            let refused = renewals.len() as u64 - ok;
            metrics.renewal(RenewalKind::Lease, Outcome::Refused, refused);
            let mut entries = shared.registry.0.lock().expect("registry lock");
            for renewal in renewals {
                let Some(entry) = entries.get_mut(&(renewal.job_id.clone(), renewal.epoch)) else {
                    continue;
                };
                match &renewal.outcome {
                    Ok(until) => {
                        // Rounds overlap and answer in any order; a renewal never shortens
                        // a lease, so the latest confirmation holds.
                        let confirmed = asked + db_span(renewal.at, *until);
                        entry.lease_confirmed_until = entry.lease_confirmed_until.max(confirmed);
                    }
                    Err(refusal) => entry.stop(StopReason::LeaseLost(refusal.code().into())),
                }
            }
        }
        Err(error) => {
            metrics.renewal(RenewalKind::Lease, Outcome::Failed, jobs as u64);
            // Not renewed: the lease runs on what was last confirmed, and the bounds check
            // stops the work before that runs out.
            tracing::warn!(%error, jobs, "lease renewal failed");
        }
    }
}

type VisibilityOutcome = Option<(Duration, Result<(), crate::queue::QueueError>)>;

async fn renew_visibility<Q: Queue, P: Provider>(
    shared: &Shared<Q, P>,
    due: &[Due],
) -> Vec<VisibilityOutcome> {
    let mut outcomes: Vec<VisibilityOutcome> = vec![None; due.len()];
    let wanted: Vec<(usize, Duration)> = due
        .iter()
        .enumerate()
        .filter_map(|(i, d)| d.visibility.map(|v| (i, v)))
        .collect();
    let entries = wanted
        .iter()
        .map(|&(i, v)| (due[i].receipt.clone(), v))
        .collect();
    let results = shared.queue.change_visibility_all(entries).await;
    for ((i, timeout), result) in wanted.into_iter().zip(results) {
        outcomes[i] = Some((timeout, result));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::Timings;

    #[test]
    fn a_renewal_due_before_the_next_tick_is_asked_now_and_a_later_one_waits() {
        let now = Instant::now();
        // The default heartbeat (25 s) looks every 200 ms; the drills' (700 ms) every 10 ms.
        for (timings, tick) in [
            (Timings::default(), Duration::from_millis(200)),
            (Timings::compressed(), Duration::from_millis(10)),
        ] {
            let is_due = |next: Instant| next <= due_by(now, &timings);
            assert!(is_due(now), "due now");
            assert!(is_due(now - tick), "overdue");
            assert!(is_due(now + tick / 2), "due before the next look");
            assert!(is_due(now + tick), "due at the next look");
            assert!(
                !is_due(now + tick + Duration::from_millis(1)),
                "due after the next look: it waits for it"
            );
        }
    }

    #[test]
    fn a_renewal_keeps_its_own_schedule_and_never_comes_back_later_than_an_interval() {
        let look = Instant::now();
        for timings in [Timings::default(), Timings::compressed()] {
            let (every, tick) = (timings.heartbeat, tick(&timings));
            // Two jobs asked by one look, one due at it and one due just before the next: they
            // stay that far apart rather than both coming due an interval after the look.
            let (first, second) = (look, look + tick - Duration::from_millis(1));
            let (a, b) = (
                next_after(first, look, &timings),
                next_after(second, look, &timings),
            );
            assert_eq!(b - a, second - first, "each keeps its own phase");
            // Asked as early as a look allows, the next is still within an interval of the ask.
            assert!(
                b <= look + every,
                "never later than an interval after it was asked"
            );
            assert!(
                a >= look + every - tick,
                "at most a look earlier than an interval"
            );
            // Asked late, it comes back an interval after its schedule (less a look), no later.
            let late = look + Duration::from_millis(3);
            assert_eq!(next_after(look, late, &timings), look + every - tick);
            // Asked over half an interval late, the next waits half an interval.
            let starved = look + every;
            assert_eq!(next_after(look, starved, &timings), starved + every / 2);
        }
    }
}
