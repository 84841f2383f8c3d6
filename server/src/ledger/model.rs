//! What goes into and comes out of the ledger.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::job::detail::{Detail, KindDetail};
use crate::job::{Actor, EventKind, JobId, JobState};
use crate::provider::prices::Usage;

/// Whether an `unknown` job may be retried without an operator.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, serde::Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ReplayPolicy {
    /// An uncertain attempt waits for an operator decision or a provider retrieval.
    #[default]
    Manual,
    /// Pre-approved: an uncertain attempt may be retried, accepting possible duplicate cost.
    ReplayOnUnknown,
}

impl ReplayPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            ReplayPolicy::Manual => "manual",
            ReplayPolicy::ReplayOnUnknown => "replay_on_unknown",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Self> {
        match s {
            "manual" => Some(ReplayPolicy::Manual),
            "replay_on_unknown" => Some(ReplayPolicy::ReplayOnUnknown),
            _ => None,
        }
    }
}

/// A stored name that is not one of an enum's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {name:?}")]
pub struct UnknownName {
    what: &'static str,
    name: String,
}

impl TryFrom<String> for ReplayPolicy {
    type Error = UnknownName;
    fn try_from(name: String) -> Result<Self, UnknownName> {
        ReplayPolicy::parse(&name).ok_or(UnknownName {
            what: "replay policy",
            name,
        })
    }
}

impl TryFrom<String> for AttemptOutcome {
    type Error = UnknownName;
    fn try_from(name: String) -> Result<Self, UnknownName> {
        AttemptOutcome::parse(&name).ok_or(UnknownName {
            what: "attempt outcome",
            name,
        })
    }
}

/// A job to create. The digest is computed by the caller from the same input.
#[derive(Debug, Clone)]
pub struct NewJob {
    pub tenant: String,
    pub idempotency_key: String,
    pub request_digest: String,
    pub contract_version: String,
    /// The workload input, stored as JSON text; never logged or put in events.
    pub input: Value,
    /// Model parameters, stored as JSON text.
    pub model: Value,
    /// Fixed at creation; every later attempt spends what remains of it.
    pub deadline: Duration,
    pub max_attempts: u32,
    pub replay_policy: ReplayPolicy,
    /// The drill run this job belongs to: its outbox rows go only to that run's dispatcher.
    pub drill_run: Option<String>,
    /// The trace context it was submitted in (a W3C `traceparent`), kept for its workers.
    pub traceparent: Option<String>,
}

/// The outcome of an idempotent create.
#[derive(Debug, Clone)]
pub enum Created {
    /// A new job was written, with its outbox row.
    New(Job),
    /// The same tenant, key and digest already made this job.
    Existing(Job),
}

impl Created {
    pub fn job(&self) -> &Job {
        match self {
            Created::New(job) | Created::Existing(job) => job,
        }
    }
}

/// The job record.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct Job {
    pub job_id: String,
    pub tenant: String,
    pub idempotency_key: String,
    pub request_digest: String,
    pub input_ref: String,
    pub contract_version: String,
    #[serde(serialize_with = "serialize_state")]
    #[sqlx(try_from = "String")]
    pub state: JobState,
    pub owner_epoch: i64,
    pub owner_id: Option<String>,
    /// Microseconds since the Unix epoch, database clock.
    pub owner_until: Option<i64>,
    pub deadline_at: i64,
    /// Attempts recorded, refusals included: the last attempt's number.
    pub attempt_count: i64,
    pub max_attempts: i64,
    /// Attempts that may have run the model (the pending one included), counted against
    /// `max_attempts`; a refusal the provider confirms it never ran spends none.
    #[sqlx(default)]
    pub budget_used: i64,
    pub retry_at: Option<i64>,
    pub result_ref: Option<String>,
    pub error_code: Option<String>,
    #[sqlx(try_from = "String")]
    pub replay_policy: ReplayPolicy,
    pub recovery_reason: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    pub terminal_at: Option<i64>,
    /// The attempt in flight under the current owner, if any.
    pub pending_attempt: Option<i64>,
    /// The drill run that made this job, if a drill did.
    #[sqlx(default)]
    pub drill_run: Option<String>,
    /// The number its timeline's next event will take: the events so far, plus one.
    #[sqlx(default)]
    #[serde(skip)]
    pub next_event_seq: i64,
    /// Where the job stands on its provider route ([`Route`]).
    #[sqlx(flatten)]
    pub route: Route,
}

/// Where a job stands on its ordered list of provider/model pairs (fallback): step 0 is the
/// worker's own provider and the job's model; a later step names the pair its attempts go to
/// now, moved on to by a refusal that proved the model did not run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct Route {
    #[sqlx(default, rename = "route_step")]
    pub step: i64,
    /// The pair of a step past the first: `(provider, model)`.
    #[sqlx(default, rename = "route_provider")]
    pub provider: Option<String>,
    #[sqlx(default, rename = "route_model")]
    pub model: Option<String>,
    /// When the current pair first refused the job (µs, database clock).
    #[sqlx(default, rename = "route_since")]
    pub since: Option<i64>,
}

fn serialize_state<S: serde::Serializer>(state: &JobState, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(state.as_str())
}

/// The fence an owner writes under: the job, the epoch its claim made, and the worker that
/// holds it. Every owner write names it; one made under an outdated fence is refused.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Owner {
    pub job_id: JobId,
    pub epoch: i64,
    pub worker_id: String,
}

impl Owner {
    pub fn new(job_id: JobId, epoch: i64, worker_id: impl Into<String>) -> Self {
        Owner {
            job_id,
            epoch,
            worker_id: worker_id.into(),
        }
    }

    /// The job id as stored.
    pub fn job_id(&self) -> &str {
        self.job_id.as_str()
    }

    /// Who acts when this owner writes.
    pub fn actor(&self) -> Actor {
        Actor::Worker(self.worker_id.clone())
    }
}

/// A claim that made the caller the owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimed {
    /// The fence the new owner writes under.
    pub owner: Owner,
    pub epoch: i64,
    pub owner_until: i64,
    /// The database clock when the claim committed: `owner_until - at` is the lease granted.
    pub at: i64,
    pub deadline_at: i64,
    /// Attempts recorded before this claim's.
    pub attempt_count: i64,
    /// Of the budget, what attempts before this claim's spent.
    pub budget_used: i64,
    pub max_attempts: i64,
    /// Where the job stands on its provider route: the new attempt goes to its pair.
    pub route: Route,
}

/// A durable attempt record, written before the provider is called.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptStarted {
    pub attempt_no: i64,
    pub epoch: i64,
}

impl AttemptStarted {
    /// Fenceline's own id for one attempt, `job_id:attempt_no`: sent to the provider where it
    /// accepts one and kept on the attempt, so an uncertain call can be looked up later.
    pub fn client_request_id(&self, job_id: &str) -> String {
        Self::client_request_id_for(job_id, self.attempt_no)
    }

    pub(crate) fn client_request_id_for(job_id: &str, attempt_no: i64) -> String {
        format!("{job_id}:{attempt_no}")
    }
}

/// What one owner's lease renewal did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Renewal {
    pub job_id: String,
    pub epoch: i64,
    /// The new lease expiry, or why the lease could not be renewed.
    pub outcome: Result<i64, super::Refusal>,
    /// The database clock when the renewal was written (0 when refused): `expiry - at` is
    /// the lease granted, which a worker counts on its own monotonic clock.
    pub at: i64,
}

/// What an attempt spent: the tokens its answer reported, on which model, and what they cost
/// at that model's price then (`None` without a price).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spend {
    pub model: String,
    #[serde(flatten)]
    pub usage: Usage,
    /// Nano-dollars (10⁻⁹ USD).
    #[serde(skip)]
    pub cost: Option<i64>,
}

/// What is kept on an attempt with its answer: the spend (`usage` as JSON, `usage_model`,
/// `tokens`, `cost_nusd`) and the provider's own request id, when the answer named one.
#[derive(Debug, Clone, Default)]
pub(crate) struct StoredSpend {
    pub(crate) usage: Option<String>,
    pub(crate) model: Option<String>,
    pub(crate) tokens: Option<i64>,
    pub(crate) cost: Option<i64>,
    pub(crate) request_id: Option<String>,
}

/// An owner's answer for its attempt, with what the attempt spent when the provider said, and
/// the provider's own id for the request that answered (its evidence upstream).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answered {
    pub body: String,
    pub spend: Option<Spend>,
    pub request_id: Option<String>,
}

impl Answered {
    /// What goes on the attempt with the answer.
    pub(crate) fn kept(&self) -> StoredSpend {
        let mut kept = match &self.spend {
            Some(s) => StoredSpend {
                usage: Some(serde_json::to_string(s).expect("a spend serialises")),
                model: Some(s.model.clone()),
                tokens: Some(i64::try_from(s.usage.total()).unwrap_or(i64::MAX)),
                cost: s.cost,
                request_id: None,
            },
            None => StoredSpend::default(),
        };
        kept.request_id = self.request_id.clone();
        kept
    }
}

impl From<&str> for Answered {
    fn from(body: &str) -> Answered {
        Answered::from(body.to_owned())
    }
}

impl From<&String> for Answered {
    fn from(body: &String) -> Answered {
        Answered::from(body.as_str())
    }
}

impl From<String> for Answered {
    fn from(body: String) -> Answered {
        Answered {
            body,
            spend: None,
            request_id: None,
        }
    }
}

/// A result that became the job's one accepted result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    pub result_ref: String,
}

/// A confirmed provider failure reported by the owner.
#[derive(Debug, Clone)]
pub enum Failure {
    /// Another attempt may help; not before `backoff`.
    Retryable {
        error_code: String,
        backoff: Duration,
    },
    /// No attempt will help.
    Fatal { error_code: String },
}

/// A refusal the provider confirmed: it did not run the attempt (a rate limit, overload).
#[derive(Debug, Clone)]
pub struct Throttle {
    /// Why, as the adapter classified it (`rate_limited`, `http_503`, `connect_failed`, …).
    pub error_code: String,
    /// How long the job waits before its next attempt (the provider's reset plus jitter, or a
    /// capped backoff); never past the deadline.
    pub wait: Duration,
    /// Which limit refused it, when the provider said (`requests`, `tokens`), for the timeline.
    pub limit: Option<String>,
    /// The provider and model whose limit refused it.
    pub provider: String,
    pub model: String,
    /// The next pair of the job's route it moves on to instead of waiting, when the refusal
    /// proved the model did not run and waiting would take too long.
    pub fallback: Option<crate::job::detail::ProviderFallback>,
}

/// Where a refusal left the job: `retry_authorized` until `retry_at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Throttled {
    pub retry_at: i64,
}

/// Where a reported failure left the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailureOutcome {
    pub state: JobState,
}

/// Where a recovery claim left the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recovered {
    pub state: JobState,
    pub epoch: i64,
    /// Attempts that were pending and are now `lost` (their outcome is unknown).
    pub lost_attempts: i64,
    /// The attempt in flight that stays pending, held for a worker to adopt: its provider id
    /// was kept (the job stays `running`).
    pub held_for_adoption: Option<i64>,
}

/// A worker's adoption of an attempt in flight: the job under its new epoch and lease, the
/// attempt it keeps, and the provider id to poll it by.
#[derive(Debug, Clone)]
pub struct Adopted {
    pub claimed: Claimed,
    pub attempt: AttemptStarted,
    pub provider_id: String,
}

/// A recorded decision over an `unknown` job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Evidence shows the call succeeded; `result` becomes the accepted result.
    ResolveSucceeded { result: String, evidence: String },
    /// The job fails for good.
    ResolveFailed { error_code: String },
    /// Another attempt is permitted (an operator or a provider retrieval).
    AuthorizeRetry,
    /// The job's pre-approved replay policy permits another attempt.
    ReplayPolicy,
}

impl Decision {
    pub fn as_str(&self) -> &'static str {
        match self {
            Decision::ResolveSucceeded { .. } => "resolve_succeeded",
            Decision::ResolveFailed { .. } => "resolve_failed",
            Decision::AuthorizeRetry => "authorize_retry",
            Decision::ReplayPolicy => "replay_policy",
        }
    }
}

/// What an operator decides about an `unknown` job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DecisionKind {
    /// Another attempt at a new epoch (an earlier attempt can never commit); the attempt budget
    /// and the deadline stay.
    AuthorizeRetry,
    /// The call completed: `evidence` and/or `result` are required.
    ResolveSucceeded,
    /// The job fails for good.
    ResolveFailed,
}

impl std::str::FromStr for DecisionKind {
    type Err = String;

    /// The serde names, the ones the API reads.
    fn from_str(text: &str) -> Result<DecisionKind, String> {
        serde_json::from_value(Value::from(text)).map_err(|_| {
            "a decision is resolve_succeeded, resolve_failed or authorize_retry".to_owned()
        })
    }
}

/// Resolving as succeeded with neither the provider's reference nor the result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoEvidence;

/// The error code of a job an operator resolved as failed.
pub const OPERATOR_RESOLVED_FAILED: &str = "operator_resolved_failed";

impl Decision {
    /// An operator's decision, read the same way from the console's form, the API and the
    /// command line. For `ResolveSucceeded`, `evidence` (the provider's reference for the call)
    /// and `result` (the result itself) are trimmed and at least one is needed: the result
    /// becomes the accepted one, or a record of the reference when only that was given.
    pub fn by_operator(
        kind: DecisionKind,
        evidence: &str,
        result: &str,
    ) -> Result<Decision, NoEvidence> {
        Ok(match kind {
            DecisionKind::AuthorizeRetry => Decision::AuthorizeRetry,
            DecisionKind::ResolveFailed => Decision::ResolveFailed {
                error_code: OPERATOR_RESOLVED_FAILED.to_owned(),
            },
            DecisionKind::ResolveSucceeded => {
                let (evidence, result) = (evidence.trim(), result.trim());
                if evidence.is_empty() && result.is_empty() {
                    return Err(NoEvidence);
                }
                Decision::ResolveSucceeded {
                    result: if result.is_empty() {
                        serde_json::json!({ "provider_reference": evidence }).to_string()
                    } else {
                        result.to_owned()
                    },
                    evidence: if evidence.is_empty() {
                        "result given by the operator".to_owned()
                    } else {
                        evidence.to_owned()
                    },
                }
            }
        })
    }
}

/// A decision as the audit log keeps it.
#[derive(Debug, Clone, Serialize)]
pub struct DecisionRecord {
    pub id: i64,
    pub job_id: String,
    pub decided_at: i64,
    pub actor: String,
    pub decision: String,
    pub seen_epoch: i64,
    pub new_epoch: i64,
    pub from_state: String,
    pub to_state: String,
    pub reason: String,
    /// What a resolution as succeeded named as its evidence (the provider's reference).
    pub evidence: Option<String>,
}

/// How an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AttemptOutcome {
    Pending,
    Succeeded,
    FailedRetryable,
    FailedFatal,
    /// The owner lost the job with the call in flight: its outcome is unknown.
    Lost,
    /// The answer came back after the owner was fenced out; kept as evidence only.
    StaleDiscarded,
    /// The provider refused it before running it (a rate limit, overload): no budget spent.
    Throttled,
}

impl AttemptOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptOutcome::Pending => "pending",
            AttemptOutcome::Succeeded => "succeeded",
            AttemptOutcome::FailedRetryable => "failed_retryable",
            AttemptOutcome::FailedFatal => "failed_fatal",
            AttemptOutcome::Lost => "lost",
            AttemptOutcome::StaleDiscarded => "stale_discarded",
            AttemptOutcome::Throttled => "throttled",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Self> {
        [
            AttemptOutcome::Pending,
            AttemptOutcome::Succeeded,
            AttemptOutcome::FailedRetryable,
            AttemptOutcome::FailedFatal,
            AttemptOutcome::Lost,
            AttemptOutcome::StaleDiscarded,
            AttemptOutcome::Throttled,
        ]
        .into_iter()
        .find(|o| o.as_str() == s)
    }
}

/// One provider attempt.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct Attempt {
    pub job_id: String,
    pub attempt_no: i64,
    pub epoch: i64,
    pub worker_id: String,
    pub provider: String,
    pub provider_request_id: Option<String>,
    /// The id the provider runs the attempt under in the background, kept before waiting.
    pub submitted_id: Option<String>,
    /// What its answer said it used, as stored (see [`Attempt::spend`]).
    pub usage: Option<String>,
    pub cost_nusd: Option<i64>,
    pub started_at: i64,
    pub finished_at: Option<i64>,
    #[sqlx(try_from = "String")]
    pub outcome: AttemptOutcome,
    pub error_code: Option<String>,
    pub result_ref: Option<String>,
}

impl Attempt {
    /// What the attempt spent, when its answer said.
    pub fn spend(&self) -> Option<Spend> {
        let mut spend: Spend = serde_json::from_str(self.usage.as_deref()?).ok()?;
        spend.cost = self.cost_nusd;
        Some(spend)
    }
}

/// Which queue delivery an event is about. Never the receipt handle itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeliveryRef {
    pub message_id: String,
    pub receive_count: i64,
    /// 8 hex characters of SHA-256 of the receipt handle.
    pub handle_hash: String,
}

/// The 8-hex-character fingerprint of a receipt handle that events may carry.
pub fn handle_hash(receipt_handle: &str) -> String {
    hex::encode(&Sha256::digest(receipt_handle.as_bytes())[..4])
}

/// An event to append.
#[derive(Debug, Clone)]
pub struct NewEvent {
    pub kind: EventKind,
    pub actor: Actor,
    /// The epoch the actor acted under; the job's current epoch when `None`.
    pub epoch: Option<i64>,
    pub delivery: Option<DeliveryRef>,
    pub attempt_no: Option<i64>,
    /// Small and bounded; never prompts, answers, credentials or receipt handles.
    pub detail: Value,
}

impl NewEvent {
    pub fn new(kind: EventKind, actor: &Actor) -> Self {
        NewEvent {
            kind,
            actor: actor.clone(),
            epoch: None,
            delivery: None,
            attempt_no: None,
            detail: Value::Object(Default::default()),
        }
    }

    pub fn epoch(mut self, epoch: i64) -> Self {
        self.epoch = Some(epoch);
        self
    }

    pub fn attempt(mut self, attempt_no: i64) -> Self {
        self.attempt_no = Some(attempt_no);
        self
    }

    pub fn delivery(mut self, delivery: DeliveryRef) -> Self {
        self.delivery = Some(delivery);
        self
    }

    /// The event's detail, of its kind's type.
    pub fn detail(mut self, detail: impl Into<Detail>) -> Self {
        let detail = detail.into();
        debug_assert_eq!(detail.kind(), self.kind, "a detail of another kind");
        self.detail = crate::job::detail::stored(&detail);
        self
    }

    /// A detail of any shape: what an older version, or a fault, may have left in a row.
    pub fn raw_detail(mut self, detail: Value) -> Self {
        self.detail = detail;
        self
    }
}

/// One timeline event.
#[derive(Debug, Clone, Serialize)]
pub struct Event {
    pub job_id: String,
    pub seq: i64,
    /// Microseconds since the Unix epoch, database clock.
    pub at: i64,
    pub kind: EventKind,
    pub epoch: i64,
    pub actor: String,
    pub delivery: Option<DeliveryRef>,
    pub attempt_no: Option<i64>,
    /// Milliseconds left before the job's deadline when the event happened.
    pub deadline_left_ms: Option<i64>,
    pub detail: Value,
}

impl Event {
    /// The event's detail as `D`, when the event is of `D`'s kind and its detail reads as one.
    pub fn detail_as<D: KindDetail>(&self) -> Option<D> {
        crate::job::detail::read_as(self.kind, &self.detail)
    }
}

/// Which jobs to list. Pages run newest first; `before` is the last id of the previous page.
#[derive(Debug, Clone, Default)]
pub struct JobFilter {
    pub tenant: Option<String>,
    /// Only these tenants' jobs (an operator's scope); `None` for every tenant.
    pub tenants: Option<Vec<String>>,
    pub state: Option<JobState>,
    pub before: Option<String>,
    /// Only jobs with ids at or above this one (see `JobId::lower_bound_at`).
    pub from_id: Option<String>,
    /// Only jobs with ids below this one: created before its instant.
    pub to_id: Option<String>,
    /// Only jobs whose idempotency key starts with this.
    pub key_prefix: Option<String>,
    /// Only jobs an attempt of which ran on this worker.
    pub worker: Option<String>,
    /// Only jobs whose last error has this code.
    pub error_code: Option<String>,
    /// Only jobs whose message was delivered more than once.
    pub redelivered: bool,
    /// Only jobs that had a stale result rejected.
    pub stale_rejected: bool,
    /// Leave out drill jobs (those with a `drill_run`), as the overview's counts do.
    pub without_drills: bool,
    /// Only jobs this worker owns now (`owner_id`; a running job's lease holder).
    pub owner: Option<String>,
    pub limit: u32,
}

/// One page of jobs.
#[derive(Debug, Clone, Serialize)]
pub struct JobPage {
    pub jobs: Vec<Job>,
    /// Pass as `before` for the next page; `None` on the last page.
    pub next: Option<String>,
}
