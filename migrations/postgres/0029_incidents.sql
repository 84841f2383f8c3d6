-- Incidents: the jobs of one incident, pinned so that retention keeps them (with their events,
-- attempts and decisions) while it is open and until `keep_until` after it closed, and the
-- frozen bundle made once when it closed: its bytes, stored, and their SHA-256.
CREATE TABLE incidents (
    incident_id  BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    title        TEXT NOT NULL,
    external_id  TEXT,
    opened_by    TEXT NOT NULL,
    opened_at    BIGINT NOT NULL,
    closed_by    TEXT,
    closed_at    BIGINT,
    keep_until   BIGINT,
    bundle_md    TEXT,
    bundle_json  TEXT,
    bundle_html  TEXT,
    sha256_md    TEXT,
    sha256_json  TEXT,
    sha256_html  TEXT
);

CREATE TABLE incident_jobs (
    incident_id BIGINT NOT NULL REFERENCES incidents (incident_id),
    job_id      TEXT NOT NULL,
    -- The job's tenant, kept: who may see the incident's record once retention has pruned
    -- the job itself.
    tenant      TEXT NOT NULL,
    pinned_by   TEXT NOT NULL,
    pinned_at   BIGINT NOT NULL,
    PRIMARY KEY (incident_id, job_id)
);
CREATE INDEX incident_jobs_job ON incident_jobs (job_id);
