//! The ends no owner chose: a fixed deadline that passed (`expired`) and an attempt budget
//! that is spent (`failed_terminal`).

use super::{guarded_in, mark_pending_lost, reserves, Reserved};
use crate::job::detail;
use crate::job::{Actor, EventKind, JobState};
use crate::ledger::model::NewEvent;
use crate::ledger::{Ledger, LedgerError, Refusal};

#[derive(sqlx::FromRow)]
struct SpentRow {
    budget_used: i64,
    #[sqlx(flatten)]
    reserved: Reserved,
}
reserves!(SpentRow);

#[derive(sqlx::FromRow)]
struct ExpiredRow {
    /// The job's last error: why it waited (a provider's refusals, a backoff), if it did.
    error_code: Option<String>,
    #[sqlx(flatten)]
    reserved: Reserved,
}
reserves!(ExpiredRow);

impl Ledger {
    /// Moves a live job whose fixed deadline has passed to `expired`; an attempt in flight
    /// becomes `lost`. Returns whether this call expired it.
    #[tracing::instrument(
        target = "fenceline::trace",
        name = "ledger.transition",
        skip_all,
        fields(
            transition = "expire",
            job_id = job_id,
            epoch = tracing::field::Empty,
            event_seqs = tracing::field::Empty,
        )
    )]
    pub async fn expire_if_due(&self, job_id: &str, actor: &Actor) -> Result<bool, LedgerError> {
        let mut tx = self.begin_write().await?;
        let Some(from) = sqlx::query_scalar::<_, String>(&self.sql.lock_state)
            .bind(job_id)
            .fetch_optional(&mut *tx)
            .await?
        else {
            return Err(LedgerError::refused(job_id, Refusal::NotFound));
        };
        let from = JobState::try_from(from).map_err(|e| LedgerError::Corrupt(e.to_string()))?;
        let statement = sqlx::query_as::<_, ExpiredRow>(&self.sql.expire).bind(job_id);
        let Some(mut fenced) = guarded_in(&self.sql, tx, job_id, statement).await? else {
            return Ok(false);
        };
        let lost = mark_pending_lost(&mut fenced.tx, job_id, fenced.row.reserved.at).await?;
        let event =
            NewEvent::new(EventKind::DeadlineExpired, actor).detail(detail::DeadlineExpired {
                from: from.as_str().to_owned(),
                lost_attempts: lost,
                last_error: fenced.row.error_code.clone(),
            });
        fenced.commit(&[event]).await?;
        Ok(true)
    }

    /// `retry_authorized` with the budget spent → `failed_terminal`. Returns whether this call
    /// failed it.
    pub(crate) async fn exhaust_budget(
        &self,
        job_id: &str,
        actor: &Actor,
    ) -> Result<bool, LedgerError> {
        let statement = sqlx::query_as::<_, SpentRow>(&self.sql.exhaust_budget).bind(job_id);
        let Some(fenced) = self.try_guarded(job_id, statement).await? else {
            return Ok(false);
        };
        let event =
            NewEvent::new(EventKind::BudgetExhausted, actor).detail(detail::BudgetExhausted {
                attempts_used: fenced.row.budget_used,
                to: None,
            });
        fenced.commit(&[event]).await?;
        Ok(true)
    }
}
