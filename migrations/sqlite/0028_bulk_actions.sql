-- Actions on every job a filter matched: the action as previewed (its exact set of jobs, each
-- with the epoch and state it had then), confirmed with a reason, and run in the background in
-- chunks, each job fenced at what it was previewed at. Progress survives a restart.
CREATE TABLE bulk_actions (
    bulk_id      INTEGER PRIMARY KEY AUTOINCREMENT,
    action       TEXT NOT NULL,
    filter       TEXT NOT NULL,
    actor        TEXT NOT NULL,
    tenants      TEXT,
    status       TEXT NOT NULL,
    total        INTEGER NOT NULL,
    reason       TEXT,
    created_at   INTEGER NOT NULL,
    confirmed_at INTEGER,
    finished_at  INTEGER,
    applied      INTEGER NOT NULL DEFAULT 0,
    moved_on     INTEGER NOT NULL DEFAULT 0,
    refused      INTEGER NOT NULL DEFAULT 0,
    -- Which process acts on it, until when (several may run the runner).
    lease_by     TEXT,
    lease_until  INTEGER
);
CREATE INDEX bulk_actions_status ON bulk_actions (status);

CREATE TABLE bulk_action_jobs (
    bulk_id INTEGER NOT NULL REFERENCES bulk_actions (bulk_id) ON DELETE CASCADE,
    job_id  TEXT NOT NULL,
    epoch   INTEGER NOT NULL,
    state   TEXT NOT NULL,
    tenant  TEXT NOT NULL,
    -- The events of its timeline when previewed: running a finished job again from that view
    -- makes one new job, however often it is tried.
    seen    INTEGER NOT NULL,
    outcome TEXT,
    PRIMARY KEY (bulk_id, job_id)
);

-- The entries of one bulk action and its jobs' (subject `bulk:<id>`).
CREATE INDEX audit_log_subject ON audit_log (subject) WHERE subject IS NOT NULL;
