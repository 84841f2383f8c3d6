-- Two indexes fewer on `jobs`, as on PostgreSQL (../postgres/0017_job_row_indexes.sql): a
-- tenant's jobs newest first read `jobs_tenant_state_id` once per state and merge, and the
-- search by key across tenants looks the key up in each tenant through the key's unique
-- index. SQLite rewrites only the index entries whose columns change, so here the two cost an
-- entry each at a job's creation only; they go so that both backends read the same way.
DROP INDEX jobs_tenant_id;
DROP INDEX jobs_idempotency_key;
