-- Less written per job on the hot path: `events_at` indexed every event by time alone, and no
-- statement reads events that way (the activity rollup and the charts filter by kind first,
-- `events_kind_at`; a timeline reads by job). Kept in lockstep with
-- ../postgres/0011_hot_path.sql, which also leaves room on each page of `jobs` for updates.
DROP INDEX events_at;
