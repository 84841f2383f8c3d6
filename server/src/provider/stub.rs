//! A stub model for drills, tests and benchmarks: configurable latency and failure rates, a
//! lost-response mode that executes the request but reports it uncertain, a rate limit that
//! refuses what its token bucket cannot admit (stating its limits as OpenAI's headers do), and
//! a retrieval API keyed by the client request id. Outcomes are drawn deterministically from
//! the request id, so a run can be repeated.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use sha2::{Digest, Sha256};

use super::{Progress, Provider, ProviderOutcome, ProviderRequest, RateLimits, Retrieval, Window};

/// How the stub behaves. Rates are fractions in `0.0..=1.0`, drawn in this order: fatal,
/// retryable, lost response.
#[derive(Debug, Clone, Default)]
pub struct StubConfig {
    pub latency: Duration,
    pub retryable_rate: f64,
    pub fatal_rate: f64,
    pub lost_response_rate: f64,
    /// Whether the stub offers retrieval of earlier requests (like a provider's stored
    /// completions). Off, a lost response really leaves the outcome uncertain.
    pub retrieval: bool,
    /// Requests a second the stub admits (a token bucket as deep as a second's worth); the
    /// rest are refused as throttled, with the wait until the next token. `None`: no limit.
    pub rate_limit: Option<f64>,
}

/// The stub's token bucket: tokens left, and when they were counted.
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: std::time::Instant,
}

#[derive(Clone, Default)]
pub struct StubProvider {
    config: StubConfig,
    /// By client request id: the answer of an executed request, `None` for a refused one.
    executed: Arc<Mutex<Remembered<Option<String>>>>,
    /// Model calls by job id.
    calls: Arc<Mutex<Remembered<u32>>>,
    /// The rate limit's bucket, when it has one.
    bucket: Arc<Mutex<Option<Bucket>>>,
}

/// How many requests and jobs the stub remembers: a long-running demo must not grow without
/// bound. What is forgotten first is what was first remembered.
const REMEMBERED: usize = 100_000;

/// A map that forgets its oldest keys beyond a capacity.
#[derive(Debug)]
struct Remembered<V> {
    map: HashMap<String, V>,
    order: VecDeque<String>,
    capacity: usize,
}

impl<V> Default for Remembered<V> {
    fn default() -> Self {
        Remembered::with_capacity(REMEMBERED)
    }
}

impl<V> Remembered<V> {
    fn with_capacity(capacity: usize) -> Self {
        Remembered {
            map: HashMap::new(),
            order: VecDeque::new(),
            capacity,
        }
    }

    fn get(&self, key: &str) -> Option<&V> {
        self.map.get(key)
    }

    /// The value of `key`, inserted with `init` (forgetting the oldest key when full).
    fn entry(&mut self, key: &str, init: impl FnOnce() -> V) -> &mut V {
        if !self.map.contains_key(key) {
            while self.order.len() >= self.capacity {
                match self.order.pop_front() {
                    Some(oldest) => {
                        self.map.remove(&oldest);
                    }
                    None => break,
                }
            }
            self.order.push_back(key.to_owned());
            self.map.insert(key.to_owned(), init());
        }
        self.map.get_mut(key).expect("just inserted")
    }
}

/// Whether the request's draw for `salt` falls under `rate`; a rate of 0 never does, and is
/// not drawn.
pub(crate) fn drawn(id: &str, salt: &str, rate: f64) -> bool {
    rate > 0.0 && draw(id, salt) < rate
}

/// A number in `[0, 1)` from the request id and a salt: the same request, the same draw.
fn draw(id: &str, salt: &str) -> f64 {
    let digest = Sha256::digest(format!("{salt}:{id}").as_bytes());
    let n = u64::from_be_bytes(digest[..8].try_into().expect("8 bytes"));
    (n >> 11) as f64 / (1u64 << 53) as f64
}

impl StubProvider {
    pub fn new(config: StubConfig) -> Self {
        StubProvider {
            config,
            ..Default::default()
        }
    }

    /// How many times each job reached the model (across attempts), for drills and tests.
    pub fn calls_for(&self, job_id: &str) -> u32 {
        self.calls
            .lock()
            .expect("stub lock")
            .get(job_id)
            .copied()
            .unwrap_or(0)
    }

    /// Takes a token of the rate limit, if there is one: the limits to state, and whether the
    /// request is admitted.
    fn admit(&self) -> (RateLimits, bool) {
        let Some(rate) = self.config.rate_limit.filter(|r| *r > 0.0) else {
            return (RateLimits::default(), true);
        };
        let depth = rate.max(1.0);
        let now = std::time::Instant::now();
        let mut bucket = self.bucket.lock().expect("stub lock");
        let bucket = bucket.get_or_insert(Bucket {
            tokens: depth,
            at: now,
        });
        bucket.tokens = (bucket.tokens + rate * (now - bucket.at).as_secs_f64()).min(depth);
        bucket.at = now;
        let admitted = bucket.tokens >= 1.0;
        if admitted {
            bucket.tokens -= 1.0;
        }
        let seconds = |n: f64| Duration::from_secs_f64((n / rate).max(0.0));
        let limits = RateLimits {
            retry_after: (!admitted).then(|| seconds(1.0 - bucket.tokens)),
            requests: Window {
                limit: Some(depth),
                remaining: Some(bucket.tokens.floor()),
                reset: Some(seconds(depth - bucket.tokens)),
            },
            tokens: Window::default(),
        };
        (limits, admitted)
    }

    /// Every job the model was called for, with its call count.
    pub fn all_calls(&self) -> HashMap<String, u32> {
        self.calls.lock().expect("stub lock").map.clone()
    }
}

impl Provider for StubProvider {
    fn name(&self) -> &str {
        "stub"
    }

    fn default_model(&self) -> &str {
        "stub"
    }

    async fn call(&self, request: ProviderRequest, progress: Progress) -> ProviderOutcome {
        let id = request.client_request_id.clone();
        let request_id = Some(id.clone());
        let (limits, admitted) = self.admit();
        if !admitted {
            *self.executed.lock().expect("stub lock").entry(&id, || None) = None;
            return ProviderOutcome::Throttled {
                code: "rate_limited".into(),
                request_id,
                limits,
            };
        }
        let fatal = drawn(&id, "fatal", self.config.fatal_rate);
        let retryable = !fatal && drawn(&id, "retryable", self.config.retryable_rate);
        if fatal || retryable {
            // Refused before execution: a confirmed failure, nothing billed.
            *self.executed.lock().expect("stub lock").entry(&id, || None) = None;
            let code = if fatal {
                "stub_invalid_request"
            } else {
                "stub_rate_limited"
            };
            return if fatal {
                ProviderOutcome::Fatal {
                    code: code.into(),
                    request_id,
                }
            } else {
                ProviderOutcome::Retryable {
                    code: code.into(),
                    request_id,
                }
            };
        }
        *self
            .calls
            .lock()
            .expect("stub lock")
            .entry(&request.job_id, || 0) += 1;
        // Work in slices so the progress rule sees a live call. A call of no latency takes
        // none: a timer of zero still waits for the runtime's next timer tick (about a
        // millisecond), ten of them in a row.
        let slices = if self.config.latency.is_zero() {
            0
        } else {
            10u32
        };
        for _ in 0..slices {
            tokio::time::sleep(self.config.latency / slices).await;
            progress.tick();
        }
        let digest = hex::encode(&Sha256::digest(request.input.to_string().as_bytes())[..6]);
        let answer = json!({
            "model": "stub",
            "summary": format!("stub answer {digest}"),
            "attempt": request.attempt_no,
        })
        .to_string();
        *self.executed.lock().expect("stub lock").entry(&id, || None) = Some(answer.clone());
        if drawn(&id, "lost", self.config.lost_response_rate) {
            return ProviderOutcome::Uncertain {
                code: "stub_response_lost".into(),
                request_id,
            };
        }
        // Tokens from the sizes of the input and the answer, about four characters each.
        let usage = super::prices::Usage {
            input: (request.input.to_string().len() as u64).div_ceil(4),
            output: (answer.len() as u64).div_ceil(4),
            ..Default::default()
        };
        ProviderOutcome::Succeeded {
            answer,
            request_id,
            limits,
            usage: Some(usage),
        }
    }

    /// Only what this stub saw is certain: a request it never heard of (another process's,
    /// or one lost on the way) proves nothing.
    async fn retrieve(&self, client_request_id: &str) -> Retrieval {
        if !self.config.retrieval {
            return Retrieval::Unsupported;
        }
        let executed = self.executed.lock().expect("stub lock");
        match executed.get(client_request_id) {
            Some(Some(answer)) => Retrieval::Found(answer.clone()),
            Some(None) => Retrieval::NeverExecuted,
            None => Retrieval::Inconclusive,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(id: &str) -> ProviderRequest {
        ProviderRequest {
            job_id: "job_x".into(),
            attempt_no: 1,
            client_request_id: id.into(),
            input: json!({"doc": "d"}),
            model: json!({}),
        }
    }

    #[tokio::test]
    async fn a_lost_response_was_executed_and_can_be_retrieved() {
        let stub = StubProvider::new(StubConfig {
            lost_response_rate: 1.0,
            retrieval: true,
            ..Default::default()
        });
        let out = stub.call(request("job_x:1"), Progress::default()).await;
        assert!(matches!(out, ProviderOutcome::Uncertain { .. }), "{out:?}");
        assert!(matches!(
            stub.retrieve("job_x:1").await,
            Retrieval::Found(_)
        ));
        assert_eq!(stub.retrieve("job_x:2").await, Retrieval::Inconclusive);
        assert_eq!(stub.calls_for("job_x"), 1);
    }

    /// The benchmarks' model at 0 ms: a call answers without waiting on the runtime's timer.
    #[tokio::test]
    async fn a_call_of_no_latency_waits_for_nothing() {
        let stub = StubProvider::new(StubConfig::default());
        let started = std::time::Instant::now();
        for i in 0..200 {
            let out = stub
                .call(request(&format!("job_x:{i}")), Progress::default())
                .await;
            assert!(matches!(out, ProviderOutcome::Succeeded { .. }), "{out:?}");
        }
        // Ten zero-length timers a call made it about 11 ms a call here (2.2 s in all).
        let took = started.elapsed();
        assert!(took < Duration::from_millis(100), "200 calls took {took:?}");
    }

    #[tokio::test]
    async fn refused_requests_are_confirmed_failures_and_never_executed() {
        let stub = StubProvider::new(StubConfig {
            fatal_rate: 1.0,
            retrieval: true,
            ..Default::default()
        });
        let out = stub.call(request("a"), Progress::default()).await;
        assert!(matches!(out, ProviderOutcome::Fatal { .. }));
        assert_eq!(stub.calls_for("job_x"), 0);
        assert_eq!(stub.retrieve("a").await, Retrieval::NeverExecuted);
    }

    #[tokio::test]
    async fn a_rate_limited_stub_admits_its_burst_then_refuses_with_the_wait() {
        let stub = StubProvider::new(StubConfig {
            rate_limit: Some(5.0),
            ..Default::default()
        });
        let mut refused = Vec::new();
        for i in 0..8 {
            match stub
                .call(request(&format!("r:{i}")), Progress::default())
                .await
            {
                ProviderOutcome::Succeeded { limits, .. } => {
                    assert_eq!(limits.requests.limit, Some(5.0));
                }
                ProviderOutcome::Throttled { limits, .. } => refused.push(limits),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(refused.len(), 3, "a burst of five, then refusals");
        let wait = refused[0].wait().expect("a named wait");
        assert!(wait <= Duration::from_millis(200), "{wait:?}");
        assert_eq!(refused[0].spent(), Some("requests"));
        assert_eq!(stub.calls_for("job_x"), 5);
    }

    #[test]
    fn the_stub_forgets_its_oldest_requests_beyond_its_capacity() {
        let mut remembered = Remembered::with_capacity(3);
        for key in ["a", "b", "c", "d"] {
            *remembered.entry(key, || 0) += 1;
        }
        *remembered.entry("b", || 0) += 1;
        assert_eq!(remembered.get("a"), None, "the oldest is forgotten");
        assert_eq!(remembered.get("b"), Some(&2));
        assert_eq!(remembered.map.len(), 3);
        assert_eq!(remembered.order.len(), 3);
    }

    #[test]
    fn draws_are_deterministic_and_spread() {
        assert_eq!(draw("x", "s"), draw("x", "s"));
        let below = (0..1000)
            .filter(|i| draw(&i.to_string(), "s") < 0.3)
            .count();
        assert!((200..400).contains(&below), "{below}");
    }

    #[test]
    fn a_rate_fires_as_its_draw_says_and_a_rate_of_zero_never() {
        for i in 0..1000 {
            let id = i.to_string();
            assert_eq!(drawn(&id, "s", 0.3), draw(&id, "s") < 0.3, "{id}");
            assert!(!drawn(&id, "s", 0.0), "{id}");
        }
        assert!(drawn("x", "s", 1.0), "a rate of 1 always fires");
    }
}
