-- Fewer index entries a job writes for the timeline.
--
-- `events_kind_at` indexed every event by kind and time, and a job writes eight kinds or more
-- on its way: eight places in one index where each commit inserts. On SQLite each is a page
-- rewritten in the write-ahead log; in the pipeline benchmark that index was a fifth of every
-- commit's pages. Its only reader, the activity rollup, counts six kinds and redeliveries
-- (`delivery_received` past a message's first receive). The two indexes below hold only
-- those: a job that succeeds at its first try writes one entry (`job_created`).
--
-- The rollup's statement names the kinds in this order (`ACTIVITY_KINDS` in
-- server/src/ledger/rollup.rs): that is how SQLite knows this index holds what it asks for. A
-- suite test checks that both backends use these indexes.
--
-- Kept in lockstep with ../postgres/0015_activity_events.sql.
DROP INDEX events_kind_at;
CREATE INDEX events_activity_kind_at ON events (kind, at)
    WHERE kind IN ('job_created', 'duplicate_suppressed', 'result_rejected',
                   'visibility_renewal_failed', 'lease_renewal_failed', 'delete_failed');
CREATE INDEX events_redelivered_at ON events (at)
    WHERE kind = 'delivery_received' AND receive_count > 1;
