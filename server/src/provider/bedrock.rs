//! Amazon Bedrock, natively (`--provider bedrock`): the Converse operation of the
//! `aws-sdk-bedrockruntime` client, with the credential chain, region and endpoint override the
//! SQS client uses ([`crate::aws::sdk_config`]), the answer's `x-amzn-RequestId` kept as
//! evidence and its usage read (input, output, cache read and write tokens).
//!
//! The SDK's own retries are off: by default it re-sends on throttling, `ModelNotReadyException`,
//! 500s and timeouts, and a silently re-sent request is a second inference no attempt records.
//! Here every recorded attempt is one send.
//!
//! Classification (`docs/providers.md`, row by row): `ThrottlingException`,
//! `ModelNotReadyException` and `ServiceUnavailableException` are throttled (the model did not
//! run: no budget spent); `ModelTimeoutException`, `InternalServerException` and
//! `ModelErrorException` are uncertain (the reference does not say the model did not run);
//! `ValidationException`, `AccessDeniedException` and `ResourceNotFoundException` are fatal. A
//! call that failed before it was handed to the HTTP client (credentials, endpoint, signature)
//! was never sent: throttled, `not_sent`.
//! Converse keeps nothing a caller can look up: an uncertain attempt waits in `unknown` for a
//! decision, and its timeline says why.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aws_config::SdkConfig;
use aws_sdk_bedrockruntime::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_bedrockruntime::config::retry::RetryConfig;
use aws_sdk_bedrockruntime::config::timeout::TimeoutConfig;
use aws_sdk_bedrockruntime::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_bedrockruntime::error::BoxError;
use aws_sdk_bedrockruntime::error::SdkError;
use aws_sdk_bedrockruntime::operation::converse::{ConverseError, ConverseOutput};
use aws_sdk_bedrockruntime::types::{
    ContentBlock, ConversationRole, InferenceConfiguration, Message, SystemContentBlock, TokenUsage,
};
use aws_sdk_bedrockruntime::Client;
use serde_json::{json, Value};
use tokio::sync::OnceCell;

use super::openai::StatusClass;
use super::prices::Usage;
use super::{Progress, Provider, ProviderOutcome, ProviderRequest, RateLimits, Retrieval};

/// What the adapter is built from.
#[derive(Debug, Clone)]
pub struct BedrockConfig {
    /// The endpoint, when it is not the region's (`--provider-url`); else the standard chain's
    /// (`AWS_ENDPOINT_URL_BEDROCK_RUNTIME`, `AWS_ENDPOINT_URL`, the region's own).
    pub endpoint: Option<String>,
    pub default_model: String,
    /// How long one send may take, answer included.
    pub timeout: Duration,
}

#[derive(Clone)]
pub struct BedrockProvider {
    config: BedrockConfig,
    /// The client, made from the environment at the first call (loading it is asynchronous).
    client: Arc<OnceCell<Client>>,
}

impl BedrockProvider {
    /// An adapter whose client is made from the environment when it is first needed.
    pub fn new(config: BedrockConfig) -> Self {
        BedrockProvider {
            config,
            client: Arc::new(OnceCell::new()),
        }
    }

    /// An adapter on an AWS configuration made elsewhere.
    pub fn with_sdk_config(config: BedrockConfig, sdk: &SdkConfig) -> Self {
        let client = client(&config, sdk);
        BedrockProvider {
            config,
            client: Arc::new(OnceCell::new_with(Some(client))),
        }
    }

    async fn client(&self) -> &Client {
        self.client
            .get_or_init(|| async { client(&self.config, &crate::aws::sdk_config().await) })
            .await
    }
}

/// The Converse client: one send per call (no retry of the SDK's own), bounded by the timeout.
fn client(config: &BedrockConfig, sdk: &SdkConfig) -> Client {
    let mut builder = aws_sdk_bedrockruntime::config::Builder::from(sdk)
        .retry_config(RetryConfig::disabled())
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(Duration::from_secs(10))
                .operation_attempt_timeout(config.timeout)
                .build(),
        );
    if let Some(endpoint) = &config.endpoint {
        builder = builder.endpoint_url(endpoint);
    }
    Client::from_conf(builder.build())
}

/// Marks a call handed to the HTTP client. A call that failed before it (the credentials, the
/// endpoint, the signature) was never sent: the model cannot have run.
#[derive(Debug, Clone, Default)]
struct Transmitted(Arc<AtomicBool>);

impl Intercept for Transmitted {
    fn name(&self) -> &'static str {
        "fenceline-transmitted"
    }

    fn read_before_transmit(
        &self,
        _: &BeforeTransmitInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        self.0.store(true, Ordering::Relaxed);
        Ok(())
    }
}

/// A message's text: a string, or the text parts of a list of content parts.
fn text_of(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str().or_else(|| p.as_str()))
            .collect::<Vec<_>>()
            .join(""),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// What one Converse call sends, from a job's input and parameters: its system prompt, its
/// turns, and the inference settings.
fn conversation(
    request: &ProviderRequest,
) -> Result<(Vec<SystemContentBlock>, Vec<Message>), String> {
    let turns: Vec<(Option<&str>, String)> =
        match request.input.get("messages").and_then(Value::as_array) {
            Some(messages) => messages
                .iter()
                .map(|m| (m["role"].as_str(), text_of(&m["content"])))
                .collect(),
            None => vec![(
                Some("user"),
                match &request.input {
                    Value::String(text) => text.clone(),
                    other => other.to_string(),
                },
            )],
        };
    let mut system = Vec::new();
    let mut messages = Vec::new();
    for (role, text) in turns {
        let role = match role {
            // A system message is the request's `system`, not one of its turns.
            Some("system") => {
                system.push(SystemContentBlock::Text(text));
                continue;
            }
            Some("assistant") => ConversationRole::Assistant,
            _ => ConversationRole::User,
        };
        let message = Message::builder()
            .role(role)
            .content(ContentBlock::Text(text))
            .build()
            .map_err(|e| e.to_string())?;
        messages.push(message);
    }
    Ok((system, messages))
}

fn inference(params: &Value) -> InferenceConfiguration {
    let max_tokens = ["max_tokens", "max_completion_tokens", "max_output_tokens"]
        .iter()
        .find_map(|k| params[k].as_i64());
    let mut config = InferenceConfiguration::builder()
        .set_max_tokens(max_tokens.map(|n| n.clamp(1, i64::from(i32::MAX)) as i32))
        .set_temperature(params["temperature"].as_f64().map(|t| t as f32))
        .set_top_p(params["top_p"].as_f64().map(|t| t as f32));
    match &params["stop"] {
        Value::String(s) => config = config.stop_sequences(s),
        Value::Array(list) => {
            for s in list.iter().filter_map(Value::as_str) {
                config = config.stop_sequences(s);
            }
        }
        _ => {}
    }
    config.build()
}

/// The tokens Converse reports: cache reads and writes are not part of `inputTokens`.
pub fn usage_of(usage: &TokenUsage) -> Usage {
    let n = |v: i32| u64::try_from(v).unwrap_or(0);
    Usage::with_cache(
        (n(usage.input_tokens()), n(usage.output_tokens())),
        n(usage.cache_read_input_tokens().unwrap_or(0)),
        n(usage.cache_write_input_tokens().unwrap_or(0)),
    )
}

/// The part of an answer kept as the job's result.
fn answer_of(model: &str, output: &ConverseOutput) -> Option<String> {
    let message = output.output()?.as_message().ok()?;
    let text: String = message
        .content()
        .iter()
        .filter_map(|block| block.as_text().ok())
        .map(String::as_str)
        .collect();
    let usage = output.usage().map(|u| {
        json!({
            "inputTokens": u.input_tokens(),
            "outputTokens": u.output_tokens(),
            "cacheReadInputTokens": u.cache_read_input_tokens(),
            "cacheWriteInputTokens": u.cache_write_input_tokens(),
        })
    });
    Some(
        json!({
            "content": text,
            "model": model,
            "stop_reason": output.stop_reason().as_str(),
            "usage": usage,
        })
        .to_string(),
    )
}

/// How each Converse error classifies, and its code on the timeline.
pub fn classify(error: &ConverseError) -> (StatusClass, &'static str) {
    use ConverseError as E;
    match error {
        // Refused before the model ran: quotas, a model still loading, the service unavailable.
        E::ThrottlingException(_) => (StatusClass::Throttled, "ThrottlingException"),
        E::ModelNotReadyException(_) => (StatusClass::Throttled, "ModelNotReadyException"),
        E::ServiceUnavailableException(_) => {
            (StatusClass::Throttled, "ServiceUnavailableException")
        }
        // The model may have run: too long, an internal failure, an error while processing.
        E::ModelTimeoutException(_) => (StatusClass::Uncertain, "ModelTimeoutException"),
        E::InternalServerException(_) => (StatusClass::Uncertain, "InternalServerException"),
        E::ModelErrorException(_) => (StatusClass::Uncertain, "ModelErrorException"),
        // The request itself will never run.
        E::ValidationException(_) => (StatusClass::Fatal, "ValidationException"),
        E::AccessDeniedException(_) => (StatusClass::Fatal, "AccessDeniedException"),
        E::ResourceNotFoundException(_) => (StatusClass::Fatal, "ResourceNotFoundException"),
        // An error the reference does not name: nothing says the model did not run.
        _ => (StatusClass::Uncertain, "unrecognized_error"),
    }
}

/// Whether a failed dispatch was refused before anything was sent: a connection refused or
/// a name that did not resolve (the model cannot have run).
fn refused_before_sending(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::NotFound
            ) {
                return true;
            }
        }
        let text = e.to_string();
        if text.contains("client error (Connect)") || text.contains("dns error") {
            return true;
        }
        next = e.source();
    }
    false
}

impl Provider for BedrockProvider {
    fn name(&self) -> &str {
        "bedrock"
    }

    fn default_model(&self) -> &str {
        &self.config.default_model
    }

    /// Boxed: the SDK's request future is large, and a worker holds one per call in flight.
    async fn call(&self, request: ProviderRequest, progress: Progress) -> ProviderOutcome {
        Box::pin(self.converse(request, progress)).await
    }

    /// Converse keeps nothing a caller can look up: asking cannot help.
    async fn retrieve(&self, _client_request_id: &str) -> Retrieval {
        Retrieval::Unsupported
    }
}

impl BedrockProvider {
    async fn converse(&self, request: ProviderRequest, progress: Progress) -> ProviderOutcome {
        let model = self.model_of(&request);
        let (system, messages) = match conversation(&request) {
            Ok(parts) => parts,
            Err(_) => {
                return ProviderOutcome::Fatal {
                    code: "invalid_input".into(),
                    request_id: None,
                }
            }
        };
        let transmitted = Transmitted::default();
        let sent = self
            .client()
            .await
            .converse()
            .model_id(&model)
            .set_system((!system.is_empty()).then_some(system))
            .set_messages(Some(messages))
            .inference_config(inference(&request.model))
            .customize()
            .interceptor(transmitted.clone())
            .send()
            .await;
        progress.tick();
        match sent {
            Ok(output) => {
                use aws_sdk_bedrockruntime::operation::RequestId;
                let request_id = output.request_id().map(str::to_owned);
                match answer_of(&model, &output) {
                    Some(answer) => ProviderOutcome::Succeeded {
                        answer,
                        request_id,
                        limits: RateLimits::default(),
                        usage: output.usage().map(usage_of),
                    },
                    None => ProviderOutcome::Uncertain {
                        code: "unreadable_response".into(),
                        request_id,
                    },
                }
            }
            Err(SdkError::ServiceError(context)) => {
                let request_id = context
                    .raw()
                    .headers()
                    .get("x-amzn-RequestId")
                    .map(str::to_owned);
                let (class, code) = classify(context.err());
                let limits = RateLimits {
                    retry_after: context
                        .raw()
                        .headers()
                        .get("retry-after")
                        .and_then(|v| v.trim().parse::<u64>().ok())
                        .map(Duration::from_secs),
                    ..RateLimits::default()
                };
                class.outcome(code.to_owned(), request_id, limits)
            }
            // Never handed to the HTTP client: no credentials, no endpoint, no signature, a
            // request that could not be built.
            Err(_) if !transmitted.0.load(Ordering::Relaxed) => ProviderOutcome::Throttled {
                code: "not_sent".into(),
                request_id: None,
                limits: RateLimits::default(),
            },
            Err(SdkError::TimeoutError(_)) => ProviderOutcome::Uncertain {
                code: "timeout".into(),
                request_id: None,
            },
            Err(SdkError::DispatchFailure(failure)) => {
                if failure
                    .as_connector_error()
                    .is_some_and(|e| refused_before_sending(e))
                {
                    ProviderOutcome::Throttled {
                        code: "connect_failed".into(),
                        request_id: None,
                        limits: RateLimits::default(),
                    }
                } else if failure.is_timeout() {
                    ProviderOutcome::Uncertain {
                        code: "timeout".into(),
                        request_id: None,
                    }
                } else {
                    ProviderOutcome::Uncertain {
                        code: "response_lost".into(),
                        request_id: None,
                    }
                }
            }
            Err(_) => ProviderOutcome::Uncertain {
                code: "unreadable_response".into(),
                request_id: None,
            },
        }
    }
}
