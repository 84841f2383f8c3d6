//! A refusal the provider confirmed: it did not run the attempt (a rate limit, an overload, a
//! connection refused before sending). The attempt stays on record as evidence with the
//! outcome `throttled`, but spends none of the budget: the job waits in `retry_authorized`
//! until the provider's reset, and is sent again through the outbox then.

use serde_json::json;

use super::{micros, reserves, Intent, Reserved};
use crate::job::EventKind;
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
            .bind(micros(throttle.wait));
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
        let mut finished = json!({ "outcome": "throttled", "error_code": throttle.error_code });
        let mut waits = json!({
            "to": "retry_authorized",
            "retry_in_ms": (retry_at - now) / 1000,
            "provider": throttle.provider,
            "model": throttle.model,
            "budget_used": row.budget_used,
            "max_attempts": row.max_attempts,
        });
        if let Some(limit) = &throttle.limit {
            finished["limit"] = json!(limit);
            waits["limit"] = json!(limit);
        }
        let events = [
            NewEvent::new(EventKind::AttemptFinished, &actor)
                .attempt(attempt_no)
                .detail(finished),
            NewEvent::new(EventKind::Throttled, &actor)
                .attempt(attempt_no)
                .detail(waits),
        ];
        fenced.commit(&events).await?;
        Ok(Throttled { retry_at })
    }
}
