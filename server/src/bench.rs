//! `fenceline bench ledger`: the ledger's fenced cycle (claim → start attempt → accept, each a
//! short transaction with its events) under concurrent owners, measured beside a baseline of
//! one conditional `UPDATE … RETURNING` per transaction on the same database, in one run.
//!
//! Writes rows under tenant `bench` and a `bench_baseline` table: point it at a scratch
//! database, never at production.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::config::BenchArgs;
use crate::job::{request_digest, Actor};
use crate::ledger::{Ledger, LedgerError, LedgerOptions, NewJob, ReplayPolicy};

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
    pub backend: &'static str,
    pub owners: usize,
    pub runs: Vec<Measurement>,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "ledger benchmark on {} with {} concurrent owners",
            self.backend, self.owners
        )?;
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
        Ok(())
    }
}

/// Runs the baseline, then the ledger cycle, on the same database.
pub async fn ledger(
    database_url: &str,
    options: &LedgerOptions,
    args: &BenchArgs,
) -> Result<Report, LedgerError> {
    let owners = args.owners.max(1);
    let mut options = options.clone();
    options.max_connections = options.max_connections.max(owners as u32);
    let ledger = Ledger::connect(database_url, &options).await?;
    ledger.migrate().await?;

    let statements = args.jobs * 3;
    let baseline = baseline(&ledger, owners, statements).await?;

    // Jobs are created before the clock starts: the run measures the fenced cycle only.
    let run = uuid::Uuid::now_v7().simple().to_string();
    let mut ids = Vec::with_capacity(args.jobs);
    for i in 0..args.jobs {
        let input = json!({ "bench": i });
        let created = ledger
            .create_job(
                NewJob {
                    tenant: "bench".into(),
                    idempotency_key: format!("{run}-{i}"),
                    request_digest: request_digest(&input, "bench", &json!({})),
                    contract_version: "bench".into(),
                    input,
                    model: json!({}),
                    deadline: Duration::from_secs(3600),
                    max_attempts: 3,
                    replay_policy: ReplayPolicy::Manual,
                },
                &Actor::Drill,
            )
            .await?;
        ids.push(created.job().job_id.clone());
    }
    let ids = Arc::new(ids);
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for owner in 0..owners {
        let ledger = ledger.clone();
        let ids = Arc::clone(&ids);
        let next = Arc::clone(&next);
        tasks.spawn(async move {
            let worker = format!("bench-{owner}");
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(job_id) = ids.get(i) else {
                    return Ok::<(), LedgerError>(());
                };
                let claimed = ledger
                    .claim(job_id, &worker, Duration::from_secs(60))
                    .await?;
                let attempt = ledger
                    .start_attempt(job_id, claimed.epoch, &worker, "stub")
                    .await?;
                ledger
                    .accept_result(job_id, claimed.epoch, attempt.attempt_no, &worker, "{}")
                    .await?;
            }
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined.map_err(|e| LedgerError::Invalid(format!("bench task failed: {e}")))??;
    }
    let cycle = Measurement {
        name: "ledger: claim → attempt → accept (3 fenced transactions + 4 events per job)",
        operations: args.jobs,
        elapsed: started.elapsed(),
        unit: "jobs",
    };
    let fenced_ops = Measurement {
        name: "ledger: fenced transactions",
        operations: args.jobs * 3,
        elapsed: cycle.elapsed,
        unit: "tx",
    };
    ledger.close().await;
    Ok(Report {
        backend: ledger.backend().as_str(),
        owners,
        runs: vec![baseline, fenced_ops, cycle],
    })
}

/// One conditional `UPDATE … RETURNING` per transaction, each owner on its own row.
async fn baseline(
    ledger: &Ledger,
    owners: usize,
    statements: usize,
) -> Result<Measurement, LedgerError> {
    let pool = ledger.write_pool();
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS bench_baseline (id BIGINT PRIMARY KEY, v BIGINT NOT NULL)",
    )
    .execute(pool)
    .await?;
    for owner in 0..owners {
        sqlx::query("DELETE FROM bench_baseline WHERE id = $1")
            .bind(owner as i64)
            .execute(pool)
            .await?;
        sqlx::query("INSERT INTO bench_baseline (id, v) VALUES ($1, 0)")
            .bind(owner as i64)
            .execute(pool)
            .await?;
    }
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for owner in 0..owners {
        let pool = pool.clone();
        let next = Arc::clone(&next);
        tasks.spawn(async move {
            let mut seen = 0_i64;
            while next.fetch_add(1, Ordering::Relaxed) < statements {
                let v: i64 = sqlx::query_scalar(
                    "UPDATE bench_baseline SET v = v + 1 WHERE id = $1 AND v = $2 RETURNING v",
                )
                .bind(owner as i64)
                .bind(seen)
                .fetch_one(&pool)
                .await?;
                seen = v;
            }
            Ok::<(), sqlx::Error>(())
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined.map_err(|e| LedgerError::Invalid(format!("bench task failed: {e}")))??;
    }
    Ok(Measurement {
        name: "baseline: one conditional UPDATE … RETURNING per transaction",
        operations: statements,
        elapsed: started.elapsed(),
        unit: "tx",
    })
}
