//! Opening the ledger: pools, SQLite pragmas, migrations.

use std::sync::Once;
use std::time::Duration;

use sqlx::any::AnyPoolOptions;
use sqlx::{Connection, Executor};

use super::dialect::Backend;
use super::{Ledger, LedgerError};

static POSTGRES_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/postgres");
static SQLITE_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/sqlite");

/// How long PostgreSQL lets a session of the ledger sit inside a transaction between two
/// statements before it ends the session, rolling the transaction back. A ledger transaction
/// only ever waits on the database, never on a model or a queue, so a live process leaves
/// none open for long; a process paused in one (SIGSTOP, a frozen VM) would otherwise keep its
/// rows locked for as long as the pause lasts — the job's row, which the replacement must claim,
/// and its message, which the replacement's receive skips while it is locked.
const IDLE_IN_TRANSACTION: &str = "SET idle_in_transaction_session_timeout = '5s'";

/// SQLite durability level. `Full` makes every acknowledged write survive a power cut; `Normal`
/// (in WAL) may lose the last transactions on power loss but never corrupts the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SqliteSync {
    #[default]
    Full,
    Normal,
}

/// How to open the ledger.
#[derive(Debug, Clone)]
pub struct LedgerOptions {
    /// Connections for PostgreSQL; readers for SQLite (it always has exactly one writer).
    pub max_connections: u32,
    pub acquire_timeout: Duration,
    pub sqlite_sync: SqliteSync,
    /// Coalesce concurrent callers' hot writes (claims, results, new jobs, transport events,
    /// embedded-queue deletes) into shared transactions.
    pub group_commit: bool,
    /// The embedded queue (in this database) that jobs go to: a new job's message is then
    /// written in the job's own transaction, its outbox row recorded as sent, and no
    /// dispatcher round stands between submission and delivery. Jobs of drills still go
    /// through their dispatcher lane, where their faults are armed.
    pub direct_queue: Option<String>,
}

impl Default for LedgerOptions {
    fn default() -> Self {
        LedgerOptions {
            max_connections: 16,
            acquire_timeout: Duration::from_secs(5),
            sqlite_sync: SqliteSync::Full,
            group_commit: true,
            direct_queue: None,
        }
    }
}

impl Ledger {
    /// Connects to `url` (`postgres://…` or `sqlite://…`). Does not migrate.
    pub async fn connect(url: &str, options: &LedgerOptions) -> Result<Ledger, LedgerError> {
        static DRIVERS: Once = Once::new();
        DRIVERS.call_once(sqlx::any::install_default_drivers);

        let backend = Backend::from_url(url).ok_or_else(|| {
            LedgerError::Invalid(
                "DATABASE_URL must start with postgres://, postgresql:// or sqlite:".into(),
            )
        })?;
        match backend {
            Backend::Postgres => {
                let pool = AnyPoolOptions::new()
                    .max_connections(options.max_connections)
                    .acquire_timeout(options.acquire_timeout)
                    .after_connect(|conn, _| {
                        Box::pin(async move {
                            conn.execute(IDLE_IN_TRANSACTION).await?;
                            Ok(())
                        })
                    })
                    .connect(url)
                    .await?;
                Ok(Ledger::new(pool.clone(), pool, backend, options))
            }
            Backend::Sqlite => {
                let sync = match options.sqlite_sync {
                    SqliteSync::Full => "PRAGMA synchronous = FULL",
                    SqliteSync::Normal => "PRAGMA synchronous = NORMAL",
                };
                let writer = AnyPoolOptions::new()
                    .max_connections(1)
                    .acquire_timeout(options.acquire_timeout)
                    .after_connect(move |conn, _| {
                        Box::pin(async move {
                            conn.execute("PRAGMA journal_mode = WAL").await?;
                            conn.execute(sync).await?;
                            conn.execute("PRAGMA foreign_keys = ON").await?;
                            conn.execute("PRAGMA busy_timeout = 5000").await?;
                            // Inside a transaction of several statements, SQLite copies each
                            // page a statement changes to that statement's journal first, to
                            // undo the statement alone; a group commit's statements change
                            // rows on many pages. In memory rather than in a temporary file:
                            // more jobs a second through the pipeline (docs/benchmarks.md).
                            // A statement's journal holds at most the pages it changes, and a
                            // statement alone in its transaction (retention's) keeps none.
                            conn.execute("PRAGMA temp_store = MEMORY").await?;
                            Ok(())
                        })
                    })
                    .connect(url)
                    .await?;
                // Touch the file through the writer first so that readers find it in WAL mode.
                writer.acquire().await?.ping().await?;
                let reader = AnyPoolOptions::new()
                    .max_connections(options.max_connections.max(1))
                    .acquire_timeout(options.acquire_timeout)
                    .after_connect(|conn, _| {
                        Box::pin(async move {
                            conn.execute("PRAGMA busy_timeout = 5000").await?;
                            conn.execute("PRAGMA query_only = ON").await?;
                            Ok(())
                        })
                    })
                    .connect(url)
                    .await?;
                Ok(Ledger::new(writer, reader, backend, options))
            }
        }
    }

    /// Applies the migrations of this backend that have not run yet.
    pub async fn migrate(&self) -> Result<(), LedgerError> {
        match self.backend {
            Backend::Postgres => POSTGRES_MIGRATIONS.run(&self.writer).await?,
            Backend::Sqlite => SQLITE_MIGRATIONS.run(&self.writer).await?,
        }
        Ok(())
    }

    /// The migrations of this backend not applied yet (`0023_provider_route`), oldest first.
    pub async fn pending_migrations(&self) -> Result<Vec<String>, LedgerError> {
        let migrator = match self.backend {
            Backend::Postgres => &POSTGRES_MIGRATIONS,
            Backend::Sqlite => &SQLITE_MIGRATIONS,
        };
        // No table yet: nothing was ever applied.
        let applied: Vec<i64> =
            sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success")
                .fetch_all(&self.reader)
                .await
                .unwrap_or_default();
        Ok(migrator
            .iter()
            .filter(|m| !m.migration_type.is_down_migration() && !applied.contains(&m.version))
            .map(|m| format!("{:04}_{}", m.version, m.description.replace(' ', "_")))
            .collect())
    }

    /// Which database this is.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Answers only when the database answers a query.
    pub async fn ping(&self) -> Result<(), LedgerError> {
        sqlx::query("SELECT 1").execute(&self.reader).await?;
        Ok(())
    }

    /// The database clock, in microseconds since the Unix epoch.
    pub async fn now_us(&self) -> Result<i64, LedgerError> {
        Ok(sqlx::query_scalar(&self.sql.now)
            .fetch_one(&self.reader)
            .await?)
    }

    /// Closes the pools, waiting for connections in use; the connections the group commit
    /// keeps between commits go back first.
    pub async fn close(&self) {
        if let Some(groups) = self.groups.get() {
            groups.release();
        }
        self.writer.close().await;
        self.reader.close().await;
    }

    /// Begins a write transaction. On SQLite it is `BEGIN IMMEDIATE`: the write lock is taken
    /// up front (waiting up to the busy timeout), so a transaction that reads before it writes
    /// cannot fail with `SQLITE_BUSY_SNAPSHOT` when another process (`serve` beside a
    /// `worker`, `dlq-replay`) wrote the file in between.
    ///
    /// On PostgreSQL the `BEGIN` runs in a task of its own, so that a caller who gives up
    /// while it is under way (a bound running out, a client hanging up) cannot leave its
    /// connection inside a transaction: sqlx 0.8 counts a transaction only once `BEGIN` has
    /// answered, and a connection dropped before that goes back to the pool with the
    /// transaction open, where every later borrower's statements would run inside it. The
    /// task always reads the answer; a transaction nobody waits for any more is dropped there
    /// and rolled back.
    pub async fn begin_write(&self) -> Result<sqlx::Transaction<'static, sqlx::Any>, sqlx::Error> {
        match self.backend {
            Backend::Postgres => {
                let writer = self.writer.clone();
                tokio::spawn(async move { writer.begin().await })
                    .await
                    .map_err(|_| sqlx::Error::WorkerCrashed)?
            }
            Backend::Sqlite => self.writer.begin_with("BEGIN IMMEDIATE").await,
        }
    }

    /// The pool that reads (the writer's on PostgreSQL). For tests that inspect rows
    /// directly; the product's reads go through the ledger's functions.
    pub fn read_pool(&self) -> &sqlx::AnyPool {
        &self.reader
    }

    /// Every statement of the catalogue by name, rendered for this backend (batched ones with
    /// one and three rows).
    pub fn statements(&self) -> Vec<(String, String)> {
        self.sql.all()
    }
}
