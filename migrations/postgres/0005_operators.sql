-- Operators, their sessions and sign-in failures (for throttling). Kept in lockstep with
-- ../sqlite/0005_operators.sql.

CREATE TABLE operators (
    name          TEXT PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 64),
    -- argon2id in PHC string form; never the password.
    password_hash TEXT NOT NULL,
    role          TEXT NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
    -- The tenants this operator may see and act on, comma-separated; NULL for every tenant.
    tenants       TEXT,
    created_at    BIGINT NOT NULL,
    updated_at    BIGINT NOT NULL,
    -- Set when the password changes: sessions begun before it are no longer valid.
    password_set_at BIGINT NOT NULL,
    disabled_at   BIGINT
);

-- Console sessions (tower-sessions records: JSON data and an expiry, microseconds).
CREATE TABLE sessions (
    id         TEXT PRIMARY KEY,
    data       TEXT NOT NULL,
    expires_at BIGINT NOT NULL
);
CREATE INDEX sessions_expires_at ON sessions (expires_at);

-- Failed sign-ins, per account and per address, for throttling; pruned as they age.
CREATE TABLE sign_in_failures (
    id    BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    scope TEXT NOT NULL CHECK (scope IN ('account', 'address')),
    key   TEXT NOT NULL,
    at    BIGINT NOT NULL
);
CREATE INDEX sign_in_failures_key ON sign_in_failures (scope, key, at);
