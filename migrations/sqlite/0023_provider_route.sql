-- Fallback between providers: where a job stands on its ordered list of provider/model pairs.
-- `route_step` 0 is the worker's own provider and the job's model; a step past it names the
-- pair its attempts go to now (`route_provider`, `route_model`), moved on to by a refusal
-- that proved the model did not run. `route_since` is when the current pair first refused the
-- job (µs, database clock): how long it has been throttled there.
ALTER TABLE jobs ADD COLUMN route_step BIGINT NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN route_provider TEXT;
ALTER TABLE jobs ADD COLUMN route_model TEXT;
ALTER TABLE jobs ADD COLUMN route_since BIGINT;
