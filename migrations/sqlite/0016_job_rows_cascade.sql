-- Nothing changes on SQLite. PostgreSQL's foreign keys from events, attempts, results,
-- job_inputs and outbox to jobs gave way to a trigger that deletes a deleted job's rows
-- (../postgres/0016_job_rows_cascade.sql): there each check locked the job's row. SQLite
-- checks a foreign key by one lookup in the primary key of jobs and locks nothing, and the
-- pipeline measured the same with its checks off, so its foreign keys and their cascades stay.
SELECT 1;
