//! `/drills` and `/drills/{run}`: the catalogue, the latest runs and each run's report. Runs
//! are shown only to operators without a tenant limit; to others none exists.

use fenceline_app::console::{
    DrillCapture, DrillCheck, DrillEvidence, DrillRun, DrillRunSummary, DrillScenario,
    DrillScenarioRun, DrillsPage,
};

use super::LedgerConsole;
use crate::drill::{DrillKind, Report, ScenarioReport};
use crate::ledger::{DrillRunRow, LedgerError};
use crate::settings::Environment;
use crate::time::human_duration;

/// How many runs the list shows.
const RUNS: u32 = 50;

pub(crate) fn scenario(kind: DrillKind) -> DrillScenario {
    DrillScenario {
        kind: kind.as_str().into(),
        setup: kind.setup().into(),
        proves: kind.proves().into(),
        faults: kind.faults().iter().map(|f| f.name().to_owned()).collect(),
    }
}

/// The status as operators should read it: a running row its process stopped saving was cut
/// short.
pub(crate) fn status(row: &DrillRunRow, now_us: i64) -> String {
    let stale = i64::try_from(crate::drill::runner::STALE.as_micros()).unwrap_or(i64::MAX);
    if row.status == "running" && now_us - row.alive_at > stale {
        "interrupted".into()
    } else {
        row.status.clone()
    }
}

pub(crate) fn report_of(row: &DrillRunRow) -> Option<Report> {
    serde_json::from_str(&row.report).ok()
}

fn summary(
    row: &DrillRunRow,
    report: Option<&Report>,
    now_us: i64,
    zone: crate::time::Tz,
) -> DrillRunSummary {
    let kinds: Vec<String> = serde_json::from_str(&row.kinds).unwrap_or_default();
    let asked = if kinds.len() == DrillKind::ALL.len() {
        format!("all ({})", kinds.len())
    } else {
        kinds.join(", ")
    };
    let scenarios = report.map(|r| r.scenarios.as_slice()).unwrap_or_default();
    DrillRunSummary {
        run_id: row.run_id.clone(),
        started: crate::time::date_time(row.started_at, zone),
        status: status(row, now_us),
        asked,
        queue: row.queue.clone(),
        timings: row.timings.clone(),
        requested_by: row.requested_by.clone(),
        passed: scenarios
            .iter()
            .filter(|s| s.status == crate::drill::ScenarioStatus::Passed)
            .count(),
        total: kinds.len(),
        took: row
            .finished_at
            .map(|end| human_duration(end - row.started_at)),
    }
}

fn scenario_run(s: &ScenarioReport) -> DrillScenarioRun {
    DrillScenarioRun {
        kind: s.kind.as_str().into(),
        status: s.status.as_str().into(),
        took: s.took_ms.map(|ms| human_duration(ms as i64 * 1000)),
        setup: s.kind.setup().into(),
        proves: s.kind.proves().into(),
        checks: s
            .checks
            .iter()
            .map(|c| DrillCheck {
                name: c.name.clone(),
                passed: c.passed,
                detail: c.detail.clone(),
                evidence: c
                    .evidence
                    .iter()
                    .map(|e| DrillEvidence {
                        href: e.path(),
                        label: format!("#{} {}", e.seq, e.kind.replace('_', " ")),
                    })
                    .collect(),
            })
            .collect(),
        jobs: s
            .jobs
            .iter()
            .map(|j| DrillCapture {
                role: j.role.clone(),
                job_id: j.job_id.clone(),
                state: j.state.clone(),
                delivery_count: j.delivery_count,
                owner_epoch: j.owner_epoch,
                deadline_left: if j.deadline_left_ms < 0 {
                    format!("passed {} ago", human_duration(-j.deadline_left_ms * 1000))
                } else {
                    human_duration(j.deadline_left_ms * 1000)
                },
                renewals: j.renewals.clone(),
                attempt_count: j.attempt_count,
                recovery_reason: j.recovery_reason.clone(),
                result_transition: j.result_transition.clone(),
                deletion: j.deletion.clone(),
            })
            .collect(),
        notes: s.notes.clone(),
        faults_fired: s.faults_fired.clone(),
    }
}

impl LedgerConsole {
    /// Whether this console shows drill runs: only to an operator without a tenant limit, as
    /// [`crate::operators::Operator::sees_drills`] says.
    fn shows_drills(&self) -> bool {
        self.tenants.is_none()
    }

    pub(super) async fn build_drills(&self) -> Result<DrillsPage, LedgerError> {
        let now = self.ledger.now_us().await?;
        let rows = if self.shows_drills() {
            self.ledger.drill_runs(RUNS).await?
        } else {
            Vec::new()
        };
        let access = &self.queue.drills;
        // Marked by this process's environment, or by a production deployment's in the
        // database itself.
        let production = access.environment == Environment::Production
            || self.ledger.marked_production().await?;
        let mut queues = vec!["embedded".to_owned()];
        if access.sqs {
            queues.push("sqs".into());
        }
        Ok(DrillsPage {
            catalogue: DrillKind::ALL.into_iter().map(scenario).collect(),
            runs: rows
                .iter()
                .map(|row| summary(row, report_of(row).as_ref(), now, self.zone))
                .collect(),
            runs_withheld: (!self.shows_drills()).then(|| {
                "Drill runs and their reports are the deployment's, not a tenant's: they are \
                 shown to operators without a tenant limit."
                    .to_owned()
            }),
            refused: production.then(|| {
                "This deployment is marked production: drills inject faults and never run here. \
                 Run them against a staging or development deployment."
                    .to_owned()
            }),
            queues,
            models: std::iter::once(("stub".to_owned(), "stub model".to_owned()))
                .chain(access.provider.as_ref().map(|p| {
                    (
                        "configured".to_owned(),
                        format!("this deployment's provider ({})", p.model),
                    )
                }))
                .collect(),
        })
    }

    pub(super) async fn build_drill_run(
        &self,
        run_id: String,
    ) -> Result<Option<DrillRun>, LedgerError> {
        if !self.shows_drills() {
            return Ok(None);
        }
        let Some(row) = self.ledger.drill_run(&run_id).await? else {
            return Ok(None);
        };
        let now = self.ledger.now_us().await?;
        let report = report_of(&row);
        let summary = summary(&row, report.as_ref(), now, self.zone);
        Ok(Some(DrillRun {
            provider: report
                .as_ref()
                .map_or_else(|| "stub".to_owned(), |r| r.provider.clone()),
            live: summary.status == "running",
            finished: row.finished_at.map(|t| self.at(t)),
            scenarios: report
                .map(|r| r.scenarios.iter().map(scenario_run).collect())
                .unwrap_or_default(),
            summary,
        }))
    }
}
