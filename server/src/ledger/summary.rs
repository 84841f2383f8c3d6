//! What became of one tenant's jobs, read back for the benchmarks that run them through the
//! real processes (`fenceline bench throttle`, `fenceline bench fairness`).

use sqlx::Row;

use super::{Ledger, LedgerError};

/// One tenant's jobs as the ledger holds them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunSummary {
    pub jobs: i64,
    pub succeeded: i64,
    pub unknown: i64,
    /// Jobs not yet terminal nor `unknown`.
    pub live: i64,
    /// When the first job was created, and the last one succeeded (µs, database clock).
    pub first_created: Option<i64>,
    pub last_succeeded: Option<i64>,
    /// The most times one message of these jobs was received, as the queue counted.
    pub most_receives: i64,
    /// Attempts the provider refused, and the most of the budget any job spent.
    pub refused_attempts: i64,
    pub most_budget_used: i64,
}

impl Ledger {
    /// What became of `tenant`'s jobs.
    pub async fn run_summary(&self, tenant: &str) -> Result<RunSummary, LedgerError> {
        let row = sqlx::query(
            "SELECT COUNT(*) AS jobs, \
             CAST(SUM(CASE WHEN state = 'succeeded' THEN 1 ELSE 0 END) AS BIGINT) AS succeeded, \
             CAST(SUM(CASE WHEN state = 'unknown' THEN 1 ELSE 0 END) AS BIGINT) AS unknown, \
             CAST(SUM(CASE WHEN state IN ('ready', 'running', 'retry_authorized') THEN 1 ELSE 0 \
                 END) AS BIGINT) AS live, \
             MIN(created_at) AS first_created, \
             MAX(CASE WHEN state = 'succeeded' THEN terminal_at END) AS last_succeeded, \
             MAX(budget_used) AS most_budget_used, \
             CAST(SUM(attempt_count - budget_used) AS BIGINT) AS refused \
             FROM jobs WHERE tenant = $1",
        )
        .bind(tenant)
        .fetch_one(&self.reader)
        .await?;
        let receives: Option<i64> = sqlx::query_scalar(
            "SELECT MAX(e.receive_count) FROM events e JOIN jobs j ON j.job_id = e.job_id \
             WHERE j.tenant = $1 AND e.kind = 'delivery_received'",
        )
        .bind(tenant)
        .fetch_one(&self.reader)
        .await?;
        let n = |name: &str| -> Result<i64, LedgerError> {
            Ok(row.try_get::<Option<i64>, _>(name)?.unwrap_or(0))
        };
        Ok(RunSummary {
            jobs: n("jobs")?,
            succeeded: n("succeeded")?,
            unknown: n("unknown")?,
            live: n("live")?,
            first_created: row.try_get("first_created")?,
            last_succeeded: row.try_get("last_succeeded")?,
            most_receives: receives.unwrap_or(0),
            refused_attempts: n("refused")?,
            most_budget_used: n("most_budget_used")?,
        })
    }
}
