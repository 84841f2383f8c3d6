//! Running drills: a run gets its own queue (embedded, or an SQS queue made for it), three real
//! workers, a dispatcher for its own jobs and a reaper, runs its scenarios side by side, saves
//! its progress as it goes and its verdict at the end, then takes its rig down.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::rig::Rig;
pub use super::rig::{DrillError, DrillProvider, DrillQueue, DrillRequest, DrillTimings};
use super::scenarios;
use super::{Report, ScenarioReport, ScenarioStatus};
use crate::deployment::Environment;
use crate::faults::Faults;
use crate::ledger::{DrillRunRow, Ledger};

/// How often a run saves its progress; a running row not saved for [`STALE`] was cut short.
const SAVE_EVERY: Duration = Duration::from_millis(500);
pub const STALE: Duration = Duration::from_secs(15);

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
    disabled: &[crate::faults::sabotage::Safeguard],
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
