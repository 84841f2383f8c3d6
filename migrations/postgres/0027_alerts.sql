-- Alerts: one row an episode (a rule firing for a subject, until it clears), and the webhook
-- notifications each episode sends, kept until sent so that a restart neither loses nor repeats
-- one. At most one open episode per rule and subject.
CREATE TABLE alerts (
    alert_id   BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    rule       TEXT NOT NULL,
    subject    TEXT NOT NULL,
    summary    TEXT NOT NULL,
    link       TEXT NOT NULL,
    opened_at  BIGINT NOT NULL,
    seen_at    BIGINT NOT NULL,
    cleared_at BIGINT,
    -- 0 when it opened within the cooldown after a notified episode of the same rule and
    -- subject: it is listed, and sends nothing.
    notify     BIGINT NOT NULL
);
CREATE UNIQUE INDEX alerts_open ON alerts (rule, subject) WHERE cleared_at IS NULL;
CREATE INDEX alerts_opened ON alerts (opened_at);

CREATE TABLE alert_notifications (
    notification_id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    alert_id        BIGINT NOT NULL REFERENCES alerts (alert_id) ON DELETE CASCADE,
    status          TEXT NOT NULL,
    body            TEXT NOT NULL,
    created_at      BIGINT NOT NULL,
    next_try_at     BIGINT NOT NULL,
    tries           BIGINT NOT NULL DEFAULT 0,
    sent_at         BIGINT,
    gave_up_at      BIGINT,
    last_error      TEXT
);
CREATE INDEX alert_notifications_due ON alert_notifications (next_try_at)
    WHERE sent_at IS NULL AND gave_up_at IS NULL;
CREATE INDEX alert_notifications_alert ON alert_notifications (alert_id);
