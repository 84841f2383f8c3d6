//! Counts the SQL statements this process runs, for the benchmarks that report what a
//! workload cost the database: sqlx reports each finished statement as a `sqlx::query` event,
//! and this layer only counts them (it never reads their text or values). Installed by
//! `fenceline bench renewals` alone: turning the events on costs each statement a copy of
//! its text.

use std::sync::atomic::{AtomicU64, Ordering};

use tracing::{Event, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::Layer;

static STATEMENTS: AtomicU64 = AtomicU64::new(0);

/// Statements finished since the process started, when [`StatementCounter`] is installed.
pub fn statements_run() -> u64 {
    STATEMENTS.load(Ordering::Relaxed)
}

/// The counting layer; give it a filter that lets `sqlx::query` events through.
pub struct StatementCounter;

impl<S: Subscriber> Layer<S> for StatementCounter {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        if event.metadata().target() == "sqlx::query" {
            STATEMENTS.fetch_add(1, Ordering::Relaxed);
        }
    }
}
