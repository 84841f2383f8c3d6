-- Two indexes fewer on `jobs`, each an entry written at every change of a job's state.
--
-- An update that changes `state` (a claim, an accept) cannot stay on its page, and then writes
-- a new entry into every index of the table, whatever columns the index holds. Two of them had
-- readers that do as well without them:
-- * `jobs_tenant_id` (tenant, job_id) served a tenant's jobs newest first. The list now reads
--   `jobs_tenant_state_id` (tenant, state, job_id) once per state, newest first, each read
--   stopping at the page's size, and merges them (`list_jobs_statement` in
--   server/src/ledger/read.rs).
-- * `jobs_idempotency_key` served the console's search by key across tenants. The search now
--   finds the ledger's tenants by a skip scan of the tenant's index and looks the key up in
--   each through `jobs_tenant_idempotency_key_key`, the key's own unique index.
-- In the pipeline benchmark's drained pass, the two cost about 8 % of the jobs a second
-- (docs/benchmarks.md). A suite test reads both backends' plans of both reads.
-- Kept in lockstep with ../sqlite/0017_job_row_indexes.sql.
DROP INDEX jobs_tenant_id;
DROP INDEX jobs_idempotency_key;
