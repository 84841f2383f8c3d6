//! The worker, the outbox dispatcher and the reaper.
//!
//! Owns moving jobs through the queue safely: the worker examines each delivery against the
//! ledger ([`delivery`]), keeps visibility and leases renewed separately ([`heartbeat`]), and
//! deletes only after a durable outcome; the dispatcher sends outbox rows to the queue; the
//! reaper recovers expired leases, expires passed deadlines, reconciles `unknown` jobs through
//! provider retrieval and re-dispatches workable jobs whose message went missing; the retention
//! task prunes terminal records past their keep period; [`presence`] reports the process to the
//! ledger while it runs. Each loop is
//! a thin wrapper around a testable step, and every one is safe to run in several processes.
//! Must not log receipt handles, inputs or answers.

mod delivery;
pub mod dispatcher;
pub mod dlq;
pub mod flow;
mod heartbeat;
pub mod presence;
pub mod reaper;
pub mod retention;

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

pub use delivery::{Outcome, HELD_BY_LIMIT, PROVIDER_NOT_HERE};
pub use heartbeat::{RenewalStats, StopReason};

use crate::ledger::Ledger;
use crate::provider::limits::Limits;
use crate::provider::Provider;
use crate::queue::{Delivery, Queue, MAX_BATCH};

/// The clocks of the transport rules. Production defaults follow the illustrative policy:
/// receive with 90 s of visibility, renew every 25 s, keep a 15 s margin.
#[derive(Debug, Clone)]
pub struct Timings {
    /// Visibility asked on receive and on each renewal.
    pub visibility: Duration,
    /// How often each in-flight job's visibility and lease are renewed.
    pub heartbeat: Duration,
    /// Ledger lease length asked on claim and renewal (never past the deadline).
    pub lease: Duration,
    /// Slack kept for scheduling delay and the renewal requests themselves.
    pub margin: Duration,
    /// How long a duplicate delivery is pushed away while a live owner works.
    pub duplicate_wait: Duration,
    /// No provider progress for this long stops the job's work (the call may have run).
    pub progress_timeout: Duration,
    /// Long-poll wait of each receive.
    pub receive_wait: Duration,
    /// First retry backoff, doubled per attempt up to `backoff_max`.
    pub backoff_base: Duration,
    pub backoff_max: Duration,
}

impl Default for Timings {
    fn default() -> Self {
        Timings {
            visibility: Duration::from_secs(90),
            heartbeat: Duration::from_secs(25),
            lease: Duration::from_secs(90),
            margin: Duration::from_secs(15),
            duplicate_wait: Duration::from_secs(30),
            progress_timeout: Duration::from_secs(600),
            receive_wait: Duration::from_secs(10),
            backoff_base: Duration::from_secs(5),
            backoff_max: Duration::from_secs(300),
        }
    }
}

impl Timings {
    /// Compressed timings for drills and tests: the same rules, seconds instead of minutes.
    pub fn compressed() -> Self {
        Timings {
            visibility: Duration::from_secs(2),
            heartbeat: Duration::from_millis(700),
            lease: Duration::from_secs(2),
            margin: Duration::from_millis(300),
            duplicate_wait: Duration::from_secs(1),
            progress_timeout: Duration::from_secs(30),
            receive_wait: Duration::from_millis(200),
            backoff_base: Duration::from_millis(200),
            backoff_max: Duration::from_secs(2),
        }
    }

    /// The backoff before attempt `attempt_no + 1`.
    pub fn backoff(&self, attempt_no: i64) -> Duration {
        doubled(self.backoff_base, attempt_no, self.backoff_max)
    }
}

/// Sleeps until `at`, or forever without one.
async fn sleep_until_some(at: Option<std::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// `base` after the first of `n` tries, doubled for each one after, at most `max`.
pub(crate) fn doubled(base: Duration, n: i64, max: Duration) -> Duration {
    let shift = u32::try_from(n.saturating_sub(1).clamp(0, 16)).unwrap_or(0);
    base.saturating_mul(1 << shift).min(max)
}

#[derive(Debug, Clone)]
pub struct WorkerConfig {
    pub worker_id: String,
    pub timings: Timings,
    /// Jobs this worker holds at once.
    pub max_in_flight: usize,
    /// Receive requests kept open at once while there is room and the queue has a backlog
    /// (the last receive came back full; otherwise one long poll). Each asks for up to ten
    /// messages, the queue's limit, so a worker with many calls in flight fills up and refills
    /// without waiting on one request at a time.
    pub receivers: usize,
    /// How long a graceful shutdown lets in-flight calls finish before handing them back.
    pub drain_timeout: Duration,
    /// Where this worker counts what it does.
    pub metrics: crate::metrics::Metrics,
    /// A drill's per-job faults; `None` everywhere but a drill's own workers.
    pub faults: Option<crate::faults::Faults>,
    /// What each model's tokens cost, to price each attempt's usage.
    pub prices: std::sync::Arc<crate::provider::prices::Prices>,
    /// The routes jobs may move on along when their provider refuses them for too long.
    pub routes: std::sync::Arc<crate::provider::route::Routes>,
}

/// Receive requests a worker keeps open while the queue has a backlog, unless told otherwise.
pub const DEFAULT_RECEIVERS: usize = 4;

impl WorkerConfig {
    pub fn new(worker_id: impl Into<String>) -> Self {
        WorkerConfig {
            worker_id: worker_id.into(),
            timings: Timings::default(),
            max_in_flight: 64,
            receivers: DEFAULT_RECEIVERS,
            drain_timeout: Duration::from_secs(30),
            metrics: crate::metrics::Metrics::default(),
            faults: None,
            prices: Default::default(),
            routes: Default::default(),
        }
    }
}

/// What every task of one worker shares.
pub(crate) struct Shared<Q, P> {
    pub(crate) ledger: Ledger,
    pub(crate) queue: Q,
    pub(crate) provider: P,
    /// The other providers a job's route may move it on to, by name.
    pub(crate) fallbacks: Vec<P>,
    pub(crate) config: WorkerConfig,
    pub(crate) registry: heartbeat::Registry,
    pub(crate) stats: RenewalStats,
    /// A delivery found the ledger unreachable: receiving waits until it answers again.
    pub(crate) ledger_lost: std::sync::atomic::AtomicBool,
    /// What this worker learned of its provider's limits: every call passes their gate.
    pub(crate) limits: Limits,
}

/// A worker: receive, examine, run, renew, commit, delete.
pub struct Worker<Q, P> {
    shared: Arc<Shared<Q, P>>,
}

impl<Q, P> Clone for Worker<Q, P> {
    fn clone(&self) -> Self {
        Worker {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<Q: Queue, P: Provider> Worker<Q, P> {
    pub fn new(ledger: Ledger, queue: Q, provider: P, config: WorkerConfig) -> Self {
        let limits = Limits::new(config.max_in_flight);
        Self::sharing(ledger, queue, provider, config, limits)
    }

    /// A worker whose calls pass `limits`' gate, shared with other workers of the process.
    pub fn sharing(
        ledger: Ledger,
        queue: Q,
        provider: P,
        config: WorkerConfig,
        limits: Limits,
    ) -> Self {
        Self::routed(ledger, queue, (provider, Vec::new()), config, limits)
    }

    /// A worker with `fallbacks`, the other providers a job's route may move it on to
    /// ([`WorkerConfig::routes`]): an attempt goes to the provider its job's route stands on.
    pub fn routed(
        ledger: Ledger,
        queue: Q,
        (provider, fallbacks): (P, Vec<P>),
        config: WorkerConfig,
        limits: Limits,
    ) -> Self {
        Worker {
            shared: Arc::new(Shared {
                ledger,
                queue,
                provider,
                fallbacks,
                config,
                registry: heartbeat::Registry::default(),
                stats: RenewalStats::default(),
                ledger_lost: std::sync::atomic::AtomicBool::new(false),
                limits,
            }),
        }
    }

    /// What this worker learned of its provider's limits.
    pub fn limits(&self) -> &Limits {
        &self.shared.limits
    }

    pub fn id(&self) -> &str {
        &self.shared.config.worker_id
    }

    /// Examines and handles one delivery to its end (the step the loop runs per message).
    /// Its renewals need the heartbeat running ([`Worker::run`] starts it).
    pub async fn handle_delivery(&self, delivery: Delivery) -> Outcome {
        self.shared.handle_delivery(delivery).await
    }

    /// Jobs in flight right now.
    pub fn in_flight(&self) -> usize {
        self.shared.registry.len()
    }

    /// Renewal lateness observed by the heartbeat.
    pub fn renewal_stats(&self) -> RenewalStats {
        self.shared.stats.clone()
    }

    /// Starts only the heartbeat (for tests that drive [`Worker::handle_delivery`] directly).
    pub fn spawn_heartbeat(&self, shutdown: CancellationToken) -> tokio::task::JoinHandle<()> {
        tokio::spawn(heartbeat::run(Arc::clone(&self.shared), shutdown))
    }

    /// Waits until the ledger answers again, asking at growing intervals (up to 5 s); `false`
    /// when `shutdown` came first.
    async fn wait_for_ledger(&self, shutdown: &CancellationToken) -> bool {
        let worker_id = &self.shared.config.worker_id;
        tracing::warn!(%worker_id, "the ledger does not answer: receiving paused until it does");
        let mut wait = Duration::from_millis(100);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return false,
                _ = tokio::time::sleep(wait) => {}
            }
            let ping = tokio::time::timeout(Duration::from_secs(5), self.shared.ledger.ping());
            if matches!(ping.await, Ok(Ok(()))) {
                self.shared.ledger_lost.store(false, Relaxed);
                tracing::info!(%worker_id, "the ledger answers again: receiving");
                return true;
            }
            wait = (wait * 2).min(Duration::from_secs(5));
        }
    }

    /// Receives and handles messages until `shutdown`, then stops receiving, lets in-flight
    /// work finish for up to `drain_timeout`, and hands back what is left: an attempt in
    /// flight leaves the job `unknown`, a claim without one goes back to `retry_authorized`.
    pub async fn run(&self, shutdown: CancellationToken) {
        let heartbeat_stop = CancellationToken::new();
        let heartbeat = self.spawn_heartbeat(heartbeat_stop.clone());
        // Dropped rather than shut down (its task aborted): the heartbeat stops with it.
        let _heartbeat_guard = heartbeat_stop.clone().drop_guard();
        let mut tasks = tokio::task::JoinSet::new();
        // Open receive requests, and the room each reserved.
        let mut receiving = tokio::task::JoinSet::new();
        let mut asked: std::collections::HashMap<_, usize> = std::collections::HashMap::new();
        let mut backlog = false;
        let config = &self.shared.config;
        let mut failures = 0u32;
        while !shutdown.is_cancelled() {
            while tasks.try_join_next().is_some() {}
            // A drill froze this worker's process: it receives nothing until it wakes.
            if let Some(until) = config
                .faults
                .as_ref()
                .and_then(|f| f.worker_paused_until(&config.worker_id))
            {
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = tokio::time::sleep_until(until.into()) => continue,
                }
            }
            // The ledger stopped answering: no delivery can be examined, and each message
            // received meanwhile would only spend one of its receives (towards the dead-letter
            // queue) and sit out its visibility. Nothing is received until the ledger answers.
            if self.shared.ledger_lost.load(Relaxed) {
                if !self.wait_for_ledger(&shutdown).await {
                    break;
                }
                continue;
            }
            let reserved: usize = asked.values().sum();
            // While a provider limits this worker it holds fewer calls, and none while the
            // limit is paused: messages stay in the queue rather than being received and
            // released, which would spend their receives towards the dead-letter queue.
            let width = config.max_in_flight.min(self.shared.limits.capacity());
            let mut room = width.saturating_sub(tasks.len() + reserved);
            // More receives only while the queue has a backlog (the last one came back full):
            // an idle worker keeps one long poll open, as it would with one receiver.
            let receivers = if backlog { config.receivers.max(1) } else { 1 };
            while room > 0 && receiving.len() < receivers {
                let n = room.min(MAX_BATCH);
                room -= n;
                let shared = Arc::clone(&self.shared);
                let handle = receiving.spawn(async move {
                    let t = &shared.config.timings;
                    shared.queue.receive(n, t.visibility, t.receive_wait).await
                });
                asked.insert(handle.id(), n);
            }
            // With no room and nothing open, the next thing to wait for is a call ending or a
            // limit's pause ending.
            let resume = self.shared.limits.next_resume();
            let received = tokio::select! {
                _ = shutdown.cancelled() => break,
                Some(joined) = receiving.join_next_with_id() => joined,
                Some(_) = tasks.join_next() => continue,
                () = self.shared.limits.changed() => continue,
                () = sleep_until_some(resume) => continue,
            };
            let id = match &received {
                Ok((id, _)) => *id,
                Err(error) => error.id(),
            };
            let n = asked.remove(&id).unwrap_or(0);
            let Ok((_, received)) = received else {
                continue;
            };
            match received {
                Ok(deliveries) => {
                    failures = 0;
                    backlog = deliveries.len() >= n;
                    for delivery in deliveries {
                        let worker = self.clone();
                        tasks.spawn(async move {
                            let message_id = delivery.message_id.clone();
                            let outcome = worker.handle_delivery(delivery).await;
                            if matches!(outcome, Outcome::LedgerUnavailable) {
                                worker.shared.ledger_lost.store(true, Relaxed);
                            }
                            worker.shared.config.metrics.delivery(outcome.label());
                            tracing::debug!(%message_id, ?outcome, "delivery handled");
                        });
                    }
                }
                Err(error) => {
                    backlog = false;
                    failures = failures.saturating_add(1);
                    let pause = Duration::from_millis(100 * u64::from(failures.min(50)));
                    tracing::warn!(%error, ?pause, "receive failed");
                    tokio::select! {
                        _ = shutdown.cancelled() => break,
                        _ = tokio::time::sleep(pause) => {}
                    }
                }
            }
        }
        // Receives still open are abandoned as one open receive was before: what they may
        // have taken comes back when its visibility lapses.
        receiving.abort_all();
        // Drain: no new receives; give in-flight calls time, then hand them back.
        let drained = tokio::time::timeout(self.shared.config.drain_timeout, async {
            while tasks.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            self.shared.registry.stop_all(StopReason::Shutdown);
            while tasks.join_next().await.is_some() {}
        }
        heartbeat_stop.cancel();
        let _ = heartbeat.await;
    }
}
