//! The reconciliation queue: `unknown` jobs, as operators page through them, as provider
//! retrieval walks them, and those a pre-approved replay policy can act on.

use sqlx::Row;

use super::read::JOB_COLUMNS;
use super::{Job, Ledger, LedgerError};

/// An `unknown` job as the reconciliation queue shows it.
#[derive(Debug, Clone)]
pub struct UnknownJob {
    pub job: Job,
    /// Fenceline's request id of the last attempt, when it had one.
    pub last_request: Option<String>,
    /// Provider retrieval cannot settle it (none offered, or switched off): it needs a decision.
    pub retrieval_unsupported: bool,
}

/// A request running in the background at a provider that no job waits for any more: its
/// job ended, or moved on to another attempt, while no worker polled it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct OrphanedResponse {
    pub job_id: String,
    pub attempt_no: i64,
    /// The provider's id the request runs under.
    pub provider_id: String,
    /// Where the job stands now.
    pub state: String,
    pub epoch: i64,
}

/// An `unknown` job as provider retrieval sees it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct UnknownForRetrieval {
    pub job_id: String,
    pub epoch: i64,
    pub updated_at: i64,
    /// Fenceline's request id of the last attempt (`job_id:attempt_no`), when it had one:
    /// what retrieval asks by (the attempt may keep the provider's own id apart).
    pub last_request: Option<String>,
    /// The provider the last attempt went to: only that provider is asked about it.
    pub last_provider: Option<String>,
}

impl Ledger {
    /// `unknown` jobs whose pre-approved replay policy can apply now (budget and time left),
    /// oldest first, with the epoch a decision must name. Jobs under a manual policy are not
    /// in this list, so however many of them wait, they never hold these up.
    pub async fn unknown_replayable(&self, limit: u32) -> Result<Vec<(String, i64)>, LedgerError> {
        let rows = sqlx::query(&self.sql.unknown_replayable)
            .bind(i64::from(limit))
            .fetch_all(&self.reader)
            .await?;
        rows.iter()
            .map(|row| Ok((row.try_get("job_id")?, row.try_get("owner_epoch")?)))
            .collect()
    }

    /// Up to `limit` requests running in the background at `provider` that no job waits for:
    /// attempts with a provider id and no recorded outcome whose job is terminal or has moved
    /// on to another attempt (never an `unknown` job's: its answer may yet be the evidence),
    /// and that were not cancelled already.
    pub async fn orphaned_responses(
        &self,
        provider: &str,
        limit: u32,
    ) -> Result<Vec<OrphanedResponse>, LedgerError> {
        let sql = "SELECT a.job_id, a.attempt_no, a.submitted_id AS provider_id, \
             j.state, j.owner_epoch AS epoch FROM attempts a JOIN jobs j ON j.job_id = a.job_id \
             WHERE a.submitted_id IS NOT NULL AND a.outcome IN ('pending', 'lost') \
             AND a.provider = $1 AND j.state <> 'unknown' \
             AND (j.pending_attempt IS NULL OR j.pending_attempt <> a.attempt_no) \
             AND NOT EXISTS (SELECT 1 FROM events e WHERE e.job_id = a.job_id \
                 AND e.kind = 'upstream_cancelled' AND e.attempt_no = a.attempt_no) \
             LIMIT $2";
        Ok(sqlx::query_as(sql)
            .bind(provider)
            .bind(i64::from(limit))
            .fetch_all(&self.reader)
            .await?)
    }

    /// A page of `unknown` jobs for provider retrieval, after `cursor` (by last change, then
    /// id), each with its epoch and its last attempt's request id and provider. Jobs already
    /// marked `retrieval_unsupported` at their current epoch are skipped: asking again
    /// cannot help them. So are drill jobs: their drill decides them, and the deployment's
    /// provider never heard of them.
    pub async fn unknown_for_retrieval(
        &self,
        cursor: &(i64, String),
        limit: u32,
    ) -> Result<Vec<UnknownForRetrieval>, LedgerError> {
        let sql = "SELECT j.job_id, j.owner_epoch AS epoch, j.updated_at, \
             (SELECT a.job_id || ':' || CAST(a.attempt_no AS TEXT) FROM attempts a \
              WHERE a.job_id = j.job_id ORDER BY a.attempt_no DESC LIMIT 1) AS last_request, \
             (SELECT a.provider FROM attempts a WHERE a.job_id = j.job_id \
              ORDER BY a.attempt_no DESC LIMIT 1) AS last_provider \
             FROM jobs j WHERE j.state = 'unknown' AND j.drill_run IS NULL \
             AND (j.updated_at > $1 OR (j.updated_at = $1 AND j.job_id > $2)) \
             AND NOT EXISTS (SELECT 1 FROM events e WHERE e.job_id = j.job_id \
                 AND e.kind = 'retrieval_unsupported' AND e.epoch = j.owner_epoch) \
             ORDER BY j.updated_at, j.job_id LIMIT $3";
        Ok(sqlx::query_as(sql)
            .bind(cursor.0)
            .bind(cursor.1.as_str())
            .bind(i64::from(limit))
            .fetch_all(&self.reader)
            .await?)
    }

    /// A page of `unknown` jobs after `cursor` (last change, then id: oldest first), each with
    /// its last attempt's provider request id and whether provider retrieval was found unable
    /// to settle it at its current epoch.
    pub async fn unknown_jobs(
        &self,
        cursor: &(i64, String),
        limit: u32,
    ) -> Result<Vec<UnknownJob>, LedgerError> {
        let sql = format!(
            "SELECT {JOB_COLUMNS}, (SELECT a.provider_request_id FROM attempts a \
             WHERE a.job_id = jobs.job_id ORDER BY a.attempt_no DESC LIMIT 1) AS last_request, \
             CASE WHEN EXISTS (SELECT 1 FROM events e WHERE e.job_id = jobs.job_id \
                 AND e.kind = 'retrieval_unsupported' AND e.epoch = jobs.owner_epoch) \
             THEN 1 ELSE 0 END AS retrieval_unsupported \
             FROM jobs WHERE state = 'unknown' \
             AND (updated_at > $1 OR (updated_at = $1 AND job_id > $2)) \
             ORDER BY updated_at, job_id LIMIT $3"
        );
        let rows = sqlx::query(&sql)
            .bind(cursor.0)
            .bind(cursor.1.as_str())
            .bind(i64::from(limit))
            .fetch_all(&self.reader)
            .await?;
        rows.iter()
            .map(|row| {
                Ok(UnknownJob {
                    job: super::read::job_from_row(row)?,
                    last_request: row.try_get("last_request")?,
                    retrieval_unsupported: row.try_get::<i64, _>("retrieval_unsupported")? == 1,
                })
            })
            .collect()
    }
}
