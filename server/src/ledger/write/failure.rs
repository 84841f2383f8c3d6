//! A confirmed provider failure reported by the owner: another attempt after a backoff, or
//! the end of the job.

use super::{micros, reserves, Intent, Reserved};
use crate::job::detail;
use crate::job::{EventKind, JobState};
use crate::ledger::model::{Failure, FailureOutcome, NewEvent, Owner};
use crate::ledger::{Ledger, LedgerError};

#[derive(sqlx::FromRow)]
struct FailureRow {
    #[sqlx(try_from = "String")]
    state: JobState,
    retry_at: Option<i64>,
    budget_used: i64,
    #[sqlx(flatten)]
    reserved: Reserved,
}
reserves!(FailureRow);

impl Ledger {
    /// The owner reports a confirmed provider failure of its pending attempt. Retryable within
    /// budget → `retry_authorized` with a backoff and a re-dispatch after it; retryable with
    /// the budget spent, or fatal → `failed_terminal`.
    #[tracing::instrument(
        target = "fenceline::trace",
        name = "ledger.transition",
        skip_all,
        fields(
            transition = "failure",
            job_id = owner.job_id(),
            fence = owner.epoch,
            epoch = tracing::field::Empty,
            attempt = attempt_no,
            event_seqs = tracing::field::Empty,
        )
    )]
    pub async fn record_failure(
        &self,
        owner: &Owner,
        attempt_no: i64,
        failure: &Failure,
    ) -> Result<FailureOutcome, LedgerError> {
        let job_id = owner.job_id();
        let epoch = owner.epoch;
        let (fatal, error_code, backoff) = match failure {
            Failure::Retryable {
                error_code,
                backoff,
            } => (false, error_code, micros(*backoff)),
            Failure::Fatal { error_code } => (true, error_code, 0),
        };
        let statement = sqlx::query_as::<_, FailureRow>(&self.sql.record_failure)
            .bind(job_id)
            .bind(epoch)
            .bind(attempt_no)
            .bind(error_code)
            .bind(i64::from(fatal))
            .bind(backoff);
        let intent = Intent::Finish { epoch, attempt_no };
        let mut fenced = self.guarded(job_id, statement, intent).await?;
        let now = fenced.row.reserved.at;
        let outcome = if fatal {
            "failed_fatal"
        } else {
            "failed_retryable"
        };
        sqlx::query(
            "UPDATE attempts SET outcome = $4, finished_at = $5, error_code = $6 \
             WHERE job_id = $1 AND attempt_no = $2 AND epoch = $3",
        )
        .bind(job_id)
        .bind(attempt_no)
        .bind(epoch)
        .bind(outcome)
        .bind(now)
        .bind(error_code)
        .execute(&mut *fenced.tx)
        .await?;
        let actor = owner.actor();
        let finished = NewEvent::new(EventKind::AttemptFinished, &actor)
            .attempt(attempt_no)
            .detail(detail::AttemptFinished {
                outcome: outcome.to_owned(),
                error_code: Some(error_code.clone()),
                limit: None,
            });
        let then = match (fenced.row.state, fenced.row.retry_at) {
            (JobState::RetryAuthorized, Some(retry_at)) => {
                super::outbox::insert_outbox(
                    &self.sql,
                    &mut fenced.tx,
                    job_id,
                    epoch,
                    "retry",
                    retry_at,
                )
                .await?;
                NewEvent::new(EventKind::StateChanged, &actor).detail(detail::StateChanged {
                    to: JobState::RetryAuthorized.as_str().to_owned(),
                    retry_in_ms: Some((retry_at - now) / 1000),
                    ..Default::default()
                })
            }
            _ if !fatal => {
                NewEvent::new(EventKind::BudgetExhausted, &actor).detail(detail::BudgetExhausted {
                    to: Some(JobState::FailedTerminal.as_str().to_owned()),
                    attempts_used: fenced.row.budget_used,
                })
            }
            _ => NewEvent::new(EventKind::StateChanged, &actor).detail(detail::StateChanged {
                to: JobState::FailedTerminal.as_str().to_owned(),
                error_code: Some(error_code.clone()),
                ..Default::default()
            }),
        };
        let state = fenced.commit(&[finished, then]).await?.state;
        Ok(FailureOutcome { state })
    }
}
