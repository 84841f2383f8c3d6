-- Worker processes as they report themselves (`serve` with its worker, and `fenceline worker`):
-- the console's /workers page shows which are alive, silent or stopped, beside the jobs each
-- holds. A report is a heartbeat, not a lease: ownership stays with `jobs.owner_id` and its
-- epoch. Kept in lockstep with ../sqlite/0014_workers.sql.

CREATE TABLE workers (
    worker_id     TEXT PRIMARY KEY,
    started_at    BIGINT NOT NULL,
    -- The latest report (database clock).
    seen_at       BIGINT NOT NULL,
    -- Set when the process stopped cleanly, after its drain.
    stopped_at    BIGINT,
    -- The queue and provider it runs with, as `describe()` writes them (never a secret).
    queue         TEXT NOT NULL,
    provider      TEXT NOT NULL,
    max_in_flight BIGINT NOT NULL
);

CREATE INDEX workers_seen ON workers (seen_at);
