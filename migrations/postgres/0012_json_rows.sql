-- The rows of a batched statement, read from the one JSON array it takes on PostgreSQL (see
-- `Batched` in server/src/ledger/statements.rs): one statement text for any number of rows.
--
-- `jsonb_array_elements` itself is estimated at 100 rows, and for that many keys PostgreSQL
-- preferred joining a batch to `jobs` or `queue_messages` by hashing the whole table over
-- looking each key up. Declared here as 10 rows (one kind's share of a group commit is about
-- that), and STRICT, which keeps the planner from inlining the body and losing the estimate.
-- SQLite repeats a statement's row group instead and needs nothing here.
CREATE FUNCTION fl_rows(rows JSONB) RETURNS SETOF JSONB
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE ROWS 10
    AS $$ SELECT jsonb_array_elements(rows) $$;
