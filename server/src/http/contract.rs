//! The API's request and response types. The OpenAPI document is generated from these
//! (`utoipa`), the handlers serialize them and `fenceline submit` sends and reads them: the
//! spec, the serializer and the client cannot drift apart.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::openapi::schema::{
    ArrayBuilder, Object, ObjectBuilder, OneOfBuilder, Schema, SchemaType, Type,
};
use utoipa::{IntoParams, ToSchema};

use crate::job::{EventKind, JobState};
use crate::ledger::{Attempt, AttemptOutcome, Event, Job, ReplayPolicy};
use crate::time::rfc3339_us;

/// `POST /api/v1/jobs`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = CreateJob)]
pub struct CreateJobRequest {
    /// The same key and request always give the same job. It may not contain `~rerun-`, which
    /// marks an operator's re-runs.
    #[schema(min_length = 1, max_length = 200)]
    pub idempotency_key: String,
    /// The workload input (any JSON but null).
    #[schema(schema_with = any_json)]
    pub input: Value,
    #[serde(default = "default_contract")]
    #[schema(min_length = 1, max_length = 64, default = "v1")]
    pub contract_version: String,
    /// Model parameters, checked against the deployment's model policy (allowed models, per
    /// tenant where configured; max_tokens cap): a refused one is a 400 saying why.
    #[serde(default = "default_model")]
    #[schema(value_type = ModelParameters)]
    pub model: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 43200, default = 3600)]
    pub deadline_seconds: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 20, default = 3)]
    pub max_attempts: Option<u32>,
    /// What an uncertain attempt may do; default: the tenant's policy (`--tenant-replay-policy`),
    /// else `manual`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_policy: Option<ReplayPolicy>,
}

/// The most jobs one `POST /api/v1/jobs/batch` takes.
pub const MAX_BATCH: usize = 500;

/// `POST /api/v1/jobs/batch`: several jobs in one request, each as `POST /jobs` takes it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = CreateJobs)]
pub struct CreateJobsRequest {
    /// 1 to 500 jobs. Each is checked, made idempotently and answered on its own: one that is
    /// refused does not hold back the others.
    #[schema(value_type = Vec<CreateJobRequest>, min_items = 1, max_items = 500)]
    pub jobs: Vec<Value>,
}

/// What became of one job of a batch: the status and body `POST /jobs` would have answered.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = BatchItem)]
pub struct BatchItem {
    /// 201 (created), 200 (the same key and request made this job before), 400 (invalid),
    /// 409 (key already used for a different request) or 503 (ledger unavailable: retry it).
    pub status: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<JobView>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorDetail>,
}

/// The answer to a batch, one item per job in the order sent, with their counts.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = BatchResult)]
pub struct BatchResponse {
    pub jobs: Vec<BatchItem>,
    /// Jobs made by this request (201).
    pub created: usize,
    /// Jobs the same key and request had made before (200).
    pub existing: usize,
    /// Jobs refused (every other status); each says why.
    pub failed: usize,
}

fn default_model() -> Value {
    Value::Object(Default::default())
}

fn default_contract() -> String {
    "v1".to_owned()
}

/// The model parameters a job may carry (documentation of `CreateJob.model`; the handler
/// checks them against the model policy, whose list `policy::ALLOWED_PARAMETERS` this mirrors,
/// as a test asserts).
#[derive(Debug, ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct ModelParameters {
    model: Option<String>,
    #[schema(minimum = 0, maximum = 2)]
    temperature: Option<f64>,
    #[schema(minimum = 0, maximum = 1)]
    top_p: Option<f64>,
    #[schema(minimum = 1)]
    max_tokens: Option<u64>,
    #[schema(minimum = 1)]
    max_completion_tokens: Option<u64>,
    seed: Option<i64>,
    /// One stop sequence or up to four.
    #[schema(schema_with = stop_sequences)]
    stop: Option<Value>,
    #[schema(value_type = Option<Object>)]
    response_format: Option<Value>,
    #[schema(minimum = -2, maximum = 2)]
    presence_penalty: Option<f64>,
    #[schema(minimum = -2, maximum = 2)]
    frequency_penalty: Option<f64>,
    reasoning_effort: Option<ReasoningEffort>,
    /// A job has one answer: only 1.
    #[schema(minimum = 1, maximum = 1)]
    n: Option<u8>,
    /// A cut-off stream would make every attempt uncertain: only false.
    stream: Option<bool>,
    /// The job's own fallback route, replacing its tenant's: up to four `provider:model`
    /// pairs (`"bedrock:amazon.nova-lite-v1:0"`, or `{"provider": …, "model": …}`) its
    /// attempts move on to when the pair before refuses it for too long. Each model is held
    /// to the model policy; the provider is one of `stub`, `openai`, `openai-responses`,
    /// `anthropic`, `bedrock`.
    #[schema(value_type = Option<Vec<String>>, max_items = 4)]
    fallback: Option<Value>,
}

#[derive(Debug, ToSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
enum ReasoningEffort {
    Minimal,
    Low,
    Medium,
    High,
}

/// Any JSON value (the API refuses `null` where a value is required, with a message).
fn any_json() -> Object {
    ObjectBuilder::new()
        .schema_type(SchemaType::AnyValue)
        .build()
}

/// A string or up to four strings.
fn stop_sequences() -> Schema {
    let text = || ObjectBuilder::new().schema_type(Type::String);
    Schema::OneOf(
        OneOfBuilder::new()
            .item(text())
            .item(ArrayBuilder::new().items(text()).max_items(Some(4)))
            .build(),
    )
}

/// Where to follow a job.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Links {
    #[serde(rename = "self")]
    pub self_: String,
    pub events: String,
    pub result: String,
    pub console: String,
}

/// A job as the API shows it. Times are RFC 3339 (database clock, UTC).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = Job)]
pub struct JobView {
    pub job_id: String,
    pub state: JobState,
    pub terminal: bool,
    pub idempotency_key: String,
    pub request_digest: String,
    pub contract_version: String,
    pub owner_epoch: i64,
    pub owner_id: Option<String>,
    #[schema(format = DateTime)]
    pub owner_until: Option<String>,
    #[schema(format = DateTime)]
    pub deadline_at: String,
    /// Attempts recorded, refusals by the provider included: the last attempt's number.
    pub attempt_count: i64,
    pub max_attempts: i64,
    /// Attempts that may have run the model, counted against `max_attempts`; a refusal the
    /// provider confirms (outcome `throttled`) spends none.
    pub budget_used: i64,
    #[schema(format = DateTime)]
    pub retry_at: Option<String>,
    pub result_ref: Option<String>,
    pub error_code: Option<String>,
    pub replay_policy: ReplayPolicy,
    pub recovery_reason: Option<String>,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub updated_at: String,
    #[schema(format = DateTime)]
    pub terminal_at: Option<String>,
    /// Present when one job is read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<Vec<AttemptView>>,
    pub links: Links,
}

impl JobView {
    pub fn of(job: &Job) -> JobView {
        JobView {
            job_id: job.job_id.clone(),
            state: job.state,
            terminal: job.state.is_terminal(),
            idempotency_key: job.idempotency_key.clone(),
            request_digest: job.request_digest.clone(),
            contract_version: job.contract_version.clone(),
            owner_epoch: job.owner_epoch,
            owner_id: job.owner_id.clone(),
            owner_until: job.owner_until.map(rfc3339_us),
            deadline_at: rfc3339_us(job.deadline_at),
            attempt_count: job.attempt_count,
            max_attempts: job.max_attempts,
            budget_used: job.budget_used,
            retry_at: job.retry_at.map(rfc3339_us),
            result_ref: job.result_ref.clone(),
            error_code: job.error_code.clone(),
            replay_policy: job.replay_policy,
            recovery_reason: job.recovery_reason.clone(),
            created_at: rfc3339_us(job.created_at),
            updated_at: rfc3339_us(job.updated_at),
            terminal_at: job.terminal_at.map(rfc3339_us),
            attempts: None,
            links: Links {
                self_: format!("/api/v1/jobs/{}", job.job_id),
                events: format!("/api/v1/jobs/{}/events", job.job_id),
                result: format!("/api/v1/jobs/{}/result", job.job_id),
                console: format!("/jobs/{}", job.job_id),
            },
        }
    }
}

/// The tokens one attempt's answer reported.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = Usage)]
pub struct UsageView {
    /// The model the attempt's request named (its price's key).
    pub model: String,
    /// Input (prompt) tokens, cached ones included.
    pub input_tokens: u64,
    /// Output (completion) tokens, reasoning ones included.
    pub output_tokens: u64,
    pub cached_tokens: u64,
    pub reasoning_tokens: u64,
}

/// One provider attempt.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = Attempt)]
pub struct AttemptView {
    pub attempt_no: i64,
    pub epoch: i64,
    pub worker_id: String,
    pub provider: String,
    pub provider_request_id: Option<String>,
    /// The id the provider runs the attempt under in the background (a background response),
    /// kept before any waiting: a later owner polls it instead of running the model again.
    pub submitted_id: Option<String>,
    /// The tokens the attempt's answer reported, when it did.
    pub usage: Option<UsageView>,
    /// What those tokens cost at the price the deployment named for the model then, in
    /// nano-dollars (10⁻⁹ USD); absent without usage or a price.
    pub cost_nanousd: Option<i64>,
    #[schema(format = DateTime)]
    pub started_at: String,
    #[schema(format = DateTime)]
    pub finished_at: Option<String>,
    /// `throttled`: refused by the provider before it ran, no budget spent; `lost`: the owner
    /// lost the job with the call in flight; `stale_discarded`: the answer came after the owner
    /// was fenced out, kept as evidence only.
    pub outcome: AttemptOutcome,
    pub error_code: Option<String>,
}

impl AttemptView {
    pub fn of(a: &Attempt) -> AttemptView {
        AttemptView {
            attempt_no: a.attempt_no,
            epoch: a.epoch,
            worker_id: a.worker_id.clone(),
            provider: a.provider.clone(),
            provider_request_id: a.provider_request_id.clone(),
            submitted_id: a.submitted_id.clone(),
            usage: a.spend().map(|s| UsageView {
                model: s.model,
                input_tokens: s.usage.input,
                output_tokens: s.usage.output,
                cached_tokens: s.usage.cached,
                reasoning_tokens: s.usage.reasoning,
            }),
            cost_nanousd: a.cost_nusd,
            started_at: rfc3339_us(a.started_at),
            finished_at: a.finished_at.map(rfc3339_us),
            outcome: a.outcome,
            error_code: a.error_code.clone(),
        }
    }
}

/// Which queue delivery an event is about: never the receipt handle itself.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Delivery {
    pub message_id: String,
    pub receive_count: i64,
    /// 8 hex characters of SHA-256 of the receipt handle.
    pub handle_hash: String,
}

/// One timeline event.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = Event)]
pub struct EventView {
    pub seq: i64,
    #[schema(format = DateTime)]
    pub at: String,
    pub kind: EventKind,
    pub epoch: i64,
    pub actor: String,
    pub delivery: Option<Delivery>,
    pub attempt_no: Option<i64>,
    pub deadline_left_ms: Option<i64>,
    #[schema(schema_with = any_json)]
    pub detail: Value,
    /// The event on the job's console page.
    pub permalink: String,
}

impl EventView {
    pub fn of(e: &Event) -> EventView {
        EventView {
            seq: e.seq,
            at: rfc3339_us(e.at),
            kind: e.kind,
            epoch: e.epoch,
            actor: e.actor.clone(),
            delivery: e.delivery.as_ref().map(|d| Delivery {
                message_id: d.message_id.clone(),
                receive_count: d.receive_count,
                handle_hash: d.handle_hash.clone(),
            }),
            attempt_no: e.attempt_no,
            deadline_left_ms: e.deadline_left_ms,
            detail: e.detail.clone(),
            permalink: format!("/jobs/{}#e{}", e.job_id, e.seq),
        }
    }
}

/// One page of jobs, newest first.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct JobPage {
    pub jobs: Vec<JobView>,
    /// Pass as `before` for the next page; null on the last page.
    pub next: Option<String>,
}

/// One page of a job's timeline, oldest first.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct EventPage {
    pub job_id: String,
    pub events: Vec<EventView>,
    /// Pass as `after` for the next page; null on the last page.
    pub next_after: Option<i64>,
}

/// A job's one accepted result.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct JobResult {
    pub job_id: String,
    pub result_ref: String,
    /// The model's answer: JSON when it was JSON, else a string.
    #[schema(schema_with = any_json)]
    pub result: Value,
}

/// Every error: a stable code and a message a client can act on.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = Error)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ErrorDetail {
    pub code: String,
    pub message: String,
    /// The job an idempotency conflict refers to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
}

/// A job id in the path.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct JobIdPath {
    /// `job_` and a UUID.
    #[param(pattern = "^job_[0-9a-f-]{36}$")]
    pub job_id: String,
}

/// `GET /api/v1/jobs`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    #[param(value_type = Option<JobState>)]
    pub state: Option<String>,
    /// `next` of the previous page.
    pub before: Option<String>,
    #[param(minimum = 1, maximum = 500, default = 50)]
    pub limit: Option<u32>,
}

/// `GET /api/v1/jobs/{job_id}/events`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    #[param(minimum = 0)]
    pub after: Option<i64>,
    #[param(minimum = 1, maximum = 1000, default = 100)]
    pub limit: Option<u32>,
}

pub use crate::ledger::DecisionKind;

/// `POST /api/v1/jobs/{job_id}/decisions` (an operator token).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DecisionRequest {
    pub decision: DecisionKind,
    /// The owner epoch the decider saw; a job that moved on since refuses with `409`.
    pub epoch: i64,
    /// Why, for the audit log and the timeline (1 to 2000 characters).
    pub reason: String,
    /// `resolve_succeeded`: the provider's reference for the call (at most 500 characters),
    /// shown wherever the decision is: the job, its timeline, the audit log, the exports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 500)]
    pub evidence: Option<String>,
    /// `resolve_succeeded`: the result, which becomes the accepted result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
}

/// `POST /api/v1/jobs/{job_id}/cancel` (an operator token).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelRequest {
    /// The owner epoch the operator saw; a job that moved on since refuses with `409`.
    pub epoch: i64,
    /// The state the operator saw.
    pub state: JobState,
    /// Why, for the audit log and the timeline (1 to 2000 characters).
    pub reason: String,
}

/// `POST /api/v1/bulk` (an operator token): preview an action on every job a filter matches.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkRequest {
    /// `authorize_retry` or `resolve_failed` (`unknown` jobs), `cancel` (running, unknown,
    /// retry authorized) or `rerun` (finished jobs).
    pub action: String,
    /// The jobs it acts on, as the jobs list filters them; every job the action applies to
    /// within the operator's tenants when empty.
    #[serde(default)]
    pub filter: BulkFilter,
}

/// A jobs-list filter.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkFilter {
    pub state: Option<JobState>,
    pub tenant: Option<String>,
    /// Idempotency keys starting with this.
    pub key_prefix: Option<String>,
    /// Created at or after this instant (RFC 3339, or `2026-12-01T09:30` in UTC).
    pub created_after: Option<String>,
    /// Created before this instant.
    pub created_before: Option<String>,
    /// An attempt of the job ran on this worker.
    pub worker: Option<String>,
    /// The job's last error code.
    pub error_code: Option<String>,
    /// Include drill jobs (left out by default).
    #[serde(default)]
    pub with_drills: bool,
}

/// `POST /api/v1/bulk/{bulk_id}/confirm` (the operator token that previewed it).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkConfirm {
    /// Why, for the audit log and every job's timeline (1 to 2000 characters).
    pub reason: String,
}

/// An action by filter: previewed (the exact count, nothing changed yet), running or done.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct BulkView {
    pub bulk_id: i64,
    pub action: String,
    /// `previewed`, `running` or `done`.
    pub status: String,
    /// The jobs it matched when previewed: exactly those it acts on.
    pub total: i64,
    pub applied: i64,
    /// Jobs that moved on since the preview: left alone.
    pub moved_on: i64,
    pub refused: i64,
    /// Until when a preview may be confirmed (RFC 3339).
    pub confirm_before: Option<String>,
    pub reason: Option<String>,
    /// The first jobs, with the epoch and state previewed and what came of each.
    pub jobs: Vec<BulkJobView>,
    /// The console page that shows it.
    pub console: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct BulkJobView {
    pub job_id: String,
    pub epoch: i64,
    pub state: String,
    /// `applied`, `moved_on`, `refused: …`; none until acted on.
    pub outcome: Option<String>,
}

/// A bulk action's id in a path.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct BulkIdPath {
    /// The id `POST /api/v1/bulk` answered with.
    #[param(pattern = "^[0-9]{1,18}$")]
    pub bulk_id: String,
}

/// `POST /api/v1/jobs/{job_id}/rerun` (an operator token).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RerunRequest {
    /// Why, for the audit log and both timelines (1 to 2000 characters).
    pub reason: String,
    /// How many events of the finished job's timeline the caller saw (`GET …/events`). The new
    /// key counts the re-runs among them, so a request sent again with the same value finds the
    /// job the first made (`200`) instead of making another. Without it, the job runs again as
    /// it is now, once more.
    #[serde(default)]
    pub seen_events: Option<i64>,
}

/// Where a job stands after an operator's action.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ActionOutcome {
    pub job_id: String,
    pub state: JobState,
    pub owner_epoch: i64,
}
