//! The provider fault points: a wrapper around any provider that, for the jobs a drill armed,
//! adds latency (reporting progress as a live call does), refuses the call with a confirmed
//! retryable or fatal error, refuses what a rate limit cannot admit (stating the limit as
//! OpenAI's headers do), or runs it and loses the response. Other jobs pass through.

use std::time::Duration;

use crate::faults::{FaultPoint, Faults};
use crate::provider::{
    Progress, Provider, ProviderOutcome, ProviderRequest, RateLimits, Retrieval, Window,
};

#[derive(Clone)]
pub struct FaultyProvider<P> {
    inner: P,
    faults: Faults,
}

impl<P: Provider> FaultyProvider<P> {
    pub fn new(inner: P, faults: Faults) -> Self {
        FaultyProvider { inner, faults }
    }

    pub fn inner(&self) -> &P {
        &self.inner
    }
}

impl<P: Provider> Provider for FaultyProvider<P> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn default_model(&self) -> &str {
        self.inner.default_model()
    }

    /// A job of the rate-limit drill counts against a limit of its own: the model it calls is
    /// the job's, but what its refusals teach the workers must not hold up the other
    /// scenarios' jobs, which share those workers and that model.
    fn model_of(&self, request: &ProviderRequest) -> String {
        let model = self.inner.model_of(request);
        if self
            .faults
            .is_armed(&request.job_id, FaultPoint::ProviderRateLimit)
        {
            format!("{model} (drill rate limit)")
        } else {
            model
        }
    }

    async fn call(&self, request: ProviderRequest, progress: Progress) -> ProviderOutcome {
        let job = request.job_id.clone();
        let request_id = Some(request.client_request_id.clone());
        if self.faults.fire(&job, FaultPoint::ProviderFatal).is_some() {
            return ProviderOutcome::Fatal {
                code: "drill_invalid_request".into(),
                request_id,
            };
        }
        if self
            .faults
            .fire(&job, FaultPoint::ProviderRetryable)
            .is_some()
        {
            return ProviderOutcome::Retryable {
                code: "drill_rate_limited".into(),
                request_id,
            };
        }
        // What a rate-limited model states with an admitted call's answer.
        let mut stated = None;
        if let Some(interval) = self.faults.fire(&job, FaultPoint::ProviderRateLimit) {
            let (admitted, left, next, whole) = self.faults.rate_limit(interval);
            let depth = (1.0 / interval.as_secs_f64().max(0.001)).max(1.0);
            let limits = RateLimits {
                retry_after: (!admitted).then_some(next),
                requests: Window {
                    limit: Some(depth.floor()),
                    remaining: Some(left.floor()),
                    reset: Some(whole),
                },
                tokens: Window::default(),
            };
            if !admitted {
                return ProviderOutcome::Throttled {
                    code: "rate_limited".into(),
                    request_id,
                    limits,
                };
            }
            stated = Some(limits);
        }
        if let Some(extra) = self.faults.fire(&job, FaultPoint::ProviderLatency) {
            let slice = Duration::from_millis(100).min(extra.max(Duration::from_millis(1)));
            let until = tokio::time::Instant::now() + extra;
            while tokio::time::Instant::now() < until {
                tokio::time::sleep(slice.min(until - tokio::time::Instant::now())).await;
                progress.tick();
            }
        }
        let mut outcome = self.inner.call(request, progress).await;
        if let (ProviderOutcome::Succeeded { limits, .. }, Some(stated)) = (&mut outcome, stated) {
            *limits = stated;
        }
        if self
            .faults
            .fire(&job, FaultPoint::ProviderLoseResponse)
            .is_some()
        {
            // The call ran (and would be billed); the answer never arrived.
            return ProviderOutcome::Uncertain {
                code: "drill_response_lost".into(),
                request_id,
            };
        }
        outcome
    }

    async fn retrieve(&self, client_request_id: &str) -> Retrieval {
        self.inner.retrieve(client_request_id).await
    }
}
