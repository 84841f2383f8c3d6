-- Retention: every pruning run is recorded (never silent), so the console can say what is kept
-- and what was removed. And dead letters noted on their job's timeline. Kept in lockstep with ../sqlite/0004_retention.sql.

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

-- Dead letters the embedded queue redrove, once their move is on the job's timeline.
ALTER TABLE queue_messages ADD COLUMN timeline_noted_at BIGINT;
-- How many receives a dead letter had in its source queue (the count restarts in the DLQ).
ALTER TABLE queue_messages ADD COLUMN dead_receive_count BIGINT;
CREATE INDEX queue_messages_dead_unnoted ON queue_messages (dead_at)
    WHERE dead_at IS NOT NULL AND timeline_noted_at IS NULL;
