-- The overview's hourly rollup: counts of closed hours, computed once when a chart first needs
-- them (see server/src/ledger/rollup.rs), so a week's charts read a few hundred rows instead
-- of every event and finished job of the week.
-- Kept in lockstep with ../sqlite/0009_activity_rollup.sql.

CREATE TABLE activity_hours (
    -- The hour's start: µs since the Unix epoch, a multiple of an hour (UTC).
    hour   BIGINT NOT NULL,
    -- An event kind, 'redelivered', 'finished:<state>', 'took' or 'tries'.
    series TEXT NOT NULL,
    -- 0, or the bin of a histogram ('took': time to terminal; 'tries': attempts used).
    bin    BIGINT NOT NULL,
    n      BIGINT NOT NULL,
    PRIMARY KEY (hour, series, bin)
);

-- Hours whose counts are in activity_hours (an hour with nothing in it has no other row).
CREATE TABLE activity_hours_done (
    hour BIGINT PRIMARY KEY
);
