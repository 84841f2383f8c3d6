-- The embedded queue (PostgreSQL), with SQS semantics; and messages the worker refused.
-- Kept in lockstep with ../sqlite/0002_queue.sql.

CREATE TABLE queue_messages (
    id               BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue            TEXT NOT NULL,
    message_id       TEXT NOT NULL,
    body             TEXT NOT NULL,
    sent_at          BIGINT NOT NULL,
    visible_at       BIGINT NOT NULL,
    receive_count    BIGINT NOT NULL DEFAULT 0,
    first_receive_at BIGINT,
    -- SHA-256 of the secret part of the latest receipt handle; the handle itself is never stored.
    handle_hash      TEXT,
    -- Set when the message was redriven to a dead-letter queue: where from, and when.
    dead_from        TEXT,
    dead_at          BIGINT
);

CREATE INDEX queue_messages_visible ON queue_messages (queue, visible_at, id);
CREATE INDEX queue_messages_message_id ON queue_messages (message_id);

CREATE TABLE rejected_messages (
    id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at            BIGINT NOT NULL,
    worker_id     TEXT NOT NULL,
    message_id    TEXT NOT NULL,
    receive_count BIGINT NOT NULL,
    handle_hash   TEXT NOT NULL,
    reason        TEXT NOT NULL,
    body_bytes    BIGINT NOT NULL,
    job_id        TEXT
);

CREATE INDEX rejected_messages_at ON rejected_messages (at);

ALTER TABLE outbox ADD COLUMN locked_until BIGINT;
ALTER TABLE outbox ADD COLUMN message_id TEXT;
