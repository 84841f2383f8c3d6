//! The outbox: every send a job needs is a row written in the same transaction as the state
//! that needs it; the dispatcher claims due rows, sends them and marks them sent, or, for a
//! queue kept in the ledger, does all three in one transaction ([`Ledger::dispatch_into`]).

use std::collections::HashMap;
use std::time::Duration;

use sqlx::{AnyConnection, Row};

use super::micros;
use crate::job::detail;
use crate::job::message::JobMessage;
use crate::job::{Actor, EventKind};
use crate::ledger::model::NewEvent;
use crate::ledger::queue_store::{describe_embedded, queue_insert_in};
use crate::ledger::statements::{Batched, Statements};
use crate::ledger::{DirectQueue, Ledger, LedgerError};

/// An outbox row claimed for sending.
#[derive(Debug, Clone)]
pub struct OutboxItem {
    pub id: i64,
    pub job_id: String,
    pub tenant: String,
    pub reason: String,
    /// Rounds that have claimed the row to send it, this one included.
    pub send_attempts: i64,
    /// Its place in the fair queue (none for a row written before there was one).
    pub fair_tag: Option<i64>,
}

#[derive(sqlx::FromRow)]
struct Locked {
    id: i64,
    job_id: String,
    reason: String,
    send_attempts: i64,
    fair_tag: Option<i64>,
}

/// A due outbox row, read whole.
#[derive(sqlx::FromRow)]
struct Due {
    id: i64,
    job_id: String,
    reason: String,
    send_attempts: i64,
    fair_tag: Option<i64>,
    tenant: Option<String>,
}

/// A send of `job_id` at `epoch`, due at `available_at`, in its tenant's place in the fair
/// queue.
pub(super) async fn insert_outbox(
    sql: &Statements,
    conn: &mut AnyConnection,
    job_id: &str,
    epoch: i64,
    reason: &str,
    available_at: i64,
) -> Result<(), LedgerError> {
    sqlx::query(&sql.insert_outbox)
        .bind(job_id)
        .bind(epoch)
        .bind(reason)
        .bind(available_at)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// Places in the fair queue for new sends by `tenants`, in order: each tenant's sends start at
/// its next place and follow one step apart.
pub(super) async fn fair_tags(
    sql: &Statements,
    conn: &mut AnyConnection,
    tenants: &[&str],
) -> Result<Vec<i64>, LedgerError> {
    let mut next: HashMap<&str, (i64, i64)> = HashMap::new();
    let mut tags = Vec::with_capacity(tenants.len());
    for &tenant in tenants {
        let place = match next.get_mut(tenant) {
            Some(place) => place,
            None => {
                let first: (i64, i64) = sqlx::query_as(&sql.fair_next)
                    .bind(tenant)
                    .fetch_one(&mut *conn)
                    .await?;
                next.entry(tenant).or_insert(first)
            }
        };
        tags.push(place.0);
        place.0 += place.1;
    }
    Ok(tags)
}

/// A new job sent in its own transaction: which job, whose, and when it was created.
pub(super) struct NewSend<'a> {
    pub(super) job_id: &'a str,
    pub(super) tenant: &'a str,
    pub(super) at: i64,
}

/// Sends new jobs' messages to `queue` inside their creating transaction, with their outbox
/// rows recorded as sent; gives back each message's id, in order.
pub(super) async fn send_new_in(
    sql: &Statements,
    conn: &mut AnyConnection,
    queue: &DirectQueue,
    sends: &[NewSend<'_>],
) -> Result<Vec<String>, LedgerError> {
    let messages: Vec<(String, String)> = sends
        .iter()
        .map(|send| {
            (
                uuid::Uuid::now_v7().to_string(),
                JobMessage::body(send.job_id, send.tenant),
            )
        })
        .collect();
    queue_insert_in(sql, conn, &queue.name, &messages, Duration::ZERO).await?;
    let query = bind_rows!(
        |text| sqlx::query(text),
        sql.insert_sent_sends,
        sends.iter().zip(&messages),
        |(send, (id, _))| [send.job_id, send.at, send.at, send.at, id.as_str()]
    );
    query.execute(&mut *conn).await?;
    Ok(messages.into_iter().map(|(id, _)| id).collect())
}

/// `dispatched` for a new job's message sent to `queue` in the job's own transaction.
pub(super) fn sent_event(queue: &DirectQueue, message_id: &str) -> NewEvent {
    dispatched_event(message_id, &describe_embedded(&queue.name), "created")
}

/// `dispatched`: the job's message `message_id` is on `queue` (as [`crate::queue::Queue::describe`]
/// names it), sent for `reason`.
fn dispatched_event(message_id: &str, queue: &str, reason: &str) -> NewEvent {
    NewEvent::new(EventKind::Dispatched, &Actor::System).detail(detail::Dispatched {
        message_id: message_id.to_owned(),
        queue: queue.to_owned(),
        reason: reason.to_owned(),
    })
}

/// Most outbox rows one statement marks sent.
const DISPATCHED_CHUNK: usize = 500;

impl Ledger {
    /// Claims up to `limit` due outbox rows of `lane` for `lock` (another dispatcher skips
    /// them until then); each claim counts as a send attempt. The lane is a drill run, or `""`
    /// for every job no drill made: a drill's sends never reach tenants' queue, nor theirs a
    /// drill's.
    pub async fn claim_outbox(
        &self,
        limit: u32,
        lock: Duration,
        lane: &str,
    ) -> Result<Vec<OutboxItem>, LedgerError> {
        self.claim_outbox_capped(limit, lock, lane, &HashMap::new())
            .await
    }

    /// [`Ledger::claim_outbox`] in fair-queue order, taking at most `caps[tenant]` rows of a
    /// capped tenant (none once its cap is reached): the rows after a capped tenant's wait
    /// their turn without holding others up.
    pub async fn claim_outbox_capped(
        &self,
        limit: u32,
        lock: Duration,
        lane: &str,
        caps: &HashMap<String, i64>,
    ) -> Result<Vec<OutboxItem>, LedgerError> {
        let mut tx = self.begin_write().await?;
        let items = self.claim_in(&mut tx, limit, lock, lane, caps).await?;
        tx.commit().await?;
        Ok(items)
    }

    /// Sends up to `limit` due outbox rows of the lane of every job no drill made to `queue`, a
    /// queue kept in this very ledger (the embedded queue, as [`crate::queue::Queue::describe`]
    /// names it `described`), in one transaction: the rows claimed in fair-queue order (`caps`
    /// as [`Ledger::claim_outbox_capped`] takes them), their messages written, the rows
    /// recorded as sent with `dispatched` on their jobs. A worker can receive a message only
    /// once all of it is committed. Gives back the rows sent, with their messages' ids.
    pub async fn dispatch_into(
        &self,
        queue: &str,
        described: &str,
        limit: u32,
        caps: &HashMap<String, i64>,
    ) -> Result<Vec<(OutboxItem, String)>, LedgerError> {
        let mut tx = self.begin_write().await?;
        // The rows are held by this transaction alone and sent before it ends: no lock to
        // write, each row read whole at once.
        let due: Vec<Due> = sqlx::query_as(&self.sql.outbox_due_rows)
            .bind(i64::from(candidates(limit, caps)))
            .fetch_all(&mut *tx)
            .await?;
        let due = within_caps(due, caps, limit, |row| row.tenant.as_deref());
        if due.is_empty() {
            tx.commit().await?;
            return Ok(Vec::new());
        }
        // A row written before outbox rows named their tenant: its job says.
        let unnamed: Vec<&str> = due
            .iter()
            .filter(|row| row.tenant.is_none())
            .map(|row| row.job_id.as_str())
            .collect();
        let tenants = self.tenants_in(&mut tx, unnamed).await?;
        let sent: Vec<(OutboxItem, String)> = due
            .into_iter()
            .map(|row| {
                let tenant = row
                    .tenant
                    .or_else(|| tenants.get(&row.job_id).cloned())
                    .unwrap_or_default();
                let item = OutboxItem {
                    id: row.id,
                    job_id: row.job_id,
                    tenant,
                    reason: row.reason,
                    send_attempts: row.send_attempts + 1,
                    fair_tag: row.fair_tag,
                };
                (item, uuid::Uuid::now_v7().to_string())
            })
            .collect();
        let messages: Vec<(String, String)> = sent
            .iter()
            .map(|(item, id)| (id.clone(), JobMessage::body(&item.job_id, &item.tenant)))
            .collect();
        queue_insert_in(&self.sql, &mut tx, queue, &messages, Duration::ZERO).await?;
        let marked = &self.sql.outbox_sent_now;
        self.mark_in(&mut tx, &sent, marked, described, "").await?;
        tx.commit().await?;
        Ok(sent)
    }

    /// The tenants of `jobs`, read in the caller's transaction.
    async fn tenants_in(
        &self,
        tx: &mut AnyConnection,
        jobs: Vec<&str>,
    ) -> Result<HashMap<String, String>, LedgerError> {
        if jobs.is_empty() {
            return Ok(HashMap::new());
        }
        let query = sqlx::query(self.sql.tenants_of.sql());
        let query = bind_keys!(query, self.sql.tenants_of, jobs.into_iter());
        let tenants = query
            .fetch_all(&mut *tx)
            .await?
            .iter()
            .map(|r| Ok((r.try_get("job_id")?, r.try_get("tenant")?)))
            .collect::<Result<_, sqlx::Error>>()?;
        Ok(tenants)
    }

    /// [`Ledger::claim_outbox_capped`] inside the caller's transaction.
    async fn claim_in(
        &self,
        tx: &mut AnyConnection,
        limit: u32,
        lock: Duration,
        lane: &str,
        caps: &HashMap<String, i64>,
    ) -> Result<Vec<OutboxItem>, LedgerError> {
        let due: Vec<(i64, Option<String>)> = sqlx::query_as(&self.sql.outbox_due)
            .bind(i64::from(candidates(limit, caps)))
            .bind(lane)
            .fetch_all(&mut *tx)
            .await?;
        let ids: Vec<i64> = within_caps(due, caps, limit, |(_, tenant)| tenant.as_deref())
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let sql = self.sql.outbox_lock.sql();
        let query = sqlx::query_as::<_, Locked>(sql).bind(micros(lock));
        let query = bind_keys!(query, self.sql.outbox_lock, ids.iter().copied());
        let locked = query.fetch_all(&mut *tx).await?;
        let tenants_sql = self.sql.tenants_of.sql();
        let query = sqlx::query(tenants_sql);
        let query = bind_keys!(
            query,
            self.sql.tenants_of,
            locked.iter().map(|row| row.job_id.as_str())
        );
        let tenants: HashMap<String, String> = query
            .fetch_all(&mut *tx)
            .await?
            .iter()
            .map(|r| Ok((r.try_get("job_id")?, r.try_get("tenant")?)))
            .collect::<Result<_, sqlx::Error>>()?;
        let mut items: Vec<OutboxItem> = locked
            .into_iter()
            .map(|row| OutboxItem {
                id: row.id,
                tenant: tenants.get(&row.job_id).cloned().unwrap_or_default(),
                job_id: row.job_id,
                reason: row.reason,
                send_attempts: row.send_attempts,
                fair_tag: row.fair_tag,
            })
            .collect();
        // Sent in their turns: the queue hands messages out in the order they were sent.
        // A row from before the fair queue goes last, as `ORDER BY fair_tag` puts it.
        items.sort_by_key(|item| (item.fair_tag.is_none(), item.fair_tag, item.id));
        Ok(items)
    }

    /// Marks outbox rows of `lane` (see [`Ledger::claim_outbox`]) sent, with `dispatched`
    /// events on their jobs.
    pub async fn mark_dispatched(
        &self,
        sent: &[(OutboxItem, String)],
        queue: &str,
        lane: &str,
    ) -> Result<(), LedgerError> {
        if sent.is_empty() {
            return Ok(());
        }
        let mut tx = self.begin_write().await?;
        let marked = &self.sql.outbox_dispatched;
        self.mark_in(&mut tx, sent, marked, queue, lane).await?;
        tx.commit().await?;
        Ok(())
    }

    /// [`Ledger::mark_dispatched`] inside the caller's transaction, the rows marked with
    /// `statement_marking_the_rows`: `outbox_dispatched`, or `outbox_sent_now` for rows read
    /// whole in this same transaction.
    async fn mark_in(
        &self,
        tx: &mut AnyConnection,
        sent: &[(OutboxItem, String)],
        statement_marking_the_rows: &Batched,
        queue: &str,
        lane: &str,
    ) -> Result<(), LedgerError> {
        for chunk in sent.chunks(DISPATCHED_CHUNK) {
            let query = bind_rows!(
                |sql| sqlx::query(sql),
                statement_marking_the_rows,
                chunk,
                |(item, message_id)| [item.id, message_id.as_str()]
            );
            query.execute(&mut *tx).await?;
        }
        let events: Vec<_> = sent
            .iter()
            .map(|(item, message_id)| {
                (
                    item.job_id.clone(),
                    dispatched_event(message_id, queue, &item.reason),
                )
            })
            .collect();
        self.record_events_in(&mut *tx, &events).await?;
        // Sending has got this far in the fair queue: a tenant with nothing waiting starts
        // here. A drill's rows are sent apart and move nothing.
        let reached = sent.iter().filter_map(|(item, _)| item.fair_tag).max();
        if let (Some(tag), "") = (reached, lane) {
            sqlx::query(&self.sql.advance_dispatch_clock)
                .bind(tag)
                .execute(&mut *tx)
                .await?;
        }
        Ok(())
    }

    /// An outbox row could not be sent: try again after `retry_in`, with `dispatch_failed`.
    pub async fn dispatch_failed(
        &self,
        item: &OutboxItem,
        error_code: &str,
        retry_in: Duration,
    ) -> Result<(), LedgerError> {
        sqlx::query(&self.sql.outbox_failed)
            .bind(item.id)
            .bind(micros(retry_in))
            .bind(error_code)
            .execute(&self.writer)
            .await?;
        let event = NewEvent::new(EventKind::DispatchFailed, &Actor::System).detail(
            detail::DispatchFailed {
                error: error_code.to_owned(),
                retry_in_ms: micros(retry_in) / 1000,
            },
        );
        self.record_event(&item.job_id, &event).await.map(|_| ())
    }

    /// Re-dispatches a job through the outbox (reason recorded on the row).
    pub async fn redispatch(&self, job_id: &str, reason: &str) -> Result<(), LedgerError> {
        sqlx::query(&self.sql.redispatch)
            .bind(job_id)
            .bind(reason)
            .execute(&self.writer)
            .await?;
        Ok(())
    }
}

/// How many due rows a round reads for `limit`: with caps, a few more than wanted, so that a
/// capped tenant's rows at the head of the line do not leave the round short.
fn candidates(limit: u32, caps: &HashMap<String, i64>) -> u32 {
    if caps.is_empty() {
        limit
    } else {
        limit.saturating_mul(4)
    }
}

/// The first `limit` of `due` (in fair-queue order) that fit their tenants' `caps`.
fn within_caps<T>(
    due: Vec<T>,
    caps: &HashMap<String, i64>,
    limit: u32,
    tenant: impl Fn(&T) -> Option<&str>,
) -> Vec<T> {
    let mut left = caps.clone();
    due.into_iter()
        .filter(|row| match tenant(row).and_then(|t| left.get_mut(t)) {
            Some(room) if *room > 0 => {
                *room -= 1;
                true
            }
            Some(_) => false,
            None => true,
        })
        .take(limit as usize)
        .collect()
}
