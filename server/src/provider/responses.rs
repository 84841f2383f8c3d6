//! OpenAI's Responses API in background mode (`--provider openai-responses`): the request is
//! created with `background: true` and `store: true`, the response id that comes back at once
//! is kept on the attempt before any waiting, and the answer is polled for by that id
//! (`GET /responses/{id}`). A later owner adopts the attempt and polls the same response; an
//! owner that must stop cancels it (`POST /responses/{id}/cancel`).
//!
//! Classification (`docs/providers.md`): the create request classifies as the chat adapter's
//! calls do ([`classify_status`]), except that its uncertain outcomes are the one window left
//! (sent, no id read). A poll that does not get through (a lost connection, a timeout, `429`,
//! `5xx`) is asked again: the id is kept, nothing is uncertain. A response that ends
//! `completed` is the answer; `failed`, `cancelled`, or gone (`404`: expired, or never
//! stored) is retryable, the provider saying it will not answer; `incomplete` (the output limit
//! or a content filter cut it) is fatal, since the same request ends the same way.

use std::time::Duration;

use serde_json::{json, Value};

use super::openai::{
    classify_status, header, http_client, rate_limits, unanswered, OpenAiConfig, StatusClass,
};
use super::prices::Usage;
use super::{
    Progress, Provider, ProviderOutcome, ProviderRequest, RateLimits, Retrieval, Submission,
};

/// The first wait between two polls of one response, doubled up to [`POLL_MAX`].
const POLL_FIRST: Duration = Duration::from_millis(250);
const POLL_MAX: Duration = Duration::from_secs(2);
/// One poll or cancel request: short, unlike the call it follows.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Clone)]
pub struct ResponsesProvider {
    config: OpenAiConfig,
    http: reqwest::Client,
}

impl ResponsesProvider {
    pub fn new(config: OpenAiConfig) -> Result<Self, reqwest::Error> {
        let http = http_client(config.timeout.min(REQUEST_TIMEOUT))?;
        Ok(ResponsesProvider { config, http })
    }

    fn url(&self, path: &str) -> String {
        format!("{}{}", self.config.base_url.trim_end_matches('/'), path)
    }

    fn authorized(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match self.config.api_key.as_ref() {
            Some(key) => request.bearer_auth(key.expose()),
            None => request,
        }
    }

    fn body(&self, request: &ProviderRequest) -> Value {
        let mut body = responses_params(&request.model);
        if body.get("model").is_none() {
            body["model"] = json!(self.config.default_model);
        }
        body["input"] = match request.input.get("messages") {
            Some(messages) => messages.clone(),
            None => match &request.input {
                Value::String(text) => json!(text),
                other => json!(other.to_string()),
            },
        };
        body["background"] = json!(true);
        body["store"] = json!(true);
        body["metadata"] = json!({ "fenceline_request": request.client_request_id });
        body
    }
}

/// A job's model parameters (written as for chat completions) as the Responses API names
/// them: `max_tokens`/`max_completion_tokens` → `max_output_tokens`, `reasoning_effort` →
/// `reasoning.effort`, `response_format` → `text.format`. What it does not offer (`stop`,
/// `seed`, penalties; `n` and `stream`, which a job fixes at 1 and false) is left out.
fn responses_params(params: &Value) -> Value {
    let mut body = json!({});
    let Value::Object(params) = params else {
        return body;
    };
    for (key, value) in params {
        match key.as_str() {
            "model" | "temperature" | "top_p" | "metadata" => body[key] = value.clone(),
            "max_tokens" | "max_completion_tokens" | "max_output_tokens" => {
                body["max_output_tokens"] = value.clone()
            }
            "reasoning_effort" => body["reasoning"] = json!({ "effort": value }),
            "response_format" => {
                // `{type: json_schema, json_schema: {name, schema, strict}}` is
                // `{type: json_schema, name, schema, strict}` here.
                let mut format = value.clone();
                if let Some(Value::Object(inner)) = value.get("json_schema") {
                    format = json!({ "type": "json_schema" });
                    for (k, v) in inner {
                        format[k] = v.clone();
                    }
                }
                body["text"] = json!({ "format": format });
            }
            _ => {}
        }
    }
    body
}

/// The text of a completed response, kept as the job's answer with the response's id, model
/// and usage.
fn answer_of(response: &Value) -> Option<String> {
    let text = match response["output_text"].as_str() {
        Some(text) => text.to_owned(),
        None => {
            let parts: Vec<&str> = response["output"]
                .as_array()?
                .iter()
                .filter(|item| item["type"] == "message")
                .flat_map(|item| item["content"].as_array().into_iter().flatten())
                .filter(|part| part["type"] == "output_text")
                .filter_map(|part| part["text"].as_str())
                .collect();
            if parts.is_empty() {
                return None;
            }
            parts.concat()
        }
    };
    Some(
        json!({
            "content": text,
            "model": response["model"],
            "response_id": response["id"],
            "usage": response["usage"],
        })
        .to_string(),
    )
}

/// What a response's `status` says of the attempt: `None` while it still runs.
fn ended(response: &Value, request_id: Option<String>) -> Option<ProviderOutcome> {
    let code = |prefix: &str, detail: &Value| match detail.as_str() {
        Some(d) if !d.is_empty() => format!("{prefix}_{d}"),
        _ => prefix.to_owned(),
    };
    match response["status"].as_str() {
        Some("queued" | "in_progress") => None,
        Some("completed") => Some(match answer_of(response) {
            Some(answer) => ProviderOutcome::Succeeded {
                answer,
                request_id,
                limits: RateLimits::default(),
                usage: Usage::read(&response["usage"]),
            },
            None => ProviderOutcome::Uncertain {
                code: "unreadable_response".into(),
                request_id,
            },
        }),
        Some("failed") => Some(ProviderOutcome::Retryable {
            code: code("response_failed", &response["error"]["code"]),
            request_id,
        }),
        Some("cancelled") => Some(ProviderOutcome::Retryable {
            code: "response_cancelled".into(),
            request_id,
        }),
        Some("incomplete") => Some(ProviderOutcome::Fatal {
            code: code(
                "response_incomplete",
                &response["incomplete_details"]["reason"],
            ),
            request_id,
        }),
        // A status this adapter does not know: it is not an answer; keep asking.
        _ => None,
    }
}

impl Provider for ResponsesProvider {
    fn name(&self) -> &str {
        "openai-responses"
    }

    fn default_model(&self) -> &str {
        &self.config.default_model
    }

    async fn call(&self, request: ProviderRequest, progress: Progress) -> ProviderOutcome {
        match self.submit(request, progress.clone()).await {
            Submission::Accepted { provider_id, .. } => self.poll(&provider_id, progress).await,
            Submission::Ended(outcome) => outcome,
        }
    }

    /// A background response has no lookup by Fenceline's id: an attempt sent without its
    /// response id read cannot be found again.
    async fn retrieve(&self, _client_request_id: &str) -> Retrieval {
        Retrieval::Unsupported
    }

    fn retains(&self) -> bool {
        true
    }

    async fn submit(&self, request: ProviderRequest, progress: Progress) -> Submission {
        let sent = self
            .authorized(self.http.post(self.url("/responses")))
            .header("X-Client-Request-Id", &request.client_request_id)
            .json(&self.body(&request))
            .send()
            .await;
        let response = match sent {
            Ok(response) => response,
            // Sent, and no id read: the one window in which the model may run unrecorded.
            Err(e) => {
                let window = ("submit_timeout", "submit_response_lost");
                return Submission::Ended(unanswered(&e, window));
            }
        };
        progress.tick();
        let status = response.status().as_u16();
        let request_id = header(&response, "x-request-id");
        let limits = rate_limits(response.headers(), chrono::Utc::now());
        if !(200..300).contains(&status) {
            let code = match status {
                429 => "rate_limited".to_owned(),
                _ => format!("http_{status}"),
            };
            let class = classify_status(status);
            let code = match class {
                StatusClass::Uncertain => format!("submit_{code}"),
                _ => code,
            };
            return Submission::Ended(class.outcome(code, request_id, limits));
        }
        let body = response.json::<Value>().await.ok();
        let Some(body) = body else {
            return Submission::Ended(ProviderOutcome::Uncertain {
                code: "submit_unreadable".into(),
                request_id,
            });
        };
        // A response that has ended already (a fast model, a gateway that runs nothing in the
        // background) is its own outcome: nothing is left to poll.
        if let Some(outcome) = ended(&body, request_id.clone()) {
            return Submission::Ended(match outcome {
                ProviderOutcome::Succeeded {
                    answer,
                    request_id,
                    usage,
                    ..
                } => ProviderOutcome::Succeeded {
                    answer,
                    request_id,
                    limits,
                    usage,
                },
                other => other,
            });
        }
        match body["id"].as_str() {
            Some(id) if !id.is_empty() => Submission::Accepted {
                provider_id: id.to_owned(),
                request_id,
                limits,
            },
            _ => Submission::Ended(ProviderOutcome::Uncertain {
                code: "submit_unreadable".into(),
                request_id,
            }),
        }
    }

    async fn poll(&self, provider_id: &str, progress: Progress) -> ProviderOutcome {
        let url = self.url(&format!("/responses/{provider_id}"));
        let mut wait = POLL_FIRST;
        loop {
            let asked = self.authorized(self.http.get(&url)).send().await;
            if let Ok(response) = asked {
                let status = response.status().as_u16();
                let request_id = header(&response, "x-request-id");
                match status {
                    200..=299 => {
                        if let Ok(body) = response.json::<Value>().await {
                            // The provider answered about the response: the call is alive.
                            progress.tick();
                            if let Some(outcome) = ended(&body, request_id) {
                                return outcome;
                            }
                        }
                    }
                    // Gone: expired, or never stored. It will not answer now.
                    404 => {
                        return ProviderOutcome::Retryable {
                            code: "response_expired".into(),
                            request_id,
                        }
                    }
                    // The key lost its access while the response ran, or the poll itself is
                    // refused: its fate cannot be read.
                    400..=499 if status != 408 && status != 429 => {
                        return ProviderOutcome::Uncertain {
                            code: format!("poll_http_{status}"),
                            request_id,
                        };
                    }
                    // Rate limited, overloaded, a gateway's error: ask again.
                    _ => {}
                }
            }
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(POLL_MAX);
        }
    }

    async fn cancel(&self, provider_id: &str) -> Result<(), String> {
        let url = self.url(&format!("/responses/{provider_id}/cancel"));
        let response = self
            .authorized(self.http.post(&url))
            .send()
            .await
            .map_err(|e| {
                if e.is_timeout() {
                    "timeout"
                } else {
                    "unreachable"
                }
                .to_owned()
            })?;
        let status = response.status().as_u16();
        if (200..300).contains(&status) {
            return Ok(());
        }
        // Already ended (or gone): it runs no more either way.
        if status == 404 {
            return Ok(());
        }
        let finished = self
            .authorized(
                self.http
                    .get(self.url(&format!("/responses/{provider_id}"))),
            )
            .send()
            .await
            .ok();
        if let Some(r) = finished.filter(|r| r.status().is_success()) {
            if let Ok(body) = r.json::<Value>().await {
                if ended(&body, None).is_some() {
                    return Ok(());
                }
            }
        }
        Err(format!("http_{status}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_parameters_are_named_as_the_responses_api_names_them() {
        let params = json!({"model": "gpt-4.1", "temperature": 0.2, "max_tokens": 300,
            "reasoning_effort": "low", "seed": 7, "stop": ["END"], "n": 1, "stream": false,
            "response_format": {"type": "json_schema",
                "json_schema": {"name": "r", "schema": {"type": "object"}, "strict": true}}});
        assert_eq!(
            responses_params(&params),
            json!({"model": "gpt-4.1", "temperature": 0.2, "max_output_tokens": 300,
                "reasoning": {"effort": "low"},
                "text": {"format": {"type": "json_schema", "name": "r",
                    "schema": {"type": "object"}, "strict": true}}})
        );
        assert_eq!(
            responses_params(&json!({"response_format": {"type": "json_object"}})),
            json!({"text": {"format": {"type": "json_object"}}})
        );
    }

    #[test]
    fn a_response_reads_as_its_status_says() {
        let done = json!({"id": "resp_1", "status": "completed", "model": "m",
            "output": [{"type": "message", "content": [
                {"type": "output_text", "text": "Hel"}, {"type": "output_text", "text": "lo"}]}],
            "usage": {"input_tokens": 3, "output_tokens": 2}});
        let Some(ProviderOutcome::Succeeded { answer, .. }) = ended(&done, None) else {
            panic!("completed is an answer");
        };
        let answer: Value = serde_json::from_str(&answer).unwrap();
        assert_eq!(answer["content"], "Hello");
        assert_eq!(answer["response_id"], "resp_1");
        assert_eq!(answer["usage"]["output_tokens"], 2);
        assert_eq!(ended(&json!({"status": "queued"}), None), None);
        assert_eq!(ended(&json!({"status": "in_progress"}), None), None);
        assert!(matches!(
            ended(&json!({"status": "failed", "error": {"code": "server_error"}}), None),
            Some(ProviderOutcome::Retryable { code, .. }) if code == "response_failed_server_error"
        ));
        assert!(matches!(
            ended(&json!({"status": "cancelled"}), None),
            Some(ProviderOutcome::Retryable { code, .. }) if code == "response_cancelled"
        ));
        assert!(matches!(
            ended(&json!({"status": "incomplete",
                "incomplete_details": {"reason": "max_output_tokens"}}), None),
            Some(ProviderOutcome::Fatal { code, .. })
                if code == "response_incomplete_max_output_tokens"
        ));
        assert!(matches!(
            ended(&json!({"status": "completed", "output": []}), None),
            Some(ProviderOutcome::Uncertain { .. })
        ));
    }
}
