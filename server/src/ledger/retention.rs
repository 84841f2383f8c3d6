//! Retention: pruning old records by an explicit, configured policy — never silently.
//!
//! Owns deleting a terminal job's record (job, input, attempts, results, events, decisions,
//! outbox rows, by cascade) once its terminal time is older than the cutoff, with the other
//! bookkeeping that only grows: sent outbox rows, embedded-queue messages older than the
//! cutoff (as SQS drops messages past their retention period), refused-message records, and
//! the overview's rolled-up hours once no chart reads them. Each run is recorded in
//! `retention_runs`. Must not touch a job that is not terminal: only a
//! terminal record lets a late copy of its message be acknowledged without inference, so the
//! keep period must outlast the queue's retention plus the dead-letter replay window.

use std::time::Duration;

use sqlx::Row;

use super::{Ledger, LedgerError};

/// What one pruning run removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pruned {
    pub jobs: u64,
    pub outbox: u64,
    pub queue_messages: u64,
    pub rejected_messages: u64,
}

/// The latest recorded run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetentionRun {
    pub ran_at: i64,
    pub keep: Duration,
    pub pruned: Pruned,
}

/// Terminal jobs deleted per transaction: short transactions, whatever the backlog.
const JOBS_PER_BATCH: i64 = 500;

/// How far back the overview's charts read rolled-up hours: the week's window, widened to its
/// first bucket's start, with a day to spare.
const ROLLUP_READ: i64 = 8 * 24 * super::HOUR;

impl Ledger {
    /// Prunes what is older than `keep` by the database clock and records the run.
    pub async fn prune(&self, keep: Duration) -> Result<Pruned, LedgerError> {
        let now = self.now_us().await?;
        let keep_us = i64::try_from(keep.as_micros()).unwrap_or(i64::MAX);
        let cutoff = now.saturating_sub(keep_us);
        let pruned = self.prune_before(cutoff).await?;
        self.prune_rollup_before(cutoff.min(now.saturating_sub(ROLLUP_READ)))
            .await?;
        // Reports of workers silent since before the cutoff (one row per process started).
        sqlx::query("DELETE FROM workers WHERE seen_at < $1")
            .bind(cutoff)
            .execute(&self.writer)
            .await?;
        // Actions by filter finished or never confirmed, with their jobs' rows (their audit
        // entries stay), and alerts that cleared before the cutoff, with their notifications.
        sqlx::query("DELETE FROM bulk_actions WHERE created_at < $1 AND status <> 'running'")
            .bind(cutoff)
            .execute(&self.writer)
            .await?;
        sqlx::query("DELETE FROM alerts WHERE cleared_at < $1")
            .bind(cutoff)
            .execute(&self.writer)
            .await?;
        // Marks of group-commit runners quiet since before the cutoff (one row a runner).
        sqlx::query("DELETE FROM commit_marks WHERE at < $1")
            .bind(cutoff)
            .execute(&self.writer)
            .await?;
        sqlx::query(
            "INSERT INTO retention_runs (ran_at, keep_us, cutoff, jobs, outbox, queue_messages, \
             rejected_messages) VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(now)
        .bind(keep_us)
        .bind(cutoff)
        .bind(pruned.jobs as i64)
        .bind(pruned.outbox as i64)
        .bind(pruned.queue_messages as i64)
        .bind(pruned.rejected_messages as i64)
        .execute(&self.writer)
        .await?;
        Ok(pruned)
    }

    /// Deletes terminal jobs whose terminal time is before `cutoff` (database clock,
    /// microseconds) with everything they own, and bookkeeping rows older than `cutoff`.
    pub async fn prune_before(&self, cutoff: i64) -> Result<Pruned, LedgerError> {
        let mut pruned = Pruned::default();
        let now = self.now_us().await?;
        loop {
            // Terminal states only, checked again inside the delete: a live job never goes.
            let deleted = sqlx::query(
                "DELETE FROM jobs WHERE job_id IN (SELECT job_id FROM jobs \
                 WHERE terminal_at IS NOT NULL AND terminal_at < $1 \
                 AND state IN ('succeeded', 'failed_terminal', 'expired') \
                 AND NOT EXISTS (SELECT 1 FROM incident_jobs p JOIN incidents i \
                   ON i.incident_id = p.incident_id WHERE p.job_id = jobs.job_id \
                   AND (i.keep_until IS NULL OR i.keep_until > $3)) \
                 ORDER BY terminal_at LIMIT $2) \
                 AND state IN ('succeeded', 'failed_terminal', 'expired')",
            )
            .bind(cutoff)
            .bind(JOBS_PER_BATCH)
            // Jobs pinned to an incident stay while it is open, and until its keep time after.
            .bind(now)
            .execute(&self.writer)
            .await?
            .rows_affected();
            pruned.jobs += deleted;
            if deleted < JOBS_PER_BATCH as u64 {
                break;
            }
        }
        pruned.outbox = sqlx::query(
            "DELETE FROM outbox WHERE dispatched_at IS NOT NULL AND dispatched_at < $1",
        )
        .bind(cutoff)
        .execute(&self.writer)
        .await?
        .rows_affected();
        pruned.queue_messages = sqlx::query("DELETE FROM queue_messages WHERE sent_at < $1")
            .bind(cutoff)
            .execute(&self.writer)
            .await?
            .rows_affected();
        pruned.rejected_messages = sqlx::query("DELETE FROM rejected_messages WHERE at < $1")
            .bind(cutoff)
            .execute(&self.writer)
            .await?
            .rows_affected();
        Ok(pruned)
    }

    /// Deletes the overview's rolled-up hours that end before `before` (see
    /// [`Ledger::prune`]: older than the cutoff, and than any chart reads). They are counts
    /// derived from events and finished jobs, not records; an hour still inside the week's
    /// chart stays even past the cutoff, since its events may be gone and it could not be
    /// counted again.
    async fn prune_rollup_before(&self, before: i64) -> Result<(), LedgerError> {
        let hour_before = before.saturating_sub(super::HOUR);
        for sql in [
            "DELETE FROM activity_hours WHERE hour <= $1",
            "DELETE FROM activity_hours_done WHERE hour <= $1",
        ] {
            sqlx::query(sql)
                .bind(hour_before)
                .execute(&self.writer)
                .await?;
        }
        Ok(())
    }

    /// The latest pruning run, if any ran.
    pub async fn last_retention_run(&self) -> Result<Option<RetentionRun>, LedgerError> {
        let row = sqlx::query(
            "SELECT ran_at, keep_us, jobs, outbox, queue_messages, rejected_messages \
             FROM retention_runs ORDER BY id DESC LIMIT 1",
        )
        .fetch_optional(&self.reader)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let count = |col: &str| -> Result<u64, LedgerError> {
            Ok(u64::try_from(row.try_get::<i64, _>(col)?).unwrap_or(0))
        };
        Ok(Some(RetentionRun {
            ran_at: row.try_get("ran_at")?,
            keep: Duration::from_micros(count("keep_us")?),
            pruned: Pruned {
                jobs: count("jobs")?,
                outbox: count("outbox")?,
                queue_messages: count("queue_messages")?,
                rejected_messages: count("rejected_messages")?,
            },
        }))
    }
}
