//! Settings, resolved once. The raw command line and environment ([`cli`], clap) and an
//! optional TOML file (`--config`, see [`file`]) become one [`Settings`] value, validated in one
//! place; `startup` builds every component from it. Flags win over environment variables,
//! which win over the file, which wins over the defaults. Nothing else in the program reads
//! the environment.

pub mod cli;
pub mod file;
pub mod proxies;

use std::net::SocketAddr;
use std::time::Duration;

use clap::{Args, FromArgMatches, Parser};

pub use cli::{
    BenchCommand, BulkCommand, BulkPreviewArgs, Cli, Command, DecideArgs, DrillCommand, DrillModel,
    DrillRunArgs, OperatorCommand, ProviderArg as ProviderKind, QueueArg as QueueKind,
    QueueCommand, ResponsesServerArgs, RuntimeArgs, ServeArgs, SoakCheckArgs, SoakCommand,
    SubmitArgs, TimingsArg, TokenCommand,
};

use crate::ledger::{Backend, LedgerOptions, SqliteSync};
use crate::provider::policy::ModelPolicy;
use crate::provider::prices::{Prices, STUB_PRICE};
use crate::provider::stub::StubConfig;
use crate::worker::Timings;

pub use crate::deployment::Environment;

/// A value that is never printed: `Debug` shows `Secret(…)`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The value, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(…)")
    }
}

/// Everything a Fenceline process is configured with.
#[derive(Debug, Clone)]
pub struct Settings {
    pub environment: Environment,
    pub ledger: LedgerSettings,
    pub http: HttpSettings,
    pub queue: QueueSettings,
    pub provider: ProviderSettings,
    pub worker: WorkerSettings,
}

#[derive(Debug, Clone)]
pub struct LedgerSettings {
    /// `postgres://…` or `sqlite://…`.
    pub url: String,
    pub backend: Backend,
    pub options: LedgerOptions,
}

#[derive(Debug, Clone)]
pub struct HttpSettings {
    pub bind: SocketAddr,
    /// The address operators reach the console at (`https://fenceline.example.com`), without
    /// a trailing slash; links that leave the console are made from it.
    pub public_url: Option<String>,
    /// A trace viewer's page for one trace, with `{trace_id}` in it (`--trace-url`).
    pub trace_url: Option<String>,
    /// The alert rules' thresholds and their webhook.
    pub alerts: AlertSettings,
    /// Most jobs one action by filter may take (`--bulk-cap`).
    pub bulk_cap: usize,
    /// How long an incident's jobs are kept after it closes (`--incident-keep-days`).
    pub incident_keep: Duration,
    /// Sign-in through an OpenID Connect provider, when configured.
    pub oidc: Option<OidcSettings>,
    /// Whether local passwords sign operators in (`--password-sign-in`).
    pub password_sign_in: bool,
    /// Proxies whose `X-Forwarded-For` names the client (`--trusted-proxy`); none by default.
    pub trusted_proxies: proxies::TrustedProxies,
    /// The bearer token `/metrics` asks for; without one `/metrics` is not served.
    pub metrics_token: Option<Secret>,
    /// Per-tenant replay policy for jobs that name none (`--tenant-replay-policy`).
    pub tenant_replay: std::collections::HashMap<String, crate::ledger::ReplayPolicy>,
    pub max_body_bytes: usize,
    pub model_policy: ModelPolicy,
    /// Run the worker, dispatcher and reaper in the serving process too.
    pub run_worker: bool,
}

#[derive(Debug, Clone)]
pub struct QueueSettings {
    pub kind: QueueKind,
    pub name: String,
    /// Embedded queue: receives before a message moves to the dead-letter queue.
    pub max_receive_count: u32,
}

#[derive(Debug, Clone)]
pub struct ProviderSettings {
    pub kind: ProviderKind,
    pub url: String,
    pub model: String,
    pub timeout: Duration,
    pub retrieval: bool,
    /// `FENCELINE_PROVIDER_API_KEY`, else `OPENAI_API_KEY` (`ANTHROPIC_API_KEY` for Anthropic).
    pub api_key: Option<Secret>,
    pub stub: StubConfig,
    /// What each model's tokens cost (`--price`); the stub model has a price of its own
    /// ([`STUB_PRICE`]) unless one is named.
    pub prices: Prices,
    /// The providers jobs may fall back to (`--fallback-provider`, and those `--fallback`
    /// names), each with its kind's defaults; none of the primary's kind.
    pub fallbacks: Vec<ProviderSettings>,
    /// The routes jobs move on along (`--fallback`, `--fallback-after`).
    pub routes: crate::provider::route::Routes,
}

impl ProviderSettings {
    /// The model a job goes to when its parameters name none.
    pub fn default_model(&self) -> &str {
        match self.kind {
            ProviderKind::Stub => "stub",
            _ => &self.model,
        }
    }
}

#[derive(Debug, Clone)]
pub struct WorkerSettings {
    pub id: String,
    /// `fenceline worker`: where `/healthz` and `/readyz` answer, if anywhere.
    pub health_bind: Option<SocketAddr>,
    pub max_in_flight: usize,
    pub receivers: usize,
    pub timings: Timings,
    pub drain_timeout: Duration,
    pub reaper_interval: Duration,
    pub redispatch_after: Duration,
    /// How long terminal records are kept; `None` keeps everything.
    pub retention: Option<Duration>,
    /// The chaos soak's fault rate (0 everywhere else; refused in production).
    pub soak_faults: f64,
    /// Tenants' shares of dispatch, when the settings name any (written to the ledger at
    /// start).
    pub tenant_shares: Vec<crate::ledger::TenantShare>,
}

/// Settings that cannot run.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("{0}")]
    Invalid(String),
    #[error("cannot read the configuration file {path}: {message}")]
    File { path: String, message: String },
    #[error(transparent)]
    Cli(#[from] clap::Error),
}

/// The arguments of `T` as clap resolves them with nothing on the command line (defaults and
/// environment variables).
fn defaults<T: Args + FromArgMatches>() -> Result<T, clap::Error> {
    let command = T::augment_args(clap::Command::new("fenceline"));
    T::from_arg_matches(&command.try_get_matches_from(["fenceline"])?)
}

/// Whether the command runs an outbox dispatcher (a worker's): `serve` with its worker, and
/// `worker`.
fn runs_dispatcher(cli: &Cli) -> bool {
    match &cli.command {
        None => true,
        Some(Command::Serve(args)) => !args.no_worker,
        Some(Command::Worker(_)) => true,
        Some(_) => false,
    }
}

impl Settings {
    /// Reads the process's command line, environment and `--config` file.
    pub fn load() -> Result<(Cli, Settings), SettingsError> {
        let mut argv: Vec<String> = std::env::args().collect();
        if Cli::parse_argv(&argv)?.command.is_none() {
            // No subcommand means `serve`, with whatever global flags were given.
            argv.insert(1, "serve".into());
        }
        let argv = file::with_file_settings(argv)?;
        let cli = Cli::parse_argv(argv)?;
        let settings = Settings::from_cli(&cli)?;
        Ok((cli, settings))
    }

    /// Resolves parsed arguments: the running command's, defaults for the rest.
    pub fn from_cli(cli: &Cli) -> Result<Settings, SettingsError> {
        let serve = match &cli.command {
            Some(Command::Serve(args) | Command::Doctor(args)) => args.clone(),
            _ => defaults::<ServeArgs>()?,
        };
        let runtime = match &cli.command {
            Some(Command::Serve(args) | Command::Doctor(args)) => &args.runtime,
            Some(Command::Worker(args)) | Some(Command::DlqReplay { runtime: args, .. }) => args,
            _ => &serve.runtime,
        };
        let backend = Backend::from_url(&cli.database_url).ok_or_else(|| {
            SettingsError::Invalid(
                "DATABASE_URL must start with postgres://, postgresql:// or sqlite:".into(),
            )
        })?;
        let settings = Settings {
            environment: cli.environment,
            ledger: LedgerSettings {
                url: cli.database_url.clone(),
                backend,
                options: LedgerOptions {
                    max_connections: cli.db_max_connections.max(1),
                    acquire_timeout: Duration::from_secs(5),
                    sqlite_sync: match cli.sqlite_synchronous {
                        cli::SyncArg::Full => SqliteSync::Full,
                        cli::SyncArg::Normal => SqliteSync::Normal,
                    },
                    group_commit: true,
                    // The embedded queue lives in the ledger: a new job's message goes in
                    // with the job, while this process's dispatcher says there is room for
                    // it (it meters the queue). A process without a dispatcher (`serve
                    // --no-worker`, the CLI) leaves new jobs to the workers' dispatchers.
                    direct_queue: (matches!(runtime.queue, QueueKind::Embedded)
                        && runs_dispatcher(cli))
                    .then(|| runtime.queue_name.clone()),
                },
            },
            http: HttpSettings {
                bind: serve.bind,
                public_url: public_url(serve.public_url.as_deref())?,
                trace_url: trace_url(serve.trace_url.as_deref())?,
                trusted_proxies: proxies::TrustedProxies::parse(&serve.trusted_proxies)
                    .map_err(|e| SettingsError::Invalid(format!("--trusted-proxy {e}")))?,
                tenant_replay: tenant_replay(&serve.tenant_replay_policies)?,
                metrics_token: serve
                    .metrics_token
                    .clone()
                    .filter(|t| !t.trim().is_empty())
                    .map(Secret::new),
                max_body_bytes: serve.max_body_bytes,
                model_policy: model_policy(&serve, runtime)?,
                run_worker: !serve.no_worker,
                alerts: alert_settings(&serve)?,
                bulk_cap: serve.bulk_cap.max(1),
                incident_keep: Duration::from_secs(u64::from(serve.incident_keep_days) * 86_400),
                oidc: oidc_settings(&serve)?,
                password_sign_in: serve.password_sign_in,
            },
            queue: QueueSettings {
                kind: runtime.queue,
                name: runtime.queue_name.clone(),
                max_receive_count: runtime.max_receive_count,
            },
            provider: provider_settings(runtime)?,
            worker: WorkerSettings {
                id: runtime.worker_id.clone().unwrap_or_else(default_worker_id),
                health_bind: runtime.health_bind,
                max_in_flight: runtime.max_in_flight.max(1),
                receivers: runtime.receivers.max(1),
                timings: match runtime.timings {
                    TimingsArg::Production => Timings::default(),
                    TimingsArg::Compressed => Timings::compressed(),
                },
                drain_timeout: Duration::from_millis(runtime.drain_timeout_ms),
                reaper_interval: Duration::from_millis(runtime.reaper_interval_ms.max(50)),
                redispatch_after: Duration::from_secs(runtime.redispatch_after_secs),
                retention: retention(runtime, backend),
                soak_faults: runtime.soak_faults,
                tenant_shares: tenant_shares(
                    &runtime.tenant_weights,
                    &runtime.tenant_max_in_flight,
                )?,
            },
        };
        settings.validate()?;
        // Only the console needs its address: `worker`, `migrate` and the rest of a production
        // deployment run without one.
        let serves_console = matches!(&cli.command, None | Some(Command::Serve(_)));
        let webhook = settings.http.alerts.webhook.as_ref().map(|w| w.expose());
        if serves_console
            && webhook.is_some_and(|url| {
                !(url.starts_with("https://") || url.starts_with("http://")) || url.contains(' ')
            })
        {
            return Err(SettingsError::Invalid(
                "FENCELINE_ALERT_WEBHOOK_URL must be an http(s) address".into(),
            ));
        }
        if serves_console
            && settings.environment == Environment::Production
            && settings.http.public_url.is_none()
        {
            return Err(SettingsError::Invalid(
                "a production deployment needs --public-url: the console answers only for \
                 that host"
                    .into(),
            ));
        }
        Ok(settings)
    }

    /// The defaults on `database_url` (and the environment): for tests and benchmarks that
    /// build an application without a command line.
    pub fn for_database(database_url: &str) -> Result<Settings, SettingsError> {
        let cli = Cli::try_parse_from(["fenceline", "--database-url", database_url, "serve"])?;
        Settings::from_cli(&cli)
    }

    /// The rules no single flag can check.
    pub fn validate(&self) -> Result<(), SettingsError> {
        if !(0.0..=0.5).contains(&self.worker.soak_faults) {
            return Err(SettingsError::Invalid(
                "--soak-faults is a fraction from 0 to 0.5".into(),
            ));
        }
        if self.environment == Environment::Production && self.worker.soak_faults > 0.0 {
            return Err(SettingsError::Invalid(
                "production refuses fault injection: --soak-faults is for the chaos soak".into(),
            ));
        }
        if !self.http.bind.ip().is_loopback() && self.http.public_url.is_none() {
            return Err(SettingsError::Invalid(format!(
                "listening on {} reaches beyond this machine: give the console's address with \
                 --public-url (FENCELINE_PUBLIC_URL), the only host it will answer for, or \
                 listen on 127.0.0.1",
                self.http.bind
            )));
        }
        if self
            .http
            .metrics_token
            .as_ref()
            .is_some_and(|t| t.expose().len() < 16)
        {
            return Err(SettingsError::Invalid(
                "--metrics-token must be at least 16 characters".into(),
            ));
        }
        if self.worker.id == crate::ledger::HELD_FOR_ADOPTION {
            return Err(SettingsError::Invalid(format!(
                "--worker-id {:?} is reserved: recovery holds jobs for adoption under that name",
                crate::ledger::HELD_FOR_ADOPTION
            )));
        }
        if self.provider.kind.is_http() && !self.provider.url.starts_with("http") {
            return Err(SettingsError::Invalid(
                "--provider-url must be an http:// or https:// URL".into(),
            ));
        }
        Ok(())
    }

    /// The console's address for people: the public URL, else the bound address.
    pub fn console_url(&self, bound: SocketAddr) -> String {
        self.http
            .public_url
            .clone()
            .unwrap_or_else(|| format!("http://{bound}"))
    }
}

fn public_url(raw: Option<&str>) -> Result<Option<String>, SettingsError> {
    let Some(raw) = raw.map(str::trim).filter(|u| !u.is_empty()) else {
        return Ok(None);
    };
    let rest = raw
        .strip_prefix("https://")
        .or_else(|| raw.strip_prefix("http://"))
        .ok_or_else(|| {
            SettingsError::Invalid(format!(
                "--public-url {raw:?} must start with https:// or http://"
            ))
        })?;
    let host = rest.split('/').next().unwrap_or_default();
    if host.is_empty() || rest.contains(['?', '#', ' ']) {
        return Err(SettingsError::Invalid(format!(
            "--public-url {raw:?} must be a scheme and host, with an optional path"
        )));
    }
    Ok(Some(raw.trim_end_matches('/').to_owned()))
}

/// What the alert rules judge by, and where they notify.
#[derive(Debug, Clone)]
pub struct AlertSettings {
    /// Where notifications go (`FENCELINE_ALERT_WEBHOOK_URL`): a secret, never shown.
    pub webhook: Option<Secret>,
    pub interval: Duration,
    pub unknown_after: Duration,
    pub ready_after: Duration,
    pub refused_after: Duration,
    pub dead_letters_above: i64,
    /// An episode that opens this soon after a notified one of the same rule and subject
    /// cleared is listed but sends nothing.
    pub cooldown: Duration,
}

impl Default for AlertSettings {
    fn default() -> Self {
        AlertSettings {
            webhook: None,
            interval: Duration::from_secs(15),
            unknown_after: Duration::from_secs(900),
            ready_after: Duration::from_secs(600),
            refused_after: Duration::from_secs(300),
            dead_letters_above: 0,
            cooldown: Duration::from_secs(900),
        }
    }
}

/// Sign-in through an OpenID Connect provider.
#[derive(Debug, Clone)]
pub struct OidcSettings {
    pub issuer: String,
    pub client_id: String,
    /// From `FENCELINE_OIDC_CLIENT_SECRET` only.
    pub client_secret: Secret,
    pub groups_claim: String,
    pub scopes: String,
    pub groups: Vec<GroupRule>,
}

/// What one group of the identity provider gives: a role, over some tenants or every one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupRule {
    pub group: String,
    pub role: crate::operators::Role,
    pub tenants: Option<Vec<String>>,
}

impl std::str::FromStr for GroupRule {
    type Err = String;
    /// `group=role` or `group=role:tenant,tenant`.
    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        // The last `=`: a group may hold one (an LDAP name), a grant never does.
        let (group, grant) = raw
            .rsplit_once('=')
            .ok_or_else(|| format!("{raw:?} is not group=role or group=role:tenant,tenant"))?;
        let (role, tenants) = match grant.split_once(':') {
            Some((role, tenants)) => (role, Some(tenants)),
            None => (grant, None),
        };
        let role = role
            .trim()
            .parse::<crate::operators::Role>()
            .map_err(|_| format!("{raw:?}: the role is viewer, operator or admin"))?;
        let tenants = match tenants {
            None => None,
            Some(list) => {
                let list: Vec<String> = list
                    .split(',')
                    .map(str::trim)
                    .filter(|t| !t.is_empty())
                    .map(str::to_owned)
                    .collect();
                if list.is_empty() {
                    return Err(format!("{raw:?}: name the tenants after the colon"));
                }
                Some(list)
            }
        };
        let group = group.trim();
        if group.is_empty() {
            return Err(format!("{raw:?}: the group is empty"));
        }
        Ok(GroupRule {
            group: group.to_owned(),
            role,
            tenants,
        })
    }
}

/// OpenID Connect sign-in, when an issuer is set: its client from the environment, its groups
/// mapping from the flags. Off unless configured; with local passwords off it must be on.
fn oidc_settings(serve: &cli::ServeArgs) -> Result<Option<OidcSettings>, SettingsError> {
    let env = |name: &str| {
        std::env::var(name)
            .ok()
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    };
    let Some(issuer) = serve
        .oidc_issuer
        .as_deref()
        .map(str::trim)
        .filter(|i| !i.is_empty())
    else {
        if !serve.password_sign_in {
            return Err(SettingsError::Invalid(
                "--password-sign-in false leaves no way to sign in without --oidc-issuer".into(),
            ));
        }
        return Ok(None);
    };
    let loopback = reqwest::Url::parse(issuer).is_ok_and(|url| {
        url.scheme() == "http"
            && matches!(url.host_str(), Some("127.0.0.1" | "localhost" | "[::1]"))
    });
    if !issuer.starts_with("https://") && !loopback {
        return Err(SettingsError::Invalid(format!(
            "--oidc-issuer {issuer:?} must be an https address (http only on this machine)"
        )));
    }
    if serve.public_url.is_none() {
        return Err(SettingsError::Invalid(
            "--oidc-issuer needs --public-url: the provider calls the console back at \
             <public URL>/login/oidc/callback"
                .into(),
        ));
    }
    let (Some(client_id), Some(client_secret)) = (
        env("FENCELINE_OIDC_CLIENT_ID"),
        env("FENCELINE_OIDC_CLIENT_SECRET"),
    ) else {
        return Err(SettingsError::Invalid(
            "--oidc-issuer needs FENCELINE_OIDC_CLIENT_ID and FENCELINE_OIDC_CLIENT_SECRET in \
             the environment"
                .into(),
        ));
    };
    let groups = serve
        .oidc_groups
        .iter()
        .map(|g| g.trim())
        .filter(|g| !g.is_empty())
        .map(|g| g.parse::<GroupRule>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| SettingsError::Invalid(format!("--oidc-group {e}")))?;
    if groups.is_empty() {
        return Err(SettingsError::Invalid(
            "--oidc-issuer needs at least one --oidc-group group=role: no one could sign in".into(),
        ));
    }
    Ok(Some(OidcSettings {
        issuer: issuer.trim_end_matches('/').to_owned(),
        client_id,
        client_secret: Secret::new(client_secret),
        groups_claim: serve.oidc_groups_claim.trim().to_owned(),
        scopes: serve.oidc_scopes.trim().to_owned(),
        groups,
    }))
}

/// The alerts' thresholds from the flags, and their webhook from `FENCELINE_ALERT_WEBHOOK_URL`
/// (the environment only: the URL is a secret; `serve`, which sends, checks it).
fn alert_settings(serve: &cli::ServeArgs) -> Result<AlertSettings, SettingsError> {
    let webhook = std::env::var("FENCELINE_ALERT_WEBHOOK_URL")
        .ok()
        .map(|u| u.trim().to_owned())
        .filter(|u| !u.is_empty());
    Ok(AlertSettings {
        webhook: webhook.map(Secret::new),
        interval: Duration::from_secs(serve.alert_interval_secs.max(1)),
        unknown_after: Duration::from_secs(serve.alert_unknown_after_secs),
        ready_after: Duration::from_secs(serve.alert_ready_after_secs),
        refused_after: Duration::from_secs(serve.alert_refused_after_secs),
        dead_letters_above: serve.alert_dead_letters_above.max(0),
        cooldown: Duration::from_secs(serve.alert_cooldown_secs),
    })
}

/// A trace viewer's address: `http(s)://…` with `{trace_id}` in it.
fn trace_url(raw: Option<&str>) -> Result<Option<String>, SettingsError> {
    let Some(raw) = raw.map(str::trim).filter(|u| !u.is_empty()) else {
        return Ok(None);
    };
    if !(raw.starts_with("https://") || raw.starts_with("http://"))
        || !raw.contains("{trace_id}")
        || raw.contains([' ', '"', '<', '>'])
    {
        return Err(SettingsError::Invalid(format!(
            "--trace-url {raw:?} must be an http(s) address with {{trace_id}} in it, e.g. \
             https://jaeger.example.com/trace/{{trace_id}}"
        )));
    }
    Ok(Some(raw.to_owned()))
}

/// `tenant=N` entries of `flag`, each `N` within `range`.
fn tenant_numbers(
    flag: &str,
    entries: &[String],
    range: std::ops::RangeInclusive<i64>,
) -> Result<Vec<(String, i64)>, SettingsError> {
    let mut out: Vec<(String, i64)> = Vec::new();
    for entry in entries.iter().map(|e| e.trim()).filter(|e| !e.is_empty()) {
        let parsed = entry.split_once('=').and_then(|(tenant, n)| {
            let tenant = tenant.trim();
            let n: i64 = n.trim().parse().ok()?;
            (crate::ledger::valid_tenant(tenant) && range.contains(&n))
                .then(|| (tenant.to_owned(), n))
        });
        let (tenant, n) = parsed.ok_or_else(|| {
            SettingsError::Invalid(format!(
                "--{flag} `{entry}` is not `tenant=N` with N from {} to {}",
                range.start(),
                range.end()
            ))
        })?;
        out.retain(|(t, _)| *t != tenant);
        out.push((tenant, n));
    }
    Ok(out)
}

/// Tenants' shares from `--tenant-weight` and `--tenant-max-in-flight`.
fn tenant_shares(
    weights: &[String],
    caps: &[String],
) -> Result<Vec<crate::ledger::TenantShare>, SettingsError> {
    let weights = tenant_numbers("tenant-weight", weights, 1..=1000)?;
    let caps = tenant_numbers("tenant-max-in-flight", caps, 1..=1_000_000)?;
    let mut tenants: Vec<&String> = weights.iter().chain(&caps).map(|(t, _)| t).collect();
    tenants.sort();
    tenants.dedup();
    Ok(tenants
        .into_iter()
        .map(|tenant| crate::ledger::TenantShare {
            tenant: tenant.clone(),
            weight: weights
                .iter()
                .find(|(t, _)| t == tenant)
                .map_or(1, |(_, w)| *w),
            max_in_flight: caps.iter().find(|(t, _)| t == tenant).map(|(_, n)| *n),
        })
        .collect())
}

/// `tenant=manual|replay_on_unknown` entries.
fn tenant_replay(
    entries: &[String],
) -> Result<std::collections::HashMap<String, crate::ledger::ReplayPolicy>, SettingsError> {
    let mut out = std::collections::HashMap::new();
    for entry in entries.iter().map(|e| e.trim()).filter(|e| !e.is_empty()) {
        let parsed = entry.split_once('=').and_then(|(tenant, policy)| {
            let policy = match policy.trim() {
                "manual" => crate::ledger::ReplayPolicy::Manual,
                "replay_on_unknown" => crate::ledger::ReplayPolicy::ReplayOnUnknown,
                _ => return None,
            };
            let tenant = tenant.trim();
            crate::ledger::valid_tenant(tenant).then(|| (tenant.to_owned(), policy))
        });
        let (tenant, policy) = parsed.ok_or_else(|| {
            SettingsError::Invalid(format!(
                "--tenant-replay-policy `{entry}` is not `tenant=manual` or \
                 `tenant=replay_on_unknown`"
            ))
        })?;
        out.insert(tenant, policy);
    }
    Ok(out)
}

/// The model policy `serve` enforces at submission.
fn model_policy(serve: &ServeArgs, runtime: &RuntimeArgs) -> Result<ModelPolicy, SettingsError> {
    let models: Vec<String> = serve
        .allowed_models
        .iter()
        .map(|m| m.trim().to_owned())
        .filter(|m| !m.is_empty())
        .collect();
    Ok(ModelPolicy {
        models: if models.is_empty() {
            vec![runtime.provider_model.clone()]
        } else {
            models
        },
        tenant_models: ModelPolicy::parse_tenant_models(&serve.tenant_models)
            .map_err(|e| SettingsError::Invalid(format!("--tenant-models: {e}")))?,
        max_output_tokens: serve.max_output_tokens.max(1),
    })
}

/// How long terminal records are kept, if they are pruned at all: as configured, else off on
/// the embedded demo (SQLite with the embedded queue) and 30 days elsewhere.
fn retention(runtime: &RuntimeArgs, backend: Backend) -> Option<Duration> {
    let days = runtime
        .retention_days
        .unwrap_or(match (backend, runtime.queue) {
            (Backend::Sqlite, QueueKind::Embedded) => 0,
            _ => 30,
        });
    (days > 0).then(|| Duration::from_secs(u64::from(days) * 86_400))
}

fn default_worker_id() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "local".into());
    format!("{host}-{}", std::process::id())
}

/// The model provider and the providers jobs may fall back to.
fn provider_settings(runtime: &RuntimeArgs) -> Result<ProviderSettings, SettingsError> {
    let invalid = |flag: &str, e: String| SettingsError::Invalid(format!("{flag}: {e}"));
    let routes = crate::provider::route::Routes::parse(
        &runtime.fallback,
        Duration::from_secs(runtime.fallback_after_secs),
    )
    .map_err(|e| invalid("--fallback", e))?;
    // Each kind named once, never the primary's: `KIND[=URL]`, then the routes' own.
    let mut named: Vec<(ProviderKind, Option<String>)> = Vec::new();
    let listed = runtime.fallback_providers.iter().map(|entry| {
        let (kind, url) = match entry.trim().split_once('=') {
            Some((kind, url)) => (kind.trim(), Some(url.trim().to_owned())),
            None => (entry.trim(), None),
        };
        (kind.to_owned(), url)
    });
    let routed = routes
        .by_tenant
        .values()
        .flatten()
        .map(|pair| (pair.provider.clone(), None));
    for (kind, url) in listed.chain(routed).filter(|(k, _)| !k.is_empty()) {
        let kind = <ProviderKind as clap::ValueEnum>::from_str(&kind, true)
            .map_err(|e| invalid("--fallback-provider", e))?;
        if kind != runtime.provider && !named.iter().any(|(k, _)| *k == kind) {
            named.push((kind, url));
        }
    }
    let mut fallbacks = Vec::with_capacity(named.len());
    for (kind, url) in named {
        let mut fallback = provider_of(runtime, kind, url, false)?;
        fallback.routes = routes.clone();
        fallbacks.push(fallback);
    }
    let mut primary = provider_of(runtime, runtime.provider, None, true)?;
    primary.fallbacks = fallbacks;
    primary.routes = routes;
    Ok(primary)
}

/// One provider of `kind`: the primary (`--provider` and its flags), or one jobs fall back
/// to, at `url` or its kind's own address, with its kind's key variable.
fn provider_of(
    runtime: &RuntimeArgs,
    kind: ProviderKind,
    url: Option<String>,
    primary: bool,
) -> Result<ProviderSettings, SettingsError> {
    let named = match url {
        Some(url) => url,
        None if primary => runtime.provider_url.clone(),
        None => cli::OPENAI_URL.to_owned(),
    };
    let kind_key = match kind {
        ProviderKind::Anthropic => "ANTHROPIC_API_KEY",
        _ => "OPENAI_API_KEY",
    };
    let key = |var: &str| {
        std::env::var(var)
            .ok()
            .filter(|k| !k.trim().is_empty())
            .map(Secret::new)
    };
    Ok(ProviderSettings {
        kind,
        url: match kind {
            // Anthropic's own address unless one is named: OpenAI's default would take its
            // key.
            ProviderKind::Anthropic if named == cli::OPENAI_URL => {
                crate::provider::anthropic::ANTHROPIC_URL.to_owned()
            }
            // The AWS chain's endpoint (the region's, or `AWS_ENDPOINT_URL_…`).
            ProviderKind::Bedrock if named == cli::OPENAI_URL => String::new(),
            _ => named,
        },
        model: runtime.provider_model.clone(),
        timeout: Duration::from_secs(runtime.provider_timeout_secs),
        retrieval: primary && runtime.provider_retrieval,
        api_key: if primary {
            key("FENCELINE_PROVIDER_API_KEY").or_else(|| key(kind_key))
        } else {
            key(kind_key)
        },
        prices: prices_of(&runtime.prices)?,
        stub: StubConfig {
            latency: Duration::from_millis(runtime.stub_latency_ms),
            retryable_rate: runtime.stub_retryable_rate,
            fatal_rate: runtime.stub_fatal_rate,
            lost_response_rate: runtime.stub_lost_rate,
            retrieval: primary && runtime.provider_retrieval,
            rate_limit: runtime.stub_rate_limit.filter(|r| *r > 0.0),
        },
        fallbacks: Vec::new(),
        routes: Default::default(),
    })
}

/// The price table from `--price` entries, with the stub model's own price unless named.
fn prices_of(entries: &[String]) -> Result<Prices, SettingsError> {
    let mut all = vec![STUB_PRICE.to_owned()];
    all.extend(entries.iter().cloned());
    Prices::parse(&all).map_err(|e| SettingsError::Invalid(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_url_is_an_address_that_names_the_trace() {
        let good = "https://jaeger.example.com/trace/{trace_id}?uiFind={span_id}";
        assert_eq!(trace_url(Some(good)).unwrap().as_deref(), Some(good));
        assert_eq!(trace_url(None).unwrap(), None);
        assert!(trace_url(Some("https://jaeger.example.com/search")).is_err());
        assert!(trace_url(Some("javascript:{trace_id}")).is_err());
    }

    #[test]
    fn public_urls_are_a_scheme_and_host_without_a_trailing_slash() {
        assert_eq!(
            public_url(Some("https://fl.example.com/")).unwrap(),
            Some("https://fl.example.com".into())
        );
        assert_eq!(public_url(Some("  ")).unwrap(), None);
        assert!(public_url(Some("fl.example.com")).is_err());
        assert!(public_url(Some("https://")).is_err());
    }

    #[test]
    fn listening_beyond_this_machine_needs_the_public_url_it_answers_for() {
        let serve = |args: &[&str]| {
            let mut argv = vec![
                "fenceline",
                "--database-url",
                "sqlite://bind.sqlite",
                "serve",
            ];
            argv.extend_from_slice(args);
            Cli::try_parse_from(argv)
                .map_err(|e| e.to_string())
                .and_then(|cli| Settings::from_cli(&cli).map_err(|e| e.to_string()))
        };
        for bind in ["0.0.0.0:8080", "[::]:8080", "192.0.2.7:8080"] {
            let refused = serve(&["--bind", bind]).unwrap_err();
            assert!(refused.contains("--public-url"), "{bind}: {refused}");
            serve(&["--bind", bind, "--public-url", "https://fl.example.com"]).unwrap();
        }
        for bind in ["127.0.0.1:8080", "[::1]:8080"] {
            serve(&["--bind", bind]).unwrap();
        }
    }

    #[test]
    fn prices_are_read_per_model_and_a_wrong_one_stops_the_start() {
        let worker = |args: &[&str]| {
            let mut argv = vec!["fenceline", "--database-url", "sqlite://p.sqlite", "worker"];
            argv.extend_from_slice(args);
            Cli::try_parse_from(argv)
                .map_err(|e| e.to_string())
                .and_then(|cli| Settings::from_cli(&cli).map_err(|e| e.to_string()))
        };
        let usage = crate::provider::prices::Usage {
            input: 1_000_000,
            output: 0,
            ..Default::default()
        };
        let priced = worker(&["--price", "gpt-4o-mini=0.15/0.60/0.075"]).unwrap();
        assert_eq!(
            priced.provider.prices.cost("gpt-4o-mini", &usage),
            Some(150_000_000)
        );
        assert!(
            priced.provider.prices.cost("stub", &usage).is_some(),
            "the stub keeps its price"
        );
        let refused = worker(&["--price", "gpt-4o-mini=cheap"]).unwrap_err();
        assert!(refused.contains("MODEL=INPUT/OUTPUT"), "{refused}");
        let reserved = worker(&["--worker-id", "system"]).unwrap_err();
        assert!(reserved.contains("reserved"), "{reserved}");
        let anthropic = worker(&["--provider", "anthropic"]).unwrap();
        assert_eq!(anthropic.provider.url, "https://api.anthropic.com/v1");
    }

    #[test]
    fn trusted_proxies_are_networks_and_anything_else_stops_the_start() {
        let serve = |args: &[&str]| {
            let mut argv = vec!["fenceline", "--database-url", "sqlite://p.sqlite", "serve"];
            argv.extend_from_slice(args);
            Cli::try_parse_from(argv)
                .map_err(|e| e.to_string())
                .and_then(|cli| Settings::from_cli(&cli).map_err(|e| e.to_string()))
        };
        let none = serve(&[]).unwrap();
        assert_eq!(
            none.http.trusted_proxies,
            proxies::TrustedProxies::default()
        );
        let two = serve(&[
            "--trusted-proxy",
            "10.0.0.0/8",
            "--trusted-proxy",
            "2001:db8::1",
        ])
        .unwrap();
        assert_ne!(two.http.trusted_proxies, none.http.trusted_proxies);
        let listed = serve(&["--trusted-proxy", "10.0.0.0/8,192.0.2.7"]).unwrap();
        assert_ne!(listed.http.trusted_proxies, none.http.trusted_proxies);
        for bad in ["10.0.0.0/33", "proxy.internal", "10.0.0.0/8,nope"] {
            let refused = serve(&["--trusted-proxy", bad]).unwrap_err();
            assert!(refused.starts_with("--trusted-proxy `"), "{bad}: {refused}");
        }
    }

    #[test]
    fn there_are_no_global_fault_flags_and_unknown_environments_are_refused() {
        assert!(Cli::try_parse_from(["fenceline", "worker", "--chaos-duplicate", "0.5"]).is_err());
        assert!(Cli::try_parse_from(["fenceline", "--environment", "prod", "worker"]).is_err());
        assert!(Cli::try_parse_from(["fenceline", "--environment", "staging", "worker"]).is_err());
    }

    #[test]
    fn the_soak_fault_rate_is_a_small_fraction_and_production_refuses_it() {
        let settings = |args: &[&str]| {
            let mut argv = vec!["fenceline", "--database-url", "sqlite://soak.sqlite"];
            argv.extend_from_slice(args);
            Cli::try_parse_from(argv)
                .map_err(|e| e.to_string())
                .and_then(|cli| Settings::from_cli(&cli).map_err(|e| e.to_string()))
        };
        let worker = settings(&["worker", "--soak-faults", "0.05"]).unwrap();
        assert_eq!(worker.worker.soak_faults, 0.05);
        assert_eq!(settings(&["worker"]).unwrap().worker.soak_faults, 0.0);
        assert!(settings(&["worker", "--soak-faults", "0.9"]).is_err());
        assert!(settings(&["worker", "--soak-faults", "-0.1"]).is_err());
        let production = settings(&[
            "--environment",
            "production",
            "worker",
            "--soak-faults",
            "0.05",
        ]);
        assert!(
            production
                .as_ref()
                .is_err_and(|e| e.contains("production refuses fault injection")),
            "{production:?}"
        );
        // Only the console needs its public address: the rest of a production deployment
        // starts without one.
        for command in ["worker", "migrate", "doctor"] {
            settings(&["--environment", "production", command]).unwrap();
        }
        let serve = settings(&["--environment", "production", "serve"]).unwrap_err();
        assert!(serve.contains("--public-url"), "{serve}");
    }

    #[test]
    fn tenant_replay_policies_are_tenant_equals_a_policy() {
        let parsed =
            tenant_replay(&["acme=replay_on_unknown".into(), " beta = manual ".into()]).unwrap();
        assert_eq!(
            parsed.get("acme"),
            Some(&crate::ledger::ReplayPolicy::ReplayOnUnknown)
        );
        assert_eq!(
            parsed.get("beta"),
            Some(&crate::ledger::ReplayPolicy::Manual)
        );
        for bad in ["acme", "acme=always", "=manual", "a b=manual"] {
            assert!(tenant_replay(&[bad.into()]).is_err(), "{bad}");
        }
    }

    #[test]
    fn secrets_do_not_print() {
        assert_eq!(format!("{:?}", Secret::new("sk-123")), "Secret(…)");
    }
}
