-- Flow control: a refusal is not an attempt, workers share what a provider's limits say, and
-- jobs wait in the ledger for a fair turn to be sent. Kept in lockstep with
-- ../sqlite/0019_flow_control.sql.

-- The attempt budget gets a counter of its own: attempts that may have run the model, the
-- pending one included. A refusal the provider confirms it never ran (`throttled`) gives back
-- what its start took, so `attempt_count` (attempt numbers, cumulative) may pass
-- `max_attempts` while `budget_used` never does.
ALTER TABLE jobs ADD COLUMN budget_used BIGINT NOT NULL DEFAULT 0;
UPDATE jobs SET budget_used = attempt_count;
ALTER TABLE jobs DROP CONSTRAINT jobs_check;
ALTER TABLE jobs ADD CONSTRAINT jobs_budget_check CHECK (attempt_count >= 0
    AND budget_used BETWEEN 0 AND max_attempts AND budget_used <= attempt_count);

ALTER TABLE attempts DROP CONSTRAINT attempts_outcome_check;
ALTER TABLE attempts ADD CONSTRAINT attempts_outcome_check CHECK (outcome IN
    ('pending', 'succeeded', 'failed_retryable', 'failed_fatal', 'lost', 'stale_discarded',
     'throttled'));

-- The timeline folds a job's refusal cycles (every event of an epoch whose attempt was
-- throttled): one probe per event.
CREATE INDEX attempts_throttled ON attempts (job_id, epoch) WHERE outcome = 'throttled';

-- What the fleet learned of each provider limit (one row per provider and model): no call
-- before `limited_until` (database clock), the limit that said so, and the concurrency and
-- rate last learned. Every worker process reads it, so a fleet slows down together.
CREATE TABLE provider_limits (
    provider      TEXT NOT NULL,
    model         TEXT NOT NULL,
    limited_until BIGINT,
    limit_name    TEXT,
    concurrency   BIGINT,
    rate_per_s    DOUBLE PRECISION,
    -- Refusals and time spent limited, summed over every process.
    refusals      BIGINT NOT NULL DEFAULT 0,
    limited_us    BIGINT NOT NULL DEFAULT 0,
    updated_at    BIGINT NOT NULL,
    updated_by    TEXT NOT NULL,
    PRIMARY KEY (provider, model)
);

-- Refusals per provider limit and minute (µs of the minute's start), for "the last five
-- minutes"; pruned after a day by the workers that write them.
CREATE TABLE provider_refusals (
    provider TEXT NOT NULL,
    model    TEXT NOT NULL,
    minute   BIGINT NOT NULL,
    n        BIGINT NOT NULL,
    PRIMARY KEY (provider, model, minute)
);

-- What a worker can run at once now: its width, or less while a provider limits it. The
-- dispatcher keeps the queue within twice the fleet's capacity.
ALTER TABLE workers ADD COLUMN capacity BIGINT;

-- Fair dispatch: each unsent outbox row carries its tenant and its place in a start-time fair
-- queue (`fair_tag`): a tenant's rows follow each other one step apart (1,000,000 divided by
-- its weight, `tenant_shares`), and a tenant that had nothing waiting starts where sending has
-- got to (`dispatch_clock`: the largest tag sent). The dispatcher sends in tag order, so
-- tenants take turns however long one's backlog is.
ALTER TABLE outbox ADD COLUMN tenant TEXT;
ALTER TABLE outbox ADD COLUMN fair_tag BIGINT;
UPDATE outbox SET tenant = (SELECT j.tenant FROM jobs j WHERE j.job_id = outbox.job_id),
    fair_tag = id WHERE dispatched_at IS NULL;
CREATE INDEX outbox_fair ON outbox (fair_tag, id) WHERE dispatched_at IS NULL;
CREATE INDEX outbox_tenant_fair ON outbox (tenant, fair_tag) WHERE dispatched_at IS NULL;

CREATE TABLE dispatch_clock (
    id  BIGINT PRIMARY KEY CHECK (id = 1),
    tag BIGINT NOT NULL
);
INSERT INTO dispatch_clock (id, tag) VALUES (1, 0);

-- Tenants' shares of dispatch, as the settings of the latest process to start wrote them: a
-- weight (two takes twice the turns of one) and, optionally, how many of its jobs may be sent
-- or running at once.
CREATE TABLE tenant_shares (
    tenant        TEXT PRIMARY KEY,
    weight        BIGINT NOT NULL CHECK (weight BETWEEN 1 AND 1000),
    max_in_flight BIGINT CHECK (max_in_flight IS NULL OR max_in_flight >= 1)
);

-- The overview counts refusals (`throttled` events) as a series of their own: the partial
-- index of the kinds it counts takes the new kind, in the order the rollup names them.
DROP INDEX events_activity_kind_at;
CREATE INDEX events_activity_kind_at ON events (kind, at)
    WHERE kind IN ('job_created', 'duplicate_suppressed', 'result_rejected',
                   'visibility_renewal_failed', 'lease_renewal_failed', 'delete_failed',
                   'throttled');
