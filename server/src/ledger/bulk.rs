//! Actions by filter (`bulk_actions`, `bulk_action_jobs`): the exact set of jobs a filter
//! matched when previewed, each with the epoch and state it had then; the confirmation with
//! its reason and one audit entry; and each job's outcome as the background runner acts on it.

use std::time::Duration;

use sqlx::Row;

use super::{Ledger, LedgerError};

/// A bulk action as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BulkAction {
    pub bulk_id: i64,
    /// `authorize_retry`, `resolve_failed`, `cancel` or `rerun`.
    pub action: String,
    /// The filter as the jobs list's address has it (`state=unknown&tenant=acme`).
    pub filter: String,
    /// `operator:ana`.
    pub actor: String,
    /// The tenants the operator acts for (comma-separated), `None` for every tenant.
    pub tenants: Option<String>,
    /// `previewed`, `running` or `done`.
    pub status: String,
    pub total: i64,
    pub reason: Option<String>,
    pub created_at: i64,
    pub confirmed_at: Option<i64>,
    pub finished_at: Option<i64>,
    pub applied: i64,
    pub moved_on: i64,
    pub refused: i64,
}

impl BulkAction {
    /// Jobs acted on so far.
    pub fn done(&self) -> i64 {
        self.applied + self.moved_on + self.refused
    }

    /// How the audit and the pages name it.
    pub fn subject(&self) -> String {
        format!("bulk:{}", self.bulk_id)
    }
}

/// One job of a bulk action: as previewed, and what came of it.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct BulkJob {
    pub job_id: String,
    pub epoch: i64,
    pub state: String,
    pub tenant: String,
    /// Its timeline's events when previewed.
    pub seen: i64,
    /// `applied`, `moved_on`, `refused: …`; `None` until acted on.
    pub outcome: Option<String>,
}

/// How long a preview may be confirmed.
pub const PREVIEW_VALID: Duration = Duration::from_secs(15 * 60);

const COLUMNS: &str = "bulk_id, action, filter, actor, tenants, status, total, reason, \
     created_at, confirmed_at, finished_at, applied, moved_on, refused";

fn bulk_from_row(row: &sqlx::any::AnyRow) -> Result<BulkAction, LedgerError> {
    Ok(BulkAction {
        bulk_id: row.try_get("bulk_id")?,
        action: row.try_get("action")?,
        filter: row.try_get("filter")?,
        actor: row.try_get("actor")?,
        tenants: row.try_get("tenants")?,
        status: row.try_get("status")?,
        total: row.try_get("total")?,
        reason: row.try_get("reason")?,
        created_at: row.try_get("created_at")?,
        confirmed_at: row.try_get("confirmed_at")?,
        finished_at: row.try_get("finished_at")?,
        applied: row.try_get("applied")?,
        moved_on: row.try_get("moved_on")?,
        refused: row.try_get("refused")?,
    })
}

impl Ledger {
    /// Records a preview: the action, its filter and the exact jobs it matched (as each was
    /// then), in one transaction. Returns its id.
    pub async fn preview_bulk(
        &self,
        action: &str,
        filter: &str,
        actor: &str,
        tenants: Option<&str>,
        jobs: &[BulkJob],
    ) -> Result<i64, LedgerError> {
        let now = self.now_us().await?;
        let mut tx = self.begin_write().await?;
        let bulk_id: i64 = sqlx::query_scalar(
            "INSERT INTO bulk_actions (action, filter, actor, tenants, status, total, created_at) \
             VALUES ($1, $2, $3, $4, 'previewed', $5, $6) RETURNING bulk_id",
        )
        .bind(action)
        .bind(filter)
        .bind(actor)
        .bind(tenants)
        .bind(jobs.len() as i64)
        .bind(now)
        .fetch_one(&mut *tx)
        .await?;
        for chunk in jobs.chunks(150) {
            let values: Vec<String> = (0..chunk.len())
                .map(|k| {
                    let p = 5 * k + 2;
                    format!("($1, ${p}, ${}, ${}, ${}, ${})", p + 1, p + 2, p + 3, p + 4)
                })
                .collect();
            let text = format!(
                "INSERT INTO bulk_action_jobs (bulk_id, job_id, epoch, state, tenant, seen) \
                 VALUES {}",
                values.join(", ")
            );
            let mut query = sqlx::query(&text).bind(bulk_id);
            for j in chunk {
                query = query
                    .bind(&j.job_id)
                    .bind(j.epoch)
                    .bind(&j.state)
                    .bind(&j.tenant)
                    .bind(j.seen);
            }
            query.execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(bulk_id)
    }

    pub async fn bulk_action(&self, bulk_id: i64) -> Result<Option<BulkAction>, LedgerError> {
        let row = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM bulk_actions WHERE bulk_id = $1"
        ))
        .bind(bulk_id)
        .fetch_optional(&self.reader)
        .await?;
        row.as_ref().map(bulk_from_row).transpose()
    }

    /// The latest bulk actions, newest first.
    pub async fn bulk_actions(&self, limit: u32) -> Result<Vec<BulkAction>, LedgerError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM bulk_actions ORDER BY bulk_id DESC LIMIT $1"
        ))
        .bind(i64::from(limit))
        .fetch_all(&self.reader)
        .await?;
        rows.iter().map(bulk_from_row).collect()
    }

    /// Up to `limit` of a bulk action's jobs, in job id order, from after `after`.
    pub async fn bulk_jobs(
        &self,
        bulk_id: i64,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<BulkJob>, LedgerError> {
        Ok(sqlx::query_as(
            "SELECT job_id, epoch, state, tenant, seen, outcome FROM bulk_action_jobs \
             WHERE bulk_id = $1 AND job_id > $2 ORDER BY job_id LIMIT $3",
        )
        .bind(bulk_id)
        .bind(after.unwrap_or(""))
        .bind(i64::from(limit))
        .fetch_all(&self.reader)
        .await?)
    }

    /// Confirms a preview made by `actor` within [`PREVIEW_VALID`], with its reason and the
    /// one audit entry of the whole action, in one transaction. `false` when it was not
    /// (another's, confirmed already, or too old).
    pub async fn confirm_bulk(
        &self,
        bulk_id: i64,
        actor: &str,
        reason: &str,
    ) -> Result<bool, LedgerError> {
        let now = self.now_us().await?;
        let oldest = now - PREVIEW_VALID.as_micros() as i64;
        let mut tx = self.begin_write().await?;
        let confirmed = sqlx::query(
            "UPDATE bulk_actions SET status = 'running', reason = $1, confirmed_at = $2 \
             WHERE bulk_id = $3 AND actor = $4 AND status = 'previewed' AND created_at >= $5",
        )
        .bind(reason)
        .bind(now)
        .bind(bulk_id)
        .bind(actor)
        .bind(oldest)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if confirmed != 1 {
            tx.rollback().await?;
            return Ok(false);
        }
        let row = sqlx::query("SELECT action, filter, total FROM bulk_actions WHERE bulk_id = $1")
            .bind(bulk_id)
            .fetch_one(&mut *tx)
            .await?;
        let (action, filter, total): (String, String, i64) = (
            row.try_get("action")?,
            row.try_get("filter")?,
            row.try_get("total")?,
        );
        super::audit::insert_admin_audit(
            &mut tx,
            &super::AdminAudit {
                actor,
                action: &format!("bulk_{action}"),
                subject: &format!("bulk:{bulk_id}"),
                reason,
                before: Some(&format!("{total} jobs matched {filter}")),
                after: None,
            },
            now,
        )
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Bulk actions confirmed and not finished: the runner's work, oldest first.
    pub async fn running_bulk_actions(&self) -> Result<Vec<BulkAction>, LedgerError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM bulk_actions WHERE status = 'running' ORDER BY bulk_id"
        ))
        .fetch_all(&self.reader)
        .await?;
        rows.iter().map(bulk_from_row).collect()
    }

    /// Takes a running bulk action for `hold` unless another process holds it: one process
    /// acts on it at a time. Released by [`Ledger::release_bulk`].
    pub async fn hold_bulk(
        &self,
        bulk_id: i64,
        holder: &str,
        hold: Duration,
    ) -> Result<bool, LedgerError> {
        let now = self.now_us().await?;
        let until = now + hold.as_micros() as i64;
        Ok(sqlx::query(
            "UPDATE bulk_actions SET lease_by = $1, lease_until = $2 \
             WHERE bulk_id = $3 AND status = 'running' \
             AND (lease_until IS NULL OR lease_until < $4 OR lease_by = $1)",
        )
        .bind(holder)
        .bind(until)
        .bind(bulk_id)
        .bind(now)
        .execute(&self.writer)
        .await?
        .rows_affected()
            == 1)
    }

    /// Lets another process take the bulk action, if `holder` still holds it.
    pub async fn release_bulk(&self, bulk_id: i64, holder: &str) -> Result<(), LedgerError> {
        sqlx::query(
            "UPDATE bulk_actions SET lease_by = NULL, lease_until = NULL \
             WHERE bulk_id = $1 AND lease_by = $2",
        )
        .bind(bulk_id)
        .bind(holder)
        .execute(&self.writer)
        .await?;
        Ok(())
    }

    /// The next `limit` jobs of a running bulk action not acted on yet.
    pub async fn bulk_pending(
        &self,
        bulk_id: i64,
        limit: u32,
    ) -> Result<Vec<BulkJob>, LedgerError> {
        Ok(sqlx::query_as(
            "SELECT job_id, epoch, state, tenant, seen, outcome FROM bulk_action_jobs \
             WHERE bulk_id = $1 AND outcome IS NULL ORDER BY job_id LIMIT $2",
        )
        .bind(bulk_id)
        .bind(i64::from(limit))
        .fetch_all(&self.writer)
        .await?)
    }

    /// Records what came of one job (`applied`, `moved_on`, `refused: …`), and counts it once.
    pub async fn bulk_job_done(
        &self,
        bulk_id: i64,
        job_id: &str,
        outcome: &str,
    ) -> Result<(), LedgerError> {
        let mut tx = self.begin_write().await?;
        let marked = sqlx::query(
            "UPDATE bulk_action_jobs SET outcome = $1 \
             WHERE bulk_id = $2 AND job_id = $3 AND outcome IS NULL",
        )
        .bind(outcome)
        .bind(bulk_id)
        .bind(job_id)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if marked == 1 {
            let column = match outcome {
                "applied" => "applied",
                "moved_on" => "moved_on",
                _ => "refused",
            };
            sqlx::query(&format!(
                "UPDATE bulk_actions SET {column} = {column} + 1 WHERE bulk_id = $1"
            ))
            .bind(bulk_id)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Marks a running bulk action done once none of its jobs waits.
    pub async fn finish_bulk(&self, bulk_id: i64) -> Result<(), LedgerError> {
        let now = self.now_us().await?;
        sqlx::query(
            "UPDATE bulk_actions SET status = 'done', finished_at = $1 \
             WHERE bulk_id = $2 AND status = 'running' AND NOT EXISTS \
             (SELECT 1 FROM bulk_action_jobs WHERE bulk_id = $2 AND outcome IS NULL)",
        )
        .bind(now)
        .bind(bulk_id)
        .execute(&self.writer)
        .await?;
        Ok(())
    }

    /// The audit entries of a bulk action: its own first, then its jobs', up to `limit`.
    pub async fn bulk_audit(
        &self,
        bulk_id: i64,
        limit: u32,
    ) -> Result<Vec<super::AuditEntry>, LedgerError> {
        Ok(sqlx::query_as(
            "SELECT id, at, actor, action, job_id, tenant, seen_epoch, new_epoch, state_before, \
             state_after, reason, evidence, new_job_id, subject FROM audit_log \
             WHERE subject = $1 ORDER BY id LIMIT $2",
        )
        .bind(format!("bulk:{bulk_id}"))
        .bind(i64::from(limit))
        .fetch_all(&self.reader)
        .await?)
    }

    /// How many audit entries name a bulk action (its own and its jobs').
    pub async fn bulk_audit_count(&self, bulk_id: i64) -> Result<i64, LedgerError> {
        Ok(
            sqlx::query_scalar("SELECT COUNT(*) FROM audit_log WHERE subject = $1")
                .bind(format!("bulk:{bulk_id}"))
                .fetch_one(&self.reader)
                .await?,
        )
    }
}
