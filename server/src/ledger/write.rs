//! The guarded writes. Each is one short transaction: a compare-and-set `UPDATE … RETURNING`
//! on the job row (which also reserves the event sequence numbers), the rows that go with it,
//! and the timeline events. Zero rows → roll back, re-read, return a typed [`Refusal`].

use std::time::Duration;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use sqlx::any::AnyRow;
use sqlx::{AnyConnection, Row};

use super::dialect::row_placeholders;
use super::model::{
    Accepted, AttemptStarted, Claimed, Created, Decision, Failure, FailureOutcome, Job, NewEvent,
    NewJob, Recovered, Renewal,
};
use super::read::{job_from_row, JOB_COLUMNS};
use super::{Ledger, LedgerError, Refusal};
use crate::job::{Actor, EventKind, JobId, JobState};

/// Largest number of jobs renewed by one statement.
const RENEW_CHUNK: usize = 400;
/// Largest number of events in one multi-row insert (12 parameters each).
const EVENT_CHUNK: usize = 400;
/// Event details longer than this are replaced by a marker: events stay small.
const DETAIL_MAX: usize = 2048;

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

/// An event with its reserved place on a job's timeline.
pub(crate) struct Placed<'a> {
    pub(crate) job_id: &'a str,
    pub(crate) seq: i64,
    pub(crate) at: i64,
    pub(crate) epoch: i64,
    pub(crate) deadline_at: i64,
    pub(crate) event: &'a NewEvent,
}

pub(crate) async fn insert_events(
    conn: &mut AnyConnection,
    rows: &[Placed<'_>],
) -> Result<(), LedgerError> {
    for chunk in rows.chunks(EVENT_CHUNK) {
        let mut sql = String::from(
            "INSERT INTO events (job_id, seq, at, kind, epoch, actor, message_id, receive_count, \
             handle_hash, attempt_no, deadline_left_ms, detail) VALUES ",
        );
        for i in 0..chunk.len() {
            if i > 0 {
                sql.push_str(", ");
            }
            sql.push_str(&row_placeholders(i * 12 + 1, 12));
        }
        let mut query = sqlx::query(&sql);
        for row in chunk {
            let e = row.event;
            let mut detail = e.detail.to_string();
            if detail.len() > DETAIL_MAX {
                detail = json!({"truncated": true}).to_string();
            }
            query = query
                .bind(row.job_id.to_owned())
                .bind(row.seq)
                .bind(row.at)
                .bind(e.kind.as_str())
                .bind(e.epoch.unwrap_or(row.epoch))
                .bind(e.actor.to_string())
                .bind(e.delivery.as_ref().map(|d| d.message_id.clone()))
                .bind(e.delivery.as_ref().map(|d| d.receive_count))
                .bind(e.delivery.as_ref().map(|d| d.handle_hash.clone()))
                .bind(e.attempt_no)
                .bind((row.deadline_at - row.at) / 1000)
                .bind(detail);
        }
        query.execute(&mut *conn).await?;
    }
    Ok(())
}

/// Places `events` at `first_seq…` on one job's timeline and inserts them.
pub(crate) async fn append(
    conn: &mut AnyConnection,
    job_id: &str,
    first_seq: i64,
    at: i64,
    epoch: i64,
    deadline_at: i64,
    events: &[NewEvent],
) -> Result<(), LedgerError> {
    let rows: Vec<_> = events
        .iter()
        .enumerate()
        .map(|(i, event)| Placed {
            job_id,
            seq: first_seq + i as i64,
            at,
            epoch,
            deadline_at,
            event,
        })
        .collect();
    insert_events(conn, &rows).await
}

fn get_i64(row: &AnyRow, col: &str) -> Result<i64, LedgerError> {
    Ok(row.try_get::<i64, _>(col)?)
}

fn state_of(row: &AnyRow) -> Result<JobState, LedgerError> {
    let s: String = row.try_get("state")?;
    s.parse().map_err(|e| LedgerError::Corrupt(format!("{e}")))
}

/// What the caller meant to do, to explain a refused write.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Intent {
    Claim,
    /// An owner acting under its epoch (attempt start, renewal, accept, failure).
    Owner {
        epoch: i64,
    },
    Recovery,
    Decision {
        epoch: i64,
    },
}

/// Why a guarded write found no row. Pure: the job as re-read and the database clock.
pub(crate) fn classify(job: Option<&Job>, now: i64, intent: Intent) -> Refusal {
    let Some(job) = job else {
        return Refusal::NotFound;
    };
    if let Intent::Owner { epoch } | Intent::Decision { epoch } = intent {
        if job.owner_epoch != epoch {
            return Refusal::StaleEpoch {
                expected: epoch,
                found: job.owner_epoch,
            };
        }
    }
    if job.state.is_terminal() {
        return Refusal::AlreadyTerminal(job.state);
    }
    let lease_valid = job.state == JobState::Running && job.owner_until.is_some_and(|u| u > now);
    if job.deadline_at <= now {
        return Refusal::DeadlinePassed;
    }
    match intent {
        Intent::Claim | Intent::Recovery if lease_valid => Refusal::LiveOwner {
            epoch: job.owner_epoch,
        },
        Intent::Claim if job.state == JobState::Running => Refusal::LeaseExpired,
        Intent::Claim
            if matches!(job.state, JobState::Ready | JobState::RetryAuthorized)
                && job.attempt_count >= job.max_attempts =>
        {
            Refusal::BudgetExhausted
        }
        Intent::Claim if job.retry_at.is_some_and(|at| at > now) => Refusal::BackoffPending,
        Intent::Owner { .. } if job.state == JobState::Running && !lease_valid => {
            Refusal::LeaseExpired
        }
        Intent::Decision { .. }
            if job.state == JobState::Unknown && job.attempt_count >= job.max_attempts =>
        {
            Refusal::BudgetExhausted
        }
        _ => Refusal::WrongState(job.state),
    }
}

impl Ledger {
    pub(crate) async fn refusal(
        &self,
        job_id: &str,
        intent: Intent,
    ) -> Result<Refusal, LedgerError> {
        let now = self.now_us().await?;
        let job = self.job(job_id).await?;
        Ok(classify(job.as_ref(), now, intent))
    }

    /// Creates a job with its input and outbox row, idempotently per tenant and key.
    pub async fn create_job(&self, new: NewJob, actor: &Actor) -> Result<Created, LedgerError> {
        if new.max_attempts == 0 || new.max_attempts > 100 {
            return Err(LedgerError::Invalid("max_attempts must be 1..=100".into()));
        }
        let job_id = JobId::generate();
        let input_ref = format!("ledger:job_inputs/{job_id}");
        let mut tx = self.begin_write().await?;
        let sql = self.dialect.sql(
            "INSERT INTO jobs (job_id, tenant, idempotency_key, request_digest, input_ref, \
             contract_version, state, deadline_at, max_attempts, replay_policy, created_at, \
             updated_at, next_event_seq) \
             VALUES ($1, $2, $3, $4, $5, $6, 'ready', {now} + $7, $8, $9, {now}, {now}, 2) \
             ON CONFLICT (tenant, idempotency_key) DO NOTHING \
             RETURNING created_at, deadline_at",
        );
        let inserted = sqlx::query(&sql)
            .bind(job_id.as_str())
            .bind(&new.tenant)
            .bind(&new.idempotency_key)
            .bind(&new.request_digest)
            .bind(&input_ref)
            .bind(&new.contract_version)
            .bind(micros(new.deadline))
            .bind(i64::from(new.max_attempts))
            .bind(new.replay_policy.as_str())
            .fetch_optional(&mut *tx)
            .await?;
        let Some(row) = inserted else {
            tx.rollback().await?;
            return self.idempotent_replay(new, actor).await;
        };
        let created_at = get_i64(&row, "created_at")?;
        let deadline_at = get_i64(&row, "deadline_at")?;
        sqlx::query("INSERT INTO job_inputs (job_id, input, model) VALUES ($1, $2, $3)")
            .bind(job_id.as_str())
            .bind(new.input.to_string())
            .bind(new.model.to_string())
            .execute(&mut *tx)
            .await?;
        insert_outbox(&mut tx, job_id.as_str(), 0, "created", created_at).await?;
        let event = NewEvent::new(EventKind::JobCreated, actor).detail(json!({
            "contract_version": new.contract_version,
            "max_attempts": new.max_attempts,
            "deadline_ms": micros(new.deadline) / 1000,
            "replay_policy": new.replay_policy.as_str(),
        }));
        append(
            &mut tx,
            job_id.as_str(),
            1,
            created_at,
            0,
            deadline_at,
            &[event],
        )
        .await?;
        tx.commit().await?;
        let job = self
            .job(job_id.as_str())
            .await?
            .ok_or_else(|| LedgerError::Corrupt("created job vanished".into()))?;
        Ok(Created::New(job))
    }

    async fn idempotent_replay(&self, new: NewJob, actor: &Actor) -> Result<Created, LedgerError> {
        let sql =
            format!("SELECT {JOB_COLUMNS} FROM jobs WHERE tenant = $1 AND idempotency_key = $2");
        let row = sqlx::query(&sql)
            .bind(&new.tenant)
            .bind(&new.idempotency_key)
            .fetch_one(&self.writer)
            .await?;
        let existing = job_from_row(&row)?;
        if existing.request_digest == new.request_digest {
            // At most one hit a minute on the timeline: a client retrying in a loop must not
            // grow it without bound (the hit itself changes nothing).
            let sql = self.dialect.sql(
                "SELECT COUNT(*) FROM events WHERE job_id = $1 AND kind = 'idempotency_hit' \
                 AND at > {now} - 60000000",
            );
            let recent: i64 = sqlx::query_scalar(&sql)
                .bind(&existing.job_id)
                .fetch_one(&self.reader)
                .await?;
            if recent == 0 {
                let event = NewEvent::new(EventKind::IdempotencyHit, actor);
                self.record_event(&existing.job_id, &event).await?;
            }
            Ok(Created::Existing(existing))
        } else {
            let event = NewEvent::new(EventKind::IdempotencyConflict, actor).detail(json!({
                "existing_digest": &existing.request_digest[..12],
                "offered_digest": new.request_digest.get(..12).unwrap_or(""),
            }));
            self.record_event(&existing.job_id, &event).await?;
            Err(LedgerError::IdempotencyConflict {
                existing: existing.job_id,
            })
        }
    }

    /// Appends one event that changes no state (transport facts: receives, visibility changes,
    /// deletes, suppressed duplicates). Returns its sequence number.
    pub async fn record_event(&self, job_id: &str, event: &NewEvent) -> Result<i64, LedgerError> {
        let mut tx = self.begin_write().await?;
        let sql = self.dialect.sql(
            "UPDATE jobs SET next_event_seq = next_event_seq + 1 WHERE job_id = $1 \
             RETURNING next_event_seq - 1 AS seq, {now} AS now_us, deadline_at, owner_epoch",
        );
        let Some(row) = sqlx::query(&sql)
            .bind(job_id)
            .fetch_optional(&mut *tx)
            .await?
        else {
            return Err(LedgerError::refused(job_id, Refusal::NotFound));
        };
        let seq = get_i64(&row, "seq")?;
        append(
            &mut tx,
            job_id,
            seq,
            get_i64(&row, "now_us")?,
            get_i64(&row, "owner_epoch")?,
            get_i64(&row, "deadline_at")?,
            std::slice::from_ref(event),
        )
        .await?;
        tx.commit().await?;
        Ok(seq)
    }

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
        let mut tx = self.begin_write().await?;
        let sql = self.dialect.sql(
            "UPDATE jobs SET state = 'running', owner_epoch = owner_epoch + 1, owner_id = $2, \
             owner_until = {least}({now} + $3, deadline_at), retry_at = NULL, \
             attempt_count = attempt_count + $5, \
             pending_attempt = CASE WHEN $5 = 1 THEN attempt_count + 1 ELSE NULL END, \
             updated_at = {now}, next_event_seq = next_event_seq + $4 \
             WHERE job_id = $1 AND state IN ('ready', 'retry_authorized') \
             AND deadline_at > {now} AND attempt_count < max_attempts \
             AND (retry_at IS NULL OR retry_at <= {now}) \
             RETURNING owner_epoch, owner_until, deadline_at, attempt_count, max_attempts, \
             next_event_seq - $4 AS seq, updated_at",
        );
        let events_count = 1 + i64::from(delivery.is_some()) + i64::from(start.is_some());
        let row = sqlx::query(&sql)
            .bind(job_id)
            .bind(worker_id)
            .bind(micros(lease))
            .bind(events_count)
            .bind(i64::from(start.is_some()))
            .fetch_optional(&mut *tx)
            .await?;
        let Some(row) = row else {
            tx.rollback().await?;
            let refusal = self.refusal(job_id, Intent::Claim).await?;
            let actor = Actor::Worker(worker_id.to_owned());
            match refusal {
                Refusal::DeadlinePassed => {
                    self.expire_if_due(job_id, &actor).await?;
                }
                Refusal::BudgetExhausted => {
                    self.exhaust_budget(job_id, &actor).await?;
                }
                _ => {}
            }
            return Err(LedgerError::refused(job_id, refusal));
        };
        let count_after = get_i64(&row, "attempt_count")?;
        let claimed = Claimed {
            epoch: get_i64(&row, "owner_epoch")?,
            owner_until: get_i64(&row, "owner_until")?,
            deadline_at: get_i64(&row, "deadline_at")?,
            at: get_i64(&row, "updated_at")?,
            attempt_count: count_after - i64::from(start.is_some()),
            max_attempts: get_i64(&row, "max_attempts")?,
        };
        let now = get_i64(&row, "updated_at")?;
        let actor = Actor::Worker(worker_id.to_owned());
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
                    attempt_no: count_after,
                    epoch: claimed.epoch,
                };
                sqlx::query(
                    "INSERT INTO attempts (job_id, attempt_no, epoch, worker_id, provider, \
                     provider_request_id, started_at) VALUES ($1, $2, $3, $4, $5, $6, $7)",
                )
                .bind(job_id)
                .bind(attempt.attempt_no)
                .bind(attempt.epoch)
                .bind(worker_id)
                .bind(provider)
                .bind(attempt.client_request_id(job_id))
                .bind(now)
                .execute(&mut *tx)
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
        append(
            &mut tx,
            job_id,
            get_i64(&row, "seq")?,
            now,
            claimed.epoch,
            claimed.deadline_at,
            &events,
        )
        .await?;
        tx.commit().await?;
        Ok((claimed, attempt))
    }

    /// `running`/`retry_authorized` with the budget spent → `failed_terminal`.
    async fn exhaust_budget(&self, job_id: &str, actor: &Actor) -> Result<bool, LedgerError> {
        let mut tx = self.begin_write().await?;
        let sql = self.dialect.sql(
            "UPDATE jobs SET state = 'failed_terminal', error_code = 'budget_exhausted', \
             terminal_at = {now}, updated_at = {now}, next_event_seq = next_event_seq + 1 \
             WHERE job_id = $1 AND state = 'retry_authorized' AND attempt_count >= max_attempts \
             RETURNING next_event_seq - 1 AS seq, updated_at, deadline_at, owner_epoch, attempt_count",
        );
        let Some(row) = sqlx::query(&sql)
            .bind(job_id)
            .fetch_optional(&mut *tx)
            .await?
        else {
            return Ok(false);
        };
        let event = NewEvent::new(EventKind::BudgetExhausted, actor)
            .detail(json!({"attempts_used": get_i64(&row, "attempt_count")?}));
        append(
            &mut tx,
            job_id,
            get_i64(&row, "seq")?,
            get_i64(&row, "updated_at")?,
            get_i64(&row, "owner_epoch")?,
            get_i64(&row, "deadline_at")?,
            &[event],
        )
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Records attempt `attempt_count + 1` under `epoch`, durably, before any provider request,
    /// with Fenceline's client request id for it (see [`AttemptStarted::client_request_id`]).
    /// Refused unless the caller holds a valid lease at the current epoch, the budget and the
    /// deadline allow, and no earlier attempt of this owner is still without an outcome.
    pub async fn start_attempt(
        &self,
        job_id: &str,
        epoch: i64,
        worker_id: &str,
        provider: &str,
    ) -> Result<AttemptStarted, LedgerError> {
        let mut tx = self.begin_write().await?;
        let sql = self.dialect.sql(
            "UPDATE jobs SET attempt_count = attempt_count + 1, pending_attempt = attempt_count + 1, \
             updated_at = {now}, next_event_seq = next_event_seq + 1 \
             WHERE job_id = $1 AND owner_epoch = $2 AND state = 'running' \
             AND owner_until > {now} AND deadline_at > {now} \
             AND attempt_count < max_attempts AND pending_attempt IS NULL \
             RETURNING attempt_count, next_event_seq - 1 AS seq, updated_at, deadline_at",
        );
        let row = sqlx::query(&sql)
            .bind(job_id)
            .bind(epoch)
            .fetch_optional(&mut *tx)
            .await?;
        let Some(row) = row else {
            tx.rollback().await?;
            let mut refusal = self.refusal(job_id, Intent::Owner { epoch }).await?;
            if let Refusal::WrongState(JobState::Running) = refusal {
                // Same epoch, valid lease: the budget or an attempt in flight stopped it.
                let job = self.job(job_id).await?;
                refusal = match job {
                    Some(j) if j.pending_attempt.is_some() => Refusal::AttemptPending,
                    _ => Refusal::BudgetExhausted,
                };
            }
            return Err(LedgerError::refused(job_id, refusal));
        };
        let attempt_no = get_i64(&row, "attempt_count")?;
        let now = get_i64(&row, "updated_at")?;
        sqlx::query(
            "INSERT INTO attempts (job_id, attempt_no, epoch, worker_id, provider, \
             provider_request_id, started_at) VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(job_id)
        .bind(attempt_no)
        .bind(epoch)
        .bind(worker_id)
        .bind(provider)
        .bind(AttemptStarted::client_request_id_for(job_id, attempt_no))
        .bind(now)
        .execute(&mut *tx)
        .await?;
        let event = NewEvent::new(
            EventKind::AttemptStarted,
            &Actor::Worker(worker_id.to_owned()),
        )
        .attempt(attempt_no)
        .detail(json!({ "provider": provider }));
        append(
            &mut tx,
            job_id,
            get_i64(&row, "seq")?,
            now,
            epoch,
            get_i64(&row, "deadline_at")?,
            &[event],
        )
        .await?;
        tx.commit().await?;
        Ok(AttemptStarted { attempt_no, epoch })
    }

    /// Keeps the provider's own request id on the attempt, for retrieval and reconciliation.
    pub async fn set_provider_request_id(
        &self,
        job_id: &str,
        attempt_no: i64,
        epoch: i64,
        provider_request_id: &str,
    ) -> Result<(), LedgerError> {
        sqlx::query(
            "UPDATE attempts SET provider_request_id = $4 \
             WHERE job_id = $1 AND attempt_no = $2 AND epoch = $3",
        )
        .bind(job_id)
        .bind(attempt_no)
        .bind(epoch)
        .bind(provider_request_id)
        .execute(&self.writer)
        .await?;
        Ok(())
    }

    /// Renews the leases of many owned jobs in one statement per chunk. Each `(job_id, epoch)`
    /// gets its new expiry (never past the deadline) or the reason it was refused; a refusal
    /// is also put on that job's timeline as `lease_renewal_failed`.
    pub async fn renew_leases(
        &self,
        worker_id: &str,
        leases: &[(String, i64)],
        lease: Duration,
    ) -> Result<Vec<Renewal>, LedgerError> {
        let actor = Actor::Worker(worker_id.to_owned());
        let renewed_event = NewEvent::new(EventKind::LeaseRenewed, &actor);
        let mut out = Vec::with_capacity(leases.len());
        for chunk in leases.chunks(RENEW_CHUNK) {
            let mut values = String::new();
            for i in 0..chunk.len() {
                if i > 0 {
                    values.push_str(", ");
                }
                values.push_str(&row_placeholders(2 + i * 2, 2));
            }
            let sql = self.dialect.sql(&format!(
                "UPDATE jobs SET owner_until = {{least}}({{now}} + $1, deadline_at), \
                 updated_at = {{now}}, next_event_seq = next_event_seq + 1 \
                 WHERE state = 'running' AND owner_until > {{now}} AND deadline_at > {{now}} \
                 AND (job_id, owner_epoch) IN (VALUES {values}) \
                 RETURNING job_id, owner_epoch, owner_until, next_event_seq - 1 AS seq, \
                 updated_at, deadline_at"
            ));
            let mut query = sqlx::query(&sql).bind(micros(lease));
            for (job_id, epoch) in chunk {
                query = query.bind(job_id.as_str()).bind(*epoch);
            }
            let mut tx = self.begin_write().await?;
            let rows = query.fetch_all(&mut *tx).await?;
            let mut renewed = std::collections::HashMap::with_capacity(rows.len());
            let mut placed_info = Vec::with_capacity(rows.len());
            for row in &rows {
                let job_id: String = row.try_get("job_id")?;
                let until = get_i64(row, "owner_until")?;
                let at = get_i64(row, "updated_at")?;
                placed_info.push((
                    job_id.clone(),
                    get_i64(row, "seq")?,
                    at,
                    get_i64(row, "owner_epoch")?,
                    get_i64(row, "deadline_at")?,
                    json!({ "lease_ms": (until - at) / 1000 }),
                ));
                renewed.insert((job_id, get_i64(row, "owner_epoch")?), (until, at));
            }
            let events: Vec<NewEvent> = placed_info
                .iter()
                .map(|info| renewed_event.clone().detail(info.5.clone()))
                .collect();
            let placed: Vec<Placed<'_>> = placed_info
                .iter()
                .zip(&events)
                .map(|(info, event)| Placed {
                    job_id: &info.0,
                    seq: info.1,
                    at: info.2,
                    epoch: info.3,
                    deadline_at: info.4,
                    event,
                })
                .collect();
            insert_events(&mut tx, &placed).await?;
            tx.commit().await?;
            for (job_id, epoch) in chunk {
                let granted = renewed.get(&(job_id.clone(), *epoch)).copied();
                let outcome = match granted {
                    Some((until, _)) => Ok(until),
                    None => {
                        let refusal = self
                            .refusal(job_id, Intent::Owner { epoch: *epoch })
                            .await?;
                        if refusal != Refusal::NotFound {
                            let event = NewEvent::new(EventKind::LeaseRenewalFailed, &actor)
                                .epoch(*epoch)
                                .detail(json!({ "reason": refusal.code() }));
                            self.record_event(job_id, &event).await?;
                        }
                        Err(refusal)
                    }
                };
                out.push(Renewal {
                    job_id: job_id.clone(),
                    epoch: *epoch,
                    outcome,
                    at: granted.map_or(0, |(_, at)| at),
                });
            }
        }
        Ok(out)
    }

    /// The guarded commit: `running` → `succeeded` with `body` as the one accepted result,
    /// only for the current epoch's pending attempt, with a valid lease, before the deadline.
    /// A refused result is kept as restricted evidence (`stale_discarded`) and recorded as
    /// `result_rejected`; it never becomes the job's result.
    pub async fn accept_result(
        &self,
        job_id: &str,
        epoch: i64,
        attempt_no: i64,
        worker_id: &str,
        body: &str,
    ) -> Result<Accepted, LedgerError> {
        let result_ref = format!("res_{}", uuid::Uuid::now_v7().simple());
        let mut tx = self.begin_write().await?;
        let sql = self.dialect.sql(
            "UPDATE jobs SET state = 'succeeded', result_ref = $3, pending_attempt = NULL, \
             error_code = NULL, terminal_at = {now}, updated_at = {now}, \
             next_event_seq = next_event_seq + 2 \
             WHERE job_id = $1 AND owner_epoch = $2 AND state = 'running' \
             AND owner_until > {now} AND deadline_at > {now} AND pending_attempt = $4 \
             RETURNING next_event_seq - 2 AS seq, updated_at, deadline_at",
        );
        let row = sqlx::query(&sql)
            .bind(job_id)
            .bind(epoch)
            .bind(&result_ref)
            .bind(attempt_no)
            .fetch_optional(&mut *tx)
            .await?;
        let actor = Actor::Worker(worker_id.to_owned());
        let Some(row) = row else {
            tx.rollback().await?;
            return Err(self
                .reject_result(job_id, epoch, attempt_no, &actor, &result_ref, body)
                .await?);
        };
        let now = get_i64(&row, "updated_at")?;
        insert_result(
            &mut tx,
            &result_ref,
            job_id,
            Some(attempt_no),
            epoch,
            "accepted",
            body,
            now,
        )
        .await?;
        sqlx::query(
            "UPDATE attempts SET outcome = 'succeeded', finished_at = $4, result_ref = $5 \
             WHERE job_id = $1 AND attempt_no = $2 AND epoch = $3",
        )
        .bind(job_id)
        .bind(attempt_no)
        .bind(epoch)
        .bind(now)
        .bind(&result_ref)
        .execute(&mut *tx)
        .await?;
        let events = [
            NewEvent::new(EventKind::AttemptFinished, &actor)
                .attempt(attempt_no)
                .detail(json!({ "outcome": "succeeded" })),
            NewEvent::new(EventKind::ResultAccepted, &actor)
                .attempt(attempt_no)
                .detail(json!({ "result_ref": result_ref, "to": "succeeded" })),
        ];
        append(
            &mut tx,
            job_id,
            get_i64(&row, "seq")?,
            now,
            epoch,
            get_i64(&row, "deadline_at")?,
            &events,
        )
        .await?;
        tx.commit().await?;
        Ok(Accepted { result_ref })
    }

    async fn reject_result(
        &self,
        job_id: &str,
        epoch: i64,
        attempt_no: i64,
        actor: &Actor,
        result_ref: &str,
        body: &str,
    ) -> Result<LedgerError, LedgerError> {
        let mut refusal = self.refusal(job_id, Intent::Owner { epoch }).await?;
        if refusal == Refusal::NotFound {
            return Ok(LedgerError::refused(job_id, refusal));
        }
        if let Refusal::WrongState(JobState::Running) = refusal {
            refusal = Refusal::NoSuchAttempt(attempt_no);
        }
        let mut tx = self.begin_write().await?;
        let sql = self.dialect.sql(
            "UPDATE jobs SET next_event_seq = next_event_seq + 1 WHERE job_id = $1 \
             RETURNING next_event_seq - 1 AS seq, {now} AS now_us, deadline_at",
        );
        let row = sqlx::query(&sql).bind(job_id).fetch_one(&mut *tx).await?;
        let now = get_i64(&row, "now_us")?;
        // Only an attempt of the caller's own epoch can carry its answer as evidence.
        let marked = sqlx::query(
            "UPDATE attempts SET outcome = 'stale_discarded', finished_at = $4, result_ref = $5 \
             WHERE job_id = $1 AND attempt_no = $2 AND epoch = $3 \
             AND outcome IN ('pending', 'lost')",
        )
        .bind(job_id)
        .bind(attempt_no)
        .bind(epoch)
        .bind(now)
        .bind(result_ref)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if marked > 0 {
            insert_result(
                &mut tx,
                result_ref,
                job_id,
                Some(attempt_no),
                epoch,
                "stale",
                body,
                now,
            )
            .await?;
        }
        let event = NewEvent::new(EventKind::ResultRejected, actor)
            .epoch(epoch)
            .attempt(attempt_no)
            .detail(json!({
                "reason": refusal.code(),
                "evidence_ref": if marked > 0 { Value::from(result_ref) } else { Value::Null },
            }));
        append(
            &mut tx,
            job_id,
            get_i64(&row, "seq")?,
            now,
            epoch,
            get_i64(&row, "deadline_at")?,
            &[event],
        )
        .await?;
        tx.commit().await?;
        Ok(LedgerError::refused(job_id, refusal))
    }

    /// The owner reports a confirmed provider failure of its pending attempt. Retryable within
    /// budget → `retry_authorized` with a backoff and a re-dispatch after it; retryable with
    /// the budget spent, or fatal → `failed_terminal`.
    pub async fn record_failure(
        &self,
        job_id: &str,
        epoch: i64,
        attempt_no: i64,
        worker_id: &str,
        failure: &Failure,
    ) -> Result<FailureOutcome, LedgerError> {
        let (fatal, error_code, backoff) = match failure {
            Failure::Retryable {
                error_code,
                backoff,
            } => (0_i64, error_code, micros(*backoff)),
            Failure::Fatal { error_code } => (1_i64, error_code, 0),
        };
        let mut tx = self.begin_write().await?;
        let retry = "$5 = 0 AND attempt_count < max_attempts";
        let sql = self.dialect.sql(&format!(
            "UPDATE jobs SET \
             state = CASE WHEN {retry} THEN 'retry_authorized' ELSE 'failed_terminal' END, \
             retry_at = CASE WHEN {retry} THEN {{now}} + $6 ELSE NULL END, \
             terminal_at = CASE WHEN {retry} THEN NULL ELSE {{now}} END, \
             error_code = $4, pending_attempt = NULL, updated_at = {{now}}, \
             next_event_seq = next_event_seq + 2 \
             WHERE job_id = $1 AND owner_epoch = $2 AND state = 'running' \
             AND owner_until > {{now}} AND deadline_at > {{now}} AND pending_attempt = $3 \
             RETURNING state, retry_at, attempt_count, next_event_seq - 2 AS seq, updated_at, \
             deadline_at"
        ));
        let row = sqlx::query(&sql)
            .bind(job_id)
            .bind(epoch)
            .bind(attempt_no)
            .bind(error_code)
            .bind(fatal)
            .bind(backoff)
            .fetch_optional(&mut *tx)
            .await?;
        let Some(row) = row else {
            tx.rollback().await?;
            let mut refusal = self.refusal(job_id, Intent::Owner { epoch }).await?;
            if let Refusal::WrongState(JobState::Running) = refusal {
                refusal = Refusal::NoSuchAttempt(attempt_no);
            }
            return Err(LedgerError::refused(job_id, refusal));
        };
        let state = state_of(&row)?;
        let now = get_i64(&row, "updated_at")?;
        let outcome = if fatal == 1 {
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
        .execute(&mut *tx)
        .await?;
        let actor = Actor::Worker(worker_id.to_owned());
        let finished = NewEvent::new(EventKind::AttemptFinished, &actor)
            .attempt(attempt_no)
            .detail(json!({ "outcome": outcome, "error_code": error_code }));
        let then = match state {
            JobState::RetryAuthorized => {
                let retry_at = get_i64(&row, "retry_at")?;
                insert_outbox(&mut tx, job_id, epoch, "retry", retry_at).await?;
                NewEvent::new(EventKind::StateChanged, &actor).detail(json!({
                    "to": "retry_authorized",
                    "retry_in_ms": (retry_at - now) / 1000,
                }))
            }
            _ if fatal == 0 => NewEvent::new(EventKind::BudgetExhausted, &actor).detail(json!({
                "to": "failed_terminal",
                "attempts_used": get_i64(&row, "attempt_count")?,
            })),
            _ => NewEvent::new(EventKind::StateChanged, &actor)
                .detail(json!({ "to": "failed_terminal", "error_code": error_code })),
        };
        append(
            &mut tx,
            job_id,
            get_i64(&row, "seq")?,
            now,
            epoch,
            get_i64(&row, "deadline_at")?,
            &[finished, then],
        )
        .await?;
        tx.commit().await?;
        Ok(FailureOutcome { state })
    }

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
        let mut tx = self.begin_write().await?;
        let sql = self.dialect.sql(
            "UPDATE jobs SET owner_epoch = owner_epoch + 1, owner_id = $2, \
             state = CASE WHEN pending_attempt IS NULL THEN 'retry_authorized' ELSE 'unknown' END, \
             pending_attempt = NULL, recovery_reason = $3, updated_at = {now}, \
             next_event_seq = next_event_seq + 2 \
             WHERE job_id = $1 AND state = 'running' AND owner_until <= {now} \
             AND deadline_at > {now} \
             RETURNING state, owner_epoch, next_event_seq - 2 AS seq, updated_at, deadline_at",
        );
        let row = sqlx::query(&sql)
            .bind(job_id)
            .bind(actor.to_string())
            .bind(reason)
            .fetch_optional(&mut *tx)
            .await?;
        let Some(row) = row else {
            tx.rollback().await?;
            let refusal = self.refusal(job_id, Intent::Recovery).await?;
            return Err(LedgerError::refused(job_id, refusal));
        };
        let state = state_of(&row)?;
        let epoch = get_i64(&row, "owner_epoch")?;
        let now = get_i64(&row, "updated_at")?;
        let lost = mark_pending_lost(&mut tx, job_id, now).await?;
        if state == JobState::RetryAuthorized && redispatch {
            insert_outbox(&mut tx, job_id, epoch, "recovered", now).await?;
        }
        let events = [
            NewEvent::new(EventKind::RecoveryClaimed, actor).detail(json!({
                "from_epoch": epoch - 1,
                "reason": reason,
                "lost_attempts": lost,
            })),
            NewEvent::new(EventKind::StateChanged, actor).detail(json!({
                "to": state.as_str(),
                "why": if state == JobState::Unknown {
                    "an attempt may have reached the provider"
                } else {
                    "no attempt was in flight"
                },
            })),
        ];
        append(
            &mut tx,
            job_id,
            get_i64(&row, "seq")?,
            now,
            epoch,
            get_i64(&row, "deadline_at")?,
            &events,
        )
        .await?;
        tx.commit().await?;
        Ok(Recovered {
            state,
            epoch,
            lost_attempts: lost,
        })
    }

    /// Records a decision over an `unknown` job, naming the epoch the decider saw. Audited in
    /// `decisions`. A retry advances the epoch and re-dispatches; it needs budget and time.
    pub async fn decide(
        &self,
        job_id: &str,
        seen_epoch: i64,
        decision: &Decision,
        actor: &Actor,
        reason: &str,
    ) -> Result<JobState, LedgerError> {
        let reason = reason.trim();
        if reason.is_empty() || reason.len() > 2000 {
            return Err(LedgerError::Invalid(
                "a decision needs a reason of 1 to 2000 characters".into(),
            ));
        }
        let (to, bump, guard) = match decision {
            Decision::ResolveSucceeded { evidence, .. } => {
                if evidence.trim().is_empty() {
                    return Err(LedgerError::Invalid(
                        "resolving as succeeded needs evidence".into(),
                    ));
                }
                (JobState::Succeeded, 0_i64, "")
            }
            Decision::ResolveFailed { .. } => (JobState::FailedTerminal, 0, ""),
            Decision::AuthorizeRetry => (
                JobState::RetryAuthorized,
                1,
                " AND deadline_at > {now} AND attempt_count < max_attempts",
            ),
            Decision::ReplayPolicy => (
                JobState::RetryAuthorized,
                1,
                " AND deadline_at > {now} AND attempt_count < max_attempts \
                 AND replay_policy = 'replay_on_unknown'",
            ),
        };
        let result_ref = match decision {
            Decision::ResolveSucceeded { .. } => {
                Some(format!("res_{}", uuid::Uuid::now_v7().simple()))
            }
            _ => None,
        };
        let error_code = match decision {
            Decision::ResolveFailed { error_code } => Some(error_code.clone()),
            _ => None,
        };
        let mut tx = self.begin_write().await?;
        let sql = self.dialect.sql(&format!(
            "UPDATE jobs SET state = $3, owner_epoch = owner_epoch + $4, \
             owner_id = CASE WHEN $4 = 1 THEN $5 ELSE owner_id END, \
             result_ref = COALESCE($6, result_ref), error_code = COALESCE($7, error_code), \
             terminal_at = CASE WHEN $3 = 'retry_authorized' THEN NULL ELSE {{now}} END, \
             retry_at = NULL, updated_at = {{now}}, next_event_seq = next_event_seq + 2 \
             WHERE job_id = $1 AND owner_epoch = $2 AND state = 'unknown'{guard} \
             RETURNING owner_epoch, attempt_count, next_event_seq - 2 AS seq, updated_at, \
             deadline_at"
        ));
        let row = sqlx::query(&sql)
            .bind(job_id)
            .bind(seen_epoch)
            .bind(to.as_str())
            .bind(bump)
            .bind(actor.to_string())
            .bind(result_ref.clone())
            .bind(error_code)
            .fetch_optional(&mut *tx)
            .await?;
        let Some(row) = row else {
            tx.rollback().await?;
            let mut refusal = self
                .refusal(job_id, Intent::Decision { epoch: seen_epoch })
                .await?;
            if *decision == Decision::ReplayPolicy
                && refusal == Refusal::WrongState(JobState::Unknown)
            {
                refusal = Refusal::PolicyForbids;
            }
            return Err(LedgerError::refused(job_id, refusal));
        };
        let new_epoch = get_i64(&row, "owner_epoch")?;
        let now = get_i64(&row, "updated_at")?;
        let evidence = match decision {
            Decision::ResolveSucceeded { result, evidence } => {
                let last_attempt = get_i64(&row, "attempt_count")?;
                let result_ref = result_ref.as_deref().unwrap_or_default();
                let attempt = (last_attempt > 0).then_some(last_attempt);
                insert_result(
                    &mut tx, result_ref, job_id, attempt, seen_epoch, "accepted", result, now,
                )
                .await?;
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
        .bind(evidence)
        .execute(&mut *tx)
        .await?;
        if to == JobState::RetryAuthorized {
            insert_outbox(&mut tx, job_id, new_epoch, decision.as_str(), now).await?;
        }
        let short_reason: String = reason.chars().take(200).collect();
        let events = [
            NewEvent::new(EventKind::DecisionRecorded, actor)
                .epoch(new_epoch)
                .detail(json!({
                    "decision": decision.as_str(),
                    "seen_epoch": seen_epoch,
                    "reason": short_reason,
                })),
            NewEvent::new(EventKind::StateChanged, actor)
                .epoch(new_epoch)
                .detail(json!({ "to": to.as_str(), "result_ref": result_ref })),
        ];
        append(
            &mut tx,
            job_id,
            get_i64(&row, "seq")?,
            now,
            new_epoch,
            get_i64(&row, "deadline_at")?,
            &events,
        )
        .await?;
        tx.commit().await?;
        Ok(to)
    }

    /// Moves a live job whose fixed deadline has passed to `expired`; an attempt in flight
    /// becomes `lost`. Returns whether this call expired it.
    pub async fn expire_if_due(&self, job_id: &str, actor: &Actor) -> Result<bool, LedgerError> {
        let mut tx = self.begin_write().await?;
        let sql = self
            .dialect
            .sql("SELECT state FROM jobs WHERE job_id = $1{for_update}");
        let Some(before) = sqlx::query(&sql)
            .bind(job_id)
            .fetch_optional(&mut *tx)
            .await?
        else {
            return Err(LedgerError::refused(job_id, Refusal::NotFound));
        };
        let from = state_of(&before)?;
        let sql = self.dialect.sql(
            "UPDATE jobs SET state = 'expired', terminal_at = {now}, pending_attempt = NULL, \
             updated_at = {now}, next_event_seq = next_event_seq + 1 \
             WHERE job_id = $1 AND state IN ('ready', 'running', 'unknown', 'retry_authorized') \
             AND deadline_at <= {now} \
             RETURNING next_event_seq - 1 AS seq, updated_at, deadline_at, owner_epoch",
        );
        let Some(row) = sqlx::query(&sql)
            .bind(job_id)
            .fetch_optional(&mut *tx)
            .await?
        else {
            return Ok(false);
        };
        let now = get_i64(&row, "updated_at")?;
        let lost = mark_pending_lost(&mut tx, job_id, now).await?;
        let event = NewEvent::new(EventKind::DeadlineExpired, actor)
            .detail(json!({ "from": from.as_str(), "lost_attempts": lost }));
        append(
            &mut tx,
            job_id,
            get_i64(&row, "seq")?,
            now,
            get_i64(&row, "owner_epoch")?,
            get_i64(&row, "deadline_at")?,
            &[event],
        )
        .await?;
        tx.commit().await?;
        Ok(true)
    }
}

async fn mark_pending_lost(
    conn: &mut AnyConnection,
    job_id: &str,
    now: i64,
) -> Result<i64, LedgerError> {
    let lost = sqlx::query(
        "UPDATE attempts SET outcome = 'lost', finished_at = $2 \
         WHERE job_id = $1 AND outcome = 'pending'",
    )
    .bind(job_id)
    .bind(now)
    .execute(&mut *conn)
    .await?
    .rows_affected();
    Ok(lost as i64)
}

async fn insert_outbox(
    conn: &mut AnyConnection,
    job_id: &str,
    epoch: i64,
    reason: &str,
    available_at: i64,
) -> Result<(), LedgerError> {
    sqlx::query(
        "INSERT INTO outbox (job_id, epoch, reason, created_at, available_at) \
         VALUES ($1, $2, $3, $4, $4)",
    )
    .bind(job_id)
    .bind(epoch)
    .bind(reason)
    .bind(available_at)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

#[allow(clippy::too_many_arguments)]
async fn insert_result(
    conn: &mut AnyConnection,
    result_ref: &str,
    job_id: &str,
    attempt_no: Option<i64>,
    epoch: i64,
    status: &str,
    body: &str,
    now: i64,
) -> Result<(), LedgerError> {
    sqlx::query(
        "INSERT INTO results (result_ref, job_id, attempt_no, epoch, status, body, digest, \
         created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(result_ref)
    .bind(job_id)
    .bind(attempt_no)
    .bind(epoch)
    .bind(status)
    .bind(body)
    .bind(hex::encode(Sha256::digest(body.as_bytes())))
    .bind(now)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::ReplayPolicy;

    fn job(state: JobState, epoch: i64, owner_until: Option<i64>) -> Job {
        Job {
            job_id: "job_x".into(),
            tenant: "t".into(),
            idempotency_key: "k".into(),
            request_digest: "d".into(),
            input_ref: "i".into(),
            contract_version: "v1".into(),
            state,
            owner_epoch: epoch,
            owner_id: Some("w".into()),
            owner_until,
            deadline_at: 1_000,
            attempt_count: 1,
            max_attempts: 3,
            retry_at: None,
            result_ref: None,
            error_code: None,
            replay_policy: ReplayPolicy::Manual,
            recovery_reason: None,
            created_at: 0,
            updated_at: 0,
            terminal_at: None,
            pending_attempt: None,
        }
    }

    #[test]
    fn a_fenced_owner_learns_it_is_stale_before_anything_else() {
        let j = job(JobState::Unknown, 8, Some(10));
        assert_eq!(
            classify(Some(&j), 500, Intent::Owner { epoch: 7 }),
            Refusal::StaleEpoch {
                expected: 7,
                found: 8
            }
        );
        let done = job(JobState::Succeeded, 9, None);
        assert_eq!(
            classify(Some(&done), 500, Intent::Owner { epoch: 9 }),
            Refusal::AlreadyTerminal(JobState::Succeeded)
        );
    }

    #[test]
    fn the_current_owner_is_told_whether_its_lease_or_the_deadline_ran_out() {
        let j = job(JobState::Running, 3, Some(400));
        assert_eq!(
            classify(Some(&j), 500, Intent::Owner { epoch: 3 }),
            Refusal::LeaseExpired
        );
        assert_eq!(
            classify(Some(&j), 1_000, Intent::Owner { epoch: 3 }),
            Refusal::DeadlinePassed
        );
        assert_eq!(classify(None, 0, Intent::Claim), Refusal::NotFound);
    }

    #[test]
    fn a_claim_over_a_live_owner_is_a_duplicate_and_over_an_expired_one_needs_recovery() {
        let j = job(JobState::Running, 3, Some(600));
        assert_eq!(
            classify(Some(&j), 500, Intent::Claim),
            Refusal::LiveOwner { epoch: 3 }
        );
        assert_eq!(
            classify(Some(&j), 700, Intent::Claim),
            Refusal::LeaseExpired
        );
        assert_eq!(
            classify(Some(&j), 500, Intent::Recovery),
            Refusal::LiveOwner { epoch: 3 }
        );
        let mut spent = job(JobState::RetryAuthorized, 3, None);
        spent.attempt_count = 3;
        assert_eq!(
            classify(Some(&spent), 500, Intent::Claim),
            Refusal::BudgetExhausted
        );
        let mut backoff = job(JobState::RetryAuthorized, 3, None);
        backoff.retry_at = Some(800);
        assert_eq!(
            classify(Some(&backoff), 500, Intent::Claim),
            Refusal::BackoffPending
        );
        let unknown = job(JobState::Unknown, 3, None);
        assert_eq!(
            classify(Some(&unknown), 500, Intent::Claim),
            Refusal::WrongState(JobState::Unknown)
        );
    }
}
