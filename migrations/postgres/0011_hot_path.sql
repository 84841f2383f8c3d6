-- Less written per job on the hot path.
--
-- `events_at` indexed every event by time alone, and no statement reads events that way: the
-- activity rollup and the charts filter by kind first (`events_kind_at`), a timeline by job
-- (`events_pkey`). A job writes eight events or more, so this was eight index entries a job
-- for nothing.
--
-- `jobs` leaves a fifth of each page free, so that an update changing no indexed column (an
-- event number reserved for a transport fact: a dispatch, a delete, a visibility renewal) can
-- stay on its page as a heap-only tuple instead of writing an entry into each of the table's
-- ten indexes. It applies to pages written from now on.
-- Kept in lockstep with ../sqlite/0011_hot_path.sql (SQLite has no fill factor).
DROP INDEX events_at;
ALTER TABLE jobs SET (fillfactor = 80);
