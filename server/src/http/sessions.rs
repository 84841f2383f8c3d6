//! Console sessions: `tower-sessions` records kept by the ledger (its `sessions` table), so a
//! session works on every `serve` process of a deployment, survives a restart and is tested on
//! both backends. Only the record's data (the operator's name, when they signed in, the CSRF
//! token) and expiry are stored, as JSON and microseconds.

use std::collections::HashMap;

use async_trait::async_trait;
use time::OffsetDateTime;
use tower_sessions::session::{Id, Record};
use tower_sessions::session_store::{self, SessionStore};

use crate::ledger::Ledger;

/// The ledger as a session store.
#[derive(Clone)]
pub struct LedgerSessionStore {
    ledger: Ledger,
}

impl std::fmt::Debug for LedgerSessionStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LedgerSessionStore")
    }
}

impl LedgerSessionStore {
    pub fn new(ledger: Ledger) -> Self {
        LedgerSessionStore { ledger }
    }
}

fn backend(error: impl std::fmt::Display) -> session_store::Error {
    session_store::Error::Backend(error.to_string())
}

fn micros(at: OffsetDateTime) -> i64 {
    i64::try_from(at.unix_timestamp_nanos() / 1000).unwrap_or(i64::MAX)
}

fn encode(record: &Record) -> Result<String, session_store::Error> {
    serde_json::to_string(&record.data).map_err(|e| session_store::Error::Encode(e.to_string()))
}

#[async_trait]
impl SessionStore for LedgerSessionStore {
    async fn create(&self, record: &mut Record) -> session_store::Result<()> {
        let data = encode(record)?;
        // A fresh id is 128 random bits; a collision is drawn again, never overwritten.
        while !self
            .ledger
            .create_session(&record.id.to_string(), &data, micros(record.expiry_date))
            .await
            .map_err(backend)?
        {
            record.id = Id::default();
        }
        Ok(())
    }

    async fn save(&self, record: &Record) -> session_store::Result<()> {
        self.ledger
            .save_session(
                &record.id.to_string(),
                &encode(record)?,
                micros(record.expiry_date),
            )
            .await
            .map_err(backend)
    }

    async fn load(&self, id: &Id) -> session_store::Result<Option<Record>> {
        let Some((data, expires_at)) = self
            .ledger
            .session(&id.to_string())
            .await
            .map_err(backend)?
        else {
            return Ok(None);
        };
        let data: HashMap<String, serde_json::Value> =
            serde_json::from_str(&data).map_err(|e| session_store::Error::Decode(e.to_string()))?;
        let expiry_date = OffsetDateTime::from_unix_timestamp_nanos(i128::from(expires_at) * 1000)
            .map_err(|e| session_store::Error::Decode(e.to_string()))?;
        Ok(Some(Record {
            id: *id,
            data,
            expiry_date,
        }))
    }

    async fn delete(&self, id: &Id) -> session_store::Result<()> {
        self.ledger
            .delete_session(&id.to_string())
            .await
            .map_err(backend)
    }
}

/// What a console session holds, by key.
pub(super) mod keys {
    /// The signed-in operator's name.
    pub(crate) const OPERATOR: &str = "operator";
    /// When they signed in (microseconds): the absolute expiry counts from it.
    pub(crate) const SINCE: &str = "since";
    /// Their last request (microseconds, updated at most once a minute): the idle expiry.
    pub(crate) const SEEN: &str = "seen";
    /// When their password was set when they signed in: a reset ends the session.
    pub(crate) const PASSWORD_SET: &str = "password_set";
    /// The anti-forgery token of every form.
    pub(crate) const CSRF: &str = "csrf";
    /// The outcome of the last action, shown once.
    pub(crate) const FLASH: &str = "flash";
    /// The time zone this operator reads times in (an IANA name).
    pub(crate) const ZONE: &str = "zone";
}

/// How long console sessions last.
#[derive(Debug, Clone, Copy)]
pub struct SessionPolicy {
    /// Ends a session nobody used for this long.
    pub idle: std::time::Duration,
    /// Ends every session this long after sign-in, used or not.
    pub absolute: std::time::Duration,
}

impl Default for SessionPolicy {
    fn default() -> Self {
        SessionPolicy {
            idle: std::time::Duration::from_secs(8 * 3600),
            absolute: std::time::Duration::from_secs(12 * 3600),
        }
    }
}

/// The session layer: cookie `fenceline_session`, HttpOnly, SameSite=Strict, Secure when the
/// console is reached over https, expiring after the idle time.
pub(super) fn layer(
    ledger: Ledger,
    secure: bool,
    policy: SessionPolicy,
) -> tower_sessions::SessionManagerLayer<LedgerSessionStore> {
    let idle = time::Duration::try_from(policy.idle).unwrap_or(time::Duration::hours(8));
    tower_sessions::SessionManagerLayer::new(LedgerSessionStore::new(ledger))
        .with_name("fenceline_session")
        .with_http_only(true)
        .with_same_site(tower_sessions::cookie::SameSite::Strict)
        .with_secure(secure)
        .with_path("/")
        .with_expiry(tower_sessions::Expiry::OnInactivity(idle))
}

/// 32 random bytes, hex: a form token.
pub(crate) fn new_token() -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the operating system's random source");
    hex::encode(bytes)
}

/// Whether `given` is the session's form token (constant time).
pub(super) fn token_matches(expected: Option<&str>, given: &str) -> bool {
    use subtle::ConstantTimeEq;
    expected.is_some_and(|e| !e.is_empty() && bool::from(e.as_bytes().ct_eq(given.as_bytes())))
}
