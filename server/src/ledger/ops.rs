//! Ledger operations for the worker, the outbox dispatcher and the reaper: an owner handing a
//! job back, batches of timeline events, outbox claims, the reaper's queries, and refused
//! queue messages.

use std::time::Duration;

use serde_json::json;
use sqlx::Row;

use super::model::{NewEvent, Recovered};
use super::read::JOB_COLUMNS;
use super::write::{append, insert_events, Intent, Placed};
use super::{Job, Ledger, LedgerError};
use crate::job::{Actor, EventKind, JobState};

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

/// An outbox row claimed for sending.
#[derive(Debug, Clone)]
pub struct OutboxItem {
    pub id: i64,
    pub job_id: String,
    pub tenant: String,
    pub reason: String,
}

/// A message the embedded queue moved to its dead-letter queue.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct DeadLetterMove {
    pub id: i64,
    pub message_id: String,
    pub body: String,
    pub receive_count: i64,
    pub from_queue: Option<String>,
    pub at: i64,
}

/// An `unknown` job as the reconciliation queue shows it.
#[derive(Debug, Clone)]
pub struct UnknownJob {
    pub job: Job,
    /// Fenceline's request id of the last attempt, when it had one.
    pub last_request: Option<String>,
    /// Provider retrieval cannot settle it (none offered, or switched off): it needs a decision.
    pub retrieval_unsupported: bool,
}

/// An `unknown` job as provider retrieval sees it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct UnknownForRetrieval {
    pub job_id: String,
    pub epoch: i64,
    pub updated_at: i64,
    /// Fenceline's request id of the last attempt, when it had one.
    pub last_request: Option<String>,
}

/// A queue message the worker refused, for the record.
#[derive(Debug, Clone)]
pub struct RejectedMessage<'a> {
    pub worker_id: &'a str,
    pub message_id: &'a str,
    pub receive_count: i64,
    pub handle_hash: &'a str,
    pub reason: &'a str,
    pub body_bytes: i64,
    pub job_id: Option<&'a str>,
}

impl Ledger {
    /// The owner hands its job back while its lease is valid and before the deadline (epoch + 1,
    /// fencing itself out; past the deadline the job can only expire):
    /// with an attempt in flight the job becomes `unknown` (the call may have reached the
    /// provider), without one `retry_authorized` and re-dispatched through the outbox.
    pub async fn release(
        &self,
        job_id: &str,
        epoch: i64,
        worker_id: &str,
        reason: &str,
    ) -> Result<Recovered, LedgerError> {
        let actor = Actor::Worker(worker_id.to_owned());
        let mut tx = self.begin_write().await?;
        let sql = self.sql(
            "UPDATE jobs SET owner_epoch = owner_epoch + 1, \
             state = CASE WHEN pending_attempt IS NULL THEN 'retry_authorized' ELSE 'unknown' END, \
             pending_attempt = NULL, recovery_reason = $3, updated_at = {now}, \
             next_event_seq = next_event_seq + 1 \
             WHERE job_id = $1 AND owner_epoch = $2 AND state = 'running' \
             AND owner_until > {now} AND deadline_at > {now} \
             RETURNING state, owner_epoch, next_event_seq - 1 AS seq, updated_at, deadline_at",
        );
        let row = sqlx::query(&sql)
            .bind(job_id)
            .bind(epoch)
            .bind(reason)
            .fetch_optional(&mut *tx)
            .await?;
        let Some(row) = row else {
            tx.rollback().await?;
            let refusal = self.refusal(job_id, Intent::Owner { epoch }).await?;
            return Err(LedgerError::refused(job_id, refusal));
        };
        let state: String = row.try_get("state")?;
        let state: JobState = state
            .parse()
            .map_err(|e: crate::job::ParseStateError| LedgerError::Corrupt(e.to_string()))?;
        let new_epoch: i64 = row.try_get("owner_epoch")?;
        let now: i64 = row.try_get("updated_at")?;
        let lost = sqlx::query(
            "UPDATE attempts SET outcome = 'lost', finished_at = $2 \
             WHERE job_id = $1 AND outcome = 'pending'",
        )
        .bind(job_id)
        .bind(now)
        .execute(&mut *tx)
        .await?
        .rows_affected() as i64;
        if state == JobState::RetryAuthorized {
            sqlx::query(
                "INSERT INTO outbox (job_id, epoch, reason, created_at, available_at) \
                 VALUES ($1, $2, 'released', $3, $3)",
            )
            .bind(job_id)
            .bind(new_epoch)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        }
        let event = NewEvent::new(EventKind::StateChanged, &actor)
            .epoch(new_epoch)
            .detail(json!({
                "to": state.as_str(),
                "released_by_epoch": epoch,
                "reason": reason,
                "lost_attempts": lost,
            }));
        let seq: i64 = row.try_get("seq")?;
        let deadline_at: i64 = row.try_get("deadline_at")?;
        append(&mut tx, job_id, seq, now, new_epoch, deadline_at, &[event]).await?;
        tx.commit().await?;
        Ok(Recovered {
            state,
            epoch: new_epoch,
            lost_attempts: lost,
        })
    }

    /// Appends events to many jobs in one transaction (heartbeat outcomes, dispatches): one
    /// statement reserves the sequence numbers of up to 400 jobs at a time. Events for jobs
    /// that do not exist are skipped.
    pub async fn record_events(&self, events: &[(String, NewEvent)]) -> Result<(), LedgerError> {
        if events.is_empty() {
            return Ok(());
        }
        // Several events for one job each need their own sequence number: place them in
        // rounds, each round holding at most one event per job.
        let mut rounds: Vec<Vec<&(String, NewEvent)>> = Vec::new();
        let mut seen: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
        for entry in events {
            let round = seen.entry(entry.0.as_str()).or_insert(0);
            if rounds.len() <= *round {
                rounds.push(Vec::new());
            }
            rounds[*round].push(entry);
            *round += 1;
        }
        let mut tx = self.begin_write().await?;
        for round in rounds {
            for chunk in round.chunks(400) {
                let mut ids = String::new();
                for i in 0..chunk.len() {
                    if i > 0 {
                        ids.push_str(", ");
                    }
                    ids.push_str(&format!("${}", i + 1));
                }
                let sql = self.sql(&format!(
                    "UPDATE jobs SET next_event_seq = next_event_seq + 1 WHERE job_id IN ({ids}) \
                     RETURNING job_id, next_event_seq - 1 AS seq, {{now}} AS now_us, deadline_at, owner_epoch"
                ));
                let mut query = sqlx::query(&sql);
                for (job_id, _) in chunk.iter().map(|e| (&e.0, &e.1)) {
                    query = query.bind(job_id.as_str());
                }
                let rows = query.fetch_all(&mut *tx).await?;
                let by_job: std::collections::HashMap<String, &(String, NewEvent)> =
                    chunk.iter().map(|e| (e.0.clone(), *e)).collect();
                let mut placed = Vec::with_capacity(rows.len());
                for row in &rows {
                    let job_id: String = row.try_get("job_id")?;
                    if let Some(entry) = by_job.get(&job_id) {
                        placed.push(Placed {
                            job_id: entry.0.as_str(),
                            seq: row.try_get("seq")?,
                            at: row.try_get("now_us")?,
                            epoch: row.try_get("owner_epoch")?,
                            deadline_at: row.try_get("deadline_at")?,
                            event: &entry.1,
                        });
                    }
                }
                insert_events(&mut tx, &placed).await?;
            }
        }
        tx.commit().await?;
        Ok(())
    }

    /// Appends many events to one job's timeline in one transaction (imports, generated data).
    pub async fn append_events(
        &self,
        job_id: &str,
        events: &[NewEvent],
    ) -> Result<(), LedgerError> {
        if events.is_empty() {
            return Ok(());
        }
        let n = events.len() as i64;
        let mut tx = self.begin_write().await?;
        let sql = self.sql(
            "UPDATE jobs SET next_event_seq = next_event_seq + $2 WHERE job_id = $1 \
             RETURNING next_event_seq - $2 AS seq, {now} AS now_us, deadline_at, owner_epoch",
        );
        let Some(row) = sqlx::query(&sql)
            .bind(job_id)
            .bind(n)
            .fetch_optional(&mut *tx)
            .await?
        else {
            return Err(LedgerError::refused(job_id, super::Refusal::NotFound));
        };
        let seq: i64 = row.try_get("seq")?;
        let now: i64 = row.try_get("now_us")?;
        let epoch: i64 = row.try_get("owner_epoch")?;
        let deadline_at: i64 = row.try_get("deadline_at")?;
        append(&mut tx, job_id, seq, now, epoch, deadline_at, events).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Claims up to `limit` due outbox rows for `lock` (another dispatcher skips them until
    /// then); each claim counts as a send attempt.
    pub async fn claim_outbox(
        &self,
        limit: u32,
        lock: Duration,
    ) -> Result<Vec<OutboxItem>, LedgerError> {
        let mut tx = self.begin_write().await?;
        let select = self.sql(
            "SELECT id FROM outbox WHERE dispatched_at IS NULL AND available_at <= {now} \
             AND (locked_until IS NULL OR locked_until <= {now}) \
             ORDER BY available_at, id LIMIT $1{skip_locked}",
        );
        let ids: Vec<i64> = sqlx::query_scalar(&select)
            .bind(i64::from(limit))
            .fetch_all(&mut *tx)
            .await?;
        if ids.is_empty() {
            tx.commit().await?;
            return Ok(Vec::new());
        }
        let list = (0..ids.len())
            .map(|i| format!("${}", i + 2))
            .collect::<Vec<_>>()
            .join(", ");
        let lock_sql = self.sql(&format!(
            "UPDATE outbox SET locked_until = {{now}} + $1, send_attempts = send_attempts + 1 \
             WHERE id IN ({list}) RETURNING id, job_id, reason"
        ));
        let mut query = sqlx::query(&lock_sql).bind(micros(lock));
        for id in &ids {
            query = query.bind(*id);
        }
        let rows = query.fetch_all(&mut *tx).await?;
        let job_ids: Vec<String> = rows
            .iter()
            .map(|r| r.try_get("job_id"))
            .collect::<Result<_, _>>()?;
        let list = (0..job_ids.len())
            .map(|i| format!("${}", i + 1))
            .collect::<Vec<_>>()
            .join(", ");
        let tenants_sql = format!("SELECT job_id, tenant FROM jobs WHERE job_id IN ({list})");
        let mut query = sqlx::query(&tenants_sql);
        for id in &job_ids {
            query = query.bind(id.as_str());
        }
        let tenants: std::collections::HashMap<String, String> = query
            .fetch_all(&mut *tx)
            .await?
            .iter()
            .map(|r| Ok((r.try_get("job_id")?, r.try_get("tenant")?)))
            .collect::<Result<_, sqlx::Error>>()?;
        let mut items = Vec::with_capacity(rows.len());
        for row in &rows {
            let job_id: String = row.try_get("job_id")?;
            items.push(OutboxItem {
                id: row.try_get("id")?,
                tenant: tenants.get(&job_id).cloned().unwrap_or_default(),
                job_id,
                reason: row.try_get("reason")?,
            });
        }
        items.sort_by_key(|item| item.id);
        tx.commit().await?;
        Ok(items)
    }

    /// Marks outbox rows sent, with `dispatched` events on their jobs.
    pub async fn mark_dispatched(
        &self,
        sent: &[(OutboxItem, String)],
        queue: &str,
    ) -> Result<(), LedgerError> {
        if sent.is_empty() {
            return Ok(());
        }
        let values = (0..sent.len())
            .map(|i| format!("(${}, ${})", 1 + 2 * i, 2 + 2 * i))
            .collect::<Vec<_>>()
            .join(", ");
        let sql = self.sql(&format!(
            "UPDATE outbox SET dispatched_at = {{now}}, message_id = v.column2, locked_until = NULL \
             FROM (VALUES {values}) AS v WHERE outbox.id = v.column1"
        ));
        let mut query = sqlx::query(&sql);
        for (item, message_id) in sent {
            query = query.bind(item.id).bind(message_id.as_str());
        }
        query.execute(&self.writer).await?;
        let events: Vec<_> = sent
            .iter()
            .map(|(item, message_id)| {
                (
                    item.job_id.clone(),
                    NewEvent::new(EventKind::Dispatched, &Actor::System).detail(json!({
                        "message_id": message_id,
                        "queue": queue,
                        "reason": item.reason,
                    })),
                )
            })
            .collect();
        self.record_events(&events).await
    }

    /// An outbox row could not be sent: try again after `retry_in`, with `dispatch_failed`.
    pub async fn dispatch_failed(
        &self,
        item: &OutboxItem,
        error_code: &str,
        retry_in: Duration,
    ) -> Result<(), LedgerError> {
        let sql = self.sql(
            "UPDATE outbox SET locked_until = NULL, available_at = {now} + $2, last_error = $3 WHERE id = $1",
        );
        sqlx::query(&sql)
            .bind(item.id)
            .bind(micros(retry_in))
            .bind(error_code)
            .execute(&self.writer)
            .await?;
        let event = NewEvent::new(EventKind::DispatchFailed, &Actor::System)
            .detail(json!({ "error": error_code, "retry_in_ms": micros(retry_in) / 1000 }));
        self.record_event(&item.job_id, &event).await.map(|_| ())
    }

    async fn job_ids(
        &self,
        sql: &str,
        limit: u32,
        extra: Option<i64>,
    ) -> Result<Vec<String>, LedgerError> {
        let sql = self.sql(sql);
        let mut query = sqlx::query_scalar(&sql).bind(i64::from(limit));
        if let Some(extra) = extra {
            query = query.bind(extra);
        }
        Ok(query.fetch_all(&self.reader).await?)
    }

    /// Running jobs whose lease has expired (the reaper recovers them).
    pub async fn expired_leases(&self, limit: u32) -> Result<Vec<String>, LedgerError> {
        self.job_ids(
            "SELECT job_id FROM jobs WHERE state = 'running' AND owner_until <= {now} \
             ORDER BY owner_until LIMIT $1",
            limit,
            None,
        )
        .await
    }

    /// Live jobs whose deadline has passed (the reaper expires them).
    pub async fn past_deadline(&self, limit: u32) -> Result<Vec<String>, LedgerError> {
        self.job_ids(
            "SELECT job_id FROM jobs WHERE state IN ('ready', 'running', 'unknown', 'retry_authorized') \
             AND deadline_at <= {now} ORDER BY deadline_at LIMIT $1",
            limit,
            None,
        )
        .await
    }

    /// Workable jobs with no send pending whose last dispatch is older than `quiet`: their
    /// message may be gone (deleted after a crash, expired, dead-lettered). The reaper sends
    /// them again; a duplicate is harmless.
    pub async fn quiet_workable(
        &self,
        limit: u32,
        quiet: Duration,
    ) -> Result<Vec<String>, LedgerError> {
        self.job_ids(
            "SELECT j.job_id FROM jobs j WHERE j.state IN ('ready', 'retry_authorized') \
             AND (j.retry_at IS NULL OR j.retry_at <= {now}) AND j.updated_at <= {now} - $2 \
             AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.job_id = j.job_id \
                 AND (o.dispatched_at IS NULL OR o.dispatched_at > {now} - $2)) \
             ORDER BY j.updated_at LIMIT $1",
            limit,
            Some(micros(quiet)),
        )
        .await
    }

    /// `unknown` jobs whose pre-approved replay policy can apply now (budget and time left),
    /// oldest first, with the epoch a decision must name. Jobs under a manual policy are not
    /// in this list, so however many of them wait, they never hold these up.
    pub async fn unknown_replayable(&self, limit: u32) -> Result<Vec<(String, i64)>, LedgerError> {
        let sql = self.sql(
            "SELECT job_id, owner_epoch FROM jobs WHERE state = 'unknown' \
             AND replay_policy = 'replay_on_unknown' AND attempt_count < max_attempts \
             AND deadline_at > {now} ORDER BY updated_at LIMIT $1",
        );
        let rows = sqlx::query(&sql)
            .bind(i64::from(limit))
            .fetch_all(&self.reader)
            .await?;
        rows.iter()
            .map(|row| Ok((row.try_get("job_id")?, row.try_get("owner_epoch")?)))
            .collect()
    }

    /// Applies a job's pre-approved replay policy to it, if it has one and it can apply
    /// (`unknown` at `epoch`, budget and time left): a `decision_recorded` by `policy`, the job
    /// `retry_authorized` and re-dispatched. Returns whether it applied.
    pub async fn apply_replay_policy(&self, job_id: &str, epoch: i64) -> Result<bool, LedgerError> {
        match self
            .decide(
                job_id,
                epoch,
                &super::Decision::ReplayPolicy,
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

    /// A page of `unknown` jobs for provider retrieval, after `cursor` (by last change, then
    /// id), each with its epoch and its last attempt's provider request id. Jobs already
    /// marked `retrieval_unsupported` at their current epoch are skipped: asking again
    /// cannot help them.
    pub async fn unknown_for_retrieval(
        &self,
        cursor: &(i64, String),
        limit: u32,
    ) -> Result<Vec<UnknownForRetrieval>, LedgerError> {
        let sql = "SELECT j.job_id, j.owner_epoch AS epoch, j.updated_at, \
             (SELECT a.provider_request_id FROM attempts a WHERE a.job_id = j.job_id \
              ORDER BY a.attempt_no DESC LIMIT 1) AS last_request \
             FROM jobs j WHERE j.state = 'unknown' \
             AND (j.updated_at > $1 OR (j.updated_at = $1 AND j.job_id > $2)) \
             AND NOT EXISTS (SELECT 1 FROM events e WHERE e.job_id = j.job_id \
                 AND e.kind = 'retrieval_unsupported' AND e.epoch = j.owner_epoch) \
             ORDER BY j.updated_at, j.job_id LIMIT $3";
        Ok(sqlx::query_as(sql)
            .bind(cursor.0)
            .bind(cursor.1.as_str())
            .bind(i64::from(limit))
            .fetch_all(&self.reader)
            .await?)
    }

    /// Messages the embedded queue moved to a dead-letter queue whose move is not yet on
    /// their job's timeline, oldest first.
    pub async fn dead_letters_to_note(
        &self,
        limit: u32,
    ) -> Result<Vec<DeadLetterMove>, LedgerError> {
        Ok(sqlx::query_as(
            "SELECT id, message_id, body, \
             COALESCE(dead_receive_count, receive_count) AS receive_count, \
             dead_from AS from_queue, dead_at AS at FROM queue_messages \
             WHERE dead_at IS NOT NULL AND timeline_noted_at IS NULL ORDER BY dead_at LIMIT $1",
        )
        .bind(i64::from(limit))
        .fetch_all(&self.reader)
        .await?)
    }

    /// Marks dead-letter moves as noted on their timelines.
    pub async fn mark_dead_letters_noted(&self, ids: &[i64]) -> Result<(), LedgerError> {
        if ids.is_empty() {
            return Ok(());
        }
        let sql = self.sql(&format!(
            "UPDATE queue_messages SET timeline_noted_at = {{now}} WHERE id IN {}",
            super::dialect::row_placeholders(1, ids.len())
        ));
        let mut query = sqlx::query(&sql);
        for id in ids {
            query = query.bind(*id);
        }
        query.execute(&self.writer).await?;
        Ok(())
    }

    /// A page of `unknown` jobs after `cursor` (last change, then id: oldest first), each with
    /// its last attempt's provider request id and whether provider retrieval was found unable
    /// to settle it at its current epoch.
    pub async fn unknown_jobs(
        &self,
        cursor: &(i64, String),
        limit: u32,
    ) -> Result<Vec<UnknownJob>, LedgerError> {
        let sql = format!(
            "SELECT {JOB_COLUMNS}, (SELECT a.provider_request_id FROM attempts a \
             WHERE a.job_id = jobs.job_id ORDER BY a.attempt_no DESC LIMIT 1) AS last_request, \
             CASE WHEN EXISTS (SELECT 1 FROM events e WHERE e.job_id = jobs.job_id \
                 AND e.kind = 'retrieval_unsupported' AND e.epoch = jobs.owner_epoch) \
             THEN 1 ELSE 0 END AS retrieval_unsupported \
             FROM jobs WHERE state = 'unknown' \
             AND (updated_at > $1 OR (updated_at = $1 AND job_id > $2)) \
             ORDER BY updated_at, job_id LIMIT $3"
        );
        let rows = sqlx::query(&sql)
            .bind(cursor.0)
            .bind(cursor.1.as_str())
            .bind(i64::from(limit))
            .fetch_all(&self.reader)
            .await?;
        rows.iter()
            .map(|row| {
                Ok(UnknownJob {
                    job: super::read::job_from_row(row)?,
                    last_request: row.try_get("last_request")?,
                    retrieval_unsupported: row.try_get::<i64, _>("retrieval_unsupported")? == 1,
                })
            })
            .collect()
    }

    /// Re-dispatches a job through the outbox (reason recorded on the row).
    pub async fn redispatch(&self, job_id: &str, reason: &str) -> Result<(), LedgerError> {
        let sql = self.sql(
            "INSERT INTO outbox (job_id, epoch, reason, created_at, available_at) \
             SELECT job_id, owner_epoch, $2, {now}, {now} FROM jobs WHERE job_id = $1",
        );
        sqlx::query(&sql)
            .bind(job_id)
            .bind(reason)
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    /// Keeps a record of a queue message the worker refused (never its body).
    pub async fn record_rejected_message(
        &self,
        m: &RejectedMessage<'_>,
    ) -> Result<(), LedgerError> {
        let sql = self.sql(
            "INSERT INTO rejected_messages (at, worker_id, message_id, receive_count, handle_hash, \
             reason, body_bytes, job_id) VALUES ({now}, $1, $2, $3, $4, $5, $6, $7)",
        );
        sqlx::query(&sql)
            .bind(m.worker_id)
            .bind(m.message_id)
            .bind(m.receive_count)
            .bind(m.handle_hash)
            .bind(m.reason)
            .bind(m.body_bytes)
            .bind(m.job_id)
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    /// How many queue messages were refused, by reason.
    pub async fn rejected_message_counts(&self) -> Result<Vec<(String, i64)>, LedgerError> {
        let rows = sqlx::query(
            "SELECT reason, COUNT(*) AS n FROM rejected_messages GROUP BY reason ORDER BY reason",
        )
        .fetch_all(&self.reader)
        .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("reason")?, r.try_get("n")?)))
            .collect()
    }
}
