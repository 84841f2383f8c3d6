//! The durable job ledger: one Rust API over PostgreSQL (production, scale-out) and SQLite in
//! WAL (the embedded default).
//!
//! Owns every authoritative write. Each one is a compare-and-set on the database clock that
//! appends its timeline events in the same transaction; a refused write re-reads the job and
//! returns a typed [`Refusal`], never a silent no-op and never a follow-up unconditional write.
//! Must not hold a transaction open across anything slow (a provider call, a queue request),
//! and must not know about queues or HTTP.
//!
//! Where things are:
//! - `write/` — the fenced writes, one file per kind of transition, all on one skeleton
//!   (`write/mod.rs`: `guarded`, the refusal classifier, event append), each transition's
//!   batched form beside its single form; `write/group.rs` — group commit, the hot writes of
//!   concurrent callers in shared transactions; `write/batch.rs` — what the batched forms share;
//! - `statements.rs` — the catalogue of every backend-dependent statement, rendered once at
//!   connect; `dialect.rs` — which backend;
//! - `read.rs` — jobs, attempts, events, decisions, job lists; `console_reads.rs` — what the
//!   console's pages read (timeline runs, chart buckets, capped counts); `unknown.rs` — the
//!   reconciliation queue; `scans.rs` — the reaper's queries; `transport.rs` — refused queue
//!   messages and dead-letter notes; `queue_store.rs` — the embedded queue's table;
//! - `flow.rs` — flow control's shared state: provider limits, tenants' shares, the fleet's
//!   capacity;
//! - `tokens.rs` — API tokens; `operators.rs` — operators, console sessions, sign-in failures; `retention.rs` — pruning; `workers.rs` — worker processes' reports; `generated.rs`, `reference.rs` —
//!   the benchmarks' generated data and reference tables;
//! - `model.rs` — what goes in and comes out; `error.rs` — errors and typed refusals;
//!   `connect.rs` — pools, pragmas, migrations, the clock.
//!
//! No SQL lives outside this module: the embedded queue, the benchmarks and (to come) the
//! operators' sessions call ledger functions. Sessions are decided thus: the ledger keeps a
//! `sessions` table (in both migration sets) and the functions that load, save and delete a
//! session record; `http` implements `tower-sessions`' `SessionStore` on them. Not
//! `tower-sessions-sqlx-store`: it wants native `PgPool`/`SqlitePool`s and its own migrations,
//! where through the ledger one store serves both backends, shares the SQLite writer (no second
//! writer to contend with) and is tested with the rest of the ledger on both.

/// Binds the keys of a batched key list (`$batched`, a [`statements::Batched`]) to `$query`,
/// as one JSON array.
macro_rules! bind_keys {
    ($query:expr, $batched:expr, $keys:expr) => {{
        debug_assert!(
            $batched.keys_as_json(),
            "a batched statement of rows bound as keys"
        );
        let keys: Vec<_> = $keys.into_iter().collect();
        $query.bind(serde_json::to_string(&keys).expect("keys serialise"))
    }};
}

/// What one row of a batched statement takes as JSON, about: the first size of its buffer.
pub(crate) const ROW_JSON_BYTES: usize = 160;

/// The query of a batched statement of rows (`$batched`, a [`statements::Batched`]) over
/// `$rows`: `$query` makes it from the text the rows take (named `$sql` in it, with its shared
/// values bound), then each row's values are bound in order. On SQLite the rows are a
/// `VALUES` list of a fixed length, each value bound on its own and the list padded with rows
/// of `NULL`s; on PostgreSQL (and past SQLite's longest list) they are one JSON array of arrays.
macro_rules! bind_rows {
    (|$sql:ident| $query:expr, $batched:expr, $rows:expr, |$row:pat_param| [$($value:expr),+ $(,)?]) => {{
        debug_assert!($batched.takes_rows(), "a batched list of keys bound as rows");
        let rows: Vec<_> = $rows.into_iter().collect();
        let n = rows.len();
        let ($sql, direct) = $batched.for_rows(n);
        let query = $query;
        match direct {
            None => {
                // Each row written straight into one buffer (a tuple serialises as an array),
                // sized for rows of a few values: no value of a row is copied on its way.
                let mut json = Vec::with_capacity(2 + n * $crate::ledger::ROW_JSON_BYTES);
                json.push(b'[');
                for (i, $row) in rows.into_iter().enumerate() {
                    if i > 0 {
                        json.push(b',');
                    }
                    serde_json::to_writer(&mut json, &($($value,)+)).expect("rows serialise");
                }
                json.push(b']');
                query.bind(String::from_utf8(json).expect("JSON is UTF-8"))
            }
            Some(listed) => {
                let mut query = query;
                for $row in rows {
                    $( query = query.bind($value); )+
                    if listed.marked {
                        query = query.bind(1_i64);
                    }
                }
                // Each padding row: its values, and its marker if rows have one.
                let width = [$(stringify!($value)),+].len() + usize::from(listed.marked);
                for _ in 0..(listed.rows - n) * width {
                    query = query.bind(None::<i64>);
                }
                query
            }
        }
    }};
}

mod alerts;
pub(crate) mod audit;
mod bulk;
mod connect;
mod console_reads;
mod dialect;
mod drills;
mod error;
mod flow;
mod generated;
mod incidents;
mod model;
mod operators;
mod queue_store;
mod read;
mod reference;
mod retention;
mod rollup;
mod scans;
mod spend;
mod sso;
mod statements;
mod summary;
mod tokens;
mod transport;
mod unknown;
mod workers;
mod write;

pub use alerts::{
    AlertChange, AlertEpisode, AlertFiring, AlertNotification, DueNotification, UnknownWaiting,
};
pub use audit::{AuditEntry, AuditFilter};
pub use bulk::{BulkAction, BulkJob, PREVIEW_VALID};
pub use connect::{LedgerOptions, SqliteSync};
pub use console_reads::{
    detail_text, find_key_statement, Bucket, DeadLetter, Drills, Run, RunKind, DRILL_JOBS_BY_STATE,
    RENEWAL_KINDS, TRANSPORT_KINDS,
};
pub use dialect::Backend;
pub use drills::{DrillRunRow, OutboxSend};
pub use error::{LedgerError, Refusal};
pub use flow::{LimitReport, ProviderLimit, TenantFlow, TenantShare};
pub use incidents::{Bundle, Incident, MAX_PINNED};
pub use model::{
    handle_hash, Accepted, Adopted, Answered, Attempt, AttemptOutcome, AttemptStarted, Claimed,
    Created, Decision, DecisionKind, DecisionRecord, DeliveryRef, Event, Failure, FailureOutcome,
    Job, JobFilter, JobPage, NewEvent, NewJob, NoEvidence, Owner, Recovered, Renewal, ReplayPolicy,
    Route, Spend, Throttle, Throttled, OPERATOR_RESOLVED_FAILED,
};
pub use operators::{AdminAudit, AdminChange, Credentials, FailureScope};
pub use queue_store::{
    describe_embedded, LedgerMessage, QueueDepth, TakenMessage, VisibilityChange,
};
pub use read::list_jobs_statement;
pub use retention::{Pruned, RetentionRun};
pub use rollup::{activity_statements, Activity, FINISHED, HOUR, REDELIVERED};
pub use spend::{call_bound, JobSpend, ModelSpend, WindowSpend};
pub use sso::{SsoSignIn, NO_PASSWORD};
pub use summary::RunSummary;
pub use tokens::{token_id, valid_tenant, ActsAs, TokenInfo};
pub use transport::{DeadLetterMove, RejectedMessage};
pub use unknown::{OrphanedResponse, UnknownForRetrieval, UnknownJob};
pub use workers::{Reported, WorkerReport, WorkerSeen};
pub use write::{
    AcceptDelete, GroupStats, OutboxItem, RenewBoth, RenewedWithVisibility, EVIDENCE_MAX,
    HELD_FOR_ADOPTION,
};

use std::sync::Arc;

use sqlx::AnyPool;

/// A handle on the ledger database. Cheap to clone.
#[derive(Clone)]
pub struct Ledger {
    /// Writes. On SQLite this pool has one connection, so writers queue in-process instead of
    /// failing with `SQLITE_BUSY`.
    writer: AnyPool,
    /// Reads. On PostgreSQL the same pool as `writer`.
    reader: AnyPool,
    backend: Backend,
    /// Every backend-dependent statement, rendered for this backend.
    sql: Arc<statements::Statements>,
    /// Whether the hot writes go through group commit ([`write::Groups`]).
    group_commit: bool,
    /// The group-commit lanes, started on first use.
    groups: Arc<std::sync::OnceLock<write::Groups>>,
    /// Where new jobs' messages go in their own transaction ([`LedgerOptions::direct_queue`]).
    direct: Option<Arc<DirectQueue>>,
    /// Group commits armed to lose their answer: by a test ([`Ledger::lose_commit_answers`])
    /// or at a rate by the chaos soak ([`Ledger::lose_commit_answers_at`]).
    lost_commits: Arc<std::sync::Mutex<write::LostCommits>>,
    /// Renewal commits a test armed to answer late ([`Ledger::slow_renewal_answers`]).
    #[cfg(feature = "sabotage")]
    slow_renewals: Arc<std::sync::Mutex<(u32, std::time::Duration)>>,
}

/// The embedded queue new jobs are sent to as they are created.
#[derive(Debug)]
pub(crate) struct DirectQueue {
    pub(crate) name: String,
    /// Woken after each commit that sent: the queue's long polls in this process.
    pub(crate) sent: Arc<tokio::sync::Notify>,
    /// How many new jobs may still be sent at creation before the dispatcher looks again
    /// ([`Ledger::meter_direct`]): while it says there is room in the queue and nothing waits
    /// in the outbox. Without a metering dispatcher, any number.
    room: std::sync::atomic::AtomicI64,
    /// Tenants with a cap on jobs in flight: their jobs always wait for the dispatcher.
    capped: std::sync::Mutex<Arc<std::collections::HashSet<String>>>,
}

impl DirectQueue {
    /// Takes a place for a new job of `tenant`, if the dispatcher left one.
    fn take(&self, tenant: &str) -> bool {
        if self.capped.lock().expect("direct lock").contains(tenant) {
            return false;
        }
        self.room
            .fetch_update(
                std::sync::atomic::Ordering::AcqRel,
                std::sync::atomic::Ordering::Acquire,
                |room| (room > 0).then(|| room - 1),
            )
            .is_ok()
    }
}

impl std::fmt::Debug for Ledger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ledger")
            .field("backend", &self.backend)
            .finish()
    }
}

impl Ledger {
    fn new(writer: AnyPool, reader: AnyPool, backend: Backend, options: &LedgerOptions) -> Ledger {
        Ledger {
            writer,
            reader,
            backend,
            sql: Arc::new(statements::Statements::render(backend)),
            group_commit: options.group_commit,
            groups: Arc::default(),
            direct: options.direct_queue.as_ref().map(|name| {
                Arc::new(DirectQueue {
                    name: name.clone(),
                    sent: Arc::default(),
                    room: std::sync::atomic::AtomicI64::new(i64::MAX),
                    capped: Default::default(),
                })
            }),
            lost_commits: Arc::default(),
            #[cfg(feature = "sabotage")]
            slow_renewals: Arc::default(),
        }
    }

    /// The wake-up of `queue`'s long polls when new jobs are sent to it directly.
    pub(crate) fn direct_sends(&self, queue: &str) -> Option<Arc<tokio::sync::Notify>> {
        self.direct
            .as_ref()
            .filter(|direct| direct.name == queue)
            .map(|direct| Arc::clone(&direct.sent))
    }

    /// The dispatcher's word on new jobs sent at creation (a queue in this database): `room`
    /// more may go before it looks again (0 while the outbox has jobs waiting for their turn,
    /// so that no new job passes them), none of `capped`'s.
    pub fn meter_direct(&self, room: i64, capped: std::collections::HashSet<String>) {
        if let Some(direct) = &self.direct {
            direct
                .room
                .store(room.max(0), std::sync::atomic::Ordering::Release);
            *direct.capped.lock().expect("direct lock") = Arc::new(capped);
        }
    }

    /// Whether `other` is a handle on this very ledger (a clone of it, lanes or not).
    pub fn is_same(&self, other: &Ledger) -> bool {
        Arc::ptr_eq(&self.sql, &other.sql)
    }

    /// The same pools without lanes: what the lanes' own runners write through.
    fn without_groups(&self) -> Ledger {
        Ledger {
            group_commit: false,
            groups: Arc::default(),
            ..self.clone()
        }
    }
}
