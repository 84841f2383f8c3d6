//! Drill runs: each run's parameters, progress, verdict and report, durable so a report can be
//! shared long after the run and a run cut short by a restart says so.

use std::time::Duration;

use sqlx::FromRow;

use super::{Ledger, LedgerError};

/// A drill run as stored. `report` is the drill module's report, as JSON.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct DrillRunRow {
    pub run_id: String,
    /// A JSON array of scenario kinds.
    pub kinds: String,
    pub queue: String,
    pub timings: String,
    pub requested_by: String,
    /// `running`, `passed`, `failed` or `interrupted`.
    pub status: String,
    /// Microseconds, database clock.
    pub started_at: i64,
    pub alive_at: i64,
    pub finished_at: Option<i64>,
    pub report: String,
}

/// One send of a job's outbox row, as the ledger counts it.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct OutboxSend {
    pub id: i64,
    pub reason: String,
    pub send_attempts: i64,
    pub created_at: i64,
    pub dispatched_at: Option<i64>,
}

const COLUMNS: &str = "run_id, kinds, queue, timings, requested_by, status, started_at, \
    alive_at, finished_at, report";

impl Ledger {
    /// Records a run that has just started; `started_at` and `alive_at` are now.
    pub async fn insert_drill_run(&self, run: &DrillRunRow) -> Result<i64, LedgerError> {
        let now = self.now_us().await?;
        let mut tx = self.begin_write().await?;
        insert_run(&mut tx, run, now).await?;
        tx.commit().await?;
        Ok(now)
    }

    /// [`Ledger::insert_drill_run`] only while no other run is going (one that saved its
    /// progress within `stale`): the run going instead, when there is one. Two starts at once
    /// are taken in turn, so one of them finds the other.
    pub async fn insert_only_drill_run(
        &self,
        run: &DrillRunRow,
        stale: Duration,
    ) -> Result<Result<i64, DrillRunRow>, LedgerError> {
        let now = self.now_us().await?;
        let cutoff = now - i64::try_from(stale.as_micros()).unwrap_or(i64::MAX);
        let mut tx = self.begin_write().await?;
        if self.backend == super::Backend::Postgres {
            // SQLite's one writer takes starts in turn already.
            sqlx::query("SELECT pg_advisory_xact_lock(hashtext('fenceline.drill_runs'))")
                .execute(&mut *tx)
                .await?;
        }
        let sql = format!(
            "SELECT {COLUMNS} FROM drill_runs WHERE status = 'running' AND alive_at >= $1 \
             ORDER BY started_at LIMIT 1"
        );
        let going = sqlx::query_as::<_, DrillRunRow>(&sql)
            .bind(cutoff)
            .fetch_optional(&mut *tx)
            .await?;
        if let Some(going) = going {
            return Ok(Err(going));
        }
        insert_run(&mut tx, run, now).await?;
        tx.commit().await?;
        Ok(Ok(now))
    }

    /// Marks this database as serving production, for good: drills refuse to run against
    /// it, whatever their own process is told.
    pub async fn mark_production(&self) -> Result<(), LedgerError> {
        let now = self.now_us().await?;
        sqlx::query(
            "INSERT INTO deployment (id, environment, marked_at) VALUES (1, 'production', $1) \
             ON CONFLICT (id) DO UPDATE SET environment = 'production', \
             marked_at = CASE WHEN deployment.environment = 'production' \
             THEN deployment.marked_at ELSE excluded.marked_at END",
        )
        .bind(now)
        .execute(&self.writer)
        .await?;
        Ok(())
    }

    /// Whether a production deployment has marked this database ([`Ledger::mark_production`]).
    pub async fn marked_production(&self) -> Result<bool, LedgerError> {
        let environment: Option<String> =
            sqlx::query_scalar("SELECT environment FROM deployment WHERE id = 1")
                .fetch_optional(&self.reader)
                .await?;
        Ok(environment.as_deref() == Some("production"))
    }

    /// Saves a run's progress (and marks it alive); `finished` ends it with `status`.
    pub async fn save_drill_run(
        &self,
        run_id: &str,
        status: &str,
        report: &str,
        finished: bool,
    ) -> Result<(), LedgerError> {
        let now = self.now_us().await?;
        sqlx::query(
            "UPDATE drill_runs SET status = $2, report = $3, alive_at = $4, \
             finished_at = CASE WHEN $5 = 1 THEN $4 ELSE finished_at END \
             WHERE run_id = $1 AND status = 'running'",
        )
        .bind(run_id)
        .bind(status)
        .bind(report)
        .bind(now)
        .bind(i64::from(finished))
        .execute(&self.writer)
        .await?;
        Ok(())
    }

    pub async fn drill_run(&self, run_id: &str) -> Result<Option<DrillRunRow>, LedgerError> {
        let sql = format!("SELECT {COLUMNS} FROM drill_runs WHERE run_id = $1");
        Ok(sqlx::query_as::<_, DrillRunRow>(&sql)
            .bind(run_id)
            .fetch_optional(&self.reader)
            .await?)
    }

    /// The latest runs, newest first.
    pub async fn drill_runs(&self, limit: u32) -> Result<Vec<DrillRunRow>, LedgerError> {
        let sql = format!(
            "SELECT {COLUMNS} FROM drill_runs ORDER BY started_at DESC, run_id DESC LIMIT $1"
        );
        Ok(sqlx::query_as::<_, DrillRunRow>(&sql)
            .bind(i64::from(limit.clamp(1, 500)))
            .fetch_all(&self.reader)
            .await?)
    }

    /// Marks runs that stopped saving progress for `stale` as interrupted (their process
    /// ended mid-run); returns how many.
    pub async fn mark_interrupted_drills(&self, stale: Duration) -> Result<u64, LedgerError> {
        let now = self.now_us().await?;
        let cutoff = now - i64::try_from(stale.as_micros()).unwrap_or(i64::MAX);
        Ok(sqlx::query(
            "UPDATE drill_runs SET status = 'interrupted', finished_at = alive_at \
             WHERE status = 'running' AND alive_at < $1",
        )
        .bind(cutoff)
        .execute(&self.writer)
        .await?
        .rows_affected())
    }

    /// Every outbox row of a job, oldest first: how often each was claimed to be sent, and
    /// when one was sent.
    pub async fn outbox_sends(&self, job_id: &str) -> Result<Vec<OutboxSend>, LedgerError> {
        Ok(sqlx::query_as::<_, OutboxSend>(
            "SELECT id, reason, send_attempts, created_at, dispatched_at FROM outbox \
             WHERE job_id = $1 ORDER BY id",
        )
        .bind(job_id)
        .fetch_all(&self.reader)
        .await?)
    }

    /// Deletes every message of an embedded queue and of its dead-letter queue (a drill's
    /// queue, once its run is over).
    pub async fn purge_queue(&self, name: &str) -> Result<u64, LedgerError> {
        Ok(
            sqlx::query("DELETE FROM queue_messages WHERE queue = $1 OR queue = $2")
                .bind(name)
                .bind(format!("{name}-dlq"))
                .execute(&self.writer)
                .await?
                .rows_affected(),
        )
    }

    /// Audits a drill started by an operator (no job yet: the entry names the run).
    pub async fn audit_drill_started(
        &self,
        actor: &str,
        run_id: &str,
        kinds: &str,
    ) -> Result<(), LedgerError> {
        let now = self.now_us().await?;
        let reason = format!("drill run {run_id}: {kinds}");
        let reason: String = reason.chars().take(2000).collect();
        sqlx::query(
            "INSERT INTO audit_log (at, actor, action, reason) VALUES ($1, $2, 'drill_started', $3)",
        )
        .bind(now)
        .bind(actor)
        .bind(reason)
        .execute(&self.writer)
        .await?;
        Ok(())
    }
}

async fn insert_run(
    tx: &mut sqlx::AnyConnection,
    run: &DrillRunRow,
    now: i64,
) -> Result<(), LedgerError> {
    sqlx::query(
        "INSERT INTO drill_runs (run_id, kinds, queue, timings, requested_by, status, \
         started_at, alive_at, finished_at, report) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $7, NULL, $8)",
    )
    .bind(&run.run_id)
    .bind(&run.kinds)
    .bind(&run.queue)
    .bind(&run.timings)
    .bind(&run.requested_by)
    .bind(&run.status)
    .bind(now)
    .bind(&run.report)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

#[cfg(feature = "sabotage")]
impl Ledger {
    /// What a worker without fencing does: marks the job succeeded whatever its epoch and
    /// state, with a `result_accepted` on its timeline. Test builds only.
    pub async fn sabotaged_accept(
        &self,
        job_id: &str,
        epoch: i64,
        actor: &crate::job::Actor,
    ) -> Result<(), LedgerError> {
        sqlx::query(
            "UPDATE jobs SET state = 'succeeded', pending_attempt = NULL, \
             terminal_at = COALESCE(terminal_at, updated_at), \
             result_ref = COALESCE(result_ref, 'unfenced') WHERE job_id = $1",
        )
        .bind(job_id)
        .execute(&self.writer)
        .await?;
        let event = super::NewEvent::new(crate::job::EventKind::ResultAccepted, actor)
            .epoch(epoch)
            .detail(crate::job::detail::ResultAccepted {
                unfenced: Some(true),
                ..Default::default()
            });
        self.record_event(job_id, &event).await.map(|_| ())
    }
}
