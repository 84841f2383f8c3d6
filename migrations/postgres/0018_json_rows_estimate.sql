-- A batched statement's rows, and a list of keys, estimated at one row (rows were 10, from
-- migration 0012; lists of keys were `jsonb_array_elements_text`'s 100).
--
-- A connection keeps the plan it settles on after its first few runs of a statement, until the
-- next analyse of the tables it reads. In a burst into a fresh or freshly vacuumed ledger that
-- is while the tables are still small. Planned there for ten rows, the accept's update of
-- `attempts` hashed the whole table, and every later accept on that connection read every
-- attempt as the table grew. Planned for one row, a lookup by key is the cheaper plan from a
-- few hundred rows a table, and so stays the plan as the tables grow.
ALTER FUNCTION fl_rows(JSONB) ROWS 1;

-- The keys of a list (`key IN (…)`) read from one JSON array, as text.
CREATE FUNCTION fl_keys(keys JSONB) RETURNS SETOF TEXT
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE ROWS 1
    AS $$ SELECT jsonb_array_elements_text(keys) $$;
