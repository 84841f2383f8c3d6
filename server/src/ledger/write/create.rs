//! Creating a job: the job row, its input, its first outbox row and `job_created`, idempotent
//! per tenant and key.

use std::collections::HashMap;

use sqlx::AnyConnection;

use super::batch::{place, WrittenJob};
use super::outbox::{insert_outbox, send_new_in, sent_event, NewSend};
use super::{event_rows, micros, EventRow, Reserved};
use crate::job::detail;
use crate::job::{Actor, EventKind, JobId};
use crate::ledger::model::{Created, Job, NewEvent, NewJob};
use crate::ledger::read::{job_from_row, JOB_COLUMNS};
use crate::ledger::{DirectQueue, Ledger, LedgerError, Refusal};

/// A new job with its id and who asked.
pub(crate) struct CreateOp {
    pub(crate) job_id: JobId,
    pub(crate) new: NewJob,
    pub(crate) actor: Actor,
    /// Whether its message goes to the ledger's own queue in the same transaction.
    pub(crate) direct: bool,
    /// The caller's transition span, told the sequence numbers its events got.
    pub(crate) span: tracing::Span,
}

impl Ledger {
    /// Creates a job with its input and outbox row, idempotently per tenant and key.
    pub async fn create_job(&self, new: NewJob, actor: &Actor) -> Result<Created, LedgerError> {
        self.create_job_with_id(JobId::generate(), new, actor).await
    }

    /// [`Ledger::create_job`] with the id chosen beforehand: a drill arms its faults on a job
    /// before the job exists, so no dispatcher can send it first.
    #[tracing::instrument(
        target = "fenceline::trace",
        name = "ledger.transition",
        skip_all,
        fields(
            transition = "create",
            job_id = job_id.as_str(),
            epoch = tracing::field::Empty,
            event_seqs = tracing::field::Empty,
        )
    )]
    pub async fn create_job_with_id(
        &self,
        job_id: JobId,
        new: NewJob,
        actor: &Actor,
    ) -> Result<Created, LedgerError> {
        if new.max_attempts == 0 || new.max_attempts > 100 {
            return Err(LedgerError::Invalid("max_attempts must be 1..=100".into()));
        }
        let direct = self.sends_directly(&new);
        let created = self.insert_job(job_id, new, actor, direct).await?;
        // Committed: the queue's long polls in this process may take the message now.
        if let (Created::New(_), Some(queue)) = (&created, direct) {
            queue.sent.notify_waiters();
        }
        Ok(created)
    }

    /// The job's rows, in the next group commit or else in a transaction of their own, with
    /// its message when it goes straight to `direct`.
    async fn insert_job(
        &self,
        job_id: JobId,
        new: NewJob,
        actor: &Actor,
        direct: Option<&DirectQueue>,
    ) -> Result<Created, LedgerError> {
        let op = CreateOp {
            span: tracing::Span::current(),
            job_id: job_id.clone(),
            new: new.clone(),
            actor: actor.clone(),
            direct: direct.is_some(),
        };
        if let Some(job) = self.grouped_create(op).await? {
            return Ok(Created::New(job));
        }
        let input_ref = format!("ledger:job_inputs/{job_id}");
        let statement = sqlx::query_as::<_, Reserved>(&self.sql.create_job)
            .bind(job_id.as_str())
            .bind(&new.tenant)
            .bind(&new.idempotency_key)
            .bind(&new.request_digest)
            .bind(&input_ref)
            .bind(&new.contract_version)
            .bind(micros(new.deadline))
            .bind(i64::from(new.max_attempts))
            .bind(new.replay_policy.as_str())
            .bind(new.drill_run.as_deref())
            .bind(first_unreserved(direct.is_some()));
        let Some(mut created) = self.try_guarded(job_id.as_str(), statement).await? else {
            let replayed = self.idempotent_replay(new, actor).await?;
            // The span names the job the key made before, not the id this request drew.
            tracing::Span::current().record("job_id", replayed.job().job_id.as_str());
            return Ok(replayed);
        };
        sqlx::query("INSERT INTO job_inputs (job_id, input, model) VALUES ($1, $2, $3)")
            .bind(job_id.as_str())
            .bind(new.input.to_string())
            .bind(new.model.to_string())
            .execute(&mut *created.tx)
            .await?;
        if let Some(traceparent) = &new.traceparent {
            keep_trace(&mut created.tx, job_id.as_str(), 0, traceparent).await?;
        }
        let at = created.row.at;
        let mut events = vec![created_event(&new, actor)];
        match direct {
            Some(queue) => {
                let send = NewSend {
                    job_id: job_id.as_str(),
                    tenant: &new.tenant,
                    at,
                };
                let ids = send_new_in(&self.sql, &mut created.tx, queue, &[send]).await?;
                events.push(sent_event(queue, &ids[0]));
            }
            None => {
                insert_outbox(
                    &self.sql,
                    &mut created.tx,
                    job_id.as_str(),
                    0,
                    "created",
                    at,
                )
                .await?
            }
        }
        created.commit(&events).await?;
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
            let recent: i64 = sqlx::query_scalar(&self.sql.recent_idempotency_hits)
                .bind(&existing.job_id)
                .fetch_one(&self.reader)
                .await?;
            if recent == 0 {
                let event = NewEvent::new(EventKind::IdempotencyHit, actor);
                self.record_event(&existing.job_id, &event).await?;
            }
            Ok(Created::Existing(existing))
        } else {
            let offered = new.request_digest.get(..12).unwrap_or("");
            let event = NewEvent::new(EventKind::IdempotencyConflict, actor).detail(
                detail::IdempotencyConflict {
                    existing_digest: existing.request_digest[..12].to_owned(),
                    offered_digest: offered.to_owned(),
                },
            );
            self.record_conflict_once(&existing.job_id, offered, &event)
                .await?;
            Err(LedgerError::IdempotencyConflict {
                existing: existing.job_id,
            })
        }
    }

    /// Records `event`, a conflict offering the digest `offered`, unless the job's timeline
    /// has one for that digest already: a client repeating a conflicting request in a loop
    /// adds one event, not one a try. Looked for on a read first; then again under the job's
    /// row, so that repeats at once add one too (and one that finds it leaves no number used).
    async fn record_conflict_once(
        &self,
        job_id: &str,
        offered: &str,
        event: &NewEvent,
    ) -> Result<(), LedgerError> {
        let names = |details: Vec<String>| {
            details.iter().any(|detail| {
                serde_json::from_str::<detail::IdempotencyConflict>(detail)
                    .is_ok_and(|d| d.offered_digest == offered)
            })
        };
        let recorded = sqlx::query_scalar(&self.sql.idempotency_conflicts)
            .bind(job_id)
            .fetch_all(&self.reader)
            .await?;
        if names(recorded) {
            return Ok(());
        }
        let statement = sqlx::query_as::<_, Reserved>(&self.sql.reserve_events)
            .bind(job_id)
            .bind(1_i64);
        let Some(mut reserved) = self.try_guarded(job_id, statement).await? else {
            return Err(LedgerError::refused(job_id, Refusal::NotFound));
        };
        let recorded = sqlx::query_scalar(&self.sql.idempotency_conflicts)
            .bind(job_id)
            .fetch_all(&mut *reserved.tx)
            .await?;
        if names(recorded) {
            reserved.tx.rollback().await?;
            return Ok(());
        }
        reserved.commit(std::slice::from_ref(event)).await?;
        Ok(())
    }
}

impl Ledger {
    /// The queue `new` is sent to in its own transaction, if any, taking a place the
    /// dispatcher left for it ([`Ledger::meter_direct`]): a drill's jobs go through their
    /// dispatcher lane, where the drill's faults are armed, and a job that would pass others
    /// waiting for their turn waits in the outbox too.
    pub(super) fn sends_directly(&self, new: &NewJob) -> Option<&DirectQueue> {
        self.direct
            .as_deref()
            .filter(|direct| new.drill_run.is_none() && direct.take(&new.tenant))
    }

    /// Whether this ledger handle's create made a new job and sent it as it did (so that its
    /// send is counted by whoever created it, there being no dispatcher to count it): its
    /// `dispatched` is then on its timeline already, after `job_created`.
    pub fn sent_at_creation(&self, created: &Created) -> bool {
        match created {
            Created::New(job) => self.direct.is_some() && job.next_event_seq > 2,
            Created::Existing(_) => false,
        }
    }
}

/// The first event number a new job leaves free: after `job_created`, and `dispatched` when
/// it is sent at once.
pub(super) fn first_unreserved(direct: bool) -> i64 {
    if direct {
        3
    } else {
        2
    }
}

/// `job_created`, with what the job was made with.
/// Keeps the trace context of a job (`attempt_no` 0) or of one of its attempts: the first
/// kept stays (an adopted attempt links to the span that sent it).
pub(crate) async fn keep_trace(
    conn: &mut AnyConnection,
    job_id: &str,
    attempt_no: i64,
    traceparent: &str,
) -> Result<(), LedgerError> {
    sqlx::query(
        "INSERT INTO job_traces (job_id, attempt_no, traceparent) VALUES ($1, $2, $3) \
         ON CONFLICT (job_id, attempt_no) DO NOTHING",
    )
    .bind(job_id)
    .bind(attempt_no)
    .bind(traceparent)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Keeps the trace contexts new jobs were submitted in, a few hundred a statement.
async fn keep_job_traces(
    conn: &mut AnyConnection,
    traces: &[(&str, &str)],
) -> Result<(), LedgerError> {
    for chunk in traces.chunks(300) {
        let values: Vec<String> = (0..chunk.len())
            .map(|k| format!("(${}, 0, ${})", 2 * k + 1, 2 * k + 2))
            .collect();
        let text = format!(
            "INSERT INTO job_traces (job_id, attempt_no, traceparent) VALUES {} \
             ON CONFLICT (job_id, attempt_no) DO NOTHING",
            values.join(", ")
        );
        let mut query = sqlx::query(&text);
        for (job_id, traceparent) in chunk {
            query = query.bind(*job_id).bind(*traceparent);
        }
        query.execute(&mut *conn).await?;
    }
    Ok(())
}

impl Ledger {
    /// The trace context a job was submitted in, when it kept one.
    pub async fn job_traceparent(&self, job_id: &str) -> Result<Option<String>, LedgerError> {
        Ok(sqlx::query_scalar(
            "SELECT traceparent FROM job_traces WHERE job_id = $1 AND attempt_no = 0",
        )
        .bind(job_id)
        .fetch_optional(&self.reader)
        .await?)
    }

    /// Keeps the trace context of one attempt's span, for the job page's trace link.
    pub async fn keep_attempt_trace(
        &self,
        job_id: &str,
        attempt_no: i64,
        traceparent: &str,
    ) -> Result<(), LedgerError> {
        let mut conn = self.writer.acquire().await?;
        keep_trace(&mut conn, job_id, attempt_no, traceparent).await
    }

    /// Every trace context a job kept, by attempt (0: its submission).
    pub async fn job_traces(&self, job_id: &str) -> Result<Vec<(i64, String)>, LedgerError> {
        Ok(sqlx::query_as(
            "SELECT attempt_no, traceparent FROM job_traces WHERE job_id = $1 \
             ORDER BY attempt_no",
        )
        .bind(job_id)
        .fetch_all(&self.reader)
        .await?)
    }
}

pub(super) fn created_event(new: &NewJob, actor: &Actor) -> NewEvent {
    NewEvent::new(EventKind::JobCreated, actor).detail(detail::JobCreated {
        contract_version: new.contract_version.clone(),
        max_attempts: i64::from(new.max_attempts),
        deadline_ms: micros(new.deadline) / 1000,
        replay_policy: new.replay_policy.as_str().to_owned(),
    })
}

/// The batched form, for group commit ([`super::group`]).
impl Ledger {
    pub(super) async fn create_many(
        &self,
        tx: &mut AnyConnection,
        ops: &[CreateOp],
        events_out: &mut Vec<EventRow>,
    ) -> Result<Vec<Option<Job>>, LedgerError> {
        let input_refs: Vec<String> = ops
            .iter()
            .map(|op| format!("ledger:job_inputs/{}", op.job_id))
            .collect();
        let query = bind_rows!(
            |sql| sqlx::query(sql),
            self.sql.create_each,
            ops.iter().zip(&input_refs),
            |(op, input_ref)| [
                op.job_id.as_str(),
                op.new.tenant.as_str(),
                op.new.idempotency_key.as_str(),
                op.new.request_digest.as_str(),
                input_ref.as_str(),
                op.new.contract_version.as_str(),
                micros(op.new.deadline),
                i64::from(op.new.max_attempts),
                op.new.replay_policy.as_str(),
                op.new.drill_run.as_deref(),
                super::create::first_unreserved(op.direct),
            ]
        );
        let index: HashMap<&str, usize> = ops
            .iter()
            .enumerate()
            .map(|(i, op)| (op.job_id.as_str(), i))
            .collect();
        let mut created: Vec<(usize, Reserved)> = Vec::with_capacity(ops.len());
        let mut jobs: HashMap<usize, Job> = HashMap::with_capacity(ops.len());
        for row in query.fetch_all(&mut *tx).await? {
            let WrittenJob { job, reserved } = WrittenJob::from_row(&row)?;
            if let Some(&i) = index.get(job.job_id.as_str()) {
                created.push((i, reserved));
                jobs.insert(i, job);
            }
        }
        let mut out: Vec<Option<Job>> = ops.iter().map(|_| None).collect();
        if created.is_empty() {
            return Ok(out);
        }
        let query = bind_rows!(
            |sql| sqlx::query(sql),
            self.sql.insert_inputs,
            &created,
            |(i, _)| [
                ops[*i].job_id.as_str(),
                ops[*i].new.input.to_string(),
                ops[*i].new.model.to_string(),
            ]
        );
        query.execute(&mut *tx).await?;
        let traces: Vec<(&str, &str)> = created
            .iter()
            .filter_map(|(i, _)| {
                let op = &ops[*i];
                Some((op.job_id.as_str(), op.new.traceparent.as_deref()?))
            })
            .collect();
        keep_job_traces(tx, &traces).await?;
        // Jobs sent at once (a queue in this database) and jobs the dispatcher will send.
        let (sent, queued): (Vec<_>, Vec<_>) = created.iter().partition(|(i, _)| ops[*i].direct);
        if !queued.is_empty() {
            let tenants: Vec<&str> = queued
                .iter()
                .map(|(i, _)| ops[*i].new.tenant.as_str())
                .collect();
            let tags = super::outbox::fair_tags(&self.sql, tx, &tenants).await?;
            let query = bind_rows!(
                |sql| sqlx::query(sql),
                self.sql.insert_first_sends,
                queued.iter().zip(&tags),
                |((i, r), tag)| [
                    ops[*i].job_id.as_str(),
                    r.at,
                    r.at,
                    ops[*i].new.tenant.as_str(),
                    *tag
                ]
            );
            query.execute(&mut *tx).await?;
        }
        let mut message_ids: HashMap<usize, String> = HashMap::new();
        if let (Some(queue), false) = (self.direct.as_deref(), sent.is_empty()) {
            let sends: Vec<NewSend<'_>> = sent
                .iter()
                .map(|(i, r)| NewSend {
                    job_id: ops[*i].job_id.as_str(),
                    tenant: &ops[*i].new.tenant,
                    at: r.at,
                })
                .collect();
            let ids = send_new_in(&self.sql, tx, queue, &sends).await?;
            message_ids.extend(sent.iter().map(|(i, _)| *i).zip(ids));
        }
        let events: Vec<(usize, Reserved, Vec<NewEvent>)> = created
            .iter()
            .map(|&(i, r)| {
                let op = &ops[i];
                let mut events = vec![super::create::created_event(&op.new, &op.actor)];
                if let (Some(queue), Some(id)) = (self.direct.as_deref(), message_ids.get(&i)) {
                    events.push(super::outbox::sent_event(queue, id));
                }
                (i, r, events)
            })
            .collect();
        events_out.extend(event_rows(&place(ops, &events, |op| op.job_id.as_str())));
        for (i, job) in jobs {
            out[i] = Some(job);
        }
        Ok(out)
    }
}
