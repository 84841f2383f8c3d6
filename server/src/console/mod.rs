//! The console port implemented over the ledger: view models for the pages, formatted for
//! operators (UTC times, durations, short fingerprints), never carrying inputs, answers or
//! receipt handles. One file per page, like `app/src/pages/`.
//!
//! # Layout
//!
//! - `overview`, `jobs`, `job` (with its timeline), `unknown`, `dead_letters`: one page each.
//! - `swimlane` and [`charts`]: the job's swimlane marks and the SVG they are drawn as.
//! - `format`: times, durations and rows as operators read them.
//!
//! Must not write to the ledger, and must not put SQL here: the ledger's read API serves it.

pub mod charts;
mod dead_letters;
mod format;
mod job;
mod jobs;
mod overview;
mod swimlane;
mod unknown;

use fenceline_app::console::{
    Console, DeadLetters, JobDetail, JobsPage, JobsQuery, Overview, Pending, Timeline,
    TimelineQuery, UnknownPage, Window,
};

use crate::ledger::{Ledger, LedgerError};

/// Runs of at least this many same-kind events fold into one row.
const FOLD_MIN: i64 = 4;
/// Rows (events or folded runs) per timeline page.
const PAGE_RUNS: u32 = 200;
/// Jobs per list page.
const PAGE_JOBS: u32 = 50;

/// Where the console finds dead letters.
#[derive(Debug, Clone)]
pub struct QueueInfo {
    /// As shown to operators, e.g. `embedded:jobs`.
    pub description: String,
    /// The embedded dead-letter queue's name, when the queue is embedded.
    pub embedded_dead_letters: Option<String>,
}

impl Default for QueueInfo {
    fn default() -> Self {
        QueueInfo {
            description: "embedded:jobs".into(),
            embedded_dead_letters: Some("jobs-dlq".into()),
        }
    }
}

pub struct LedgerConsole {
    ledger: Ledger,
    queue: QueueInfo,
}

impl LedgerConsole {
    pub fn new(ledger: Ledger, queue: QueueInfo) -> Self {
        LedgerConsole { ledger, queue }
    }
}

fn shown(e: LedgerError) -> String {
    if e.is_unavailable() {
        "the ledger database is unavailable; this page will work again once it answers".into()
    } else {
        tracing::error!(error = %e, "console query failed");
        "an internal error occurred (logged on the server)".into()
    }
}

impl Console for LedgerConsole {
    fn overview(&self, window: Window) -> Pending<'_, Overview> {
        Box::pin(async move { self.build_overview(window).await.map_err(shown) })
    }

    fn jobs(&self, query: JobsQuery) -> Pending<'_, JobsPage> {
        Box::pin(async move { self.build_jobs(query).await.map_err(shown) })
    }

    fn job(&self, job_id: String) -> Pending<'_, Option<JobDetail>> {
        Box::pin(async move { self.build_job(job_id).await.map_err(shown) })
    }

    fn timeline(&self, job_id: String, query: TimelineQuery) -> Pending<'_, Timeline> {
        Box::pin(async move { self.build_timeline(job_id, query).await.map_err(shown) })
    }

    fn unknown(&self, after: Option<String>) -> Pending<'_, UnknownPage> {
        Box::pin(async move { self.build_unknown(after).await.map_err(shown) })
    }

    fn dead_letters(&self) -> Pending<'_, DeadLetters> {
        Box::pin(async move { self.build_dead_letters().await.map_err(shown) })
    }
}
