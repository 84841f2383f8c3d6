//! An operator cancels a job that is not terminal: fenced by the epoch and state they saw, it
//! moves to a new epoch (an attempt still running can never commit) and fails for good, with a
//! `decision_recorded` on its timeline and an audit entry.

use fenceline_app::action::Reason;

use super::{mark_pending_lost, Intent, Reserved};
use crate::job::detail;
use crate::job::{Actor, EventKind, JobState};
use crate::ledger::audit::{insert_audit, NewAudit};
use crate::ledger::model::NewEvent;
use crate::ledger::{Ledger, LedgerError};

impl Ledger {
    /// Cancels `job_id`, which the operator saw `seen_state` at `seen_epoch`. Refused (and
    /// nothing changes) if the job moved on since.
    #[tracing::instrument(
        target = "fenceline::trace",
        name = "ledger.transition",
        skip_all,
        fields(
            transition = "cancel",
            job_id = job_id,
            fence = seen_epoch,
            epoch = tracing::field::Empty,
            event_seqs = tracing::field::Empty,
        )
    )]
    pub async fn cancel(
        &self,
        job_id: &str,
        seen_epoch: i64,
        seen_state: JobState,
        actor: &Actor,
        reason: &str,
    ) -> Result<(), LedgerError> {
        let reason = Reason::parse(reason)
            .map_err(|no| LedgerError::Invalid(format!("a cancellation needs {no}")))?;
        let reason = reason.as_str();
        // Only where the state table lets a job fail: a job that has not started (`ready`)
        // fails only after an attempt or a decision. Said so while the job is as it was seen;
        // one that moved on since is refused by the fence below, as any stale view is.
        if let Err(crate::job::TransitionError::NoEdge { why, .. }) =
            seen_state.can_move_to(JobState::FailedTerminal)
        {
            let unchanged = self
                .job(job_id)
                .await?
                .is_some_and(|j| j.state == seen_state && j.owner_epoch == seen_epoch);
            if unchanged {
                return Err(LedgerError::Invalid(format!(
                    "a {} job cannot be cancelled ({why}): it waits for a worker or its deadline",
                    seen_state.as_str().replace('_', " ")
                )));
            }
        }
        let statement = sqlx::query_as::<_, Reserved>(&self.sql.cancel)
            .bind(job_id)
            .bind(seen_epoch)
            .bind(seen_state.as_str())
            .bind(actor.to_string());
        let mut fenced = self
            .guarded(job_id, statement, Intent::Decision { epoch: seen_epoch })
            .await?;
        let Reserved {
            epoch: new_epoch,
            at,
            ..
        } = fenced.row;
        let lost = mark_pending_lost(&mut fenced.tx, job_id, at).await?;
        let actor_name = actor.to_string();
        insert_audit(
            &mut fenced.tx,
            &NewAudit {
                at,
                actor: &actor_name,
                action: "cancel",
                job_id,
                seen_epoch,
                new_epoch,
                state_before: seen_state.as_str(),
                state_after: JobState::FailedTerminal.as_str(),
                reason,
                evidence: None,
                new_job_id: None,
            },
        )
        .await?;
        let short_reason: String = reason.chars().take(200).collect();
        fenced
            .commit(&[
                NewEvent::new(EventKind::DecisionRecorded, actor)
                    .epoch(new_epoch)
                    .detail(detail::DecisionRecorded {
                        decision: "cancel".to_owned(),
                        seen_epoch,
                        reason: short_reason,
                        lost_attempts: Some(lost),
                        ..Default::default()
                    }),
                NewEvent::new(EventKind::StateChanged, actor)
                    .epoch(new_epoch)
                    .detail(detail::StateChanged {
                        to: JobState::FailedTerminal.as_str().to_owned(),
                        error_code: Some("cancelled".to_owned()),
                        ..Default::default()
                    }),
            ])
            .await?;
        Ok(())
    }
}
