-- Redelivery drills: each run's parameters, progress and verdict, and the tag that keeps a
-- drill's jobs on the drill's own queue and out of tenants' traffic.
-- Kept in lockstep with ../postgres/0008_drills.sql.

ALTER TABLE jobs ADD COLUMN drill_run TEXT;
CREATE INDEX jobs_drill_run ON jobs (drill_run) WHERE drill_run IS NOT NULL;

CREATE TABLE drill_runs (
    run_id       TEXT PRIMARY KEY,
    -- The scenarios asked for, as a JSON array of kinds.
    kinds        TEXT NOT NULL,
    queue        TEXT NOT NULL,
    timings      TEXT NOT NULL,
    requested_by TEXT NOT NULL,
    -- running | passed | failed | interrupted
    status       TEXT NOT NULL,
    started_at   INTEGER NOT NULL,
    -- Bumped while the run is alive: a running row that stops being bumped was interrupted.
    alive_at     INTEGER NOT NULL,
    finished_at  INTEGER,
    -- The report so far (JSON): each scenario's state, checks, evidence and captures.
    report       TEXT NOT NULL
);
CREATE INDEX drill_runs_started ON drill_runs (started_at);
