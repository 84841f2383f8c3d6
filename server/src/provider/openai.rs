//! An OpenAI-compatible chat-completions provider (OpenAI, vLLM, Ollama, LiteLLM-style
//! servers). The API key comes from the environment and is never logged or shown.
//!
//! Classification ([`classify_status`], documented row by row in `docs/providers.md`): a
//! failure is *retryable* or *fatal* only when the server confirms it did not process the
//! request (it never reached the server; `408`, `429`, `503`, `529`; a client error). Anything
//! that may have run the model — a timeout or a lost connection after sending, `500`, a
//! gateway's `502`/`504`/`52x`, an unknown `5xx`, an unreadable `200` — is *uncertain*: the
//! job goes `unknown` and needs retrieval or a decision, never a silent second attempt.
//!
//! Each request carries Fenceline's client request id (`X-Client-Request-Id` and, when
//! retrieval is on, `metadata.fenceline_request` with `store: true`), so that an uncertain
//! attempt can later be looked up through the provider's stored-completions listing. A listed
//! completion counts only if its metadata carries that id; a server without the listing
//! (`404`/`405`) is remembered as offering no retrieval, said once, and not asked again.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::{Progress, Provider, ProviderOutcome, ProviderRequest, Retrieval};

/// An API key: never printed.
#[derive(Clone)]
pub struct ApiKey(String);

impl ApiKey {
    pub fn new(key: String) -> Self {
        ApiKey(key)
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

#[derive(Debug, Clone)]
pub struct OpenAiConfig {
    /// Up to and including the version segment, e.g. `https://api.openai.com/v1`.
    pub base_url: String,
    pub api_key: Option<ApiKey>,
    /// Used when the job's model parameters name no `model`.
    pub default_model: String,
    /// The whole call, from sending to the last byte of the answer.
    pub timeout: Duration,
    /// Store completions with Fenceline's id in their metadata, so uncertain attempts can be
    /// retrieved.
    pub retrieval: bool,
}

#[derive(Clone)]
pub struct OpenAiProvider {
    config: OpenAiConfig,
    http: reqwest::Client,
    /// Set once the server answered that it has no stored-completions listing.
    no_listing: Arc<AtomicBool>,
}

/// How a completed HTTP exchange's status classifies (2xx is read separately).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusClass {
    /// The server says it did not process the request and another attempt may succeed.
    Retryable,
    /// The server says it did not process the request and no attempt will help.
    Fatal,
    /// The model may have run (and billed) with no answer seen.
    Uncertain,
}

/// The classification table (`docs/providers.md` gives the reason for each row).
pub fn classify_status(status: u16) -> StatusClass {
    match status {
        // Request timeout (the server never got the whole request), rate limited,
        // overloaded/unavailable before routing to a model, Anthropic-style overloaded.
        408 | 429 | 503 | 529 => StatusClass::Retryable,
        // Not implemented / version not supported: refused outright.
        501 | 505 => StatusClass::Fatal,
        // 500 and every gateway or unknown server error: it may have run upstream.
        500..=599 => StatusClass::Uncertain,
        // Any other client error: the request itself is wrong; repeating it cannot help.
        400..=499 => StatusClass::Fatal,
        // A 1xx/3xx where an answer was expected: what happened upstream is unknown.
        _ => StatusClass::Uncertain,
    }
}

impl OpenAiProvider {
    pub fn new(config: OpenAiConfig) -> Result<Self, reqwest::Error> {
        let http = reqwest::Client::builder()
            .timeout(config.timeout)
            .connect_timeout(Duration::from_secs(10))
            .build()?;
        Ok(OpenAiProvider {
            config,
            http,
            no_listing: Arc::new(AtomicBool::new(false)),
        })
    }

    fn url(&self, path: &str) -> String {
        format!("{}{}", self.config.base_url.trim_end_matches('/'), path)
    }

    fn authorized(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.config.api_key {
            Some(ApiKey(key)) => request.bearer_auth(key),
            None => request,
        }
    }

    fn body(&self, request: &ProviderRequest) -> Value {
        let mut body = match &request.model {
            Value::Object(params) => Value::Object(params.clone()),
            _ => json!({}),
        };
        if body.get("model").is_none() {
            body["model"] = json!(self.config.default_model);
        }
        body["messages"] = match request.input.get("messages") {
            Some(messages) => messages.clone(),
            None => {
                let content = match &request.input {
                    Value::String(text) => text.clone(),
                    other => other.to_string(),
                };
                json!([{ "role": "user", "content": content }])
            }
        };
        if self.config.retrieval {
            body["store"] = json!(true);
            body["metadata"] = json!({ "fenceline_request": request.client_request_id });
        }
        body
    }
}

/// The part of a completion kept as the job's answer.
fn answer_of(completion: &Value) -> Option<String> {
    let content = completion["choices"][0]["message"]["content"].as_str()?;
    Some(
        json!({
            "content": content,
            "model": completion["model"],
            "completion_id": completion["id"],
            "usage": completion["usage"],
        })
        .to_string(),
    )
}

impl Provider for OpenAiProvider {
    fn name(&self) -> &str {
        "openai"
    }

    async fn call(&self, request: ProviderRequest, progress: Progress) -> ProviderOutcome {
        let sent = self
            .authorized(self.http.post(self.url("/chat/completions")))
            .header("X-Client-Request-Id", &request.client_request_id)
            .json(&self.body(&request))
            .send()
            .await;
        let response = match sent {
            Ok(response) => response,
            Err(e) if e.is_connect() => {
                return ProviderOutcome::Retryable {
                    code: "connect_failed".into(),
                    request_id: None,
                }
            }
            Err(e) => {
                let code = if e.is_timeout() {
                    "timeout"
                } else {
                    "response_lost"
                };
                return ProviderOutcome::Uncertain {
                    code: code.into(),
                    request_id: None,
                };
            }
        };
        progress.tick();
        let status = response.status().as_u16();
        let request_id = response
            .headers()
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        match status {
            200..=299 => {
                let body = match response.json::<Value>().await {
                    Ok(body) => body,
                    Err(e) => {
                        let code = if e.is_timeout() {
                            "timeout"
                        } else {
                            "unreadable_response"
                        };
                        return ProviderOutcome::Uncertain {
                            code: code.into(),
                            request_id,
                        };
                    }
                };
                progress.tick();
                match answer_of(&body) {
                    Some(answer) => ProviderOutcome::Succeeded { answer, request_id },
                    None => ProviderOutcome::Uncertain {
                        code: "unreadable_response".into(),
                        request_id,
                    },
                }
            }
            // A stable code operators already alarm on.
            429 => ProviderOutcome::Retryable {
                code: "rate_limited".into(),
                request_id,
            },
            _ => {
                let code = format!("http_{status}");
                match classify_status(status) {
                    StatusClass::Retryable => ProviderOutcome::Retryable { code, request_id },
                    StatusClass::Fatal => ProviderOutcome::Fatal { code, request_id },
                    StatusClass::Uncertain => ProviderOutcome::Uncertain { code, request_id },
                }
            }
        }
    }

    async fn retrieve(&self, client_request_id: &str) -> Retrieval {
        if !self.config.retrieval || self.no_listing.load(Ordering::Relaxed) {
            return Retrieval::Unsupported;
        }
        let listed = self
            .authorized(self.http.get(self.url("/chat/completions")))
            .query(&[
                ("metadata[fenceline_request]", client_request_id),
                ("limit", "10"),
            ])
            .send()
            .await;
        let Ok(response) = listed else {
            return Retrieval::Inconclusive;
        };
        if matches!(response.status().as_u16(), 404 | 405 | 501) {
            if !self.no_listing.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    status = response.status().as_u16(),
                    "the provider has no stored-completions listing: uncertain attempts will \
                     wait in /unknown for a decision"
                );
            }
            return Retrieval::Unsupported;
        }
        if !response.status().is_success() {
            return Retrieval::Inconclusive;
        }
        let Ok(list) = response.json::<Value>().await else {
            return Retrieval::Inconclusive;
        };
        // Only a completion tagged with this attempt's id is its answer: a server that ignores
        // the filter must not hand over someone else's. Not listed proves nothing (storage
        // may lag, or the call failed before storing).
        list["data"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["metadata"]["fenceline_request"].as_str() == Some(client_request_id))
            .and_then(answer_of)
            .map_or(Retrieval::Inconclusive, Retrieval::Found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_api_key_never_prints() {
        let config = OpenAiConfig {
            base_url: "http://x/v1".into(),
            api_key: Some(ApiKey::new("sk-secret".into())),
            default_model: "m".into(),
            timeout: Duration::from_secs(1),
            retrieval: true,
        };
        assert!(!format!("{config:?}").contains("sk-secret"));
    }
}
