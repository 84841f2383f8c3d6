//! The `Console` port: what the pages may ask of the engine, as view models ready to render.
//!
//! The server crate implements it over the ledger and the queue; pages reach it through the
//! Leptos context. Nothing here knows about SQL, queues or AWS.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// A console answer, or a message fit to show an operator.
pub type ConsoleResult<T> = Result<T, String>;
/// A boxed future, so that the port can be a trait object in the Leptos context.
pub type Pending<'a, T> = Pin<Box<dyn Future<Output = ConsoleResult<T>> + Send + 'a>>;

/// The engine as the console sees it.
pub trait Console: Send + Sync + 'static {
    fn overview(&self, window: Window) -> Pending<'_, Overview>;
    fn jobs(&self, query: JobsQuery) -> Pending<'_, JobsPage>;
    /// One job; its swimlane covers `zoom` (milliseconds after the job's creation) when given.
    fn job(&self, job_id: String, zoom: Option<Zoom>) -> Pending<'_, Option<JobDetail>>;
    fn timeline(&self, job_id: String, query: TimelineQuery) -> Pending<'_, Timeline>;
    /// The reconciliation queue, oldest first, a page after `after` (from a previous page).
    fn unknown(&self, after: Option<String>) -> Pending<'_, UnknownPage>;
    fn dead_letters(&self) -> Pending<'_, DeadLetters>;
    /// The audit log, newest first.
    fn audit(&self, query: AuditQuery) -> Pending<'_, AuditPage>;
    /// Worker processes that reported lately, and every owner of a running job.
    fn workers(&self) -> Pending<'_, WorkersPage>;
    /// The drill catalogue and the latest runs.
    fn drills(&self) -> Pending<'_, DrillsPage>;
    /// One drill run's report, if it exists.
    fn drill_run(&self, run_id: String) -> Pending<'_, Option<DrillRun>>;
    /// Who may sign in, and every API token (admins of every tenant only).
    fn operators(&self) -> Pending<'_, OperatorsPage>;
    /// The alert rules, the episodes open now and the latest closed ones.
    fn alerts(&self) -> Pending<'_, AlertsPage>;
    /// One action by filter: its preview, or its progress (its operator's, or for operators
    /// of every tenant).
    fn bulk(&self, bulk_id: String) -> Pending<'_, Option<BulkPage>>;
    /// The latest actions by filter (the visitor's own for an operator of some tenants).
    fn bulk_list(&self) -> Pending<'_, Vec<BulkRow>>;
    /// The incidents, open ones first.
    fn incidents(&self) -> Pending<'_, Vec<IncidentRow>>;
    /// One incident: its jobs, their key events merged, the decisions taken, its bundle.
    fn incident(&self, incident_id: String) -> Pending<'_, Option<IncidentPage>>;
}

/// One incident in the list.
#[derive(Debug, Clone, PartialEq)]
pub struct IncidentRow {
    pub incident_id: i64,
    pub title: String,
    pub external_id: Option<String>,
    pub open: bool,
    pub opened: String,
    pub opened_by: String,
    pub jobs: i64,
}

/// `/incidents/{id}`: the jobs of one incident and what happened to them.
#[derive(Debug, Clone, PartialEq)]
pub struct IncidentPage {
    pub incident_id: i64,
    pub title: String,
    pub external_id: Option<String>,
    pub opened: String,
    pub opened_by: String,
    /// When, by whom, and until when its jobs are kept, once closed.
    pub closed: Option<(String, String, String)>,
    /// The SHA-256 of the frozen bundle's files (Markdown, JSON, HTML), once closed.
    pub digests: Option<[String; 3]>,
    /// The visitor covers every tenant of its jobs: the bundle is theirs to download and to
    /// close with.
    pub whole: bool,
    pub total_jobs: i64,
    /// Its jobs the visitor sees (the first of them).
    pub jobs: Vec<IncidentJobRow>,
    /// The key events of its jobs, merged in time order.
    pub timeline: Vec<IncidentEventRow>,
    pub decisions: Vec<IncidentEventRow>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct IncidentJobRow {
    pub job_id: String,
    pub tenant: String,
    pub state: String,
    pub epoch: i64,
    pub attempts: String,
    pub created: String,
}

/// An event of one of an incident's jobs, or a decision over one.
#[derive(Debug, Clone, PartialEq)]
pub struct IncidentEventRow {
    pub at: String,
    pub job_id: String,
    /// The event's place on its job's timeline, for the link.
    pub seq: Option<i64>,
    pub kind: String,
    pub actor: String,
    pub detail: String,
}

/// An incident a job is pinned to, as its page names it.
#[derive(Debug, Clone, PartialEq)]
pub struct IncidentLink {
    pub incident_id: i64,
    pub title: String,
    pub open: bool,
}

/// One action by filter in the list.
#[derive(Debug, Clone, PartialEq)]
pub struct BulkRow {
    pub bulk_id: i64,
    pub action: String,
    pub filter: String,
    pub by: String,
    pub status: String,
    /// "990 of 1,000 acted on (10 moved on)".
    pub progress: String,
    pub created: String,
}

/// `/bulk/{id}`: an action on every job a filter matched.
#[derive(Debug, Clone, PartialEq)]
pub struct BulkPage {
    pub bulk_id: i64,
    /// "authorize a fenced retry".
    pub action: String,
    /// The jobs list with the filter it was previewed from.
    pub filter_link: String,
    pub filter: String,
    pub by: String,
    /// `previewed`, `running` or `done`.
    pub status: String,
    pub total: i64,
    pub created: String,
    pub confirmed: Option<String>,
    pub finished: Option<String>,
    pub reason: Option<String>,
    pub applied: i64,
    pub moved_on: i64,
    pub refused: i64,
    /// The visitor made the preview and may still confirm it; until when.
    pub confirm_until: Option<String>,
    /// A preview nobody confirmed in time.
    pub lapsed: bool,
    /// Its audit entries (its own and its jobs').
    pub audit_entries: i64,
    /// The first jobs, with the epoch and state previewed and what came of each.
    pub jobs: Vec<BulkJobRow>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct BulkJobRow {
    pub job_id: String,
    pub state: String,
    pub epoch: i64,
    /// "applied", "moved on", "refused: …", or "—" while waiting.
    pub outcome: String,
}

/// `/alerts`: the rules, what fires now, and what fired before, with what each notified.
#[derive(Debug, Clone, PartialEq)]
pub struct AlertsPage {
    /// The visitor sees some tenants only: alerts speak of every tenant's jobs, so none shows.
    pub restricted: bool,
    /// Whether notifications go to a webhook (its address is never shown).
    pub webhook: bool,
    /// How often the rules are judged, e.g. "15s".
    pub interval: String,
    /// Each rule's title and when it fires.
    pub rules: Vec<(String, String)>,
    pub open: Vec<AlertRow>,
    pub closed: Vec<AlertRow>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct AlertRow {
    pub title: String,
    pub subject: String,
    pub summary: String,
    /// The console page that shows it (a path).
    pub path: String,
    pub opened: String,
    pub cleared: Option<String>,
    /// How long it lasted, or has lasted.
    pub lasted: String,
    /// What each notification came to: "firing sent 12:03:04", "cleared: HTTP 500, 3 tries".
    pub notified: Vec<String>,
}

/// `/operators`: who may sign in, and the API tokens.
#[derive(Debug, Clone, PartialEq)]
pub struct OperatorsPage {
    pub operators: Vec<OperatorRow>,
    pub tokens: Vec<TokenRow>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct OperatorRow {
    pub name: String,
    pub role: String,
    /// "acme, globex", or `None` for every tenant.
    pub tenants: Option<String>,
    pub created: String,
    pub disabled: Option<String>,
    /// Signs in through the identity provider: its subject (`issuer|sub`); role and tenants
    /// follow the operator's groups at each sign-in.
    pub sso: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TokenRow {
    /// The start of its hash: how the CLI and the audit name it.
    pub id: String,
    /// "tenant acme" or "operator ana".
    pub acts_as: String,
    pub name: String,
    pub created: String,
    pub revoked: Option<String>,
}

/// The console port as held in the Leptos context.
pub type SharedConsole = Arc<dyn Console>;

/// The overview's chart window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Window {
    #[default]
    Hour,
    Day,
    Week,
}

impl Window {
    pub fn parse(s: &str) -> Window {
        match s {
            "day" => Window::Day,
            "week" => Window::Week,
            _ => Window::Hour,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Window::Hour => "hour",
            Window::Day => "day",
            Window::Week => "week",
        }
    }

    pub fn seconds(self) -> i64 {
        match self {
            Window::Hour => 3600,
            Window::Day => 86_400,
            Window::Week => 7 * 86_400,
        }
    }
}

/// A count with its label, shown beside a chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    pub label: String,
    pub value: String,
    /// The CSS class of the series it totals, for its swatch.
    pub class: Option<String>,
}

/// A chart with the numbers it draws.
#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    pub title: String,
    /// The chart where it has room, and the same chart laid out for a phone (fewer ticks).
    pub svg: crate::svg::Svg,
    pub narrow: crate::svg::Svg,
    pub figures: Vec<Figure>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Overview {
    pub window: Window,
    pub counts: Vec<(String, i64)>,
    pub in_flight: i64,
    pub charts: Vec<Chart>,
    pub retention: String,
    pub queue: String,
    /// Drill jobs in the ledger, which the tiles and charts leave out.
    pub drill_jobs: i64,
    pub workers: WorkerPresence,
    /// The oldest job waiting in `ready` for a worker's claim, if any.
    pub oldest_ready: Option<Waiting>,
    /// Per tenant, what waits for its turn and what runs.
    pub tenants: Vec<TenantFlowRow>,
    /// What the window's answers cost: "Answers in the last 24h cost $0.12 (1,203 answers);
    /// $0.0004 of it on 3 answers not accepted." `None` for an operator limited to some tenants.
    pub spend: Option<String>,
}

/// A job waiting for a worker, and for how long (`3m 5s`).
#[derive(Debug, Clone, PartialEq)]
pub struct Waiting {
    pub job_id: String,
    pub waited: String,
}

/// The worker processes by their latest reports (those listed on `/workers`), for the line
/// under the overview's tiles.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WorkerPresence {
    pub alive: i64,
    pub silent: i64,
    pub stopped: i64,
    /// Running jobs (of the operator's tenants) that silent workers own, and how many of
    /// their leases have lapsed.
    pub silent_jobs: i64,
    pub silent_lapsed: i64,
    /// How long a worker stays listed after its last report: "24 hours".
    pub listed_for: String,
}

/// Filters of the jobs list. `q` finds a job by id or idempotency key.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobsQuery {
    pub state: Option<String>,
    pub tenant: Option<String>,
    pub q: Option<String>,
    pub before: Option<String>,
    pub created_after: Option<String>,
    pub created_before: Option<String>,
    /// Idempotency keys starting with this.
    pub key_prefix: Option<String>,
    /// Jobs an attempt of which ran on this worker.
    pub worker: Option<String>,
    pub error_code: Option<String>,
    /// Only jobs whose message was delivered more than once.
    pub redelivered: bool,
    /// Only jobs that had a stale result rejected.
    pub stale_rejected: bool,
    /// Show drill jobs too. Without it (or a filter on the drill tenant) they are left out of
    /// the list and of the tabs' counts, as the overview leaves them out of its tiles.
    pub with_drills: bool,
    /// Only jobs this worker owns now (from the workers page).
    pub owner: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct JobRow {
    pub job_id: String,
    pub tenant: String,
    /// The key the submitting service chose: what its operators know the job by.
    pub idempotency_key: String,
    pub state: String,
    /// Whether the state table lets an operator cancel it now (it has started and is not
    /// terminal).
    pub cancellable: bool,
    /// Whether it has finished (succeeded, failed or expired): it may run again as a new job.
    pub terminal: bool,
    /// How many events its timeline had when the row was read.
    pub events: i64,
    pub epoch: i64,
    pub attempts: String,
    pub created: String,
    pub updated: String,
    pub deadline: String,
    pub error_code: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct JobsPage {
    pub rows: Vec<JobRow>,
    /// The `before` of the next page.
    pub next: Option<String>,
    /// Jobs per state, as shown (large counts are capped: "10,000+").
    pub counts: Vec<(String, String)>,
    /// All jobs matching the tenant filter, as shown.
    pub total: String,
    /// Set when the query was a lookup that found nothing.
    pub notice: Option<String>,
    /// A filter the list cannot use: the page answers 400 and names it.
    pub bad_parameter: Option<BadParameter>,
    /// The tenants this operator may pick from.
    pub tenants: Vec<String>,
    /// Per tenant, what waits for its turn and what runs.
    pub flow: Vec<TenantFlowRow>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct AttemptRow {
    pub attempt_no: i64,
    pub epoch: i64,
    pub worker: String,
    pub provider: String,
    pub provider_request_id: Option<String>,
    /// The id the provider runs it under in the background.
    pub submitted_id: Option<String>,
    /// The tokens its answer reported, e.g. "120 in · 40 out (30 cached)".
    pub tokens: Option<String>,
    /// What they cost, e.g. "$0.00042"; "no price" for a model without one.
    pub cost: Option<String>,
    pub started: String,
    pub finished: Option<String>,
    pub duration: Option<String>,
    pub outcome: String,
    pub error_code: Option<String>,
    pub accepted: bool,
    /// What became of the call after the attempt was settled without it (a cancel, a
    /// recovery): stopped by its fenced-out worker, never sent, or its late answer rejected.
    pub after: Option<String>,
    /// The attempt's span in the deployment's trace viewer, when one is configured and the
    /// attempt was traced.
    pub trace_url: Option<String>,
    /// The attempt's stretch of the swimlane, to zoom on it.
    pub zoom: Zoom,
}

/// A job's spend as operators read it: every figure a sentence part, "—" when nothing is known.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SpendView {
    /// "1,240 tokens, $0.0012"
    pub spent: String,
    /// "$0.00042 on 1 answer not accepted", or `None` when there is none.
    pub duplicate: Option<String>,
    /// "at most $0.0031 on 1 attempt whose outcome is unknown", or `None` when there is none.
    pub at_risk: Option<String>,
    /// "anthropic: none · bedrock: 38 tokens, $0.00001", when attempts went to more than one
    /// provider.
    pub by_provider: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct DecisionRow {
    pub at: String,
    pub actor: String,
    pub decision: String,
    pub seen_epoch: i64,
    pub new_epoch: i64,
    pub to_state: String,
    pub reason: String,
    /// What a resolution as succeeded named as its evidence (the provider's reference).
    pub evidence: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct JobDetail {
    pub job_id: String,
    pub tenant: String,
    pub idempotency_key: String,
    pub state: String,
    pub terminal: bool,
    /// Whether the state table lets an operator cancel it now.
    pub cancellable: bool,
    pub epoch: i64,
    pub owner: Option<String>,
    pub lease: Option<String>,
    pub deadline: String,
    pub deadline_left: String,
    pub attempts_used: String,
    /// While the job waits for a provider that refused it: "the provider's rate limit until
    /// 12:04:31".
    pub waiting_for: Option<String>,
    /// Where the job stands on its fallback route, once it has moved on: "bedrock ·
    /// amazon.nova-lite-v1:0 (moved on once)".
    pub route: Option<String>,
    pub result_ref: Option<String>,
    pub error_code: Option<String>,
    pub recovery_reason: Option<String>,
    pub replay_policy: String,
    pub created: String,
    pub terminal_at: Option<String>,
    pub event_count: i64,
    pub attempts: Vec<AttemptRow>,
    /// What the job's attempts spent.
    pub spend: SpendView,
    pub decisions: Vec<DecisionRow>,
    /// The swimlane chart of the whole job on one time axis.
    pub swimlane: crate::svg::Svg,
    /// The drill that produced this job, if any.
    pub drill: Option<String>,
    /// The job's trace in the deployment's trace viewer (from its submission on), when one is
    /// configured and the job kept a trace context.
    pub trace_url: Option<String>,
    /// Runs of this job as new jobs (`("to", id)`) and the job this one re-runs (`("from", id)`).
    pub reruns: Vec<(String, String)>,
    /// The incidents it is pinned to.
    pub incidents: Vec<IncidentLink>,
    /// Open incidents it could be pinned to.
    pub pin_to: Vec<IncidentLink>,
}

/// Which part of a timeline to show. Runs of the same event kind are folded unless `open`
/// names the first sequence number of the run; `around` shows the page holding that event.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TimelineQuery {
    pub after: Option<i64>,
    pub around: Option<i64>,
    pub open: Option<i64>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct EventRow {
    pub seq: i64,
    pub at: String,
    pub offset: String,
    pub kind: String,
    pub epoch: i64,
    pub actor: String,
    pub delivery: Option<String>,
    pub attempt_no: Option<i64>,
    pub deadline_left: Option<String>,
    pub detail: String,
}

/// One row of the event table: an event, or a folded run of same-kind events.
#[derive(Debug, Clone, PartialEq)]
pub enum TimelineRow {
    Event(EventRow),
    Folded {
        /// `renewed` (lease and visibility renewals), `throttled` (refusal cycles: every
        /// event of the epochs whose attempt the provider refused), or an event kind.
        kind: String,
        first_seq: i64,
        last_seq: i64,
        first_at: String,
        last_at: String,
        /// For a run of refusal cycles, how many refusals it holds.
        refusals: Option<i64>,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Timeline {
    pub rows: Vec<TimelineRow>,
    /// `after` for the previous and next pages, when there are any.
    pub previous: Option<i64>,
    pub next: Option<i64>,
    pub total: i64,
}

/// One page of the reconciliation queue.
#[derive(Debug, Clone, PartialEq)]
pub struct UnknownPage {
    pub rows: Vec<UnknownRow>,
    /// How many jobs are `unknown` (exact up to 10,000).
    pub total: String,
    /// `after` of the next page, when there is one.
    pub next: Option<String>,
    /// Whether this is the first page.
    pub first: bool,
    /// What the lost attempts of the jobs on this page may have cost, summed: "at most $0.0031
    /// on 12 attempts (2 without a bound)". `None` when none of them has a lost attempt.
    pub at_risk: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct UnknownRow {
    pub job_id: String,
    pub tenant: String,
    pub epoch: i64,
    pub since: String,
    pub last_attempt: Option<String>,
    pub provider_request_id: Option<String>,
    pub deadline_left: String,
    pub recovery_reason: Option<String>,
    pub replay_policy: String,
    /// What provider retrieval can still do for it.
    pub retrieval: String,
    /// The most its lost attempts may have cost: "≤ $0.00031", "unbounded", or `None`.
    pub at_risk: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct DeadLetterRow {
    pub message_id: String,
    /// Why it was dead-lettered.
    pub reason: String,
    pub receive_count: i64,
    /// When it was first sent, and when it was moved to the dead-letter queue.
    pub first_seen: String,
    pub last_seen: String,
}

/// The dead letters of one job (or one message that names no job), with the ledger's view
/// of that job and what a replay would do.
#[derive(Debug, Clone, PartialEq)]
pub struct DeadLetterGroup {
    pub job_id: Option<String>,
    pub tenant: Option<String>,
    pub state: Option<String>,
    pub note: String,
    pub letters: Vec<DeadLetterRow>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct DeadLetters {
    pub queue: String,
    pub groups: Vec<DeadLetterGroup>,
    /// Set when the queue cannot be listed without receiving (SQS).
    pub notice: Option<String>,
}

/// A stretch of a job's swimlane: milliseconds after the job was created (`?from=&to=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Zoom {
    pub from_ms: i64,
    pub to_ms: i64,
}

/// Who is looking at the page, as the server's sign-in gate found them: the operator (if
/// signed in), the form token every form carries, and a message left by the last action.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Visitor {
    pub operator: Option<SignedIn>,
    /// The anti-forgery token, a hidden `csrf` field in every form that posts: the session's,
    /// or for a signed-out visitor the sign-in form's own (its browser keeps it, not a session).
    pub csrf: String,
    pub flash: Option<Flash>,
    /// The console's own address for links that leave it (`https://fl.example.com`): the
    /// configured public URL, else the address the browser used.
    pub origin: String,
    /// The IANA time zone every time on the page is shown in: `?tz=` when the address names
    /// one, else the zone this operator chose for the session, else `UTC`.
    pub zone: String,
    /// A `?tz=` that names no time zone: the page answers 400 naming it.
    pub bad_zone: Option<String>,
    /// Operators may sign in through the company's identity provider.
    pub sso: bool,
    /// Local passwords do not sign anyone in.
    pub password_off: bool,
}

impl Visitor {
    /// Whether the signed-in operator manages operators and tokens: an admin of every tenant.
    pub fn manages_operators(&self) -> bool {
        self.operator
            .as_ref()
            .is_some_and(|o| o.role == "admin" && o.tenants.is_none())
    }

    /// Whether the signed-in operator may act on jobs (decide, retry, cancel, replay).
    pub fn can_act(&self) -> bool {
        self.operator.as_ref().is_some_and(|o| o.can_act)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct SignedIn {
    pub name: String,
    pub role: String,
    pub can_act: bool,
    /// The tenants this operator is limited to, as shown (`None`: every tenant).
    pub tenants: Option<String>,
}

/// The outcome of the last action, shown once on the page it redirected to.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Flash {
    pub ok: bool,
    pub text: String,
}

/// Filters of the audit log.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AuditQuery {
    /// An operator's name.
    pub operator: Option<String>,
    pub action: Option<String>,
    pub job: Option<String>,
    /// `hour`, `day`, `week` or nothing (all).
    pub within: Option<String>,
    /// The id below which the next page starts.
    pub before: Option<i64>,
    /// Show drills' entries too (their starts, actions on drill jobs).
    pub drills: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct AuditRow {
    pub at: String,
    pub actor: String,
    pub action: String,
    pub job_id: Option<String>,
    pub tenant: Option<String>,
    pub seen_epoch: Option<i64>,
    pub new_epoch: Option<i64>,
    pub state_before: Option<String>,
    pub state_after: Option<String>,
    pub reason: String,
    /// A decision's evidence (the provider's reference), when it named one.
    pub evidence: Option<String>,
    /// The job the action made (running a finished job again).
    pub new_job_id: Option<String>,
    /// What an admin's action on the deployment acted on (an operator, a token).
    pub subject: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct AuditPage {
    pub rows: Vec<AuditRow>,
    /// `before` of the next page, when there is one.
    pub next: Option<i64>,
    /// The actions there are, for the filter.
    pub actions: Vec<String>,
}

/// How a worker stands, judged from its reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerStatus {
    /// Reported within the last few report intervals.
    Alive,
    /// Running by its last report, but silent since: stopped without a word (killed, crashed,
    /// lost its host), paused, or cut off from the database.
    Silent,
    /// Stopped cleanly.
    Stopped,
    /// Never reported: known only as the owner of running jobs (a drill's worker, say).
    Unreported,
}

impl WorkerStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            WorkerStatus::Alive => "alive",
            WorkerStatus::Silent => "silent",
            WorkerStatus::Stopped => "stopped",
            WorkerStatus::Unreported => "no reports",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct WorkerRow {
    pub worker_id: String,
    pub status: WorkerStatus,
    /// When it last reported, or stopped: "3s ago".
    pub last_report: Option<String>,
    /// When it started (in the visitor's zone).
    pub started: Option<String>,
    pub queue: Option<String>,
    pub provider: Option<String>,
    pub max_in_flight: Option<i64>,
    /// What it can hold now, when a provider's limit holds it below its width.
    pub capacity: Option<i64>,
    /// Running jobs it owns now.
    pub held: i64,
    /// Of those, how many leases have lapsed.
    pub lapsed: i64,
    /// The latest of their leases: "ends in 20s", "lapsed 3 min ago".
    pub lease: Option<String>,
}

/// A provider limit as the fleet learned it (`/workers`).
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderLimitRow {
    pub provider: String,
    pub model: String,
    /// `None` while it admits calls; when limited, until when (in the visitor's zone).
    pub limited_until: Option<String>,
    /// Which limit said so last (`requests`, `tokens`, `retry-after`, `backoff`).
    pub limit: Option<String>,
    /// Calls at once the fleet's workers learned it admits.
    pub concurrency: Option<i64>,
    /// Requests a second its answers state, as "20.0/s".
    pub rate: Option<String>,
    pub recent_refusals: i64,
    pub refusals: i64,
    /// Time spent limited, summed over the fleet: "3m 5s".
    pub limited_for: String,
    /// When and by which worker it was last reported: "2s ago by w1".
    pub updated: String,
}

/// A tenant's jobs as flow control sees them: waiting in the ledger for their turn, running.
#[derive(Debug, Clone, PartialEq)]
pub struct TenantFlowRow {
    pub tenant: String,
    pub waiting: i64,
    /// Of the waiting, those due now (the rest wait for a backoff or a provider's reset).
    pub due: i64,
    pub running: i64,
    /// Its weight in the fair queue (1 unless configured) and its cap on jobs in flight.
    pub weight: i64,
    pub cap: Option<i64>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct WorkersPage {
    /// Each provider limit the fleet met.
    pub providers: Vec<ProviderLimitRow>,
    pub rows: Vec<WorkerRow>,
    /// How long a worker stays listed after its last report: "24 hours".
    pub listed_for: String,
    /// How often a running worker reports: "5s".
    pub report_every: String,
}

/// The HTTP API's reference, read from its OpenAPI document, for the console's API page.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ApiReference {
    pub title: String,
    pub version: String,
    pub description: String,
    /// Where the paths start (`/api/v1`).
    pub base: String,
    pub endpoints: Vec<ApiEndpoint>,
    pub schemas: Vec<ApiSchema>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ApiEndpoint {
    pub method: String,
    pub path: String,
    pub summary: String,
    pub parameters: Vec<ApiField>,
    /// The request body's schema, by name.
    pub body: Option<String>,
    /// Status, what it means, and the body's schema by name.
    pub responses: Vec<(String, String, Option<String>)>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ApiField {
    pub name: String,
    /// Where a parameter goes (`path`, `query`); empty for a schema's field.
    pub place: String,
    pub kind: String,
    pub required: bool,
    pub description: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ApiSchema {
    pub name: String,
    pub description: String,
    pub fields: Vec<ApiField>,
    /// The values of an enumeration.
    pub values: Vec<String>,
}

/// A console form the server refused before acting (its token did not match this session, or
/// it was too large to read): shown as a console page with what went wrong, the text the
/// operator typed, to copy back into a fresh form, and a way back.
#[derive(Debug, Clone, PartialEq)]
pub struct FormRefusal {
    pub status: u16,
    pub title: String,
    pub message: String,
    /// The free text the form carried (its reason, evidence…), labelled.
    pub typed: Vec<(String, String)>,
    pub back: String,
}

/// Sets the HTTP status of the page being rendered (the server provides it): a page that finds
/// nothing answers 404, not 200.
#[derive(Clone)]
pub struct HttpStatus(pub Arc<dyn Fn(u16) + Send + Sync>);

impl HttpStatus {
    /// Sets the status from within a page, if the server provided the setter.
    pub fn set(code: u16) {
        if let Some(status) = leptos::prelude::use_context::<HttpStatus>() {
            (status.0)(code);
        }
    }
}

/// One scenario of the drill catalogue.
#[derive(Debug, Clone, PartialEq)]
pub struct DrillScenario {
    pub kind: String,
    pub setup: String,
    pub proves: String,
    /// The fault points it arms.
    pub faults: Vec<String>,
}

/// A drill run in the list.
#[derive(Debug, Clone, PartialEq)]
pub struct DrillRunSummary {
    pub run_id: String,
    pub started: String,
    /// `running`, `passed`, `failed` or `interrupted`.
    pub status: String,
    /// What was asked: "all (13)" or the one kind.
    pub asked: String,
    pub queue: String,
    pub timings: String,
    pub requested_by: String,
    pub passed: usize,
    pub total: usize,
    /// How long it ran, once finished.
    pub took: Option<String>,
}

/// `/drills`: what the drills are, whether they can run here, and the latest runs.
#[derive(Debug, Clone, PartialEq)]
pub struct DrillsPage {
    pub catalogue: Vec<DrillScenario>,
    pub runs: Vec<DrillRunSummary>,
    /// Why this operator is shown no runs (a tenant limit), if so.
    pub runs_withheld: Option<String>,
    /// Why drills cannot start here (a production deployment), if they cannot.
    pub refused: Option<String>,
    /// The queues a drill can run on here.
    pub queues: Vec<String>,
    /// The models a drill can call here: `(value, label)`.
    pub models: Vec<(String, String)>,
}

/// An event that proves a check, with its permalink.
#[derive(Debug, Clone, PartialEq)]
pub struct DrillEvidence {
    pub href: String,
    pub label: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct DrillCheck {
    pub name: String,
    pub passed: bool,
    pub detail: String,
    pub evidence: Vec<DrillEvidence>,
}

/// The seed's capture list for one job of a drill.
#[derive(Debug, Clone, PartialEq)]
pub struct DrillCapture {
    pub role: String,
    pub job_id: String,
    pub state: String,
    pub delivery_count: usize,
    pub owner_epoch: i64,
    pub deadline_left: String,
    pub renewals: String,
    pub attempt_count: i64,
    pub recovery_reason: Option<String>,
    pub result_transition: String,
    pub deletion: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct DrillScenarioRun {
    pub kind: String,
    /// `pending`, `running`, `passed` or `failed`.
    pub status: String,
    pub took: Option<String>,
    pub setup: String,
    pub proves: String,
    pub checks: Vec<DrillCheck>,
    pub jobs: Vec<DrillCapture>,
    pub notes: Vec<String>,
    pub faults_fired: Vec<String>,
}

/// `/drills/{run}`: a run's report.
#[derive(Debug, Clone, PartialEq)]
pub struct DrillRun {
    pub summary: DrillRunSummary,
    /// The model its jobs called.
    pub provider: String,
    /// Still running: the page refreshes itself.
    pub live: bool,
    pub finished: Option<String>,
    pub scenarios: Vec<DrillScenarioRun>,
}

/// A parameter of the address that the page cannot use: named, with why, as a 400 page —
/// never silently ignored.
#[derive(Debug, Clone, PartialEq)]
pub struct BadParameter {
    pub name: String,
    pub value: String,
    /// What the parameter must be.
    pub expected: String,
    /// A parameter the page does not have at all (`expected` then names those it has).
    pub unknown: bool,
}

impl BadParameter {
    pub fn new(name: &str, value: &str, expected: &str) -> Self {
        BadParameter {
            name: name.to_owned(),
            value: value.to_owned(),
            expected: expected.to_owned(),
            unknown: false,
        }
    }

    /// `name` is no parameter of the page, which takes `takes`.
    pub fn unknown(name: &str, value: &str, takes: &str) -> Self {
        BadParameter {
            unknown: true,
            ..BadParameter::new(name, value, takes)
        }
    }
}

/// The console port from the request's context.
pub(crate) fn console() -> SharedConsole {
    leptos::prelude::expect_context::<SharedConsole>()
}

/// Who is looking, as the server's sign-in gate provided it.
pub(crate) fn visitor() -> Visitor {
    leptos::prelude::use_context::<Visitor>().unwrap_or_default()
}
