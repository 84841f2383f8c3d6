//! Fault points: named places in the queue wrapper, the heartbeat, the worker step, the
//! dispatcher and the provider where a drill can make one of its own jobs fail. Armed per job,
//! never globally: a job nobody armed passes every point untouched, and the worker, queue and
//! provider of `serve` carry no fault registry at all. Drills ([`crate::drill`]) arm them; the
//! rooms they fire in name them from here, below all of them.

pub mod sabotage;

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Where a fault can be injected. Names are stable: reports and docs use them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum FaultPoint {
    /// `DeleteMessage` times out without deleting.
    QueueDelete,
    /// `DeleteMessage` reports success and deletes nothing, as SQS does for an outdated handle.
    QueueDeleteStaleHandle,
    /// `ChangeMessageVisibility` on the first owner's delivery times out without changing
    /// anything (other receivers' calls go through).
    QueueChangeVisibility,
    /// A received message is delivered again: a copy, as a standard queue may.
    QueueReceiveDuplicate,
    /// The ledger lease renewal does not get through.
    LeaseRenew,
    /// The worker process freezes (heartbeat included) for the armed duration once its model
    /// call has come back; its work resumes where it was, with an answer to commit.
    WorkerPause,
    /// The worker process dies during the model call, after the armed duration: nothing more
    /// is written or sent by it.
    WorkerCrash,
    /// The worker process dies right after a receive, before examining the message.
    WorkerCrashOnReceive,
    /// The model call takes the armed duration longer (with progress).
    ProviderLatency,
    /// The model call runs but its response is lost: the outcome is uncertain.
    ProviderLoseResponse,
    /// The model refuses the call with a confirmed retryable error.
    ProviderRetryable,
    /// The model refuses the call with a confirmed fatal error.
    ProviderFatal,
    /// The model admits one call per armed interval (a bucket a second deep, shared by every
    /// job armed so) and refuses the rest with a rate limit, naming when to call again.
    ProviderRateLimit,
    /// The dispatcher dies after claiming the job's outbox row, before sending it.
    DispatchCrashBeforeSend,
}

impl FaultPoint {
    pub const ALL: [FaultPoint; 14] = [
        FaultPoint::QueueDelete,
        FaultPoint::QueueDeleteStaleHandle,
        FaultPoint::QueueChangeVisibility,
        FaultPoint::QueueReceiveDuplicate,
        FaultPoint::LeaseRenew,
        FaultPoint::WorkerPause,
        FaultPoint::WorkerCrash,
        FaultPoint::WorkerCrashOnReceive,
        FaultPoint::ProviderLatency,
        FaultPoint::ProviderLoseResponse,
        FaultPoint::ProviderRetryable,
        FaultPoint::ProviderFatal,
        FaultPoint::ProviderRateLimit,
        FaultPoint::DispatchCrashBeforeSend,
    ];

    pub fn name(&self) -> &'static str {
        match self {
            FaultPoint::QueueDelete => "queue.delete",
            FaultPoint::QueueDeleteStaleHandle => "queue.delete.stale_handle",
            FaultPoint::QueueChangeVisibility => "queue.change_visibility",
            FaultPoint::QueueReceiveDuplicate => "queue.receive.duplicate",
            FaultPoint::LeaseRenew => "lease.renew",
            FaultPoint::WorkerPause => "worker.pause",
            FaultPoint::WorkerCrash => "worker.crash",
            FaultPoint::WorkerCrashOnReceive => "worker.crash_on_receive",
            FaultPoint::ProviderLatency => "provider.latency",
            FaultPoint::ProviderLoseResponse => "provider.lose_response",
            FaultPoint::ProviderRetryable => "provider.retryable",
            FaultPoint::ProviderFatal => "provider.fatal",
            FaultPoint::ProviderRateLimit => "provider.rate_limit",
            FaultPoint::DispatchCrashBeforeSend => "dispatch.crash_before_send",
        }
    }
}

impl fmt::Display for FaultPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One armed fault: where, how many times (`None`: every time), and its duration where the
/// point has one (a pause, a crash delay, extra latency).
#[derive(Debug, Clone, PartialEq)]
pub struct Arm {
    pub point: FaultPoint,
    pub times: Option<u32>,
    pub hold: Duration,
}

impl Arm {
    pub fn once(point: FaultPoint) -> Self {
        Arm {
            point,
            times: Some(1),
            hold: Duration::ZERO,
        }
    }

    pub fn always(point: FaultPoint) -> Self {
        Arm {
            point,
            times: None,
            hold: Duration::ZERO,
        }
    }

    pub fn times(point: FaultPoint, n: u32) -> Self {
        Arm {
            point,
            times: Some(n),
            hold: Duration::ZERO,
        }
    }

    pub fn hold(mut self, hold: Duration) -> Self {
        self.hold = hold;
        self
    }
}

/// One injected fault, for the drill's own log (checks never read it: they read the ledger).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Fired {
    pub job_id: String,
    pub point: FaultPoint,
    /// Milliseconds since the registry was made.
    pub at_ms: u64,
}

#[derive(Default)]
struct Inner {
    armed: HashMap<String, Vec<Arm>>,
    /// Receipt fingerprints of armed jobs' deliveries, so transport calls find their job.
    receipts: HashMap<String, String>,
    /// Each armed job's first owner's receipt: the one its first claim came with.
    first_receipts: HashMap<String, String>,
    /// Frozen work, by job and worker: only the worker that froze holds still.
    paused: HashMap<(String, String), Instant>,
    /// Workers frozen whole (they receive nothing either), by worker id.
    frozen_workers: HashMap<String, Instant>,
    fired: Vec<Fired>,
    /// The chaos soak: these points fire for any job at this rate (counted, not listed).
    at_rate: Option<(f64, Vec<FaultPoint>)>,
    /// The rate-limited model's bucket: tokens, and when they were counted.
    bucket: Option<(f64, Instant)>,
    /// Draws made and faults fired at that rate.
    draws: u64,
    fired_at_rate: u64,
    /// Safeguards switched off for this run (test builds only).
    #[cfg(feature = "sabotage")]
    disabled: std::collections::HashSet<sabotage::Safeguard>,
}

/// The fault registry one drill run shares between its queue wrapper, workers, dispatcher
/// and provider.
#[derive(Clone)]
pub struct Faults {
    inner: Arc<Mutex<Inner>>,
    since: Instant,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            inner: Arc::default(),
            since: Instant::now(),
        }
    }
}

impl fmt::Debug for Faults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let armed = self.lock().armed.len();
        write!(f, "Faults({armed} jobs armed)")
    }
}

impl Faults {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A registry whose `points` fire for every job, each call with probability `rate`
    /// (the chaos soak; drills arm faults per job instead).
    pub fn at_rate(rate: f64, points: &[FaultPoint]) -> Faults {
        let faults = Faults::default();
        faults.lock().at_rate = Some((rate, points.to_vec()));
        faults
    }

    /// How many faults fired at the soak's rate.
    pub fn fired_at_rate(&self) -> u64 {
        self.lock().fired_at_rate
    }

    /// Arms `arm` on one job.
    pub fn arm(&self, job_id: &str, arm: Arm) {
        self.lock()
            .armed
            .entry(job_id.to_owned())
            .or_default()
            .push(arm);
    }

    /// Disarms every fault of one job.
    pub fn disarm(&self, job_id: &str) {
        let mut inner = self.lock();
        inner.armed.remove(job_id);
        inner.paused.retain(|(job, _), _| job != job_id);
        inner.receipts.retain(|_, job| job != job_id);
        inner.first_receipts.remove(job_id);
    }

    /// Whether `point` is armed on `job_id` (without firing it).
    pub fn is_armed(&self, job_id: &str, point: FaultPoint) -> bool {
        self.lock()
            .armed
            .get(job_id)
            .is_some_and(|arms| arms.iter().any(|a| a.point == point && a.times != Some(0)))
    }

    /// Whether `point` fires for `job_id` now; if so, its hold. Counts the firing down.
    pub fn fire(&self, job_id: &str, point: FaultPoint) -> Option<Duration> {
        let mut inner = self.lock();
        if let Some((rate, points)) = &inner.at_rate {
            if points.contains(&point) {
                let rate = *rate;
                inner.draws += 1;
                if crate::job::draw(job_id, inner.draws) < rate {
                    inner.fired_at_rate += 1;
                    return Some(Duration::ZERO);
                }
                return None;
            }
        }
        let arms = inner.armed.get_mut(job_id)?;
        let arm = arms
            .iter_mut()
            .find(|a| a.point == point && a.times != Some(0))?;
        if let Some(n) = arm.times.as_mut() {
            *n -= 1;
        }
        let hold = arm.hold;
        let at_ms = self.since.elapsed().as_millis() as u64;
        inner.fired.push(Fired {
            job_id: job_id.to_owned(),
            point,
            at_ms,
        });
        Some(hold)
    }

    /// A token of the rate-limited model's bucket, which refills one every `interval` up to a
    /// second's worth: whether the call is admitted, the tokens left after it, and how long
    /// until the next token and until the bucket is whole.
    pub fn rate_limit(&self, interval: Duration) -> (bool, f64, Duration, Duration) {
        let per_second = 1.0 / interval.as_secs_f64().max(0.001);
        let depth = per_second.max(1.0);
        let now = Instant::now();
        let mut inner = self.lock();
        let (tokens, at) = inner.bucket.unwrap_or((depth, now));
        let tokens = (tokens + per_second * (now - at).as_secs_f64()).min(depth);
        let admitted = tokens >= 1.0;
        let left = if admitted { tokens - 1.0 } else { tokens };
        inner.bucket = Some((left, now));
        let secs = |n: f64| Duration::from_secs_f64((n / per_second).max(0.0));
        (admitted, left, secs(1.0 - left), secs(depth - left))
    }

    /// Remembers which job a receipt belongs to (only jobs with something armed).
    pub fn note_receipt(&self, fingerprint: &str, job_id: &str) {
        let mut inner = self.lock();
        if inner.armed.contains_key(job_id) {
            inner
                .receipts
                .insert(fingerprint.to_owned(), job_id.to_owned());
        }
    }

    /// Remembers the receipt a claim of an armed job came with; the first is the first
    /// owner's. Not the first receipt received: a worker frozen by another scenario of the
    /// run can hold that one unexamined while another worker receives the message again and
    /// claims the job.
    pub fn note_claim(&self, fingerprint: &str, job_id: &str) {
        let mut inner = self.lock();
        if inner.armed.contains_key(job_id) {
            inner
                .first_receipts
                .entry(job_id.to_owned())
                .or_insert_with(|| fingerprint.to_owned());
        }
    }

    /// Whether a receipt is its job's first owner's: the one its first claim came with.
    pub fn is_first_receipt(&self, fingerprint: &str) -> bool {
        let inner = self.lock();
        inner
            .receipts
            .get(fingerprint)
            .and_then(|job| inner.first_receipts.get(job))
            .is_some_and(|first| first == fingerprint)
    }

    /// The armed job a receipt belongs to.
    pub fn job_of_receipt(&self, fingerprint: &str) -> Option<String> {
        self.lock().receipts.get(fingerprint).cloned()
    }

    /// Freezes one worker's work on a job until `until`.
    pub fn pause(&self, job_id: &str, worker_id: &str, until: Instant) {
        self.lock()
            .paused
            .insert((job_id.to_owned(), worker_id.to_owned()), until);
    }

    /// Freezes a whole worker until `until`: it receives nothing meanwhile.
    pub fn pause_worker(&self, worker_id: &str, until: Instant) {
        self.lock()
            .frozen_workers
            .insert(worker_id.to_owned(), until);
    }

    /// When a frozen worker wakes up, if it is frozen now.
    pub fn worker_paused_until(&self, worker_id: &str) -> Option<Instant> {
        self.lock()
            .frozen_workers
            .get(worker_id)
            .copied()
            .filter(|until| *until > Instant::now())
    }

    /// When a worker frozen on a job wakes up, if it is frozen now.
    pub fn paused_until(&self, job_id: &str, worker_id: &str) -> Option<Instant> {
        self.lock()
            .paused
            .get(&(job_id.to_owned(), worker_id.to_owned()))
            .copied()
            .filter(|until| *until > Instant::now())
    }

    /// Whether a safeguard is switched off for this run. Always `false` outside test builds.
    #[inline]
    pub fn disabled(&self, safeguard: sabotage::Safeguard) -> bool {
        #[cfg(feature = "sabotage")]
        {
            self.lock().disabled.contains(&safeguard)
        }
        #[cfg(not(feature = "sabotage"))]
        {
            let _ = safeguard;
            false
        }
    }

    /// Switches a safeguard off for this run's workers (test builds only).
    #[cfg(feature = "sabotage")]
    pub fn disable(&self, safeguard: sabotage::Safeguard) {
        self.lock().disabled.insert(safeguard);
    }

    /// Every fault injected so far.
    pub fn fired(&self) -> Vec<Fired> {
        self.lock().fired.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fault_fires_only_for_its_job_and_only_as_often_as_armed() {
        let faults = Faults::default();
        faults.arm("job_a", Arm::times(FaultPoint::QueueDelete, 2));
        assert_eq!(faults.fire("job_b", FaultPoint::QueueDelete), None);
        assert_eq!(
            faults.fire("job_a", FaultPoint::QueueChangeVisibility),
            None
        );
        assert!(faults.fire("job_a", FaultPoint::QueueDelete).is_some());
        assert!(faults.fire("job_a", FaultPoint::QueueDelete).is_some());
        assert_eq!(faults.fire("job_a", FaultPoint::QueueDelete), None);
        assert_eq!(faults.fired().len(), 2);
    }

    #[test]
    fn receipts_are_remembered_only_for_armed_jobs() {
        let faults = Faults::default();
        faults.note_receipt("aaaa", "job_a");
        assert_eq!(faults.job_of_receipt("aaaa"), None);
        faults.arm("job_a", Arm::always(FaultPoint::QueueDelete));
        faults.note_receipt("aaaa", "job_a");
        assert_eq!(faults.job_of_receipt("aaaa").as_deref(), Some("job_a"));
        faults.disarm("job_a");
        assert_eq!(faults.job_of_receipt("aaaa"), None);
    }

    /// The first owner's receipt is the one its first claim came with, not the first one
    /// received: a worker frozen by another scenario can hold the first receipt unexamined
    /// while a second worker receives the message again and owns the job.
    #[test]
    fn the_first_owners_receipt_is_the_one_that_claimed() {
        let faults = Faults::default();
        faults.arm("job_a", Arm::always(FaultPoint::QueueChangeVisibility));
        faults.note_receipt("frozen", "job_a");
        faults.note_receipt("owner", "job_a");
        assert!(!faults.is_first_receipt("owner"), "no claim yet");
        faults.note_claim("owner", "job_a");
        faults.note_receipt("copy", "job_a");
        faults.note_claim("copy", "job_a");
        assert!(faults.is_first_receipt("owner"));
        assert!(!faults.is_first_receipt("frozen"));
        assert!(
            !faults.is_first_receipt("copy"),
            "a later claim is not the first owner's"
        );
    }

    #[test]
    fn fault_point_names_are_stable_and_distinct() {
        let names: std::collections::HashSet<_> =
            FaultPoint::ALL.iter().map(|p| p.name()).collect();
        assert_eq!(names.len(), FaultPoint::ALL.len());
        assert!(names.contains("worker.pause"));
        assert!(names.contains("dispatch.crash_before_send"));
    }
}
