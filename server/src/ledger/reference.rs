//! The benchmarks' reference tables, beside the ledger in the same database: what the same
//! work costs with no fencing, no events and no queue.

use super::{Ledger, LedgerError};

impl Ledger {
    /// A fresh naive job table, `bench_naive`.
    pub async fn naive_reset(&self) -> Result<(), LedgerError> {
        for sql in [
            "DROP TABLE IF EXISTS bench_naive",
            "CREATE TABLE bench_naive (id BIGINT PRIMARY KEY, state TEXT NOT NULL, \
             payload TEXT NOT NULL)",
            "CREATE INDEX bench_naive_state ON bench_naive (state, id)",
        ] {
            sqlx::query(sql).execute(&self.writer).await?;
        }
        Ok(())
    }

    /// Brings the planner's statistics up to what a pass left in the ledger (and reclaims what
    /// it deleted) and flushes its WAL, so the next pass runs against a ledger in use — one
    /// holding finished jobs and a drained queue, as autovacuum leaves a deployment between
    /// bursts — rather than one the statistics still call empty, and no checkpoint of this
    /// pass's writes lands in the next. PostgreSQL only: SQLite keeps no such state.
    pub async fn bench_settle(&self) -> Result<(), LedgerError> {
        if self.backend == super::Backend::Postgres {
            sqlx::query("VACUUM ANALYZE").execute(&self.writer).await?;
            // Allowed to superusers and `pg_checkpoint` members; else skipped.
            let _ = sqlx::query("CHECKPOINT").execute(&self.writer).await;
        }
        Ok(())
    }

    /// Removes one benchmark run's tenant and queue (its jobs take their events, attempts,
    /// results, inputs and outbox rows with them), then lets PostgreSQL reclaim the space, so
    /// that the next run on the same database starts where this one did.
    pub async fn bench_forget(&self, tenant: &str, queue: &str) -> Result<(), LedgerError> {
        sqlx::query("DELETE FROM jobs WHERE tenant = $1")
            .bind(tenant)
            .execute(&self.writer)
            .await?;
        sqlx::query("DELETE FROM queue_messages WHERE queue = $1")
            .bind(queue)
            .execute(&self.writer)
            .await?;
        if self.backend == super::Backend::Postgres {
            sqlx::query("VACUUM ANALYZE").execute(&self.writer).await?;
            // The deletes' WAL is flushed now rather than by a checkpoint during the next
            // run (allowed to superusers and `pg_checkpoint` members; else skipped).
            let _ = sqlx::query("CHECKPOINT").execute(&self.writer).await;
        }
        Ok(())
    }

    /// One job into the naive table.
    pub async fn naive_insert(&self, id: i64, payload: &str) -> Result<(), LedgerError> {
        sqlx::query("INSERT INTO bench_naive (id, state, payload) VALUES ($1, 'ready', $2)")
            .bind(id)
            .bind(payload)
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    /// Takes and finishes the oldest ready job of the naive table, if any.
    pub async fn naive_take(&self) -> Result<Option<i64>, LedgerError> {
        Ok(sqlx::query_scalar(&self.sql.naive_take)
            .fetch_optional(&self.writer)
            .await?)
    }

    /// `bench_baseline` with one row at 0 for each of `owners`.
    pub async fn baseline_reset(&self, owners: usize) -> Result<(), LedgerError> {
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS bench_baseline (id BIGINT PRIMARY KEY, v BIGINT NOT NULL)",
        )
        .execute(&self.writer)
        .await?;
        for owner in 0..owners as i64 {
            sqlx::query("DELETE FROM bench_baseline WHERE id = $1")
                .bind(owner)
                .execute(&self.writer)
                .await?;
            sqlx::query("INSERT INTO bench_baseline (id, v) VALUES ($1, 0)")
                .bind(owner)
                .execute(&self.writer)
                .await?;
        }
        Ok(())
    }

    /// One conditional `UPDATE … RETURNING` in its own transaction: `owner`'s row from `seen`
    /// to `seen + 1`.
    pub async fn baseline_bump(&self, owner: i64, seen: i64) -> Result<i64, LedgerError> {
        Ok(sqlx::query_scalar(
            "UPDATE bench_baseline SET v = v + 1 WHERE id = $1 AND v = $2 RETURNING v",
        )
        .bind(owner)
        .bind(seen)
        .fetch_one(&self.writer)
        .await?)
    }
}
