//! Reads for workers, the API and the console. Pages by keyset, never by offset, and never
//! loads a whole timeline to show one page.

use serde_json::Value;
use sqlx::any::AnyRow;
use sqlx::{FromRow, Row};

use super::model::{Attempt, DecisionRecord, DeliveryRef, Event, Job, JobFilter, JobPage};
use super::{Ledger, LedgerError};
use crate::job::JobState;

pub(crate) const JOB_COLUMNS: &str = "job_id, tenant, idempotency_key, request_digest, input_ref, \
    contract_version, state, owner_epoch, owner_id, owner_until, deadline_at, attempt_count, \
    max_attempts, budget_used, retry_at, result_ref, error_code, replay_policy, recovery_reason, \
    created_at, updated_at, terminal_at, pending_attempt, drill_run, next_event_seq, route_step, \
    route_provider, route_model, route_since";

pub(crate) fn job_from_row(row: &AnyRow) -> Result<Job, LedgerError> {
    Ok(Job::from_row(row)?)
}

fn attempt_from_row(row: &AnyRow) -> Result<Attempt, LedgerError> {
    Ok(Attempt::from_row(row)?)
}

pub(crate) fn event_from_row(row: &AnyRow) -> Result<Event, LedgerError> {
    let message_id: Option<String> = row.try_get("message_id")?;
    let detail: String = row.try_get("detail")?;
    let delivery = match message_id {
        Some(message_id) => Some(DeliveryRef {
            message_id,
            receive_count: row.try_get::<Option<i64>, _>("receive_count")?.unwrap_or(0),
            handle_hash: row
                .try_get::<Option<String>, _>("handle_hash")?
                .unwrap_or_default(),
        }),
        None => None,
    };
    let kind: String = row.try_get("kind")?;
    Ok(Event {
        job_id: row.try_get("job_id")?,
        seq: row.try_get("seq")?,
        at: row.try_get("at")?,
        kind: kind
            .parse()
            .map_err(|e: crate::job::ParseEventKindError| LedgerError::Corrupt(e.to_string()))?,
        epoch: row.try_get("epoch")?,
        actor: row.try_get("actor")?,
        delivery,
        attempt_no: row.try_get("attempt_no")?,
        deadline_left_ms: row.try_get("deadline_left_ms")?,
        detail: serde_json::from_str(&detail).unwrap_or(Value::Null),
    })
}

impl Ledger {
    /// One job, whoever owns it (workers, operators).
    pub async fn job(&self, job_id: &str) -> Result<Option<Job>, LedgerError> {
        let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE job_id = $1");
        let row = sqlx::query(&sql)
            .bind(job_id)
            .fetch_optional(&self.reader)
            .await?;
        row.as_ref().map(job_from_row).transpose()
    }

    /// Every job `filter` matches (its `before` and `limit` aside), newest first, read a page
    /// at a time; `None` once more than `cap` match.
    pub async fn matching_jobs(
        &self,
        filter: &JobFilter,
        cap: usize,
    ) -> Result<Option<Vec<Job>>, LedgerError> {
        let mut page_filter = JobFilter {
            before: None,
            limit: 500,
            ..filter.clone()
        };
        let mut jobs = Vec::new();
        loop {
            let page = self.list_jobs(&page_filter).await?;
            jobs.extend(page.jobs);
            if jobs.len() > cap {
                return Ok(None);
            }
            match page.next {
                Some(next) => page_filter.before = Some(next),
                None => return Ok(Some(jobs)),
            }
        }
    }

    /// One job, only if it belongs to `tenant`: another tenant's job does not exist for them.
    pub async fn job_for_tenant(
        &self,
        tenant: &str,
        job_id: &str,
    ) -> Result<Option<Job>, LedgerError> {
        let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE job_id = $1 AND tenant = $2");
        let row = sqlx::query(&sql)
            .bind(job_id)
            .bind(tenant)
            .fetch_optional(&self.reader)
            .await?;
        row.as_ref().map(job_from_row).transpose()
    }

    /// The job's stored input and model parameters (for the worker; never for logs).
    pub async fn job_input(&self, job_id: &str) -> Result<Option<(Value, Value)>, LedgerError> {
        let row = sqlx::query("SELECT input, model FROM job_inputs WHERE job_id = $1")
            .bind(job_id)
            .fetch_optional(&self.reader)
            .await?;
        let Some(row) = row else { return Ok(None) };
        let parse = |col: &str| -> Result<Value, LedgerError> {
            parse_json(&row.try_get::<String, _>(col)?)
        };
        Ok(Some((parse("input")?, parse("model")?)))
    }

    /// The body of a stored result (accepted or stale evidence).
    pub async fn result_body(&self, result_ref: &str) -> Result<Option<String>, LedgerError> {
        Ok(
            sqlx::query_scalar("SELECT body FROM results WHERE result_ref = $1")
                .bind(result_ref)
                .fetch_optional(&self.reader)
                .await?,
        )
    }

    /// Every attempt of a job, oldest first.
    pub async fn attempts(&self, job_id: &str) -> Result<Vec<Attempt>, LedgerError> {
        let rows = sqlx::query(
            "SELECT job_id, attempt_no, epoch, worker_id, provider, provider_request_id, \
             submitted_id, usage, cost_nusd, started_at, finished_at, outcome, error_code, result_ref \
             FROM attempts WHERE job_id = $1 ORDER BY attempt_no",
        )
        .bind(job_id)
        .fetch_all(&self.reader)
        .await?;
        rows.iter().map(attempt_from_row).collect()
    }

    /// One page of a job's timeline: events with `seq > after`, oldest first.
    pub async fn events(
        &self,
        job_id: &str,
        after: i64,
        limit: u32,
    ) -> Result<Vec<Event>, LedgerError> {
        let rows = sqlx::query(
            "SELECT job_id, seq, at, kind, epoch, actor, message_id, receive_count, handle_hash, \
             attempt_no, deadline_left_ms, detail FROM events \
             WHERE job_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
        )
        .bind(job_id)
        .bind(after)
        .bind(i64::from(limit.clamp(1, 1000)))
        .fetch_all(&self.reader)
        .await?;
        rows.iter().map(event_from_row).collect()
    }

    /// The audit log of decisions over a job, oldest first.
    pub async fn decisions(&self, job_id: &str) -> Result<Vec<DecisionRecord>, LedgerError> {
        let rows = sqlx::query(
            "SELECT id, job_id, decided_at, actor, decision, seen_epoch, new_epoch, from_state, \
             to_state, reason, evidence FROM decisions WHERE job_id = $1 ORDER BY id",
        )
        .bind(job_id)
        .fetch_all(&self.reader)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(DecisionRecord {
                    id: row.try_get("id")?,
                    job_id: row.try_get("job_id")?,
                    decided_at: row.try_get("decided_at")?,
                    actor: row.try_get("actor")?,
                    decision: row.try_get("decision")?,
                    seen_epoch: row.try_get("seen_epoch")?,
                    new_epoch: row.try_get("new_epoch")?,
                    from_state: row.try_get("from_state")?,
                    to_state: row.try_get("to_state")?,
                    reason: row.try_get("reason")?,
                    evidence: row.try_get("evidence")?,
                })
            })
            .collect()
    }

    /// Jobs newest first, filtered by tenant and state, one keyset page at a time.
    pub async fn list_jobs(&self, filter: &JobFilter) -> Result<JobPage, LedgerError> {
        let limit = filter.limit.clamp(1, 500);
        let Some((sql, args)) = list_jobs_statement(filter) else {
            return Ok(JobPage {
                jobs: Vec::new(),
                next: None,
            });
        };
        let mut query = sqlx::query(&sql);
        for arg in &args {
            query = query.bind(arg.as_str());
        }
        // One more than the page, to know whether another page follows.
        let rows = query
            .bind(i64::from(limit) + 1)
            .fetch_all(&self.reader)
            .await?;
        let mut jobs = rows
            .iter()
            .map(job_from_row)
            .collect::<Result<Vec<_>, _>>()?;
        let next = if jobs.len() > limit as usize {
            jobs.truncate(limit as usize);
            jobs.last().map(|j| j.job_id.clone())
        } else {
            None
        };
        Ok(JobPage { jobs, next })
    }

    /// How many jobs are in each state (all seven, zeros included), drill jobs counted or not.
    pub async fn count_by_state(
        &self,
        tenant: Option<&str>,
        drills: super::Drills,
    ) -> Result<Vec<(JobState, i64)>, LedgerError> {
        let rows = match tenant {
            Some(tenant) => {
                sqlx::query(
                    "SELECT state, COUNT(*) AS n FROM jobs WHERE tenant = $1 GROUP BY state",
                )
                .bind(tenant)
                .fetch_all(&self.reader)
                .await?
            }
            None => {
                sqlx::query("SELECT state, COUNT(*) AS n FROM jobs GROUP BY state")
                    .fetch_all(&self.reader)
                    .await?
            }
        };
        // Taken off rather than filtered: the index alone answers the counts.
        let drill_jobs = match drills {
            super::Drills::Counted => Vec::new(),
            super::Drills::Apart => self.drill_jobs_by_state(tenant).await?,
        };
        let mut counts: Vec<(JobState, i64)> = JobState::ALL.iter().map(|s| (*s, 0)).collect();
        for (state, n) in state_counts(&rows)? {
            if let Some(slot) = counts.iter_mut().find(|(s, _)| *s == state) {
                slot.1 = without(n, &drill_jobs, state);
            }
        }
        Ok(counts)
    }

    /// How many outbox rows wait to be sent.
    pub async fn outbox_pending(&self) -> Result<i64, LedgerError> {
        Ok(
            sqlx::query_scalar("SELECT COUNT(*) FROM outbox WHERE dispatched_at IS NULL")
                .fetch_one(&self.reader)
                .await?,
        )
    }
}

/// The statement of [`Ledger::list_jobs`] for `filter`, with its text arguments in order; the
/// page's size binds last. `None` when the filter matches no job (a scope of no tenant).
pub fn list_jobs_statement(filter: &JobFilter) -> Option<(String, Vec<String>)> {
    let mut conditions = Vec::new();
    let mut args: Vec<String> = Vec::new();
    if let Some(tenant) = &filter.tenant {
        args.push(tenant.clone());
        conditions.push(format!("tenant = ${}", args.len()));
    }
    if let Some(tenants) = &filter.tenants {
        if tenants.is_empty() {
            return None;
        }
        conditions.push(tenant_in(&mut args, tenants));
    }
    if let Some(state) = filter.state {
        args.push(state.as_str().to_owned());
        conditions.push(format!("state = ${}", args.len()));
    }
    if let Some(before) = &filter.before {
        args.push(before.clone());
        conditions.push(format!("job_id < ${}", args.len()));
    }
    if let Some(from) = &filter.from_id {
        args.push(from.clone());
        conditions.push(format!("job_id >= ${}", args.len()));
    }
    if let Some(to) = &filter.to_id {
        args.push(to.clone());
        conditions.push(format!("job_id < ${}", args.len()));
    }
    if let Some(prefix) = filter.key_prefix.as_ref().filter(|p| !p.is_empty()) {
        args.push(prefix.clone());
        conditions.push(format!(
            "substr(idempotency_key, 1, {}) = ${}",
            prefix.chars().count(),
            args.len()
        ));
    }
    if let Some(worker) = &filter.worker {
        args.push(worker.clone());
        conditions.push(format!(
            "EXISTS (SELECT 1 FROM attempts a WHERE a.job_id = jobs.job_id \
             AND a.worker_id = ${})",
            args.len()
        ));
    }
    if let Some(code) = &filter.error_code {
        args.push(code.clone());
        conditions.push(format!("error_code = ${}", args.len()));
    }
    if filter.redelivered {
        conditions.push(
            "EXISTS (SELECT 1 FROM events e WHERE e.job_id = jobs.job_id \
             AND e.kind = 'delivery_received' AND e.receive_count > 1)"
                .into(),
        );
    }
    if filter.stale_rejected {
        conditions.push(
            "EXISTS (SELECT 1 FROM events e WHERE e.job_id = jobs.job_id \
             AND e.kind = 'result_rejected')"
                .into(),
        );
    }
    if filter.without_drills {
        conditions.push("drill_run IS NULL".into());
    }
    if let Some(owner) = &filter.owner {
        args.push(owner.clone());
        conditions.push(format!("owner_id = ${}", args.len()));
    }
    let page = format!("${}", args.len() + 1);
    // The jobs matching `conditions`, newest first, a page of them.
    let newest = |conditions: &[String]| {
        let mut sql = format!("SELECT {JOB_COLUMNS} FROM jobs");
        if !conditions.is_empty() {
            sql.push_str(" WHERE ");
            sql.push_str(&conditions.join(" AND "));
        }
        sql.push_str(&format!(" ORDER BY job_id DESC LIMIT {page}"));
        sql
    };
    let by_tenant = filter.tenant.is_some() || filter.tenants.is_some();
    let sql = if by_tenant && filter.state.is_none() {
        // A tenant's jobs newest first, whatever their state: newest first in each state
        // through `jobs_tenant_state_id`, each read stopping at the page's size, then
        // merged. The ledger keeps no index of a tenant's jobs by id alone: each would be
        // one more entry written at every change of a job's state (migration 0017).
        let branches: Vec<String> = JobState::ALL
            .iter()
            .map(|state| {
                let mut in_state = conditions.clone();
                in_state.push(format!("state = '{}'", state.as_str()));
                format!(
                    "SELECT * FROM ({}) AS in_{}",
                    newest(&in_state),
                    state.as_str()
                )
            })
            .collect();
        format!(
            "{} ORDER BY job_id DESC LIMIT {page}",
            branches.join(" UNION ALL ")
        )
    } else {
        newest(&conditions)
    };
    Some((sql, args))
}

/// `tenant IN ($k, …)` for `tenants`, whose values are pushed onto `args` and numbered by
/// their places there (so `args` holds every parameter before it, in order).
pub(super) fn tenant_in(args: &mut Vec<String>, tenants: &[String]) -> String {
    let marks: Vec<String> = tenants
        .iter()
        .map(|t| {
            args.push(t.clone());
            format!("${}", args.len())
        })
        .collect();
    format!("tenant IN ({})", marks.join(", "))
}

/// A stored JSON text column, read back.
pub(crate) fn parse_json(text: &str) -> Result<Value, LedgerError> {
    serde_json::from_str(text).map_err(|e| LedgerError::Corrupt(e.to_string()))
}

/// Rows of `(state, n)`, each state parsed.
pub(super) fn state_counts(
    rows: &[sqlx::any::AnyRow],
) -> Result<Vec<(JobState, i64)>, LedgerError> {
    rows.iter()
        .map(|row| {
            let state: String = row.try_get("state")?;
            let state = state
                .parse()
                .map_err(|e: crate::job::ParseStateError| LedgerError::Corrupt(e.to_string()))?;
            Ok((state, row.try_get("n")?))
        })
        .collect()
}

/// `n` jobs in `state` less the drill jobs among them (never below zero: the two counts are
/// read one after the other).
pub(super) fn without(
    n: i64,
    drill_jobs: &[(crate::job::JobState, i64)],
    state: crate::job::JobState,
) -> i64 {
    let drills = drill_jobs.iter().find(|d| d.0 == state).map_or(0, |d| d.1);
    (n - drills).max(0)
}
