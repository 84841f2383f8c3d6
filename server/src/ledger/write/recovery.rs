//! Taking a job away from its owner: the reaper's recovery of an expired lease, a worker's
//! adoption of an attempt in flight, and an owner handing its job back. Either way the epoch
//! advances (the old owner is fenced out). An attempt in flight whose provider id was kept is
//! adopted: the job stays `running` with that attempt, polled by its new owner. Any other
//! attempt in flight becomes `lost` and the job `unknown`; with none it is `retry_authorized`.

use std::time::Duration;

use super::{mark_pending_lost, micros, reserves, Intent, Reserved};
use crate::job::detail;
use crate::job::{Actor, EventKind, JobId, JobState};
use crate::ledger::model::{Adopted, AttemptStarted, Claimed, NewEvent, Owner, Recovered};
use crate::ledger::{Ledger, LedgerError};

/// How long recovery holds an attempt in flight for a worker to adopt before it recovers the
/// job again (and sends it again): the time for the job's message to reach a worker.
pub(crate) const ADOPTION_HOLD: Duration = Duration::from_secs(30);

/// Who holds a job recovery keeps for adoption (a name no worker may take).
pub const HELD_FOR_ADOPTION: &str = "system";

#[derive(sqlx::FromRow)]
struct HandOverRow {
    #[sqlx(try_from = "String")]
    state: JobState,
    #[sqlx(flatten)]
    reserved: Reserved,
}

#[derive(sqlx::FromRow)]
struct RecoveryRow {
    #[sqlx(try_from = "String")]
    state: JobState,
    pending_attempt: Option<i64>,
    #[sqlx(flatten)]
    reserved: Reserved,
}

#[derive(sqlx::FromRow)]
struct AdoptRow {
    owner_until: i64,
    attempt_count: i64,
    budget_used: i64,
    max_attempts: i64,
    pending_attempt: i64,
    #[sqlx(flatten)]
    reserved: Reserved,
}
reserves!(HandOverRow, RecoveryRow, AdoptRow);

impl Ledger {
    /// Takes recovery ownership of a `running` job whose lease expired (epoch + 1), fencing out
    /// the old owner. An attempt in flight whose provider id was kept is held for adoption:
    /// the job stays `running` with it, held by the system for [`ADOPTION_HOLD`], and is sent
    /// again when `redispatch`, for a worker to adopt; a hold that lapses goes `unknown`. Any other attempt in flight may have
    /// reached the provider: it becomes `lost` and the job `unknown`. With no attempt in flight
    /// the job becomes `retry_authorized`, re-dispatched through the outbox when `redispatch`
    /// (the caller holds no delivery).
    #[tracing::instrument(
        target = "fenceline::trace",
        name = "ledger.transition",
        skip_all,
        fields(
            transition = "recovery",
            job_id = job_id,
            epoch = tracing::field::Empty,
            event_seqs = tracing::field::Empty,
        )
    )]
    pub async fn recovery_claim(
        &self,
        job_id: &str,
        actor: &Actor,
        reason: &str,
        redispatch: bool,
    ) -> Result<Recovered, LedgerError> {
        let statement = sqlx::query_as::<_, RecoveryRow>(&self.sql.recovery_claim)
            .bind(job_id)
            .bind(HELD_FOR_ADOPTION)
            .bind(reason)
            .bind(micros(ADOPTION_HOLD));
        let mut fenced = self.guarded(job_id, statement, Intent::Recovery).await?;
        let (state, Reserved { epoch, at, .. }) = (fenced.row.state, fenced.row.reserved);
        let held = (state == JobState::Running)
            .then_some(fenced.row.pending_attempt)
            .flatten();
        let lost = match held {
            Some(attempt_no) => {
                adopt_attempt(&mut fenced.tx, job_id, attempt_no, epoch, HELD_FOR_ADOPTION).await?;
                0
            }
            None => mark_pending_lost(&mut fenced.tx, job_id, at).await?,
        };
        if state != JobState::Unknown && redispatch {
            let why = if held.is_some() { "adopt" } else { "recovered" };
            super::outbox::insert_outbox(&self.sql, &mut fenced.tx, job_id, epoch, why, at).await?;
        }
        fenced
            .commit(&[
                NewEvent::new(EventKind::RecoveryClaimed, actor).detail(detail::RecoveryClaimed {
                    from_epoch: epoch - 1,
                    reason: reason.to_owned(),
                    lost_attempts: lost,
                    adopted_attempt: held,
                }),
                NewEvent::new(EventKind::StateChanged, actor).detail(detail::StateChanged {
                    to: state.as_str().to_owned(),
                    why: Some(
                        match state {
                            JobState::Unknown => {
                                "an attempt may have reached the provider, with no provider id kept to adopt it"
                            }
                            JobState::Running => {
                                "the attempt in flight kept its provider id: held for a worker to adopt"
                            }
                            _ => "no attempt was in flight",
                        }
                        .to_owned(),
                    ),
                    ..Default::default()
                }),
            ])
            .await?;
        Ok(Recovered {
            state,
            epoch,
            lost_attempts: lost,
            held_for_adoption: held,
        })
    }

    /// A worker adopts the attempt in flight of a `running` job whose lease expired, or that
    /// recovery holds for adoption, when the attempt's provider id was kept and `provider`
    /// ran it: a new epoch with a lease of `lease` for `worker_id`, the same attempt (same
    /// number, no budget spent), to poll by its provider id. `None` when the job has no such attempt (or is not in that
    /// state): nothing was written.
    #[tracing::instrument(
        target = "fenceline::trace",
        name = "ledger.transition",
        skip_all,
        fields(
            transition = "adopt",
            job_id = job_id,
            epoch = tracing::field::Empty,
            event_seqs = tracing::field::Empty,
        )
    )]
    pub async fn adopt(
        &self,
        job_id: &str,
        worker_id: &str,
        (lease, provider): (Duration, &str),
        reason: &str,
    ) -> Result<Option<Adopted>, LedgerError> {
        let statement = sqlx::query_as::<_, AdoptRow>(&self.sql.adopt)
            .bind(job_id)
            .bind(worker_id)
            .bind(micros(lease))
            .bind(reason)
            .bind(HELD_FOR_ADOPTION)
            .bind(provider);
        let Some(mut fenced) = self.try_guarded(job_id, statement).await? else {
            return Ok(None);
        };
        let row = &fenced.row;
        let (
            attempt_no,
            Reserved {
                epoch,
                at,
                deadline_at,
                ..
            },
        ) = (row.pending_attempt, row.reserved);
        let provider_id =
            adopt_attempt(&mut fenced.tx, job_id, attempt_no, epoch, worker_id).await?;
        let claimed = Claimed {
            owner: Owner::new(JobId::from_stored(job_id.to_owned()), epoch, worker_id),
            epoch,
            owner_until: row.owner_until,
            at,
            deadline_at,
            attempt_count: row.attempt_count - 1,
            budget_used: row.budget_used - 1,
            max_attempts: row.max_attempts,
            // The adopted attempt is polled where it runs: at `provider`, whatever the step.
            route: crate::ledger::Route {
                provider: Some(provider.to_owned()),
                ..Default::default()
            },
        };
        let actor = Actor::Worker(worker_id.to_owned());
        fenced
            .commit(&[NewEvent::new(EventKind::RecoveryClaimed, &actor)
                .attempt(attempt_no)
                .detail(detail::RecoveryClaimed {
                    from_epoch: epoch - 1,
                    reason: reason.to_owned(),
                    lost_attempts: 0,
                    adopted_attempt: Some(attempt_no),
                })])
            .await?;
        Ok(Some(Adopted {
            claimed,
            attempt: AttemptStarted { attempt_no, epoch },
            provider_id,
        }))
    }

    /// The owner hands its job back while its lease is valid and before the deadline (epoch +
    /// 1, fencing itself out; past the deadline the job can only expire): with an attempt in
    /// flight the job becomes `unknown` (the call may have reached the provider), without one
    /// `retry_authorized` and re-dispatched through the outbox.
    #[tracing::instrument(
        target = "fenceline::trace",
        name = "ledger.transition",
        skip_all,
        fields(
            transition = "release",
            job_id = owner.job_id(),
            fence = owner.epoch,
            epoch = tracing::field::Empty,
            event_seqs = tracing::field::Empty,
        )
    )]
    pub async fn release(&self, owner: &Owner, reason: &str) -> Result<Recovered, LedgerError> {
        let job_id = owner.job_id();
        let statement = sqlx::query_as::<_, HandOverRow>(&self.sql.release)
            .bind(job_id)
            .bind(owner.epoch)
            .bind(reason);
        let intent = Intent::Owner { epoch: owner.epoch };
        let mut fenced = self.guarded(job_id, statement, intent).await?;
        let (state, Reserved { epoch, at, .. }) = (fenced.row.state, fenced.row.reserved);
        let lost = mark_pending_lost(&mut fenced.tx, job_id, at).await?;
        if state == JobState::RetryAuthorized {
            super::outbox::insert_outbox(&self.sql, &mut fenced.tx, job_id, epoch, "released", at)
                .await?;
        }
        let event = NewEvent::new(EventKind::StateChanged, &owner.actor())
            .epoch(epoch)
            .detail(detail::StateChanged {
                to: state.as_str().to_owned(),
                released_by_epoch: Some(owner.epoch),
                reason: Some(reason.to_owned()),
                lost_attempts: Some(lost),
                ..Default::default()
            });
        fenced.commit(&[event]).await?;
        Ok(Recovered {
            state,
            epoch,
            lost_attempts: lost,
            held_for_adoption: None,
        })
    }
}

/// The pending attempt `attempt_no` passes to the owner at `epoch` (`worker_id`): its answer
/// is accepted under that epoch. Gives back the provider id it is polled by.
async fn adopt_attempt(
    conn: &mut sqlx::AnyConnection,
    job_id: &str,
    attempt_no: i64,
    epoch: i64,
    worker_id: &str,
) -> Result<String, LedgerError> {
    // An answer refused for its lapsed lease stays evidence (its result row); the attempt is
    // pending again, to be polled and accepted under the new epoch.
    let id: Option<String> = sqlx::query_scalar(
        "UPDATE attempts SET epoch = $3, worker_id = $4, outcome = 'pending', \
         finished_at = NULL \
         WHERE job_id = $1 AND attempt_no = $2 AND outcome IN ('pending', 'stale_discarded') \
         RETURNING submitted_id",
    )
    .bind(job_id)
    .bind(attempt_no)
    .bind(epoch)
    .bind(worker_id)
    .fetch_optional(&mut *conn)
    .await?
    .flatten();
    id.ok_or_else(|| {
        LedgerError::Corrupt(format!("adopted attempt {attempt_no} has no provider id"))
    })
}
