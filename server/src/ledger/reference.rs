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

/// The jobs of one batch, numbered 1 to `$3` (recursive, which both databases run). Every
/// statement of the record's reference binds the batch's instant in microseconds (`$1`), its
/// job id prefix (`$2`: a job's id is the prefix and its number) and its size (`$3`).
const BATCH: &str = "WITH RECURSIVE s(n) AS (SELECT CAST(1 AS BIGINT) UNION ALL \
                     SELECT n + 1 FROM s WHERE n < $3) ";

/// The record's statements, one transaction per step of a job's path (the new job with its
/// input, outbox row, message and two events; the receive; the claim with its first attempt
/// and three events; the accepted result with the attempt's outcome, the delete and three
/// events), each over a whole batch, every row as the ledger writes it. `{tenant}` and
/// `{queue}` are the run's own (hex digits only), `{digest}` a digest's length of text.
const RECORD_STEPS: [&[&str]; 4] = [
    &[
        "INSERT INTO jobs (job_id, tenant, idempotency_key, request_digest, input_ref, \
         contract_version, state, deadline_at, max_attempts, created_at, updated_at, \
         next_event_seq) \
         SELECT $2 || n, '{tenant}', 'key-' || $2 || n, '{digest}', \
         'ledger:job_inputs/' || $2 || n, 'v1', 'ready', $1 + 3600000000, 3, $1, $1, 3 FROM s",
        "INSERT INTO job_inputs (job_id, input, model) \
         SELECT $2 || n, '{\"text\":\"hello\"}', '{}' FROM s WHERE $1 > 0",
        "INSERT INTO outbox (job_id, epoch, reason, created_at, available_at, dispatched_at, \
         send_attempts, message_id) \
         SELECT $2 || n, 0, 'created', $1, $1, $1, 1, 'm-' || $2 || n FROM s",
        "INSERT INTO queue_messages (queue, message_id, body, sent_at, visible_at) \
         SELECT '{queue}', 'm-' || $2 || n, \
         '{\"job_id\":\"' || $2 || n || '\",\"tenant\":\"{tenant}\"}', $1, $1 FROM s",
        "INSERT INTO events (job_id, seq, at, kind, epoch, actor, detail) \
         SELECT $2 || n, k.seq, $1, k.kind, 0, 'api', \
         '{\"contract_version\":\"v1\",\"deadline_ms\":3600000,\"max_attempts\":3}' \
         FROM s, (SELECT 1 AS seq, 'job_created' AS kind UNION ALL SELECT 2, 'dispatched') k",
    ],
    &["UPDATE queue_messages SET visible_at = $1 + 90000000, \
       receive_count = receive_count + 1, first_receive_at = COALESCE(first_receive_at, $1), \
       handle_hash = 'abcdef12' WHERE message_id IN (SELECT 'm-' || $2 || n FROM s)"],
    &[
        "UPDATE jobs SET state = 'running', owner_epoch = owner_epoch + 1, \
         owner_id = 'reference', owner_until = $1 + 90000000, \
         attempt_count = attempt_count + 1, budget_used = budget_used + 1, \
         pending_attempt = attempt_count + 1, updated_at = $1, next_event_seq = next_event_seq + 3 \
         WHERE job_id IN (SELECT $2 || n FROM s) \
         AND state IN ('ready', 'retry_authorized') AND deadline_at > $1",
        "INSERT INTO attempts (job_id, attempt_no, epoch, worker_id, provider, \
         provider_request_id, started_at) \
         SELECT $2 || n, 1, 1, 'reference', 'stub', $2 || n || ':1', $1 FROM s",
        "INSERT INTO events (job_id, seq, at, kind, epoch, actor, message_id, receive_count, \
         handle_hash, attempt_no, deadline_left_ms, detail) \
         SELECT $2 || n, k.seq, $1, k.kind, 1, 'worker:reference', 'm-' || $2 || n, 1, \
         'abcdef12', 1, 3600000, '{\"state\":\"ready\"}' \
         FROM s, (SELECT 3 AS seq, 'delivery_received' AS kind \
         UNION ALL SELECT 4, 'claimed' UNION ALL SELECT 5, 'attempt_started') k",
    ],
    &[
        "UPDATE jobs SET state = 'succeeded', result_ref = 'r-' || job_id, terminal_at = $1, \
         updated_at = $1, pending_attempt = NULL, next_event_seq = next_event_seq + 3 \
         WHERE job_id IN (SELECT $2 || n FROM s) AND owner_epoch = 1 AND state = 'running' \
         AND owner_until > $1 AND deadline_at > $1",
        "INSERT INTO results (result_ref, job_id, attempt_no, epoch, status, body, digest, \
         created_at) \
         SELECT 'r-' || $2 || n, $2 || n, 1, 1, 'accepted', '{\"answer\":\"ok\"}', \
         '{digest}', $1 FROM s",
        "UPDATE attempts SET outcome = 'succeeded', finished_at = $1, \
         result_ref = 'r-' || job_id \
         WHERE job_id IN (SELECT $2 || n FROM s) AND attempt_no = 1 AND epoch = 1",
        "DELETE FROM queue_messages WHERE queue = '{queue}' \
         AND message_id IN (SELECT 'm-' || $2 || n FROM s) AND $1 > 0",
        "INSERT INTO events (job_id, seq, at, kind, epoch, actor, attempt_no, detail) \
         SELECT $2 || n, k.seq, $1, k.kind, 1, 'worker:reference', 1, '{}' \
         FROM s, (SELECT 6 AS seq, 'attempt_finished' AS kind \
         UNION ALL SELECT 7, 'result_accepted' UNION ALL SELECT 8, 'message_deleted') k",
    ],
];

/// [`RECORD_STEPS`] for one run, each statement over the batch.
fn record_steps(tenant: &str, queue: &str) -> Vec<Vec<String>> {
    let digest = "d".repeat(64);
    RECORD_STEPS
        .iter()
        .map(|step| {
            step.iter()
                .map(|sql| {
                    let sql = sql
                        .replace("{tenant}", tenant)
                        .replace("{queue}", queue)
                        .replace("{digest}", &digest);
                    format!("{BATCH}{sql}")
                })
                .collect()
        })
        .collect()
}

/// Most jobs one batch of the record's reference writes (the group commit's cap on PostgreSQL).
const RECORD_BATCH: usize = 128;

impl Ledger {
    /// The ledger's own rows for `jobs` jobs, written as a job's path writes them (new job
    /// with input, outbox row, message and two events; the receive; the claim with its
    /// attempt and three events; the accepted result with the attempt's outcome, the delete
    /// and three events), but by set-based statements over batches of up to 128 jobs from
    /// `writers` concurrent writers: no worker, no queue client, no round trip a job. What
    /// the present record costs the database alone. Returns how many jobs ended `succeeded`
    /// under `tenant`.
    pub async fn record_reference(
        &self,
        tenant: &str,
        queue: &str,
        run: &str,
        jobs: usize,
        writers: usize,
    ) -> Result<i64, LedgerError> {
        let steps = std::sync::Arc::new(record_steps(tenant, queue));
        let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let batches = jobs.div_ceil(RECORD_BATCH);
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..writers.max(1) {
            let (ledger, steps, next) = (self.clone(), steps.clone(), next.clone());
            let run = run.to_owned();
            tasks.spawn(async move {
                loop {
                    let b = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if b >= batches {
                        return Ok::<(), LedgerError>(());
                    }
                    let count = RECORD_BATCH.min(jobs - b * RECORD_BATCH) as i64;
                    let prefix = format!("job_{run}_{b}_");
                    for step in steps.iter() {
                        let now = chrono::Utc::now().timestamp_micros();
                        let mut tx = ledger.begin_write().await?;
                        for sql in step {
                            sqlx::query(sql)
                                .bind(now)
                                .bind(&prefix)
                                .bind(count)
                                .execute(&mut *tx)
                                .await?;
                        }
                        tx.commit().await?;
                    }
                }
            });
        }
        while let Some(joined) = tasks.join_next().await {
            joined.map_err(|e| LedgerError::Invalid(format!("reference writer failed: {e}")))??;
        }
        Ok(sqlx::query_scalar(
            "SELECT COUNT(*) FROM jobs WHERE tenant = $1 AND state = 'succeeded'",
        )
        .bind(tenant)
        .fetch_one(&self.writer)
        .await?)
    }
}
