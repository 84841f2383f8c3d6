//! The durable job ledger: one Rust API over PostgreSQL (production, scale-out) and SQLite in
//! WAL (the embedded default).
//!
//! Owns every authoritative write. Each one is a compare-and-set on the database clock that
//! appends its timeline events in the same transaction; a refused write re-reads the job and
//! returns a typed [`Refusal`], never a silent no-op and never a follow-up unconditional write.
//! Must not hold a transaction open across anything slow (a provider call, a queue request),
//! and must not know about queues or HTTP.
//!
//! The two backends share SQL text through `sqlx::Any`; the few places where the dialects
//! differ (clock, `LEAST`, row locks) are filled in by [`dialect::Dialect`].

mod connect;
mod dialect;
mod error;
mod model;
mod ops;
mod read;
mod retention;
mod tokens;
mod views;
pub use tokens::{valid_tenant, TokenInfo};
pub use views::{detail_text, Bucket, Run, RENEWAL_KINDS, TRANSPORT_KINDS};
mod write;

pub use connect::{LedgerOptions, SqliteSync};
pub use dialect::Backend;
pub use error::{LedgerError, Refusal};
pub use model::{
    handle_hash, Accepted, Attempt, AttemptOutcome, AttemptStarted, Claimed, Created, Decision,
    DecisionRecord, DeliveryRef, Event, Failure, FailureOutcome, Job, JobFilter, JobPage, NewEvent,
    NewJob, Recovered, Renewal, ReplayPolicy,
};
pub use ops::{DeadLetterMove, OutboxItem, RejectedMessage, UnknownForRetrieval, UnknownJob};
pub use retention::{Pruned, RetentionRun};

use sqlx::AnyPool;

/// A handle on the ledger database. Cheap to clone.
#[derive(Clone)]
pub struct Ledger {
    /// Writes. On SQLite this pool has one connection, so writers queue in-process instead of
    /// failing with `SQLITE_BUSY`.
    writer: AnyPool,
    /// Reads. On PostgreSQL the same pool as `writer`.
    reader: AnyPool,
    dialect: dialect::Dialect,
}

impl std::fmt::Debug for Ledger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ledger")
            .field("backend", &self.dialect.backend)
            .finish()
    }
}
