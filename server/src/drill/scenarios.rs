//! The scenarios of the catalogue. Each creates its own jobs (tagged with the run), arms its
//! faults on them before they exist, lets the real workers, dispatcher and reaper run, and
//! evaluates its checks from the ledger — the job record, its attempts and its events — never
//! from its own bookkeeping. A check whose evidence cannot be read, or a scenario that never
//! reaches the point it checks, fails.

use std::sync::Mutex;
use std::time::Duration;

use serde_json::json;
use sha2::{Digest, Sha256};

use super::rig::{DrillQueue, Rig, MAX_RECEIVE_COUNT};
use super::{Capture, Check, DrillKind, Evidence, DRILL_TENANT};
use crate::faults::{Arm, FaultPoint as F};
use crate::job::detail;
use crate::job::message::JobMessage;
use crate::job::{Actor, EventKind as K, JobId, JobState};
use crate::ledger::{Attempt, AttemptOutcome, Decision, Event, Job, NewJob, ReplayPolicy};
use crate::queue::Queue;

/// What a scenario found.
pub(crate) struct Outcome {
    pub(crate) checks: Vec<Check>,
    pub(crate) jobs: Vec<Capture>,
    pub(crate) notes: Vec<String>,
    pub(crate) faults_fired: Vec<String>,
}

/// The scenario stopped early; its failing check is already recorded.
struct Stop;
type Step = Result<(), Stop>;

pub(crate) async fn run(kind: DrillKind, rig: &Rig) -> Outcome {
    let ctx = Ctx {
        kind,
        rig,
        checks: Mutex::default(),
        jobs: Mutex::default(),
        notes: Mutex::default(),
    };
    let _ = match kind {
        DrillKind::LiveOwnerSuppressesDuplicate => live_owner_suppresses_duplicate(&ctx).await,
        DrillKind::PausedWorkerStaleEpoch => paused_worker(&ctx).await.map(|_| ()),
        DrillKind::UncertainAttemptRequiresDecision => uncertain_attempt(&ctx).await,
        DrillKind::CommitSurvivesFailedDelete => commit_survives_failed_delete(&ctx).await,
        DrillKind::StaleReceiptHandleDelete => stale_receipt_handle_delete(&ctx).await,
        DrillKind::RenewalTimeoutLeaseValid => renewal_timeout_lease_valid(&ctx).await,
        DrillKind::LeaseRenewalFailure => lease_renewal_failure(&ctx).await,
        DrillKind::DeadlineExhausted => deadline_exhausted(&ctx).await,
        DrillKind::DeliveryAfterDelete => delivery_after_delete(&ctx).await,
        DrillKind::CrashBeforeDispatch => crash_before_dispatch(&ctx).await,
        DrillKind::DlqReplayInspected => dlq_replay_inspected(&ctx).await,
        DrillKind::AttemptBudgetExhausted => attempt_budget_exhausted(&ctx).await,
        DrillKind::WorkerCrashMidCall => worker_crash_mid_call(&ctx).await,
        DrillKind::ProviderRateLimitsABurst => provider_rate_limits_a_burst(&ctx).await,
    };
    ctx.finish().await
}

/// A job as the ledger holds it: the record, its attempts and its timeline.
struct View {
    job: Job,
    events: Vec<Event>,
    attempts: Vec<Attempt>,
}

impl View {
    fn all(&self, kind: K) -> Vec<&Event> {
        self.events.iter().filter(|e| e.kind == kind).collect()
    }

    fn first(&self, kind: K) -> Option<&Event> {
        self.events.iter().find(|e| e.kind == kind)
    }

    fn count(&self, kind: K) -> usize {
        self.events.iter().filter(|e| e.kind == kind).count()
    }

    fn has(&self, kind: K) -> bool {
        self.first(kind).is_some()
    }

    /// The first event of `kind` after `seq`.
    fn after(&self, seq: i64, kind: K) -> Option<&Event> {
        self.events.iter().find(|e| e.seq > seq && e.kind == kind)
    }

    /// The worker that made the first claim, and the epoch it claimed at.
    fn first_owner(&self) -> Option<(&str, i64)> {
        self.first(K::Claimed).map(|e| (e.actor.as_str(), e.epoch))
    }
}

/// Whether a second delivery of the job was examined: suppressed, or (by a broken worker)
/// worked or deleted.
fn second_delivery_examined(v: &View) -> bool {
    v.all(K::DeliveryReceived).get(1).is_some_and(|second| {
        v.events.iter().any(|e| {
            e.seq > second.seq
                && matches!(
                    e.kind,
                    K::DuplicateSuppressed | K::ResultAccepted | K::MessageDeleted
                )
        })
    })
}

struct Ctx<'a> {
    kind: DrillKind,
    rig: &'a Rig,
    checks: Mutex<Vec<Check>>,
    jobs: Mutex<Vec<(String, String)>>,
    notes: Mutex<Vec<String>>,
}

impl Ctx<'_> {
    fn t(&self) -> &crate::worker::Timings {
        &self.rig.timings
    }

    /// How long the scenario waits for anything before it fails.
    fn limit(&self) -> Duration {
        self.t().visibility * 20
    }

    /// The default deadline of a drill job: long enough for every scenario's faults.
    fn deadline(&self) -> Duration {
        self.t().visibility * 30
    }

    /// The deadline of a job whose message the scenario waits to see come back. SQS may hand
    /// the same message to a second receiver while its owner works; that receiver pushes it
    /// out to the job's deadline (so that it does not return while the owner works), and the
    /// message comes back only then: that must fall inside the scenario's wait.
    fn returning_deadline(&self) -> Duration {
        self.limit() / 2
    }

    /// How long the paused-worker scenarios freeze a worker: past visibility and lease.
    fn pause(&self) -> Duration {
        let t = self.t();
        t.visibility + t.lease + t.heartbeat * 3
    }

    fn note(&self, note: impl Into<String>) {
        self.notes.lock().expect("notes lock").push(note.into());
    }

    fn check(&self, name: &str, passed: bool, detail: impl Into<String>, evidence: &[&Event]) {
        self.checks.lock().expect("checks lock").push(Check {
            name: name.into(),
            passed,
            detail: detail.into(),
            evidence: evidence
                .iter()
                .map(|e| Evidence {
                    job_id: e.job_id.clone(),
                    seq: e.seq,
                    kind: e.kind.as_str().into(),
                })
                .collect(),
        });
    }

    fn fail(&self, name: &str, detail: impl Into<String>) -> Stop {
        self.check(name, false, detail, &[]);
        Stop
    }

    /// Creates a job of this scenario with `arms` armed on it before it exists.
    async fn submit(
        &self,
        role: &str,
        deadline: Duration,
        max_attempts: u32,
        arms: Vec<Arm>,
    ) -> Result<String, Stop> {
        let id = JobId::generate();
        for arm in arms {
            self.rig.faults.arm(id.as_str(), arm);
        }
        let input = json!({ "drill": self.kind.as_str(), "role": role });
        let new = NewJob {
            tenant: DRILL_TENANT.into(),
            idempotency_key: format!("{}/{}/{role}", self.rig.run_id, self.kind.as_str()),
            request_digest: hex::encode(Sha256::digest(input.to_string().as_bytes())),
            contract_version: "drill/1".into(),
            input,
            model: json!({}),
            deadline,
            max_attempts,
            replay_policy: ReplayPolicy::Manual,
            drill_run: Some(self.rig.run_id.clone()),
        };
        match self
            .rig
            .ledger
            .create_job_with_id(id.clone(), new, &Actor::Drill)
            .await
        {
            Ok(_) => {
                let id = id.as_str().to_owned();
                self.jobs
                    .lock()
                    .expect("jobs lock")
                    .push((role.to_owned(), id.clone()));
                Ok(id)
            }
            Err(error) => Err(self.fail("the drill's job was created", error.to_string())),
        }
    }

    async fn view(&self, job_id: &str) -> Result<View, Stop> {
        let ledger = &self.rig.ledger;
        // One consistent view from separate reads: every write that changes the job row or
        // its attempts appends events in the same transaction, so when the timeline is the
        // same length before and after the job and its attempts are read, they belong to it.
        // Otherwise a transition that commits between two reads would pair a new timeline
        // with the old job row.
        let read = async {
            loop {
                let before = ledger.events(job_id, 0, 1000).await?;
                let job = ledger.job(job_id).await?;
                let attempts = ledger.attempts(job_id).await?;
                let events = ledger.events(job_id, 0, 1000).await?;
                if events.len() == before.len() {
                    return Ok::<_, crate::ledger::LedgerError>((job, events, attempts));
                }
            }
        };
        match read.await {
            Ok((Some(job), events, attempts)) => Ok(View {
                job,
                events,
                attempts,
            }),
            Ok((None, ..)) => Err(self.fail("the job could be read back", "the job is gone")),
            Err(error) => Err(self.fail("the job could be read back", error.to_string())),
        }
    }

    /// Waits until `done` holds for the job; fails the scenario if it never does.
    async fn until(
        &self,
        job_id: &str,
        what: &str,
        done: impl Fn(&View) -> bool,
    ) -> Result<View, Stop> {
        self.until_within(job_id, what, self.limit(), done).await
    }

    /// [`Ctx::until`] with its own limit.
    async fn until_within(
        &self,
        job_id: &str,
        what: &str,
        limit: Duration,
        done: impl Fn(&View) -> bool,
    ) -> Result<View, Stop> {
        let started = tokio::time::Instant::now();
        loop {
            let view = self.view(job_id).await?;
            if done(&view) {
                return Ok(view);
            }
            if started.elapsed() > limit {
                let tail: Vec<&str> = view
                    .events
                    .iter()
                    .rev()
                    .take(8)
                    .map(|e| e.kind.as_str())
                    .collect();
                return Err(self.fail(
                    &format!("reached: {what}"),
                    format!(
                        "not within {:?}: the job is {} at epoch {}; latest events {:?}",
                        limit, view.job.state, view.job.owner_epoch, tail
                    ),
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Sends a copy of the job's message, as a standard queue may deliver one.
    async fn send_copy(&self, job_id: &str) -> Step {
        self.rig
            .queue
            .send(&JobMessage::body(job_id, DRILL_TENANT), Duration::ZERO)
            .await
            .map(|_| ())
            .map_err(|e| self.fail("a copy of the message was sent", e.to_string()))
    }

    async fn finish(self) -> Outcome {
        let jobs = self.jobs.lock().expect("jobs lock").clone();
        let now = self.rig.ledger.now_us().await.unwrap_or_default();
        let mut captures = Vec::new();
        for (role, job_id) in &jobs {
            if let Ok(view) = self.view(job_id).await {
                captures.push(capture(role, &view, now));
            }
        }
        let ids: Vec<&str> = jobs.iter().map(|(_, id)| id.as_str()).collect();
        let faults_fired = self
            .rig
            .faults
            .fired()
            .into_iter()
            .filter(|f| ids.contains(&f.job_id.as_str()))
            .map(|f| format!("{} on {}", f.point, f.job_id))
            .collect();
        for id in &ids {
            self.rig.faults.disarm(id);
        }
        // The jobs are evidence now: one left waiting for a decision would sit in the
        // operators' reconciliation queue, so it is closed — its timeline keeps everything.
        for (_, job_id) in &jobs {
            if let Ok(Some(job)) = self.rig.ledger.job(job_id).await {
                if job.state == JobState::Unknown {
                    let _ = self
                        .rig
                        .ledger
                        .decide(
                            job_id,
                            job.owner_epoch,
                            &Decision::ResolveFailed {
                                error_code: "drill_finished".into(),
                            },
                            &Actor::Drill,
                            &format!(
                                "drill run {} is over; this job is its evidence",
                                self.rig.run_id
                            ),
                        )
                        .await;
                }
            }
        }
        Outcome {
            checks: self.checks.into_inner().expect("checks lock"),
            jobs: captures,
            notes: self.notes.into_inner().expect("notes lock"),
            faults_fired,
        }
    }
}

/// Why a result was rejected (`""` for another kind of event).
fn reason_of(e: &Event) -> String {
    e.detail_as::<detail::ResultRejected>()
        .map(|d| d.reason)
        .unwrap_or_default()
}

/// Whether a `replayed` event says its message came from the dead-letter queue.
fn from_the_dlq(e: &Event) -> bool {
    e.detail_as::<detail::Replayed>()
        .is_some_and(|d| d.from == "dead_letter_queue")
}

/// The seed's capture list for one job.
fn capture(role: &str, view: &View, now_us: i64) -> Capture {
    let job = &view.job;
    let results: Vec<String> = view
        .events
        .iter()
        .filter_map(|e| match e.kind {
            K::ResultAccepted => Some(format!("accepted at epoch {}", e.epoch)),
            K::ResultRejected => Some(format!("rejected ({}) at epoch {}", reason_of(e), e.epoch)),
            _ => None,
        })
        .collect();
    let deletion = view
        .events
        .iter()
        .rev()
        .find_map(|e| match e.kind {
            K::MessageDeleted => Some(format!(
                "deleted ({})",
                e.detail_as::<detail::MessageDeleted>()
                    .unwrap_or_default()
                    .reason
            )),
            K::DeleteFailed => Some(format!(
                "delete failed ({})",
                e.detail_as::<detail::DeleteFailed>()
                    .unwrap_or_default()
                    .error
            )),
            K::MovedToDlq => Some("in the dead-letter queue".into()),
            _ => None,
        })
        .unwrap_or_else(|| "not deleted".into());
    Capture {
        role: role.into(),
        job_id: job.job_id.clone(),
        state: job.state.as_str().into(),
        delivery_count: view.count(K::DeliveryReceived),
        owner_epoch: job.owner_epoch,
        deadline_left_ms: (job.deadline_at - now_us) / 1000,
        renewals: format!(
            "visibility {} renewed, {} failed; lease {} renewed, {} lost",
            view.count(K::VisibilityRenewed),
            view.count(K::VisibilityRenewalFailed),
            view.count(K::LeaseRenewed),
            view.count(K::LeaseLost),
        ),
        attempt_count: job.attempt_count,
        recovery_reason: job.recovery_reason.clone(),
        result_transition: if results.is_empty() {
            "none".into()
        } else {
            results.join("; ")
        },
        deletion,
    }
}

/// A second delivery met a live owner: it was suppressed under the first owner's epoch.
fn suppressed_under_owner(ctx: &Ctx<'_>, view: &View, name: &str) {
    let dup = view.first(K::DuplicateSuppressed);
    let under_owner = match (view.first_owner(), dup) {
        (Some((_, epoch)), Some(d)) => d
            .detail_as::<detail::DuplicateSuppressed>()
            .is_some_and(|d| d.owner_epoch == epoch),
        _ => false,
    };
    ctx.check(
        name,
        under_owner,
        match dup {
            Some(d) => format!("duplicate_suppressed by {} ({})", d.actor, d.detail),
            None => "no duplicate_suppressed".into(),
        },
        &dup.into_iter().collect::<Vec<_>>(),
    );
}

/// Checks shared by scenarios that must end with one accepted result from one attempt.
fn one_result_from_one_attempt(ctx: &Ctx<'_>, view: &View) {
    let started = view.all(K::AttemptStarted);
    ctx.check(
        "the model was called once",
        started.len() == 1 && view.attempts.len() == 1,
        format!(
            "{} attempt(s) started, {} recorded",
            started.len(),
            view.attempts.len()
        ),
        &started,
    );
    let accepted = view.all(K::ResultAccepted);
    ctx.check(
        "exactly one result was accepted",
        accepted.len() == 1 && view.job.state == JobState::Succeeded,
        format!("{} accepted; the job is {}", accepted.len(), view.job.state),
        &accepted,
    );
}

async fn live_owner_suppresses_duplicate(ctx: &Ctx<'_>) -> Step {
    let t = ctx.t();
    let job = ctx
        .submit(
            "copied",
            ctx.deadline(),
            3,
            vec![
                // The copy goes out as the owner receives the message. A worker frozen by a
                // paused-worker scenario of the same run may take it in a receive it had open
                // and hold it until it wakes: the owner works on past that.
                Arm::once(F::ProviderLatency).hold(t.visibility + ctx.pause()),
                Arm::once(F::QueueReceiveDuplicate),
            ],
        )
        .await?;
    let view = ctx
        .until(&job, "the job succeeded and the copy was examined", |v| {
            v.job.state == JobState::Succeeded
                && v.has(K::MessageDeleted)
                && second_delivery_examined(v)
        })
        .await?;
    let deliveries = view.all(K::DeliveryReceived);
    let messages: std::collections::HashSet<_> = deliveries
        .iter()
        .filter_map(|e| e.delivery.as_ref().map(|d| d.message_id.as_str()))
        .collect();
    ctx.check(
        "a copy of the message reached a receiver while the owner worked",
        messages.len() >= 2,
        format!(
            "{} deliveries of {} distinct messages",
            deliveries.len(),
            messages.len()
        ),
        &deliveries,
    );
    suppressed_under_owner(
        ctx,
        &view,
        "the copy was suppressed under the live owner's epoch, without inference",
    );
    one_result_from_one_attempt(ctx, &view);
    Ok(())
}

/// A freezes once its call has come back, until visibility and lease expire; the job is
/// recovered; A wakes up and tries to commit. Returns the job and the recovery's epoch.
async fn paused_worker(ctx: &Ctx<'_>) -> Result<(String, i64), Stop> {
    let pause = ctx.pause();
    let job = ctx
        .submit(
            "paused",
            ctx.deadline(),
            3,
            vec![Arm::once(F::WorkerPause).hold(pause)],
        )
        .await?;
    let view = ctx
        .until(&job, "the paused worker woke up and tried to commit", |v| {
            v.has(K::ResultRejected) || (v.has(K::RecoveryClaimed) && v.has(K::ResultAccepted))
        })
        .await?;
    let Some((a, a_epoch)) = view.first_owner() else {
        return Err(ctx.fail("worker A claimed the job", "no claim on the timeline"));
    };
    let recovery = view
        .all(K::RecoveryClaimed)
        .into_iter()
        .find(|e| e.epoch > a_epoch);
    ctx.check(
        "recovery advanced the epoch past A's",
        recovery.is_some(),
        match recovery {
            Some(r) => format!(
                "recovery_claimed by {} at epoch {} (the first owner, {a}, held {a_epoch})",
                r.actor, r.epoch
            ),
            None => format!("no recovery past epoch {a_epoch}"),
        },
        &recovery.into_iter().collect::<Vec<_>>(),
    );
    let rejected: Vec<&Event> = view
        .all(K::ResultRejected)
        .into_iter()
        .filter(|e| e.actor == a)
        .collect();
    let stale = rejected
        .iter()
        .any(|e| reason_of(e) == "stale_epoch" && e.epoch == a_epoch);
    ctx.check(
        "A's commit was rejected as stale_epoch",
        stale && !view.has(K::ResultAccepted),
        format!(
            "{} rejection(s) of A ({}); {} accepted",
            rejected.len(),
            rejected
                .iter()
                .map(|e| reason_of(e))
                .collect::<Vec<_>>()
                .join(", "),
            view.count(K::ResultAccepted)
        ),
        &rejected,
    );
    // A's own delivery: the receive its claim came from. A fresh receive by the same worker
    // after it woke examines the ledger like any other and may delete; the stale delivery
    // must not be.
    let a_handle = view
        .events
        .iter()
        .find(|e| e.kind == K::DeliveryReceived && e.actor == a)
        .and_then(|e| e.delivery.as_ref())
        .map(|d| d.handle_hash.clone());
    let deletes_by_a: Vec<&Event> = view
        .events
        .iter()
        .filter(|e| {
            e.actor == a
                && matches!(e.kind, K::MessageDeleted | K::DeleteFailed)
                && e.delivery.as_ref().map(|d| &d.handle_hash) == a_handle.as_ref()
        })
        .collect();
    ctx.check(
        "A did not delete the message",
        a_handle.is_some() && deletes_by_a.is_empty(),
        format!(
            "{} delete(s) with A's delivery (handle {})",
            deletes_by_a.len(),
            a_handle.as_deref().unwrap_or("unknown")
        ),
        if deletes_by_a.is_empty() {
            &rejected
        } else {
            &deletes_by_a
        },
    );
    let state_change = recovery.and_then(|r| view.after(r.seq - 1, K::StateChanged));
    ctx.check(
        "the job waits as unknown",
        view.job.state == JobState::Unknown,
        format!(
            "the job is {} (recovery reason: {})",
            view.job.state,
            view.job.recovery_reason.as_deref().unwrap_or("none")
        ),
        &state_change.into_iter().collect::<Vec<_>>(),
    );
    let epoch = recovery.map(|r| r.epoch).unwrap_or(a_epoch);
    Ok((job, epoch))
}

async fn uncertain_attempt(ctx: &Ctx<'_>) -> Step {
    let (job, recovered_at) = paused_worker(ctx).await?;
    // The message is delivered again while the job is unknown: that alone must not start a
    // second attempt.
    let last = ctx.view(&job).await?.events.last().map_or(0, |e| e.seq);
    ctx.send_copy(&job).await?;
    ctx.until(&job, "the copy reached a worker", |v| {
        v.after(last, K::DeliveryReceived).is_some()
    })
    .await?;
    // Time for anything that would start a second attempt on its own to do so.
    tokio::time::sleep(ctx.t().visibility).await;
    let before = ctx.view(&job).await?;
    let copy = before.after(last, K::DeliveryReceived);
    let waiting = before.job.state == JobState::Unknown && before.attempts.len() == 1;
    ctx.check(
        "no second attempt before a recorded decision",
        waiting,
        format!(
            "{:?} after a copy of the message arrived the job was {} with {} attempt(s)",
            ctx.t().visibility,
            before.job.state,
            before.attempts.len(),
        ),
        &copy.into_iter().collect::<Vec<_>>(),
    );
    if !waiting {
        return Err(Stop);
    }
    let reason = "drill: the uncertain attempt was reviewed; a fenced retry is authorized";
    if let Err(error) = ctx
        .rig
        .ledger
        .decide(
            &job,
            before.job.owner_epoch,
            &Decision::AuthorizeRetry,
            &Actor::Drill,
            reason,
        )
        .await
    {
        return Err(ctx.fail("a fenced retry was authorized", error.to_string()));
    }
    let view = ctx
        .until(&job, "the authorized retry succeeded", |v| {
            v.job.state == JobState::Succeeded
        })
        .await?;
    let decision = view.first(K::DecisionRecorded);
    let second = view.all(K::AttemptStarted).get(1).copied();
    let ordered = matches!((decision, second), (Some(d), Some(s)) if s.seq > d.seq);
    ctx.check(
        "the second attempt started after the decision",
        ordered,
        format!(
            "the second attempt started {} the decision",
            if ordered { "after" } else { "not after" }
        ),
        &[decision, second].into_iter().flatten().collect::<Vec<_>>(),
    );
    ctx.check(
        "the retry ran at a higher epoch",
        second.is_some_and(|s| s.epoch > recovered_at),
        format!(
            "second attempt at epoch {}; recovery was at {recovered_at}",
            second.map_or("—".to_owned(), |s| s.epoch.to_string())
        ),
        &second.into_iter().collect::<Vec<_>>(),
    );
    let accepted = view.all(K::ResultAccepted);
    ctx.check(
        "the retry succeeded and the attempt count is cumulative (2)",
        view.job.attempt_count == 2 && accepted.len() == 1,
        format!(
            "attempt count {}, {} accepted result(s)",
            view.job.attempt_count,
            accepted.len()
        ),
        &accepted,
    );
    Ok(())
}

async fn commit_survives_failed_delete(ctx: &Ctx<'_>) -> Step {
    let job = ctx
        .submit(
            "delete-fails",
            ctx.returning_deadline(),
            3,
            vec![Arm::once(F::QueueDelete)],
        )
        .await?;
    let view = ctx
        .until(&job, "the message came back and was dealt with", |v| {
            v.first(K::DeleteFailed).is_some_and(|f| {
                v.after(f.seq, K::DeliveryReceived)
                    .is_some_and(|back| v.after(back.seq, K::MessageDeleted).is_some())
            })
        })
        .await?;
    let accepted = view.first(K::ResultAccepted);
    let failed = accepted.and_then(|a| view.after(a.seq, K::DeleteFailed));
    ctx.check(
        "the delete after the commit failed",
        failed.is_some(),
        match failed {
            Some(f) => format!("delete_failed: {}", f.detail),
            None => "no failed delete after the commit".into(),
        },
        &[accepted, failed].into_iter().flatten().collect::<Vec<_>>(),
    );
    let ack = failed.and_then(|f| view.after(f.seq, K::DeliveryAckedTerminal));
    ctx.check(
        "the redelivery was acknowledged without inference",
        ack.is_some() && view.attempts.len() == 1,
        format!(
            "acknowledged: {}; {} attempt(s)",
            ack.is_some(),
            view.attempts.len()
        ),
        &ack.into_iter().collect::<Vec<_>>(),
    );
    one_result_from_one_attempt(ctx, &view);
    let gone = ack.and_then(|a| view.after(a.seq, K::MessageDeleted));
    ctx.check(
        "the message is eventually gone",
        gone.is_some(),
        "deleted after the acknowledgement",
        &gone.into_iter().collect::<Vec<_>>(),
    );
    Ok(())
}

async fn stale_receipt_handle_delete(ctx: &Ctx<'_>) -> Step {
    if ctx.rig.queue_kind == DrillQueue::Sqs {
        ctx.note(
            "SQS reports success for a delete with an outdated handle, which moto does not \
             reproduce: fenceline's client wrapper reports the success and sends nothing.",
        );
    }
    let job = ctx
        .submit(
            "stale-handle",
            ctx.returning_deadline(),
            3,
            vec![Arm::once(F::QueueDeleteStaleHandle)],
        )
        .await?;
    let view = ctx
        .until(
            &job,
            "the remaining message came back and was dealt with",
            |v| v.count(K::MessageDeleted) >= 2,
        )
        .await?;
    let accepted = view.first(K::ResultAccepted);
    let first_delete = accepted.and_then(|a| view.after(a.seq, K::MessageDeleted));
    let first_message = view
        .first(K::DeliveryReceived)
        .and_then(|e| e.delivery.as_ref())
        .map(|d| d.message_id.clone());
    let back = first_delete.and_then(|d| {
        view.events.iter().find(|e| {
            e.seq > d.seq
                && e.kind == K::DeliveryReceived
                && e.delivery.as_ref().map(|x| &x.message_id) == first_message.as_ref()
        })
    });
    ctx.check(
        "the delete reported success but the message remained",
        first_delete.is_some() && back.is_some(),
        match back.and_then(|b| b.delivery.as_ref()) {
            Some(d) => format!("the same message came back (receive {})", d.receive_count),
            None => "the message did not come back after the reported delete".into(),
        },
        &[first_delete, back]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>(),
    );
    let ack = back.and_then(|b| view.after(b.seq, K::DeliveryAckedTerminal));
    ctx.check(
        "the next receiver found the terminal job and acknowledged it",
        ack.is_some(),
        match ack {
            Some(a) => format!("acknowledged by {} ({})", a.actor, a.detail),
            None => "no acknowledgement after the message came back".into(),
        },
        &ack.into_iter().collect::<Vec<_>>(),
    );
    one_result_from_one_attempt(ctx, &view);
    Ok(())
}

async fn renewal_timeout_lease_valid(ctx: &Ctx<'_>) -> Step {
    let t = ctx.t();
    // A's visibility renewals time out; its lease renewals go through; the call outlasts
    // the visibility.
    let job = ctx
        .submit(
            "renewal-times-out",
            ctx.deadline(),
            3,
            vec![
                Arm::always(F::QueueChangeVisibility),
                // Long enough for the message to come back even while a paused-worker
                // scenario of the same run has frozen the other worker.
                Arm::once(F::ProviderLatency).hold(t.visibility + t.heartbeat * 2 + ctx.pause()),
            ],
        )
        .await?;
    let view = ctx
        .until(&job, "the job succeeded after the message came back", |v| {
            v.job.state == JobState::Succeeded && second_delivery_examined(v)
        })
        .await?;
    let uncertain: Vec<&Event> = view
        .all(K::VisibilityRenewalFailed)
        .into_iter()
        .filter(|e| {
            e.detail_as::<detail::VisibilityRenewalFailed>()
                .is_some_and(|d| d.uncertain)
        })
        .collect();
    ctx.check(
        "the timed-out renewal was recorded as uncertain",
        !uncertain.is_empty(),
        format!("{} uncertain visibility renewal(s)", uncertain.len()),
        &uncertain,
    );
    suppressed_under_owner(
        ctx,
        &view,
        "the reappearing message deferred to A's valid lease",
    );
    one_result_from_one_attempt(ctx, &view);
    Ok(())
}

async fn lease_renewal_failure(ctx: &Ctx<'_>) -> Step {
    let t = ctx.t();
    let job = ctx
        .submit(
            "lease-not-renewed",
            ctx.deadline(),
            3,
            vec![
                Arm::always(F::LeaseRenew),
                Arm::once(F::ProviderLatency).hold(t.lease * 3),
            ],
        )
        .await?;
    let view = ctx
        .until(
            &job,
            "the job was recovered and A stopped or tried to commit",
            |v| {
                v.has(K::RecoveryClaimed)
                    && (v.has(K::LeaseLost) || v.has(K::ResultRejected) || v.has(K::ResultAccepted))
            },
        )
        .await?;
    let Some((a, a_epoch)) = view.first_owner() else {
        return Err(ctx.fail("worker A claimed the job", "no claim on the timeline"));
    };
    let lost: Vec<&Event> = view
        .all(K::LeaseLost)
        .into_iter()
        .filter(|e| e.actor == a && e.epoch == a_epoch)
        .collect();
    ctx.check(
        "A stopped its call and recorded lease_lost",
        !lost.is_empty(),
        match lost.first() {
            Some(l) => format!("lease_lost by {a}: {}", l.detail),
            None => format!("no lease_lost by {a}"),
        },
        &lost,
    );
    let commits = view.count(K::ResultAccepted) + view.count(K::ResultRejected);
    ctx.check(
        "A committed nothing",
        commits == 0,
        format!("{commits} result commit(s)"),
        &lost,
    );
    let recovery = view
        .all(K::RecoveryClaimed)
        .into_iter()
        .find(|e| e.epoch > a_epoch);
    let attempt_lost = view
        .attempts
        .first()
        .is_some_and(|a| a.outcome == AttemptOutcome::Lost);
    ctx.check(
        "recovery followed the state table: the attempt is lost and the job unknown",
        recovery.is_some() && view.job.state == JobState::Unknown && attempt_lost,
        format!(
            "the job is {} at epoch {}; first attempt {}",
            view.job.state,
            view.job.owner_epoch,
            view.attempts
                .first()
                .map_or("missing", |a| a.outcome.as_str())
        ),
        &recovery.into_iter().collect::<Vec<_>>(),
    );
    Ok(())
}

async fn deadline_exhausted(ctx: &Ctx<'_>) -> Step {
    let t = ctx.t();
    let job = ctx
        .submit(
            "outlives-deadline",
            // Room for the message to come back once if a frozen worker took it (see
            // `live_owner_suppresses_duplicate`) and still be claimed before the deadline.
            t.visibility * 3,
            3,
            vec![Arm::once(F::ProviderLatency).hold(t.visibility * 10)],
        )
        .await?;
    let expired = ctx
        .until(&job, "the job expired", |v| {
            v.job.state == JobState::Expired
        })
        .await?;
    ctx.send_copy(&job).await?;
    let last = expired.events.last().map(|e| e.seq).unwrap_or(0);
    let view = ctx
        .until(&job, "the late copy was acknowledged", |v| {
            v.after(last, K::DeliveryAckedTerminal).is_some()
        })
        .await?;
    let margin_ms = i64::try_from(t.margin.as_millis()).unwrap_or(0);
    let visibility_ms = i64::try_from(t.visibility.as_millis()).unwrap_or(0);
    let stop = renewals_at_deadline(&view.events, view.job.deadline_at, margin_ms, visibility_ms);
    ctx.check(
        "renewals stopped at the deadline",
        stop.passed,
        stop.finding,
        &stop.evidence,
    );
    let change = view.first(K::DeadlineExpired);
    ctx.check(
        "the job expired",
        view.job.state == JobState::Expired,
        format!("the job is {}", view.job.state),
        &change.into_iter().collect::<Vec<_>>(),
    );
    let ack = view.after(last, K::DeliveryAckedTerminal);
    ctx.check(
        "the late copy was acknowledged without a new attempt or budget",
        ack.is_some() && view.attempts.len() == 1 && view.job.attempt_count == 1,
        format!(
            "{} attempt(s); attempt count {}",
            view.attempts.len(),
            view.job.attempt_count
        ),
        &ack.into_iter().collect::<Vec<_>>(),
    );
    Ok(())
}

/// What the renewals of a job that outlived its deadline show.
struct DeadlineStop<'e> {
    passed: bool,
    finding: String,
    evidence: Vec<&'e Event>,
}

/// Whether a job's renewals stopped at its deadline (`deadline` in µs, database clock).
///
/// A visibility renewal may ask for no more than what was left of the deadline when it was
/// asked, plus the margin; a lease renewal can only happen before the deadline. Both are read
/// from what the worker recorded, not from when the record landed. Only a visibility renewal
/// asked in the last stretch before the deadline, where a full `visibility_ms` would run past
/// it, or one the worker did not ask because the deadline was reached, puts the cap to the
/// test: a timeline without one (the worker stopped early) proves nothing and fails.
fn renewals_at_deadline(
    events: &[Event],
    deadline: i64,
    margin_ms: i64,
    visibility_ms: i64,
) -> DeadlineStop<'_> {
    let renewals: Vec<&Event> = events
        .iter()
        .filter(|e| matches!(e.kind, K::VisibilityRenewed | K::LeaseRenewed))
        .collect();
    let asked = |e: &Event| {
        (
            e.detail_as::<detail::VisibilityRenewed>()
                .map(|d| d.timeout_ms),
            e.detail_as::<detail::VisibilityRenewed>()
                .and_then(|d| d.deadline_left_ms),
        )
    };
    let past: Vec<&Event> = renewals
        .iter()
        .copied()
        .filter(|e| match (e.kind, asked(e)) {
            (K::VisibilityRenewed, (Some(timeout), Some(left))) => timeout > left + margin_ms + 1,
            (K::VisibilityRenewed, _) => true,
            _ => e.at > deadline,
        })
        .collect();
    let stretch = visibility_ms - margin_ms;
    let tested: Vec<&Event> = events
        .iter()
        .filter(|e| match (e.kind, asked(e)) {
            (K::VisibilityRenewed, (_, Some(left))) => left < stretch,
            (K::VisibilityRenewalFailed, _) => e
                .detail_as::<detail::VisibilityRenewalFailed>()
                .is_some_and(|d| d.reason.as_deref() == Some("cap_or_deadline")),
            _ => false,
        })
        .collect();
    let stretch_s = stretch as f64 / 1000.0;
    let finding = if !past.is_empty() {
        format!(
            "{} of {} renewal(s) asked past the deadline",
            past.len(),
            renewals.len()
        )
    } else if tested.is_empty() {
        format!(
            "{} renewal(s), none in the last {stretch_s:.1} s before the deadline, where the cap \
             applies: the worker stopped before it, so the cap was not put to the test",
            renewals.len()
        )
    } else {
        format!(
            "{} renewal(s), {} of them in the last {stretch_s:.1} s before the deadline, each \
             capped at it",
            renewals.len(),
            tested.len()
        )
    };
    DeadlineStop {
        passed: !renewals.is_empty() && !tested.is_empty() && past.is_empty(),
        finding,
        evidence: if !past.is_empty() {
            past
        } else if !tested.is_empty() {
            tested
        } else {
            renewals[renewals.len().saturating_sub(1)..].to_vec()
        },
    }
}

async fn delivery_after_delete(ctx: &Ctx<'_>) -> Step {
    let job = ctx
        .submit("copied-after-delete", ctx.deadline(), 3, Vec::new())
        .await?;
    let done = ctx
        .until(&job, "the job succeeded and its message was deleted", |v| {
            v.job.state == JobState::Succeeded && v.has(K::MessageDeleted)
        })
        .await?;
    let deleted = done.first(K::MessageDeleted).map(|e| e.seq).unwrap_or(0);
    ctx.send_copy(&job).await?;
    let view = ctx
        .until(&job, "the copy was dealt with", |v| {
            v.after(deleted, K::DeliveryAckedTerminal).is_some()
                || v.after(deleted, K::MessageDeleted).is_some()
        })
        .await?;
    let copy = view.after(deleted, K::DeliveryReceived);
    let ack = view.after(deleted, K::DeliveryAckedTerminal);
    ctx.check(
        "the copy arrived after the delete and was acknowledged without inference",
        copy.is_some() && ack.is_some(),
        format!(
            "received after the delete: {}; acknowledged: {}",
            copy.is_some(),
            ack.is_some()
        ),
        &[copy, ack].into_iter().flatten().collect::<Vec<_>>(),
    );
    one_result_from_one_attempt(ctx, &view);
    Ok(())
}

async fn crash_before_dispatch(ctx: &Ctx<'_>) -> Step {
    let job = ctx
        .submit(
            "dispatcher-dies",
            ctx.deadline(),
            3,
            vec![Arm::once(F::DispatchCrashBeforeSend)],
        )
        .await?;
    // The lost send is repaired once the dead dispatcher's hold lapses (the visibility).
    let view = ctx
        .until_within(&job, "the job succeeded", ctx.t().visibility * 6, |v| {
            v.job.state == JobState::Succeeded
        })
        .await?;
    let sends = ctx
        .rig
        .ledger
        .outbox_sends(&job)
        .await
        .map_err(|e| ctx.fail("the outbox could be read", e.to_string()))?;
    let first = sends.first();
    let created = view.first(K::JobCreated);
    let dispatched = view.first(K::Dispatched);
    let lock = i64::try_from(ctx.t().visibility.as_micros()).unwrap_or(0);
    let repaired = match (first, created, dispatched) {
        (Some(row), Some(c), Some(d)) => row.send_attempts >= 2 && d.at - c.at >= lock - 100_000,
        _ => false,
    };
    ctx.check(
        "the lost send was repaired from the outbox",
        repaired,
        match first {
            Some(row) => format!(
                "the created row was claimed {} time(s); sent {} ms after the job was created",
                row.send_attempts,
                match (created, dispatched) {
                    (Some(c), Some(d)) => (d.at - c.at) / 1000,
                    _ => -1,
                }
            ),
            None => "no outbox row".into(),
        },
        &[created, dispatched]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>(),
    );
    one_result_from_one_attempt(ctx, &view);
    Ok(())
}

async fn dlq_replay_inspected(ctx: &Ctx<'_>) -> Step {
    let job = ctx
        .submit(
            "dead-lettered",
            ctx.deadline(),
            3,
            vec![Arm::times(F::WorkerCrashOnReceive, MAX_RECEIVE_COUNT)],
        )
        .await?;
    let before = ctx.view(&job).await?;
    let Some(dlq) = ctx.rig.queue.dead_letters() else {
        return Err(ctx.fail("the drill's queue has a dead-letter queue", "none"));
    };
    if ctx.rig.queue_kind == DrillQueue::Embedded {
        // The embedded queue's move is put on the timeline by the reaper.
        ctx.until(
            &job,
            "the message was moved to the dead-letter queue",
            |v| v.has(K::MovedToDlq),
        )
        .await?;
    } else {
        let started = tokio::time::Instant::now();
        while dlq.depth().await.map(|d| d.visible).unwrap_or(0) == 0 {
            if started.elapsed() > ctx.limit() {
                return Err(ctx.fail(
                    "reached: the message landed in the dead-letter queue",
                    format!("not within {:?}", ctx.limit()),
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let replay = if ctx
        .rig
        .faults
        .disabled(crate::faults::sabotage::Safeguard::InspectBeforeReplay)
    {
        // What a replay without inspection does: every letter goes back as it is.
        for letter in dlq
            .receive(10, Duration::from_secs(30), Duration::ZERO)
            .await
            .unwrap_or_default()
        {
            let _ = ctx.rig.queue.send(&letter.body, Duration::ZERO).await;
            let _ = dlq.delete(&letter.receipt).await;
        }
        crate::worker::dlq::Replay::default()
    } else {
        crate::worker::dlq::replay_inspected(&ctx.rig.ledger, &ctx.rig.queue, &Actor::Drill, 10)
            .await
            .map_err(|e| ctx.fail("the dead letter was replayed", e.to_string()))?
    };
    let view = ctx
        .until(&job, "the replayed job succeeded", |v| {
            v.job.state == JobState::Succeeded
        })
        .await?;
    let replayed = view.first(K::Replayed);
    let moved = view.first(K::MovedToDlq);
    // The embedded queue records the move with the receive count that caused it; SQS moves
    // letters out of sight, so there the letter's presence in the DLQ after the worker's
    // receives is the evidence, and the replay records it.
    let (landed, detail) = match (ctx.rig.queue_kind, moved) {
        (_, Some(m)) => {
            let receives = m
                .detail_as::<detail::MovedToDlq>()
                .and_then(|d| d.receive_count)
                .unwrap_or(0);
            (
                receives >= i64::from(MAX_RECEIVE_COUNT) && replayed.is_some_and(from_the_dlq),
                format!("moved after {receives} receive(s); maxReceiveCount {MAX_RECEIVE_COUNT}"),
            )
        }
        (DrillQueue::Sqs, None) => {
            ctx.note(
                "SQS moves a letter to the dead-letter queue without telling anyone: the \
                 letter's arrival there is read from the DLQ itself, and the replay records it.",
            );
            (
                replayed.is_some_and(from_the_dlq),
                "found in the dead-letter queue and replayed from it".to_owned(),
            )
        }
        (DrillQueue::Embedded, None) => (false, "no moved_to_dlq on the timeline".to_owned()),
    };
    ctx.check(
        "the message landed in the DLQ after maxReceiveCount receives",
        landed,
        detail,
        &[moved, replayed].into_iter().flatten().collect::<Vec<_>>(),
    );
    let inspected = replayed.is_some_and(|e| {
        e.detail_as::<detail::Replayed>()
            .is_some_and(|d| d.action == "redispatched" && d.state == "ready")
    }) && replay.jobs.iter().any(|j| j.job_id == job);
    ctx.check(
        "replay inspected the ledger before sending anything",
        inspected,
        match replayed {
            Some(e) => format!("replayed: {}", e.detail),
            None => "no replay on the timeline".into(),
        },
        &replayed.into_iter().collect::<Vec<_>>(),
    );
    let accepted = view.first(K::ResultAccepted);
    ctx.check(
        "job id, deadline and attempt budget were kept",
        view.job.job_id == before.job.job_id
            && view.job.deadline_at == before.job.deadline_at
            && view.job.max_attempts == before.job.max_attempts
            && view.job.attempt_count == 1
            && accepted.is_some(),
        format!(
            "deadline kept: {}; budget {} of {}; attempt count {}",
            view.job.deadline_at == before.job.deadline_at,
            view.job.max_attempts,
            before.job.max_attempts,
            view.job.attempt_count
        ),
        &accepted.into_iter().collect::<Vec<_>>(),
    );
    Ok(())
}

async fn provider_rate_limits_a_burst(ctx: &Ctx<'_>) -> Step {
    const BURST: usize = 16;
    // A call every 300 ms, a bucket a second deep (three calls): most of the burst is refused
    // at first, however fast the queue delivers it.
    let limit = Arm::always(F::ProviderRateLimit).hold(Duration::from_millis(300));
    let mut jobs = Vec::with_capacity(BURST);
    for i in 0..BURST {
        let role = format!("burst-{i:02}");
        jobs.push(
            ctx.submit(&role, ctx.deadline(), 1, vec![limit.clone()])
                .await?,
        );
    }
    let mut views = Vec::with_capacity(BURST);
    for job in &jobs {
        views.push(
            ctx.until(job, "the job finished", |v| v.job.state.is_terminal())
                .await?,
        );
    }
    let succeeded: Vec<&View> = views
        .iter()
        .filter(|v| v.job.state == JobState::Succeeded)
        .collect();
    let accepted: Vec<&Event> = views
        .iter()
        .filter_map(|v| v.first(K::ResultAccepted))
        .collect();
    ctx.check(
        "every job of the burst succeeded",
        succeeded.len() == BURST,
        format!(
            "{} of {BURST} succeeded{}",
            succeeded.len(),
            views
                .iter()
                .find(|v| v.job.state != JobState::Succeeded)
                .map(|v| format!(
                    "; {} is {} ({})",
                    v.job.job_id,
                    v.job.state,
                    v.job.error_code.as_deref().unwrap_or("no error")
                ))
                .unwrap_or_default()
        ),
        &accepted,
    );
    let refusals: Vec<&Event> = views.iter().flat_map(|v| v.all(K::Throttled)).collect();
    let refused_attempts: usize = views
        .iter()
        .map(|v| {
            v.attempts
                .iter()
                .filter(|a| a.outcome == AttemptOutcome::Throttled)
                .count()
        })
        .sum();
    let spent: Vec<i64> = views.iter().map(|v| v.job.budget_used).collect();
    ctx.check(
        "refusals were recorded and spent no attempt of the budget",
        !refusals.is_empty()
            && refused_attempts == refusals.len()
            && views
                .iter()
                .all(|v| v.job.state != JobState::Succeeded || v.job.budget_used == 1),
        format!(
            "{} refusals recorded ({refused_attempts} attempts throttled); budget spent per \
             job (of 1): {}",
            refusals.len(),
            if spent.iter().all(|n| *n == 1) {
                "1 each".to_owned()
            } else {
                format!("{spent:?}")
            }
        ),
        &refusals.iter().take(12).copied().collect::<Vec<_>>(),
    );
    let receives: Vec<&Event> = views
        .iter()
        .flat_map(|v| v.all(K::DeliveryReceived))
        .collect();
    let most = receives
        .iter()
        .filter_map(|e| e.delivery.as_ref().map(|d| d.receive_count))
        .max()
        .unwrap_or(0);
    let dead: Vec<&Event> = views.iter().flat_map(|v| v.all(K::MovedToDlq)).collect();
    let busiest = receives
        .iter()
        .copied()
        .filter(|e| e.delivery.as_ref().is_some_and(|d| d.receive_count == most))
        .take(1)
        .collect::<Vec<_>>();
    ctx.check(
        "no message reached the dead-letter queue",
        !receives.is_empty() && dead.is_empty() && most <= i64::from(MAX_RECEIVE_COUNT),
        format!(
            "each message received at most {most} time(s) (the queue moves one received \
             more than {MAX_RECEIVE_COUNT} times); {} moved to the dead-letter queue",
            dead.len()
        ),
        &if dead.is_empty() { busiest } else { dead },
    );
    Ok(())
}

async fn attempt_budget_exhausted(ctx: &Ctx<'_>) -> Step {
    let budget = 3u32;
    let job = ctx
        .submit(
            "always-retryable",
            ctx.deadline(),
            budget,
            vec![Arm::always(F::ProviderRetryable)],
        )
        .await?;
    ctx.until(&job, "the job failed for good", |v| {
        v.job.state == JobState::FailedTerminal
    })
    .await?;
    // Time for an extra attempt to show up, if anything would start one.
    tokio::time::sleep(ctx.t().visibility).await;
    let view = ctx.view(&job).await?;
    let started = view.all(K::AttemptStarted);
    let gaps: Vec<(i64, Duration)> = view
        .attempts
        .windows(2)
        .map(|w| {
            let gap = w[1].started_at - w[0].finished_at.unwrap_or(w[1].started_at);
            (gap / 1000, ctx.t().backoff(w[0].attempt_no))
        })
        .collect();
    // What the ledger scheduled after each failure, beside what happened: a slow machine may
    // space retries by more than the backoff even when none was scheduled.
    let scheduled: Vec<i64> = view
        .all(K::StateChanged)
        .into_iter()
        .filter_map(|e| e.detail_as::<detail::StateChanged>())
        .filter(|d| d.to == "retry_authorized")
        .filter_map(|d| d.retry_in_ms)
        .collect();
    ctx.check(
        "attempts were spaced by the backoff",
        gaps.len() + 1 == budget as usize
            && scheduled.len() == gaps.len()
            && gaps
                .iter()
                .zip(&scheduled)
                .all(|((gap_ms, backoff), due_ms)| {
                    let backoff = backoff.as_millis() as i64;
                    *gap_ms + 50 >= backoff && *due_ms + 50 >= backoff
                }),
        format!(
            "{} attempts; between them: {}",
            view.attempts.len(),
            gaps.iter()
                .enumerate()
                .map(|(i, (g, b))| format!(
                    "{g} ms (backoff {} ms, retry scheduled in {})",
                    b.as_millis(),
                    scheduled
                        .get(i)
                        .map_or("—".to_string(), |d| format!("{d} ms"))
                ))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        &started,
    );
    let change = view.first(K::BudgetExhausted).or_else(|| {
        view.all(K::StateChanged).into_iter().find(|e| {
            e.detail_as::<detail::StateChanged>()
                .is_some_and(|d| d.to == "failed_terminal")
        })
    });
    ctx.check(
        "failed_terminal once the budget was spent",
        view.job.state == JobState::FailedTerminal && view.job.attempt_count == i64::from(budget),
        format!(
            "the job is {} after {} of {budget} attempts (error {})",
            view.job.state,
            view.job.attempt_count,
            view.job.error_code.as_deref().unwrap_or("none")
        ),
        &change
            .or(started.last().copied())
            .into_iter()
            .collect::<Vec<_>>(),
    );
    ctx.check(
        "no extra attempt",
        view.attempts.len() == budget as usize && started.len() == budget as usize,
        format!("{} attempt(s) recorded", view.attempts.len()),
        &started,
    );
    Ok(())
}

async fn worker_crash_mid_call(ctx: &Ctx<'_>) -> Step {
    let t = ctx.t();
    let job = ctx
        .submit(
            "worker-dies",
            ctx.deadline(),
            3,
            vec![
                Arm::once(F::WorkerCrash).hold(t.heartbeat + t.heartbeat / 2),
                Arm::once(F::ProviderLatency).hold(t.visibility * 3),
            ],
        )
        .await?;
    let first = ctx
        .until(&job, "the call started", |v| v.has(K::AttemptStarted))
        .await?;
    ctx.until(&job, "the job was recovered", |v| v.has(K::RecoveryClaimed))
        .await?;
    // Time for the message to come back and for anything that would act on its own to act.
    tokio::time::sleep(ctx.t().visibility + ctx.t().heartbeat).await;
    let view = ctx.view(&job).await?;
    let Some((_, a_epoch)) = view.first_owner() else {
        return Err(ctx.fail("worker A claimed the job", "no claim on the timeline"));
    };
    let recovery = view
        .all(K::RecoveryClaimed)
        .into_iter()
        .find(|e| e.epoch > a_epoch);
    ctx.check(
        "a recovery claim fenced the dead worker out",
        recovery.is_some(),
        match recovery {
            Some(r) => format!(
                "recovery_claimed by {} at epoch {}: {}",
                r.actor, r.epoch, r.detail
            ),
            None => "no recovery".into(),
        },
        &recovery.into_iter().collect::<Vec<_>>(),
    );
    let attempt = view.attempts.first();
    ctx.check(
        "the job is unknown and its attempt lost",
        view.job.state == JobState::Unknown
            && attempt.is_some_and(|a| a.outcome == AttemptOutcome::Lost)
            && view.attempts.len() == 1,
        format!(
            "the job is {}; attempts: {}",
            view.job.state,
            view.attempts
                .iter()
                .map(|a| a.outcome.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        &view.all(K::StateChanged),
    );
    let input = ctx.rig.ledger.job_input(&job).await.ok().flatten();
    ctx.check(
        "nothing was lost",
        input.is_some()
            && view.job.deadline_at == first.job.deadline_at
            && view.job.max_attempts == first.job.max_attempts,
        format!(
            "input kept: {}; deadline kept: {}",
            input.is_some(),
            view.job.deadline_at == first.job.deadline_at
        ),
        &recovery.into_iter().collect::<Vec<_>>(),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEADLINE: i64 = 100_000_000;

    /// A renewal recorded `left_ms` before the deadline, asking for `timeout_ms`.
    fn renewal(seq: i64, kind: K, left_ms: i64, timeout_ms: i64) -> Event {
        Event {
            job_id: "job".into(),
            seq,
            at: DEADLINE - left_ms * 1000,
            kind,
            epoch: 1,
            actor: "w".into(),
            delivery: None,
            attempt_no: Some(1),
            deadline_left_ms: Some(left_ms),
            detail: match kind {
                K::VisibilityRenewed => {
                    json!({ "timeout_ms": timeout_ms, "deadline_left_ms": left_ms })
                }
                K::VisibilityRenewalFailed => {
                    json!({ "reason": "cap_or_deadline", "uncertain": false })
                }
                _ => json!({}),
            },
        }
    }

    /// Renewals every 700 ms from `first_left_ms` before the deadline down to `last_left_ms`,
    /// each asking `ask(left)` (compressed timings: 2 s visibility, 300 ms margin).
    fn heartbeats(first_left_ms: i64, last_left_ms: i64, ask: impl Fn(i64) -> i64) -> Vec<Event> {
        let mut events = Vec::new();
        let mut left = first_left_ms;
        while left >= last_left_ms {
            let seq = events.len() as i64;
            events.push(renewal(seq, K::LeaseRenewed, left, 0));
            events.push(renewal(seq + 1, K::VisibilityRenewed, left, ask(left)));
            left -= 700;
        }
        events
    }

    fn capped(left: i64) -> i64 {
        (left + 300).min(2000)
    }

    #[test]
    fn renewals_capped_up_to_the_deadline_pass() {
        let events = heartbeats(5000, 100, capped);
        let stop = renewals_at_deadline(&events, DEADLINE, 300, 2000);
        assert!(stop.passed, "{}", stop.finding);
        assert!(stop
            .evidence
            .iter()
            .all(|e| e.deadline_left_ms.is_some_and(|l| l < 1700)));
    }

    #[test]
    fn a_renewal_not_asked_because_the_deadline_came_counts_as_reaching_it() {
        let mut events = heartbeats(5000, 1800, capped);
        events.push(renewal(99, K::VisibilityRenewalFailed, 0, 0));
        let stop = renewals_at_deadline(&events, DEADLINE, 300, 2000);
        assert!(stop.passed, "{}", stop.finding);
    }

    #[test]
    fn an_uncapped_renewal_near_the_deadline_fails() {
        let events = heartbeats(5000, 100, |_| 2000);
        let stop = renewals_at_deadline(&events, DEADLINE, 300, 2000);
        assert!(!stop.passed);
        assert!(
            stop.finding
                .starts_with("3 of 16 renewal(s) asked past the deadline"),
            "{}",
            stop.finding
        );
        assert!(stop
            .evidence
            .iter()
            .all(|e| e.kind == K::VisibilityRenewed && e.deadline_left_ms < Some(1700)));
    }

    #[test]
    fn renewals_that_stop_before_the_last_stretch_prove_nothing_and_fail() {
        // The worker stopped 2.2 s before the deadline: every renewal it asked was a full
        // one, which is what an uncapped worker asks too.
        let events = heartbeats(5000, 2200, capped);
        let stop = renewals_at_deadline(&events, DEADLINE, 300, 2000);
        assert!(!stop.passed, "{}", stop.finding);
        assert!(
            stop.finding.contains("not put to the test"),
            "{}",
            stop.finding
        );
        let uncapped = heartbeats(5000, 2200, |_| 2000);
        assert!(!renewals_at_deadline(&uncapped, DEADLINE, 300, 2000).passed);
    }

    #[test]
    fn no_renewal_at_all_fails() {
        let stop = renewals_at_deadline(&[], DEADLINE, 300, 2000);
        assert!(!stop.passed);
        assert!(stop.evidence.is_empty());
    }
}
