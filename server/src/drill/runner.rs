//! Running drills: a run gets its own queue (embedded, or an SQS queue made for it), three real
//! workers, a dispatcher for its own jobs and a reaper, runs its scenarios side by side, saves
//! its progress as it goes and its verdict at the end, then takes its rig down.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::faults::Faults;
use super::provider::FaultyProvider;
use super::scenarios;
use super::{DrillKind, Report, ScenarioReport, ScenarioStatus};
use crate::ledger::{DrillRunRow, Ledger, LedgerError};
use crate::provider::stub::{StubConfig, StubProvider};
use crate::provider::{AnyProvider, Provider};
use crate::queue::embedded::EmbeddedQueue;
use crate::queue::faults::FaultyQueue;
use crate::queue::sqs::SqsQueue;
use crate::queue::{AnyQueue, QueueError};
use crate::settings::Environment;
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

/// How often a run saves its progress; a running row not saved for [`STALE`] was cut short.
const SAVE_EVERY: Duration = Duration::from_millis(500);
pub const STALE: Duration = Duration::from_secs(15);
/// Receives before a drill's message goes to its dead-letter queue.
pub(crate) const MAX_RECEIVE_COUNT: u32 = 3;

/// A run's moving parts. Scenarios reach them through [`scenarios::Ctx`].
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
    async fn build(
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
        for id in &workers {
            let mut config = WorkerConfig::new(id.clone());
            config.timings = timings.clone();
            config.max_in_flight = 32;
            config.drain_timeout = Duration::from_millis(200);
            config.faults = Some(faults.clone());
            let worker = Worker::new(ledger.clone(), queue.clone(), provider.clone(), config);
            let stop = shutdown.clone();
            tasks.spawn(async move { worker.run(stop).await });
        }
        let lane = dispatcher::Lane {
            drill_run: run_id.to_owned(),
            lock: if faults.disabled(super::sabotage::Safeguard::ResendLostDispatch) {
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

    async fn stop(&self) {
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

/// Refuses drills where they must not run.
pub fn allowed(environment: Environment) -> Result<(), DrillError> {
    match environment {
        Environment::Production => Err(DrillError::Production),
        Environment::Development => Ok(()),
    }
}

fn new_run_id() -> String {
    format!("drl_{}", uuid::Uuid::now_v7().simple())
}

/// Records a run and starts it in the background; returns its id at once.
pub async fn start(
    ledger: &Ledger,
    environment: Environment,
    request: DrillRequest,
) -> Result<String, DrillError> {
    let (run_id, report) = begin(ledger, environment, &request, true).await?;
    let ledger = ledger.clone();
    let id = run_id.clone();
    tokio::spawn(async move {
        if let Err(error) = execute(&ledger, &id, request, report, Faults::default(), |_| {}).await
        {
            tracing::warn!(run = %id, %error, "a drill run failed to run");
        }
    });
    Ok(run_id)
}

/// Runs a drill to its end in this task, calling `progress` as scenarios finish.
pub async fn run(
    ledger: &Ledger,
    environment: Environment,
    request: DrillRequest,
    progress: impl Fn(&ScenarioReport) + Send + Sync + 'static,
) -> Result<Report, DrillError> {
    let (run_id, report) = begin(ledger, environment, &request, true).await?;
    execute(
        ledger,
        &run_id,
        request,
        report,
        Faults::default(),
        progress,
    )
    .await
}

/// [`run`] with safeguards switched off, to show that the drills proving them fail. Test
/// builds only.
#[cfg(feature = "sabotage")]
pub async fn run_sabotaged(
    ledger: &Ledger,
    request: DrillRequest,
    disabled: &[super::sabotage::Safeguard],
) -> Result<Report, DrillError> {
    // Runs that prove the drills themselves go side by side: they run in tests alone.
    let (run_id, report) = begin(ledger, Environment::Development, &request, false).await?;
    let faults = Faults::default();
    for safeguard in disabled {
        faults.disable(*safeguard);
    }
    execute(ledger, &run_id, request, report, faults, |_| {}).await
}

/// Records a run about to start, once it is allowed: never against a database a production
/// deployment marked, whatever `environment` this process was given; and, when `alone`, only
/// while no other run is going.
async fn begin(
    ledger: &Ledger,
    environment: Environment,
    request: &DrillRequest,
    alone: bool,
) -> Result<(String, Report), DrillError> {
    allowed(environment)?;
    if ledger.marked_production().await? {
        return Err(DrillError::Production);
    }
    if request.kinds.is_empty() {
        return Err(DrillError::Empty);
    }
    let run_id = new_run_id();
    let report = Report {
        run_id: run_id.clone(),
        queue: request.queue.as_str().into(),
        timings: request.timings.as_str().into(),
        provider: request.provider.describe(),
        requested_by: request.requested_by.clone(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        scenarios: request
            .kinds
            .iter()
            .map(|k| ScenarioReport::pending(*k))
            .collect(),
    };
    let kinds: Vec<&str> = request.kinds.iter().map(|k| k.as_str()).collect();
    let row = DrillRunRow {
        run_id: run_id.clone(),
        kinds: serde_json::to_string(&kinds).expect("kinds serialize"),
        queue: report.queue.clone(),
        timings: report.timings.clone(),
        requested_by: request.requested_by.clone(),
        status: "running".into(),
        started_at: 0,
        alive_at: 0,
        finished_at: None,
        report: serde_json::to_string(&report).expect("report serializes"),
    };
    if !alone {
        ledger.insert_drill_run(&row).await?;
    } else if let Err(going) = ledger.insert_only_drill_run(&row, STALE).await? {
        return Err(DrillError::Busy {
            run_id: going.run_id,
            requested_by: going.requested_by,
        });
    }
    Ok((run_id, report))
}

async fn save(ledger: &Ledger, report: &Mutex<Report>, finished: bool) {
    let (run_id, status, json) = {
        let r = report.lock().expect("report lock");
        let status = match (finished, r.passed()) {
            (false, _) => "running",
            (true, true) => "passed",
            (true, false) => "failed",
        };
        let json = serde_json::to_string(&*r).expect("report serializes");
        (r.run_id.clone(), status, json)
    };
    if let Err(error) = ledger
        .save_drill_run(&run_id, status, &json, finished)
        .await
    {
        tracing::warn!(%error, "could not save a drill run's progress");
    }
}

async fn execute(
    ledger: &Ledger,
    run_id: &str,
    request: DrillRequest,
    report: Report,
    faults: Faults,
    progress: impl Fn(&ScenarioReport) + Send + Sync + 'static,
) -> Result<Report, DrillError> {
    let report = Arc::new(Mutex::new(report));
    let rig = match Rig::build(ledger, run_id, &request, faults).await {
        Ok(rig) => Arc::new(rig),
        Err(error) => {
            {
                let mut r = report.lock().expect("report lock");
                for s in &mut r.scenarios {
                    s.status = ScenarioStatus::Failed;
                    s.checks.push(super::Check {
                        name: "the drill's queue could be opened".into(),
                        passed: false,
                        detail: error.to_string(),
                        evidence: Vec::new(),
                    });
                }
            }
            save(ledger, &report, true).await;
            return Err(error);
        }
    };
    let progress = Arc::new(progress);
    let saver = {
        let (ledger, report) = (ledger.clone(), Arc::clone(&report));
        let stop = CancellationToken::new();
        let token = stop.clone();
        let task = tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = token.cancelled() => return,
                    _ = tokio::time::sleep(SAVE_EVERY) => save(&ledger, &report, false).await,
                }
            }
        });
        (stop, task)
    };
    let mut scenarios = tokio::task::JoinSet::new();
    for (index, kind) in request.kinds.iter().copied().enumerate() {
        let (rig, report, progress) =
            (Arc::clone(&rig), Arc::clone(&report), Arc::clone(&progress));
        scenarios.spawn(async move {
            report.lock().expect("report lock").scenarios[index].status = ScenarioStatus::Running;
            let started = std::time::Instant::now();
            let outcome = scenarios::run(kind, &rig).await;
            let mut r = report.lock().expect("report lock");
            let s = &mut r.scenarios[index];
            s.took_ms = Some(started.elapsed().as_millis() as u64);
            s.checks = outcome.checks;
            s.jobs = outcome.jobs;
            s.notes = outcome.notes;
            s.faults_fired = outcome.faults_fired;
            s.status = if !s.checks.is_empty() && s.checks.iter().all(|c| c.passed) {
                ScenarioStatus::Passed
            } else {
                ScenarioStatus::Failed
            };
            progress(s);
        });
    }
    while let Some(joined) = scenarios.join_next().await {
        if let Err(error) = joined {
            // A scenario that panicked proved nothing: its report stays unfinished → failed.
            tracing::warn!(%error, "a drill scenario ended abnormally");
        }
    }
    saver.0.cancel();
    let _ = saver.1.await;
    rig.stop().await;
    {
        let mut r = report.lock().expect("report lock");
        for s in &mut r.scenarios {
            if !matches!(s.status, ScenarioStatus::Passed | ScenarioStatus::Failed) {
                s.status = ScenarioStatus::Failed;
                s.checks.push(super::Check {
                    name: "the scenario ran to its end".into(),
                    passed: false,
                    detail: "the scenario stopped abnormally; nothing it checked counts".into(),
                    evidence: Vec::new(),
                });
            }
        }
    }
    save(ledger, &report, true).await;
    let done = report.lock().expect("report lock").clone();
    Ok(done)
}
