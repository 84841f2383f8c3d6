//! Building the application (ledger connected and migrated, listener bound) and running it
//! until a shutdown signal, then draining in-flight requests.

use std::future::Future;
use std::net::SocketAddr;

use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::console::QueueInfo;
use crate::http::{self, AppState};
use crate::ledger::{Ledger, LedgerError};
use crate::metrics::Metrics;
use crate::settings::{QueueKind, Settings};

#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error("cannot open the ledger")]
    Ledger(#[from] LedgerError),
    #[error("cannot listen on {addr}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// A built, not yet running, application.
pub struct Application {
    listener: TcpListener,
    router: axum::Router,
    ledger: Ledger,
    addr: SocketAddr,
    metrics: Metrics,
}

/// Migrates the ledger, and marks it as serving production when this process does: drills
/// then refuse it, whatever environment their own process is given.
pub async fn migrate(
    ledger: &Ledger,
    environment: crate::settings::Environment,
) -> Result<(), crate::ledger::LedgerError> {
    ledger.migrate().await?;
    if environment == crate::settings::Environment::Production {
        ledger.mark_production().await?;
    }
    Ok(())
}

impl Application {
    /// Connects and migrates the ledger, then binds the HTTP listener (port 0 picks a free
    /// port), all as `settings` say.
    pub async fn build(settings: &Settings) -> Result<Application, StartupError> {
        let ledger = Ledger::connect(&settings.ledger.url, &settings.ledger.options).await?;
        migrate(&ledger, settings.environment).await?;
        let bind = settings.http.bind;
        let listener = TcpListener::bind(bind)
            .await
            .map_err(|source| StartupError::Bind { addr: bind, source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| StartupError::Bind { addr: bind, source })?;
        let metrics = Metrics::default();
        let queue = &settings.queue;
        let queue_info = QueueInfo {
            description: match queue.kind {
                QueueKind::Embedded => format!("embedded:{}", queue.name),
                QueueKind::Sqs => format!("sqs:{}", queue.name),
            },
            embedded_dead_letters: (queue.kind == QueueKind::Embedded)
                .then(|| format!("{}-dlq", queue.name)),
            drills: crate::console::DrillAccess {
                environment: settings.environment,
                sqs: queue.kind == QueueKind::Sqs,
                provider: settings
                    .provider
                    .kind
                    .is_http()
                    .then(|| settings.provider.clone()),
            },
            prices: std::sync::Arc::new(settings.provider.prices.clone()),
            default_model: settings.provider.default_model().to_owned(),
            trace_url: settings.http.trace_url.clone(),
            alerts: settings.http.alerts.clone(),
            bulk_cap: settings.http.bulk_cap,
            incident_keep: settings.http.incident_keep,
        };
        // A run whose process ended mid-run says so.
        match ledger
            .mark_interrupted_drills(crate::drill::runner::STALE)
            .await
        {
            Ok(0) => {}
            Ok(n) => tracing::warn!(
                runs = n,
                "drill runs cut short by a restart are marked interrupted"
            ),
            Err(error) => tracing::warn!(%error, "could not mark interrupted drill runs"),
        }
        let mut access = crate::http::gate::Access::from_settings(settings);
        let kept = ledger
            .form_key(&http::sign_in_form::FormKey::candidate())
            .await?;
        access.form_key = http::sign_in_form::FormKey::from_hex(&kept)
            .ok_or_else(|| LedgerError::Corrupt("the form key is not 32 bytes of hex".into()))?;
        let router = http::router(AppState {
            ledger: ledger.clone(),
            max_body_bytes: settings.http.max_body_bytes,
            queue: queue_info,
            model_policy: std::sync::Arc::new(settings.http.model_policy.clone()),
            metrics: metrics.clone(),
            access: std::sync::Arc::new(access),
            tenant_replay: std::sync::Arc::new(settings.http.tenant_replay.clone()),
            open_queue: {
                let (ledger, queue) = (ledger.clone(), settings.queue.clone());
                std::sync::Arc::new(move || {
                    let (ledger, queue) = (ledger.clone(), queue.clone());
                    Box::pin(async move {
                        runtime::plain_queue(&ledger, &queue)
                            .await
                            .map_err(|e| e.to_string())
                    })
                })
            },
            drill_provider: settings
                .provider
                .kind
                .is_http()
                .then(|| runtime::provider(&settings.provider).map_err(|e| e.to_string())),
        });
        Ok(Application {
            listener,
            router,
            ledger,
            addr,
            metrics,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// The process's metrics, for the worker that runs beside the server.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Serves until `shutdown` resolves, then lets in-flight requests finish. The ledger stays
    /// open: workers in the same process may still be draining; whoever owns the process
    /// closes it last (see [`Stages`]).
    pub async fn run_until_stopped(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        axum::serve(
            self.listener,
            self.router
                .into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(shutdown)
        .await
    }
}

/// The order in which a process stops, so that no answer is lost on the way down:
/// `front` (HTTP stops accepting, the worker stops receiving and drains its calls — finished
/// and committed, or handed back to the ledger), then `back` (the outbox dispatcher and the
/// reaper, which must outlive the drain's hand-backs), then the ledger's pool closes.
#[derive(Clone, Default)]
pub struct Stages {
    pub front: CancellationToken,
    pub back: CancellationToken,
}

/// The tasks of one process, stopped in [`Stages`] order.
pub struct Supervisor {
    tasks: JoinSet<Stage>,
    stages: Stages,
    /// Front tasks not yet ended.
    front_left: usize,
}

/// A task's name for the log, and whether it stops in the front stage.
#[derive(Debug, Clone, Copy)]
struct Stage {
    name: &'static str,
    front: bool,
}

impl Default for Supervisor {
    fn default() -> Self {
        Supervisor {
            tasks: JoinSet::new(),
            stages: Stages::default(),
            front_left: 0,
        }
    }
}

impl Supervisor {
    pub fn stages(&self) -> &Stages {
        &self.stages
    }

    /// Runs `task`, which should return once its stage's token is cancelled: `front` tasks
    /// (HTTP, workers) stop first, the others after every front task has ended.
    pub fn spawn<F>(&mut self, name: &'static str, front: bool, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        if front {
            self.front_left += 1;
        }
        self.tasks.spawn(async move {
            task.await;
            Stage { name, front }
        });
    }

    /// Waits for `signal` (or for any task to end by itself), stops the stages in order, and
    /// closes the ledger last.
    pub async fn run_until_stopped(mut self, ledger: &Ledger, signal: impl Future<Output = ()>) {
        tokio::select! {
            _ = signal => {}
            ended = self.tasks.join_next() => {
                let name = self.ended(ended);
                tracing::warn!(task = name, "a task ended; stopping the others");
            }
        }
        self.stages.front.cancel();
        loop {
            if self.front_left == 0 {
                self.stages.back.cancel();
            }
            let Some(ended) = self.tasks.join_next().await else {
                break;
            };
            let name = self.ended(Some(ended));
            tracing::info!(task = name, "stopped");
        }
        ledger.close().await;
    }

    fn ended(&mut self, ended: Option<Result<Stage, tokio::task::JoinError>>) -> &'static str {
        match ended {
            Some(Ok(stage)) => {
                if stage.front {
                    self.front_left -= 1;
                }
                stage.name
            }
            Some(Err(error)) => {
                // A panicked task's stage is unknown; it can no longer hold the drain up.
                tracing::error!(%error, "a task failed");
                self.front_left = self.front_left.saturating_sub(1);
                "a panicked task"
            }
            None => "none",
        }
    }
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => tracing::info!("Ctrl-C received; shutting down"),
        _ = terminate => tracing::info!("SIGTERM received; shutting down"),
    }
}

/// Building the parts that work jobs: queue, provider, worker, dispatcher, reaper.
pub mod runtime {
    use std::time::Duration;

    use super::Supervisor;
    use crate::ledger::{Ledger, LedgerError};
    use crate::metrics::Metrics;
    use crate::provider::anthropic::AnthropicProvider;
    use crate::provider::bedrock::{BedrockConfig, BedrockProvider};
    use crate::provider::limits::Limits;
    use crate::provider::openai::{ApiKey, OpenAiConfig, OpenAiProvider};
    use crate::provider::responses::ResponsesProvider;
    use crate::provider::stub::StubProvider;
    use crate::provider::{AnyProvider, Provider};
    use crate::queue::embedded::EmbeddedQueue;
    use crate::queue::sqs::SqsQueue;
    use crate::queue::{AnyQueue, Queue, QueueError};
    use crate::settings::{ProviderKind, ProviderSettings, QueueKind, Settings};
    use crate::worker::{dispatcher, presence, reaper, retention, Worker, WorkerConfig};

    #[derive(Debug, thiserror::Error)]
    pub enum RuntimeError {
        #[error("cannot open the queue")]
        Queue(#[from] QueueError),
        #[error("cannot build the provider: {0}")]
        Provider(String),
        #[error("cannot record the tenants' shares")]
        Ledger(#[from] LedgerError),
        #[error(
            "the ledger is marked production: it refuses fault injection (--soak-faults is \
             for the chaos soak)"
        )]
        FaultsInProduction,
    }

    /// The configured queue.
    pub async fn queue(ledger: &Ledger, settings: &Settings) -> Result<AnyQueue, RuntimeError> {
        plain_queue(ledger, &settings.queue).await
    }

    /// The configured queue, with no fault injection: for operators' actions.
    pub async fn plain_queue(
        ledger: &Ledger,
        q: &crate::settings::QueueSettings,
    ) -> Result<AnyQueue, RuntimeError> {
        Ok(match q.kind {
            QueueKind::Embedded => AnyQueue::Embedded(EmbeddedQueue::new(
                ledger.clone(),
                &q.name,
                q.max_receive_count,
            )),
            QueueKind::Sqs => {
                let client = SqsQueue::client_from_env().await;
                AnyQueue::Sqs(SqsQueue::open(client, &q.name, Duration::from_secs(10)).await?)
            }
        })
    }

    pub fn provider(settings: &ProviderSettings) -> Result<AnyProvider, RuntimeError> {
        // The HTTP adapters share one configuration; only chat completions retrieve.
        let config = OpenAiConfig {
            base_url: settings.url.clone(),
            api_key: settings
                .api_key
                .as_ref()
                .map(|key| ApiKey::new(key.expose().to_owned())),
            default_model: settings.model.clone(),
            timeout: settings.timeout,
            retrieval: settings.retrieval && settings.kind == ProviderKind::Openai,
        };
        let built = match settings.kind {
            ProviderKind::Stub => {
                return Ok(AnyProvider::Stub(StubProvider::new(settings.stub.clone())))
            }
            ProviderKind::Openai => OpenAiProvider::new(config).map(AnyProvider::OpenAi),
            ProviderKind::Anthropic => AnthropicProvider::new(config).map(AnyProvider::Anthropic),
            ProviderKind::OpenaiResponses => {
                ResponsesProvider::new(config).map(AnyProvider::Responses)
            }
            ProviderKind::Bedrock => {
                Ok(AnyProvider::Bedrock(BedrockProvider::new(BedrockConfig {
                    endpoint: Some(config.base_url).filter(|url| !url.is_empty()),
                    default_model: config.default_model,
                    timeout: config.timeout,
                })))
            }
        };
        built.map_err(|e| RuntimeError::Provider(e.to_string()))
    }

    pub fn worker_config(settings: &Settings) -> WorkerConfig {
        let w = &settings.worker;
        let mut config = WorkerConfig::new(w.id.clone());
        config.max_in_flight = w.max_in_flight;
        config.receivers = w.receivers;
        config.drain_timeout = w.drain_timeout;
        config.timings = w.timings.clone();
        config.prices = std::sync::Arc::new(settings.provider.prices.clone());
        config.routes = std::sync::Arc::new(settings.provider.routes.clone());
        config
    }

    /// Opens the configured queue and provider, then spawns the worker, dispatcher, reaper and
    /// retention task (see [`spawn`]).
    pub async fn start(
        supervisor: &mut Supervisor,
        ledger: &Ledger,
        settings: &Settings,
        metrics: &Metrics,
    ) -> Result<(), RuntimeError> {
        if settings.worker.soak_faults > 0.0 && ledger.marked_production().await? {
            return Err(RuntimeError::FaultsInProduction);
        }
        let queue = queue(ledger, settings).await?;
        let provider = provider(&settings.provider)?;
        let fallbacks = settings
            .provider
            .fallbacks
            .iter()
            .map(self::provider)
            .collect::<Result<Vec<_>, _>>()?;
        // The tenants' shares this process was given become the deployment's.
        if !settings.worker.tenant_shares.is_empty() {
            ledger
                .set_tenant_shares(&settings.worker.tenant_shares)
                .await?;
        }
        spawn(
            supervisor,
            ledger,
            queue,
            (provider, fallbacks),
            settings,
            metrics,
        );
        Ok(())
    }

    /// Spawns the worker (front stage: it stops receiving and drains first), the dispatcher
    /// and the reaper (back stage: they keep running while the worker hands calls back).
    pub fn spawn(
        supervisor: &mut Supervisor,
        ledger: &Ledger,
        queue: AnyQueue,
        (provider, fallbacks): (AnyProvider, Vec<AnyProvider>),
        settings: &Settings,
        metrics: &Metrics,
    ) {
        let mut config = worker_config(settings);
        config.metrics = metrics.clone();
        let fallback_names: Vec<&str> = fallbacks.iter().map(|p| p.name()).collect();
        tracing::info!(worker = %config.worker_id, queue = %queue.describe(), provider = ?settings.provider.kind, fallbacks = ?fallback_names, "starting the worker, dispatcher and reaper");
        if !settings.provider.retrieval {
            tracing::info!(
                "provider retrieval is off: an uncertain model call leaves its job `unknown` \
                 until a decision (FENCELINE_PROVIDER_RETRIEVAL=1 stores completions so they \
                 can be looked up)"
            );
        }
        let stages = supervisor.stages().clone();
        let stop = stages.front.clone();
        // What this worker learns of its provider's limits, shared with the fleet.
        let limits = Limits::new(config.max_in_flight);
        // Reports in the back stage: a worker still draining its calls is alive.
        let width = i64::try_from(config.max_in_flight).unwrap_or(i64::MAX);
        supervisor.spawn(
            "presence",
            false,
            presence::run(
                ledger.clone(),
                crate::ledger::WorkerReport {
                    worker_id: config.worker_id.clone(),
                    queue: queue.describe(),
                    provider: provider.name().to_owned(),
                    max_in_flight: width,
                    capacity: width,
                },
                limits.clone(),
                stages.back.clone(),
            ),
        );
        supervisor.spawn(
            "provider limits",
            false,
            crate::worker::flow::run(
                ledger.clone(),
                limits.clone(),
                config.worker_id.clone(),
                std::iter::once(&provider)
                    .chain(&fallbacks)
                    .map(|p| p.name().to_owned())
                    .collect(),
                stages.back.clone(),
            ),
        );
        let rate = settings.worker.soak_faults;
        if rate > 0.0 {
            // The chaos soak: the worker's queue drops deletes and visibility changes and
            // delivers copies, its lease renewals fail, and its group commits lose their
            // answer (landed or not), each at `rate`.
            tracing::warn!(rate, "injecting faults for the chaos soak");
            ledger.lose_commit_answers_at(rate);
            config.faults = Some(crate::faults::Faults::at_rate(
                rate,
                &[crate::faults::FaultPoint::LeaseRenew],
            ));
            let faulty = crate::queue::faults::FaultyQueue::new(queue.clone());
            faulty.arm(crate::queue::faults::FaultPlan {
                delete_timeout: rate,
                visibility_timeout: rate,
                duplicate: rate,
            });
            let providers = (provider.clone(), fallbacks);
            let worker = Worker::routed(ledger.clone(), faulty, providers, config, limits);
            supervisor.spawn("worker", true, async move { worker.run(stop).await });
        } else {
            let providers = (provider.clone(), fallbacks);
            let worker = Worker::routed(ledger.clone(), queue.clone(), providers, config, limits);
            supervisor.spawn("worker", true, async move { worker.run(stop).await });
        }
        supervisor.spawn(
            "dispatcher",
            false,
            dispatcher::run_lane(
                ledger.clone(),
                queue,
                Duration::from_millis(100),
                metrics.clone(),
                dispatcher::Lane::metered(dispatcher::Meter::Fleet),
                stages.back.clone(),
            ),
        );
        supervisor.spawn(
            "reaper",
            false,
            reaper::run(
                ledger.clone(),
                provider,
                settings.worker.reaper_interval,
                settings.worker.redispatch_after,
                stages.back.clone(),
            ),
        );
        match settings.worker.retention {
            Some(keep) => {
                let days = keep.as_secs() / 86_400;
                if days < 15 {
                    tracing::warn!(
                        days,
                        "retention is shorter than SQS's longest message retention (14 days) \
                         plus a replay window: a late copy of a pruned job's message is refused \
                         as unknown"
                    );
                }
                tracing::info!(
                    days,
                    "retention: terminal records are pruned after their keep period"
                );
                supervisor.spawn(
                    "retention",
                    false,
                    retention::run(ledger.clone(), keep, Duration::from_secs(3600), stages.back),
                );
            }
            None => tracing::info!(
                "retention is off: nothing is pruned (FENCELINE_RETENTION_DAYS to change)"
            ),
        }
    }
}

/// Why a deployment cannot let anyone sign in.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    #[error(
        "no operator can sign in to this production deployment: add one first with \
         `fenceline operator add <name> --role admin` (the password is read from a prompt or \
         --password-stdin)"
    )]
    NoOperatorInProduction,
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    #[error("cannot make the first administrator's password: {0}")]
    Password(#[from] crate::operators::PasswordError),
}

/// On a deployment with no operator able to sign in, the first `serve` of a development
/// deployment adds `admin` with a generated password and returns it, to be shown once beside
/// the console's address. A production deployment never does: it refuses to start instead.
pub async fn first_operator(
    ledger: &Ledger,
    environment: crate::settings::Environment,
) -> Result<Option<String>, BootstrapError> {
    if ledger.active_operator_count().await? > 0 {
        return Ok(None);
    }
    if environment == crate::settings::Environment::Production {
        return Err(BootstrapError::NoOperatorInProduction);
    }
    let password = crate::operators::generate_password()?;
    let hash = crate::operators::hash_password(&password)?;
    match ledger
        .add_operator("admin", crate::operators::Role::Admin, None, &hash)
        .await
    {
        Ok(_) => Ok(Some(password)),
        // Another process of this deployment got there first, or an `admin` exists but is
        // disabled: nothing to show here.
        Err(LedgerError::Invalid(_)) => Ok(None),
        Err(error) => Err(error.into()),
    }
}
