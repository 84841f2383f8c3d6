-- The job an action made (running a finished job again): its audit entry names it beside the
-- job it was made from.
ALTER TABLE audit_log ADD COLUMN new_job_id TEXT;
