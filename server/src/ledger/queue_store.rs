//! The embedded queue's table, `queue_messages`: the statements behind its SQS semantics. The
//! semantics themselves (receipt handles, limits, errors) live in `crate::queue::embedded`;
//! here a receipt handle is only the hash of its secret.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use sqlx::AnyConnection;

use super::statements::Statements;
use super::write::micros;
use super::{Ledger, LedgerError};

/// A delete of an embedded queue's message: `(queue, id, hash of the handle)`.
pub(crate) type DeleteOp = (String, i64, String);

/// A message of one of the ledger's own queues (the embedded queue), as a delivery's handle
/// names it: what a transaction of that ledger can delete, or renew the visibility of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerMessage(pub(crate) DeleteOp);

impl LedgerMessage {
    pub(crate) fn new(queue: &str, id: i64, handle_hash: &str) -> LedgerMessage {
        LedgerMessage((queue.to_owned(), id, handle_hash.to_owned()))
    }

    pub(crate) fn queue(&self) -> &str {
        &self.0 .0
    }
}

/// A receive from an embedded queue: takes visible messages under the offered handles.
pub(crate) struct ReceiveOp {
    pub(crate) queue: String,
    pub(crate) handles: Vec<String>,
    pub(crate) visibility: Duration,
    pub(crate) dead_letter: Option<(String, i64)>,
}

/// How [`crate::queue::Queue::describe`] names the embedded queue `name` (the outbox records it
/// on the events of a send it makes into this ledger).
pub fn describe_embedded(name: &str) -> String {
    format!("embedded:{name}")
}

/// A message taken by a receive.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct TakenMessage {
    pub id: i64,
    pub message_id: String,
    pub body: String,
    pub receive_count: i64,
    /// Microseconds, database clock.
    pub first_receive_at: i64,
    pub sent_at: i64,
    /// Which of the offered handle hashes this receive gave it.
    #[sqlx(skip)]
    pub handle: usize,
}

/// How a visibility change went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VisibilityChange {
    Changed,
    /// No message has this id and handle (outdated, or deleted).
    UnknownHandle,
    /// The message is visible again: the handle's receive is over.
    NotInFlight,
    /// The change would reach past 12 hours from the first receive.
    CapExceeded,
}

/// A queue's message counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::FromRow)]
pub struct QueueDepth {
    pub visible: i64,
    pub in_flight: i64,
    pub delayed: i64,
}

#[derive(sqlx::FromRow)]
struct Visible {
    id: i64,
    receive_count: i64,
}

#[derive(sqlx::FromRow)]
struct HandleState {
    handle_hash: Option<String>,
    in_flight: i64,
}

/// New messages `(message_id, body)` on `queue`, visible after `delay`, on `conn` (inside
/// whatever transaction it is in).
pub(crate) async fn queue_insert_in(
    sql: &Statements,
    conn: &mut AnyConnection,
    queue: &str,
    messages: &[(String, String)],
    delay: Duration,
) -> Result<(), LedgerError> {
    let query = bind_rows!(
        |text| sqlx::query(text).bind(queue).bind(micros(delay)),
        sql.queue_insert,
        messages,
        |(id, body)| [id.as_str(), body.as_str()]
    );
    query.execute(&mut *conn).await?;
    Ok(())
}

impl Ledger {
    /// New messages `(message_id, body)` on `queue`, visible after `delay`.
    pub async fn queue_send(
        &self,
        queue: &str,
        messages: &[(String, String)],
        delay: Duration,
    ) -> Result<(), LedgerError> {
        if messages.is_empty() {
            return Ok(());
        }
        let mut conn = self.writer.acquire().await?;
        queue_insert_in(&self.sql, &mut conn, queue, messages, delay).await
    }

    /// A copy of a message (same id), visible after `delay`.
    pub async fn queue_copy(
        &self,
        queue: &str,
        message_id: &str,
        body: &str,
        delay: Duration,
    ) -> Result<(), LedgerError> {
        sqlx::query(&self.sql.queue_copy)
            .bind(queue)
            .bind(message_id)
            .bind(body)
            .bind(micros(delay))
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    /// Whether `queue` has a visible message (a read: an idle poll takes no write lock).
    pub async fn queue_any_visible(&self, queue: &str) -> Result<bool, LedgerError> {
        Ok(sqlx::query(&self.sql.queue_any_visible)
            .bind(queue)
            .fetch_optional(&self.reader)
            .await?
            .is_some())
    }

    /// Takes up to `handles.len()` visible messages of `queue`, oldest first, for
    /// `visibility`, each under the next offered handle hash. Messages received `max_receives`
    /// times already move to `dead_letter` instead (SQS's redrive).
    pub async fn queue_receive(
        &self,
        queue: &str,
        handles: &[String],
        visibility: Duration,
        dead_letter: Option<(&str, i64)>,
    ) -> Result<Vec<TakenMessage>, LedgerError> {
        let op = ReceiveOp {
            queue: queue.to_owned(),
            handles: handles.to_vec(),
            visibility,
            dead_letter: dead_letter.map(|(dlq, n)| (dlq.to_owned(), n)),
        };
        if let Some(taken) = self.grouped_receive(op).await? {
            return Ok(taken);
        }
        let mut tx = self.begin_write().await?;
        let taken = self
            .queue_receive_in(&mut tx, queue, handles, visibility, dead_letter)
            .await?;
        tx.commit().await?;
        Ok(taken)
    }

    /// [`Ledger::queue_receive`] inside the caller's transaction.
    pub(crate) async fn queue_receive_in(
        &self,
        tx: &mut AnyConnection,
        queue: &str,
        handles: &[String],
        visibility: Duration,
        dead_letter: Option<(&str, i64)>,
    ) -> Result<Vec<TakenMessage>, LedgerError> {
        let visible: Vec<Visible> = sqlx::query_as(&self.sql.queue_visible)
            .bind(queue)
            .bind(handles.len() as i64)
            .fetch_all(&mut *tx)
            .await?;
        let mut taking = Vec::with_capacity(visible.len());
        for message in visible {
            if let Some((dlq, max_receives)) = dead_letter {
                if message.receive_count >= max_receives {
                    sqlx::query(&self.sql.queue_redrive)
                        .bind(message.id)
                        .bind(dlq)
                        .execute(&mut *tx)
                        .await?;
                    continue;
                }
            }
            taking.push(message.id);
        }
        let mut taken = Vec::with_capacity(taking.len());
        if !taking.is_empty() {
            // One statement takes them all, each with its own new handle.
            let query = bind_rows!(
                |sql| sqlx::query_as::<_, TakenMessage>(sql).bind(micros(visibility)),
                self.sql.queue_take,
                taking.iter().zip(handles),
                |(id, hash)| [*id, hash.as_str()]
            );
            taken = query.fetch_all(&mut *tx).await?;
            for message in &mut taken {
                message.handle = taking
                    .iter()
                    .position(|id| *id == message.id)
                    .unwrap_or(usize::MAX);
            }
            // Oldest first, as they were selected.
            taken.sort_by_key(|m| m.handle);
        }
        Ok(taken)
    }

    /// Visibility changes `(id, handle hash, timeout)` on `queue`, several in one
    /// transaction; each allowed only to the latest receiver of an in-flight message, within
    /// `cap` of its first receive.
    pub async fn queue_change_visibility(
        &self,
        queue: &str,
        changes: &[(i64, String, Duration)],
        cap: Duration,
    ) -> Result<Vec<VisibilityChange>, LedgerError> {
        let mut out = Vec::with_capacity(changes.len());
        if changes.is_empty() {
            return Ok(out);
        }
        if let [(id, hash, timeout)] = changes {
            let mut conn = self.writer.acquire().await?;
            out.push(
                self.change_one(&mut conn, queue, *id, hash, *timeout, cap)
                    .await?,
            );
            return Ok(out);
        }
        let mut tx = self.begin_write().await?;
        let out = self
            .queue_change_visibility_in(&mut tx, queue, changes, cap)
            .await?;
        tx.commit().await?;
        Ok(out)
    }

    /// [`Ledger::queue_change_visibility`] inside a transaction of the caller's (a lease
    /// renewal's, when the queue is this ledger's own).
    pub(crate) async fn queue_change_visibility_in(
        &self,
        conn: &mut AnyConnection,
        queue: &str,
        changes: &[(i64, String, Duration)],
        cap: Duration,
    ) -> Result<Vec<VisibilityChange>, LedgerError> {
        let mut out = Vec::with_capacity(changes.len());
        if changes.is_empty() {
            return Ok(out);
        }
        let query = bind_rows!(
            |sql| sqlx::query_as::<_, (i64, String)>(sql)
                .bind(queue)
                .bind(micros(cap)),
            self.sql.queue_change_each,
            changes,
            |(id, hash, timeout)| [*id, hash.as_str(), micros(*timeout)]
        );
        // A message's row holds one handle: at most one entry per id can have changed it.
        let changed: std::collections::HashMap<i64, String> =
            query.fetch_all(&mut *conn).await?.into_iter().collect();
        for (id, hash, timeout) in changes {
            out.push(if changed.get(id) == Some(hash) {
                VisibilityChange::Changed
            } else {
                // Refused (or not found): the one-message path says why.
                self.change_one(&mut *conn, queue, *id, hash, *timeout, cap)
                    .await?
            });
        }
        Ok(out)
    }

    async fn change_one(
        &self,
        conn: &mut AnyConnection,
        queue: &str,
        id: i64,
        hash: &str,
        timeout: Duration,
        cap: Duration,
    ) -> Result<VisibilityChange, LedgerError> {
        let changed = sqlx::query(&self.sql.queue_change_visibility)
            .bind(id)
            .bind(queue)
            .bind(micros(timeout))
            .bind(hash)
            .bind(micros(cap))
            .fetch_optional(&mut *conn)
            .await?;
        if changed.is_some() {
            return Ok(VisibilityChange::Changed);
        }
        // Refused: say why, as SQS would.
        let state: Option<HandleState> = sqlx::query_as(&self.sql.queue_handle_state)
            .bind(id)
            .bind(queue)
            .fetch_optional(&mut *conn)
            .await?;
        Ok(match state {
            Some(s) if s.handle_hash.as_deref() == Some(hash) => {
                if s.in_flight == 0 {
                    VisibilityChange::NotInFlight
                } else {
                    VisibilityChange::CapExceeded
                }
            }
            _ => VisibilityChange::UnknownHandle,
        })
    }

    /// Deletes `(id, handle hash)` messages of `queue`, several in one transaction. Each
    /// answer is whether a message was deleted: an outdated handle matches nothing.
    pub async fn queue_delete(
        &self,
        queue: &str,
        deletes: &[(i64, String)],
    ) -> Result<Vec<bool>, LedgerError> {
        let mut out = Vec::with_capacity(deletes.len());
        if let [(id, hash)] = deletes {
            let op = (queue.to_owned(), *id, hash.clone());
            if let Some(deleted) = self.grouped_delete(op).await? {
                out.push(deleted);
                return Ok(out);
            }
            let mut conn = self.writer.acquire().await?;
            out.push(delete_one(&mut conn, queue, *id, hash).await?);
            return Ok(out);
        }
        let mut tx = self.begin_write().await?;
        for (id, hash) in deletes {
            out.push(delete_one(&mut tx, queue, *id, hash).await?);
        }
        tx.commit().await?;
        Ok(out)
    }

    /// Visible, in-flight and delayed messages of `queue`.
    pub async fn queue_depth(&self, queue: &str) -> Result<QueueDepth, LedgerError> {
        Ok(sqlx::query_as(&self.sql.queue_depth)
            .bind(queue)
            .fetch_one(&self.reader)
            .await?)
    }
}

async fn delete_one(
    conn: &mut AnyConnection,
    queue: &str,
    id: i64,
    hash: &str,
) -> Result<bool, LedgerError> {
    let deleted =
        sqlx::query("DELETE FROM queue_messages WHERE id = $1 AND queue = $2 AND handle_hash = $3")
            .bind(id)
            .bind(queue)
            .bind(hash)
            .execute(&mut *conn)
            .await?
            .rows_affected();
    Ok(deleted > 0)
}

/// The batched forms, for group commit ([`super::write`]).
impl Ledger {
    /// Receives of several callers: one take per queue, visibility and dead-letter queue for
    /// all of them, the messages handed out oldest first, each caller getting at most as many
    /// as it asked for, under its own handles.
    pub(crate) async fn receive_many(
        &self,
        tx: &mut AnyConnection,
        ops: &[ReceiveOp],
    ) -> Result<Vec<Vec<TakenMessage>>, LedgerError> {
        let mut out: Vec<Vec<TakenMessage>> = ops.iter().map(|_| Vec::new()).collect();
        // Receives of one queue, visibility and dead-letter queue take together.
        type Same<'a> = (&'a str, Duration, Option<(&'a str, i64)>);
        let mut groups: HashMap<Same<'_>, Vec<usize>> = HashMap::new();
        for (i, op) in ops.iter().enumerate() {
            let dlq = op.dead_letter.as_ref().map(|(q, n)| (q.as_str(), *n));
            groups
                .entry((op.queue.as_str(), op.visibility, dlq))
                .or_default()
                .push(i);
        }
        for ((queue, visibility, dead_letter), members) in groups {
            // Every member's handles in one list; `owner[k]` says whose the k-th is.
            let mut handles = Vec::new();
            let mut owner = Vec::new();
            for &i in &members {
                for (k, handle) in ops[i].handles.iter().enumerate() {
                    handles.push(handle.clone());
                    owner.push((i, k));
                }
            }
            let taken = self
                .queue_receive_in(tx, queue, &handles, visibility, dead_letter)
                .await?;
            for mut message in taken {
                let Some(&(i, k)) = owner.get(message.handle) else {
                    continue;
                };
                message.handle = k;
                out[i].push(message);
            }
        }
        Ok(out)
    }

    pub(crate) async fn delete_many(
        &self,
        tx: &mut AnyConnection,
        ops: &[DeleteOp],
    ) -> Result<Vec<Option<bool>>, LedgerError> {
        let query = bind_rows!(
            |sql| sqlx::query_as::<_, (i64, String, String)>(sql),
            self.sql.queue_delete_each,
            ops,
            |(queue, id, hash)| [*id, hash.as_str(), queue.as_str()]
        );
        let gone: HashSet<(i64, String, String)> =
            query.fetch_all(&mut *tx).await?.into_iter().collect();
        Ok(ops
            .iter()
            .map(|(queue, id, hash)| Some(gone.contains(&(*id, hash.clone(), queue.clone()))))
            .collect())
    }
}
