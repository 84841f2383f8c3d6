//! Decisions over `unknown` jobs — an operator's, a provider retrieval's or a pre-approved
//! replay policy's — each naming the epoch the decider saw and audited in `decisions`.

use fenceline_app::action::Reason;

use super::{insert_result, new_result_ref, reserves, Intent, NewResult, Reserved};
use crate::job::detail;
use crate::job::{Actor, EventKind, JobState};
use crate::ledger::model::{Decision, NewEvent};
use crate::ledger::{Ledger, LedgerError};

#[derive(sqlx::FromRow)]
struct DecideRow {
    attempt_count: i64,
    #[sqlx(flatten)]
    reserved: Reserved,
}
reserves!(DecideRow);

/// Most characters a decision's evidence holds: the console's form says so too.
pub const EVIDENCE_MAX: usize = fenceline_app::action::EVIDENCE_MAX;

impl Ledger {
    /// Records a decision over an `unknown` job, naming the epoch the decider saw. Audited in
    /// `decisions`. A retry advances the epoch and re-dispatches; it needs budget and time.
    #[tracing::instrument(
        target = "fenceline::trace",
        name = "ledger.transition",
        skip_all,
        fields(
            transition = "decide",
            job_id = job_id,
            fence = seen_epoch,
            epoch = tracing::field::Empty,
            event_seqs = tracing::field::Empty,
        )
    )]
    pub async fn decide(
        &self,
        job_id: &str,
        seen_epoch: i64,
        decision: &Decision,
        actor: &Actor,
        reason: &str,
    ) -> Result<JobState, LedgerError> {
        let reason = Reason::parse(reason)
            .map_err(|no| LedgerError::Invalid(format!("a decision needs {no}")))?;
        let reason = reason.as_str();
        let (to, retry, intent) = match decision {
            Decision::ResolveSucceeded { evidence, .. } => {
                if evidence.trim().is_empty() {
                    return Err(LedgerError::Invalid(
                        "resolving as succeeded needs evidence".into(),
                    ));
                }
                if evidence.chars().count() > EVIDENCE_MAX {
                    return Err(LedgerError::Invalid(format!(
                        "a decision's evidence (the provider's reference for the call) is at \
                         most {EVIDENCE_MAX} characters"
                    )));
                }
                (
                    JobState::Succeeded,
                    false,
                    Intent::Decision { epoch: seen_epoch },
                )
            }
            Decision::ResolveFailed { .. } => (
                JobState::FailedTerminal,
                false,
                Intent::Decision { epoch: seen_epoch },
            ),
            Decision::AuthorizeRetry => (
                JobState::RetryAuthorized,
                true,
                Intent::Decision { epoch: seen_epoch },
            ),
            Decision::ReplayPolicy => (
                JobState::RetryAuthorized,
                true,
                Intent::Replay { epoch: seen_epoch },
            ),
        };
        let result_ref = match decision {
            Decision::ResolveSucceeded { .. } => Some(new_result_ref()),
            _ => None,
        };
        let error_code = match decision {
            Decision::ResolveFailed { error_code } => Some(error_code.clone()),
            _ => None,
        };
        let statement = sqlx::query_as::<_, DecideRow>(&self.sql.decide)
            .bind(job_id)
            .bind(seen_epoch)
            .bind(to.as_str())
            .bind(i64::from(retry))
            .bind(actor.to_string())
            .bind(result_ref.clone())
            .bind(error_code)
            .bind(i64::from(*decision == Decision::ReplayPolicy));
        let mut fenced = self.guarded(job_id, statement, intent).await?;
        let Reserved {
            epoch: new_epoch,
            at: now,
            ..
        } = fenced.row.reserved;
        let evidence = match decision {
            Decision::ResolveSucceeded { result, evidence } => {
                let last_attempt = fenced.row.attempt_count;
                let accepted = NewResult {
                    result_ref: result_ref.as_deref().unwrap_or_default(),
                    job_id,
                    attempt_no: (last_attempt > 0).then_some(last_attempt),
                    epoch: seen_epoch,
                    status: "accepted",
                    body: result,
                    at: now,
                };
                insert_result(&mut fenced.tx, &accepted).await?;
                Some(evidence.clone())
            }
            _ => None,
        };
        sqlx::query(
            "INSERT INTO decisions (job_id, decided_at, actor, decision, seen_epoch, new_epoch, \
             from_state, to_state, reason, evidence) \
             VALUES ($1, $2, $3, $4, $5, $6, 'unknown', $7, $8, $9)",
        )
        .bind(job_id)
        .bind(now)
        .bind(actor.to_string())
        .bind(decision.as_str())
        .bind(seen_epoch)
        .bind(new_epoch)
        .bind(to.as_str())
        .bind(reason)
        .bind(evidence.as_deref())
        .execute(&mut *fenced.tx)
        .await?;
        crate::ledger::audit::insert_audit(
            &mut fenced.tx,
            &crate::ledger::audit::NewAudit {
                at: now,
                actor: &actor.to_string(),
                action: decision.as_str(),
                job_id,
                seen_epoch,
                new_epoch,
                state_before: JobState::Unknown.as_str(),
                state_after: to.as_str(),
                reason,
                evidence: evidence.as_deref(),
                new_job_id: None,
            },
        )
        .await?;
        if to == JobState::RetryAuthorized {
            super::outbox::insert_outbox(
                &self.sql,
                &mut fenced.tx,
                job_id,
                new_epoch,
                decision.as_str(),
                now,
            )
            .await?;
        }
        let short_reason: String = reason.chars().take(200).collect();
        fenced
            .commit(&[
                NewEvent::new(EventKind::DecisionRecorded, actor)
                    .epoch(new_epoch)
                    .detail(detail::DecisionRecorded {
                        decision: decision.as_str().to_owned(),
                        seen_epoch,
                        reason: short_reason,
                        evidence: Some(evidence),
                        ..Default::default()
                    }),
                NewEvent::new(EventKind::StateChanged, actor)
                    .epoch(new_epoch)
                    .detail(detail::StateChanged {
                        to: to.as_str().to_owned(),
                        result_ref: Some(result_ref),
                        ..Default::default()
                    }),
            ])
            .await?;
        Ok(to)
    }

    /// Applies a job's pre-approved replay policy to it, if it has one and it can apply
    /// (`unknown` at `epoch`, budget and time left): a `decision_recorded` by `policy`, the job
    /// `retry_authorized` and re-dispatched. Returns whether it applied.
    pub async fn apply_replay_policy(&self, job_id: &str, epoch: i64) -> Result<bool, LedgerError> {
        match self
            .decide(
                job_id,
                epoch,
                &Decision::ReplayPolicy,
                &Actor::Policy,
                "pre-approved replay policy",
            )
            .await
        {
            Ok(_) => Ok(true),
            Err(LedgerError::Refused { .. }) => Ok(false),
            Err(error) => Err(error),
        }
    }
}
