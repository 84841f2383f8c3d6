-- The id a provider gave a request it runs in the background (a background response, a batch),
-- kept on the attempt before any waiting: a later owner polls the same request by it instead of
-- running the model again.
ALTER TABLE attempts ADD COLUMN submitted_id TEXT;
ALTER TABLE attempts ADD COLUMN submitted_at BIGINT;

-- What the attempt cost, in nano-dollars (10⁻⁹ USD), from the usage its answer reported (kept
-- in `usage`) at the price the settings named for its model then; null when either is unknown.
ALTER TABLE attempts ADD COLUMN cost_nusd BIGINT;
-- The model it was priced for and its tokens (input and output), for sums by model.
ALTER TABLE attempts ADD COLUMN usage_model TEXT;
ALTER TABLE attempts ADD COLUMN tokens BIGINT;

-- The overview and /metrics sum what the answers of a window used and cost.
CREATE INDEX attempts_spent_at ON attempts (finished_at) WHERE tokens IS NOT NULL;
