//! Anthropic's Messages API, natively (`--provider anthropic`): `POST {base}/messages` with
//! `x-api-key` and `anthropic-version`, the answer's `request-id` kept as evidence, its usage
//! read, its rate-limit headers (`anthropic-ratelimit-*`, `retry-after`) learned from.
//!
//! Classification (`docs/providers.md`, row by row): `429 rate_limit_error` and `529
//! overloaded_error` are throttled (the model did not run: no budget spent, waited out per
//! `retry-after`); `500 api_error` is uncertain; `400 invalid_request_error`,
//! `401 authentication_error`, `403 permission_error`, `404 not_found_error` and
//! `413 request_too_large` are fatal; any other status as the chat adapter's table says. A
//! timeout or a connection lost after sending is uncertain. Anthropic offers no retrieval of a
//! message: an uncertain attempt waits in `unknown` for a decision, and its timeline says why.

use serde_json::{json, Value};

use super::openai::{
    classify_status, header, http_client, rate_limits, unanswered, OpenAiConfig, StatusClass,
};
use super::prices::Usage;
use super::{Progress, Provider, ProviderOutcome, ProviderRequest, Retrieval};

/// Anthropic's API, up to its version segment.
pub const ANTHROPIC_URL: &str = "https://api.anthropic.com/v1";
/// The API version every request names.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";
/// The output limit when a job's parameters name none (the API requires one).
pub const DEFAULT_MAX_TOKENS: u64 = 1024;

#[derive(Clone)]
pub struct AnthropicProvider {
    config: OpenAiConfig,
    http: reqwest::Client,
}

impl AnthropicProvider {
    pub fn new(config: OpenAiConfig) -> Result<Self, reqwest::Error> {
        let http = http_client(config.timeout)?;
        Ok(AnthropicProvider { config, http })
    }

    fn body(&self, request: &ProviderRequest) -> Value {
        let params = &request.model;
        let model = params["model"]
            .as_str()
            .unwrap_or(&self.config.default_model);
        let max_tokens = ["max_tokens", "max_completion_tokens", "max_output_tokens"]
            .iter()
            .find_map(|k| params[k].as_u64())
            .unwrap_or(DEFAULT_MAX_TOKENS);
        let mut body = json!({ "model": model, "max_tokens": max_tokens });
        for key in ["temperature", "top_p"] {
            if let Some(v) = params.get(key) {
                body[key] = v.clone();
            }
        }
        match params.get("stop") {
            Some(Value::String(s)) => body["stop_sequences"] = json!([s]),
            Some(Value::Array(list)) => body["stop_sequences"] = json!(list),
            _ => {}
        }
        match request.input.get("messages").and_then(Value::as_array) {
            Some(messages) => {
                // A system message is the request's `system`, not one of its turns.
                let (system, turns): (Vec<&Value>, Vec<&Value>) =
                    messages.iter().partition(|m| m["role"] == "system");
                let system: Vec<&str> = system
                    .iter()
                    .filter_map(|m| m["content"].as_str())
                    .collect();
                if !system.is_empty() {
                    body["system"] = json!(system.join("\n\n"));
                }
                body["messages"] = json!(turns);
            }
            None => {
                let content = match &request.input {
                    Value::String(text) => text.clone(),
                    other => other.to_string(),
                };
                body["messages"] = json!([{ "role": "user", "content": content }]);
            }
        }
        body
    }
}

/// The part of a message kept as the job's answer.
fn answer_of(message: &Value) -> Option<String> {
    let text: String = message["content"]
        .as_array()?
        .iter()
        .filter(|block| block["type"] == "text")
        .filter_map(|block| block["text"].as_str())
        .collect();
    if text.is_empty() && message["stop_reason"].is_null() {
        return None;
    }
    Some(
        json!({
            "content": text,
            "model": message["model"],
            "message_id": message["id"],
            "stop_reason": message["stop_reason"],
            "usage": message["usage"],
        })
        .to_string(),
    )
}

/// How an answer other than 2xx classifies, by its status and the error type its body names.
pub fn classify(status: u16, error_type: Option<&str>) -> (StatusClass, String) {
    let code = error_type.map_or_else(|| format!("http_{status}"), str::to_owned);
    let class = match status {
        // rate_limit_error; overloaded_error: refused before the model ran.
        429 | 529 => StatusClass::Throttled,
        // api_error: an internal error while handling the request.
        500 => StatusClass::Uncertain,
        // invalid_request_error, authentication_error, permission_error, not_found_error,
        // request_too_large: the request itself will never run.
        400 | 401 | 403 | 404 | 413 => StatusClass::Fatal,
        other => classify_status(other),
    };
    (class, code)
}

impl Provider for AnthropicProvider {
    fn name(&self) -> &str {
        "anthropic"
    }

    fn default_model(&self) -> &str {
        &self.config.default_model
    }

    async fn call(&self, request: ProviderRequest, progress: Progress) -> ProviderOutcome {
        let url = format!("{}/messages", self.config.base_url.trim_end_matches('/'));
        let mut sent = self
            .http
            .post(url)
            .header("anthropic-version", ANTHROPIC_VERSION)
            .json(&self.body(&request));
        if let Some(key) = &self.config.api_key {
            if let Ok(mut value) = reqwest::header::HeaderValue::from_str(key.expose()) {
                value.set_sensitive(true);
                sent = sent.header("x-api-key", value);
            }
        }
        let response = match sent.send().await {
            Ok(response) => response,
            Err(e) => return unanswered(&e, ("timeout", "response_lost")),
        };
        progress.tick();
        let status = response.status().as_u16();
        let request_id = header(&response, "request-id");
        let limits = rate_limits(response.headers(), chrono::Utc::now());
        let body = response.json::<Value>().await;
        if (200..300).contains(&status) {
            progress.tick();
            return match body.ok().as_ref().and_then(|m| Some((answer_of(m)?, m))) {
                Some((answer, message)) => ProviderOutcome::Succeeded {
                    answer,
                    request_id,
                    limits,
                    usage: Usage::read(&message["usage"]),
                },
                None => ProviderOutcome::Uncertain {
                    code: "unreadable_response".into(),
                    request_id,
                },
            };
        }
        let error_type = body
            .ok()
            .and_then(|b| b["error"]["type"].as_str().map(str::to_owned));
        let (class, code) = classify(status, error_type.as_deref());
        class.outcome(code, request_id, limits)
    }

    /// Anthropic keeps no message a caller can look up: asking cannot help.
    async fn retrieve(&self, _client_request_id: &str) -> Retrieval {
        Retrieval::Unsupported
    }
}
