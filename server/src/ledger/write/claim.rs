//! Claiming: `ready`/`retry_authorized` → `running` under a new epoch with a lease, and the
//! worker's path that records its first attempt in the same transaction.

use std::time::Duration;

use serde_json::json;

use super::{micros, reserves, Intent, Reserved};
use crate::job::{Actor, EventKind, JobId, JobState};
use crate::ledger::model::{AttemptStarted, Claimed, NewEvent, Owner};
use crate::ledger::{Ledger, LedgerError, Refusal};

#[derive(sqlx::FromRow)]
struct ClaimRow {
    owner_until: i64,
    attempt_count: i64,
    max_attempts: i64,
    #[sqlx(flatten)]
    reserved: Reserved,
}
reserves!(ClaimRow);

impl Ledger {
    /// `ready`/`retry_authorized` → `running` under a new epoch with a lease of `lease`
    /// (never past the deadline). A claim that finds the deadline passed expires the job; one
    /// that finds the budget spent fails it; either way the refusal is returned.
    pub async fn claim(
        &self,
        job_id: &str,
        worker_id: &str,
        lease: Duration,
    ) -> Result<Claimed, LedgerError> {
        Ok(self
            .claim_inner(job_id, worker_id, lease, None, None)
            .await?
            .0)
    }

    /// A claim and the first attempt of the new owner in one transaction: the worker's path,
    /// which always records its attempt right after claiming. Also records the
    /// `delivery_received` that triggered it (before `claimed`), when given. A refused claim
    /// writes nothing: the caller records the delivery itself.
    pub async fn claim_and_start(
        &self,
        job_id: &str,
        worker_id: &str,
        lease: Duration,
        delivery: Option<&NewEvent>,
        provider: &str,
    ) -> Result<(Claimed, AttemptStarted), LedgerError> {
        let (claimed, attempt) = self
            .claim_inner(job_id, worker_id, lease, delivery, Some(provider))
            .await?;
        let attempt =
            attempt.ok_or_else(|| LedgerError::Corrupt("claim without its attempt".into()))?;
        Ok((claimed, attempt))
    }

    async fn claim_inner(
        &self,
        job_id: &str,
        worker_id: &str,
        lease: Duration,
        delivery: Option<&NewEvent>,
        start: Option<&str>,
    ) -> Result<(Claimed, Option<AttemptStarted>), LedgerError> {
        let events_count = 1 + i64::from(delivery.is_some()) + i64::from(start.is_some());
        let statement = sqlx::query_as::<_, ClaimRow>(&self.sql.claim)
            .bind(job_id)
            .bind(worker_id)
            .bind(micros(lease))
            .bind(events_count)
            .bind(i64::from(start.is_some()));
        let actor = Actor::Worker(worker_id.to_owned());
        let mut fenced = match self.guarded(job_id, statement, Intent::Claim).await {
            Ok(fenced) => fenced,
            Err(refused @ LedgerError::Refused { .. }) => {
                match refused.refusal() {
                    Some(Refusal::DeadlinePassed) => {
                        self.expire_if_due(job_id, &actor).await?;
                    }
                    Some(Refusal::BudgetExhausted) => {
                        self.exhaust_budget(job_id, &actor).await?;
                    }
                    _ => {}
                }
                return Err(refused);
            }
            Err(error) => return Err(error),
        };
        let row = &fenced.row;
        let now = row.reserved.at;
        let claimed = Claimed {
            owner: Owner::new(
                JobId::from_stored(job_id.to_owned()),
                row.reserved.epoch,
                worker_id,
            ),
            epoch: row.reserved.epoch,
            owner_until: row.owner_until,
            deadline_at: row.reserved.deadline_at,
            at: now,
            attempt_count: row.attempt_count - i64::from(start.is_some()),
            max_attempts: row.max_attempts,
        };
        // Only a job's very first owner comes from `ready`: nothing returns to it.
        let from = if claimed.epoch == 1 {
            JobState::Ready
        } else {
            JobState::RetryAuthorized
        };
        let mut events = Vec::with_capacity(3);
        if let Some(received) = delivery {
            events.push(received.clone().epoch(claimed.epoch - 1));
        }
        events.push(NewEvent::new(EventKind::Claimed, &actor).detail(json!({
            "from": from.as_str(),
            "lease_ms": (claimed.owner_until - now) / 1000,
            "attempts_used": claimed.attempt_count,
            "max_attempts": claimed.max_attempts,
        })));
        let attempt = match start {
            Some(provider) => {
                let attempt = AttemptStarted {
                    attempt_no: row.attempt_count,
                    epoch: claimed.epoch,
                };
                super::attempt::insert_attempt(
                    &mut fenced.tx,
                    job_id,
                    &attempt,
                    worker_id,
                    provider,
                    now,
                )
                .await?;
                events.push(
                    NewEvent::new(EventKind::AttemptStarted, &actor)
                        .attempt(attempt.attempt_no)
                        .detail(json!({ "provider": provider })),
                );
                Some(attempt)
            }
            None => None,
        };
        fenced.commit(&events).await?;
        Ok((claimed, attempt))
    }
}
