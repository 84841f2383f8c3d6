//! Generated data for the console benchmark: many jobs in every state, written by one
//! statement, and fresh planner statistics.

use super::dialect::Backend;
use super::statements::render;
use super::{Ledger, LedgerError};

/// Jobs `1..=$2` of tenant `$1`, spread over the last 30 days (ids and creation times rise
/// together), every row within the schema's checks; terminal ones finished up to ten minutes
/// after they were created.
const SEED_JOBS: &str = "INSERT INTO jobs (job_id, tenant, idempotency_key, request_digest, \
     input_ref, contract_version, state, owner_epoch, owner_id, owner_until, deadline_at, \
     attempt_count, budget_used, max_attempts, result_ref, created_at, updated_at, \
     terminal_at, next_event_seq) \
     SELECT {id}, $1, 'seed-' || x, 'd', 'seed', 'seed', \
     CASE x % 7 WHEN 0 THEN 'ready' WHEN 1 THEN 'running' WHEN 2 THEN 'unknown' \
         WHEN 3 THEN 'retry_authorized' WHEN 4 THEN 'succeeded' WHEN 5 THEN 'failed_terminal' \
         ELSE 'expired' END, \
     CASE WHEN x % 7 = 0 THEN 0 ELSE 1 END, \
     CASE WHEN x % 7 = 1 THEN 'seed' END, CASE WHEN x % 7 = 1 THEN {now} + 60000000 END, \
     {created} + 86400000000, CASE WHEN x % 7 IN (0, 1, 3) THEN 0 ELSE 1 END, \
     CASE WHEN x % 7 IN (0, 1, 3) THEN 0 ELSE 1 END, 3, \
     CASE WHEN x % 7 = 4 THEN 'res_seed' END, {created}, {created}, \
     CASE WHEN x % 7 >= 4 THEN {least}({created} + (x % 600) * 1000000, {now}) END, 1 \
     FROM ({series}) AS s";

impl Ledger {
    /// Writes `n` generated jobs for `tenant` (see `fenceline bench console`).
    pub async fn seed_generated_jobs(&self, tenant: &str, n: u64) -> Result<(), LedgerError> {
        // Ids sort like real ones (time-ordered): `job_` and a UUID made of the row number.
        let (series, id) = match self.backend {
            Backend::Postgres => (
                "SELECT x FROM generate_series(1, $2::BIGINT) AS x",
                "'job_' || lpad(to_hex(x), 8, '0') || '-0000-7000-8000-' || lpad(to_hex(x), 12, '0')",
            ),
            Backend::Sqlite => (
                "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < $2) \
                 SELECT x FROM c",
                "'job_' || printf('%08x', x) || '-0000-7000-8000-' || printf('%012x', x)",
            ),
        };
        let template = SEED_JOBS
            .replace("{created}", "({now} - ($2 - x) * (2592000000000 / $2))")
            .replace("{series}", series)
            .replace("{id}", id);
        sqlx::query(&render(self.backend, &template))
            .bind(tenant)
            .bind(n as i64)
            .execute(&self.writer)
            .await?;
        Ok(())
    }
}
