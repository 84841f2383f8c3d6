//! The reaper's queries: jobs whose lease expired, whose deadline passed, or whose message
//! may be gone.

use std::time::Duration;

use super::write::micros;
use super::{Ledger, LedgerError};

impl Ledger {
    async fn job_ids(
        &self,
        sql: &str,
        limit: u32,
        extra: Option<i64>,
    ) -> Result<Vec<String>, LedgerError> {
        let mut query = sqlx::query_scalar(sql).bind(i64::from(limit));
        if let Some(extra) = extra {
            query = query.bind(extra);
        }
        Ok(query.fetch_all(&self.reader).await?)
    }

    /// Running jobs whose lease has expired (the reaper recovers them).
    pub async fn expired_leases(&self, limit: u32) -> Result<Vec<String>, LedgerError> {
        self.job_ids(&self.sql.expired_leases, limit, None).await
    }

    /// Live jobs whose deadline has passed (the reaper expires them).
    pub async fn past_deadline(&self, limit: u32) -> Result<Vec<String>, LedgerError> {
        self.job_ids(&self.sql.past_deadline, limit, None).await
    }

    /// Workable jobs with no send pending whose last dispatch is older than `quiet`: their
    /// message may be gone (deleted after a crash, expired, dead-lettered). The reaper sends
    /// them again; a duplicate is harmless.
    pub async fn quiet_workable(
        &self,
        limit: u32,
        quiet: Duration,
    ) -> Result<Vec<String>, LedgerError> {
        self.job_ids(&self.sql.quiet_workable, limit, Some(micros(quiet)))
            .await
    }
}
