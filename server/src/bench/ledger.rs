//! `fenceline bench ledger`: the ledger's fenced cycle (claim → start attempt → accept, each a
//! short transaction with its events) under concurrent owners, measured beside a baseline of
//! one conditional `UPDATE … RETURNING` per transaction on the same database, in one run.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{generated_job, Measurement, Report};
use crate::job::Actor;
use crate::ledger::{Ledger, LedgerError, LedgerOptions};
use crate::settings::cli::BenchArgs;

/// Runs the baseline, then the ledger cycle, on the same database.
pub async fn ledger(
    database_url: &str,
    options: &LedgerOptions,
    args: &BenchArgs,
) -> Result<Report, LedgerError> {
    let owners = args.owners.max(1);
    let mut options = options.clone();
    options.max_connections = options.max_connections.max(owners as u32);
    // The fenced cycle alone: no queue in the ledger takes the new jobs' messages.
    options.direct_queue = None;
    let ledger = Ledger::connect(database_url, &options).await?;
    ledger.migrate().await?;

    let statements = args.jobs * 3;
    let baseline = baseline(&ledger, owners, statements).await?;

    // Jobs are created before the clock starts: the run measures the fenced cycle only.
    let run = uuid::Uuid::now_v7().simple().to_string();
    let mut ids = Vec::with_capacity(args.jobs);
    for i in 0..args.jobs {
        let job = generated_job(
            "bench",
            format!("{run}-{i}"),
            "bench",
            i,
            Duration::from_secs(3600),
            3,
        );
        let created = ledger.create_job(job, &Actor::Drill).await?;
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
                let attempt = ledger.start_attempt(&claimed.owner, "stub").await?;
                ledger
                    .accept_result(&claimed.owner, attempt.attempt_no, "{}")
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
        title: format!(
            "ledger benchmark on {} with {owners} concurrent owners",
            ledger.backend().as_str()
        ),
        runs: vec![baseline, fenced_ops, cycle],
        notes: Vec::new(),
    })
}

/// One conditional `UPDATE … RETURNING` per transaction, each owner on its own row.
async fn baseline(
    ledger: &Ledger,
    owners: usize,
    statements: usize,
) -> Result<Measurement, LedgerError> {
    ledger.baseline_reset(owners).await?;
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for owner in 0..owners {
        let ledger = ledger.clone();
        let next = Arc::clone(&next);
        tasks.spawn(async move {
            let mut seen = 0_i64;
            while next.fetch_add(1, Ordering::Relaxed) < statements {
                seen = ledger.baseline_bump(owner as i64, seen).await?;
            }
            Ok::<(), LedgerError>(())
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
