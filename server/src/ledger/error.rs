//! Errors at the ledger boundary.

use crate::job::JobState;

/// Why a guarded write matched no row, found by re-reading the job.
#[derive(Debug, Clone, PartialEq, Eq, Hash, thiserror::Error)]
pub enum Refusal {
    #[error("no such job")]
    NotFound,
    /// Another owner was authorized since: the caller is fenced out.
    #[error("stale epoch: the caller holds epoch {expected}, the job is at {found}")]
    StaleEpoch { expected: i64, found: i64 },
    /// The caller's ownership lease ran out (database clock).
    #[error("the ownership lease expired")]
    LeaseExpired,
    /// The job's fixed deadline has passed.
    #[error("the job's deadline has passed")]
    DeadlinePassed,
    /// Terminal states are final.
    #[error("the job is already {0}")]
    AlreadyTerminal(JobState),
    /// A live owner holds the job.
    #[error("a live owner holds the job at epoch {epoch}")]
    LiveOwner { epoch: i64 },
    /// The cumulative attempt budget is spent.
    #[error("the attempt budget is spent")]
    BudgetExhausted,
    /// A retry was authorized with a backoff that has not elapsed.
    #[error("the retry backoff has not elapsed")]
    BackoffPending,
    /// A previous attempt has no recorded outcome yet.
    #[error("an earlier attempt has no recorded outcome")]
    AttemptPending,
    /// The attempt named is not a pending attempt of the caller's epoch.
    #[error("no pending attempt {0} at the caller's epoch")]
    NoSuchAttempt(i64),
    /// The job's replay policy does not pre-approve a retry.
    #[error("the job's replay policy does not pre-approve a retry")]
    PolicyForbids,
    /// The job is in a state the operation does not apply to.
    #[error("the job is {0}")]
    WrongState(JobState),
}

impl Refusal {
    /// A stable code for events, APIs and metrics labels.
    pub fn code(&self) -> &'static str {
        match self {
            Refusal::NotFound => "not_found",
            Refusal::StaleEpoch { .. } => "stale_epoch",
            Refusal::LeaseExpired => "lease_expired",
            Refusal::DeadlinePassed => "deadline_passed",
            Refusal::AlreadyTerminal(_) => "already_terminal",
            Refusal::LiveOwner { .. } => "live_owner",
            Refusal::BudgetExhausted => "budget_exhausted",
            Refusal::BackoffPending => "backoff_pending",
            Refusal::AttemptPending => "attempt_pending",
            Refusal::NoSuchAttempt(_) => "no_such_attempt",
            Refusal::PolicyForbids => "policy_forbids",
            Refusal::WrongState(_) => "wrong_state",
        }
    }
}

/// Everything that can go wrong at the ledger boundary.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// A guarded write matched no row; `refusal` says why.
    #[error("job {job_id}: {refusal}")]
    Refused { job_id: String, refusal: Refusal },
    /// The idempotency key is already bound to a different request.
    #[error("idempotency key already used for a different request (job {existing})")]
    IdempotencyConflict { existing: String },
    /// Bad input to the ledger API itself.
    #[error("invalid: {0}")]
    Invalid(String),
    /// A stored value that the code cannot read: a schema drift or a bug.
    #[error("corrupt ledger row: {0}")]
    Corrupt(String),
    #[error("database error")]
    Database(#[from] sqlx::Error),
    /// The caller's own bound ran out before the database answered: the write may or may not
    /// have happened.
    #[error("the database did not answer in time")]
    TimedOut,
    #[error("migration error")]
    Migrate(#[from] sqlx::migrate::MigrateError),
}

impl LedgerError {
    pub(crate) fn refused(job_id: &str, refusal: Refusal) -> Self {
        LedgerError::Refused {
            job_id: job_id.to_owned(),
            refusal,
        }
    }

    /// Whether the database is unreachable or refusing work right now (as opposed to a bug or
    /// a refused write): the service is not ready, and the caller may retry later.
    pub fn is_unavailable(&self) -> bool {
        let error = match self {
            LedgerError::Database(error) => error,
            LedgerError::TimedOut => return true,
            _ => return false,
        };
        match error {
            sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::WorkerCrashed => true,
            sqlx::Error::Database(db) => db.code().is_some_and(|code| {
                // PostgreSQL: connection exceptions (08…), shutdown/admin termination (57P…),
                // the database gone (3D000), out of resources (53…).
                // SQLite: BUSY (5), LOCKED (6), IOERR (10), FULL (13), CANTOPEN (14).
                code.starts_with("08")
                    || code.starts_with("57P")
                    || code.starts_with("53")
                    || code == "3D000"
                    || ["5", "6", "10", "13", "14"].contains(&code.as_ref())
            }),
            _ => false,
        }
    }

    /// The refusal, when this is one.
    pub fn refusal(&self) -> Option<&Refusal> {
        match self {
            LedgerError::Refused { refusal, .. } => Some(refusal),
            _ => None,
        }
    }
}
