//! A drill run's moving parts and what a run is asked for: the queue it runs on, its timings
//! and model, and the rig of workers, dispatcher and reaper it builds. Below both the runner
//! (which builds and stops a rig) and the scenarios (which drive one); names neither.

use std::sync::Mutex;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::provider::FaultyProvider;
use super::DrillKind;
use crate::faults::Faults;
use crate::ledger::{Ledger, LedgerError};
use crate::provider::stub::{StubConfig, StubProvider};
use crate::provider::{AnyProvider, Provider};
use crate::queue::embedded::EmbeddedQueue;
use crate::queue::faults::FaultyQueue;
use crate::queue::sqs::SqsQueue;
use crate::queue::{AnyQueue, QueueError};
use crate::worker::{dispatcher, reaper, Timings, Worker, WorkerConfig};

/// Which queue a drill runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DrillQueue {
    /// The embedded queue, in the ledger database: every fault is exact.
    Embedded,
    /// An SQS queue made for the run (through the standard AWS configuration).
    Sqs,
}

impl DrillQueue {
    pub fn as_str(&self) -> &'static str {
        match self {
            DrillQueue::Embedded => "embedded",
            DrillQueue::Sqs => "sqs",
        }
    }
}

/// Compressed timings (seconds) by default; production timings on request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DrillTimings {
    Compressed,
    Production,
}

impl DrillTimings {
    pub fn as_str(&self) -> &'static str {
        match self {
            DrillTimings::Compressed => "compressed",
            DrillTimings::Production => "production",
        }
    }

    pub fn timings(&self) -> Timings {
        match self {
            DrillTimings::Compressed => Timings::compressed(),
            DrillTimings::Production => Timings::default(),
        }
    }
}

/// Which model a drill's jobs call.
#[derive(Clone, Default)]
pub enum DrillProvider {
    /// The stub model (50 ms per call): the drill's faults are the only misbehaviour.
    #[default]
    Stub,
    /// A real provider (the deployment's OpenAI-compatible adapter), wrapped by the same
    /// fault points.
    Configured(AnyProvider),
}

impl DrillProvider {
    pub fn describe(&self) -> String {
        match self {
            DrillProvider::Stub => "stub".into(),
            DrillProvider::Configured(p) => format!("configured:{}", p.name()),
        }
    }
}

impl std::fmt::Debug for DrillProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

/// What to run, and who asked.
#[derive(Debug, Clone)]
pub struct DrillRequest {
    pub kinds: Vec<DrillKind>,
    pub queue: DrillQueue,
    pub timings: DrillTimings,
    /// `operator:ana`, `cli`, …
    pub requested_by: String,
    pub provider: DrillProvider,
}

#[derive(Debug, thiserror::Error)]
pub enum DrillError {
    #[error("drills are refused in a deployment marked production")]
    Production,
    #[error("no drill was asked for")]
    Empty,
    /// Runs share the deployment's ledger, and their faults and verdicts assume they run
    /// alone: a second start waits for the first to end.
    #[error(
        "drill run {run_id} (started by {requested_by}) is still going; one drill run at a time"
    )]
    Busy {
        run_id: String,
        requested_by: String,
    },
    #[error("cannot open the drill's queue: {0}")]
    Queue(#[from] QueueError),
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

/// Receives before a drill's message goes to its dead-letter queue.
pub(crate) const MAX_RECEIVE_COUNT: u32 = 3;

/// A run's moving parts: its queue with fault points, three workers, a dispatcher lane and a
/// reaper. Scenarios reach them through their context.
pub(crate) struct Rig {
    pub(crate) ledger: Ledger,
    pub(crate) queue: FaultyQueue<AnyQueue>,
    pub(crate) faults: Faults,
    pub(crate) timings: Timings,
    pub(crate) run_id: String,
    pub(crate) queue_kind: DrillQueue,
    shutdown: CancellationToken,
    tasks: Mutex<Option<tokio::task::JoinSet<()>>>,
}

impl Rig {
    pub(super) async fn build(
        ledger: &Ledger,
        run_id: &str,
        request: &DrillRequest,
        faults: Faults,
    ) -> Result<Rig, DrillError> {
        let short = &run_id[run_id.len().saturating_sub(8)..];
        let name = format!("drill-{short}");
        let timings = request.timings.timings();
        let inner = match request.queue {
            DrillQueue::Embedded => {
                AnyQueue::Embedded(EmbeddedQueue::new(ledger.clone(), &name, MAX_RECEIVE_COUNT))
            }
            DrillQueue::Sqs => {
                let client = SqsQueue::client_from_env().await;
                AnyQueue::Sqs(
                    SqsQueue::create(client, &name, MAX_RECEIVE_COUNT, Duration::from_secs(10))
                        .await?,
                )
            }
        };
        let queue = FaultyQueue::with_faults(inner, faults.clone());
        let model = match &request.provider {
            DrillProvider::Stub => AnyProvider::Stub(StubProvider::new(StubConfig {
                latency: Duration::from_millis(50),
                ..Default::default()
            })),
            DrillProvider::Configured(p) => p.clone(),
        };
        let provider = FaultyProvider::new(model, faults.clone());
        let shutdown = CancellationToken::new();
        let mut tasks = tokio::task::JoinSet::new();
        // Three workers: the two paused-worker scenarios each freeze the worker that claims
        // their job, and every other scenario needs a worker that receives meanwhile.
        let workers = ["a", "b", "c"].map(|w| format!("drill-{short}-{w}"));
        // The drill's stub model has its price, so a drill's jobs show what they cost.
        let prices = std::sync::Arc::new(
            crate::provider::prices::Prices::parse(&[crate::provider::prices::STUB_PRICE])
                .expect("the stub's price reads"),
        );
        for id in &workers {
            let mut config = WorkerConfig::new(id.clone());
            config.timings = timings.clone();
            config.max_in_flight = 32;
            config.drain_timeout = Duration::from_millis(200);
            config.faults = Some(faults.clone());
            config.prices = prices.clone();
            let worker = Worker::new(ledger.clone(), queue.clone(), provider.clone(), config);
            let stop = shutdown.clone();
            tasks.spawn(async move { worker.run(stop).await });
        }
        let lane = dispatcher::Lane {
            drill_run: run_id.to_owned(),
            lock: if faults.disabled(crate::faults::sabotage::Safeguard::ResendLostDispatch) {
                Duration::from_secs(24 * 3600)
            } else {
                timings.visibility
            },
            faults: Some(faults.clone()),
            meter: None,
        };
        tasks.spawn(dispatcher::run_lane(
            ledger.clone(),
            queue.clone(),
            Duration::from_millis(20),
            Default::default(),
            lane,
            shutdown.clone(),
        ));
        // Recovery, expiry and dead-letter notes, as every reaper does them (safe beside the
        // server's own). No provider retrieval: that would ask the drill's stub about tenants'
        // jobs.
        let (l, stop) = (ledger.clone(), shutdown.clone());
        let every = (timings.heartbeat / 2).max(Duration::from_millis(100));
        let quiet = timings.visibility * 10;
        tasks.spawn(async move {
            loop {
                if let Err(error) = reaper::reap_once(&l, quiet).await {
                    tracing::warn!(%error, "drill reaper round failed");
                }
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(every) => {}
                }
            }
        });
        Ok(Rig {
            ledger: ledger.clone(),
            queue,
            faults,
            timings,
            run_id: run_id.to_owned(),
            queue_kind: request.queue,
            shutdown,
            tasks: Mutex::new(Some(tasks)),
        })
    }

    pub(super) async fn stop(&self) {
        self.shutdown.cancel();
        let tasks = self.tasks.lock().expect("rig lock").take();
        if let Some(mut tasks) = tasks {
            while tasks.join_next().await.is_some() {}
        }
        if let AnyQueue::Embedded(q) = self.queue.inner() {
            let _ = self.ledger.purge_queue(q.name()).await;
        }
        if let AnyQueue::Sqs(q) = self.queue.inner() {
            q.delete_queues().await;
        }
    }
}
