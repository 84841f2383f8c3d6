-- Retention: every pruning run is recorded (never silent), so the console can say what is kept
-- and what was removed. Kept in lockstep with ../sqlite/0004_retention.sql.

CREATE TABLE retention_runs (
    id                BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    ran_at            BIGINT NOT NULL,
    -- How long terminal records are kept (microseconds), and the terminal time pruned before.
    keep_us           BIGINT NOT NULL,
    cutoff            BIGINT NOT NULL,
    jobs              BIGINT NOT NULL,
    outbox            BIGINT NOT NULL,
    queue_messages    BIGINT NOT NULL,
    rejected_messages BIGINT NOT NULL
);

-- The outbox's sent rows, by age, for pruning.
CREATE INDEX outbox_dispatched_at ON outbox (dispatched_at) WHERE dispatched_at IS NOT NULL;
CREATE INDEX queue_messages_sent_at ON queue_messages (sent_at);
