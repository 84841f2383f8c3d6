//! Settings in two steps: the raw command line and environment (clap), then resolved values
//! built once. Flags win over environment variables, which win over defaults.

use std::net::SocketAddr;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::ledger::{LedgerOptions, SqliteSync};

/// The embedded default: a SQLite file in the working directory, created when missing.
pub const DEFAULT_DATABASE_URL: &str = "sqlite://fenceline.sqlite?mode=rwc";
pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;

#[derive(Debug, Parser)]
#[command(
    name = "fenceline",
    version,
    about = "A fenced job ledger for long LLM jobs behind SQS-style queues",
    long_about = "A fenced job ledger for long LLM jobs behind SQS-style queues.\n\n\
        Without a subcommand, `fenceline` runs `serve` on the embedded default (SQLite)."
)]
pub struct Cli {
    /// The ledger database: `postgres://…` or `sqlite://path?mode=rwc`.
    #[arg(long, env = "DATABASE_URL", global = true, default_value = DEFAULT_DATABASE_URL)]
    pub database_url: String,

    /// SQLite durability: `full` survives power loss with every acknowledged write; `normal`
    /// may lose the last transactions on power loss.
    #[arg(long, env = "FENCELINE_SQLITE_SYNCHRONOUS", global = true, value_enum,
          default_value_t = SyncArg::Full)]
    pub sqlite_synchronous: SyncArg,

    /// Database connections (PostgreSQL) or reader connections (SQLite).
    #[arg(
        long,
        env = "FENCELINE_DB_MAX_CONNECTIONS",
        global = true,
        default_value_t = 16
    )]
    pub db_max_connections: u32,

    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SyncArg {
    Full,
    Normal,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the API and console (migrates the database first).
    Serve(ServeArgs),
    /// Apply database migrations and exit.
    Migrate,
    /// Manage API tokens.
    #[command(subcommand)]
    Token(TokenCommand),
    /// Measure the ledger beside a baseline on the same database.
    #[command(subcommand)]
    Bench(BenchCommand),
}

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Where to listen.
    #[arg(long, env = "FENCELINE_BIND", default_value = "127.0.0.1:8080")]
    pub bind: SocketAddr,
    /// Larger request bodies get 413.
    #[arg(long, env = "FENCELINE_MAX_BODY_BYTES", default_value_t = DEFAULT_MAX_BODY_BYTES)]
    pub max_body_bytes: usize,
}

impl Default for ServeArgs {
    fn default() -> Self {
        ServeArgs {
            bind: ([127, 0, 0, 1], 8080).into(),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Create an API token for a tenant and print it once (only its hash is stored).
    Add {
        /// The tenant the token acts for.
        tenant: String,
        /// A label to recognise the token by.
        #[arg(long, default_value = "default")]
        name: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// claim → start attempt → accept per job with concurrent owners, beside one conditional
    /// UPDATE … RETURNING per transaction. Writes bench rows: use a scratch database.
    Ledger(BenchArgs),
}

#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// Concurrent owners.
    #[arg(long, default_value_t = 16)]
    pub owners: usize,
    /// Jobs to run through the ledger (the baseline runs three statements per job).
    #[arg(long, default_value_t = 3000)]
    pub jobs: usize,
}

/// Resolved settings for the ledger.
pub fn ledger_options(cli: &Cli) -> LedgerOptions {
    LedgerOptions {
        max_connections: cli.db_max_connections.max(1),
        acquire_timeout: Duration::from_secs(5),
        sqlite_sync: match cli.sqlite_synchronous {
            SyncArg::Full => SqliteSync::Full,
            SyncArg::Normal => SqliteSync::Normal,
        },
    }
}
