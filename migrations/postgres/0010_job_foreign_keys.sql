-- Indexes behind the two foreign keys to jobs that had none: deleting a job (retention, or a
-- benchmark forgetting its run) cascades into outbox and results, and without an index each
-- deleted job scanned both tables whole — 10,000 jobs took about 10 s on PostgreSQL.
-- Kept in lockstep with ../sqlite/0010_job_foreign_keys.sql.
CREATE INDEX outbox_job ON outbox (job_id);
CREATE INDEX results_job ON results (job_id);
