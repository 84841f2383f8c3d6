//! The embedded queue: SQS semantics, stored in the ledger database so a restart loses
//! nothing (and, on SQLite, a lost tail of transactions rolls back queue and ledger together).
//!
//! What it keeps of SQS: a new receipt handle on every receive (only its hash is stored);
//! visibility that starts when changed; the 12-hour cap from the first receive, refused rather
//! than clamped; receive counts; redrive to the dead-letter queue once `max_receive_count` is
//! exceeded; a delete with an outdated handle that reports success without deleting. For
//! drills it can also deliver a copy of a message, during visibility or after deletion, as a
//! standard queue sometimes does.

use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};
use sqlx::Row;
use tokio::sync::Notify;

use super::{
    check_batch, BatchResult, Deleted, Delivery, Depth, Queue, QueueError, ReceiptHandle,
    MAX_BATCH, MAX_VISIBILITY, MAX_WAIT, VISIBILITY_CAP,
};
use crate::ledger::Ledger;

/// How often a long poll looks again when no send in this process woke it.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// One queue (and its dead-letter queue) in the ledger database. Cheap to clone.
#[derive(Clone)]
pub struct EmbeddedQueue {
    ledger: Ledger,
    name: Arc<str>,
    dead_letter: Option<(Arc<str>, i64)>,
    sent: Arc<Notify>,
}

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

fn secret_hash(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

fn unavailable(error: sqlx::Error) -> QueueError {
    QueueError::Unavailable(format!("ledger database: {error}"))
}

/// `<row id>.<secret>`: the id finds the message, the secret proves this is the latest receive.
fn parse_handle(receipt: &ReceiptHandle) -> Result<(i64, &str), QueueError> {
    let (id, secret) = receipt
        .expose()
        .split_once('.')
        .ok_or(QueueError::InvalidReceiptHandle)?;
    let id = id.parse().map_err(|_| QueueError::InvalidReceiptHandle)?;
    if secret.len() != 32 || !secret.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(QueueError::InvalidReceiptHandle);
    }
    Ok((id, secret))
}

fn new_secret() -> Result<String, QueueError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| QueueError::Unavailable(e.to_string()))?;
    Ok(hex::encode(bytes))
}

impl EmbeddedQueue {
    /// The queue `name`; messages received more than `max_receive_count` times move to
    /// `name-dlq` on their next receive.
    pub fn new(ledger: Ledger, name: &str, max_receive_count: u32) -> Self {
        EmbeddedQueue {
            ledger,
            name: name.into(),
            dead_letter: Some((
                format!("{name}-dlq").into(),
                i64::from(max_receive_count.max(1)),
            )),
            sent: Arc::new(Notify::new()),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// For drills: a copy of a message, as a standard queue may deliver — visible after
    /// `delay`, with the same message id, whether or not the original is still there.
    pub async fn deliver_copy(
        &self,
        message_id: &str,
        body: &str,
        delay: Duration,
    ) -> Result<(), QueueError> {
        let sql = self.ledger.sql(
            "INSERT INTO queue_messages (queue, message_id, body, sent_at, visible_at) \
             VALUES ($1, $2, $3, {now}, {now} + $4)",
        );
        sqlx::query(&sql)
            .bind(&*self.name)
            .bind(message_id)
            .bind(body)
            .bind(micros(delay))
            .execute(self.ledger.write_pool())
            .await
            .map_err(unavailable)?;
        self.sent.notify_waiters();
        Ok(())
    }

    /// Inserts up to ten messages in one statement.
    async fn insert(&self, bodies: &[String], delay: Duration) -> Result<Vec<String>, QueueError> {
        if bodies.is_empty() {
            return Ok(Vec::new());
        }
        let mut values = Vec::with_capacity(bodies.len());
        for i in 0..bodies.len() {
            values.push(format!(
                "($1, ${}, ${}, {{now}}, {{now}} + $2)",
                3 + 2 * i,
                4 + 2 * i
            ));
        }
        let sql = self.ledger.sql(&format!(
            "INSERT INTO queue_messages (queue, message_id, body, sent_at, visible_at) VALUES {}",
            values.join(", ")
        ));
        let ids: Vec<String> = bodies
            .iter()
            .map(|_| uuid::Uuid::now_v7().to_string())
            .collect();
        let mut query = sqlx::query(&sql).bind(&*self.name).bind(micros(delay));
        for (id, body) in ids.iter().zip(bodies) {
            query = query.bind(id.as_str()).bind(body.as_str());
        }
        query
            .execute(self.ledger.write_pool())
            .await
            .map_err(unavailable)?;
        self.sent.notify_waiters();
        Ok(ids)
    }

    async fn any_visible(&self) -> Result<bool, QueueError> {
        let sql = self
            .ledger
            .sql("SELECT id FROM queue_messages WHERE queue = $1 AND visible_at <= {now} LIMIT 1");
        Ok(sqlx::query(&sql)
            .bind(&*self.name)
            .fetch_optional(self.ledger.read_pool())
            .await
            .map_err(unavailable)?
            .is_some())
    }

    async fn receive_now(
        &self,
        max: usize,
        visibility: Duration,
    ) -> Result<Vec<Delivery>, QueueError> {
        let mut tx = self.ledger.begin_write().await.map_err(unavailable)?;
        let select = self.ledger.sql(
            "SELECT id, receive_count FROM queue_messages \
             WHERE queue = $1 AND visible_at <= {now} ORDER BY visible_at, id LIMIT $2{skip_locked}",
        );
        let rows = sqlx::query(&select)
            .bind(&*self.name)
            .bind(max as i64)
            .fetch_all(&mut *tx)
            .await
            .map_err(unavailable)?;
        let redrive = self.ledger.sql(
            "UPDATE queue_messages SET queue = $2, dead_from = queue, dead_at = {now}, \
             dead_receive_count = receive_count, receive_count = 0, first_receive_at = NULL, \
             handle_hash = NULL, visible_at = {now} \
             WHERE id = $1",
        );
        let mut taken_ids = Vec::with_capacity(rows.len());
        for row in rows {
            let id: i64 = row.try_get("id").map_err(unavailable)?;
            let count: i64 = row.try_get("receive_count").map_err(unavailable)?;
            if let Some((dlq, max_receives)) = &self.dead_letter {
                if count >= *max_receives {
                    sqlx::query(&redrive)
                        .bind(id)
                        .bind(&**dlq)
                        .execute(&mut *tx)
                        .await
                        .map_err(unavailable)?;
                    continue;
                }
            }
            taken_ids.push((id, new_secret()?));
        }
        let mut deliveries = Vec::with_capacity(taken_ids.len());
        if !taken_ids.is_empty() {
            // One statement takes them all, each with its own new handle.
            let values: Vec<String> = (0..taken_ids.len())
                .map(|i| format!("(${}, ${})", 2 + 2 * i, 3 + 2 * i))
                .collect();
            let take = self.ledger.sql(&format!(
                "UPDATE queue_messages SET visible_at = {{now}} + $1, \
                 receive_count = receive_count + 1, \
                 first_receive_at = COALESCE(first_receive_at, {{now}}), handle_hash = v.column2 \
                 FROM (VALUES {}) AS v WHERE queue_messages.id = v.column1 \
                 RETURNING queue_messages.id AS id, message_id, body, receive_count, \
                 first_receive_at, sent_at",
                values.join(", ")
            ));
            let mut query = sqlx::query(&take).bind(micros(visibility));
            for (id, secret) in &taken_ids {
                query = query.bind(*id).bind(secret_hash(secret));
            }
            let taken = query.fetch_all(&mut *tx).await.map_err(unavailable)?;
            let secrets: std::collections::HashMap<i64, &String> =
                taken_ids.iter().map(|(id, s)| (*id, s)).collect();
            for row in &taken {
                let get = |col: &str| row.try_get::<i64, _>(col).map_err(unavailable);
                let id = get("id")?;
                let Some(secret) = secrets.get(&id) else {
                    continue;
                };
                deliveries.push(Delivery {
                    message_id: row.try_get("message_id").map_err(unavailable)?,
                    receipt: ReceiptHandle::new(format!("{id}.{secret}")),
                    body: row.try_get("body").map_err(unavailable)?,
                    receive_count: u32::try_from(get("receive_count")?).unwrap_or(u32::MAX),
                    first_receive_at_ms: Some(get("first_receive_at")? / 1000),
                    sent_at_ms: Some(get("sent_at")? / 1000),
                });
            }
            // Oldest first, as they were selected.
            let order: std::collections::HashMap<i64, usize> = taken_ids
                .iter()
                .enumerate()
                .map(|(i, (id, _))| (*id, i))
                .collect();
            deliveries.sort_by_key(|d| {
                d.receipt
                    .expose()
                    .split_once('.')
                    .and_then(|(id, _)| id.parse::<i64>().ok())
                    .and_then(|id| order.get(&id).copied())
                    .unwrap_or(usize::MAX)
            });
        }
        tx.commit().await.map_err(unavailable)?;
        Ok(deliveries)
    }

    async fn change_one(
        &self,
        conn: &mut sqlx::AnyConnection,
        receipt: &ReceiptHandle,
        timeout: Duration,
    ) -> Result<(), QueueError> {
        if timeout > MAX_VISIBILITY {
            return Err(QueueError::Invalid(
                "a visibility timeout is at most 12 hours".into(),
            ));
        }
        let (id, secret) = parse_handle(receipt)?;
        let hash = secret_hash(secret);
        let sql = self.ledger.sql(
            "UPDATE queue_messages SET visible_at = {now} + $3 \
             WHERE id = $1 AND queue = $2 AND handle_hash = $4 AND visible_at > {now} \
             AND {now} + $3 <= first_receive_at + $5 RETURNING id",
        );
        let changed = sqlx::query(&sql)
            .bind(id)
            .bind(&*self.name)
            .bind(micros(timeout))
            .bind(&hash)
            .bind(micros(VISIBILITY_CAP))
            .fetch_optional(&mut *conn)
            .await
            .map_err(unavailable)?;
        if changed.is_some() {
            return Ok(());
        }
        // Refused: say why, as SQS would.
        let sql = self.ledger.sql(
            "SELECT handle_hash, visible_at > {now} AS in_flight FROM queue_messages \
             WHERE id = $1 AND queue = $2",
        );
        let row = sqlx::query(&sql)
            .bind(id)
            .bind(&*self.name)
            .fetch_optional(&mut *conn)
            .await
            .map_err(unavailable)?;
        let Some(row) = row else {
            return Err(QueueError::InvalidReceiptHandle);
        };
        let current: Option<String> = row.try_get("handle_hash").map_err(unavailable)?;
        let in_flight: bool = row
            .try_get::<i64, _>("in_flight")
            .map(|v| v != 0)
            .or_else(|_| row.try_get::<bool, _>("in_flight"))
            .map_err(unavailable)?;
        if current.as_deref() != Some(hash.as_str()) {
            Err(QueueError::InvalidReceiptHandle)
        } else if !in_flight {
            Err(QueueError::MessageNotInflight)
        } else {
            Err(QueueError::VisibilityCapExceeded)
        }
    }

    async fn delete_one(
        &self,
        conn: &mut sqlx::AnyConnection,
        receipt: &ReceiptHandle,
    ) -> Result<Deleted, QueueError> {
        let (id, secret) = parse_handle(receipt)?;
        // An outdated handle matches nothing and still succeeds: SQS's documented ambiguity.
        // Unlike SQS, this queue can say so to whoever asks (`delete_known`).
        let deleted = sqlx::query(
            "DELETE FROM queue_messages WHERE id = $1 AND queue = $2 AND handle_hash = $3",
        )
        .bind(id)
        .bind(&*self.name)
        .bind(secret_hash(secret))
        .execute(&mut *conn)
        .await
        .map_err(unavailable)?
        .rows_affected();
        Ok(if deleted == 0 {
            Deleted::NothingDeleted
        } else {
            Deleted::Reported
        })
    }
}

impl Queue for EmbeddedQueue {
    fn describe(&self) -> String {
        format!("embedded:{}", self.name)
    }

    async fn send(&self, body: &str, delay: Duration) -> Result<String, QueueError> {
        let ids = self.insert(&[body.to_owned()], delay).await?;
        Ok(ids.into_iter().next().unwrap_or_default())
    }

    async fn send_batch(
        &self,
        bodies: &[String],
    ) -> Result<Vec<Result<String, QueueError>>, QueueError> {
        check_batch(bodies.len())?;
        Ok(self
            .insert(bodies, Duration::ZERO)
            .await?
            .into_iter()
            .map(Ok)
            .collect())
    }

    async fn receive(
        &self,
        max: usize,
        visibility: Duration,
        wait: Duration,
    ) -> Result<Vec<Delivery>, QueueError> {
        if !(1..=MAX_BATCH).contains(&max) {
            return Err(QueueError::Invalid("receive 1 to 10 messages".into()));
        }
        if visibility > MAX_VISIBILITY || wait > MAX_WAIT {
            return Err(QueueError::Invalid(
                "visibility is at most 12 hours and wait at most 20 seconds".into(),
            ));
        }
        let until = tokio::time::Instant::now() + wait;
        loop {
            let notified = self.sent.notified();
            // An idle poll only reads: the write transaction is taken when there is work.
            let deliveries = if self.any_visible().await? {
                self.receive_now(max, visibility).await?
            } else {
                Vec::new()
            };
            let now = tokio::time::Instant::now();
            if !deliveries.is_empty() || now >= until {
                return Ok(deliveries);
            }
            let _ = tokio::time::timeout((until - now).min(POLL_INTERVAL), notified).await;
        }
    }

    async fn change_visibility(
        &self,
        receipt: &ReceiptHandle,
        timeout: Duration,
    ) -> Result<(), QueueError> {
        let mut conn = self
            .ledger
            .write_pool()
            .acquire()
            .await
            .map_err(unavailable)?;
        self.change_one(&mut conn, receipt, timeout).await
    }

    async fn change_visibility_batch(
        &self,
        entries: &[(ReceiptHandle, Duration)],
    ) -> Result<BatchResult, QueueError> {
        check_batch(entries.len())?;
        let mut tx = self.ledger.begin_write().await.map_err(unavailable)?;
        let mut results = Vec::with_capacity(entries.len());
        for (receipt, timeout) in entries {
            results.push(self.change_one(&mut tx, receipt, *timeout).await);
        }
        tx.commit().await.map_err(unavailable)?;
        Ok(results)
    }

    async fn delete(&self, receipt: &ReceiptHandle) -> Result<(), QueueError> {
        self.delete_known(receipt).await.map(|_| ())
    }

    async fn delete_known(&self, receipt: &ReceiptHandle) -> Result<Deleted, QueueError> {
        let mut conn = self
            .ledger
            .write_pool()
            .acquire()
            .await
            .map_err(unavailable)?;
        self.delete_one(&mut conn, receipt).await
    }

    async fn delete_batch(&self, receipts: &[ReceiptHandle]) -> Result<BatchResult, QueueError> {
        check_batch(receipts.len())?;
        let mut tx = self.ledger.begin_write().await.map_err(unavailable)?;
        let mut results = Vec::with_capacity(receipts.len());
        for receipt in receipts {
            results.push(self.delete_one(&mut tx, receipt).await.map(|_| ()));
        }
        tx.commit().await.map_err(unavailable)?;
        Ok(results)
    }

    async fn depth(&self) -> Result<Depth, QueueError> {
        let sql = self.ledger.sql(
            "SELECT \
             COALESCE(SUM(CASE WHEN visible_at <= {now} THEN 1 ELSE 0 END), 0) AS visible, \
             COALESCE(SUM(CASE WHEN visible_at > {now} AND receive_count > 0 THEN 1 ELSE 0 END), 0) AS in_flight, \
             COALESCE(SUM(CASE WHEN visible_at > {now} AND receive_count = 0 THEN 1 ELSE 0 END), 0) AS delayed \
             FROM queue_messages WHERE queue = $1",
        );
        let row = sqlx::query(&sql)
            .bind(&*self.name)
            .fetch_one(self.ledger.read_pool())
            .await
            .map_err(unavailable)?;
        let get = |col: &str| row.try_get::<i64, _>(col).map_err(unavailable);
        Ok(Depth {
            visible: get("visible")?,
            in_flight: get("in_flight")?,
            delayed: get("delayed")?,
        })
    }

    fn dead_letters(&self) -> Option<Self> {
        self.dead_letter.as_ref().map(|(dlq, _)| EmbeddedQueue {
            ledger: self.ledger.clone(),
            name: dlq.clone(),
            dead_letter: None,
            sent: Arc::new(Notify::new()),
        })
    }
}
