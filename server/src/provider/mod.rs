//! Model providers: one call per durable attempt, its failure classified where it happens.
//!
//! Owns talking to a model and saying what came of it: succeeded, *throttled* (the provider
//! refused it before running it: a rate limit, an overload), failed retryably, failed fatally,
//! or *uncertain* (the request may have been executed with no answer seen); and what the
//! provider said of its rate limits ([`RateLimits`]), which [`limits`] learns from. Must not
//! touch the ledger or the queue, and must never log prompts, answers or credentials.

pub mod anthropic;
pub mod bedrock;
pub mod limits;
pub mod openai;
pub mod policy;
pub mod prices;
pub mod responses;
pub mod route;
pub mod stand_in;
pub mod stub;

use std::future::Future;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

/// What one attempt sends.
#[derive(Debug, Clone)]
pub struct ProviderRequest {
    pub job_id: String,
    pub attempt_no: i64,
    /// Fenceline's own id for this attempt (`job_id:attempt_no`), sent to the provider where
    /// it accepts one, and kept on the attempt before the call for later retrieval.
    pub client_request_id: String,
    pub input: Value,
    pub model: Value,
}

/// How an attempt ended, as far as the caller can know.
#[derive(Debug, Clone, PartialEq)]
pub enum ProviderOutcome {
    Succeeded {
        answer: String,
        request_id: Option<String>,
        /// What the answer said of the provider's limits.
        limits: RateLimits,
        /// The tokens the answer says it used, when it says.
        usage: Option<prices::Usage>,
    },
    /// The provider confirms it did not run the request and asks to be called later (a rate
    /// limit, an overload, a connection refused before sending): no budget is spent.
    Throttled {
        code: String,
        request_id: Option<String>,
        limits: RateLimits,
    },
    /// Confirmed not done; another attempt may help.
    Retryable {
        code: String,
        request_id: Option<String>,
    },
    /// Confirmed not done; no attempt will help.
    Fatal {
        code: String,
        request_id: Option<String>,
    },
    /// The request may have been executed (and billed) with no answer seen.
    Uncertain {
        code: String,
        request_id: Option<String>,
    },
}

impl ProviderOutcome {
    /// The provider's own id for the request, when its answer named one.
    /// The outcome's kind, as a trace names it.
    pub fn label(&self) -> &'static str {
        match self {
            ProviderOutcome::Succeeded { .. } => "succeeded",
            ProviderOutcome::Throttled { .. } => "throttled",
            ProviderOutcome::Retryable { .. } => "retryable",
            ProviderOutcome::Fatal { .. } => "fatal",
            ProviderOutcome::Uncertain { .. } => "uncertain",
        }
    }

    pub fn request_id(&self) -> Option<&str> {
        match self {
            ProviderOutcome::Succeeded { request_id, .. }
            | ProviderOutcome::Throttled { request_id, .. }
            | ProviderOutcome::Retryable { request_id, .. }
            | ProviderOutcome::Fatal { request_id, .. }
            | ProviderOutcome::Uncertain { request_id, .. } => request_id.as_deref(),
        }
    }
}

/// One rate-limit window as a provider states it (`x-ratelimit-limit-requests`,
/// `…-remaining-…`, `…-reset-…`): how much it admits, how much is left, and how long until it
/// is whole again.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Window {
    pub limit: Option<f64>,
    pub remaining: Option<f64>,
    /// Until the window is back to its limit.
    pub reset: Option<Duration>,
}

impl Window {
    fn is_empty(&self) -> bool {
        self.limit.is_none() && self.remaining.is_none() && self.reset.is_none()
    }

    /// Whether nothing is left of it.
    pub fn exhausted(&self) -> bool {
        self.remaining.is_some_and(|r| r < 1.0)
    }
}

/// What an answer said of the provider's rate limits. Empty when it said nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RateLimits {
    /// The wait the provider asked for (`retry-after-ms`, `retry-after`).
    pub retry_after: Option<Duration>,
    pub requests: Window,
    pub tokens: Window,
}

impl RateLimits {
    pub fn is_empty(&self) -> bool {
        self.retry_after.is_none() && self.requests.is_empty() && self.tokens.is_empty()
    }

    /// How long the provider asks callers to wait: the wait it named, else the reset of a
    /// window it says is spent.
    pub fn wait(&self) -> Option<Duration> {
        self.retry_after.or_else(|| {
            [self.requests, self.tokens]
                .iter()
                .filter(|w| w.exhausted())
                .filter_map(|w| w.reset)
                .max()
        })
    }

    /// Which limit is spent, when the provider says (`requests`, `tokens`).
    pub fn spent(&self) -> Option<&'static str> {
        if self.requests.exhausted() {
            Some("requests")
        } else if self.tokens.exhausted() {
            Some("tokens")
        } else {
            None
        }
    }
}

/// What a provider's retrieval mechanism says about an earlier request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Retrieval {
    /// The request was executed; here is its answer.
    Found(String),
    /// The provider states the request was never executed.
    NeverExecuted,
    /// Nothing conclusive (not found where not-found proves nothing, or the provider did not
    /// answer).
    Inconclusive,
    /// The provider offers no retrieval mechanism (or it is switched off): asking again
    /// cannot help, so an uncertain attempt needs a decision.
    Unsupported,
}

/// What sending a request to run in the background came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Submission {
    /// The provider took it and named the id it can be polled by.
    Accepted {
        provider_id: String,
        request_id: Option<String>,
        limits: RateLimits,
    },
    /// No id came back: how the attempt ended. Uncertain here is the one window a retaining
    /// provider leaves, between sending the request and reading its id.
    Ended(ProviderOutcome),
}

/// Liveness of a call, for the progress rule: the provider ticks it whenever it sees progress
/// (a streamed token, a poll that moved). A timer firing is not progress.
#[derive(Debug, Clone)]
pub struct Progress(Arc<AtomicI64>);

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl Default for Progress {
    fn default() -> Self {
        Progress(Arc::new(AtomicI64::new(now_ms())))
    }
}

impl Progress {
    pub fn tick(&self) {
        self.0.store(now_ms(), Ordering::Relaxed);
    }

    /// Milliseconds since the last tick.
    pub fn idle_ms(&self) -> i64 {
        now_ms() - self.0.load(Ordering::Relaxed)
    }
}

/// A model behind one API.
pub trait Provider: Send + Sync + 'static {
    /// A short, stable name recorded on each attempt.
    fn name(&self) -> &str;

    /// The model a request goes to when its parameters name none.
    fn default_model(&self) -> &str;

    /// The limit `request` counts against, by model: the one its parameters name, else the
    /// default. Limits are learned per provider and model.
    fn model_of(&self, request: &ProviderRequest) -> String {
        request
            .model
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or_else(|| self.default_model())
            .to_owned()
    }

    fn call(
        &self,
        request: ProviderRequest,
        progress: Progress,
    ) -> impl Future<Output = ProviderOutcome> + Send;

    /// Asks the provider what became of an earlier request.
    fn retrieve(&self, client_request_id: &str) -> impl Future<Output = Retrieval> + Send;

    /// Whether the provider runs a request in the background under an id that any caller
    /// can poll it by (background responses; batches): the worker then submits, keeps the id
    /// on the attempt before waiting, and polls; a later owner adopts the attempt and polls
    /// the same request instead of running the model again.
    fn retains(&self) -> bool {
        false
    }

    /// Sends `request` to run in the background ([`Provider::retains`]).
    fn submit(
        &self,
        request: ProviderRequest,
        progress: Progress,
    ) -> impl Future<Output = Submission> + Send {
        let _ = (request, progress);
        std::future::ready(Submission::Ended(ProviderOutcome::Fatal {
            code: "background_unsupported".into(),
            request_id: None,
        }))
    }

    /// Waits for the request running in the background as `provider_id` to end, polling it;
    /// a poll that does not get through is asked again, never taken for the outcome.
    fn poll(
        &self,
        provider_id: &str,
        progress: Progress,
    ) -> impl Future<Output = ProviderOutcome> + Send {
        let _ = (provider_id, progress);
        std::future::ready(ProviderOutcome::Uncertain {
            code: "background_unsupported".into(),
            request_id: None,
        })
    }

    /// Cancels the request running in the background as `provider_id`: `Ok` once the
    /// provider says it will not run on (cancelled, or already ended), else the error.
    fn cancel(&self, provider_id: &str) -> impl Future<Output = Result<(), String>> + Send {
        let _ = provider_id;
        std::future::ready(Err("background_unsupported".to_owned()))
    }
}

/// Either provider, chosen at start-up.
#[derive(Clone)]
pub enum AnyProvider {
    Stub(stub::StubProvider),
    OpenAi(openai::OpenAiProvider),
    Responses(responses::ResponsesProvider),
    Anthropic(anthropic::AnthropicProvider),
    Bedrock(bedrock::BedrockProvider),
}

macro_rules! each {
    ($self:expr, $p:ident => $e:expr) => {
        match $self {
            AnyProvider::Stub($p) => $e,
            AnyProvider::OpenAi($p) => $e,
            AnyProvider::Responses($p) => $e,
            AnyProvider::Anthropic($p) => $e,
            AnyProvider::Bedrock($p) => $e,
        }
    };
}

impl Provider for AnyProvider {
    fn name(&self) -> &str {
        each!(self, p => p.name())
    }

    fn default_model(&self) -> &str {
        each!(self, p => p.default_model())
    }

    fn model_of(&self, request: &ProviderRequest) -> String {
        each!(self, p => p.model_of(request))
    }

    async fn call(&self, request: ProviderRequest, progress: Progress) -> ProviderOutcome {
        each!(self, p => p.call(request, progress).await)
    }

    async fn retrieve(&self, client_request_id: &str) -> Retrieval {
        each!(self, p => p.retrieve(client_request_id).await)
    }

    fn retains(&self) -> bool {
        each!(self, p => p.retains())
    }

    async fn submit(&self, request: ProviderRequest, progress: Progress) -> Submission {
        each!(self, p => p.submit(request, progress).await)
    }

    async fn poll(&self, provider_id: &str, progress: Progress) -> ProviderOutcome {
        each!(self, p => p.poll(provider_id, progress).await)
    }

    async fn cancel(&self, provider_id: &str) -> Result<(), String> {
        each!(self, p => p.cancel(provider_id).await)
    }
}
