//! An OpenAI-compatible chat-completions provider (OpenAI, vLLM, Ollama, LiteLLM-style
//! servers). The API key comes from the environment and is never logged or shown.
//!
//! Classification ([`classify_status`], documented row by row in `docs/providers.md`): a
//! refusal is *throttled* when the server confirms it did not run the request and asks to be
//! called later (`429`, `503`, `529`, a connection refused before sending): no budget is spent.
//! A failure is *retryable* or *fatal* only when the server confirms it did not process the
//! request (`408`; a client error). Anything that may have run the model — a timeout or a lost
//! connection after sending, `500`, a gateway's `502`/`504`/`52x`, an unknown `5xx`, an
//! unreadable `200` — is *uncertain*: the job goes `unknown` and needs retrieval or a decision,
//! never a silent second attempt. Every answer's rate-limit headers ([`rate_limits`]) go back
//! with its outcome, for the worker to pace its calls by.
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

use super::prices::Usage;
use super::{Progress, Provider, ProviderOutcome, ProviderRequest, RateLimits, Retrieval, Window};

/// An API key: never printed.
#[derive(Clone)]
pub struct ApiKey(String);

impl ApiKey {
    pub fn new(key: String) -> Self {
        ApiKey(key)
    }

    /// The key itself, for the request header only.
    pub(crate) fn expose(&self) -> &str {
        &self.0
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
    /// The server says it did not run the request and asks to be called later: a rate limit
    /// or an overload. No attempt of the budget is spent.
    Throttled,
    /// The server says it did not process the request and another attempt may succeed.
    Retryable,
    /// The server says it did not process the request and no attempt will help.
    Fatal,
    /// The model may have run (and billed) with no answer seen.
    Uncertain,
}

impl StatusClass {
    /// The outcome of an answer of this class, with its code.
    pub fn outcome(
        self,
        code: String,
        request_id: Option<String>,
        limits: RateLimits,
    ) -> ProviderOutcome {
        match self {
            StatusClass::Throttled => ProviderOutcome::Throttled {
                code,
                request_id,
                limits,
            },
            StatusClass::Retryable => ProviderOutcome::Retryable { code, request_id },
            StatusClass::Fatal => ProviderOutcome::Fatal { code, request_id },
            StatusClass::Uncertain => ProviderOutcome::Uncertain { code, request_id },
        }
    }
}

/// The HTTP client of a provider adapter: `timeout` for each request, ten seconds to
/// connect, and no retry of its own (reqwest re-sends nothing): one send per attempt.
pub(crate) fn http_client(timeout: Duration) -> Result<reqwest::Client, reqwest::Error> {
    reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(Duration::from_secs(10))
        .build()
}

/// What a request that got no answer came to: refused before anything was sent (the model
/// cannot have run) is throttled; a timeout or a connection lost after sending is uncertain,
/// as `timeout` or `lost`.
pub(crate) fn unanswered(e: &reqwest::Error, (timeout, lost): (&str, &str)) -> ProviderOutcome {
    if e.is_connect() {
        return ProviderOutcome::Throttled {
            code: "connect_failed".into(),
            request_id: None,
            limits: RateLimits::default(),
        };
    }
    ProviderOutcome::Uncertain {
        code: if e.is_timeout() { timeout } else { lost }.into(),
        request_id: None,
    }
}

/// A response header as text.
pub(crate) fn header(response: &reqwest::Response, name: &str) -> Option<String> {
    response
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// The classification table (`docs/providers.md` gives the reason for each row).
pub fn classify_status(status: u16) -> StatusClass {
    match status {
        // Rate limited; overloaded/unavailable before routing to a model (OpenAI's 503 "slow
        // down"); Anthropic's 529 overloaded. The model did not run: no budget spent.
        429 | 503 | 529 => StatusClass::Throttled,
        // Request timeout: the server never got the whole request.
        408 => StatusClass::Retryable,
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
        let http = http_client(config.timeout)?;
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

    fn default_model(&self) -> &str {
        &self.config.default_model
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
            Err(e) => return unanswered(&e, ("timeout", "response_lost")),
        };
        progress.tick();
        let status = response.status().as_u16();
        let request_id = header(&response, "x-request-id");
        let limits = rate_limits(response.headers(), chrono::Utc::now());
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
                    Some(answer) => ProviderOutcome::Succeeded {
                        answer,
                        request_id,
                        limits,
                        usage: Usage::read(&body["usage"]),
                    },
                    None => ProviderOutcome::Uncertain {
                        code: "unreadable_response".into(),
                        request_id,
                    },
                }
            }
            _ => {
                // A stable code operators already alarm on.
                let code = match status {
                    429 => "rate_limited".to_owned(),
                    _ => format!("http_{status}"),
                };
                classify_status(status).outcome(code, request_id, limits)
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

/// What a response's headers say of the provider's rate limits, read at `now` (for resets
/// stated as instants): OpenAI's `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`
/// (resets as durations, `6m0s`, `20ms`), Anthropic's `anthropic-ratelimit-…` (resets as
/// RFC 3339 instants), and `retry-after-ms` before `retry-after` (seconds or an HTTP date), as
/// OpenAI's own client reads them.
pub fn rate_limits(
    headers: &reqwest::header::HeaderMap,
    now: chrono::DateTime<chrono::Utc>,
) -> RateLimits {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    let number = |name: &str| {
        text(name)
            .and_then(|v| v.parse::<f64>().ok())
            .filter(|n| *n >= 0.0)
    };
    let reset = |name: &str| {
        let value = text(name)?;
        go_duration(value).or_else(|| {
            let at = chrono::DateTime::parse_from_rfc3339(value).ok()?;
            Some(
                (at.with_timezone(&chrono::Utc) - now)
                    .to_std()
                    .unwrap_or_default(),
            )
        })
    };
    let window = |what: &str| {
        let openai = Window {
            limit: number(&format!("x-ratelimit-limit-{what}")),
            remaining: number(&format!("x-ratelimit-remaining-{what}")),
            reset: reset(&format!("x-ratelimit-reset-{what}")),
        };
        if openai != Window::default() {
            return openai;
        }
        Window {
            limit: number(&format!("anthropic-ratelimit-{what}-limit")),
            remaining: number(&format!("anthropic-ratelimit-{what}-remaining")),
            reset: reset(&format!("anthropic-ratelimit-{what}-reset")),
        }
    };
    let retry_after = number("retry-after-ms")
        .map(|ms| Duration::from_secs_f64(ms / 1000.0))
        .or_else(|| {
            let value = text("retry-after")?;
            match value.parse::<f64>() {
                Ok(secs) if secs >= 0.0 => Some(Duration::from_secs_f64(secs)),
                _ => {
                    let at = chrono::DateTime::parse_from_rfc2822(value).ok()?;
                    Some(
                        (at.with_timezone(&chrono::Utc) - now)
                            .to_std()
                            .unwrap_or_default(),
                    )
                }
            }
        });
    RateLimits {
        retry_after,
        requests: window("requests"),
        tokens: window("tokens"),
    }
}

/// A duration as OpenAI writes its resets: `1s`, `6m0s`, `20ms`, `1h2m3.5s`, or bare seconds.
fn go_duration(text: &str) -> Option<Duration> {
    if let Ok(secs) = text.parse::<f64>() {
        return (secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    let mut total = 0.0;
    let mut rest = text;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .filter(|&i| i > 0)?;
        let value: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 0.001,
            "us" | "µs" => 0.000_001,
            "ns" => 0.000_000_001,
            _ => return None,
        };
        total += value * scale;
        rest = &rest[unit_len..];
    }
    Some(Duration::from_secs_f64(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resets_read_as_openai_writes_them() {
        let ms = |t: &str| go_duration(t).map(|d| d.as_millis());
        assert_eq!(ms("1s"), Some(1000));
        assert_eq!(ms("6m0s"), Some(360_000));
        assert_eq!(ms("20ms"), Some(20));
        assert_eq!(ms("1h2m3.5s"), Some(3_723_500));
        assert_eq!(ms("0.25"), Some(250));
        assert_eq!(ms("soon"), None);
        assert_eq!(ms(""), None);
        assert_eq!(ms("5x"), None);
    }

    #[test]
    fn every_way_a_provider_states_its_limits_is_read() {
        use reqwest::header::{HeaderMap, HeaderValue};
        let now = chrono::DateTime::parse_from_rfc3339("2026-12-06T10:00:00Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        let headers = |pairs: &[(&'static str, &'static str)]| {
            let mut map = HeaderMap::new();
            for (k, v) in pairs {
                map.insert(*k, HeaderValue::from_static(v));
            }
            map
        };
        let openai = rate_limits(
            &headers(&[
                ("x-ratelimit-limit-requests", "20"),
                ("x-ratelimit-remaining-requests", "0"),
                ("x-ratelimit-reset-requests", "950ms"),
                ("x-ratelimit-limit-tokens", "40000"),
                ("x-ratelimit-remaining-tokens", "39000"),
                ("x-ratelimit-reset-tokens", "1.5s"),
            ]),
            now,
        );
        assert_eq!(openai.requests.limit, Some(20.0));
        assert!(openai.requests.exhausted());
        assert_eq!(openai.spent(), Some("requests"));
        assert_eq!(openai.wait(), Some(Duration::from_millis(950)));
        let named = rate_limits(
            &headers(&[("retry-after-ms", "50"), ("retry-after", "1")]),
            now,
        );
        assert_eq!(named.wait(), Some(Duration::from_millis(50)), "ms first");
        let seconds = rate_limits(&headers(&[("retry-after", "3")]), now);
        assert_eq!(seconds.wait(), Some(Duration::from_secs(3)));
        let date = rate_limits(
            &headers(&[("retry-after", "Sun, 06 Dec 2026 10:00:07 GMT")]),
            now,
        );
        assert_eq!(date.wait(), Some(Duration::from_secs(7)));
        let anthropic = rate_limits(
            &headers(&[
                ("anthropic-ratelimit-requests-limit", "50"),
                ("anthropic-ratelimit-requests-remaining", "0"),
                ("anthropic-ratelimit-requests-reset", "2026-12-06T10:00:02Z"),
            ]),
            now,
        );
        assert_eq!(anthropic.wait(), Some(Duration::from_secs(2)));
        assert!(rate_limits(&headers(&[("retry-after", "never")]), now).is_empty());
    }

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
