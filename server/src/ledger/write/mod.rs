//! The fenced writes, one file per kind of transition. Every one is the same short transaction,
//! [`Ledger::guarded`]: a compare-and-set `UPDATE … RETURNING` on the job row that also
//! reserves the sequence numbers of its timeline events, decoded into a typed row; then the rows
//! that go with it; then its events, appended by [`Fenced::commit`]. When the statement matches
//! nothing, the transaction rolls back and the job is re-read to say why, as a typed
//! [`Refusal`] — never a silent no-op, never a follow-up unconditional write.
//!
//! A new transition is its statement (in [`super::statements`]), its returned row (a struct
//! with a flattened [`Reserved`]) and its [`Intent`].

mod accept;
mod attempt;
mod cancel;
mod claim;
mod create;
mod decide;
pub use decide::EVIDENCE_MAX;
mod batch;
mod expire;
mod failure;
mod group;
mod outbox;
mod recovery;
mod rerun;
mod throttle;
mod timeline;

pub use accept::AcceptDelete;
pub use attempt::{RenewBoth, RenewedWithVisibility};
pub use group::GroupStats;
pub(crate) use group::{Groups, LostCommits};
pub use outbox::OutboxItem;
pub use recovery::HELD_FOR_ADOPTION;

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use sqlx::any::{AnyArguments, AnyRow};
use sqlx::query::QueryAs;
use sqlx::{Any, AnyConnection, FromRow, Transaction};

use super::model::{Job, NewEvent};
use super::statements::Statements;
use super::{Ledger, LedgerError, Refusal};
use crate::job::JobState;

/// Event details longer than this are replaced by a marker: events stay small.
const DETAIL_MAX: usize = 2048;
/// Largest number of events one insert takes as one JSON array.
const EVENT_CHUNK: usize = 400;

pub(crate) fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

/// Where a write's events go on its job's timeline: the first reserved sequence number, the
/// database clock of the write, the job's epoch after it and its deadline. Every guarded
/// statement returns these four columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromRow)]
pub(crate) struct Reserved {
    pub(crate) seq: i64,
    pub(crate) at: i64,
    pub(crate) epoch: i64,
    pub(crate) deadline_at: i64,
}

/// A returned row that carries its [`Reserved`] place.
pub(crate) trait Reserves {
    fn reserved(&self) -> Reserved;
}

impl Reserves for Reserved {
    fn reserved(&self) -> Reserved {
        *self
    }
}

/// Implements [`Reserves`] for row types with a flattened `reserved` field.
macro_rules! reserves {
    ($($row:ty),+ $(,)?) => {
        $(impl $crate::ledger::write::Reserves for $row {
            fn reserved(&self) -> $crate::ledger::write::Reserved {
                self.reserved
            }
        })+
    };
}
use reserves;

/// The stored digest of a result body.
pub(crate) fn body_digest(body: &str) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(body.as_bytes()))
}

/// What the caller meant to do, to explain a refused write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Intent {
    /// A worker taking a `ready` or `retry_authorized` job.
    Claim,
    /// An owner acting under its epoch (renewal, release).
    Owner { epoch: i64 },
    /// An owner starting its next attempt.
    StartAttempt { epoch: i64 },
    /// An owner reporting the outcome of one of its attempts.
    Finish { epoch: i64, attempt_no: i64 },
    /// The reaper taking over a job whose lease expired.
    Recovery,
    /// A decision over an `unknown` job at the epoch the decider saw.
    Decision { epoch: i64 },
    /// A pre-approved replay policy acting on an `unknown` job.
    Replay { epoch: i64 },
}

/// Why a guarded write found no row. Pure: the job as re-read and the database clock.
pub(crate) fn classify(job: Option<&Job>, now: i64, intent: Intent) -> Refusal {
    let Some(job) = job else {
        return Refusal::NotFound;
    };
    let fenced_epoch = match intent {
        Intent::Owner { epoch }
        | Intent::StartAttempt { epoch }
        | Intent::Finish { epoch, .. }
        | Intent::Decision { epoch }
        | Intent::Replay { epoch } => Some(epoch),
        Intent::Claim | Intent::Recovery => None,
    };
    if let Some(epoch) = fenced_epoch {
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
    let owner = matches!(
        intent,
        Intent::Owner { .. } | Intent::StartAttempt { .. } | Intent::Finish { .. }
    );
    match intent {
        Intent::Claim | Intent::Recovery if lease_valid => Refusal::LiveOwner {
            epoch: job.owner_epoch,
        },
        Intent::Claim if job.state == JobState::Running => Refusal::LeaseExpired,
        Intent::Claim
            if matches!(job.state, JobState::Ready | JobState::RetryAuthorized)
                && job.budget_used >= job.max_attempts =>
        {
            Refusal::BudgetExhausted
        }
        Intent::Claim if job.retry_at.is_some_and(|at| at > now) => Refusal::BackoffPending,
        // Its retry time came between the refused claim and this re-read: it was not due then.
        Intent::Claim if job.state == JobState::RetryAuthorized && job.retry_at.is_some() => {
            Refusal::BackoffPending
        }
        _ if owner && job.state == JobState::Running && !lease_valid => Refusal::LeaseExpired,
        // Same epoch, valid lease: an attempt in flight or the budget stopped it.
        Intent::StartAttempt { .. } if job.state == JobState::Running => {
            if job.pending_attempt.is_some() {
                Refusal::AttemptPending
            } else {
                Refusal::BudgetExhausted
            }
        }
        Intent::Finish { attempt_no, .. } if job.state == JobState::Running => {
            Refusal::NoSuchAttempt(attempt_no)
        }
        Intent::Decision { .. } | Intent::Replay { .. }
            if job.state == JobState::Unknown && job.budget_used >= job.max_attempts =>
        {
            Refusal::BudgetExhausted
        }
        Intent::Replay { .. } if job.state == JobState::Unknown => Refusal::PolicyForbids,
        _ => Refusal::WrongState(job.state),
    }
}

/// A guarded write that matched: its open transaction and its typed row.
pub(crate) struct Fenced<'j, R> {
    pub(crate) tx: Transaction<'static, Any>,
    pub(crate) row: R,
    job_id: &'j str,
    sql: Arc<Statements>,
}

impl<R: Reserves> Fenced<'_, R> {
    /// Appends the write's events at the sequence numbers it reserved, and commits.
    pub(crate) async fn commit(mut self, events: &[NewEvent]) -> Result<R, LedgerError> {
        let at = self.row.reserved();
        append(&self.sql, &mut self.tx, self.job_id, at, events).await?;
        self.tx.commit().await?;
        crate::telemetry::wrote(
            &tracing::Span::current(),
            at.epoch,
            at.seq..at.seq + events.len() as i64,
        );
        Ok(self.row)
    }
}

/// A guarded statement with its arguments bound, decoding into `R`.
pub(crate) type Guarded<'q, R> = QueryAs<'q, Any, R, AnyArguments<'q>>;

impl Ledger {
    /// The fenced write: runs `statement` in a new write transaction. A row → the open
    /// transaction and the decoded row; none → rolled back, and the re-read job says why.
    pub(crate) async fn guarded<'j, 'q, R>(
        &self,
        job_id: &'j str,
        statement: Guarded<'q, R>,
        intent: Intent,
    ) -> Result<Fenced<'j, R>, LedgerError>
    where
        R: for<'r> FromRow<'r, AnyRow> + Send + Unpin,
    {
        let tx = self.begin_write().await?;
        match guarded_in(&self.sql, tx, job_id, statement).await? {
            Some(fenced) => Ok(fenced),
            None => Err(LedgerError::refused(
                job_id,
                self.refusal(job_id, intent).await?,
            )),
        }
    }

    /// [`Self::guarded`] for writes whose refusal needs no explaining: `None` when no row
    /// matched (rolled back).
    pub(crate) async fn try_guarded<'j, 'q, R>(
        &self,
        job_id: &'j str,
        statement: Guarded<'q, R>,
    ) -> Result<Option<Fenced<'j, R>>, LedgerError>
    where
        R: for<'r> FromRow<'r, AnyRow> + Send + Unpin,
    {
        let tx = self.begin_write().await?;
        guarded_in(&self.sql, tx, job_id, statement).await
    }

    /// Why a write on `job_id` under `intent` would be refused now.
    pub(crate) async fn refusal(
        &self,
        job_id: &str,
        intent: Intent,
    ) -> Result<Refusal, LedgerError> {
        let now = self.now_us().await?;
        let job = self.job(job_id).await?;
        Ok(classify(job.as_ref(), now, intent))
    }
}

/// The guarded statement inside a transaction the caller opened (and may have used).
pub(crate) async fn guarded_in<'j, 'q, R>(
    sql: &Arc<Statements>,
    mut tx: Transaction<'static, Any>,
    job_id: &'j str,
    statement: Guarded<'q, R>,
) -> Result<Option<Fenced<'j, R>>, LedgerError>
where
    R: for<'r> FromRow<'r, AnyRow> + Send + Unpin,
{
    match statement.fetch_optional(&mut *tx).await? {
        Some(row) => Ok(Some(Fenced {
            tx,
            row,
            job_id,
            sql: Arc::clone(sql),
        })),
        None => {
            tx.rollback().await?;
            Ok(None)
        }
    }
}

/// An event with its place on a job's timeline.
pub(crate) struct Placed<'a> {
    pub(crate) job_id: &'a str,
    pub(crate) seq: i64,
    pub(crate) at: i64,
    pub(crate) epoch: i64,
    pub(crate) deadline_at: i64,
    pub(crate) event: &'a NewEvent,
}

/// One event's columns, as bound: a group commit gathers those of all its writes and inserts
/// them together, last.
pub(crate) struct EventRow {
    job_id: String,
    seq: i64,
    at: i64,
    kind: &'static str,
    epoch: i64,
    actor: String,
    message_id: Option<String>,
    receive_count: Option<i64>,
    handle_hash: Option<String>,
    attempt_no: Option<i64>,
    deadline_left_ms: i64,
    detail: String,
}

impl EventRow {
    fn of(row: &Placed<'_>) -> EventRow {
        let e = row.event;
        let mut detail = e.detail.to_string();
        if detail.len() > DETAIL_MAX {
            detail = json!({"truncated": true}).to_string();
        }
        EventRow {
            job_id: row.job_id.to_owned(),
            seq: row.seq,
            at: row.at,
            kind: e.kind.as_str(),
            epoch: e.epoch.unwrap_or(row.epoch),
            actor: e.actor.to_string(),
            message_id: e.delivery.as_ref().map(|d| d.message_id.clone()),
            receive_count: e.delivery.as_ref().map(|d| d.receive_count),
            handle_hash: e.delivery.as_ref().map(|d| d.handle_hash.clone()),
            attempt_no: e.attempt_no,
            deadline_left_ms: (row.deadline_at - row.at) / 1000,
            detail,
        }
    }
}

/// Inserts placed events, up to 400 a statement.
pub(crate) async fn insert_events(
    sql: &Statements,
    conn: &mut AnyConnection,
    rows: &[Placed<'_>],
) -> Result<(), LedgerError> {
    insert_event_rows(sql, conn, &event_rows(rows)).await
}

/// Placed events as `insert_events` binds them.
pub(crate) fn event_rows(rows: &[Placed<'_>]) -> Vec<EventRow> {
    rows.iter().map(EventRow::of).collect()
}

/// Inserts events made by [`event_rows`]: on SQLite as many a statement as its longest
/// `VALUES` list takes, on PostgreSQL up to 400.
pub(crate) async fn insert_event_rows(
    sql: &Statements,
    conn: &mut AnyConnection,
    rows: &[EventRow],
) -> Result<(), LedgerError> {
    let most = match sql.insert_events.most_direct() {
        0 => EVENT_CHUNK,
        n => n,
    };
    for chunk in rows.chunks(most) {
        let query = bind_rows!(|text| sqlx::query(text), sql.insert_events, chunk, |e| [
            e.job_id.as_str(),
            e.seq,
            e.at,
            e.kind,
            e.epoch,
            e.actor.as_str(),
            e.message_id.as_deref(),
            e.receive_count,
            e.handle_hash.as_deref(),
            e.attempt_no,
            e.deadline_left_ms,
            e.detail.as_str(),
        ]);
        query.execute(&mut *conn).await?;
    }
    Ok(())
}

/// Places `events` from `at.seq` on one job's timeline and inserts them.
pub(crate) async fn append(
    sql: &Statements,
    conn: &mut AnyConnection,
    job_id: &str,
    at: Reserved,
    events: &[NewEvent],
) -> Result<(), LedgerError> {
    let rows: Vec<_> = events
        .iter()
        .enumerate()
        .map(|(i, event)| Placed {
            job_id,
            seq: at.seq + i as i64,
            at: at.at,
            epoch: at.epoch,
            deadline_at: at.deadline_at,
            event,
        })
        .collect();
    insert_events(sql, conn, &rows).await
}

/// Locks the rows of `job_ids` in job-id order before a transaction writes several jobs
/// (PostgreSQL; SQLite has one writer at a time). Concurrent batches then queue behind each
/// other instead of deadlocking.
pub(crate) async fn lock_jobs<'a>(
    sql: &Statements,
    backend: super::Backend,
    conn: &mut AnyConnection,
    job_ids: impl IntoIterator<Item = &'a str>,
) -> Result<(), LedgerError> {
    if backend != super::Backend::Postgres {
        return Ok(());
    }
    let mut ids: Vec<&str> = job_ids.into_iter().collect();
    ids.sort_unstable();
    ids.dedup();
    for chunk in ids.chunks(EVENT_CHUNK) {
        let text = sql.lock_jobs.sql();
        let query = bind_keys!(sqlx::query(text), sql.lock_jobs, chunk.iter().copied());
        query.execute(&mut *conn).await?;
    }
    Ok(())
}

/// Attempts in flight become `lost`: their outcome is unknown. Returns how many.
pub(crate) async fn mark_pending_lost(
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

/// A result body, accepted or kept as stale evidence.
pub(crate) struct NewResult<'a> {
    pub(crate) result_ref: &'a str,
    pub(crate) job_id: &'a str,
    pub(crate) attempt_no: Option<i64>,
    pub(crate) epoch: i64,
    pub(crate) status: &'static str,
    pub(crate) body: &'a str,
    pub(crate) at: i64,
}

pub(crate) async fn insert_result(
    conn: &mut AnyConnection,
    r: &NewResult<'_>,
) -> Result<(), LedgerError> {
    sqlx::query(
        "INSERT INTO results (result_ref, job_id, attempt_no, epoch, status, body, digest, \
         created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(r.result_ref)
    .bind(r.job_id)
    .bind(r.attempt_no)
    .bind(r.epoch)
    .bind(r.status)
    .bind(r.body)
    .bind(body_digest(r.body))
    .bind(r.at)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// A new result reference.
pub(crate) fn new_result_ref() -> String {
    format!("res_{}", uuid::Uuid::now_v7().simple())
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
            budget_used: 1,
            retry_at: None,
            result_ref: None,
            error_code: None,
            replay_policy: ReplayPolicy::Manual,
            recovery_reason: None,
            created_at: 0,
            updated_at: 0,
            terminal_at: None,
            pending_attempt: None,
            drill_run: None,
            next_event_seq: 1,
            route: Default::default(),
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
        spent.budget_used = 3;
        assert_eq!(
            classify(Some(&spent), 500, Intent::Claim),
            Refusal::BudgetExhausted
        );
        // Refusals the provider confirmed it never ran are numbered but spend no budget.
        let mut refused = job(JobState::RetryAuthorized, 3, None);
        refused.attempt_count = 7;
        refused.budget_used = 2;
        assert_ne!(
            classify(Some(&refused), 500, Intent::Claim),
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
