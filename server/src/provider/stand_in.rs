//! A stand-in for OpenAI's Responses API in background mode, written from its API reference,
//! for tests and the chaos soak where no real server implements background responses:
//! `POST /v1/responses` stores the response and answers its id at once (`status: queued`);
//! `GET /v1/responses/{id}` says `in_progress` until the latency has passed, then `completed`
//! with its output and usage; `POST /v1/responses/{id}/cancel` cancels one not yet ended; an
//! unknown id is `404`. It runs in a process of its own, so responses outlive the workers that
//! created them.
//!
//! Faults: a fraction of create answers is lost after the response was stored (`502`, as a
//! gateway that lost its upstream answers), and a fraction of polls. A model named
//! `stand-in-failed` ends `failed`, `stand-in-incomplete` ends `incomplete`. `GET
//! /stand-in/stats` counts what it was asked: creates per Fenceline request id, polls, cancels.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::stub::drawn;

#[derive(Debug, Clone, Default)]
pub struct StandInConfig {
    /// How long a response runs before it completes.
    pub latency: Duration,
    /// The fraction of polls lost on the way back.
    pub lose_rate: f64,
    /// The fraction of create answers lost on the way back, after the response was stored:
    /// the window in which an attempt runs with no id kept.
    pub lose_create_rate: f64,
}

struct Stored {
    model: String,
    created_at: i64,
    started: Instant,
    cancelled: bool,
    input_chars: usize,
    digest: String,
    fenceline_request: Option<String>,
}

#[derive(Default)]
struct Counts {
    creates: HashMap<String, u64>,
    polls: u64,
    cancels: u64,
}

struct StandIn {
    config: StandInConfig,
    responses: Mutex<HashMap<String, Stored>>,
    counts: Mutex<Counts>,
    next: AtomicU64,
}

/// The stand-in's routes.
pub fn router(config: StandInConfig) -> Router {
    let state = Arc::new(StandIn {
        config,
        responses: Mutex::new(HashMap::new()),
        counts: Mutex::new(Counts::default()),
        next: AtomicU64::new(1),
    });
    Router::new()
        .route("/v1/responses", post(create))
        .route("/v1/responses/{id}", get(read))
        .route("/v1/responses/{id}/cancel", post(cancel))
        .route("/stand-in/stats", get(stats))
        .with_state(state)
}

/// Serves the stand-in on `listener` until the process ends.
pub async fn serve(
    listener: tokio::net::TcpListener,
    config: StandInConfig,
) -> std::io::Result<()> {
    axum::serve(listener, router(config)).await
}

fn lost() -> Response {
    (StatusCode::BAD_GATEWAY, "upstream connection lost").into_response()
}

fn error(status: StatusCode, message: &str) -> Response {
    (
        status,
        Json(json!({"error": {"message": message, "type": "invalid_request_error"}})),
    )
        .into_response()
}

fn text_of(input: &Value) -> String {
    match input {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

async fn create(State(s): State<Arc<StandIn>>, body: Option<Json<Value>>) -> Response {
    let Some(Json(body)) = body else {
        return error(StatusCode::BAD_REQUEST, "the body must be a JSON object");
    };
    let Some(model) = body["model"].as_str() else {
        return error(StatusCode::BAD_REQUEST, "model is required");
    };
    if body["background"] == true && body["store"] == false {
        return error(
            StatusCode::BAD_REQUEST,
            "background responses must be stored",
        );
    }
    let input = text_of(&body["input"]);
    let fenceline_request = body["metadata"]["fenceline_request"]
        .as_str()
        .map(str::to_owned);
    let n = s.next.fetch_add(1, Ordering::Relaxed);
    let id = format!("resp_{n:012x}");
    let stored = Stored {
        model: model.to_owned(),
        created_at: chrono::Utc::now().timestamp(),
        started: Instant::now(),
        cancelled: false,
        input_chars: input.chars().count(),
        digest: hex::encode(&Sha256::digest(input.as_bytes())[..6]),
        fenceline_request: fenceline_request.clone(),
    };
    let view = s.view(&id, &stored);
    s.responses
        .lock()
        .expect("stand-in")
        .insert(id.clone(), stored);
    let key = fenceline_request.unwrap_or_else(|| id.clone());
    *s.counts
        .lock()
        .expect("stand-in")
        .creates
        .entry(key.clone())
        .or_default() += 1;
    // Stored and running, and the answer naming its id lost on the way back.
    if drawn(&key, "stand-in-create", s.config.lose_create_rate) {
        return lost();
    }
    Json(view).into_response()
}

async fn read(State(s): State<Arc<StandIn>>, Path(id): Path<String>) -> Response {
    let polls = {
        let mut counts = s.counts.lock().expect("stand-in");
        counts.polls += 1;
        counts.polls
    };
    if drawn(
        &format!("{id}:{polls}"),
        "stand-in-poll",
        s.config.lose_rate,
    ) {
        return lost();
    }
    let responses = s.responses.lock().expect("stand-in");
    match responses.get(&id) {
        Some(stored) => Json(s.view(&id, stored)).into_response(),
        None => error(StatusCode::NOT_FOUND, "No response found with that id"),
    }
}

async fn cancel(State(s): State<Arc<StandIn>>, Path(id): Path<String>) -> Response {
    s.counts.lock().expect("stand-in").cancels += 1;
    let mut responses = s.responses.lock().expect("stand-in");
    let Some(stored) = responses.get_mut(&id) else {
        return error(StatusCode::NOT_FOUND, "No response found with that id");
    };
    if s.status(stored) == "completed" {
        return error(
            StatusCode::BAD_REQUEST,
            "Cannot cancel a completed response",
        );
    }
    stored.cancelled = true;
    Json(s.view(&id, stored)).into_response()
}

async fn stats(State(s): State<Arc<StandIn>>) -> Json<Value> {
    let counts = s.counts.lock().expect("stand-in");
    Json(json!({
        "creates": counts.creates,
        "polls": counts.polls,
        "cancels": counts.cancels,
    }))
}

impl StandIn {
    fn status(&self, stored: &Stored) -> &'static str {
        if stored.cancelled {
            "cancelled"
        } else if stored.started.elapsed() < self.config.latency {
            "in_progress"
        } else {
            match stored.model.as_str() {
                "stand-in-failed" => "failed",
                "stand-in-incomplete" => "incomplete",
                _ => "completed",
            }
        }
    }

    /// The response object as the API reference shapes it.
    fn view(&self, id: &str, stored: &Stored) -> Value {
        let status = self.status(stored);
        let input_tokens = stored.input_chars.div_ceil(4).max(1) as u64;
        let text = format!("stand-in answer {}", stored.digest);
        let output_tokens = text.len().div_ceil(4) as u64;
        let ended = matches!(status, "completed" | "incomplete" | "failed");
        json!({
            "id": id,
            "object": "response",
            "created_at": stored.created_at,
            "status": status,
            "background": true,
            "model": stored.model,
            "metadata": stored
                .fenceline_request
                .as_ref()
                .map(|r| json!({"fenceline_request": r}))
                .unwrap_or_else(|| json!({})),
            "output": if status == "completed" || status == "incomplete" {
                json!([{"type": "message", "id": format!("msg_{}", &id[5..]),
                    "status": "completed", "role": "assistant",
                    "content": [{"type": "output_text", "text": text, "annotations": []}]}])
            } else {
                json!([])
            },
            "error": if status == "failed" {
                json!({"code": "server_error", "message": "The model failed to produce a response."})
            } else {
                Value::Null
            },
            "incomplete_details": if status == "incomplete" {
                json!({"reason": "max_output_tokens"})
            } else {
                Value::Null
            },
            "usage": if ended {
                json!({"input_tokens": input_tokens,
                       "input_tokens_details": {"cached_tokens": 0},
                       "output_tokens": output_tokens,
                       "output_tokens_details": {"reasoning_tokens": 0},
                       "total_tokens": input_tokens + output_tokens})
            } else {
                Value::Null
            },
        })
    }
}
