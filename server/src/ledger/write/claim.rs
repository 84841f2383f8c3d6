//! Claiming: `ready`/`retry_authorized` → `running` under a new epoch with a lease, and the
//! worker's path that records its first attempt in the same transaction.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::Value;
use sqlx::AnyConnection;

use super::batch::{distinct_rounds, place, ClaimedRow, WrittenJob};
use super::{event_rows, micros, reserves, EventRow, Intent, Reserved};
use crate::job::detail;
use crate::job::{Actor, EventKind, JobId, JobState};
use crate::ledger::model::{AttemptStarted, Claimed, Job, NewEvent, Owner, Route};
use crate::ledger::read::parse_json;
use crate::ledger::{Ledger, LedgerError, Refusal};

/// A worker's claim of a job it received, with the delivery's event and its first attempt.
pub(crate) struct ClaimOp {
    pub(crate) job_id: String,
    /// The tenant the message named: a job of another tenant is not claimed here.
    pub(crate) tenant: String,
    pub(crate) worker_id: String,
    pub(crate) lease: Duration,
    pub(crate) provider: String,
    pub(crate) received: NewEvent,
    /// The caller's transition span, told the sequence numbers its events got.
    pub(crate) span: tracing::Span,
}

/// A claim that went through, with the job's stored input and model (JSON text).
pub(crate) struct ClaimDone {
    /// The job as the claim left it.
    pub(crate) job: Job,
    pub(crate) claimed: Claimed,
    pub(crate) attempt: AttemptStarted,
    pub(crate) input: Option<(String, String)>,
}

#[derive(sqlx::FromRow)]
struct ClaimRow {
    owner_until: i64,
    attempt_count: i64,
    budget_used: i64,
    max_attempts: i64,
    #[sqlx(flatten)]
    route: Route,
    #[sqlx(flatten)]
    reserved: Reserved,
}
reserves!(ClaimRow);

impl Ledger {
    /// `ready`/`retry_authorized` → `running` under a new epoch with a lease of `lease`
    /// (never past the deadline). A claim that finds the deadline passed expires the job; one
    /// that finds the budget spent fails it; either way the refusal is returned.
    #[tracing::instrument(
        target = "fenceline::trace",
        name = "ledger.transition",
        skip_all,
        fields(
            transition = "claim",
            job_id = job_id,
            epoch = tracing::field::Empty,
            event_seqs = tracing::field::Empty,
        )
    )]
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
    #[tracing::instrument(
        target = "fenceline::trace",
        name = "ledger.transition",
        skip_all,
        fields(
            transition = "claim",
            job_id = job_id,
            epoch = tracing::field::Empty,
            event_seqs = tracing::field::Empty,
        )
    )]
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

    /// [`Ledger::claim_and_start`] for a worker's delivery, in the next group commit of
    /// claims when there is one, with the job's stored input and model read in the same
    /// transaction (`None` when the claim went alone: the caller reads them).
    pub async fn claim_delivered(
        &self,
        job_id: &str,
        tenant: &str,
        worker_id: &str,
        lease: Duration,
        received: &NewEvent,
        provider: &str,
    ) -> Result<(Claimed, AttemptStarted, Option<(Value, Value)>), LedgerError> {
        if let Some((_, claimed, attempt, input)) = self
            .claim_received(job_id, tenant, worker_id, lease, received, provider)
            .await?
        {
            return Ok((claimed, attempt, input));
        }
        let (claimed, attempt) = self
            .claim_and_start(job_id, worker_id, lease, Some(received), provider)
            .await?;
        Ok((claimed, attempt, None))
    }

    /// A worker's claim straight from a delivery, before reading the job: in the next group
    /// commit of claims, only if the job is `ready` or `retry_authorized` (and due, within its
    /// deadline and budget) and belongs to `tenant`. Gives back the job as the claim left
    /// it, the claim, its first attempt and the job's input. `None` when it did not go
    /// through (or there is no group commit) and nothing was written: the caller examines
    /// the job the long way.
    #[allow(clippy::type_complexity)]
    #[tracing::instrument(
        target = "fenceline::trace",
        name = "ledger.transition",
        skip_all,
        fields(
            transition = "claim",
            job_id = job_id,
            epoch = tracing::field::Empty,
            event_seqs = tracing::field::Empty,
        )
    )]
    pub async fn claim_received(
        &self,
        job_id: &str,
        tenant: &str,
        worker_id: &str,
        lease: Duration,
        received: &NewEvent,
        provider: &str,
    ) -> Result<Option<(Job, Claimed, AttemptStarted, Option<(Value, Value)>)>, LedgerError> {
        let op = ClaimOp {
            span: tracing::Span::current(),
            job_id: job_id.to_owned(),
            tenant: tenant.to_owned(),
            worker_id: worker_id.to_owned(),
            lease,
            provider: provider.to_owned(),
            received: received.clone(),
        };
        let Some(done) = self.grouped_claim(op).await? else {
            return Ok(None);
        };
        let job = done.job;
        let input = match done.input {
            Some((input, model)) => Some((parse_json(&input)?, parse_json(&model)?)),
            None => None,
        };
        Ok(Some((job, done.claimed, done.attempt, input)))
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
            budget_used: row.budget_used - i64::from(start.is_some()),
            max_attempts: row.max_attempts,
            route: row.route.clone(),
        };
        // A job moved on along its route has its attempt go to that step's provider.
        let start = start.map(|provider| claimed.route.provider.as_deref().unwrap_or(provider));
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
                Some(attempt)
            }
            None => None,
        };
        let started = attempt.as_ref().zip(start);
        let events = claim_events(delivery, &claimed, &actor, started);
        fenced.commit(&events).await?;
        Ok((claimed, attempt))
    }
}

/// The events of a claim: the delivery that triggered it (under the epoch before), `claimed`,
/// and `attempt_started` when the claim also started the new owner's first attempt.
pub(super) fn claim_events(
    delivery: Option<&NewEvent>,
    claimed: &Claimed,
    actor: &Actor,
    started: Option<(&AttemptStarted, &str)>,
) -> Vec<NewEvent> {
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
    events.push(
        NewEvent::new(EventKind::Claimed, actor).detail(detail::Claimed {
            from: from.as_str().to_owned(),
            lease_ms: (claimed.owner_until - claimed.at) / 1000,
            attempts_used: claimed.budget_used,
            max_attempts: claimed.max_attempts,
        }),
    );
    if let Some((attempt, provider)) = started {
        events.push(
            NewEvent::new(EventKind::AttemptStarted, actor)
                .attempt(attempt.attempt_no)
                .detail(detail::AttemptStarted {
                    provider: provider.to_owned(),
                }),
        );
    }
    events
}

/// The batched form, for group commit ([`super::group`]).
impl Ledger {
    pub(super) async fn claim_many(
        &self,
        tx: &mut AnyConnection,
        ops: &[ClaimOp],
        events_out: &mut Vec<EventRow>,
    ) -> Result<Vec<Option<ClaimDone>>, LedgerError> {
        // Every worker's claims in one statement, each with its worker and lease; the
        // provider is each attempt's own. Only the message's own tenant's job is claimed here
        // (the rows are locked already). A job received twice (two copies of its message) is
        // claimed by its first delivery's statement, its second's coming after it, in order.
        let mut rows: Vec<(usize, ClaimedRow)> = Vec::with_capacity(ops.len());
        for members in distinct_rounds(ops, |op| op.job_id.as_str()) {
            let query = bind_rows!(
                |sql| sqlx::query(sql),
                self.sql.claim_each,
                &members,
                |&i| [
                    ops[i].job_id.as_str(),
                    ops[i].tenant.as_str(),
                    ops[i].worker_id.as_str(),
                    micros(ops[i].lease),
                ]
            );
            let index: HashMap<&str, usize> = members
                .iter()
                .map(|&i| (ops[i].job_id.as_str(), i))
                .collect();
            for row in query.fetch_all(&mut *tx).await? {
                let row = ClaimedRow::from_row(&row)?;
                if let Some(&i) = index.get(row.written.job.job_id.as_str()) {
                    rows.push((i, row));
                }
            }
        }
        let mut done: Vec<Option<ClaimDone>> = ops.iter().map(|_| None).collect();
        if rows.is_empty() {
            return Ok(done);
        }
        let claims: Vec<(usize, Reserved, ClaimDone)> = rows
            .into_iter()
            .map(|(i, row)| {
                let ClaimedRow {
                    written: WrittenJob { job, reserved: r },
                    input,
                } = row;
                let claimed = Claimed {
                    owner: Owner::new(
                        JobId::from_stored(job.job_id.clone()),
                        r.epoch,
                        &ops[i].worker_id,
                    ),
                    epoch: r.epoch,
                    owner_until: job.owner_until.unwrap_or(r.deadline_at),
                    deadline_at: r.deadline_at,
                    at: r.at,
                    attempt_count: job.attempt_count - 1,
                    budget_used: job.budget_used - 1,
                    max_attempts: job.max_attempts,
                    route: job.route.clone(),
                };
                let attempt = AttemptStarted {
                    attempt_no: job.attempt_count,
                    epoch: r.epoch,
                };
                let done = ClaimDone {
                    job,
                    claimed,
                    attempt,
                    input,
                };
                (i, r, done)
            })
            .collect();
        let query = bind_rows!(
            |sql| sqlx::query(sql),
            self.sql.insert_attempts,
            &claims,
            |(i, _, d)| [
                ops[*i].job_id.as_str(),
                d.attempt.attempt_no,
                d.attempt.epoch,
                ops[*i].worker_id.as_str(),
                d.claimed
                    .route
                    .provider
                    .as_deref()
                    .unwrap_or(&ops[*i].provider),
                d.attempt.client_request_id(&ops[*i].job_id),
                d.claimed.at,
            ]
        );
        query.execute(&mut *tx).await?;
        let events: Vec<(usize, Reserved, Vec<NewEvent>)> = claims
            .iter()
            .map(|(i, r, d)| {
                let op = &ops[*i];
                let actor = Actor::Worker(op.worker_id.clone());
                let provider = d.claimed.route.provider.as_deref().unwrap_or(&op.provider);
                let started = Some((&d.attempt, provider));
                // The state the delivery found: only these two can be claimed.
                let found = if d.claimed.epoch == 1 {
                    JobState::Ready
                } else {
                    JobState::RetryAuthorized
                };
                let received = op.received.clone().detail(detail::DeliveryReceived {
                    state: found.as_str().to_owned(),
                });
                let events =
                    super::claim::claim_events(Some(&received), &d.claimed, &actor, started);
                (*i, *r, events)
            })
            .collect();
        events_out.extend(event_rows(&place(ops, &events, |op| &op.job_id)));
        for (i, _, d) in claims {
            done[i] = Some(d);
        }
        Ok(done)
    }
}
