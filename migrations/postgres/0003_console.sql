-- Console queries: jobs finished in a window (overview), and events by kind and time.
CREATE INDEX jobs_terminal_at ON jobs (terminal_at) WHERE terminal_at IS NOT NULL;
CREATE INDEX events_kind_at ON events (kind, at);
-- Lookup by idempotency key across tenants (console search).
CREATE INDEX jobs_idempotency_key ON jobs (idempotency_key);
