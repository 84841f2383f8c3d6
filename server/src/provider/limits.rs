//! What a worker learns of each provider limit (per provider and model) from the answers it
//! gets, and the gate every call passes before it is sent.
//!
//! A refusal names when to call again (`retry-after`, the reset of the spent window): no call
//! of that limit starts before then, and the concurrency the limit allows is halved (at most
//! once per call's time); a window of answers without refusal grows it by one. When answers
//! state the requests window (limit, remaining, reset), the gate also keeps a mirror of the
//! provider's bucket — refilled at the rate the window implies, `(limit − remaining) / reset` —
//! and starts a call only while the mirror holds a token beyond a small reserve, so a steady
//! stream meets the limit without being refused. The worker sizes its receives by
//! [`Limits::capacity`], so while a provider is limiting it takes fewer messages instead of
//! taking and releasing them. Pure bookkeeping: no I/O, no clock but the one passed in.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use super::RateLimits;

/// One provider limit: a provider and a model.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    pub provider: String,
    pub model: String,
}

impl Key {
    pub fn new(provider: &str, model: &str) -> Key {
        Key {
            provider: provider.to_owned(),
            model: model.to_owned(),
        }
    }
}

/// The wait after `n` refusals in a row that named none: a second, doubled each time, at most a
/// minute.
pub fn backoff(n: u32) -> Duration {
    let shift = n.saturating_sub(1).min(6);
    Duration::from_secs(1 << shift).min(Duration::from_secs(60))
}

/// The mirror of a provider's request bucket, as its answers state it.
#[derive(Debug, Clone, Copy)]
struct Mirror {
    limit: f64,
    /// Requests a second it refills.
    rate: f64,
    tokens: f64,
    at: Instant,
    /// Requests a second other callers (other processes, other keys' owners) spend from the
    /// same bucket, as successive answers show it: what remained fell faster than this
    /// process's own calls account for.
    others: f64,
    /// The latest answer it was set from: when that call was sent, what remained after it,
    /// and its number among this process's calls.
    last: Option<(Instant, f64, u64)>,
}

impl Mirror {
    /// What this process may spend of the refill: the rate, less what the others take (never
    /// less than a twentieth of it).
    fn share(&self) -> f64 {
        (self.rate - self.others).max(self.rate * 0.05)
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + self.share() * elapsed).min(self.limit);
        self.at = now;
    }

    /// Tokens kept back: callers in other processes spend from the same bucket between the
    /// answers that tell this one.
    fn reserve(&self) -> f64 {
        (self.limit * 0.1).floor().clamp(0.0, 50.0)
    }
}

/// What one worker knows of one limit.
#[derive(Debug)]
struct Learned {
    paused_until: Option<Instant>,
    /// Which limit the latest pause came from (`requests`, `tokens`, `retry-after`, `backoff`,
    /// `fleet`).
    pause_limit: Option<String>,
    concurrency: f64,
    in_flight: usize,
    waiting: usize,
    /// Answers without refusal since the concurrency last changed.
    admitted_since: usize,
    refusals_in_row: u32,
    last_cut: Option<Instant>,
    mirror: Option<Mirror>,
    /// Of answered calls, a moving average.
    latency: Option<Duration>,
    /// Calls started, and the number of the call whose answer last set the mirror.
    sends: u64,
    synced: u64,
    refusals: u64,
    /// Refusals since [`Limits::take_fresh`] last took them.
    fresh_refusals: u64,
    limited: Duration,
    fresh_limited: Duration,
}

impl Learned {
    fn new(width: usize) -> Learned {
        Learned {
            paused_until: None,
            pause_limit: None,
            concurrency: width as f64,
            in_flight: 0,
            waiting: 0,
            admitted_since: 0,
            refusals_in_row: 0,
            last_cut: None,
            mirror: None,
            latency: None,
            sends: 0,
            synced: 0,
            refusals: 0,
            fresh_refusals: 0,
            limited: Duration::ZERO,
            fresh_limited: Duration::ZERO,
        }
    }

    fn allowed(&self) -> usize {
        (self.concurrency.floor() as usize).max(1)
    }

    fn paused_at(&self, now: Instant) -> Option<Instant> {
        self.paused_until.filter(|until| *until > now)
    }

    /// Extends the pause to `until`, counting the time it adds (as learned here, for the
    /// fleet, when `fresh`).
    fn pause(&mut self, now: Instant, until: Instant, limit: &str, fresh: bool) {
        let from = self.paused_at(now).unwrap_or(now);
        if until > from {
            self.limited += until - from;
            if fresh {
                self.fresh_limited += until - from;
            }
            self.paused_until = Some(until);
            self.pause_limit = Some(limit.to_owned());
        }
    }
}

/// A limit as the console and the metrics show it.
#[derive(Debug, Clone, PartialEq)]
pub struct LimitView {
    pub key: Key,
    /// How long calls still wait, and which limit says so.
    pub paused_for: Option<Duration>,
    pub pause_limit: Option<String>,
    /// Calls it lets run at once now.
    pub concurrency: usize,
    pub in_flight: usize,
    /// Requests a second the provider's answers imply, when they state it.
    pub rate_per_s: Option<f64>,
    pub refusals: u64,
    pub limited: Duration,
}

/// What changed of a limit since it was last taken, for the fleet ([`Limits::take_fresh`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Fresh {
    pub view: LimitView,
    pub refusals: u64,
    pub limited: Duration,
}

/// The limits one worker has learned, shared by its calls. Cheap to clone.
#[derive(Clone)]
pub struct Limits {
    inner: Arc<Inner>,
}

struct Inner {
    keys: Mutex<HashMap<Key, Learned>>,
    changed: Notify,
    /// The worker's width: no limit lets more calls run at once.
    width: usize,
}

/// A caller waiting at the gate, counted while it waits.
struct Waiting<'a> {
    limits: &'a Limits,
    key: &'a Key,
    counted: bool,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if self.counted {
            self.limits
                .with(self.key, |s| s.waiting = s.waiting.saturating_sub(1));
        }
    }
}

/// A call let through the gate. Dropped without [`Permit::answered`] (a call cancelled), it
/// still gives its place back.
pub struct Permit {
    limits: Limits,
    key: Key,
    send: u64,
    sent_at: Instant,
    done: bool,
}

/// How the provider answered, as far as its limit goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// It took the call (whatever came of it).
    Admitted,
    /// It refused the call before running it.
    Refused,
}

impl Limits {
    pub fn new(width: usize) -> Limits {
        Limits {
            inner: Arc::new(Inner {
                keys: Mutex::new(HashMap::new()),
                changed: Notify::new(),
                width: width.max(1),
            }),
        }
    }

    fn with<T>(&self, key: &Key, f: impl FnOnce(&mut Learned) -> T) -> T {
        let mut keys = self.inner.keys.lock().expect("limits lock");
        let learned = keys
            .entry(key.clone())
            .or_insert_with(|| Learned::new(self.inner.width));
        f(learned)
    }

    /// Waits until a call of `key` may start: no pause, room within the learned concurrency,
    /// and (when the provider states its bucket) a token.
    pub async fn acquire(&self, key: &Key) -> Permit {
        // Counted among the waiters (whose presence says the limit is binding) from its first
        // wait until it goes through or is dropped.
        let mut waiting = Waiting {
            limits: self,
            key,
            counted: false,
        };
        loop {
            let notified = self.inner.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let now = Instant::now();
            let counted = waiting.counted;
            let outcome = self.with(key, |s| {
                if let Some(until) = s.paused_at(now) {
                    return Err(Some(until));
                }
                if s.in_flight >= s.allowed() {
                    return Err(None);
                }
                if let Some(mirror) = s.mirror.as_mut() {
                    mirror.refill(now);
                    let need = 1.0 + mirror.reserve();
                    if mirror.tokens < need {
                        let secs = (need - mirror.tokens) / mirror.rate;
                        return Err(Some(now + Duration::from_secs_f64(secs.min(60.0))));
                    }
                    mirror.tokens -= 1.0;
                }
                if counted {
                    s.waiting = s.waiting.saturating_sub(1);
                }
                s.in_flight += 1;
                s.sends += 1;
                Ok(s.sends)
            });
            match outcome {
                Ok(send) => {
                    waiting.counted = false;
                    return Permit {
                        limits: self.clone(),
                        key: key.clone(),
                        send,
                        sent_at: now,
                        done: false,
                    };
                }
                Err(until) => {
                    if !waiting.counted {
                        waiting.counted = true;
                        self.with(key, |s| s.waiting += 1);
                    }
                    let until = until.unwrap_or(now + Duration::from_secs(1));
                    tokio::select! {
                        () = &mut notified => {}
                        () = tokio::time::sleep_until(until.into()) => {}
                    }
                }
            }
        }
    }

    /// [`Limits::acquire`] for a caller that would rather wait elsewhere for a long pause: a
    /// pause with more than `pause_bound` left (a reset a minute away), or any wait past
    /// `bound`, gives back how long it had better wait instead (what is left of the pause,
    /// else a tenth of a second). Waiting for a token or a slot is pacing, and is done here.
    pub async fn acquire_within(
        &self,
        key: &Key,
        pause_bound: Duration,
        bound: Duration,
    ) -> Result<Permit, Duration> {
        let until = Instant::now() + bound;
        loop {
            let now = Instant::now();
            let paused = self.with(key, |s| s.paused_at(now).map(|end| end - now));
            if let Some(left) = paused.filter(|left| *left > pause_bound || now + *left >= until) {
                return Err(left);
            }
            if now >= until {
                return Err(Duration::from_millis(100));
            }
            // In slices, so that a pause that begins meanwhile is seen.
            let slice = (until - now).min(Duration::from_millis(250));
            if let Ok(permit) = tokio::time::timeout(slice, self.acquire(key)).await {
                return Ok(permit);
            }
        }
    }

    /// Calls the worker may hold now: its width, or fewer while a limit it has met holds
    /// (none at all while every such limit is paused).
    pub fn capacity(&self) -> usize {
        self.capacity_at(Instant::now())
    }

    /// [`Limits::capacity`] as it will be at `at`, pauses that end before then left out: what
    /// the worker tells the fleet, where a refusal's pause of a few milliseconds says nothing
    /// of what it can hold.
    pub fn capacity_at(&self, at: Instant) -> usize {
        let now = at;
        let keys = self.inner.keys.lock().expect("limits lock");
        if keys.is_empty() {
            return self.inner.width;
        }
        keys.values()
            .map(|s| {
                if s.paused_at(now).is_some() {
                    0
                } else {
                    s.allowed()
                }
            })
            .max()
            .unwrap_or(self.inner.width)
            .min(self.inner.width)
    }

    /// The earliest end of a pause still running, if any.
    pub fn next_resume(&self) -> Option<Instant> {
        let now = Instant::now();
        let keys = self.inner.keys.lock().expect("limits lock");
        keys.values().filter_map(|s| s.paused_at(now)).min()
    }

    /// Resolves when anything of the limits changes (a call answered or given back, a pause).
    pub async fn changed(&self) {
        self.inner.changed.notified().await
    }

    /// The fleet says `key` is limited for `left` more (another process was refused): no call
    /// starts before then.
    pub fn pause_from_fleet(&self, key: &Key, left: Duration, limit: &str) {
        let now = Instant::now();
        self.with(key, |s| s.pause(now, now + left, limit, false));
        self.inner.changed.notify_waiters();
    }

    /// Every limit met so far.
    pub fn views(&self) -> Vec<LimitView> {
        let now = Instant::now();
        let keys = self.inner.keys.lock().expect("limits lock");
        let mut views: Vec<LimitView> = keys.iter().map(|(k, s)| view(k, s, now)).collect();
        views.sort_by(|a, b| a.key.cmp(&b.key));
        views
    }

    /// The limits with refusals or pauses since the last call, with what they added; each
    /// limit's counters start again from here.
    pub fn take_fresh(&self) -> Vec<Fresh> {
        let now = Instant::now();
        let mut keys = self.inner.keys.lock().expect("limits lock");
        let mut fresh: Vec<Fresh> = keys
            .iter_mut()
            .filter(|(_, s)| s.fresh_refusals > 0 || !s.fresh_limited.is_zero())
            .map(|(k, s)| {
                let f = Fresh {
                    view: view(k, s, now),
                    refusals: s.fresh_refusals,
                    limited: s.fresh_limited,
                };
                s.fresh_refusals = 0;
                s.fresh_limited = Duration::ZERO;
                f
            })
            .collect();
        fresh.sort_by(|a, b| a.view.key.cmp(&b.view.key));
        fresh
    }
}

fn view(key: &Key, s: &Learned, now: Instant) -> LimitView {
    LimitView {
        key: key.clone(),
        paused_for: s.paused_at(now).map(|until| until - now),
        pause_limit: s.pause_limit.clone(),
        concurrency: s.allowed(),
        in_flight: s.in_flight,
        rate_per_s: s.mirror.map(|m| m.rate),
        refusals: s.refusals,
        limited: s.limited,
    }
}

impl Permit {
    /// Records how the provider answered this call and what it said of its limits.
    pub fn answered(mut self, answer: Answer, limits: &RateLimits) {
        self.done = true;
        let now = Instant::now();
        let (send, sent_at) = (self.send, self.sent_at);
        let width = self.limits.inner.width as f64;
        self.limits.with(&self.key, |s| {
            s.in_flight = s.in_flight.saturating_sub(1);
            let took = now.saturating_duration_since(sent_at);
            learn_bucket(s, limits, send, sent_at, now);
            match answer {
                Answer::Admitted => {
                    s.refusals_in_row = 0;
                    s.latency = Some(match s.latency {
                        Some(avg) => avg.mul_f64(0.8) + took.mul_f64(0.2),
                        None => took,
                    });
                    match (s.mirror, s.latency) {
                        // What the provider admits over a call's time, with a little room.
                        (Some(m), Some(latency)) => {
                            let needed = m.share() * latency.as_secs_f64() * 1.25 + 1.0;
                            s.concurrency = needed.clamp(1.0, width);
                        }
                        _ => {
                            s.admitted_since += 1;
                            let full = s.waiting > 0 || s.in_flight + 1 >= s.allowed();
                            if full && s.admitted_since >= s.allowed() {
                                s.concurrency = (s.concurrency + 1.0).min(width);
                                s.admitted_since = 0;
                            }
                        }
                    }
                }
                Answer::Refused => {
                    s.refusals += 1;
                    s.fresh_refusals += 1;
                    s.refusals_in_row = s.refusals_in_row.saturating_add(1);
                    let (wait, limit) = match limits.wait() {
                        Some(wait) => (wait, limits.spent().unwrap_or("retry-after")),
                        None => (backoff(s.refusals_in_row), "backoff"),
                    };
                    s.pause(now, now + wait, limit, true);
                    // Halve at most once per call's time: the refusals of one burst are one
                    // signal.
                    let window = s.latency.unwrap_or(Duration::from_millis(500));
                    if s.last_cut
                        .is_none_or(|at| now.saturating_duration_since(at) >= window)
                    {
                        let held = (s.in_flight + 1) as f64;
                        s.concurrency = (s.concurrency.min(held) / 2.0).max(1.0);
                        s.last_cut = Some(now);
                        s.admitted_since = 0;
                    }
                    if let Some(mirror) = s.mirror.as_mut() {
                        mirror.tokens = mirror.tokens.min(0.0);
                        mirror.at = now;
                    }
                }
            }
        });
        self.limits.inner.changed.notify_waiters();
    }
}

/// Sets the mirror of the requests bucket from an answer that states it: its rate from how far
/// the window is from whole and how long it takes to refill, its tokens from what remained when
/// the provider admitted the call, less the calls started since, plus what refilled since less
/// what other callers spent meanwhile (learned from how fast what remained fell between
/// answers). Only the answer to the latest call sent sets the tokens: an older one knows less.
fn learn_bucket(s: &mut Learned, limits: &RateLimits, send: u64, sent_at: Instant, now: Instant) {
    let w = limits.requests;
    let (Some(limit), Some(remaining)) = (w.limit, w.remaining) else {
        return;
    };
    if limit < 1.0 {
        return;
    }
    let rate = match w.reset {
        Some(reset) if reset > Duration::ZERO && limit > remaining => {
            Some((limit - remaining) / reset.as_secs_f64())
        }
        _ => s.mirror.map(|m| m.rate),
    };
    let Some(rate) = rate.filter(|r| r.is_finite() && *r > 0.01) else {
        return;
    };
    let mut mirror = s.mirror.unwrap_or(Mirror {
        limit,
        rate,
        tokens: remaining,
        at: now,
        others: 0.0,
        last: None,
    });
    mirror.limit = limit;
    mirror.rate = rate;
    if send >= s.synced {
        // Between the previous answer's call and this one's, the bucket refilled and this
        // process spent its own calls; whatever else it lost, others spent.
        if let Some((then, before, then_send)) = mirror.last {
            let span = sent_at.saturating_duration_since(then).as_secs_f64();
            if span > 0.01 && before + rate * span < limit {
                let own = (send - then_send) as f64;
                let others = ((before + rate * span - own - remaining) / span).clamp(0.0, rate);
                mirror.others = mirror.others * 0.7 + others * 0.3;
            }
        }
        mirror.last = Some((sent_at, remaining, send));
        let since = (s.sends - send) as f64;
        let elapsed = now.saturating_duration_since(sent_at).as_secs_f64();
        mirror.tokens = (remaining + mirror.share() * elapsed - since).min(limit);
        mirror.at = now;
        s.synced = send;
    }
    s.mirror = Some(mirror);
}

impl Drop for Permit {
    fn drop(&mut self) {
        if !self.done {
            self.limits.with(&self.key, |s| {
                s.in_flight = s.in_flight.saturating_sub(1);
            });
            self.limits.inner.changed.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::Window;

    fn key() -> Key {
        Key::new("openai", "m")
    }

    fn stated(limit: f64, remaining: f64, reset_ms: u64) -> RateLimits {
        RateLimits {
            retry_after: None,
            requests: Window {
                limit: Some(limit),
                remaining: Some(remaining),
                reset: Some(Duration::from_millis(reset_ms)),
            },
            tokens: Window::default(),
        }
    }

    #[tokio::test]
    async fn a_refusal_pauses_the_limit_for_the_named_time_and_halves_its_concurrency() {
        let limits = Limits::new(64);
        let permits: Vec<Permit> = futures_permits(&limits, 8).await;
        let named = RateLimits {
            retry_after: Some(Duration::from_millis(300)),
            ..Default::default()
        };
        let mut permits = permits.into_iter();
        permits.next().unwrap().answered(Answer::Refused, &named);
        let view = &limits.views()[0];
        assert_eq!(view.pause_limit.as_deref(), Some("retry-after"));
        assert!(view.paused_for.unwrap() > Duration::from_millis(250));
        assert_eq!(view.concurrency, 4, "halved from the eight it held");
        assert_eq!(limits.capacity(), 0, "nothing is received while paused");
        // The other refusals of the same burst do not halve it again.
        permits.next().unwrap().answered(Answer::Refused, &named);
        assert_eq!(limits.views()[0].concurrency, 4);
        assert_eq!(limits.views()[0].refusals, 2);
        drop(permits);
        let started = Instant::now();
        let _next = limits.acquire(&key()).await;
        assert!(
            started.elapsed() >= Duration::from_millis(250),
            "waited for the reset"
        );
    }

    async fn futures_permits(limits: &Limits, n: usize) -> Vec<Permit> {
        let mut out = Vec::new();
        for _ in 0..n {
            out.push(limits.acquire(&key()).await);
        }
        out
    }

    #[test]
    fn a_refusal_that_names_no_wait_backs_off_up_to_a_minute() {
        let waits: Vec<u64> = (1..=8).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60]);
    }

    #[tokio::test]
    async fn answers_that_state_the_bucket_pace_calls_at_its_rate() {
        let limits = Limits::new(64);
        // A bucket of 10 refilling at 10 a second, just spent.
        limits
            .acquire(&key())
            .await
            .answered(Answer::Admitted, &stated(10.0, 0.0, 1000));
        let view = &limits.views()[0];
        assert!((view.rate_per_s.unwrap() - 10.0).abs() < 0.5, "{view:?}");
        // Tokens beyond the reserve of one come at ten a second: five calls take about 0.5 s
        // once the first two tokens refilled.
        let started = Instant::now();
        for _ in 0..5 {
            limits
                .acquire(&key())
                .await
                .answered(Answer::Admitted, &RateLimits::default());
        }
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(550) && took < Duration::from_millis(1200),
            "{took:?}"
        );
    }

    #[test]
    fn a_mirror_learns_what_other_callers_spend_of_the_same_bucket() {
        let limits = Limits::new(8);
        let k = key();
        let t0 = Instant::now();
        // Calls every 100 ms, each answered at once; the bucket (20 a second, 20 deep) also
        // loses 10 a second to someone else, so what remains falls by 1 + 1 a call.
        let mut remaining = 15.0;
        for i in 0..30u64 {
            let sent_at = t0 + Duration::from_millis(100 * i);
            limits.with(&k, |s| {
                s.sends += 1;
                let send = s.sends;
                learn_bucket(s, &stated(20.0, remaining, 250), send, sent_at, sent_at);
            });
            remaining = (remaining + 2.0 - 1.0 - 1.0f64).max(0.0);
        }
        let others = limits.with(&k, |s| s.mirror.map(|m| m.others)).unwrap();
        assert!((others - 10.0).abs() < 1.5, "learned {others} a second");
    }

    #[tokio::test]
    async fn concurrency_grows_back_by_one_per_full_window_of_admitted_calls() {
        let limits = Limits::new(16);
        let held = futures_permits(&limits, 4).await;
        let mut held = held.into_iter();
        held.next().unwrap().answered(
            Answer::Refused,
            &RateLimits {
                retry_after: Some(Duration::from_millis(1)),
                ..Default::default()
            },
        );
        drop(held);
        assert_eq!(limits.views()[0].concurrency, 2);
        tokio::time::sleep(Duration::from_millis(5)).await;
        for _ in 0..2 {
            let batch = futures_permits(&limits, 2).await;
            for permit in batch {
                permit.answered(Answer::Admitted, &RateLimits::default());
            }
        }
        assert_eq!(limits.views()[0].concurrency, 3);
    }

    #[tokio::test]
    async fn what_was_learned_here_is_taken_once_and_what_the_fleet_said_is_not_echoed() {
        let limits = Limits::new(4);
        let named = RateLimits {
            retry_after: Some(Duration::from_secs(2)),
            ..Default::default()
        };
        limits
            .acquire(&key())
            .await
            .answered(Answer::Refused, &named);
        let fresh = limits.take_fresh();
        assert_eq!(fresh.len(), 1);
        assert_eq!(fresh[0].refusals, 1);
        assert!(fresh[0].limited >= Duration::from_millis(1900));
        assert!(limits.take_fresh().is_empty());
        let other = Key::new("openai", "other");
        limits.pause_from_fleet(&other, Duration::from_secs(3), "requests");
        assert!(
            limits.take_fresh().is_empty(),
            "the fleet's pause goes back to no one"
        );
        assert_eq!(limits.capacity(), 0);
        assert!(limits.next_resume().is_some());
    }
}
