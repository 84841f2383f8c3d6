//! Counts the SQL statements this process runs, for the benchmarks that report what a
//! workload cost the database: sqlx reports each finished statement as a `sqlx::query` event,
//! and this layer only counts them (it never reads their text or values). Installed by
//! `fenceline bench renewals` alone: turning the events on costs each statement a copy of
//! its text.

use std::sync::atomic::{AtomicU64, Ordering};

use tracing::{Event, Subscriber};
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

static STATEMENTS: AtomicU64 = AtomicU64::new(0);

/// Statements finished since the process started, when [`statement_counter`] is installed.
pub fn statements_run() -> u64 {
    STATEMENTS.load(Ordering::Relaxed)
}

struct StatementCounter;

impl<S: Subscriber> Layer<S> for StatementCounter {
    fn on_event(&self, _: &Event<'_>, _: Context<'_, S>) {
        STATEMENTS.fetch_add(1, Ordering::Relaxed);
    }
}

/// The counting layer, seeing only sqlx's statement events (so it turns on no others).
pub fn statement_counter<S: Subscriber + for<'a> LookupSpan<'a>>() -> impl Layer<S> {
    StatementCounter.with_filter(filter_fn(|m| m.target() == "sqlx::query"))
}
