//! The audit log: who did what to which job, at which epoch, why, and the state before and
//! after. Written in the same transaction as the transition it records; read by the console's
//! `/audit` page and each job's page. Entries outlive the jobs that retention prunes.

use sqlx::{Any, AnyConnection, FromRow};

use super::{Ledger, LedgerError};

/// One audit entry, as written.
#[derive(Debug, Clone)]
pub(crate) struct NewAudit<'a> {
    pub(crate) at: i64,
    pub(crate) actor: &'a str,
    pub(crate) action: &'a str,
    pub(crate) job_id: &'a str,
    pub(crate) seen_epoch: i64,
    pub(crate) new_epoch: i64,
    pub(crate) state_before: &'a str,
    pub(crate) state_after: &'a str,
    pub(crate) reason: &'a str,
    /// What a decision resolving a job as succeeded named as its evidence.
    pub(crate) evidence: Option<&'a str>,
    /// The job the action made (running a finished job again).
    pub(crate) new_job_id: Option<&'a str>,
}

tokio::task_local! {
    /// The bulk action a job's action is part of (`bulk:<id>`), while the bulk runner acts:
    /// each job's audit entry names it as its subject, which links it to the bulk action's own.
    pub(crate) static BULK_SUBJECT: String;
}

/// Writes `entry` in the transaction of the transition it records; the tenant is the job's.
pub(crate) async fn insert_audit(
    conn: &mut AnyConnection,
    entry: &NewAudit<'_>,
) -> Result<(), LedgerError> {
    let subject = BULK_SUBJECT.try_with(Clone::clone).ok();
    sqlx::query::<Any>(
        "INSERT INTO audit_log (at, actor, action, job_id, tenant, seen_epoch, new_epoch, \
         state_before, state_after, reason, evidence, new_job_id, subject) \
         SELECT $1, $2, $3, $4, tenant, $5, $6, $7, $8, $9, $10, $11, $12 FROM jobs \
         WHERE job_id = $4",
    )
    .bind(entry.at)
    .bind(entry.actor)
    .bind(entry.action)
    .bind(entry.job_id)
    .bind(entry.seen_epoch)
    .bind(entry.new_epoch)
    .bind(entry.state_before)
    .bind(entry.state_after)
    .bind(entry.reason)
    .bind(entry.evidence)
    .bind(entry.new_job_id)
    .bind(subject)
    .execute(conn)
    .await?;
    Ok(())
}

/// An audit entry as read.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct AuditEntry {
    pub id: i64,
    /// Microseconds, database clock.
    pub at: i64,
    pub actor: String,
    pub action: String,
    pub job_id: Option<String>,
    pub tenant: Option<String>,
    pub seen_epoch: Option<i64>,
    pub new_epoch: Option<i64>,
    pub state_before: Option<String>,
    pub state_after: Option<String>,
    pub reason: String,
    /// A decision's evidence (the provider's reference), when it named one.
    pub evidence: Option<String>,
    /// The job the action made (running a finished job again).
    pub new_job_id: Option<String>,
    /// What an action on the deployment acted on (an operator, a token), when not a job.
    #[sqlx(default)]
    pub subject: Option<String>,
}

/// Which audit entries to read, newest first.
#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    /// `operator:ana`, `policy`, … (exact).
    pub actor: Option<String>,
    pub action: Option<String>,
    pub job_id: Option<String>,
    /// Only entries of these tenants (`None`: every tenant).
    pub tenants: Option<Vec<String>>,
    /// Entries at or after this instant (microseconds).
    pub since: Option<i64>,
    /// Entries older than this id (the next page).
    pub before_id: Option<i64>,
    /// Leave out drills' entries: their starts, and actions on jobs of the drill tenant.
    pub without_drills: bool,
    pub limit: u32,
}

impl Ledger {
    /// Audit entries newest first, filtered.
    pub async fn audit_entries(
        &self,
        filter: &AuditFilter,
    ) -> Result<Vec<AuditEntry>, LedgerError> {
        let mut conditions = Vec::new();
        let mut texts: Vec<String> = Vec::new();
        let mut numbers: Vec<i64> = Vec::new();
        // Text parameters first ($1…), then numbers: the numbering follows the push order.
        let mut n = 0;
        let mut param = || {
            n += 1;
            format!("${n}")
        };
        for (column, value) in [
            ("actor", &filter.actor),
            ("action", &filter.action),
            ("job_id", &filter.job_id),
        ] {
            if let Some(value) = value {
                texts.push(value.clone());
                conditions.push(format!("{column} = {}", param()));
            }
        }
        if let Some(tenants) = &filter.tenants {
            if tenants.is_empty() {
                return Ok(Vec::new());
            }
            let marks: Vec<String> = tenants
                .iter()
                .map(|t| {
                    texts.push(t.clone());
                    param()
                })
                .collect();
            conditions.push(format!("tenant IN ({})", marks.join(", ")));
        }
        if filter.without_drills {
            conditions.push(format!(
                "action <> 'drill_started' AND (tenant IS NULL OR tenant <> '{}')",
                crate::job::DRILL_TENANT
            ));
        }
        if let Some(since) = filter.since {
            numbers.push(since);
            conditions.push(format!("at >= {}", param()));
        }
        if let Some(before) = filter.before_id {
            numbers.push(before);
            conditions.push(format!("id < {}", param()));
        }
        let sql = format!(
            "SELECT id, at, actor, action, job_id, tenant, seen_epoch, new_epoch, state_before, \
             state_after, reason, evidence, new_job_id, subject FROM audit_log {} \
             ORDER BY id DESC LIMIT {}",
            if conditions.is_empty() {
                String::new()
            } else {
                format!("WHERE {}", conditions.join(" AND "))
            },
            filter.limit.clamp(1, 500)
        );
        let mut query = sqlx::query_as::<Any, AuditEntry>(&sql);
        for t in texts {
            query = query.bind(t);
        }
        for v in numbers {
            query = query.bind(v);
        }
        Ok(query.fetch_all(&self.reader).await?)
    }
}

impl Ledger {
    /// Records that `actor` read `job_id`'s accepted result (the console's result view).
    pub async fn audit_result_viewed(
        &self,
        job_id: &str,
        epoch: i64,
        actor: &str,
    ) -> Result<(), LedgerError> {
        self.record_audit(&NewAudit {
            at: self.now_us().await?,
            actor,
            action: "result_viewed",
            job_id,
            seen_epoch: epoch,
            new_epoch: epoch,
            state_before: "succeeded",
            state_after: "succeeded",
            reason: "read the accepted result in the console",
            evidence: None,
            new_job_id: None,
        })
        .await
    }

    /// Records what an operator did to one dead letter of a job (`action`: `redispatched`,
    /// `dropped_terminal`, …), at the epoch and state the job was inspected in; a letter's fate
    /// never changes its job's state.
    pub async fn audit_dlq(
        &self,
        job_id: &str,
        epoch: i64,
        state: &str,
        actor: &str,
        action: &str,
        reason: &str,
    ) -> Result<(), LedgerError> {
        self.record_audit(&NewAudit {
            at: self.now_us().await?,
            actor,
            action: &format!("dlq_{action}"),
            job_id,
            seen_epoch: epoch,
            new_epoch: epoch,
            state_before: state,
            state_after: state,
            reason,
            evidence: None,
            new_job_id: None,
        })
        .await
    }
}

impl Ledger {
    /// Writes one audit entry on its own (for actions that are not a single transition).
    pub(crate) async fn record_audit(&self, entry: &NewAudit<'_>) -> Result<(), LedgerError> {
        let mut conn = self.writer.acquire().await?;
        insert_audit(&mut conn, entry).await
    }
}

/// Writes an admin's audit entry in the transaction of the change it records: no job, no
/// tenant, so only operators without a tenant limit read it.
pub(crate) async fn insert_admin_audit(
    conn: &mut AnyConnection,
    audit: &super::AdminAudit<'_>,
    at: i64,
) -> Result<(), LedgerError> {
    sqlx::query::<Any>(
        "INSERT INTO audit_log (at, actor, action, subject, reason, state_before, state_after) \
         VALUES ($7, $1, $2, $3, $4, $5, $6)",
    )
    .bind(audit.actor)
    .bind(audit.action)
    .bind(audit.subject)
    .bind(audit.reason)
    .bind(audit.before)
    .bind(audit.after)
    .bind(at)
    .execute(conn)
    .await?;
    Ok(())
}
