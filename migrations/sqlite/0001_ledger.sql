-- The job ledger (SQLite). Kept in lockstep with ../postgres/0001_ledger.sql.
-- Times are microseconds since the Unix epoch, always from the database clock
-- (CAST(unixepoch('subsec') * 1000000 AS INTEGER)).

CREATE TABLE jobs (
    job_id           TEXT PRIMARY KEY,
    tenant           TEXT NOT NULL,
    idempotency_key  TEXT NOT NULL,
    request_digest   TEXT NOT NULL,
    input_ref        TEXT NOT NULL,
    contract_version TEXT NOT NULL,
    state            TEXT NOT NULL CHECK (state IN
        ('ready', 'running', 'unknown', 'retry_authorized', 'succeeded', 'failed_terminal', 'expired')),
    owner_epoch      INTEGER NOT NULL DEFAULT 0 CHECK (owner_epoch >= 0),
    owner_id         TEXT,
    owner_until      INTEGER,
    deadline_at      INTEGER NOT NULL,
    attempt_count    INTEGER NOT NULL DEFAULT 0,
    max_attempts     INTEGER NOT NULL CHECK (max_attempts BETWEEN 1 AND 100),
    retry_at         INTEGER,
    result_ref       TEXT,
    error_code       TEXT,
    replay_policy    TEXT NOT NULL DEFAULT 'manual' CHECK (replay_policy IN ('manual', 'replay_on_unknown')),
    recovery_reason  TEXT,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    terminal_at      INTEGER,
    next_event_seq   INTEGER NOT NULL DEFAULT 1,
    -- The attempt in flight under the current owner: set by attempt start, cleared by its outcome.
    pending_attempt  INTEGER,
    UNIQUE (tenant, idempotency_key),
    CHECK (attempt_count BETWEEN 0 AND max_attempts),
    CHECK ((state IN ('succeeded', 'failed_terminal', 'expired')) = (terminal_at IS NOT NULL)),
    CHECK (state <> 'succeeded' OR result_ref IS NOT NULL),
    CHECK (state <> 'running' OR (owner_id IS NOT NULL AND owner_until IS NOT NULL AND owner_epoch > 0)),
    CHECK (pending_attempt IS NULL OR (state = 'running' AND pending_attempt = attempt_count))
);

CREATE INDEX jobs_state_id ON jobs (state, job_id);
CREATE INDEX jobs_tenant_id ON jobs (tenant, job_id);
CREATE INDEX jobs_tenant_state_id ON jobs (tenant, state, job_id);
CREATE INDEX jobs_lease_due ON jobs (owner_until) WHERE state = 'running';
CREATE INDEX jobs_deadline_due ON jobs (deadline_at)
    WHERE state IN ('ready', 'running', 'unknown', 'retry_authorized');

-- The transition table, a third time: the database refuses what the Rust enum and the guarded
-- SQL already refuse, even from a hand-written UPDATE.
CREATE TRIGGER jobs_epoch_grows BEFORE UPDATE OF owner_epoch ON jobs
WHEN NEW.owner_epoch < OLD.owner_epoch
BEGIN SELECT RAISE(ABORT, 'owner_epoch only grows'); END;

CREATE TRIGGER jobs_attempts_cumulative BEFORE UPDATE OF attempt_count ON jobs
WHEN NEW.attempt_count < OLD.attempt_count
BEGIN SELECT RAISE(ABORT, 'attempt_count is cumulative'); END;

CREATE TRIGGER jobs_budget_fixed BEFORE UPDATE OF deadline_at, max_attempts ON jobs
WHEN NEW.deadline_at <> OLD.deadline_at OR NEW.max_attempts <> OLD.max_attempts
BEGIN SELECT RAISE(ABORT, 'deadline and attempt budget are fixed at creation'); END;

CREATE TRIGGER jobs_terminal_final BEFORE UPDATE OF state, owner_epoch, result_ref, terminal_at ON jobs
WHEN OLD.state IN ('succeeded', 'failed_terminal', 'expired') AND (
    NEW.state <> OLD.state OR NEW.owner_epoch <> OLD.owner_epoch
    OR NEW.result_ref IS NOT OLD.result_ref OR NEW.terminal_at IS NOT OLD.terminal_at)
BEGIN SELECT RAISE(ABORT, 'terminal states are final'); END;

CREATE TRIGGER jobs_transition_table BEFORE UPDATE OF state ON jobs
WHEN NEW.state <> OLD.state AND (OLD.state || '>' || NEW.state) NOT IN (
    'ready>running', 'ready>expired',
    'running>succeeded', 'running>retry_authorized', 'running>failed_terminal',
    'running>unknown', 'running>expired',
    'unknown>succeeded', 'unknown>failed_terminal', 'unknown>retry_authorized', 'unknown>expired',
    'retry_authorized>running', 'retry_authorized>failed_terminal', 'retry_authorized>expired')
BEGIN SELECT RAISE(ABORT, 'illegal job transition'); END;

CREATE TABLE job_inputs (
    job_id TEXT PRIMARY KEY REFERENCES jobs (job_id) ON DELETE CASCADE,
    input  TEXT NOT NULL,
    model  TEXT NOT NULL
);

CREATE TABLE attempts (
    job_id              TEXT NOT NULL REFERENCES jobs (job_id) ON DELETE CASCADE,
    attempt_no          INTEGER NOT NULL CHECK (attempt_no >= 1),
    epoch               INTEGER NOT NULL,
    worker_id           TEXT NOT NULL,
    provider            TEXT NOT NULL,
    provider_request_id TEXT,
    started_at          INTEGER NOT NULL,
    finished_at         INTEGER,
    outcome             TEXT NOT NULL DEFAULT 'pending' CHECK (outcome IN
        ('pending', 'succeeded', 'failed_retryable', 'failed_fatal', 'lost', 'stale_discarded')),
    error_code          TEXT,
    usage               TEXT,
    result_ref          TEXT,
    PRIMARY KEY (job_id, attempt_no)
);

CREATE INDEX attempts_pending ON attempts (job_id) WHERE outcome = 'pending';

CREATE TABLE results (
    result_ref TEXT PRIMARY KEY,
    job_id     TEXT NOT NULL REFERENCES jobs (job_id) ON DELETE CASCADE,
    attempt_no INTEGER,
    epoch      INTEGER NOT NULL,
    status     TEXT NOT NULL CHECK (status IN ('accepted', 'stale')),
    body       TEXT NOT NULL,
    digest     TEXT NOT NULL,
    created_at INTEGER NOT NULL
);

-- Invariant 1, in the schema: at most one accepted result per job, ever.
CREATE UNIQUE INDEX results_one_accepted ON results (job_id) WHERE status = 'accepted';

CREATE TABLE events (
    job_id           TEXT NOT NULL REFERENCES jobs (job_id) ON DELETE CASCADE,
    seq              INTEGER NOT NULL,
    at               INTEGER NOT NULL,
    kind             TEXT NOT NULL,
    epoch            INTEGER NOT NULL,
    actor            TEXT NOT NULL,
    message_id       TEXT,
    receive_count    INTEGER,
    handle_hash      TEXT CHECK (handle_hash IS NULL OR length(handle_hash) = 8),
    attempt_no       INTEGER,
    deadline_left_ms INTEGER,
    detail           TEXT NOT NULL DEFAULT '{}' CHECK (length(detail) <= 2048),
    PRIMARY KEY (job_id, seq)
) WITHOUT ROWID;

CREATE INDEX events_at ON events (at);

CREATE TABLE outbox (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id        TEXT NOT NULL REFERENCES jobs (job_id) ON DELETE CASCADE,
    epoch         INTEGER NOT NULL,
    reason        TEXT NOT NULL,
    created_at    INTEGER NOT NULL,
    available_at  INTEGER NOT NULL,
    dispatched_at INTEGER,
    send_attempts INTEGER NOT NULL DEFAULT 0,
    last_error    TEXT
);

CREATE INDEX outbox_pending ON outbox (available_at, id) WHERE dispatched_at IS NULL;

CREATE TABLE decisions (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id     TEXT NOT NULL REFERENCES jobs (job_id) ON DELETE CASCADE,
    decided_at INTEGER NOT NULL,
    actor      TEXT NOT NULL,
    decision   TEXT NOT NULL CHECK (decision IN
        ('resolve_succeeded', 'resolve_failed', 'authorize_retry', 'replay_policy')),
    seen_epoch INTEGER NOT NULL,
    new_epoch  INTEGER NOT NULL,
    from_state TEXT NOT NULL,
    to_state   TEXT NOT NULL,
    reason     TEXT NOT NULL CHECK (length(reason) BETWEEN 1 AND 2000),
    evidence   TEXT
);

CREATE INDEX decisions_job ON decisions (job_id, id);

CREATE TABLE api_tokens (
    token_hash TEXT PRIMARY KEY,
    tenant     TEXT NOT NULL,
    name       TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    revoked_at INTEGER
);
