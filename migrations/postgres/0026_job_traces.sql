-- The trace context a job was submitted in (attempt_no 0) and that of each provider attempt's
-- span (attempt_no n), as W3C `traceparent` values: workers continue the job's trace, and the
-- job page links each attempt to it. Written only where traces are in use.
CREATE TABLE job_traces (
    job_id      TEXT NOT NULL REFERENCES jobs (job_id) ON DELETE CASCADE,
    attempt_no  BIGINT NOT NULL,
    traceparent TEXT NOT NULL,
    PRIMARY KEY (job_id, attempt_no)
);
