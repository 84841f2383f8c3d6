//! `fenceline bench throttle` and `fenceline bench fairness`: flow control measured through
//! the real processes (`fenceline serve`, `fenceline worker`, spawned from this binary), each
//! beside its reference in the same invocation.
//!
//! - throttle: a burst of jobs against a server speaking OpenAI's chat-completions API that
//!   admits R requests a second (a token bucket R deep) and answers the rest `429` with
//!   `retry-after`, `retry-after-ms` and `x-ratelimit-*`, as OpenAI's documentation describes
//!   them. Goodput (jobs succeeded a second, from the submit to the last success) beside R;
//!   refused requests beside admitted ones; dead letters, `unknown` jobs, the most receives of
//!   one message.
//! - fairness: tenant A's backlog, then tenant B's few jobs (the stub model): how long B's
//!   wait from the moment its submit was accepted, and A's jobs a second beside A alone.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use crate::ledger::{Drills, Ledger, LedgerError, LedgerOptions, RunSummary};
use crate::settings::cli::{FairnessArgs, ThrottleArgs};

fn failed(e: impl std::fmt::Display) -> LedgerError {
    LedgerError::Invalid(format!("bench: {e}"))
}

/// A model server that rate-limits its callers as OpenAI documents it.
pub struct LimitingServer {
    /// `http://127.0.0.1:<port>/v1`.
    pub base: String,
    admitted: Arc<AtomicU64>,
    refused: Arc<AtomicU64>,
    stop: tokio_util::sync::CancellationToken,
}

#[derive(Clone)]
struct Limiter {
    /// Tokens, and when they were counted.
    bucket: Arc<Mutex<(f64, Instant)>>,
    rate: f64,
    depth: f64,
    latency: Duration,
    /// Refuse every request (a provider that never admits).
    forever: bool,
    admitted: Arc<AtomicU64>,
    refused: Arc<AtomicU64>,
}

fn millis(d: Duration) -> String {
    format!("{}ms", d.as_millis().max(1))
}

impl Limiter {
    /// Takes a token if there is one: whether it did, and the headers that say so.
    fn admit(&self) -> (bool, HeaderMap) {
        let now = Instant::now();
        let mut bucket = self.bucket.lock().expect("limiter lock");
        let (tokens, at) = *bucket;
        let tokens = (tokens + self.rate * (now - at).as_secs_f64()).min(self.depth);
        let admitted = !self.forever && tokens >= 1.0;
        let left = if admitted { tokens - 1.0 } else { tokens };
        *bucket = (left, now);
        let secs = |n: f64| Duration::from_secs_f64((n / self.rate).max(0.0));
        let mut headers = HeaderMap::new();
        let mut put = |name: &'static str, value: String| {
            if let Ok(value) = HeaderValue::from_str(&value) {
                headers.insert(name, value);
            }
        };
        put(
            "x-ratelimit-limit-requests",
            format!("{}", self.depth as u64),
        );
        put(
            "x-ratelimit-remaining-requests",
            format!("{}", left.floor().max(0.0) as u64),
        );
        put(
            "x-ratelimit-reset-requests",
            millis(secs(self.depth - left)),
        );
        if !admitted {
            let wait = if self.forever {
                Duration::from_secs(1)
            } else {
                secs(1.0 - left)
            };
            put("retry-after-ms", format!("{}", wait.as_millis().max(1)));
            put(
                "retry-after",
                format!("{}", wait.as_secs_f64().ceil().max(1.0) as u64),
            );
        }
        (admitted, headers)
    }
}

async fn completion(
    axum::extract::State(limiter): axum::extract::State<Limiter>,
    axum::Json(body): axum::Json<Value>,
) -> Response {
    let (admitted, headers) = limiter.admit();
    if !admitted {
        limiter.refused.fetch_add(1, Ordering::Relaxed);
        let error = json!({"error": {"message": "Rate limit reached for requests", "type": "requests", "code": "rate_limit_exceeded"}});
        return (StatusCode::TOO_MANY_REQUESTS, headers, axum::Json(error)).into_response();
    }
    limiter.admitted.fetch_add(1, Ordering::Relaxed);
    tokio::time::sleep(limiter.latency).await;
    let n = limiter.admitted.load(Ordering::Relaxed);
    let answer = json!({
        "id": format!("chatcmpl-bench-{n}"),
        "object": "chat.completion",
        "model": body["model"],
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "a summary"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25},
    });
    (StatusCode::OK, headers, axum::Json(answer)).into_response()
}

impl LimitingServer {
    /// Serves on a free loopback port: `rate` requests a second, a bucket as deep, each answer
    /// after `latency`; `forever` refuses everything.
    pub async fn start(rate: f64, latency: Duration, forever: bool) -> std::io::Result<Self> {
        let depth = rate.max(1.0);
        let limiter = Limiter {
            bucket: Arc::new(Mutex::new((depth, Instant::now()))),
            rate,
            depth,
            latency,
            forever,
            admitted: Arc::default(),
            refused: Arc::default(),
        };
        let (admitted, refused) = (limiter.admitted.clone(), limiter.refused.clone());
        let app = axum::Router::new()
            .route("/v1/chat/completions", axum::routing::post(completion))
            .with_state(limiter);
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let base = format!("http://{}/v1", listener.local_addr()?);
        let stop = tokio_util::sync::CancellationToken::new();
        let until = stop.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move { until.cancelled().await })
                .await;
        });
        Ok(LimitingServer {
            base,
            admitted,
            refused,
            stop,
        })
    }

    /// Requests admitted and refused so far.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.admitted.load(Ordering::Relaxed),
            self.refused.load(Ordering::Relaxed),
        )
    }
}

impl Drop for LimitingServer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// A `fenceline` process this benchmark started, stopped (SIGTERM, then killed) when dropped.
struct Process {
    child: tokio::process::Child,
}

impl Process {
    fn spawn(args: &[&str], env: &[(String, String)], log: &Path) -> Result<Process, LedgerError> {
        let exe = std::env::current_exe().map_err(failed)?;
        let out = std::fs::File::create(log).map_err(failed)?;
        let err = out.try_clone().map_err(failed)?;
        let child = tokio::process::Command::new(exe)
            .args(args)
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .map_err(failed)?;
        Ok(Process { child })
    }

    async fn stop(mut self) {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
        if tokio::time::timeout(Duration::from_secs(15), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

fn free_port() -> Result<u16, LedgerError> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).map_err(failed)?;
    Ok(listener.local_addr().map_err(failed)?.port())
}

async fn wait_ready(base: &str, log: &Path) -> Result<(), LedgerError> {
    let client = reqwest::Client::new();
    for _ in 0..600 {
        if let Ok(r) = client.get(format!("{base}/readyz")).send().await {
            if r.status().is_success() {
                return Ok(());
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let tail = std::fs::read_to_string(log).unwrap_or_default();
    Err(failed(format!("serve did not become ready:\n{tail}")))
}

/// Submits `jobs` jobs of the token's tenant through `POST /api/v1/jobs/batch`, 500 a
/// request, keys `<label>-<i>`.
async fn submit(
    base: &str,
    token: &str,
    label: &str,
    jobs: usize,
    max_attempts: u32,
    deadline: Duration,
) -> Result<(), LedgerError> {
    let client = reqwest::Client::new();
    let mut first = 0;
    while first < jobs {
        let last = (first + 500).min(jobs);
        let batch: Vec<Value> = (first..last)
            .map(|i| {
                json!({
                    "idempotency_key": format!("{label}-{i}"),
                    "input": {"document": format!("document {i} of {label}")},
                    "max_attempts": max_attempts,
                    "deadline_seconds": deadline.as_secs(),
                })
            })
            .collect();
        let response = client
            .post(format!("{base}/api/v1/jobs/batch"))
            .bearer_auth(token)
            .json(&json!({ "jobs": batch }))
            .send()
            .await
            .map_err(failed)?;
        let status = response.status();
        let body: Value = response.json().await.map_err(failed)?;
        if !status.is_success() || body["failed"].as_i64() != Some(0) {
            return Err(failed(format!("submit refused ({status}): {body}")));
        }
        first = last;
    }
    Ok(())
}

/// Waits until none of `tenant`'s jobs is live any more, or `limit` passes.
async fn settled(
    ledger: &Ledger,
    tenant: &str,
    limit: Duration,
) -> Result<RunSummary, LedgerError> {
    let until = Instant::now() + limit;
    loop {
        let summary = ledger.run_summary(tenant).await?;
        if summary.live == 0 || Instant::now() > until {
            return Ok(summary);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A deployment under test: `serve` (with its worker unless `workers` > 0) and `workers`
/// `fenceline worker` processes, all on one database and queue.
struct Deployment {
    base: String,
    ledger: Ledger,
    processes: Vec<Process>,
    _dir: TempDir,
}

/// A temporary folder, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(label: &str) -> Result<TempDir, LedgerError> {
        let path = std::env::temp_dir().join(format!(
            "fenceline-bench-{label}-{}",
            uuid::Uuid::now_v7().simple()
        ));
        std::fs::create_dir_all(&path).map_err(failed)?;
        Ok(TempDir(path))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Deployment {
    async fn start(
        database_url: Option<&str>,
        workers: usize,
        env: Vec<(String, String)>,
    ) -> Result<Deployment, LedgerError> {
        let dir = TempDir::new("run")?;
        let url = match database_url {
            Some(url) => url.to_owned(),
            None => format!("sqlite://{}/ledger.sqlite?mode=rwc", dir.0.display()),
        };
        let ledger = Ledger::connect(
            &url,
            &LedgerOptions {
                direct_queue: None,
                ..LedgerOptions::default()
            },
        )
        .await?;
        ledger.migrate().await?;
        let port = free_port()?;
        let mut env = env;
        env.push(("DATABASE_URL".into(), url.clone()));
        env.push(("FENCELINE_LOG".into(), "warn".into()));
        let mut serve_args = vec![
            "serve".to_owned(),
            "--bind".into(),
            format!("127.0.0.1:{port}"),
        ];
        if workers > 0 {
            serve_args.push("--no-worker".into());
        }
        let args: Vec<&str> = serve_args.iter().map(String::as_str).collect();
        let log = dir.0.join("serve.log");
        let mut with_id = env.clone();
        with_id.push(("FENCELINE_WORKER_ID".into(), "bench-serve".into()));
        let mut processes = vec![Process::spawn(&args, &with_id, &log)?];
        let base = format!("http://127.0.0.1:{port}");
        wait_ready(&base, &log).await?;
        for i in 0..workers {
            let mut with_id = env.clone();
            with_id.push(("FENCELINE_WORKER_ID".into(), format!("bench-worker-{i}")));
            let log = dir.0.join(format!("worker-{i}.log"));
            processes.push(Process::spawn(&["worker"], &with_id, &log)?);
        }
        Ok(Deployment {
            base,
            ledger,
            processes,
            _dir: dir,
        })
    }

    async fn stop(self) {
        for process in self.processes {
            process.stop().await;
        }
        self.ledger.close().await;
    }
}

/// `fenceline bench throttle`.
pub async fn throttle(args: &ThrottleArgs) -> Result<String, LedgerError> {
    let server = LimitingServer::start(
        args.rate,
        Duration::from_millis(args.latency_ms),
        args.forever,
    )
    .await
    .map_err(failed)?;
    let run = uuid::Uuid::now_v7().simple().to_string();
    let queue_name = format!("throttle-{}", &run[..12]);
    let mut env: Vec<(String, String)> = vec![
        ("FENCELINE_PROVIDER".into(), "openai".into()),
        ("FENCELINE_PROVIDER_URL".into(), server.base.clone()),
        ("FENCELINE_PROVIDER_API_KEY".into(), "sk-bench".into()),
        ("FENCELINE_PROVIDER_MODEL".into(), "bench-model".into()),
        ("FENCELINE_QUEUE_NAME".into(), queue_name.clone()),
        ("FENCELINE_MAX_RECEIVE_COUNT".into(), "5".into()),
    ];
    let sqs = args.queue == "sqs";
    if sqs {
        env.push(("FENCELINE_QUEUE".into(), "sqs".into()));
        let client = crate::queue::sqs::SqsQueue::client_from_env().await;
        crate::queue::sqs::SqsQueue::create(client, &queue_name, 5, Duration::from_secs(10))
            .await
            .map_err(failed)?;
    }
    let deployment = Deployment::start(args.database_url.as_deref(), args.workers, env).await?;
    let tenant = format!("throttle-{}", &run[..12]);
    let token = deployment.ledger.add_token(&tenant, "bench").await?;
    let before = deployment.ledger.now_us().await?;
    let deadline = Duration::from_secs(args.deadline_secs);
    submit(&deployment.base, &token, &tenant, args.jobs, 3, deadline).await?;
    let ideal = Duration::from_secs_f64(args.jobs as f64 / args.rate);
    let limit = if args.forever {
        deadline + Duration::from_secs(30)
    } else {
        ideal * 10 + Duration::from_secs(60)
    };
    let summary = settled(&deployment.ledger, &tenant, limit).await?;
    let (admitted, refused) = server.counts();
    let dead_letters = dead_letters(&deployment.ledger, &queue_name, sqs).await?;
    let expired = deployment
        .ledger
        .count_by_state(Some(&tenant), Drills::Counted)
        .await?
        .into_iter()
        .find(|(state, _)| *state == crate::job::JobState::Expired)
        .map_or(0, |(_, n)| n);
    deployment.stop().await;
    let mut out = String::new();
    let backend = match args.database_url.as_deref() {
        Some(url) if url.starts_with("postgres") => "PostgreSQL",
        _ => "SQLite",
    };
    let layout = if args.workers == 0 {
        "serve with its worker".to_owned()
    } else {
        format!("serve --no-worker and {} worker processes", args.workers)
    };
    out.push_str(&format!(
        "throttle benchmark on {backend}, {} queue, {layout}: {} jobs (3 attempts each) against a \
         server admitting {} requests a second (bucket {} deep, {} ms an answer){}\n",
        if sqs { "SQS" } else { "embedded" },
        args.jobs,
        args.rate,
        args.rate.max(1.0),
        args.latency_ms,
        if args.forever {
            ", refusing every request"
        } else {
            ""
        },
    ));
    let span = summary
        .last_succeeded
        .map(|last| Duration::from_micros(u64::try_from(last - before).unwrap_or(0)));
    let goodput = span.map(|s| summary.succeeded as f64 / s.as_secs_f64().max(1e-6));
    out.push_str("| what | figure | reference |\n| --- | ---: | ---: |\n");
    out.push_str(&format!(
        "| jobs succeeded | {} of {} | {} |\n",
        summary.succeeded,
        summary.jobs,
        if args.forever {
            "none: each expires at its deadline"
        } else {
            "all"
        }
    ));
    if let (Some(span), Some(goodput)) = (span, goodput) {
        out.push_str(&format!(
            "| goodput, submit to last success | {goodput:.1} jobs/s in {:.1} s | {:.1} allowed ({:.0} %) |\n",
            span.as_secs_f64(),
            args.rate,
            100.0 * goodput / args.rate
        ));
    }
    out.push_str(&format!(
        "| requests refused | {refused} | {admitted} admitted{} |\n",
        if admitted > 0 {
            format!(" ({:.1} %)", 100.0 * refused as f64 / admitted as f64)
        } else {
            String::new()
        }
    ));
    out.push_str(&format!(
        "| attempts that never ran: refused, or held for the limit (no budget spent) | {} | most budget spent by a job: {} of 3 |\n",
        summary.refused_attempts, summary.most_budget_used
    ));
    out.push_str(&format!(
        "| dead letters, unknown, expired | {dead_letters}, {}, {expired} | 0, 0, {} |\n",
        summary.unknown,
        if args.forever { summary.jobs } else { 0 }
    ));
    out.push_str(&format!(
        "| most receives of one message | {} | 2 at most |\n",
        summary.most_receives
    ));
    let bar = if args.forever {
        summary.succeeded == 0
            && expired == summary.jobs
            && summary.most_budget_used == 0
            && dead_letters == 0
    } else {
        summary.succeeded == summary.jobs
            && goodput.is_some_and(|g| g >= 0.9 * args.rate)
            && (refused as f64) <= 0.2 * admitted as f64
            && dead_letters == 0
            && summary.unknown == 0
            && summary.most_receives <= 2
    };
    out.push_str(&format!(
        "bar: {}: {}\n",
        if args.forever {
            "every job waits until its deadline and expires, no attempt spent, no dead letter"
        } else {
            "every job succeeds at >= 90 % of the allowed rate, refused <= 20 % of admitted, no \
             dead letter, no unknown, no message received more than twice"
        },
        if bar { "met" } else { "not met" }
    ));
    Ok(out)
}

/// Messages in the queue's dead-letter queue.
async fn dead_letters(ledger: &Ledger, queue: &str, sqs: bool) -> Result<i64, LedgerError> {
    use crate::queue::Queue;
    let dlq = format!("{queue}-dlq");
    if sqs {
        let client = crate::queue::sqs::SqsQueue::client_from_env().await;
        let dlq = crate::queue::sqs::SqsQueue::open(client, &dlq, Duration::from_secs(10))
            .await
            .map_err(failed)?;
        let depth = dlq.depth().await.map_err(failed)?;
        Ok(depth.visible + depth.in_flight + depth.delayed)
    } else {
        let depth = ledger.queue_depth(&dlq).await?;
        Ok(depth.visible + depth.in_flight + depth.delayed)
    }
}

/// One fairness pass: tenant A's backlog, then, if `with_b`, tenant B's jobs.
struct FairPass {
    a_rate: f64,
    b_wait: Option<Duration>,
}

async fn fairness_pass(args: &FairnessArgs, with_b: bool) -> Result<FairPass, LedgerError> {
    let env = vec![
        (
            "FENCELINE_STUB_LATENCY_MS".into(),
            args.latency_ms.to_string(),
        ),
        ("FENCELINE_QUEUE_NAME".into(), "jobs".into()),
    ];
    let deployment = Deployment::start(None, 0, env).await?;
    let run = uuid::Uuid::now_v7().simple().to_string();
    let (a, b) = (format!("a-{}", &run[..10]), format!("b-{}", &run[..10]));
    let token_a = deployment.ledger.add_token(&a, "bench").await?;
    let token_b = deployment.ledger.add_token(&b, "bench").await?;
    let deadline = Duration::from_secs(3600);
    submit(&deployment.base, &token_a, &a, args.jobs, 3, deadline).await?;
    let b_wait = if with_b {
        submit(&deployment.base, &token_b, &b, args.quiet_jobs, 3, deadline).await?;
        // Accepted now: B's wait counts from here, by the database's clock.
        let accepted = deployment.ledger.now_us().await?;
        let done = settled(&deployment.ledger, &b, Duration::from_secs(600)).await?;
        done.last_succeeded
            .filter(|_| done.succeeded == done.jobs)
            .map(|last| Duration::from_micros(u64::try_from(last - accepted).unwrap_or(0)))
    } else {
        None
    };
    let summary = settled(&deployment.ledger, &a, Duration::from_secs(3600)).await?;
    deployment.stop().await;
    let span = match (summary.first_created, summary.last_succeeded) {
        (Some(first), Some(last)) if summary.succeeded == summary.jobs => {
            Duration::from_micros(u64::try_from(last - first).unwrap_or(1))
        }
        _ => return Err(failed(format!("tenant A did not all succeed: {summary:?}"))),
    };
    Ok(FairPass {
        a_rate: summary.jobs as f64 / span.as_secs_f64(),
        b_wait,
    })
}

/// `fenceline bench fairness`.
pub async fn fairness(args: &FairnessArgs) -> Result<String, LedgerError> {
    let mut alone = Vec::new();
    let mut beside = Vec::new();
    let mut waits = Vec::new();
    for _ in 0..args.rounds.max(1) {
        alone.push(fairness_pass(args, false).await?.a_rate);
        let pass = fairness_pass(args, true).await?;
        beside.push(pass.a_rate);
        waits.push(pass.b_wait);
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let (alone_rate, beside_rate) = (mean(&alone), mean(&beside));
    let worst_wait = waits.iter().copied().max().flatten();
    let all_done = waits.iter().all(Option::is_some);
    let mut out =
        format!(
        "fairness benchmark on SQLite, the embedded queue, serve with its worker (width 64), stub \
         model at {} ms: tenant A submits {} jobs, then tenant B {}; {} rounds, alternating\n",
        args.latency_ms, args.jobs, args.quiet_jobs, args.rounds.max(1)
    );
    out.push_str("| what | figure | reference |\n| --- | ---: | ---: |\n");
    out.push_str(&format!(
        "| B's last job done, after B's submit was accepted | {} | 2.0 s at most |\n",
        waits
            .iter()
            .map(|w| w.map_or("not all done".to_owned(), |w| format!(
                "{:.2} s",
                w.as_secs_f64()
            )))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    out.push_str(&format!(
        "| A's jobs a second beside B | {} (mean {beside_rate:.0}) | A alone: {} (mean {alone_rate:.0}) |\n",
        beside.iter().map(|r| format!("{r:.0}")).collect::<Vec<_>>().join(", "),
        alone.iter().map(|r| format!("{r:.0}")).collect::<Vec<_>>().join(", "),
    ));
    let gap = (beside_rate - alone_rate).abs() / alone_rate.max(1e-9);
    let met = all_done && worst_wait.is_some_and(|w| w <= Duration::from_secs(2)) && gap <= 0.10;
    out.push_str(&format!(
        "bar: B's jobs all done within 2 s ({}), A's rate within 10 % of alone ({:.1} %): {}\n",
        worst_wait.map_or("not all done".to_owned(), |w| format!(
            "worst {:.2} s",
            w.as_secs_f64()
        )),
        100.0 * gap,
        if met { "met" } else { "not met" }
    ));
    Ok(out)
}
