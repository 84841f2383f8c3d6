//! A refusal the provider confirmed: it did not run the attempt (a rate limit, an overload, a
//! connection refused before sending). The attempt stays on record as evidence with the
//! outcome `throttled`, but spends none of the budget: the job waits in `retry_authorized`
//! until the provider's reset, and is sent again through the outbox then. A refusal that
//! moves the job on to the next pair of its route ([`Throttle::fallback`]) records that move
//! in the same transaction: the job's next attempt goes there.

use super::{micros, reserves, Intent, Reserved};
use crate::job::detail;
use crate::job::{EventKind, JobState};
use crate::ledger::model::{NewEvent, Owner, Throttle, Throttled};
use crate::ledger::{Ledger, LedgerError};

#[derive(sqlx::FromRow)]
struct ThrottleRow {
    retry_at: i64,
    budget_used: i64,
    max_attempts: i64,
    #[sqlx(flatten)]
    reserved: Reserved,
}
reserves!(ThrottleRow);

impl Ledger {
    /// The owner reports that the provider refused its pending attempt without running it:
    /// `running` → `retry_authorized` until `throttle.wait` from now (never past the deadline,
    /// where the reaper expires the job with the refusal as its last error), the budget as it
    /// was before the attempt, and a re-dispatch at that time.
    #[tracing::instrument(
        target = "fenceline::trace",
        name = "ledger.transition",
        skip_all,
        fields(
            transition = "throttle",
            job_id = owner.job_id(),
            fence = owner.epoch,
            epoch = tracing::field::Empty,
            attempt = attempt_no,
            event_seqs = tracing::field::Empty,
        )
    )]
    pub async fn record_throttle(
        &self,
        owner: &Owner,
        attempt_no: i64,
        throttle: &Throttle,
    ) -> Result<Throttled, LedgerError> {
        let job_id = owner.job_id();
        let epoch = owner.epoch;
        let statement = sqlx::query_as::<_, ThrottleRow>(&self.sql.record_throttle)
            .bind(job_id)
            .bind(epoch)
            .bind(attempt_no)
            .bind(throttle.error_code.as_str())
            .bind(micros(throttle.wait))
            .bind(i64::from(throttle.fallback.is_some()))
            .bind(throttle.fallback.as_ref().map(|f| f.to_provider.clone()))
            .bind(throttle.fallback.as_ref().map(|f| f.to_model.clone()));
        let intent = Intent::Finish { epoch, attempt_no };
        let mut fenced = self.guarded(job_id, statement, intent).await?;
        let row = &fenced.row;
        let (now, retry_at) = (row.reserved.at, row.retry_at);
        sqlx::query(
            "UPDATE attempts SET outcome = 'throttled', finished_at = $4, error_code = $5 \
             WHERE job_id = $1 AND attempt_no = $2 AND epoch = $3",
        )
        .bind(job_id)
        .bind(attempt_no)
        .bind(epoch)
        .bind(now)
        .bind(throttle.error_code.as_str())
        .execute(&mut *fenced.tx)
        .await?;
        super::outbox::insert_outbox(
            &self.sql,
            &mut fenced.tx,
            job_id,
            epoch,
            "throttled",
            retry_at,
        )
        .await?;
        let actor = owner.actor();
        let finished = detail::AttemptFinished {
            outcome: "throttled".to_owned(),
            error_code: Some(throttle.error_code.clone()),
            limit: throttle.limit.clone(),
        };
        let waits = detail::Throttled {
            to: JobState::RetryAuthorized.as_str().to_owned(),
            retry_in_ms: (retry_at - now) / 1000,
            provider: throttle.provider.clone(),
            model: throttle.model.clone(),
            budget_used: row.budget_used,
            max_attempts: row.max_attempts,
            limit: throttle.limit.clone(),
        };
        let mut events = vec![
            NewEvent::new(EventKind::AttemptFinished, &actor)
                .attempt(attempt_no)
                .detail(finished),
            NewEvent::new(EventKind::Throttled, &actor)
                .attempt(attempt_no)
                .detail(waits),
        ];
        if let Some(fallback) = &throttle.fallback {
            events.push(
                NewEvent::new(EventKind::ProviderFallback, &actor)
                    .attempt(attempt_no)
                    .detail(fallback.clone()),
            );
        }
        fenced.commit(&events).await?;
        Ok(Throttled { retry_at })
    }
}
