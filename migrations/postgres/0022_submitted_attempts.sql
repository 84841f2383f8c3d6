-- The id a provider gave a request it runs in the background (a background response, a batch),
-- kept on the attempt before any waiting: a later owner polls the same request by it instead of
-- running the model again.
ALTER TABLE attempts ADD COLUMN submitted_id TEXT;
ALTER TABLE attempts ADD COLUMN submitted_at BIGINT;
