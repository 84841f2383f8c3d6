//! What every scenario shares: the context it runs in (rig, checks, captured jobs, notes),
//! a job as the ledger holds it, and the checks several scenarios make.

use std::sync::Mutex;
use std::time::Duration;

use serde_json::json;
use sha2::{Digest, Sha256};

use crate::drill::rig::Rig;
use crate::drill::{Capture, Check, DrillKind, Evidence, DRILL_TENANT};
use crate::faults::Arm;
use crate::job::detail;
use crate::job::message::JobMessage;
use crate::job::{Actor, EventKind as K, JobId, JobState};
use crate::ledger::{Attempt, Decision, Event, Job, NewJob, ReplayPolicy};
use crate::queue::Queue;

/// What a scenario found.
pub(crate) struct Outcome {
    pub(crate) checks: Vec<Check>,
    pub(crate) jobs: Vec<Capture>,
    pub(crate) notes: Vec<String>,
    pub(crate) faults_fired: Vec<String>,
}

/// The scenario stopped early; its failing check is already recorded.
pub(super) struct Stop;
pub(super) type Step = Result<(), Stop>;

/// A job as the ledger holds it: the record, its attempts and its timeline.
pub(super) struct View {
    pub(super) job: Job,
    pub(super) events: Vec<Event>,
    pub(super) attempts: Vec<Attempt>,
}

impl View {
    pub(super) fn all(&self, kind: K) -> Vec<&Event> {
        self.events.iter().filter(|e| e.kind == kind).collect()
    }

    pub(super) fn first(&self, kind: K) -> Option<&Event> {
        self.events.iter().find(|e| e.kind == kind)
    }

    pub(super) fn count(&self, kind: K) -> usize {
        self.events.iter().filter(|e| e.kind == kind).count()
    }

    pub(super) fn has(&self, kind: K) -> bool {
        self.first(kind).is_some()
    }

    /// The first event of `kind` after `seq`.
    pub(super) fn after(&self, seq: i64, kind: K) -> Option<&Event> {
        self.events.iter().find(|e| e.seq > seq && e.kind == kind)
    }

    /// The worker that made the first claim, and the epoch it claimed at.
    pub(super) fn first_owner(&self) -> Option<(&str, i64)> {
        self.first(K::Claimed).map(|e| (e.actor.as_str(), e.epoch))
    }
}

/// Whether a second delivery of the job was examined: suppressed, or (by a broken worker)
/// worked or deleted.
pub(super) fn second_delivery_examined(v: &View) -> bool {
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

pub(super) struct Ctx<'a> {
    pub(super) kind: DrillKind,
    pub(super) rig: &'a Rig,
    pub(super) checks: Mutex<Vec<Check>>,
    pub(super) jobs: Mutex<Vec<(String, String)>>,
    pub(super) notes: Mutex<Vec<String>>,
}

impl Ctx<'_> {
    pub(super) fn t(&self) -> &crate::worker::Timings {
        &self.rig.timings
    }

    /// How long the scenario waits for anything before it fails.
    pub(super) fn limit(&self) -> Duration {
        self.t().visibility * 20
    }

    /// The default deadline of a drill job: long enough for every scenario's faults.
    pub(super) fn deadline(&self) -> Duration {
        self.t().visibility * 30
    }

    /// The deadline of a job whose message the scenario waits to see come back. SQS may hand
    /// the same message to a second receiver while its owner works; that receiver pushes it
    /// out to the job's deadline (so that it does not return while the owner works), and the
    /// message comes back only then: that must fall inside the scenario's wait.
    pub(super) fn returning_deadline(&self) -> Duration {
        self.limit() / 2
    }

    /// How long the paused-worker scenarios freeze a worker: past visibility and lease.
    pub(super) fn pause(&self) -> Duration {
        let t = self.t();
        t.visibility + t.lease + t.heartbeat * 3
    }

    pub(super) fn note(&self, note: impl Into<String>) {
        self.notes.lock().expect("notes lock").push(note.into());
    }

    pub(super) fn check(
        &self,
        name: &str,
        passed: bool,
        detail: impl Into<String>,
        evidence: &[&Event],
    ) {
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

    pub(super) fn fail(&self, name: &str, detail: impl Into<String>) -> Stop {
        self.check(name, false, detail, &[]);
        Stop
    }

    /// Creates a job of this scenario with `arms` armed on it before it exists.
    pub(super) async fn submit(
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
            traceparent: None,
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

    pub(super) async fn view(&self, job_id: &str) -> Result<View, Stop> {
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
    pub(super) async fn until(
        &self,
        job_id: &str,
        what: &str,
        done: impl Fn(&View) -> bool,
    ) -> Result<View, Stop> {
        self.until_within(job_id, what, self.limit(), done).await
    }

    /// [`Ctx::until`] with its own limit.
    pub(super) async fn until_within(
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
    pub(super) async fn send_copy(&self, job_id: &str) -> Step {
        self.rig
            .queue
            .send(&JobMessage::body(job_id, DRILL_TENANT), Duration::ZERO)
            .await
            .map(|_| ())
            .map_err(|e| self.fail("a copy of the message was sent", e.to_string()))
    }

    pub(super) async fn finish(self) -> Outcome {
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
pub(super) fn reason_of(e: &Event) -> String {
    e.detail_as::<detail::ResultRejected>()
        .map(|d| d.reason)
        .unwrap_or_default()
}

/// The seed's capture list for one job.
pub(super) fn capture(role: &str, view: &View, now_us: i64) -> Capture {
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
pub(super) fn suppressed_under_owner(ctx: &Ctx<'_>, view: &View, name: &str) {
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
pub(super) fn one_result_from_one_attempt(ctx: &Ctx<'_>, view: &View) {
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
