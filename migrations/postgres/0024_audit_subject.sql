-- What an action on the deployment itself acted on, when it is not a job: the operator an
-- admin added, changed, disabled or reset, the API token revoked (by its id).
ALTER TABLE audit_log ADD COLUMN subject TEXT;
