//! An OpenAI-compatible chat-completions provider (OpenAI, vLLM, Ollama, LiteLLM-style
//! servers). The API key comes from the environment and is never logged or shown.
//!
//! Classification: a request that never reached the server is retryable; `429` and `500`/`503`
//! are retryable (the server says it did not finish); other `4xx` are fatal; a timeout or a
//! lost connection after sending, `502`/`504` from a gateway, or an unreadable `200` are
//! *uncertain* — the model may have run. Each request carries Fenceline's client request id
//! (`X-Client-Request-Id` and, when retrieval is on, `metadata.fenceline_request` with
//! `store: true`), so that an uncertain attempt can later be looked up through the provider's
//! stored-completions listing.

use std::fmt;
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
}

impl OpenAiProvider {
    pub fn new(config: OpenAiConfig) -> Result<Self, reqwest::Error> {
        let http = reqwest::Client::builder()
            .timeout(config.timeout)
            .connect_timeout(Duration::from_secs(10))
            .build()?;
        Ok(OpenAiProvider { config, http })
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
            429 => ProviderOutcome::Retryable {
                code: "rate_limited".into(),
                request_id,
            },
            500 | 503 => ProviderOutcome::Retryable {
                code: format!("http_{status}"),
                request_id,
            },
            502 | 504 => ProviderOutcome::Uncertain {
                code: format!("http_{status}"),
                request_id,
            },
            _ => ProviderOutcome::Fatal {
                code: format!("http_{status}"),
                request_id,
            },
        }
    }

    async fn retrieve(&self, client_request_id: &str) -> Retrieval {
        if !self.config.retrieval {
            return Retrieval::Inconclusive;
        }
        let listed = self
            .authorized(self.http.get(self.url("/chat/completions")))
            .query(&[
                ("metadata[fenceline_request]", client_request_id),
                ("limit", "1"),
            ])
            .send()
            .await;
        let Ok(response) = listed else {
            return Retrieval::Inconclusive;
        };
        if !response.status().is_success() {
            return Retrieval::Inconclusive;
        }
        match response.json::<Value>().await {
            // Not listed proves nothing (storage may lag, or the call failed before storing).
            Ok(list) => list["data"]
                .get(0)
                .and_then(answer_of)
                .map_or(Retrieval::Inconclusive, Retrieval::Found),
            Err(_) => Retrieval::Inconclusive,
        }
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
