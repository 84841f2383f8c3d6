-- A job's rows in events, attempts, results, job_inputs and outbox are written only inside a
-- transaction that first writes the job's own row (its insert, or the update that fences the
-- write and reserves the events' numbers) or locks it (a re-dispatch's outbox row). That row
-- stays locked until the commit, so the job exists when they do. The foreign keys checked it
-- again for every row: a lookup and a share lock of the job's row by a trigger's query, twelve
-- a job on the benchmark's path, about an eighth of the pipeline's time. They go. Deleting a
-- job (retention, a benchmark forgetting its run) still takes every row it owns, in the same
-- statement, by the trigger below. `decisions` keeps its foreign key: a decision is rare, and
-- written by an operator. SQLite keeps its foreign keys (../sqlite/0016_job_rows_cascade.sql).
ALTER TABLE events DROP CONSTRAINT events_job_id_fkey;
ALTER TABLE attempts DROP CONSTRAINT attempts_job_id_fkey;
ALTER TABLE results DROP CONSTRAINT results_job_id_fkey;
ALTER TABLE job_inputs DROP CONSTRAINT job_inputs_job_id_fkey;
ALTER TABLE outbox DROP CONSTRAINT outbox_job_id_fkey;

CREATE FUNCTION fl_jobs_gone() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM events WHERE job_id IN (SELECT job_id FROM gone);
    DELETE FROM attempts WHERE job_id IN (SELECT job_id FROM gone);
    DELETE FROM results WHERE job_id IN (SELECT job_id FROM gone);
    DELETE FROM job_inputs WHERE job_id IN (SELECT job_id FROM gone);
    DELETE FROM outbox WHERE job_id IN (SELECT job_id FROM gone);
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_gone AFTER DELETE ON jobs REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION fl_jobs_gone();
