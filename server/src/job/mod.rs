//! The pure job domain: states and their transition table, event kinds, identities and the
//! canonical request digest, and the queue message that names a job.
//!
//! Owns the rules of `domain.md` that can be stated without I/O. Must not touch a database,
//! a queue, a clock or the network: the ledger enforces these rules again in SQL, and the
//! database enforces them a third time with `CHECK`s and triggers.

pub mod detail;
mod digest;
mod event;
mod id;
pub mod message;
mod state;

pub(crate) use digest::draw;
pub use digest::{canonical_json, request_digest};
pub use event::{Actor, EventKind, ParseEventKindError};
pub use id::{JobId, ParseJobIdError};
pub use state::{Cause, JobState, ParseStateError, TransitionError};

/// The tenant drill jobs belong to: views that leave drills out leave this tenant out.
pub const DRILL_TENANT: &str = "drill";
