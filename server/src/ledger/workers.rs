//! Worker processes as they report themselves, and the jobs each holds: the console's
//! `/workers` page.
//!
//! Owns the `workers` table (migration 0014): a process running a worker reports when it
//! starts, every few seconds while it runs ([`crate::worker::presence`]) and once more when it
//! has stopped cleanly. A report is only a sign of life, never ownership: which worker may
//! write a job stays decided by `jobs.owner_id` and its epoch. What a worker holds is read from
//! the running jobs themselves, so a worker that never reported (a drill's, or one of a build
//! before reports) still shows with its jobs.

use sqlx::Row;

use super::{Ledger, LedgerError};

/// What a worker process says of itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerReport {
    pub worker_id: String,
    /// The queue it receives from, as the queue describes itself (`embedded:jobs`, `sqs:…`).
    pub queue: String,
    /// The model provider's name.
    pub provider: String,
    /// How many calls it runs at once at most.
    pub max_in_flight: i64,
    /// How many it can hold now: its width, or less while a provider limits it.
    pub capacity: i64,
}

/// A worker as the console shows it: its latest report, if any, and the running jobs it
/// holds now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerSeen {
    pub worker_id: String,
    /// Its reports: `None` for a worker known only as a running job's owner.
    pub reported: Option<Reported>,
    /// Running jobs it owns now (within the tenants asked for).
    pub held: i64,
    /// Of those, the jobs whose lease has lapsed: the reaper takes them back.
    pub lapsed: i64,
    /// The latest lease end among them.
    pub lease_until: Option<i64>,
}

/// What a worker's reports say (database clock, µs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reported {
    pub started_at: i64,
    pub seen_at: i64,
    pub stopped_at: Option<i64>,
    pub queue: String,
    pub provider: String,
    pub max_in_flight: i64,
    /// What it could hold at its latest report (none from a build before it said).
    pub capacity: Option<i64>,
}

impl Ledger {
    /// Records that a worker is running (its first report also records when it started).
    pub async fn report_worker(&self, report: &WorkerReport) -> Result<(), LedgerError> {
        let now = self.now_us().await?;
        sqlx::query(
            "INSERT INTO workers (worker_id, started_at, seen_at, queue, provider, max_in_flight, \
             capacity) VALUES ($1, $2, $2, $3, $4, $5, $6) ON CONFLICT (worker_id) DO UPDATE SET \
             seen_at = excluded.seen_at, stopped_at = NULL, queue = excluded.queue, \
             provider = excluded.provider, max_in_flight = excluded.max_in_flight, \
             capacity = excluded.capacity",
        )
        .bind(report.worker_id.as_str())
        .bind(now)
        .bind(report.queue.as_str())
        .bind(report.provider.as_str())
        .bind(report.max_in_flight)
        .bind(report.capacity)
        .execute(&self.writer)
        .await?;
        Ok(())
    }

    /// Records that a worker stopped cleanly, its calls drained or handed back.
    pub async fn worker_stopped(&self, worker_id: &str) -> Result<(), LedgerError> {
        let now = self.now_us().await?;
        sqlx::query("UPDATE workers SET seen_at = $1, stopped_at = $1 WHERE worker_id = $2")
            .bind(now)
            .bind(worker_id)
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    /// Workers that reported since `since`, counted as `(alive, silent, stopped)`: a worker
    /// not stopped is silent when its latest report is older than `quiet_since`.
    pub async fn worker_statuses(
        &self,
        since: i64,
        quiet_since: i64,
    ) -> Result<(i64, i64, i64), LedgerError> {
        let row = sqlx::query(
            "SELECT \
             COALESCE(SUM(CASE WHEN stopped_at IS NULL AND seen_at >= $2 THEN 1 ELSE 0 END), 0) AS alive, \
             COALESCE(SUM(CASE WHEN stopped_at IS NULL AND seen_at < $2 THEN 1 ELSE 0 END), 0) AS silent, \
             COALESCE(SUM(CASE WHEN stopped_at IS NOT NULL THEN 1 ELSE 0 END), 0) AS stopped \
             FROM workers WHERE seen_at >= $1",
        )
        .bind(since)
        .bind(quiet_since)
        .fetch_one(&self.reader)
        .await?;
        Ok((
            row.try_get("alive")?,
            row.try_get("silent")?,
            row.try_get("stopped")?,
        ))
    }

    /// Workers that reported since `since`, and every owner of a running job of `tenants`
    /// (`None`: every tenant), ordered by id; `now` judges which leases have lapsed.
    pub async fn workers_seen(
        &self,
        since: i64,
        now: i64,
        tenants: Option<&[String]>,
    ) -> Result<Vec<WorkerSeen>, LedgerError> {
        let rows = sqlx::query(
            "SELECT worker_id, started_at, seen_at, stopped_at, queue, provider, max_in_flight, \
             capacity FROM workers WHERE seen_at >= $1",
        )
        .bind(since)
        .fetch_all(&self.reader)
        .await?;
        let mut seen: Vec<WorkerSeen> = rows
            .iter()
            .map(|row| {
                Ok(WorkerSeen {
                    worker_id: row.try_get("worker_id")?,
                    reported: Some(Reported {
                        started_at: row.try_get("started_at")?,
                        seen_at: row.try_get("seen_at")?,
                        stopped_at: row.try_get("stopped_at")?,
                        queue: row.try_get("queue")?,
                        provider: row.try_get("provider")?,
                        max_in_flight: row.try_get("max_in_flight")?,
                        capacity: row.try_get("capacity")?,
                    }),
                    held: 0,
                    lapsed: 0,
                    lease_until: None,
                })
            })
            .collect::<Result<_, LedgerError>>()?;
        // The running jobs by owner: `jobs_state_id` finds them, however many jobs finished.
        // An operator with no tenant owns no job to count.
        let owners = match tenants {
            Some([]) => Vec::new(),
            _ => {
                let mut args: Vec<String> = Vec::new();
                let scope = tenants
                    .map(|t| format!(" AND {}", super::read::tenant_in(&mut args, t)))
                    .unwrap_or_default();
                let sql = format!(
                    "SELECT owner_id, COUNT(*) AS held, \
                     SUM(CASE WHEN owner_until <= ${now} THEN 1 ELSE 0 END) AS lapsed, \
                     MAX(owner_until) AS lease_until FROM jobs \
                     WHERE state = 'running'{scope} GROUP BY owner_id",
                    now = args.len() + 1
                );
                let mut query = sqlx::query(&sql);
                for arg in &args {
                    query = query.bind(arg.as_str());
                }
                query.bind(now).fetch_all(&self.reader).await?
            }
        };
        for row in owners {
            let worker_id: String = row.try_get("owner_id")?;
            let held: i64 = row.try_get("held")?;
            let lapsed: i64 = row.try_get("lapsed")?;
            let lease_until: Option<i64> = row.try_get("lease_until")?;
            let slot = match seen.iter().position(|w| w.worker_id == worker_id) {
                Some(i) => &mut seen[i],
                None => {
                    seen.push(WorkerSeen {
                        worker_id,
                        reported: None,
                        held: 0,
                        lapsed: 0,
                        lease_until: None,
                    });
                    seen.last_mut().expect("just pushed")
                }
            };
            slot.held = held;
            slot.lapsed = lapsed;
            slot.lease_until = lease_until;
        }
        seen.sort_by(|a, b| a.worker_id.cmp(&b.worker_id));
        Ok(seen)
    }
}
