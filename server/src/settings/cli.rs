//! The raw command line and environment, as clap parses them. `super::Settings` resolves them
//! (with the `--config` file) into the values the program runs on.

use std::net::SocketAddr;

use clap::builder::BoolishValueParser;
use clap::{Args, Parser, Subcommand, ValueEnum};

use super::Environment;

/// The embedded default: a SQLite file in the working directory, created when missing.
pub const DEFAULT_DATABASE_URL: &str = "sqlite://fenceline.sqlite?mode=rwc";
pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;
/// OpenAI's API, the provider URL unless one is named.
pub const OPENAI_URL: &str = "https://api.openai.com/v1";

#[derive(Debug, Parser)]
#[command(
    name = "fenceline",
    version,
    about = "A fenced job ledger for long LLM jobs behind SQS-style queues",
    long_about = "A fenced job ledger for long LLM jobs behind SQS-style queues.\n\n\
        Without a subcommand, `fenceline` runs `serve` on the embedded default (SQLite)."
)]
pub struct Cli {
    /// The ledger database: `postgres://…` or `sqlite://path?mode=rwc`.
    #[arg(long, env = "DATABASE_URL", global = true, default_value = DEFAULT_DATABASE_URL)]
    pub database_url: String,

    /// SQLite durability: `full` survives power loss with every acknowledged write; `normal`
    /// may lose the last transactions on power loss.
    #[arg(long, env = "FENCELINE_SQLITE_SYNCHRONOUS", global = true, value_enum,
          default_value_t = SyncArg::Full)]
    pub sqlite_synchronous: SyncArg,

    /// Database connections (PostgreSQL) or reader connections (SQLite).
    #[arg(
        long,
        env = "FENCELINE_DB_MAX_CONNECTIONS",
        global = true,
        default_value_t = 16
    )]
    pub db_max_connections: u32,

    /// `development` or `production`. Production refuses fault injection and drills and
    /// never creates operators by itself.
    #[arg(long, env = "FENCELINE_ENVIRONMENT", global = true, value_enum,
          default_value_t = Environment::Development)]
    pub environment: Environment,

    /// A TOML file of settings, keyed by flag name (see `docs/configuration.md`). Flags and
    /// environment variables override it.
    #[arg(long, env = "FENCELINE_CONFIG", global = true)]
    pub config: Option<std::path::PathBuf>,

    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The global flags that open the ledger, which a command that only talks to the HTTP API
/// (`submit`) never uses: its help leaves them out.
const LEDGER_FLAGS: [&str; 4] = [
    "database_url",
    "sqlite_synchronous",
    "db_max_connections",
    "environment",
];

impl Cli {
    /// The command line as `fenceline` describes it: the derived one, with the ledger's
    /// global flags hidden from the help of commands that do not open the ledger.
    pub fn command_line() -> clap::Command {
        use clap::CommandFactory;
        let command = Cli::command();
        // `submit` gets hidden copies of them: a global flag is not given to a subcommand
        // that has its own flag of that name, so these flags still parse there, unshown.
        let hidden: Vec<clap::Arg> = command
            .get_arguments()
            .filter(|a| LEDGER_FLAGS.contains(&a.get_id().as_str()))
            .map(|a| a.clone().global(false).hide(true))
            .collect();
        command.mut_subcommand("submit", |submit| submit.args(hidden))
    }

    /// Parses `argv` against [`Cli::command_line`].
    pub fn parse_argv<I, T>(argv: I) -> Result<Cli, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        use clap::FromArgMatches;
        let matches = Cli::command_line().try_get_matches_from(argv)?;
        Cli::from_arg_matches(&matches)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SyncArg {
    Full,
    Normal,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the API and console with a worker, the outbox dispatcher and the reaper
    /// (migrates the database first).
    Serve(ServeArgs),
    /// Run a worker, the outbox dispatcher and the reaper without HTTP: scale out with many of
    /// these against PostgreSQL and SQS.
    Worker(RuntimeArgs),
    /// Check this deployment's wiring, reading the settings as `serve` and `worker` do: the
    /// database and its migrations, the clock, an operator, the timings, the queue and what
    /// this identity may do on SQS (on a probe queue of its own), each provider, the public
    /// URL. A line each; exits non-zero on any failure. Changes nothing in the ledger or the
    /// jobs queue.
    Doctor(ServeArgs),
    /// Manage SQS queues (development helper).
    #[command(subcommand)]
    Queue(QueueCommand),
    /// Submit a job through the HTTP API, as a service would, and optionally wait for it.
    Submit(SubmitArgs),
    /// Replay dead letters after inspecting each job in the ledger: terminal → dropped,
    /// unknown → kept until a decision, workable → re-dispatched with the same job id,
    /// deadline and attempt budget.
    DlqReplay {
        #[command(flatten)]
        runtime: RuntimeArgs,
        /// At most this many dead letters.
        #[arg(long, default_value_t = 100)]
        max: usize,
        /// Who replays, for the timeline.
        #[arg(long, default_value = "cli")]
        operator: String,
    },
    /// Decide an `unknown` job from a terminal, as a named operator (fenced by the epoch seen;
    /// audited): `retry` authorizes a fenced retry, `succeeded` resolves it with evidence,
    /// `failed` ends it.
    Decide(DecideArgs),
    /// Cancel a job that has started and is not terminal (`running`, `unknown`,
    /// `retry_authorized`; a `ready` job is refused), as a named operator (fenced by the epoch
    /// seen; audited): it fails for good and an attempt still running can never commit.
    Cancel {
        job_id: String,
        /// The owner epoch you saw (the console and `GET /api/v1/jobs/{id}` show it).
        #[arg(long)]
        epoch: i64,
        /// Why, for the audit log and the timeline.
        #[arg(long)]
        reason: String,
        /// Who cancels: an operator (role `operator` or `admin`) of this deployment.
        #[arg(long)]
        operator: String,
    },
    /// Run a finished job again as a new job, as a named operator (audited): same input,
    /// model, attempt budget and deadline length, a key derived from the old one's; the finished
    /// job stays as it is. Prints the new job's id.
    Rerun {
        job_id: String,
        /// Why, for the audit log and both timelines.
        #[arg(long)]
        reason: String,
        /// Who runs it again: an operator (role `operator` or `admin`) of this deployment.
        #[arg(long)]
        operator: String,
        /// How many events of its timeline you saw: run again twice with the same value, it
        /// makes one job. Without it, the job runs again once more.
        #[arg(long)]
        seen_events: Option<i64>,
    },
    /// Act on every job a jobs-list filter matches, as a named operator: preview (the exact
    /// jobs are recorded, nothing changes), confirm with a reason (`serve` then acts on each
    /// job in the background, fenced at what it was previewed at), and follow it.
    #[command(subcommand)]
    Bulk(BulkCommand),
    /// Apply database migrations and exit.
    Migrate,
    /// Manage API tokens.
    #[command(subcommand)]
    Token(TokenCommand),
    /// Manage the operators who sign in to the console.
    #[command(subcommand)]
    Operator(OperatorCommand),
    /// Measure the ledger beside a baseline on the same database.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Redelivery drills: prove, outside production, that redelivery cannot corrupt jobs.
    #[command(subcommand)]
    Drill(DrillCommand),
    /// The chaos soak (see `scripts/soak.sh`).
    #[command(subcommand)]
    Soak(SoakCommand),
}

#[derive(Debug, Subcommand)]
pub enum BulkCommand {
    /// Record the exact jobs the filter matches now, print how many and the first of them, and
    /// the id to confirm; nothing changes.
    Preview(BulkPreviewArgs),
    /// Confirm a preview of yours (within 15 minutes) with a reason.
    Confirm {
        bulk_id: i64,
        /// Why, for the audit log and every job's timeline.
        #[arg(long)]
        reason: String,
        /// Who confirms: the operator who previewed it.
        #[arg(long)]
        operator: String,
    },
    /// How far a bulk action has come.
    Show { bulk_id: i64 },
}

#[derive(Debug, Clone, Args)]
pub struct BulkPreviewArgs {
    /// `authorize_retry` or `resolve_failed` (`unknown` jobs), `cancel` (running, unknown,
    /// retry authorized) or `rerun` (finished jobs).
    #[arg(value_parser = ["authorize_retry", "resolve_failed", "cancel", "rerun"])]
    pub action: String,
    /// Who acts: an operator (role `operator` or `admin`); their tenants bound the filter.
    #[arg(long)]
    pub operator: String,
    /// A job state (for `cancel`: running, unknown or retry_authorized; for `rerun`: a
    /// finished state); every state the action applies to without one.
    #[arg(long)]
    pub state: Option<String>,
    /// One tenant's jobs (within the operator's).
    #[arg(long)]
    pub tenant: Option<String>,
    /// Idempotency keys starting with this.
    #[arg(long)]
    pub key_prefix: Option<String>,
    /// Created at or after this instant (`2026-12-01T09:30`, UTC, or RFC 3339).
    #[arg(long)]
    pub created_after: Option<String>,
    /// Created before this instant.
    #[arg(long)]
    pub created_before: Option<String>,
    /// An attempt of the job ran on this worker.
    #[arg(long)]
    pub worker: Option<String>,
    /// The job's last error code.
    #[arg(long)]
    pub error_code: Option<String>,
    /// Include drill jobs.
    #[arg(long)]
    pub with_drills: bool,
}

#[derive(Debug, Subcommand)]
pub enum SoakCommand {
    /// Read the ledger after a run and check every job against the invariants: two accepted
    /// results, lost jobs, stale-epoch commits accepted, deletes before a durable outcome,
    /// second attempts after an uncertain one without a decision (all must be 0); repeated
    /// provider calls with what preceded them; jobs per final state. Exits 0 only when every
    /// invariant held.
    Check(SoakCheckArgs),
    /// Serve the stand-in for OpenAI's background responses the soak's workers call (written
    /// from the API reference; see `docs/providers.md`), in a process of its own so that
    /// responses outlive the workers that created them.
    ResponsesServer(ResponsesServerArgs),
}

#[derive(Debug, Clone, Args)]
pub struct ResponsesServerArgs {
    /// Where to listen.
    #[arg(long, default_value = "127.0.0.1:8090")]
    pub bind: SocketAddr,
    /// How long each response runs before it completes.
    #[arg(long, default_value_t = 2000)]
    pub latency_ms: u64,
    /// The fraction of polls lost on the way back.
    #[arg(long, default_value_t = 0.0)]
    pub lose_rate: f64,
    /// The fraction of create answers lost on the way back after the response was stored
    /// (the attempt runs with no id kept); the same as --lose-rate unless given.
    #[arg(long)]
    pub lose_create_rate: Option<f64>,
}

#[derive(Debug, Clone, Args)]
pub struct SoakCheckArgs {
    /// Only this tenant's jobs (the soak submits under its own).
    #[arg(long)]
    pub tenant: Option<String>,
    /// How many jobs the run submitted: fewer in the ledger are reported missing.
    #[arg(long)]
    pub expect: Option<u64>,
    /// The largest share of jobs that may end `unknown` (e.g. 0.01), each of them only in the
    /// window before its provider id was kept: more, or one after, fails the verdict.
    #[arg(long)]
    pub max_unknown: Option<f64>,
    /// Print the verdict as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum DrillCommand {
    /// The catalogue: each scenario, the faults it injects and what its verdict proves.
    List,
    /// Run one scenario, or `all`, with three real workers on a queue of the run's own; the
    /// report is stored in the ledger (the console shows it at /drills/<run>). Exits 0 only
    /// when every check passed.
    Run(DrillRunArgs),
}

#[derive(Debug, Clone, Args)]
pub struct DrillRunArgs {
    /// A scenario kind (see `fenceline drill list`), or `all`.
    pub kind: String,
    /// The queue to drill: the embedded queue, or an SQS queue made for the run (through the
    /// standard AWS configuration, e.g. AWS_ENDPOINT_URL_SQS).
    #[arg(long, value_enum, default_value_t = crate::drill::DrillQueue::Embedded)]
    pub queue: crate::drill::DrillQueue,
    /// Compressed timings (seconds; the catalogue in about a minute) or production timings.
    #[arg(long, value_enum, default_value_t = crate::drill::DrillTimings::Compressed)]
    pub timings: crate::drill::DrillTimings,
    /// The model the drill's jobs call: the stub, or this deployment's configured provider
    /// (`FENCELINE_PROVIDER=openai` and its settings), behind the same fault points.
    #[arg(long, value_enum, default_value_t = DrillModel::Stub)]
    pub model: DrillModel,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DrillModel {
    Stub,
    Configured,
}

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Where to listen.
    #[arg(long, env = "FENCELINE_BIND", default_value = "127.0.0.1:8080")]
    pub bind: SocketAddr,
    /// The address operators reach the console at, e.g. `https://fenceline.example.com`
    /// (behind a proxy); shared links are made from it.
    #[arg(long, env = "FENCELINE_PUBLIC_URL")]
    pub public_url: Option<String>,
    /// A trace viewer's page for one trace, with `{trace_id}` (and `{span_id}` if it takes
    /// one), e.g. `https://jaeger.example.com/trace/{trace_id}`: the job page links each
    /// attempt to its trace.
    #[arg(long, env = "FENCELINE_TRACE_URL")]
    pub trace_url: Option<String>,
    /// A proxy in front of the console whose `X-Forwarded-For` is believed, as a network
    /// (`10.0.0.0/8`) or an address (repeat the flag; comma-separated in the environment).
    /// Sign-in limits then count each operator's own address; without one, the peer's.
    #[arg(
        long = "trusted-proxy",
        env = "FENCELINE_TRUSTED_PROXIES",
        value_delimiter = ','
    )]
    pub trusted_proxies: Vec<String>,
    /// The bearer token `/metrics` asks for (prefer the environment variable: arguments show
    /// in process lists). Without one, `/metrics` is not served.
    #[arg(long, env = "FENCELINE_METRICS_TOKEN", hide_env_values = true)]
    pub metrics_token: Option<String>,
    /// Larger request bodies get 413.
    #[arg(long, env = "FENCELINE_MAX_BODY_BYTES", default_value_t = DEFAULT_MAX_BODY_BYTES)]
    pub max_body_bytes: usize,
    /// Models a job may name (comma-separated; `*` allows any). Default: the provider's
    /// configured model only.
    #[arg(long, env = "FENCELINE_ALLOWED_MODELS", value_delimiter = ',')]
    pub allowed_models: Vec<String>,
    /// Per-tenant model lists, `tenant=model,model` (repeat the flag; in the environment
    /// separate tenants with `;`). A listed tenant may name only its own models.
    #[arg(long, env = "FENCELINE_TENANT_MODELS", value_delimiter = ';')]
    pub tenant_models: Vec<String>,
    /// Per-tenant replay policy for jobs that name none, `tenant=replay_on_unknown` (the
    /// tenant accepts possible duplicate inference cost: an uncertain attempt is retried, and
    /// the retry is recorded as a decision by `policy`) or `tenant=manual` (repeat the flag; in
    /// the environment separate entries with `;`).
    #[arg(
        long = "tenant-replay-policy",
        env = "FENCELINE_TENANT_REPLAY_POLICIES",
        value_delimiter = ';'
    )]
    pub tenant_replay_policies: Vec<String>,
    /// Most jobs one action by filter (console, API) may take; a filter matching more is
    /// refused, to be narrowed.
    #[arg(long, env = "FENCELINE_BULK_CAP", default_value_t = 10_000)]
    pub bulk_cap: usize,
    /// Days the jobs pinned to an incident are kept from retention after it closes (while it
    /// is open they are always kept).
    #[arg(long, env = "FENCELINE_INCIDENT_KEEP_DAYS", default_value_t = 365)]
    pub incident_keep_days: u32,
    /// OpenID Connect sign-in: the identity provider's issuer URL (https, or http on this
    /// machine). The client id and secret come from FENCELINE_OIDC_CLIENT_ID and
    /// FENCELINE_OIDC_CLIENT_SECRET, from the environment only. Needs --public-url.
    #[arg(long, env = "FENCELINE_OIDC_ISSUER")]
    pub oidc_issuer: Option<String>,
    /// OpenID Connect: what a group of the identity provider gives, `group=role` or
    /// `group=role:tenant,tenant`; repeat the flag (`;` between them in the environment).
    #[arg(
        long = "oidc-group",
        env = "FENCELINE_OIDC_GROUPS",
        value_delimiter = ';'
    )]
    pub oidc_groups: Vec<String>,
    /// OpenID Connect: the ID token's claim that lists the operator's groups.
    #[arg(long, env = "FENCELINE_OIDC_GROUPS_CLAIM", default_value = "groups")]
    pub oidc_groups_claim: String,
    /// OpenID Connect: the scopes asked for (some providers need one for the groups claim).
    #[arg(
        long,
        env = "FENCELINE_OIDC_SCOPES",
        default_value = "openid profile email"
    )]
    pub oidc_scopes: String,
    /// Sign-in with a local password (`true` or `false`). With OpenID Connect on, `false`
    /// leaves the identity provider the only way in; turned on again, local passwords are the
    /// break-glass way.
    #[arg(
        long,
        env = "FENCELINE_PASSWORD_SIGN_IN",
        default_value = "true",
        value_parser = BoolishValueParser::new(),
        action = clap::ArgAction::Set
    )]
    pub password_sign_in: bool,
    /// Alerts: how often the rules are judged.
    #[arg(long, env = "FENCELINE_ALERT_INTERVAL_SECS", default_value_t = 15)]
    pub alert_interval_secs: u64,
    /// Alerts: jobs waiting in `unknown` longer than this fire `unknown_waiting`.
    #[arg(
        long,
        env = "FENCELINE_ALERT_UNKNOWN_AFTER_SECS",
        default_value_t = 900
    )]
    pub alert_unknown_after_secs: u64,
    /// Alerts: the oldest `ready` job waiting longer than this fires `ready_waiting`.
    #[arg(long, env = "FENCELINE_ALERT_READY_AFTER_SECS", default_value_t = 600)]
    pub alert_ready_after_secs: u64,
    /// Alerts: a provider and model refusing calls in every minute for longer than this fire
    /// `provider_refusing`.
    #[arg(
        long,
        env = "FENCELINE_ALERT_REFUSED_AFTER_SECS",
        default_value_t = 300
    )]
    pub alert_refused_after_secs: u64,
    /// Alerts: more dead letters than this fire `dead_letters`.
    #[arg(long, env = "FENCELINE_ALERT_DEAD_LETTERS_ABOVE", default_value_t = 0)]
    pub alert_dead_letters_above: i64,
    /// Alerts: an episode opening this soon after a notified one of the same rule and subject
    /// cleared is listed but notifies nothing.
    #[arg(long, env = "FENCELINE_ALERT_COOLDOWN_SECS", default_value_t = 900)]
    pub alert_cooldown_secs: u64,
    /// Largest `max_tokens` / `max_completion_tokens` a job may ask for.
    #[arg(long, env = "FENCELINE_MAX_OUTPUT_TOKENS", default_value_t = 16_384)]
    pub max_output_tokens: u64,
    /// Serve the API and console only; run no worker, dispatcher or reaper here.
    #[arg(long, env = "FENCELINE_NO_WORKER", value_parser = BoolishValueParser::new())]
    pub no_worker: bool,
    #[command(flatten)]
    pub runtime: RuntimeArgs,
}

/// What a process that works jobs needs: the queue, the provider, the worker's settings.
#[derive(Debug, Clone, Args)]
pub struct RuntimeArgs {
    /// `embedded` (in the ledger database, SQS semantics) or `sqs` (Amazon SQS or any
    /// SQS-compatible endpoint: standard AWS configuration, `AWS_ENDPOINT_URL_SQS`).
    #[arg(long, env = "FENCELINE_QUEUE", value_enum, default_value_t = QueueArg::Embedded)]
    pub queue: QueueArg,
    /// The queue's name (SQS: a name or a URL); its dead-letter queue is `<name>-dlq`.
    #[arg(long, env = "FENCELINE_QUEUE_NAME", default_value = "jobs")]
    pub queue_name: String,
    /// Embedded queue: receives before a message moves to the dead-letter queue.
    #[arg(long, env = "FENCELINE_MAX_RECEIVE_COUNT", default_value_t = 5)]
    pub max_receive_count: u32,

    /// `stub` (a local model for trials and drills), `openai` (any OpenAI-compatible
    /// chat-completions endpoint) or `openai-responses` (OpenAI's Responses API in background
    /// mode: the response id is kept before waiting, and a later owner adopts the attempt)
    /// or `anthropic` (Anthropic's Messages API; --provider-url https://api.anthropic.com/v1)
    /// or `bedrock` (Amazon Bedrock's Converse, with the AWS credential chain and region; an
    /// endpoint only when --provider-url is named). The key comes from
    /// FENCELINE_PROVIDER_API_KEY, else OPENAI_API_KEY (ANTHROPIC_API_KEY for `anthropic`).
    #[arg(long, env = "FENCELINE_PROVIDER", value_enum, default_value_t = ProviderArg::Stub)]
    pub provider: ProviderArg,
    /// The provider's API, up to its version segment (`anthropic`: Anthropic's by default;
    /// `bedrock`: the region's endpoint by default).
    #[arg(long, env = "FENCELINE_PROVIDER_URL", default_value = OPENAI_URL)]
    pub provider_url: String,
    /// The model when a job's parameters name none.
    #[arg(long, env = "FENCELINE_PROVIDER_MODEL", default_value = "gpt-4o-mini")]
    pub provider_model: String,
    #[arg(long, env = "FENCELINE_PROVIDER_TIMEOUT_SECS", default_value_t = 600)]
    pub provider_timeout_secs: u64,
    /// Store completions with Fenceline's request id so uncertain attempts can be retrieved.
    #[arg(long, env = "FENCELINE_PROVIDER_RETRIEVAL", value_parser = BoolishValueParser::new())]
    pub provider_retrieval: bool,
    /// A model's price, to cost each attempt by the tokens its answer reports:
    /// `MODEL=INPUT/OUTPUT[/CACHED]`, US dollars per million tokens (repeat the flag;
    /// comma-separated in the environment). A model without a price shows tokens only.
    #[arg(long = "price", env = "FENCELINE_PRICES", value_delimiter = ',')]
    pub prices: Vec<String>,
    /// A tenant's fallback route, `tenant=provider:model,provider:model` (`*` for every
    /// tenant without its own): the pairs after the first (this worker's provider with the
    /// job's model) a job moves on to when its pair refuses it for longer than
    /// --fallback-after-secs. A job's own `fallback` parameter replaces its tenant's. Repeat the
    /// flag; in the environment separate entries with `;`.
    #[arg(long = "fallback", env = "FENCELINE_FALLBACK", value_delimiter = ';')]
    pub fallback: Vec<String>,
    /// How long a pair may refuse a job (the wait it still asks for counted) before the job
    /// moves on along its route.
    #[arg(long, env = "FENCELINE_FALLBACK_AFTER_SECS", default_value_t = 30)]
    pub fallback_after_secs: u64,
    /// A provider jobs may fall back to, `KIND` or `KIND=URL` (each with its kind's default
    /// address and key variable: ANTHROPIC_API_KEY for `anthropic`, OPENAI_API_KEY for the
    /// OpenAI kinds, the AWS chain for `bedrock`). Those --fallback names are added by
    /// themselves. Repeat the flag; comma-separated in the environment.
    #[arg(
        long = "fallback-provider",
        env = "FENCELINE_FALLBACK_PROVIDERS",
        value_delimiter = ','
    )]
    pub fallback_providers: Vec<String>,
    /// Stub model: latency of each call.
    #[arg(long, env = "FENCELINE_STUB_LATENCY_MS", default_value_t = 500)]
    pub stub_latency_ms: u64,
    /// Stub model: fractions of calls that fail retryably, fatally, or lose their response.
    #[arg(long, env = "FENCELINE_STUB_RETRYABLE_RATE", default_value_t = 0.0)]
    pub stub_retryable_rate: f64,
    #[arg(long, env = "FENCELINE_STUB_FATAL_RATE", default_value_t = 0.0)]
    pub stub_fatal_rate: f64,
    #[arg(long, env = "FENCELINE_STUB_LOST_RATE", default_value_t = 0.0)]
    pub stub_lost_rate: f64,
    /// Stub model: requests a second it admits (a bucket a second deep), refusing the rest as
    /// a rate-limited provider does; unset, no limit.
    #[arg(long, env = "FENCELINE_STUB_RATE_LIMIT")]
    pub stub_rate_limit: Option<f64>,

    /// A tenant's weight in the fair queue, `tenant=N` (1 to 1000; a tenant of weight 2 gets
    /// twice the turns of one of weight 1; unlisted tenants weigh 1). Repeat the flag; in the
    /// environment separate entries with `;`. Written to the ledger at start: every process
    /// of a deployment should carry the same.
    #[arg(
        long = "tenant-weight",
        env = "FENCELINE_TENANT_WEIGHTS",
        value_delimiter = ';'
    )]
    pub tenant_weights: Vec<String>,
    /// A cap on a tenant's jobs sent or running at once, `tenant=N`. Repeat the flag; in the
    /// environment separate entries with `;`.
    #[arg(
        long = "tenant-max-in-flight",
        env = "FENCELINE_TENANT_MAX_IN_FLIGHT",
        value_delimiter = ';'
    )]
    pub tenant_max_in_flight: Vec<String>,

    /// `fenceline worker` only: where to answer `/healthz` and `/readyz` (ready while the
    /// ledger answers), for a process manager or Kubernetes' probes; unset, no listener.
    #[arg(long, env = "FENCELINE_HEALTH_BIND")]
    pub health_bind: Option<SocketAddr>,
    /// This worker's id on timelines (default: host and process id).
    #[arg(long, env = "FENCELINE_WORKER_ID")]
    pub worker_id: Option<String>,
    /// Jobs one worker holds at once.
    #[arg(long, env = "FENCELINE_MAX_IN_FLIGHT", default_value_t = 64)]
    pub max_in_flight: usize,
    /// Receive requests one worker keeps open at once while it has room and the queue has a
    /// backlog (each asks for up to ten messages); an idle worker keeps one long poll.
    #[arg(long, env = "FENCELINE_RECEIVERS", default_value_t = crate::worker::DEFAULT_RECEIVERS)]
    pub receivers: usize,
    /// `production` (90 s visibility, 25 s renewals, 90 s lease, 15 s margin) or `compressed`
    /// (2 s, 0.7 s, 2 s, 0.3 s: drills and demos).
    #[arg(long, env = "FENCELINE_TIMINGS", value_enum, default_value_t = TimingsArg::Production)]
    pub timings: TimingsArg,
    /// How long a stopping worker lets calls in flight finish before handing them back to
    /// the ledger.
    #[arg(long, env = "FENCELINE_DRAIN_TIMEOUT_MS", default_value_t = 30_000)]
    pub drain_timeout_ms: u64,
    /// How often the reaper looks for expired leases, passed deadlines and unknown jobs.
    #[arg(long, env = "FENCELINE_REAPER_INTERVAL_MS", default_value_t = 2000)]
    pub reaper_interval_ms: u64,
    /// A workable job whose last dispatch is older than this is sent again.
    #[arg(long, env = "FENCELINE_REDISPATCH_AFTER_SECS", default_value_t = 900)]
    pub redispatch_after_secs: u64,
    /// For the chaos soak (`scripts/soak.sh`) only, refused in production: the fraction of
    /// duplicate deliveries, failed deletes, visibility-renewal timeouts and lease-renewal
    /// failures this worker injects, each, through the drill fault points.
    #[arg(
        long,
        env = "FENCELINE_SOAK_FAULTS",
        default_value_t = 0.0,
        hide = true
    )]
    pub soak_faults: f64,

    /// Days a terminal job's record (attempts, result, events) is kept before the retention
    /// task prunes it; `0` keeps everything. Default: off on the embedded demo (SQLite with the
    /// embedded queue), 30 days otherwise. Keep it longer than the queue's message retention
    /// plus the dead-letter replay window, so a late copy still finds its terminal record.
    #[arg(long, env = "FENCELINE_RETENTION_DAYS")]
    pub retention_days: Option<u32>,
}

#[derive(Debug, Clone, Args)]
pub struct SubmitArgs {
    /// The API's base URL.
    #[arg(long, env = "FENCELINE_API", default_value = "http://127.0.0.1:8080")]
    pub api: String,
    /// An API token (`fenceline token add <tenant>`); the tenant comes from it.
    #[arg(long, env = "FENCELINE_TOKEN", hide_env_values = true)]
    pub token: String,
    /// The idempotency key: the same key and request always give the same job.
    #[arg(long, required_unless_present = "file")]
    pub key: Option<String>,
    /// The job's input, as JSON (a bare string is taken as text).
    #[arg(long, required_unless_present = "file")]
    pub input: Option<String>,
    /// Submit many jobs instead: a file (`-` for standard input) of one job a line, each a JSON
    /// object as `POST /api/v1/jobs` takes it, sent 500 a request (`POST /api/v1/jobs/batch`).
    /// Prints `line<TAB>status<TAB>job id or error` for each, in order; exits non-zero if any
    /// job was refused.
    #[arg(long, conflicts_with_all = ["key", "input", "wait", "model", "deadline_seconds", "max_attempts"])]
    pub file: Option<std::path::PathBuf>,
    /// Model parameters, as a JSON object.
    #[arg(long, default_value = "{}")]
    pub model: String,
    #[arg(long)]
    pub deadline_seconds: Option<u64>,
    #[arg(long)]
    pub max_attempts: Option<u32>,
    /// Wait until the job is terminal and print its result.
    #[arg(long)]
    pub wait: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum QueueArg {
    Embedded,
    Sqs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProviderArg {
    Stub,
    Openai,
    OpenaiResponses,
    Anthropic,
    Bedrock,
}

impl ProviderArg {
    /// Whether the provider is a model behind an HTTP API (its URL, key and model apply).
    pub fn is_http(self) -> bool {
        self != ProviderArg::Stub
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TimingsArg {
    Production,
    Compressed,
}

#[derive(Debug, Subcommand)]
pub enum QueueCommand {
    /// Create an SQS queue and its dead-letter queue `<name>-dlq` with a redrive policy.
    Create {
        name: String,
        #[arg(long, default_value_t = 5)]
        max_receive_count: u32,
    },
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Create an API token for a tenant and print it once (only its hash is stored).
    Add {
        /// The tenant the token acts for.
        tenant: String,
        /// A label to recognise the token by.
        #[arg(long, default_value = "default")]
        name: String,
    },
    /// List tokens, tenants' and operators' (id, whom it acts as, name, created, revoked);
    /// never the tokens themselves.
    List,
    /// Revoke a token, a tenant's or an operator's, by the id `token list` shows; requests with
    /// it are refused from then on.
    Revoke { id: String },
}

#[derive(Debug, Subcommand)]
pub enum OperatorCommand {
    /// Add an operator. The password is read from a prompt, or from standard input with
    /// `--password-stdin`; never from an argument.
    Add {
        name: String,
        /// `viewer` (reads), `operator` (decides, replays, runs drills) or `admin` (also
        /// manages operators).
        #[arg(long)]
        role: String,
        /// Limit the operator to these tenants (repeat the flag); default: every tenant.
        #[arg(long = "tenant")]
        tenants: Vec<String>,
        /// Read the password from the first line of standard input.
        #[arg(long)]
        password_stdin: bool,
    },
    /// List operators: name, role, tenants, created, disabled. Never passwords.
    List,
    /// Change an operator's role (and, with `--tenant` or `--all-tenants`, its tenants).
    SetRole {
        name: String,
        role: String,
        #[arg(long = "tenant", conflicts_with = "all_tenants")]
        tenants: Vec<String>,
        #[arg(long)]
        all_tenants: bool,
    },
    /// Disable an operator: no sign-in, and its sessions stop working.
    Disable { name: String },
    /// Enable a disabled operator again.
    Enable { name: String },
    /// Make an API token that acts as this operator (role and tenants) for automation:
    /// `POST /api/v1/jobs/{id}/decisions` and `/cancel`. Shown once; only its hash is stored.
    /// It stops working when the operator is disabled or the token is revoked (`fenceline
    /// token list`, `fenceline token revoke`).
    Token {
        name: String,
        /// What the token is for, e.g. `reconciler`.
        #[arg(long, default_value = "automation")]
        label: String,
    },
    /// Set a new password (prompt, or `--password-stdin`); sessions begun before it end.
    Reset {
        name: String,
        #[arg(long)]
        password_stdin: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// claim → start attempt → accept per job with concurrent owners, beside one conditional
    /// UPDATE … RETURNING per transaction. Writes bench rows: use a scratch database.
    Ledger(BenchArgs),
    /// End to end on the embedded queue with the stub model at 0 ms (submit → dispatch →
    /// receive → claim → attempt → accept → delete, every event recorded), beside a naive job
    /// table (insert, then one claim-and-complete UPDATE per job) on the same database.
    Pipeline(PipelineArgs),
    /// One worker holding many long calls, renewing visibility and lease on schedule: how late
    /// the renewals run, beside plain timers on the same runtime.
    Renewals(RenewalArgs),
    /// Console render times: a job with a long timeline and the jobs list over many jobs,
    /// generated first, beside the health endpoint served by the same process.
    Console(ConsoleBenchArgs),
    /// Jobs submitted through the API by concurrent clients, one job a request beside batches
    /// (`POST /api/v1/jobs/batch`), on one server and database, in alternating rounds.
    Submit(SubmitBenchArgs),
    /// A burst of jobs through `serve` (and `worker` processes) against a model server that
    /// admits a fixed rate and refuses the rest with `429` as OpenAI does: goodput beside the
    /// allowed rate, refused requests beside admitted ones. Spawns this binary.
    Throttle(ThrottleArgs),
    /// Tenant A's backlog, then tenant B's few jobs, through `serve` on the embedded default:
    /// how long B's wait, and A's rate beside A alone. Spawns this binary.
    Fairness(FairnessArgs),
    /// Generates a job with a long timeline and prints its id (data for tests and demos).
    SeedTimeline(SeedArgs),
}

#[derive(Debug, Clone, Args)]
pub struct ThrottleArgs {
    /// The ledger (default: a fresh SQLite file); the processes share it.
    #[arg(long = "ledger-url")]
    pub database_url: Option<String>,
    /// `embedded` or `sqs` (an SQS endpoint from the AWS configuration; a queue is made for
    /// the run, `maxReceiveCount` 5).
    #[arg(long, default_value = "embedded", value_parser = ["embedded", "sqs"])]
    pub queue: String,
    /// `fenceline worker` processes beside `serve --no-worker`; 0 runs `serve` with its worker.
    #[arg(long, default_value_t = 0)]
    pub workers: usize,
    #[arg(long, default_value_t = 600)]
    pub jobs: usize,
    /// Requests a second the model server admits (its bucket is as deep).
    #[arg(long, default_value_t = 20.0)]
    pub rate: f64,
    /// How long the model server takes to answer an admitted request.
    #[arg(long, default_value_t = 200)]
    pub latency_ms: u64,
    /// Each job's deadline.
    #[arg(long, default_value_t = 900)]
    pub deadline_secs: u64,
    /// A model server that refuses every request: each job should wait until its deadline
    /// and expire, spending no attempt.
    #[arg(long)]
    pub forever: bool,
}

#[derive(Debug, Clone, Args)]
pub struct FairnessArgs {
    /// Tenant A's backlog.
    #[arg(long, default_value_t = 3000)]
    pub jobs: usize,
    /// Tenant B's jobs, submitted once A's are accepted.
    #[arg(long, default_value_t = 20)]
    pub quiet_jobs: usize,
    /// The stub model's latency.
    #[arg(long, default_value_t = 300)]
    pub latency_ms: u64,
    /// Rounds, each A alone and then A with B, on fresh databases.
    #[arg(long, default_value_t = 2)]
    pub rounds: usize,
}

#[derive(Debug, Clone, Args)]
pub struct ConsoleBenchArgs {
    /// Events on the long timeline.
    #[arg(long, default_value_t = 10_000)]
    pub events: usize,
    /// Jobs in the ledger for the list pages.
    #[arg(long, default_value_t = 1_000_000)]
    pub jobs: u64,
    /// Requests per measured page.
    #[arg(long, default_value_t = 100)]
    pub requests: usize,
}

#[derive(Debug, Clone, Args)]
pub struct SubmitBenchArgs {
    /// Jobs a pass.
    #[arg(long, default_value_t = 10_000)]
    pub jobs: u64,
    /// Jobs a request in the batched passes (2 to 500).
    #[arg(long, default_value_t = 100)]
    pub batch: usize,
    /// Clients sending at once.
    #[arg(long, default_value_t = 16)]
    pub clients: usize,
    /// Rounds, each a pass of one job a request and then a batched one.
    #[arg(long, default_value_t = 2)]
    pub rounds: usize,
}

#[derive(Debug, Clone, Args)]
pub struct SeedArgs {
    #[arg(long, default_value_t = 10_000)]
    pub events: usize,
    #[arg(long, default_value = "demo")]
    pub tenant: String,
    /// `renewals`: a long call (mostly renewals, a few redeliveries); `alternating`: no two
    /// neighbours of one kind, so nothing folds (the worst case for paging); `unknown`: no
    /// extra events, a job whose call may have happened and whose worker vanished.
    #[arg(long, default_value = "renewals")]
    pub pattern: String,
}

#[derive(Debug, Clone, Args)]
pub struct PipelineArgs {
    #[arg(long, default_value_t = 3000)]
    pub jobs: usize,
    /// Worker loops in this process.
    #[arg(long, default_value_t = 4)]
    pub workers: usize,
    /// Deliveries each worker loop holds at once. With the stub at 0 ms a delivery is in
    /// flight only while the ledger writes it, so this is how deep the pipeline runs, and how
    /// many writes wait for each commit.
    #[arg(long, default_value_t = 512)]
    pub in_flight: usize,
    /// Receive requests each worker loop keeps open while the queue has a backlog, each for
    /// up to ten messages; the worker's own default.
    #[arg(long, default_value_t = crate::worker::DEFAULT_RECEIVERS)]
    pub receivers: usize,
}

#[derive(Debug, Clone, Args)]
pub struct RenewalArgs {
    /// Calls held in flight at once.
    #[arg(long, default_value_t = 10_000)]
    pub in_flight: usize,
    /// Renewal interval.
    #[arg(long, default_value_t = 25)]
    pub heartbeat_secs: u64,
    /// How long the measurement runs once every call is in flight.
    #[arg(long, default_value_t = 60)]
    pub measure_secs: u64,
}

#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// Concurrent owners.
    #[arg(long, default_value_t = 16)]
    pub owners: usize,
    /// Jobs to run through the ledger (the baseline runs three statements per job).
    #[arg(long, default_value_t = 3000)]
    pub jobs: usize,
}

/// `fenceline decide`'s arguments.
#[derive(Debug, Clone, Args)]
pub struct DecideArgs {
    pub job_id: String,
    /// `retry`, `succeeded` or `failed`.
    #[arg(value_parser = ["retry", "succeeded", "failed"])]
    pub decision: String,
    /// The owner epoch you saw (the console and `GET /api/v1/jobs/{id}` show it).
    #[arg(long)]
    pub epoch: i64,
    /// Why, for the audit log and the timeline.
    #[arg(long)]
    pub reason: String,
    /// Who decides: an operator (role `operator` or `admin`) of this deployment.
    #[arg(long)]
    pub operator: String,
    /// `succeeded`: the provider's reference for the call.
    #[arg(long)]
    pub evidence: Option<String>,
    /// `succeeded`: a file holding the result (becomes the accepted result).
    #[arg(long)]
    pub result_file: Option<std::path::PathBuf>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn submit_talks_to_the_api_and_its_help_names_no_ledger_flag() {
        let mut command = Cli::command_line();
        let help = command
            .find_subcommand_mut("submit")
            .unwrap()
            .render_long_help()
            .to_string();
        assert!(help.contains("--token") && help.contains("--api"), "{help}");
        // As `fenceline submit --help` shows it.
        let asked = Cli::parse_argv(["fenceline", "submit", "--help"]).unwrap_err();
        assert_eq!(asked.kind(), clap::error::ErrorKind::DisplayHelp, "{asked}");
        let shown = asked.to_string();
        assert!(
            shown.contains("--token") && !shown.contains("--database-url"),
            "{shown}"
        );
        // The flags still parse there (a script that passes them keeps working).
        let cli = Cli::parse_argv([
            "fenceline",
            "submit",
            "--token",
            "t",
            "--key",
            "k",
            "--input",
            "1",
            "--database-url",
            "sqlite://x.sqlite",
            "--environment",
            "production",
        ]);
        assert!(cli.is_ok(), "{cli:?}");
        for flag in [
            "--database-url",
            "--sqlite-synchronous",
            "--db-max-connections",
            "--environment",
        ] {
            assert!(!help.contains(flag), "{flag} in {help}");
        }
        // Commands that open the ledger still show them.
        let help = Cli::parse_argv(["fenceline", "serve", "--help"])
            .unwrap_err()
            .to_string();
        assert!(help.contains("--database-url"), "{help}");
        // And the flags still parse anywhere, as before.
        let cli =
            Cli::parse_argv(["fenceline", "serve", "--database-url", "sqlite://y.sqlite"]).unwrap();
        assert_eq!(cli.database_url, "sqlite://y.sqlite");
    }
}
