//! Redelivery drills: real jobs through the real worker, dispatcher, reaper, ledger and queue
//! code, with faults injected at named points on the drill's own jobs, ending in a verdict
//! whose every check is read back from the ledger and its events.
//!
//! Owns the catalogue ([`DrillKind`]), a run's rig (`rig`: its queue, workers, dispatcher and
//! reaper), the scenarios ([`scenarios`]), the runner ([`runner`]) and the report ([`Report`]).
//! It arms the fault points of [`crate::faults`]; it does not own them. A drill never runs in
//! a deployment marked production, never arms a fault on a job it did not create, and keeps its
//! jobs on its own queue (the `drill_run` tag routes their outbox rows to its dispatcher only).

pub mod provider;
mod rig;
pub mod runner;
mod scenarios;

use serde::{Deserialize, Serialize};

pub use runner::{start, DrillError, DrillProvider, DrillQueue, DrillRequest, DrillTimings};

pub use crate::job::DRILL_TENANT;

/// The drill catalogue: stable kinds, as in `docs/drills.md`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DrillKind {
    LiveOwnerSuppressesDuplicate,
    PausedWorkerStaleEpoch,
    UncertainAttemptRequiresDecision,
    CommitSurvivesFailedDelete,
    StaleReceiptHandleDelete,
    RenewalTimeoutLeaseValid,
    LeaseRenewalFailure,
    DeadlineExhausted,
    DeliveryAfterDelete,
    CrashBeforeDispatch,
    DlqReplayInspected,
    AttemptBudgetExhausted,
    WorkerCrashMidCall,
    ProviderRateLimitsABurst,
}

impl DrillKind {
    pub const ALL: [DrillKind; 14] = [
        DrillKind::LiveOwnerSuppressesDuplicate,
        DrillKind::PausedWorkerStaleEpoch,
        DrillKind::UncertainAttemptRequiresDecision,
        DrillKind::CommitSurvivesFailedDelete,
        DrillKind::StaleReceiptHandleDelete,
        DrillKind::RenewalTimeoutLeaseValid,
        DrillKind::LeaseRenewalFailure,
        DrillKind::DeadlineExhausted,
        DrillKind::DeliveryAfterDelete,
        DrillKind::CrashBeforeDispatch,
        DrillKind::DlqReplayInspected,
        DrillKind::AttemptBudgetExhausted,
        DrillKind::WorkerCrashMidCall,
        DrillKind::ProviderRateLimitsABurst,
    ];

    pub fn as_str(&self) -> &'static str {
        match self {
            DrillKind::LiveOwnerSuppressesDuplicate => "live-owner-suppresses-duplicate",
            DrillKind::PausedWorkerStaleEpoch => "paused-worker-stale-epoch",
            DrillKind::UncertainAttemptRequiresDecision => "uncertain-attempt-requires-decision",
            DrillKind::CommitSurvivesFailedDelete => "commit-survives-failed-delete",
            DrillKind::StaleReceiptHandleDelete => "stale-receipt-handle-delete",
            DrillKind::RenewalTimeoutLeaseValid => "renewal-timeout-lease-valid",
            DrillKind::LeaseRenewalFailure => "lease-renewal-failure",
            DrillKind::DeadlineExhausted => "deadline-exhausted",
            DrillKind::DeliveryAfterDelete => "delivery-after-delete",
            DrillKind::CrashBeforeDispatch => "crash-before-dispatch",
            DrillKind::DlqReplayInspected => "dlq-replay-inspected",
            DrillKind::AttemptBudgetExhausted => "attempt-budget-exhausted",
            DrillKind::WorkerCrashMidCall => "worker-crash-mid-call",
            DrillKind::ProviderRateLimitsABurst => "provider-rate-limits-a-burst",
        }
    }

    pub fn parse(s: &str) -> Option<DrillKind> {
        DrillKind::ALL.into_iter().find(|k| k.as_str() == s.trim())
    }

    /// The setup and the fault, in an operator's words.
    pub fn setup(&self) -> &'static str {
        match self {
            DrillKind::LiveOwnerSuppressesDuplicate => {
                "A copy of the message reaches a second worker while the first holds a valid lease."
            }
            DrillKind::PausedWorkerStaleEpoch => {
                "Worker A's model call answers, then A freezes until visibility and lease have \
                 expired; the job is recovered; A wakes up and tries to commit."
            }
            DrillKind::UncertainAttemptRequiresDecision => {
                "Continues the paused-worker drill: the job is unknown and its message is \
                 delivered again; then a fenced retry is authorized."
            }
            DrillKind::CommitSurvivesFailedDelete => {
                "The result commits; DeleteMessage then times out and the message comes back."
            }
            DrillKind::StaleReceiptHandleDelete => {
                "After the commit, the delete reports success but the message remains (as SQS \
                 does for an outdated handle)."
            }
            DrillKind::RenewalTimeoutLeaseValid => {
                "ChangeMessageVisibility times out; the message reappears while A's lease is \
                 still valid."
            }
            DrillKind::LeaseRenewalFailure => {
                "The ledger lease cannot be renewed while the model call runs."
            }
            DrillKind::DeadlineExhausted => {
                "The model call outlives the job's fixed deadline; a copy arrives later."
            }
            DrillKind::DeliveryAfterDelete => {
                "A standard-queue copy of the message arrives after it was deleted."
            }
            DrillKind::CrashBeforeDispatch => {
                "The dispatcher dies after claiming the job's outbox row, before the send."
            }
            DrillKind::DlqReplayInspected => {
                "The worker dies after every receive until the message passes maxReceiveCount; \
                 the dead letter is then replayed."
            }
            DrillKind::AttemptBudgetExhausted => {
                "Every attempt fails with a confirmed retryable error."
            }
            DrillKind::WorkerCrashMidCall => "The worker process dies during the model call.",
            DrillKind::ProviderRateLimitsABurst => {
                "A burst of jobs, each allowed a single attempt, meets a model that admits a call \
                 every 300 ms and refuses the rest with a rate limit naming when to call again."
            }
        }
    }

    /// What the verdict proves.
    pub fn proves(&self) -> &'static str {
        match self {
            DrillKind::LiveOwnerSuppressesDuplicate => {
                "The copy is suppressed without a provider call: one attempt, one accepted result."
            }
            DrillKind::PausedWorkerStaleEpoch => {
                "Recovery advances the epoch; the paused worker's commit is rejected as \
                 stale_epoch, it deletes nothing, and the job waits as unknown."
            }
            DrillKind::UncertainAttemptRequiresDecision => {
                "No second attempt before a recorded decision; the retry runs at a higher epoch \
                 and succeeds; the attempt count is cumulative."
            }
            DrillKind::CommitSurvivesFailedDelete => {
                "The job stays succeeded; the redelivery is acknowledged without inference; one \
                 attempt; the message is eventually gone."
            }
            DrillKind::StaleReceiptHandleDelete => {
                "The next receiver finds the terminal job and acknowledges it; no inference."
            }
            DrillKind::RenewalTimeoutLeaseValid => {
                "The renewal is recorded as uncertain; the copy defers to the lease; no duplicate \
                 attempt."
            }
            DrillKind::LeaseRenewalFailure => {
                "The worker stops its call and records lease_lost; recovery follows the state \
                 table (unknown, the attempt lost)."
            }
            DrillKind::DeadlineExhausted => {
                "Renewals stop at the deadline; the job expires; the late copy creates no new \
                 attempt."
            }
            DrillKind::DeliveryAfterDelete => "The copy is acknowledged without inference.",
            DrillKind::CrashBeforeDispatch => {
                "The outbox repairs the lost send: exactly one accepted result."
            }
            DrillKind::DlqReplayInspected => {
                "The letter lands in the DLQ; replay inspects the ledger first and keeps job id, \
                 deadline and attempt budget."
            }
            DrillKind::AttemptBudgetExhausted => {
                "Backoff between attempts; failed_terminal when the budget is spent; no extra \
                 attempt."
            }
            DrillKind::WorkerCrashMidCall => {
                "A recovery claim makes the job unknown; nothing is lost."
            }
            DrillKind::ProviderRateLimitsABurst => {
                "Every job succeeds; refusals are on record and spent no attempt of any budget; \
                 no message came near the dead-letter queue."
            }
        }
    }

    /// The fault points the scenario arms.
    pub fn faults(&self) -> &'static [crate::faults::FaultPoint] {
        use crate::faults::FaultPoint as F;
        match self {
            DrillKind::LiveOwnerSuppressesDuplicate => {
                &[F::QueueReceiveDuplicate, F::ProviderLatency]
            }
            DrillKind::PausedWorkerStaleEpoch | DrillKind::UncertainAttemptRequiresDecision => {
                &[F::WorkerPause]
            }
            DrillKind::CommitSurvivesFailedDelete => &[F::QueueDelete],
            DrillKind::StaleReceiptHandleDelete => &[F::QueueDeleteStaleHandle],
            DrillKind::RenewalTimeoutLeaseValid => &[F::QueueChangeVisibility, F::ProviderLatency],
            DrillKind::LeaseRenewalFailure => &[F::LeaseRenew, F::ProviderLatency],
            DrillKind::DeadlineExhausted => &[F::ProviderLatency],
            DrillKind::DeliveryAfterDelete => &[],
            DrillKind::CrashBeforeDispatch => &[F::DispatchCrashBeforeSend],
            DrillKind::DlqReplayInspected => &[F::WorkerCrashOnReceive],
            DrillKind::AttemptBudgetExhausted => &[F::ProviderRetryable],
            DrillKind::WorkerCrashMidCall => &[F::WorkerCrash, F::ProviderLatency],
            DrillKind::ProviderRateLimitsABurst => &[F::ProviderRateLimit],
        }
    }
}

/// Where a scenario is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScenarioStatus {
    Pending,
    Running,
    Passed,
    Failed,
}

impl ScenarioStatus {
    pub fn as_str(&self) -> &'static str {
        match self {
            ScenarioStatus::Pending => "pending",
            ScenarioStatus::Running => "running",
            ScenarioStatus::Passed => "passed",
            ScenarioStatus::Failed => "failed",
        }
    }
}

/// An event that proves (or disproves) a check: its permalink is `/jobs/{job_id}#e{seq}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evidence {
    pub job_id: String,
    pub seq: i64,
    pub kind: String,
}

impl Evidence {
    /// The event's permalink, relative to the console.
    pub fn path(&self) -> String {
        format!("/jobs/{}#e{}", self.job_id, self.seq)
    }
}

/// One check of a verdict, evaluated from the ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Check {
    pub name: String,
    pub passed: bool,
    /// What was found.
    pub detail: String,
    pub evidence: Vec<Evidence>,
}

/// What the seed's drill report captures for each job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capture {
    /// The job's part in the scenario.
    pub role: String,
    pub job_id: String,
    pub state: String,
    pub delivery_count: usize,
    pub owner_epoch: i64,
    /// Milliseconds of deadline left when captured (negative: passed).
    pub deadline_left_ms: i64,
    /// Visibility and lease renewal outcomes.
    pub renewals: String,
    pub attempt_count: i64,
    pub recovery_reason: Option<String>,
    /// What became of result commits: accepted, rejected (with the reason), or none.
    pub result_transition: String,
    pub deletion: String,
}

/// One scenario of a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScenarioReport {
    pub kind: DrillKind,
    pub status: ScenarioStatus,
    /// Milliseconds the scenario took.
    pub took_ms: Option<u64>,
    pub checks: Vec<Check>,
    pub jobs: Vec<Capture>,
    /// What the scenario could not do on this queue, and where it did it instead.
    pub notes: Vec<String>,
    /// Fault points that fired, in order.
    pub faults_fired: Vec<String>,
}

impl ScenarioReport {
    pub fn pending(kind: DrillKind) -> Self {
        ScenarioReport {
            kind,
            status: ScenarioStatus::Pending,
            took_ms: None,
            checks: Vec::new(),
            jobs: Vec::new(),
            notes: Vec::new(),
            faults_fired: Vec::new(),
        }
    }
}

/// A run's report: what was asked, and each scenario's checks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    pub run_id: String,
    pub queue: String,
    pub timings: String,
    /// The model the jobs called: `stub`, or `configured:<provider>`.
    #[serde(default = "stub_provider")]
    pub provider: String,
    pub requested_by: String,
    /// The version of the build that ran it (empty for runs recorded before it was kept).
    #[serde(default)]
    pub version: String,
    pub scenarios: Vec<ScenarioReport>,
}

fn stub_provider() -> String {
    "stub".into()
}

impl Report {
    /// PASS only when every scenario finished with checks and every check passed.
    pub fn passed(&self) -> bool {
        !self.scenarios.is_empty()
            && self.scenarios.iter().all(|s| {
                s.status == ScenarioStatus::Passed
                    && !s.checks.is_empty()
                    && s.checks.iter().all(|c| c.passed)
            })
    }

    pub fn finished(&self) -> bool {
        self.scenarios
            .iter()
            .all(|s| matches!(s.status, ScenarioStatus::Passed | ScenarioStatus::Failed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_parse_back_and_every_kind_is_described() {
        for kind in DrillKind::ALL {
            assert_eq!(DrillKind::parse(kind.as_str()), Some(kind));
            assert!(!kind.setup().is_empty() && !kind.proves().is_empty());
            let json = serde_json::to_string(&kind).unwrap();
            assert_eq!(json, format!("\"{}\"", kind.as_str()));
        }
        assert_eq!(DrillKind::parse("nope"), None);
    }

    #[test]
    fn a_report_passes_only_when_every_scenario_passed_with_checks() {
        let check = |passed| Check {
            name: "c".into(),
            passed,
            detail: String::new(),
            evidence: Vec::new(),
        };
        let mut scenario = ScenarioReport::pending(DrillKind::DeliveryAfterDelete);
        let mut report = Report {
            run_id: "r".into(),
            queue: "embedded".into(),
            timings: "compressed".into(),
            provider: "stub".into(),
            requested_by: "t".into(),
            version: String::new(),
            scenarios: vec![scenario.clone()],
        };
        assert!(!report.passed(), "pending is not a pass");
        scenario.status = ScenarioStatus::Passed;
        report.scenarios = vec![scenario.clone()];
        assert!(!report.passed(), "a scenario without checks proves nothing");
        scenario.checks = vec![check(true), check(false)];
        report.scenarios = vec![scenario.clone()];
        assert!(!report.passed());
        scenario.checks = vec![check(true)];
        report.scenarios = vec![scenario];
        assert!(report.passed());
        report.scenarios.clear();
        assert!(!report.passed(), "an empty run proves nothing");
    }
}
