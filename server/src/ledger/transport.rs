//! What the transport leaves for the record: queue messages the worker refused, and the
//! embedded queue's dead-letter moves waiting to be put on their jobs' timelines.

use sqlx::Row;

use super::{Ledger, LedgerError};

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
        let sql = self.sql.dead_letters_noted.sql();
        let query = sqlx::query(sql);
        let query = bind_keys!(query, self.sql.dead_letters_noted, ids.iter().copied());
        query.execute(&self.writer).await?;
        Ok(())
    }

    /// Keeps a record of a queue message the worker refused (never its body).
    pub async fn record_rejected_message(
        &self,
        m: &RejectedMessage<'_>,
    ) -> Result<(), LedgerError> {
        sqlx::query(&self.sql.insert_rejected_message)
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
