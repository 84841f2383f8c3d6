//! One delivery, examined: the worker's testable step. A delivery only triggers an
//! examination of the ledger; the job record decides whether to infer, and the message is
//! deleted only after a durable outcome or once the ledger holds responsibility for the job.

use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;

use super::heartbeat::{cap_left, db_span, delivery_ref, now_ms, InFlight, StopReason};
use super::Shared;
use crate::faults::sabotage::Safeguard;
use crate::faults::FaultPoint;
use crate::job::detail;
use crate::job::message::{self, BadMessage, JobMessage};
use crate::job::{Actor, EventKind, JobState};
use crate::ledger::{
    AcceptDelete, Answered, AttemptStarted, DeliveryRef, Failure, Job, LedgerError, NewEvent,
    Owner, Refusal, RejectedMessage, ReplayPolicy, Route, Spend, Throttle,
};
use crate::metrics::DeliveryOutcome;
use crate::provider::limits::{Answer, Key};
use crate::provider::route;
use crate::provider::{
    Progress, Provider, ProviderOutcome, ProviderRequest, RateLimits, Retrieval, Submission,
};
use crate::queue::{DeletePlan, Deleted, Delivery, Queue, QueueError, MAX_VISIBILITY};

/// The code of an attempt the worker held back, unsent, because its provider's limit had no
/// room for it in time: the provider never saw it.
pub const HELD_BY_LIMIT: &str = "held_by_limit";

/// The longest pause of its provider's limit a claimed job waits out in the worker: a quarter
/// of the visibility timeout, at most five seconds. A longer one (a reset a minute away) it
/// waits for in the ledger, unsent, holding no lease.
fn pause_bound(timings: &super::Timings) -> Duration {
    (timings.visibility / 4).min(Duration::from_secs(5))
}

/// How long a claimed job may wait at its provider limit's gate at all: until half a second
/// before its lease, which never outlasts the fixed deadline (an instant on this worker's
/// clock), comes within the margin the heartbeat stops calls at. It goes back unsent while it
/// may still be written to; stopped there, its attempt would count as one that may have run.
fn before_deadline(timings: &super::Timings, deadline: std::time::Instant) -> Duration {
    deadline
        .saturating_duration_since(std::time::Instant::now())
        .saturating_sub(timings.margin + Duration::from_millis(500))
}

/// How long a job refused `refusals` times in a row waits before it is sent again: the wait
/// the provider named, else the capped backoff; from its second refusal on, at least the
/// backoff of the refusals before (a job refused again and again does not come back at the
/// pace of every reset); plus up to half again (at least 100 ms) of jitter, so that the jobs of
/// one refused burst do not all come back at once.
fn throttle_wait(named: Option<Duration>, refusals: u32, timings: &super::Timings) -> Duration {
    let backoff = |n: u32| crate::provider::limits::backoff(n).min(timings.backoff_max);
    let base = match named {
        Some(named) if refusals > 1 => named.max(backoff(refusals - 1)),
        Some(named) => named,
        None => backoff(refusals),
    };
    let spread = (base / 2).max(Duration::from_millis(100));
    let mut bytes = [0u8; 8];
    let jitter = match getrandom::fill(&mut bytes) {
        Ok(()) => u64::from_le_bytes(bytes) as f64 / u64::MAX as f64,
        Err(_) => 0.5,
    };
    base + spread.mul_f64(jitter)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_waits_at_the_gate_no_later_than_its_lease_can_be_kept() {
        let t = crate::worker::Timings::default();
        // A 20 s deadline: the heartbeat stops a call 15 s (the margin) before it.
        let soon = std::time::Instant::now() + Duration::from_secs(20);
        let bound = before_deadline(&t, soon);
        assert!(
            bound > Duration::from_secs(4) && bound < Duration::from_millis(4_600),
            "{bound:?}"
        );
        let past = std::time::Instant::now();
        assert_eq!(before_deadline(&t, past), Duration::ZERO);
    }

    #[test]
    fn a_job_refused_again_and_again_waits_longer_each_time_within_the_cap() {
        let t = crate::worker::Timings::default();
        let named = Some(Duration::from_millis(200));
        let waits: Vec<Duration> = (1..=9).map(|n| throttle_wait(named, n, &t)).collect();
        // The named wait first, plus jitter of at most 100 ms.
        assert!(waits[0] >= Duration::from_millis(200) && waits[0] <= Duration::from_millis(300));
        // Then at least the backoff of the refusals before: 1 s, 2 s, … capped at a minute.
        assert!(waits[1] >= Duration::from_secs(1) && waits[1] <= Duration::from_millis(1_500));
        assert!(waits[2] >= Duration::from_secs(2));
        assert!(waits[8] >= Duration::from_secs(60) && waits[8] <= Duration::from_secs(90));
        // A long named reset always wins.
        let reset = throttle_wait(Some(Duration::from_secs(600)), 2, &t);
        assert!(reset >= Duration::from_secs(600));
        // None named: the capped backoff.
        assert!(throttle_wait(None, 1, &t) >= Duration::from_secs(1));
        assert!(throttle_wait(None, 3, &t) >= Duration::from_secs(4));
    }
}

/// A claim that made this worker the owner, with its first attempt recorded.
struct Started {
    claimed: crate::ledger::Claimed,
    /// Just before the claim was asked: the lease and the deadline count from here.
    asked: std::time::Instant,
    attempt: AttemptStarted,
    /// The job's input and model, when the claim read them.
    input: Option<(Value, Value)>,
    /// The provider id of an adopted attempt, running in the background: polled, not sent
    /// again.
    adopting: Option<String>,
}

/// Where an attempt goes on its job's route: the provider it calls, and what a refusal
/// there may move the job on to.
struct Routing<'a, P> {
    /// The provider the attempt calls: the worker's own, or the route's pair's.
    provider: Option<&'a P>,
    route: &'a Route,
    /// The job's tenant and its own `fallback` parameter: its route after the first pair,
    /// read only when a refusal may move it on.
    tenant: &'a str,
    own: Option<Value>,
    /// The database clock at the claim.
    claimed_at: i64,
}

/// The code of an attempt whose route names a provider this worker cannot call: it is held,
/// unsent, like a refusal, until the route moves on or a worker that can call it takes it.
pub const PROVIDER_NOT_HERE: &str = "provider_not_configured";

/// What became of one delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The message was not a job message (or not this tenant's): recorded and dead-lettered.
    Rejected(&'static str),
    /// The job was already terminal: acknowledged without inference.
    AckedTerminal,
    /// A live owner holds the job: no inference, no delete, visibility pushed out.
    DuplicateSuppressed,
    /// The job is not workable yet (backoff): the message comes back later.
    Deferred,
    /// The job waits for a decision: the ledger holds it, the message is deleted.
    HandedToLedger(JobState),
    /// This worker's attempt produced the one accepted result.
    Succeeded,
    /// A confirmed provider failure was recorded; the job is now in this state.
    Failed(JobState),
    /// The provider refused the call before running it: the job waits for its reset, its
    /// budget untouched.
    Throttled,
    /// The guarded write was refused: this worker was fenced out. Nothing deleted.
    Fenced(&'static str),
    /// Local work stopped (lease lost, deadline, shutdown): nothing deleted unless the ledger
    /// took the job back.
    Stopped(String),
    /// The ledger could not be reached: the message is left to come back.
    LedgerUnavailable,
}

impl Outcome {
    /// The outcome as a bounded metrics label.
    pub fn label(&self) -> DeliveryOutcome {
        match self {
            Outcome::Rejected(_) => DeliveryOutcome::Rejected,
            Outcome::AckedTerminal => DeliveryOutcome::AckedTerminal,
            Outcome::DuplicateSuppressed => DeliveryOutcome::DuplicateSuppressed,
            Outcome::Deferred => DeliveryOutcome::Deferred,
            Outcome::HandedToLedger(_) => DeliveryOutcome::HandedToLedger,
            Outcome::Succeeded => DeliveryOutcome::Succeeded,
            Outcome::Failed(_) => DeliveryOutcome::Failed,
            Outcome::Throttled => DeliveryOutcome::Throttled,
            Outcome::Fenced(_) => DeliveryOutcome::Fenced,
            Outcome::Stopped(_) => DeliveryOutcome::Stopped,
            Outcome::LedgerUnavailable => DeliveryOutcome::LedgerUnavailable,
        }
    }
}

impl<Q: Queue, P: Provider> Shared<Q, P> {
    fn actor(&self) -> Actor {
        Actor::Worker(self.config.worker_id.clone())
    }

    /// Whether a drill's fault fires here for this job (never outside a drill).
    fn fault(&self, job_id: &str, point: FaultPoint) -> Option<Duration> {
        self.config.faults.as_ref()?.fire(job_id, point)
    }

    /// Whether a test switched this safeguard off for this worker (never outside test builds).
    fn sabotaged(&self, safeguard: Safeguard) -> bool {
        self.config
            .faults
            .as_ref()
            .is_some_and(|f| f.disabled(safeguard))
    }

    /// What a worker without the wait-for-decision safeguard does with an `unknown` job at
    /// `epoch`: authorizes its own retry instead of waiting for an operator. Reached only
    /// through a switched-off safeguard in a test build.
    async fn decide_without_waiting(&self, job_id: &str, epoch: i64) {
        let _ = self
            .ledger
            .decide(
                job_id,
                epoch,
                &crate::ledger::Decision::AuthorizeRetry,
                &self.actor(),
                "sabotaged",
            )
            .await;
    }

    /// What a worker without the safeguards does with any delivery: calls the model and
    /// writes the answer, whatever the ledger says. Reached only through a switched-off
    /// safeguard in a test build.
    async fn work_blindly(&self, job: &Job, delivery: &Delivery, dref: &DeliveryRef) -> Outcome {
        #[cfg(feature = "sabotage")]
        {
            let job_id = job.job_id.as_str();
            let Ok(Some((input, model))) = self.ledger.job_input(job_id).await else {
                return Outcome::LedgerUnavailable;
            };
            let request = ProviderRequest {
                job_id: job_id.to_owned(),
                attempt_no: job.attempt_count + 1,
                client_request_id: format!("{job_id}:blind"),
                input,
                model,
            };
            if let ProviderOutcome::Succeeded { .. } =
                self.provider.call(request, Progress::default()).await
            {
                let _ = self
                    .ledger
                    .sabotaged_accept(job_id, job.owner_epoch, &self.actor())
                    .await;
                self.delete(job_id, delivery, dref, None, "succeeded").await;
                return Outcome::Succeeded;
            }
            Outcome::Stopped("blind_call_failed".into())
        }
        #[cfg(not(feature = "sabotage"))]
        {
            let _ = (job, delivery, dref);
            Outcome::Stopped("no_such_safeguard_switch".into())
        }
    }

    async fn event(&self, job_id: &str, event: NewEvent) {
        let kind = event.kind;
        if let Err(error) = self.ledger.note_event(job_id, event).await {
            tracing::warn!(job_id, kind = kind.as_str(), %error, "could not record an event");
        }
    }

    /// Deletes the delivery with its current handle and records the outcome. A failed delete
    /// keeps whatever the ledger holds: redelivery resolves the transport uncertainty.
    async fn delete(
        &self,
        job_id: &str,
        delivery: &Delivery,
        dref: &DeliveryRef,
        epoch: Option<i64>,
        reason: &str,
    ) {
        let result = self.queue.delete_known(&delivery.receipt).await;
        self.deleted(job_id, &result, dref, epoch, reason).await;
    }

    /// Counts and records what a delete came to.
    async fn deleted(
        &self,
        job_id: &str,
        result: &Result<Deleted, QueueError>,
        dref: &DeliveryRef,
        epoch: Option<i64>,
        reason: &str,
    ) {
        self.config
            .metrics
            .delete(matches!(result, Ok(Deleted::Reported)));
        self.event(job_id, self.delete_event(result, dref, epoch, reason))
            .await;
    }

    /// The event of a delete that came to `result`.
    fn delete_event(
        &self,
        result: &Result<Deleted, QueueError>,
        dref: &DeliveryRef,
        epoch: Option<i64>,
        reason: &str,
    ) -> NewEvent {
        let event = match result {
            Ok(Deleted::Reported) => NewEvent::new(EventKind::MessageDeleted, &self.actor())
                .detail(detail::MessageDeleted {
                    reason: reason.to_owned(),
                }),
            // The queue knows this handle was outdated: the message remains, and its next
            // delivery finds what the ledger holds.
            Ok(Deleted::NothingDeleted) => NewEvent::new(EventKind::DeleteFailed, &self.actor())
                .detail(detail::DeleteFailed {
                    reason: reason.to_owned(),
                    error: "stale_receipt_handle".to_owned(),
                    uncertain: false,
                }),
            Err(error) => {
                NewEvent::new(EventKind::DeleteFailed, &self.actor()).detail(detail::DeleteFailed {
                    reason: reason.to_owned(),
                    error: error.code().to_owned(),
                    uncertain: error.is_uncertain(),
                })
            }
        };
        let event = event.delivery(dref.clone());
        match epoch {
            Some(epoch) => event.epoch(epoch),
            None => event,
        }
    }

    async fn reject(
        &self,
        delivery: &Delivery,
        reason: BadMessage,
        job_id: Option<&str>,
    ) -> Outcome {
        let fingerprint = delivery.receipt.fingerprint();
        tracing::warn!(
            message_id = %delivery.message_id,
            receive_count = delivery.receive_count,
            reason = reason.as_str(),
            "refused a queue message"
        );
        let record = RejectedMessage {
            worker_id: &self.config.worker_id,
            message_id: &delivery.message_id,
            receive_count: i64::from(delivery.receive_count),
            handle_hash: &fingerprint,
            reason: reason.as_str(),
            body_bytes: delivery.body.len() as i64,
            job_id,
        };
        if self.ledger.record_rejected_message(&record).await.is_err() {
            return Outcome::LedgerUnavailable;
        }
        // Dead-letter it by hand so it stops circulating; without a dead-letter queue it stays
        // and the queue's own redrive policy (or retention) decides.
        if let Some(dlq) = self.queue.dead_letters() {
            if dlq.send(&delivery.body, Duration::ZERO).await.is_ok() {
                let _ = self.queue.delete(&delivery.receipt).await;
                if let Some(job_id) = job_id {
                    let event = NewEvent::new(EventKind::MovedToDlq, &self.actor())
                        .delivery(delivery_ref(
                            &delivery.message_id,
                            delivery.receive_count,
                            &delivery.receipt,
                        ))
                        .detail(detail::MovedToDlq {
                            reason: reason.as_str().to_owned(),
                            ..Default::default()
                        });
                    self.event(job_id, event).await;
                }
            }
        }
        Outcome::Rejected(reason.as_str())
    }

    /// Examines one delivery and does what the job record allows.
    ///
    /// A delivery's future lives as long as its model call, and is as large as the largest
    /// state it may pass through: every path but the common one (claimed straight from the
    /// delivery, then the call) runs boxed, so it takes memory only while it runs.
    pub(crate) fn handle_delivery(
        &self,
        delivery: Delivery,
    ) -> impl std::future::Future<Output = Outcome> + Send + '_ {
        use futures_util::future::Either;
        // Not an `async fn`: its state would hold the delivery beside the one it hands on.
        if crate::telemetry::enabled() {
            Either::Left(Box::pin(self.handle_traced(delivery)))
        } else {
            Either::Right(self.handle(delivery))
        }
    }

    /// [`Self::handle`] in a span of its own that continues the job's trace: the trace context
    /// it was submitted in is read first.
    async fn handle_traced(&self, delivery: Delivery) -> Outcome {
        use tracing::Instrument;
        let message = message::parse(&delivery.body).ok();
        let job_id = message.as_ref().map(|m| m.job_id.as_str());
        let span = tracing::info_span!(
            target: crate::telemetry::TARGET,
            "delivery",
            otel.kind = "consumer",
            job_id,
            tenant = message.as_ref().map(|m| m.tenant.as_str()),
            worker = self.config.worker_id.as_str(),
            message_id = delivery.message_id.as_str(),
            receive_count = delivery.receive_count,
            epoch = tracing::field::Empty,
            outcome = tracing::field::Empty,
        );
        if let Some(job_id) = job_id {
            let parent = self.ledger.job_traceparent(job_id).await.ok().flatten();
            crate::telemetry::continue_from(&span, parent.as_deref());
        }
        let outcome = self.handle(delivery).instrument(span.clone()).await;
        span.record("outcome", outcome.label().as_str());
        outcome
    }

    async fn handle(&self, delivery: Delivery) -> Outcome {
        let message = match message::parse(&delivery.body) {
            Ok(message) => message,
            Err(bad) => return Box::pin(self.reject(&delivery, bad, None)).await,
        };
        let JobMessage { job_id, tenant } = message;
        if self
            .fault(&job_id, FaultPoint::WorkerCrashOnReceive)
            .is_some()
        {
            // The process died between the receive and the examination: nothing is written,
            // and the message comes back when its visibility lapses.
            return Outcome::Stopped("crashed_on_receive".into());
        }
        if let Some(outcome) = self.claim_fresh(&job_id, &tenant, &delivery).await {
            return outcome;
        }
        Box::pin(self.examine(&job_id, &tenant, delivery)).await
    }

    /// The long way: reads the job first, then does what its state allows.
    async fn examine(&self, job_id: &str, tenant: &str, delivery: Delivery) -> Outcome {
        let job = match Box::pin(self.ledger.job(job_id)).await {
            Ok(Some(job)) => job,
            Ok(None) => {
                return Box::pin(self.reject(&delivery, BadMessage::UnknownJob, None)).await
            }
            Err(_) => return Outcome::LedgerUnavailable,
        };
        if job.tenant != tenant {
            return Box::pin(self.reject(&delivery, BadMessage::WrongTenant, Some(job_id))).await;
        }
        let dref = delivery_ref(
            &delivery.message_id,
            delivery.receive_count,
            &delivery.receipt,
        );
        let received = NewEvent::new(EventKind::DeliveryReceived, &self.actor())
            .delivery(dref.clone())
            .detail(detail::DeliveryReceived {
                state: job.state.as_str().to_owned(),
            });
        if matches!(job.state, JobState::Ready | JobState::RetryAuthorized) {
            // The common case: the receive is recorded with the claim, in one transaction.
            return Box::pin(self.claim_and_run(job, delivery, dref, Some(received))).await;
        }
        Box::pin(self.event(job_id, received)).await;
        if job.state.is_terminal() && self.sabotaged(Safeguard::AckTerminalWithoutInference) {
            return self.work_blindly(&job, &delivery, &dref).await;
        }
        if job.state.is_terminal() {
            return Box::pin(self.ack_terminal(job_id, &delivery, &dref, job.state)).await;
        }
        Box::pin(self.claim_and_run(job, delivery, dref, None)).await
    }

    /// The common case without a read first: the job is claimable and the message's tenant
    /// is its own, and the claim (with the receive, the first attempt and the job's input)
    /// goes in the next group commit. `None` when it did not go through: nothing was
    /// written, and the job is examined the long way.
    async fn claim_fresh(
        &self,
        job_id: &str,
        tenant: &str,
        delivery: &Delivery,
    ) -> Option<Outcome> {
        let dref = delivery_ref(
            &delivery.message_id,
            delivery.receive_count,
            &delivery.receipt,
        );
        let asked = std::time::Instant::now();
        let (job, claimed, attempt, input) = {
            // The claim fills in the state it found.
            let received =
                NewEvent::new(EventKind::DeliveryReceived, &self.actor()).delivery(dref.clone());
            Box::pin(self.ledger.claim_received(
                job_id,
                tenant,
                &self.config.worker_id,
                self.config.timings.lease,
                &received,
                self.provider.name(),
            ))
            .await
            .ok()??
        };
        // Boxed: a delivery holds its job for as long as its call runs.
        let job = Box::new(job);
        let started = Started {
            claimed,
            asked,
            attempt,
            input,
            adopting: None,
        };
        Some(self.run_attempt(&job, started, delivery, &dref).await)
    }

    async fn ack_terminal(
        &self,
        job_id: &str,
        delivery: &Delivery,
        dref: &DeliveryRef,
        state: JobState,
    ) -> Outcome {
        self.event(
            job_id,
            NewEvent::new(EventKind::DeliveryAckedTerminal, &self.actor())
                .delivery(dref.clone())
                .detail(detail::DeliveryAckedTerminal {
                    state: state.as_str().to_owned(),
                }),
        )
        .await;
        self.delete(job_id, delivery, dref, None, "terminal").await;
        Outcome::AckedTerminal
    }

    /// A live owner holds the job: no inference, no delete. The copy is pushed out for as long
    /// as the ledger makes safe — towards the job's deadline, within the queue's 12-hour cap —
    /// rather than for a short, fixed time: each early return would burn one of its receives
    /// and walk a healthy long job's copy into the dead-letter queue. Nothing waits on the
    /// copy meanwhile: if the owner finishes, the copy comes back to a terminal job and is
    /// acknowledged; if the owner dies, the reaper recovers the job and the outbox sends it
    /// again.
    async fn suppress_duplicate(
        &self,
        job: &Job,
        delivery: &Delivery,
        dref: &DeliveryRef,
        epoch: i64,
    ) -> Outcome {
        let job_id = job.job_id.as_str();
        let t = &self.config.timings;
        // The deadline is fixed at creation: the job in hand has it; only the clock is read.
        let to_deadline = match self.ledger.now_us().await {
            Ok(now) => db_span(now, job.deadline_at) + t.margin,
            Err(_) => t.duplicate_wait,
        };
        let first_receive = delivery.first_receive_at_ms.unwrap_or_else(now_ms);
        let wait = to_deadline
            .max(t.duplicate_wait)
            .min(cap_left(first_receive, now_ms(), t.margin))
            .min(MAX_VISIBILITY);
        let pushed = self.queue.change_visibility(&delivery.receipt, wait).await;
        self.event(
            job_id,
            NewEvent::new(EventKind::DuplicateSuppressed, &self.actor())
                .delivery(dref.clone())
                .detail(detail::DuplicateSuppressed {
                    owner_epoch: epoch,
                    defer_ms: wait.as_millis() as i64,
                    visibility: Some(
                        match &pushed {
                            Ok(()) => "pushed",
                            Err(e) => e.code(),
                        }
                        .to_owned(),
                    ),
                }),
        )
        .await;
        Outcome::DuplicateSuppressed
    }

    async fn hand_to_ledger(
        &self,
        job_id: &str,
        delivery: &Delivery,
        dref: &DeliveryRef,
        state: JobState,
    ) -> Outcome {
        self.delete(
            job_id,
            delivery,
            dref,
            None,
            &format!("ledger_holds_{}", state.as_str()),
        )
        .await;
        Outcome::HandedToLedger(state)
    }

    async fn claim_and_run(
        &self,
        job: Job,
        delivery: Delivery,
        dref: DeliveryRef,
        mut received: Option<NewEvent>,
    ) -> Outcome {
        // Boxed: a delivery holds its job for as long as its call runs.
        let job = Box::new(job);
        let job_id = job.job_id.clone();
        let worker = self.config.worker_id.clone();
        let t = &self.config.timings;
        // A few rounds at most: a recovery may make the job claimable, a claim may race.
        for _ in 0..3 {
            // The lease and the deadline are counted on the monotonic clock from just before
            // the claim was asked: never later than the database's own view of them.
            let asked = std::time::Instant::now();
            let claim = match &received {
                // The worker's common case: in the next group commit of claims, with the
                // job's input read in the same transaction.
                Some(event) => {
                    Box::pin(self.ledger.claim_delivered(
                        &job_id,
                        &job.tenant,
                        &worker,
                        t.lease,
                        event,
                        self.provider.name(),
                    ))
                    .await
                }
                None => Box::pin(self.ledger.claim_and_start(
                    &job_id,
                    &worker,
                    t.lease,
                    None,
                    self.provider.name(),
                ))
                .await
                .map(|(claimed, attempt)| (claimed, attempt, None)),
            };
            if claim.is_err() {
                // Refused: the receive still belongs on the timeline, on its own.
                if let Some(event) = received.take() {
                    Box::pin(self.event(&job_id, event)).await;
                }
            }
            let refusal = match claim {
                Ok((claimed, attempt, input)) => {
                    let started = Started {
                        claimed,
                        asked,
                        attempt,
                        input,
                        adopting: None,
                    };
                    return self.run_attempt(&job, started, &delivery, &dref).await;
                }
                Err(LedgerError::Refused { refusal, .. }) => refusal,
                Err(_) => return Outcome::LedgerUnavailable,
            };
            if let Some(outcome) = Box::pin(self.refused(&job, &delivery, &dref, refusal)).await {
                return outcome;
            }
        }
        Outcome::Deferred
    }

    /// What a refused claim leaves to do: an outcome, or `None` to try the claim again.
    async fn refused(
        &self,
        job: &Job,
        delivery: &Delivery,
        dref: &DeliveryRef,
        refusal: Refusal,
    ) -> Option<Outcome> {
        let job_id = job.job_id.as_str();
        let t = &self.config.timings;
        let outcome = match refusal {
            Refusal::LiveOwner { .. } if self.sabotaged(Safeguard::SuppressLiveOwnerCopies) => {
                self.work_blindly(job, delivery, dref).await
            }
            Refusal::LiveOwner { epoch } => {
                // Recovery holds the job's attempt for a worker to adopt: this one does.
                if job.owner_id.as_deref() == Some(crate::ledger::HELD_FOR_ADOPTION) {
                    if let Some(outcome) =
                        self.adopt(job, delivery, dref, "held_for_adoption").await
                    {
                        return Some(outcome);
                    }
                }
                self.suppress_duplicate(job, delivery, dref, epoch).await
            }
            Refusal::LeaseExpired => {
                // An attempt in flight whose provider id was kept is adopted, not lost.
                if let Some(outcome) = self.adopt(job, delivery, dref, "lease_expired").await {
                    return Some(outcome);
                }
                // Recovery first: fence the old owner, then the state table decides.
                match self
                    .ledger
                    .recovery_claim(job_id, &self.actor(), "lease_expired", false)
                    .await
                {
                    Ok(r) if r.state == JobState::Unknown => {
                        if self.sabotaged(Safeguard::WaitForDecision) {
                            self.decide_without_waiting(job_id, r.epoch).await;
                            return None;
                        }
                        if job.replay_policy == ReplayPolicy::ReplayOnUnknown
                            && matches!(
                                self.ledger.apply_replay_policy(job_id, r.epoch).await,
                                Ok(true)
                            )
                        {
                            return None;
                        }
                        self.hand_to_ledger(job_id, delivery, dref, JobState::Unknown)
                            .await
                    }
                    Ok(_) => return None,
                    Err(LedgerError::Refused {
                        refusal: Refusal::LiveOwner { epoch },
                        ..
                    }) => self.suppress_duplicate(job, delivery, dref, epoch).await,
                    Err(LedgerError::Refused { .. }) => return None,
                    Err(_) => Outcome::LedgerUnavailable,
                }
            }
            Refusal::AlreadyTerminal(state) => {
                self.ack_terminal(job_id, delivery, dref, state).await
            }
            Refusal::DeadlinePassed | Refusal::BudgetExhausted => {
                // The claim has moved the job to its terminal state.
                match self.ledger.job(job_id).await {
                    Ok(Some(j)) if j.state.is_terminal() => {
                        self.ack_terminal(job_id, delivery, dref, j.state).await
                    }
                    Ok(Some(j)) => self.hand_to_ledger(job_id, delivery, dref, j.state).await,
                    _ => Outcome::LedgerUnavailable,
                }
            }
            Refusal::WrongState(JobState::Unknown)
                if self.sabotaged(Safeguard::WaitForDecision) =>
            {
                if let Ok(Some(now)) = self.ledger.job(job_id).await {
                    self.decide_without_waiting(job_id, now.owner_epoch).await;
                }
                return None;
            }
            Refusal::WrongState(JobState::Unknown) => {
                self.hand_to_ledger(job_id, delivery, dref, JobState::Unknown)
                    .await
            }
            Refusal::BackoffPending => {
                // Both instants on the database clock: a worker's wall clock may drift.
                let wait = match (self.ledger.job(job_id).await, self.ledger.now_us().await) {
                    (
                        Ok(Some(Job {
                            retry_at: Some(at), ..
                        })),
                        Ok(now),
                    ) => db_span(now, at).min(MAX_VISIBILITY),
                    _ => t.duplicate_wait,
                };
                let _ = self.queue.change_visibility(&delivery.receipt, wait).await;
                self.event(
                    job_id,
                    NewEvent::new(EventKind::DeliveryDeferred, &self.actor())
                        .delivery(dref.clone())
                        .detail(detail::DeliveryDeferred {
                            reason: "backoff".to_owned(),
                            defer_ms: wait.as_millis() as i64,
                        }),
                )
                .await;
                Outcome::Deferred
            }
            _ => return None,
        };
        Some(outcome)
    }

    /// Adopts the job's attempt in flight when its provider id was kept and this worker's
    /// provider can poll it: the job stays `running` under a new epoch owned here, and the
    /// same attempt is polled to its end. `None` when there was nothing to adopt.
    async fn adopt(
        &self,
        job: &Job,
        delivery: &Delivery,
        dref: &DeliveryRef,
        reason: &str,
    ) -> Option<Outcome> {
        let asked = std::time::Instant::now();
        // Any provider of this worker's that runs requests in the background may have run
        // the attempt (its own, or one a route moved the job on to): the ledger adopts it only
        // for the provider that did.
        let mut adopted = None;
        for provider in std::iter::once(&self.provider).chain(&self.fallbacks) {
            if !provider.retains() {
                continue;
            }
            match Box::pin(self.ledger.adopt(
                &job.job_id,
                &self.config.worker_id,
                (self.config.timings.lease, provider.name()),
                reason,
            ))
            .await
            {
                Ok(Some(found)) => {
                    adopted = Some(found);
                    break;
                }
                Ok(None) | Err(LedgerError::Refused { .. }) => {}
                Err(_) => return Some(Outcome::LedgerUnavailable),
            }
        }
        let adopted = adopted?;
        let started = Started {
            claimed: adopted.claimed,
            asked,
            attempt: adopted.attempt,
            input: None,
            adopting: Some(adopted.provider_id),
        };
        Some(Box::pin(self.run_attempt(job, started, delivery, dref)).await)
    }

    async fn run_attempt(
        &self,
        job: &Job,
        started: Started,
        delivery: &Delivery,
        dref: &DeliveryRef,
    ) -> Outcome {
        let Started {
            claimed,
            asked,
            attempt,
            input,
            adopting,
        } = started;
        // A drill's faults aimed at the job's first owner find it by this receipt.
        if let Some(faults) = &self.config.faults {
            faults.note_claim(&delivery.receipt.fingerprint(), &job.job_id);
        }
        let job_id = job.job_id.as_str();
        let epoch = claimed.epoch;
        let progress = Progress::default();
        let (stop_tx, mut stop_rx) = watch::channel(None::<StopReason>);
        let registered = self.registry.insert(
            job_id,
            epoch,
            InFlight {
                receipt: delivery.receipt.clone(),
                delivery: dref.clone(),
                first_receive_at_ms: delivery.first_receive_at_ms.unwrap_or_else(now_ms),
                deadline: asked + db_span(claimed.at, claimed.deadline_at),
                lease_confirmed_until: asked + db_span(claimed.at, claimed.owner_until),
                next_renewal: std::time::Instant::now() + self.config.timings.heartbeat,
                progress: progress.clone(),
                stop: stop_tx,
                span: tracing::Span::current(),
            },
        );
        tracing::Span::current().record("epoch", epoch);
        // Refusals this job met before, for the wait after another one.
        let refused_before = claimed.attempt_count - claimed.budget_used;
        let deadline = asked + db_span(claimed.at, claimed.deadline_at);
        let outcome = self
            .attempt(
                job,
                &claimed.owner,
                (attempt, refused_before, deadline),
                (input, adopting),
                &claimed,
                delivery,
                dref,
                progress,
                &mut stop_rx,
            )
            .await;
        drop(registered);
        outcome
    }

    /// Runs the attempt the claim recorded: the durable record came first, so a stale owner
    /// could not even have started it.
    #[allow(clippy::too_many_arguments)]
    async fn attempt(
        &self,
        job: &Job,
        owner: &Owner,
        (attempt, refused_before, deadline): (AttemptStarted, i64, std::time::Instant),
        (input, adopting): (Option<(Value, Value)>, Option<String>),
        claimed: &crate::ledger::Claimed,
        delivery: &Delivery,
        dref: &DeliveryRef,
        progress: Progress,
        stop: &mut watch::Receiver<Option<StopReason>>,
    ) -> Outcome {
        let job_id = job.job_id.as_str();
        let input = match input {
            Some(input) => Some(input),
            None => Box::pin(self.ledger.job_input(job_id)).await.ok().flatten(),
        };
        let Some((input, mut model)) = input else {
            return Outcome::LedgerUnavailable;
        };
        // The job's route: its own `fallback`, taken out of the parameters the provider gets,
        // and the pair its attempts go to now.
        let route = &claimed.route;
        let own = model.as_object_mut().and_then(|p| p.remove("fallback"));
        let routing = self.routing((&job.tenant, own), route, claimed.at);
        if let Some(params) = model.as_object_mut() {
            if let Some(routed) = &route.model {
                params.insert("model".into(), Value::String(routed.clone()));
            }
        }
        let request = ProviderRequest {
            job_id: job_id.to_owned(),
            attempt_no: attempt.attempt_no,
            client_request_id: attempt.client_request_id(job_id),
            input,
            model,
        };
        let crash = self.fault(job_id, FaultPoint::WorkerCrash);
        let crashed = async {
            match crash {
                Some(after) => tokio::time::sleep(after).await,
                None => std::future::pending().await,
            }
        };
        let key = match routing.provider {
            Some(provider) => Key::new(provider.name(), &provider.model_of(&request)),
            None => Key::new(
                route.provider.as_deref().unwrap_or_default(),
                route.model.as_deref().unwrap_or_default(),
            ),
        };
        // When the request went to the provider, so a call stopped early can say how long it ran.
        let sent = std::sync::OnceLock::<std::time::Instant>::new();
        // The provider's id of the attempt running in the background, once it is kept.
        let submitted = std::sync::OnceLock::<String>::new();
        let traced = tracing::info_span!(
            target: crate::telemetry::TARGET,
            "provider.attempt",
            otel.kind = "client",
            job_id,
            tenant = job.tenant.as_str(),
            epoch = claimed.epoch,
            attempt = attempt.attempt_no,
            provider = key.provider.as_str(),
            model = key.model.as_str(),
            provider.request_id = tracing::field::Empty,
            outcome = tracing::field::Empty,
        );
        self.keep_attempt_trace(job_id, attempt.attempt_no, &traced);
        // The call waits for the provider's limit (a named reset, room within the learned
        // concurrency, a token of its bucket) before it is sent, its lease renewed meanwhile.
        let call = tracing::Instrument::instrument(
            async {
                let Some(provider) = routing.provider else {
                    // The route names a provider this worker cannot call: held, never sent.
                    return ProviderOutcome::Throttled {
                        code: PROVIDER_NOT_HERE.into(),
                        request_id: None,
                        limits: RateLimits::default(),
                    };
                };
                // An adopted attempt runs already: it is polled, never sent again, and never
                // waits for the limit (a poll runs no model).
                if let Some(provider_id) = &adopting {
                    let _ = submitted.set(provider_id.clone());
                    let _ = sent.set(std::time::Instant::now());
                    progress.tick();
                    return provider.poll(provider_id, progress).await;
                }
                // Waiting for the provider is not a call that hangs: the progress rule counts from
                // the send. A job the limit holds back longer than a short while goes back to the
                // ledger unsent, to wait there (no lease held, no budget spent) for the limit's
                // reset.
                let t = &self.config.timings;
                let acquire =
                    self.limits
                        .acquire_within(&key, pause_bound(t), before_deadline(t, deadline));
                tokio::pin!(acquire);
                let acquired = loop {
                    tokio::select! {
                        acquired = &mut acquire => break acquired,
                        () = tokio::time::sleep(Duration::from_secs(1)) => progress.tick(),
                    }
                };
                let permit = match acquired {
                    Ok(permit) => permit,
                    Err(wait) => {
                        return ProviderOutcome::Throttled {
                            code: HELD_BY_LIMIT.into(),
                            request_id: None,
                            limits: RateLimits {
                                retry_after: Some(wait),
                                ..RateLimits::default()
                            },
                        }
                    }
                };
                progress.tick();
                let _ = sent.set(std::time::Instant::now());
                if provider.retains() {
                    let provider_id = match provider.submit(request, progress.clone()).await {
                        Submission::Accepted {
                            provider_id,
                            limits,
                            ..
                        } => {
                            permit.answered(Answer::Admitted, &limits);
                            provider_id
                        }
                        Submission::Ended(outcome) => {
                            let (answer, limits) = match &outcome {
                                ProviderOutcome::Throttled { limits, .. } => {
                                    (Answer::Refused, *limits)
                                }
                                ProviderOutcome::Succeeded { limits, .. } => {
                                    (Answer::Admitted, *limits)
                                }
                                _ => (Answer::Admitted, RateLimits::default()),
                            };
                            permit.answered(answer, &limits);
                            return outcome;
                        }
                    };
                    // Kept before any waiting: from here on the attempt is never uncertain.
                    if let Err(outcome) = self
                        .keep_submitted(provider, owner, attempt.attempt_no, &provider_id)
                        .await
                    {
                        return outcome;
                    }
                    let _ = submitted.set(provider_id.clone());
                    return provider.poll(&provider_id, progress).await;
                }
                let outcome = provider.call(request, progress).await;
                let (answer, limits) = match &outcome {
                    ProviderOutcome::Throttled { limits, .. } => (Answer::Refused, *limits),
                    ProviderOutcome::Succeeded { limits, .. } => (Answer::Admitted, *limits),
                    _ => (Answer::Admitted, RateLimits::default()),
                };
                permit.answered(answer, &limits);
                outcome
            },
            traced.clone(),
        );
        let stopped = async {
            loop {
                if let Some(reason) = stop.borrow_and_update().clone() {
                    return reason;
                }
                if stop.changed().await.is_err() {
                    return StopReason::Shutdown;
                }
            }
        };
        let result = tokio::select! {
            outcome = call => {
                if let Some(id) = outcome.request_id() {
                    traced.record("provider.request_id", id);
                }
                traced.record("outcome", outcome.label());
                Ok(outcome)
            }
            reason = stopped => Err(reason),
            // The process died: the call is abandoned and nothing more is written or sent.
            () = crashed => return Outcome::Stopped("crashed".into()),
        };
        // How long a call stopped before its answer had run, measured now (not after a
        // drill's pause below).
        let result = result.map_err(|reason| (reason, sent.get().map(|at| at.elapsed())));
        // A drill freezes the process once its call has come back, however long the call
        // took: it renews nothing and receives nothing meanwhile, and resumes where it was,
        // with an answer to commit.
        if let Some(hold) = self.fault(job_id, FaultPoint::WorkerPause) {
            if let Some(faults) = &self.config.faults {
                let until = std::time::Instant::now() + hold;
                faults.pause(job_id, &self.config.worker_id, until);
                faults.pause_worker(&self.config.worker_id, until);
                tokio::time::sleep_until(until.into()).await;
            }
        }
        Box::pin(self.finish(
            job,
            owner,
            (
                &attempt,
                refused_before,
                &key,
                submitted.get().map(String::as_str),
            ),
            result,
            (delivery, dref),
            &routing,
        ))
        .await
    }

    /// Keeps an attempt's trace context for the job page's link, beside the attempt (only
    /// while traces are sent; never in the attempt's way).
    fn keep_attempt_trace(&self, job_id: &str, attempt_no: i64, span: &tracing::Span) {
        let Some(traceparent) = crate::telemetry::traceparent_of(span) else {
            return;
        };
        let (ledger, job_id) = (self.ledger.clone(), job_id.to_owned());
        tokio::spawn(async move {
            if let Err(error) = ledger
                .keep_attempt_trace(&job_id, attempt_no, &traceparent)
                .await
            {
                tracing::debug!(%error, job_id, "an attempt's trace context was not kept");
            }
        });
    }

    /// The provider a job's attempt goes to and its route after it: the route's pair's
    /// provider when the job moved on (`None` when this worker cannot call it), else the
    /// worker's own.
    fn routing<'a>(
        &'a self,
        (tenant, own): (&'a str, Option<Value>),
        route: &'a Route,
        claimed_at: i64,
    ) -> Routing<'a, P> {
        let provider = match route.provider.as_deref() {
            None => Some(&self.provider),
            Some(name) if name == self.provider.name() => Some(&self.provider),
            Some(name) => self.fallbacks.iter().find(|p| p.name() == name),
        };
        Routing {
            provider,
            route,
            tenant,
            own,
            claimed_at,
        }
    }

    /// The next pair of the job's route when this refusal moves it on: the pair has refused
    /// it for longer than the routes allow (the wait still asked counted), or its model is
    /// not ready. `None` while it waits for the same pair, or at the route's end.
    fn fallback(
        &self,
        routing: &Routing<'_, P>,
        key: &Key,
        error_code: &str,
        wait: Duration,
    ) -> Option<detail::ProviderFallback> {
        let step = routing.route.step;
        let pairs = self.config.routes.of(routing.tenant, routing.own.as_ref());
        let next = pairs.get(usize::try_from(step).ok()?)?;
        let refused_for = routing
            .route
            .since
            .map_or(Duration::ZERO, |since| db_span(since, routing.claimed_at));
        let after = self.config.routes.after;
        let reason = route::moves_on(error_code, refused_for, wait, after)?;
        let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        Some(detail::ProviderFallback {
            from_provider: key.provider.clone(),
            from_model: key.model.clone(),
            to_provider: next.provider.clone(),
            to_model: next.model.clone(),
            step: step + 1,
            reason: reason.to_owned(),
            error_code: error_code.to_owned(),
            refused_for_ms: ms(refused_for),
            retry_in_ms: ms(wait),
            after_ms: ms(after),
        })
    }

    /// Keeps the provider's id of the attempt on its record, fenced, retrying a ledger that
    /// does not answer. An id that cannot be kept is cancelled at the provider (no later owner
    /// could find the response), and the attempt is uncertain: it was sent.
    async fn keep_submitted(
        &self,
        provider: &P,
        owner: &Owner,
        attempt_no: i64,
        provider_id: &str,
    ) -> Result<(), ProviderOutcome> {
        // A ledger that does not answer is asked again for as long as a lease lasts: the
        // heartbeat keeps the lease meanwhile, or stops this call when it cannot.
        let until = std::time::Instant::now() + self.config.timings.lease;
        let mut wait = Duration::from_millis(200);
        loop {
            match Box::pin(self.ledger.record_submitted(
                owner,
                attempt_no,
                provider.name(),
                provider_id,
            ))
            .await
            {
                Ok(()) => return Ok(()),
                Err(LedgerError::Refused { .. }) => break,
                Err(_) if std::time::Instant::now() + wait < until => {
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(Duration::from_secs(5));
                }
                Err(_) => break,
            }
        }
        let running = (provider, provider_id);
        self.cancel_upstream(
            owner.job_id(),
            owner.epoch,
            attempt_no,
            running,
            "id_not_kept",
        )
        .await;
        Err(ProviderOutcome::Uncertain {
            code: "id_not_kept".into(),
            request_id: None,
        })
    }

    /// Cancels the attempt running in the background at the provider, and says so on the
    /// timeline (best effort: the ledger may be what failed).
    async fn cancel_upstream(
        &self,
        job_id: &str,
        epoch: i64,
        attempt_no: i64,
        (provider, provider_id): (&P, &str),
        why: &str,
    ) -> bool {
        let answer =
            match tokio::time::timeout(Duration::from_secs(10), provider.cancel(provider_id)).await
            {
                Ok(Ok(())) => "cancelled".to_owned(),
                Ok(Err(code)) => code,
                Err(_) => "timeout".to_owned(),
            };
        let cancelled = answer == "cancelled";
        let event = NewEvent::new(EventKind::UpstreamCancelled, &self.actor())
            .epoch(epoch)
            .attempt(attempt_no)
            .detail(detail::UpstreamCancelled {
                provider_id: provider_id.to_owned(),
                why: why.to_owned(),
                answer,
            });
        let bound = self.config.timings.lease.max(Duration::from_secs(5));
        let _ = tokio::time::timeout(bound, self.event(job_id, event)).await;
        cancelled
    }

    /// Cancels a call stopped by the progress rule at the provider, when it runs there under
    /// an id: whether the provider says it runs no more.
    async fn cancelled_upstream(
        &self,
        job_id: &str,
        epoch: i64,
        attempt_no: i64,
        submitted: Option<(&P, &str)>,
    ) -> bool {
        let Some(running) = submitted else {
            return false;
        };
        // Only the attempt this owner still holds: never one a new owner polls.
        let mine = matches!(
            self.ledger.job(job_id).await,
            Ok(Some(job)) if job.owner_epoch == epoch && job.pending_attempt == Some(attempt_no)
        );
        if !mine {
            return false;
        }
        let why = StopReason::NoProgress.code();
        self.cancel_upstream(job_id, epoch, attempt_no, running, why)
            .await
    }

    /// Whether an attempt running in the background should be cancelled now that its owner
    /// lost the job: yes when the job moved on without it (cancelled, ended, handed to a
    /// decision); no while it is still the job's attempt in flight, for whoever adopts it.
    async fn orphaned(&self, job_id: &str, attempt_no: i64) -> Option<&'static str> {
        let job = self.ledger.job(job_id).await.ok()??;
        if job.state == JobState::Running && job.pending_attempt == Some(attempt_no) {
            return None;
        }
        Some(if job.error_code.as_deref() == Some("cancelled") {
            "cancelled"
        } else {
            "fenced_out"
        })
    }

    /// Records what the call came to, and deletes the message once the outcome is durable. A
    /// call stopped before it answered comes with how long it had run, if it was sent at all.
    async fn finish(
        &self,
        job: &Job,
        owner: &Owner,
        (attempt, refused_before, key, submitted): (&AttemptStarted, i64, &Key, Option<&str>),
        result: Result<ProviderOutcome, (StopReason, Option<Duration>)>,
        (delivery, dref): (&Delivery, &DeliveryRef),
        routing: &Routing<'_, P>,
    ) -> Outcome {
        let job_id = job.job_id.as_str();
        let epoch = owner.epoch;
        // The attempt running in the background, and the provider it runs at.
        let submitted = submitted.map(|id| (routing.provider.unwrap_or(&self.provider), id));
        // The provider's own id for a request that did not answer is kept on the attempt
        // before its outcome (an answer carries its id into the accept).
        if let Ok(outcome) = &result {
            if let (Some(id), false) = (
                outcome.request_id(),
                matches!(outcome, ProviderOutcome::Succeeded { .. }),
            ) {
                if let Err(e) = self
                    .ledger
                    .set_provider_request_id(owner, attempt.attempt_no, id)
                    .await
                {
                    tracing::warn!(job_id, error = %e, "could not keep the provider's request id");
                }
            }
        }
        match result {
            Ok(ProviderOutcome::Throttled { code, .. })
                if self.sabotaged(Safeguard::RefusalsSpendNoBudget) =>
            {
                // A worker without the safeguard: the refusal spends an attempt.
                let failure = Failure::Retryable {
                    error_code: code,
                    backoff: self.config.timings.backoff(attempt.attempt_no),
                };
                self.record_failure(owner, attempt.attempt_no, &failure, delivery, dref)
                    .await
            }
            Ok(ProviderOutcome::Throttled { code, limits, .. }) => {
                let refusals = u32::try_from(refused_before + 1).unwrap_or(u32::MAX);
                let wait = throttle_wait(limits.wait(), refusals, &self.config.timings);
                // Refused for too long: the next pair of the job's route takes its next
                // attempt at once, within the same deadline and budget.
                let fallback = self.fallback(routing, key, &code, wait);
                let throttle = Throttle {
                    error_code: code,
                    wait: if fallback.is_some() {
                        Duration::ZERO
                    } else {
                        wait
                    },
                    limit: limits.spent().map(str::to_owned),
                    provider: key.provider.clone(),
                    model: key.model.clone(),
                    fallback,
                };
                self.record_throttle(owner, attempt.attempt_no, &throttle, delivery, dref)
                    .await
            }
            Ok(ProviderOutcome::Succeeded {
                answer,
                usage,
                request_id,
                ..
            }) => {
                // What the answer said it used, priced by the model the request named.
                let spend = usage.map(|usage| Spend {
                    cost: self.config.prices.cost(&key.model, &usage),
                    model: key.model.clone(),
                    usage,
                });
                let answer = Answered {
                    body: answer,
                    spend,
                    request_id,
                };
                self.commit(owner, attempt.attempt_no, answer, delivery, dref)
                    .await
            }
            Ok(ProviderOutcome::Retryable { code, .. }) => {
                let backoff = if self.sabotaged(Safeguard::BackOffRetries) {
                    Duration::ZERO
                } else {
                    self.config.timings.backoff(attempt.attempt_no)
                };
                let failure = Failure::Retryable {
                    error_code: code,
                    backoff,
                };
                self.record_failure(owner, attempt.attempt_no, &failure, delivery, dref)
                    .await
            }
            Ok(ProviderOutcome::Fatal { code, .. }) => {
                let failure = Failure::Fatal { error_code: code };
                self.record_failure(owner, attempt.attempt_no, &failure, delivery, dref)
                    .await
            }
            Ok(ProviderOutcome::Uncertain { code, .. }) => {
                // Ask the provider first; only a retrieved answer settles it.
                // Bounded: a slow lookup must not keep this delivery's task alive; the reaper
                // asks again later.
                let retrieved = match routing.provider {
                    Some(provider) => {
                        tokio::time::timeout(
                            Duration::from_secs(10),
                            provider.retrieve(&attempt.client_request_id(job_id)),
                        )
                        .await
                    }
                    None => Ok(Retrieval::Unsupported),
                };
                if let Ok(Retrieval::Found(answer)) = retrieved {
                    return self
                        .commit(owner, attempt.attempt_no, answer.into(), delivery, dref)
                        .await;
                }
                self.release(job, owner, &format!("provider_{code}"), delivery, dref)
                    .await
            }
            Err((StopReason::LeaseLost(code), ran)) => {
                // A response running in the background that the job no longer waits for is
                // cancelled; one that is still the job's attempt in flight is left to be
                // adopted.
                if let Some(running) = submitted {
                    if let Some(why) = self.orphaned(job_id, attempt.attempt_no).await {
                        self.cancel_upstream(job_id, epoch, attempt.attempt_no, running, why)
                            .await;
                    }
                }
                // The call is already cancelled (its future dropped). Stop new attempts and
                // effects; never set visibility to zero while a stale owner could still
                // commit. Recovery follows the state table. The record says what became of
                // the call (stopped here after running so long, or never sent); it is best
                // effort: the ledger may be what stopped answering.
                let call = detail::LeaseLost {
                    reason: code.to_string(),
                    call: Some(if ran.is_some() { "stopped" } else { "not_sent" }.to_owned()),
                    call_ran_ms: ran.map(|ran| i64::try_from(ran.as_millis()).unwrap_or(i64::MAX)),
                };
                let event = NewEvent::new(EventKind::LeaseLost, &self.actor())
                    .epoch(epoch)
                    .attempt(attempt.attempt_no)
                    .delivery(dref.clone())
                    .detail(call);
                let bound = self.config.timings.lease.max(Duration::from_secs(5));
                if tokio::time::timeout(bound, self.event(job_id, event))
                    .await
                    .is_err()
                {
                    tracing::warn!(job_id, "could not record lease_lost in time");
                }
                Outcome::Stopped(format!("lease_lost:{code}"))
            }
            Err((StopReason::DeadlineReached, _)) => {
                if let Some(running) = submitted {
                    self.cancel_upstream(job_id, epoch, attempt.attempt_no, running, "deadline")
                        .await;
                }
                if let Ok(true) = self.ledger.expire_if_due(job_id, &self.actor()).await {
                    self.delete(job_id, delivery, dref, Some(epoch), "expired")
                        .await;
                }
                Outcome::Stopped("deadline_reached".into())
            }
            // A response running in the background outlives this process: left for a worker
            // to adopt once the lease lapses.
            Err((StopReason::Shutdown, _)) if submitted.is_some() => {
                Outcome::Stopped(StopReason::Shutdown.code().into())
            }
            // A stopped call is cancelled at the provider: once it says so, the model runs no
            // more and another attempt may follow.
            Err((StopReason::NoProgress, _))
                if self
                    .cancelled_upstream(job_id, epoch, attempt.attempt_no, submitted)
                    .await =>
            {
                let failure = Failure::Retryable {
                    error_code: StopReason::NoProgress.code().to_owned(),
                    backoff: self.config.timings.backoff(attempt.attempt_no),
                };
                self.record_failure(owner, attempt.attempt_no, &failure, delivery, dref)
                    .await
            }
            Err((reason @ (StopReason::NoProgress | StopReason::Shutdown), _)) => {
                match self
                    .release(job, owner, reason.code(), delivery, dref)
                    .await
                {
                    Outcome::HandedToLedger(_) => Outcome::Stopped(reason.code().into()),
                    other => other,
                }
            }
        }
    }

    async fn commit(
        &self,
        owner: &Owner,
        attempt_no: i64,
        answer: Answered,
        delivery: &Delivery,
        dref: &DeliveryRef,
    ) -> Outcome {
        let (job_id, epoch) = (owner.job_id(), owner.epoch);
        #[cfg(feature = "sabotage")]
        if self.sabotaged(Safeguard::FenceCommits) {
            let _ = attempt_no;
            let _ = answer;
            if self
                .ledger
                .sabotaged_accept(job_id, epoch, &self.actor())
                .await
                .is_ok()
            {
                self.delete(job_id, delivery, dref, Some(epoch), "succeeded")
                    .await;
                return Outcome::Succeeded;
            }
        }
        // On the embedded queue the delete goes in the accept's own transaction.
        let plan = self.queue.delete_plan(&self.ledger, &delivery.receipt);
        let reason = "succeeded";
        let with_outcome = match &plan {
            DeletePlan::WithOutcome(message) => Some(AcceptDelete {
                message: message.clone(),
                deleted: self.delete_event(&Ok(Deleted::Reported), dref, Some(epoch), reason),
                not_deleted: self.delete_event(
                    &Ok(Deleted::NothingDeleted),
                    dref,
                    Some(epoch),
                    reason,
                ),
            }),
            _ => None,
        };
        // A transient ledger error is retried while the lease may still be valid; a refusal
        // is final and is never followed by an unconditional write.
        for retry in 0..3u32 {
            let accepted = match &with_outcome {
                Some(delete) => {
                    self.ledger
                        .accept_result_deleting(owner, attempt_no, answer.clone(), delete.clone())
                        .await
                }
                None => self
                    .ledger
                    .accept_result(owner, attempt_no, answer.clone())
                    .await
                    .map(|accepted| (accepted, None)),
            };
            match accepted {
                Ok((_, Some(deleted))) => {
                    self.config.metrics.delete(deleted);
                    return Outcome::Succeeded;
                }
                Ok((_, None)) => {
                    match &plan {
                        DeletePlan::Injected(result) => {
                            self.deleted(job_id, result, dref, Some(epoch), reason)
                                .await;
                        }
                        _ => {
                            self.delete(job_id, delivery, dref, Some(epoch), reason)
                                .await
                        }
                    }
                    return Outcome::Succeeded;
                }
                Err(LedgerError::Refused { refusal, .. }) => {
                    return Outcome::Fenced(refusal.code())
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(200 << retry)).await,
            }
        }
        Outcome::LedgerUnavailable
    }

    async fn record_failure(
        &self,
        owner: &Owner,
        attempt_no: i64,
        failure: &Failure,
        delivery: &Delivery,
        dref: &DeliveryRef,
    ) -> Outcome {
        let (job_id, epoch) = (owner.job_id(), owner.epoch);
        match self.ledger.record_failure(owner, attempt_no, failure).await {
            Ok(outcome) => {
                // Retryable: the outbox re-dispatches after the backoff; terminal: done.
                self.delete(job_id, delivery, dref, Some(epoch), outcome.state.as_str())
                    .await;
                Outcome::Failed(outcome.state)
            }
            Err(LedgerError::Refused { refusal, .. }) => Outcome::Fenced(refusal.code()),
            Err(_) => Outcome::LedgerUnavailable,
        }
    }

    async fn record_throttle(
        &self,
        owner: &Owner,
        attempt_no: i64,
        throttle: &Throttle,
        delivery: &Delivery,
        dref: &DeliveryRef,
    ) -> Outcome {
        let (job_id, epoch) = (owner.job_id(), owner.epoch);
        match self
            .ledger
            .record_throttle(owner, attempt_no, throttle)
            .await
        {
            Ok(_) => {
                // The outbox sends the job again at the provider's reset.
                self.delete(job_id, delivery, dref, Some(epoch), "throttled")
                    .await;
                Outcome::Throttled
            }
            Err(LedgerError::Refused { refusal, .. }) => Outcome::Fenced(refusal.code()),
            Err(_) => Outcome::LedgerUnavailable,
        }
    }

    /// Hands the job back while this owner's lease is valid (`unknown` with an attempt in
    /// flight, else `retry_authorized`), then applies a pre-approved replay policy.
    async fn release(
        &self,
        job: &Job,
        owner: &Owner,
        reason: &str,
        delivery: &Delivery,
        dref: &DeliveryRef,
    ) -> Outcome {
        let (job_id, epoch) = (owner.job_id(), owner.epoch);
        match self.ledger.release(owner, reason).await {
            Ok(released) => {
                self.delete(job_id, delivery, dref, Some(released.epoch), "released")
                    .await;
                if released.state == JobState::Unknown
                    && job.replay_policy == ReplayPolicy::ReplayOnUnknown
                    && matches!(
                        self.ledger
                            .apply_replay_policy(job_id, released.epoch)
                            .await,
                        Ok(true)
                    )
                {
                    return Outcome::HandedToLedger(JobState::RetryAuthorized);
                }
                Outcome::HandedToLedger(released.state)
            }
            Err(LedgerError::Refused {
                refusal: Refusal::DeadlinePassed,
                ..
            }) => {
                if let Ok(true) = self.ledger.expire_if_due(job_id, &self.actor()).await {
                    self.delete(job_id, delivery, dref, Some(epoch), "expired")
                        .await;
                }
                Outcome::Stopped("deadline_reached".into())
            }
            Err(LedgerError::Refused { refusal, .. }) => Outcome::Fenced(refusal.code()),
            Err(_) => Outcome::LedgerUnavailable,
        }
    }
}
