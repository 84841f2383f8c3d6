-- Attempts running in the background at a provider whose outcome the ledger has not recorded:
-- the reaper looks among them for responses no job waits for any more, to cancel them there.
CREATE INDEX attempts_open_submitted ON attempts (job_id, attempt_no)
    WHERE submitted_id IS NOT NULL AND outcome IN ('pending', 'lost');
