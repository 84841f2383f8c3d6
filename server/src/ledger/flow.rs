//! Flow control's shared state: what the fleet learned of each provider limit
//! (`provider_limits`, `provider_refusals`), tenants' shares of dispatch (`tenant_shares`),
//! and what the dispatcher reads to keep the queue short and tenants' turns fair (the fleet's
//! capacity from workers' reports, capped tenants' jobs in flight). Migration 0019.
//!
//! Must not decide anything: the worker's gate ([`crate::provider::limits`]) and the
//! dispatcher ([`crate::worker::dispatcher`]) do, from what these functions say.

use std::collections::HashMap;

use sqlx::Row;

use super::{Ledger, LedgerError};

/// How long a minute's refusal count is kept.
const REFUSALS_KEPT_US: i64 = 24 * 3_600_000_000;
const MINUTE_US: i64 = 60_000_000;

/// What one process learned of a limit since it last said: its refusals, the pause they asked
/// for (from now), and what it runs at now.
#[derive(Debug, Clone, PartialEq)]
pub struct LimitReport {
    pub provider: String,
    pub model: String,
    pub refusals: u64,
    /// The pause still to run, and which limit asked for it.
    pub paused_for_us: Option<i64>,
    pub limit_name: Option<String>,
    pub limited_us: i64,
    pub concurrency: i64,
    pub rate_per_s: Option<f64>,
}

/// A provider limit as the fleet knows it.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderLimit {
    pub provider: String,
    pub model: String,
    /// Until when no call starts (database clock, µs), if that is still ahead.
    pub limited_until: Option<i64>,
    pub limit_name: Option<String>,
    pub concurrency: Option<i64>,
    pub rate_per_s: Option<f64>,
    /// Refusals and time limited, summed over every process since the limit was first met.
    pub refusals: i64,
    pub limited_us: i64,
    /// Refusals in the last five minutes.
    pub recent_refusals: i64,
    pub updated_at: i64,
    pub updated_by: String,
}

/// A tenant's share of dispatch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantShare {
    pub tenant: String,
    /// Turns relative to a tenant of weight 1.
    pub weight: i64,
    /// Jobs of the tenant sent or running at once, at most.
    pub max_in_flight: Option<i64>,
}

/// A tenant's jobs as flow control sees them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TenantFlow {
    pub tenant: String,
    /// Sends waiting in the outbox for their turn (or for their time, a backoff or a
    /// provider's reset).
    pub waiting: i64,
    /// Of those, the ones due now.
    pub due: i64,
    pub running: i64,
}

impl Ledger {
    /// Adds what `worker_id` learned to the fleet's record of each limit: refusals (also by
    /// minute), a pause that ends later than the one on record, the concurrency and rate.
    pub async fn report_limits(
        &self,
        worker_id: &str,
        reports: &[LimitReport],
    ) -> Result<(), LedgerError> {
        if reports.is_empty() {
            return Ok(());
        }
        let now = self.now_us().await?;
        let minute = now - now.rem_euclid(MINUTE_US);
        let mut tx = self.begin_write().await?;
        for r in reports {
            let until = r.paused_for_us.map(|left| now + left);
            sqlx::query(
                "INSERT INTO provider_limits (provider, model, limited_until, limit_name, \
                 concurrency, rate_per_s, refusals, limited_us, updated_at, updated_by) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
                 ON CONFLICT (provider, model) DO UPDATE SET \
                 limit_name = CASE WHEN excluded.limited_until IS NOT NULL AND \
                     (provider_limits.limited_until IS NULL \
                      OR excluded.limited_until > provider_limits.limited_until) \
                     THEN excluded.limit_name ELSE provider_limits.limit_name END, \
                 limited_until = CASE WHEN provider_limits.limited_until IS NULL \
                     OR excluded.limited_until > provider_limits.limited_until \
                     THEN COALESCE(excluded.limited_until, provider_limits.limited_until) \
                     ELSE provider_limits.limited_until END, \
                 concurrency = excluded.concurrency, \
                 rate_per_s = COALESCE(excluded.rate_per_s, provider_limits.rate_per_s), \
                 refusals = provider_limits.refusals + excluded.refusals, \
                 limited_us = provider_limits.limited_us + excluded.limited_us, \
                 updated_at = excluded.updated_at, updated_by = excluded.updated_by",
            )
            .bind(&r.provider)
            .bind(&r.model)
            .bind(until)
            .bind(r.limit_name.as_deref())
            .bind(r.concurrency)
            .bind(r.rate_per_s)
            .bind(i64::try_from(r.refusals).unwrap_or(i64::MAX))
            .bind(r.limited_us)
            .bind(now)
            .bind(worker_id)
            .execute(&mut *tx)
            .await?;
            if r.refusals > 0 {
                sqlx::query(
                    "INSERT INTO provider_refusals (provider, model, minute, n) \
                     VALUES ($1, $2, $3, $4) ON CONFLICT (provider, model, minute) \
                     DO UPDATE SET n = provider_refusals.n + excluded.n",
                )
                .bind(&r.provider)
                .bind(&r.model)
                .bind(minute)
                .bind(i64::try_from(r.refusals).unwrap_or(i64::MAX))
                .execute(&mut *tx)
                .await?;
            }
        }
        sqlx::query("DELETE FROM provider_refusals WHERE minute < $1")
            .bind(now - REFUSALS_KEPT_US)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// The pauses the fleet has on record for `provider`'s limits that are still running:
    /// each model, how long it has left (µs) and which limit asked for it.
    pub async fn fleet_pauses(
        &self,
        provider: &str,
    ) -> Result<Vec<(String, i64, String)>, LedgerError> {
        let now = self.now_us().await?;
        let rows = sqlx::query(
            "SELECT model, limited_until, limit_name FROM provider_limits \
             WHERE provider = $1 AND limited_until > $2",
        )
        .bind(provider)
        .bind(now)
        .fetch_all(&self.reader)
        .await?;
        rows.iter()
            .map(|row| {
                let until: i64 = row.try_get("limited_until")?;
                let name: Option<String> = row.try_get("limit_name")?;
                Ok((
                    row.try_get("model")?,
                    until - now,
                    name.unwrap_or_else(|| "fleet".to_owned()),
                ))
            })
            .collect()
    }

    /// Every provider limit the fleet has met, with its refusals of the last five minutes.
    pub async fn provider_limits(&self) -> Result<Vec<ProviderLimit>, LedgerError> {
        let now = self.now_us().await?;
        let rows = sqlx::query(
            "SELECT l.provider, l.model, l.limited_until, l.limit_name, l.concurrency, \
             l.rate_per_s, l.refusals, l.limited_us, l.updated_at, l.updated_by, \
             (SELECT CAST(COALESCE(SUM(r.n), 0) AS BIGINT) FROM provider_refusals r \
              WHERE r.provider = l.provider AND r.model = l.model AND r.minute > $1) AS recent \
             FROM provider_limits l ORDER BY l.provider, l.model",
        )
        .bind(now - 5 * MINUTE_US)
        .fetch_all(&self.reader)
        .await?;
        rows.iter()
            .map(|row| {
                let until: Option<i64> = row.try_get("limited_until")?;
                Ok(ProviderLimit {
                    provider: row.try_get("provider")?,
                    model: row.try_get("model")?,
                    limited_until: until.filter(|u| *u > now),
                    limit_name: row.try_get("limit_name")?,
                    concurrency: row.try_get("concurrency")?,
                    rate_per_s: row.try_get("rate_per_s")?,
                    refusals: row.try_get("refusals")?,
                    limited_us: row.try_get("limited_us")?,
                    recent_refusals: row.try_get("recent")?,
                    updated_at: row.try_get("updated_at")?,
                    updated_by: row.try_get("updated_by")?,
                })
            })
            .collect()
    }

    /// What the live workers of `queue` (as `describe()` names it) can hold at once, by their
    /// latest reports (a worker silent for `silent_after` is not counted): each one's
    /// capacity, or its width where it said none.
    pub async fn fleet_capacity(
        &self,
        queue: &str,
        silent_after: std::time::Duration,
    ) -> Result<i64, LedgerError> {
        let now = self.now_us().await?;
        let quiet = now - i64::try_from(silent_after.as_micros()).unwrap_or(i64::MAX);
        Ok(sqlx::query_scalar(
            "SELECT CAST(COALESCE(SUM(COALESCE(capacity, max_in_flight)), 0) AS BIGINT) FROM workers \
             WHERE queue = $1 AND stopped_at IS NULL AND seen_at >= $2",
        )
        .bind(queue)
        .bind(quiet)
        .fetch_one(&self.reader)
        .await?)
    }

    /// Replaces the tenants' shares with `shares` (a process's settings).
    pub async fn set_tenant_shares(&self, shares: &[TenantShare]) -> Result<(), LedgerError> {
        let mut tx = self.begin_write().await?;
        sqlx::query("DELETE FROM tenant_shares")
            .execute(&mut *tx)
            .await?;
        for share in shares {
            sqlx::query(
                "INSERT INTO tenant_shares (tenant, weight, max_in_flight) VALUES ($1, $2, $3)",
            )
            .bind(&share.tenant)
            .bind(share.weight)
            .bind(share.max_in_flight)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// The tenants' shares on record.
    pub async fn tenant_shares(&self) -> Result<Vec<TenantShare>, LedgerError> {
        let rows =
            sqlx::query("SELECT tenant, weight, max_in_flight FROM tenant_shares ORDER BY tenant")
                .fetch_all(&self.reader)
                .await?;
        rows.iter()
            .map(|row| {
                Ok(TenantShare {
                    tenant: row.try_get("tenant")?,
                    weight: row.try_get("weight")?,
                    max_in_flight: row.try_get("max_in_flight")?,
                })
            })
            .collect()
    }

    /// A tenant's jobs in flight, for its cap: running, or sent and not yet claimed (workable,
    /// with no send waiting in the outbox).
    pub async fn tenant_in_flight(&self, tenant: &str) -> Result<i64, LedgerError> {
        Ok(sqlx::query_scalar(
            "SELECT COUNT(*) FROM jobs j WHERE j.tenant = $1 AND (j.state = 'running' \
             OR (j.state IN ('ready', 'retry_authorized') AND NOT EXISTS (SELECT 1 FROM outbox o \
                 WHERE o.job_id = j.job_id AND o.dispatched_at IS NULL)))",
        )
        .bind(tenant)
        .fetch_one(&self.reader)
        .await?)
    }

    /// Per tenant (of `tenants`, or every one): sends waiting in the outbox (and how many of
    /// them are due) and jobs running, drill jobs left out.
    pub async fn tenant_flow(
        &self,
        tenants: Option<&[String]>,
    ) -> Result<Vec<TenantFlow>, LedgerError> {
        let now = self.now_us().await?;
        let waiting = sqlx::query(
            "SELECT tenant, COUNT(*) AS n, \
             CAST(SUM(CASE WHEN available_at <= $1 THEN 1 ELSE 0 END) AS BIGINT) AS due FROM outbox \
             WHERE dispatched_at IS NULL AND tenant IS NOT NULL AND tenant <> 'drill' \
             GROUP BY tenant",
        )
        .bind(now)
        .fetch_all(&self.reader)
        .await?;
        let running = sqlx::query(
            "SELECT tenant, COUNT(*) AS n FROM jobs WHERE state = 'running' \
             AND drill_run IS NULL GROUP BY tenant",
        )
        .fetch_all(&self.reader)
        .await?;
        let mut flows: HashMap<String, TenantFlow> = HashMap::new();
        for row in &waiting {
            let tenant: String = row.try_get("tenant")?;
            let flow = flows.entry(tenant.clone()).or_default();
            flow.tenant = tenant;
            flow.waiting = row.try_get("n")?;
            flow.due = row.try_get::<Option<i64>, _>("due")?.unwrap_or(0);
        }
        for row in &running {
            let tenant: String = row.try_get("tenant")?;
            let flow = flows.entry(tenant.clone()).or_default();
            flow.tenant = tenant;
            flow.running = row.try_get("n")?;
        }
        let mut flows: Vec<TenantFlow> = flows
            .into_values()
            .filter(|f| tenants.is_none_or(|t| t.contains(&f.tenant)))
            .collect();
        flows.sort_by(|a, b| a.tenant.cmp(&b.tenant));
        Ok(flows)
    }
}
