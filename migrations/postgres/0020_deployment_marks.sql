-- What a database keeps about its own deployment. Kept in lockstep with
-- ../sqlite/0020_deployment_marks.sql.

-- The batch each group-commit runner committed last, under a name of its own (its process and
-- its number): a runner whose COMMIT got no answer (the connection lost as it committed)
-- reads its row to learn whether the batch is in, before any of its writes is tried again.
-- One row a runner; rows of runners gone quiet go with retention.
CREATE TABLE commit_marks (
    runner TEXT PRIMARY KEY,
    batch BIGINT NOT NULL,
    at BIGINT NOT NULL
);

-- The environment the database serves, once a production deployment has said so (by
-- `fenceline migrate --environment production` or a production process's start): drills
-- refuse to run against it, whatever their own process is told.
CREATE TABLE deployment (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    environment TEXT NOT NULL CHECK (environment IN ('production', 'development')),
    marked_at BIGINT NOT NULL
);

-- Keys every process of the deployment shares, made by the first process that needs one:
-- `form` signs the sign-in form's cookie.
CREATE TABLE deployment_keys (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

-- The evidence a decision named (the provider's reference for the call), beside the decision's
-- reason in the audit log: an incident review reads both in one place.
ALTER TABLE audit_log ADD COLUMN evidence TEXT;
