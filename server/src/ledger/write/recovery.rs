//! Taking a job away from its owner: the reaper's recovery of an expired lease, and an owner
//! handing its job back. Either way the epoch advances (the old owner is fenced out), an
//! attempt in flight becomes `lost` and the job `unknown`; with none it is `retry_authorized`.

use super::{mark_pending_lost, reserves, Intent, Reserved};
use crate::job::detail;
use crate::job::{Actor, EventKind, JobState};
use crate::ledger::model::{NewEvent, Owner, Recovered};
use crate::ledger::{Ledger, LedgerError};

#[derive(sqlx::FromRow)]
struct HandOverRow {
    #[sqlx(try_from = "String")]
    state: JobState,
    #[sqlx(flatten)]
    reserved: Reserved,
}
reserves!(HandOverRow);

impl Ledger {
    /// Takes recovery ownership of a `running` job whose lease expired (epoch + 1), fencing out
    /// the old owner. An attempt in flight may have reached the provider: it becomes `lost`
    /// and the job `unknown`. With no attempt in flight the job becomes `retry_authorized`,
    /// re-dispatched through the outbox when `redispatch` (the caller holds no delivery).
    pub async fn recovery_claim(
        &self,
        job_id: &str,
        actor: &Actor,
        reason: &str,
        redispatch: bool,
    ) -> Result<Recovered, LedgerError> {
        let statement = sqlx::query_as::<_, HandOverRow>(&self.sql.recovery_claim)
            .bind(job_id)
            .bind(actor.to_string())
            .bind(reason);
        let mut fenced = self.guarded(job_id, statement, Intent::Recovery).await?;
        let (state, Reserved { epoch, at, .. }) = (fenced.row.state, fenced.row.reserved);
        let lost = mark_pending_lost(&mut fenced.tx, job_id, at).await?;
        if state == JobState::RetryAuthorized && redispatch {
            super::outbox::insert_outbox(&self.sql, &mut fenced.tx, job_id, epoch, "recovered", at)
                .await?;
        }
        fenced
            .commit(&[
                NewEvent::new(EventKind::RecoveryClaimed, actor).detail(detail::RecoveryClaimed {
                    from_epoch: epoch - 1,
                    reason: reason.to_owned(),
                    lost_attempts: lost,
                }),
                NewEvent::new(EventKind::StateChanged, actor).detail(detail::StateChanged {
                    to: state.as_str().to_owned(),
                    why: Some(
                        if state == JobState::Unknown {
                            "an attempt may have reached the provider"
                        } else {
                            "no attempt was in flight"
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
        })
    }

    /// The owner hands its job back while its lease is valid and before the deadline (epoch +
    /// 1, fencing itself out; past the deadline the job can only expire): with an attempt in
    /// flight the job becomes `unknown` (the call may have reached the provider), without one
    /// `retry_authorized` and re-dispatched through the outbox.
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
        })
    }
}
