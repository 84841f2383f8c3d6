-- The audit log: every action taken on a job by an operator, a policy or the system's
-- decisions, with the epoch the actor saw and the state before and after. Kept in lockstep
-- with ../postgres/0006_audit.sql. No foreign key: entries outlive the jobs retention prunes.

CREATE TABLE audit_log (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    at           INTEGER NOT NULL,
    actor        TEXT NOT NULL,
    action       TEXT NOT NULL,
    job_id       TEXT,
    tenant       TEXT,
    seen_epoch   INTEGER,
    new_epoch    INTEGER,
    state_before TEXT,
    state_after  TEXT,
    reason       TEXT NOT NULL CHECK (length(reason) BETWEEN 1 AND 2000)
);
CREATE INDEX audit_log_at ON audit_log (id DESC);
CREATE INDEX audit_log_job ON audit_log (job_id, id);
CREATE INDEX audit_log_actor ON audit_log (actor, id);
