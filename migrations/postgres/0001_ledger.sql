-- The job ledger (PostgreSQL). Kept in lockstep with ../sqlite/0001_ledger.sql.
-- Times are microseconds since the Unix epoch, always from the database clock (fl_now_us()),
-- so that the two backends share one Rust API and ownership never depends on a worker's clock.

CREATE FUNCTION fl_now_us() RETURNS BIGINT LANGUAGE sql VOLATILE AS $$
    SELECT (EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::BIGINT
$$;

CREATE TABLE jobs (
    job_id           TEXT PRIMARY KEY,
    tenant           TEXT NOT NULL,
    idempotency_key  TEXT NOT NULL,
    request_digest   TEXT NOT NULL,
    input_ref        TEXT NOT NULL,
    contract_version TEXT NOT NULL,
    state            TEXT NOT NULL CHECK (state IN
        ('ready', 'running', 'unknown', 'retry_authorized', 'succeeded', 'failed_terminal', 'expired')),
    owner_epoch      BIGINT NOT NULL DEFAULT 0 CHECK (owner_epoch >= 0),
    owner_id         TEXT,
    owner_until      BIGINT,
    deadline_at      BIGINT NOT NULL,
    attempt_count    BIGINT NOT NULL DEFAULT 0,
    max_attempts     BIGINT NOT NULL CHECK (max_attempts BETWEEN 1 AND 100),
    retry_at         BIGINT,
    result_ref       TEXT,
    error_code       TEXT,
    replay_policy    TEXT NOT NULL DEFAULT 'manual' CHECK (replay_policy IN ('manual', 'replay_on_unknown')),
    recovery_reason  TEXT,
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL,
    terminal_at      BIGINT,
    next_event_seq   BIGINT NOT NULL DEFAULT 1,
    -- The attempt in flight under the current owner: set by attempt start, cleared by its outcome.
    pending_attempt  BIGINT,
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
CREATE FUNCTION fl_jobs_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.owner_epoch < OLD.owner_epoch THEN
        RAISE EXCEPTION 'owner_epoch only grows (% -> %)', OLD.owner_epoch, NEW.owner_epoch;
    END IF;
    IF NEW.attempt_count < OLD.attempt_count THEN
        RAISE EXCEPTION 'attempt_count is cumulative (% -> %)', OLD.attempt_count, NEW.attempt_count;
    END IF;
    IF NEW.deadline_at <> OLD.deadline_at OR NEW.max_attempts <> OLD.max_attempts THEN
        RAISE EXCEPTION 'deadline and attempt budget are fixed at creation';
    END IF;
    IF OLD.state IN ('succeeded', 'failed_terminal', 'expired') AND (
        NEW.state <> OLD.state OR NEW.owner_epoch <> OLD.owner_epoch
        OR NEW.result_ref IS DISTINCT FROM OLD.result_ref
        OR NEW.terminal_at IS DISTINCT FROM OLD.terminal_at) THEN
        RAISE EXCEPTION 'job % is % and terminal states are final', OLD.job_id, OLD.state;
    END IF;
    IF NEW.state <> OLD.state AND (OLD.state || '>' || NEW.state) NOT IN (
        'ready>running', 'ready>expired',
        'running>succeeded', 'running>retry_authorized', 'running>failed_terminal',
        'running>unknown', 'running>expired',
        'unknown>succeeded', 'unknown>failed_terminal', 'unknown>retry_authorized', 'unknown>expired',
        'retry_authorized>running', 'retry_authorized>failed_terminal', 'retry_authorized>expired') THEN
        RAISE EXCEPTION 'illegal job transition % -> %', OLD.state, NEW.state;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER jobs_guard BEFORE UPDATE ON jobs FOR EACH ROW EXECUTE FUNCTION fl_jobs_guard();

CREATE TABLE job_inputs (
    job_id TEXT PRIMARY KEY REFERENCES jobs (job_id) ON DELETE CASCADE,
    input  TEXT NOT NULL,
    model  TEXT NOT NULL
);

CREATE TABLE attempts (
    job_id              TEXT NOT NULL REFERENCES jobs (job_id) ON DELETE CASCADE,
    attempt_no          BIGINT NOT NULL CHECK (attempt_no >= 1),
    epoch               BIGINT NOT NULL,
    worker_id           TEXT NOT NULL,
    provider            TEXT NOT NULL,
    provider_request_id TEXT,
    started_at          BIGINT NOT NULL,
    finished_at         BIGINT,
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
    attempt_no BIGINT,
    epoch      BIGINT NOT NULL,
    status     TEXT NOT NULL CHECK (status IN ('accepted', 'stale')),
    body       TEXT NOT NULL,
    digest     TEXT NOT NULL,
    created_at BIGINT NOT NULL
);

-- Invariant 1, in the schema: at most one accepted result per job, ever.
CREATE UNIQUE INDEX results_one_accepted ON results (job_id) WHERE status = 'accepted';

CREATE TABLE events (
    job_id           TEXT NOT NULL REFERENCES jobs (job_id) ON DELETE CASCADE,
    seq              BIGINT NOT NULL,
    at               BIGINT NOT NULL,
    kind             TEXT NOT NULL,
    epoch            BIGINT NOT NULL,
    actor            TEXT NOT NULL,
    message_id       TEXT,
    receive_count    BIGINT,
    handle_hash      TEXT CHECK (handle_hash IS NULL OR length(handle_hash) = 8),
    attempt_no       BIGINT,
    deadline_left_ms BIGINT,
    detail           TEXT NOT NULL DEFAULT '{}' CHECK (length(detail) <= 2048),
    PRIMARY KEY (job_id, seq)
);

CREATE INDEX events_at ON events (at);

CREATE TABLE outbox (
    id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id        TEXT NOT NULL REFERENCES jobs (job_id) ON DELETE CASCADE,
    epoch         BIGINT NOT NULL,
    reason        TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    available_at  BIGINT NOT NULL,
    dispatched_at BIGINT,
    send_attempts BIGINT NOT NULL DEFAULT 0,
    last_error    TEXT
);

CREATE INDEX outbox_pending ON outbox (available_at, id) WHERE dispatched_at IS NULL;

CREATE TABLE decisions (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id     TEXT NOT NULL REFERENCES jobs (job_id) ON DELETE CASCADE,
    decided_at BIGINT NOT NULL,
    actor      TEXT NOT NULL,
    decision   TEXT NOT NULL CHECK (decision IN
        ('resolve_succeeded', 'resolve_failed', 'authorize_retry', 'replay_policy')),
    seen_epoch BIGINT NOT NULL,
    new_epoch  BIGINT NOT NULL,
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
    created_at BIGINT NOT NULL,
    revoked_at BIGINT
);
