//! The benchmarks behind `fenceline bench …`, each run beside its reference in the same
//! invocation (see `docs/benchmarks.md`), and the data generators they share with demos and
//! tests.
//!
//! They write rows (tenant `bench`, a `bench_baseline` table, generated jobs and events): point
//! them at a scratch database, never at production.
//!
//! # Layout
//!
//! - `ledger`: the fenced cycle under concurrent owners beside one conditional
//!   `UPDATE … RETURNING` per transaction.
//! - `pipeline`: end to end through the embedded queue beside a naive job table.
//! - `renewals`: renewal lateness with many calls in flight beside plain timers.
//! - `console`: console render times over generated data, and the generators.
//! - `submit`: jobs submitted through the API, one a request beside batches.
//! - `statements`: counts the SQL statements the process runs (for `renewals`).
//! - `flow`: flow control through real `serve` and `worker` processes: a burst against a
//!   rate-limiting model server (`throttle`), a quiet tenant behind a backlog (`fairness`).

mod console;
mod flow;
mod ledger;
mod pipeline;
mod renewals;
mod statements;
mod submit;

pub use console::{console, seed_jobs, seed_timeline};
pub use flow::{fairness, throttle, LimitingServer};
pub use ledger::ledger;
pub use pipeline::pipeline;
pub use renewals::renewals;
pub use statements::{statement_counter, statements_run};
pub use submit::submit;

use std::fmt;
use std::time::Duration;

use serde_json::json;

use crate::job::request_digest;
use crate::ledger::{NewJob, ReplayPolicy};

/// The application served from this process on a loopback port, for a benchmark's client.
pub(crate) struct Served {
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    /// The served application's ledger (its group-commit counters are the ones that move).
    pub ledger: crate::ledger::Ledger,
    stop: tokio_util::sync::CancellationToken,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Served {
    /// Builds the application on `settings` (bound to a free loopback port, bodies up to
    /// 1 MiB) and serves it until [`Served::stop`].
    pub(crate) async fn start(
        settings: &crate::settings::Settings,
    ) -> Result<Served, crate::ledger::LedgerError> {
        let mut settings = settings.clone();
        settings.http.bind = ([127, 0, 0, 1], 0).into();
        settings.http.max_body_bytes = 1 << 20;
        let app = crate::startup::Application::build(&settings)
            .await
            .map_err(|e| crate::ledger::LedgerError::Invalid(e.to_string()))?;
        let base = format!("http://{}", app.local_addr());
        let ledger = app.ledger().clone();
        let stop = tokio_util::sync::CancellationToken::new();
        let server = tokio::spawn({
            let stop = stop.clone();
            async move {
                app.run_until_stopped(async move { stop.cancelled().await })
                    .await
            }
        });
        Ok(Served {
            base,
            ledger,
            stop,
            server,
        })
    }

    pub(crate) async fn stop(self) {
        self.stop.cancel();
        let _ = self.server.await;
    }
}

/// One measured run.
#[derive(Debug, Clone)]
pub struct Measurement {
    pub name: &'static str,
    pub operations: usize,
    pub elapsed: Duration,
    pub unit: &'static str,
}

impl Measurement {
    pub fn per_second(&self) -> f64 {
        self.operations as f64 / self.elapsed.as_secs_f64()
    }
}

/// The side-by-side result of one invocation.
#[derive(Debug, Clone)]
pub struct Report {
    pub title: String,
    pub runs: Vec<Measurement>,
    /// Lines printed under the table.
    pub notes: Vec<String>,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.title)?;
        writeln!(f, "| run | operations | seconds | rate |")?;
        writeln!(f, "| --- | ---: | ---: | ---: |")?;
        for run in &self.runs {
            writeln!(
                f,
                "| {} | {} | {:.2} | {:.0} {}/s |",
                run.name,
                run.operations,
                run.elapsed.as_secs_f64(),
                run.per_second(),
                run.unit
            )?;
        }
        for note in &self.notes {
            writeln!(f, "{note}")?;
        }
        Ok(())
    }
}

/// A generated job (benchmarks and demos): `input` is `{"<label>": i}`.
pub(super) fn generated_job(
    tenant: &str,
    key: String,
    label: &str,
    i: usize,
    deadline: Duration,
    max_attempts: u32,
) -> NewJob {
    let input = json!({ label: i });
    NewJob {
        tenant: tenant.to_owned(),
        idempotency_key: key,
        request_digest: request_digest(&input, "bench", &json!({})),
        contract_version: "bench".into(),
        input,
        model: json!({}),
        deadline,
        max_attempts,
        replay_policy: ReplayPolicy::Manual,
        drill_run: None,
        traceparent: None,
    }
}

/// Concurrent submitters, as an API with many requests in flight would have.
pub(super) const SUBMITTERS: usize = 128;

/// Submits `jobs` generated jobs (keys `<run>-<i>`) from [`SUBMITTERS`] concurrent callers.
pub(super) async fn submit_jobs(
    ledger: &crate::ledger::Ledger,
    tenant: &str,
    run: &str,
    label: &'static str,
    jobs: usize,
    deadline: Duration,
    max_attempts: u32,
) -> Result<(), crate::ledger::LedgerError> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let next = Arc::new(AtomicUsize::new(0));
    let mut submitters = tokio::task::JoinSet::new();
    for _ in 0..SUBMITTERS.min(jobs.max(1)) {
        let (ledger, next) = (ledger.clone(), Arc::clone(&next));
        let (tenant, run) = (tenant.to_owned(), run.to_owned());
        submitters.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= jobs {
                    return Ok::<(), crate::ledger::LedgerError>(());
                }
                let key = format!("{run}-{i}");
                let job = generated_job(&tenant, key, label, i, deadline, max_attempts);
                ledger.create_job(job, &crate::job::Actor::Drill).await?;
            }
        });
    }
    while let Some(joined) = submitters.join_next().await {
        joined
            .map_err(|e| crate::ledger::LedgerError::Invalid(format!("submitter failed: {e}")))??;
    }
    Ok(())
}
