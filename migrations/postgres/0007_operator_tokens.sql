-- API tokens that act as an operator (their role and tenants), for automation of decisions.
-- Kept in lockstep with ../sqlite/0007_operator_tokens.sql. Stored only as SHA-256.

CREATE TABLE operator_tokens (
    token_hash TEXT PRIMARY KEY,
    operator   TEXT NOT NULL REFERENCES operators (name) ON DELETE CASCADE,
    name       TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    revoked_at BIGINT
);
CREATE INDEX operator_tokens_operator ON operator_tokens (operator);
