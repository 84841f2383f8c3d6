//! `fenceline bench pipeline`: jobs end to end through the embedded queue with the stub model
//! at 0 ms (submit → dispatch → receive → claim → attempt → accept → delete, every event
//! recorded), beside a naive job table on the same database. Group commit runs twice: fed
//! while its workers run, and drained after every job was submitted, as graphile-worker runs
//! beside it (`scripts/bench.sh pipeline`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use super::{submit_jobs, Measurement, Report, SUBMITTERS};
use crate::ledger::{Drills, GroupStats, Ledger, LedgerError, LedgerOptions};
use crate::metrics::{DeliveryOutcome, Metrics};

/// How long the workers may see no job through before the pass waits on the ledger's count.
const STALLED: Duration = Duration::from_secs(2);

/// `fenceline bench pipeline`: the naive table, then Fenceline with each write in its own
/// transaction, then with group commit fed live and drained, on one database.
pub async fn pipeline(
    database_url: &str,
    options: &LedgerOptions,
    args: &crate::settings::cli::PipelineArgs,
) -> Result<Report, LedgerError> {
    let ledger = Ledger::connect(database_url, options).await?;
    ledger.migrate().await?;
    let backend = ledger.backend();
    let baseline = naive_pipeline(&ledger, args.jobs, args.workers).await?;
    ledger.naive_reset().await?;
    ledger.close().await;
    let alone = LedgerOptions {
        group_commit: false,
        ..options.clone()
    };
    let (one_by_one, _, first) = fenceline_pipeline(database_url, &alone, args, Feed::Live).await?;
    let grouped = LedgerOptions {
        group_commit: true,
        ..options.clone()
    };
    let (live, stats, second) =
        fenceline_pipeline(database_url, &grouped, args, Feed::Live).await?;
    let (drained, drained_stats, third) =
        fenceline_pipeline(database_url, &grouped, args, Feed::Drained).await?;
    let ledger = Ledger::connect(database_url, options).await?;
    // Last, on the ledger the passes left in use (and settled), so that nothing of it changes
    // what they found.
    let record = record_reference(&ledger, args.jobs).await?;
    for (tenant, queue) in [first, second, third] {
        ledger.bench_forget(&tenant, &queue).await?;
    }
    ledger.close().await;
    Ok(Report {
        title: format!(
            "end-to-end benchmark on {} with {} worker loops holding up to {} deliveries each ({} receives open), {} jobs",
            backend.as_str(),
            args.workers,
            args.in_flight,
            args.receivers,
            args.jobs
        ),
        runs: vec![
            baseline,
            record,
            Measurement {
                name: "fenceline, one transaction per write: submit → dispatch → receive → claim → attempt → accept → delete (embedded queue, stub 0 ms)",
                ..one_by_one
            },
            Measurement {
                name: "fenceline, group commit: the same, concurrent writes sharing transactions",
                ..live
            },
            Measurement {
                name: "fenceline, group commit, drained: every job submitted first, timed from the workers' start",
                ..drained
            },
        ],
        notes: vec![
            group_note("group commit", &stats),
            group_note("drained (its submissions too)", &drained_stats),
        ],
    })
}

/// What group commit did in one pass, as a line under the table.
fn group_note(pass: &str, stats: &GroupStats) -> String {
    format!(
        "{pass}: {} commits carried {} writes ({:.1} a commit, {} at most); {} went alone, {} whole batches failed",
        stats.commits,
        stats.writes,
        stats.writes as f64 / stats.commits.max(1) as f64,
        stats.largest,
        stats.went_alone,
        stats.failed
    )
}

/// How a pass hands its jobs to the workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Feed {
    /// Submitted while the workers run; timed from the first submission.
    Live,
    /// Every job submitted before the workers start; timed from their start, as
    /// graphile-worker's pre-inserted jobs are timed from its runner's start.
    Drained,
}

/// Every job end to end through a fresh tenant and queue; the measurement counts those that
/// succeeded. Also what group commit did, and the tenant and queue, which stay in the ledger
/// (settled: analysed and checkpointed) until the benchmark's end, so that each pass finds
/// the ledger in use, as a deployment keeps its finished jobs until retention prunes them.
async fn fenceline_pipeline(
    database_url: &str,
    options: &LedgerOptions,
    args: &crate::settings::cli::PipelineArgs,
    feed: Feed,
) -> Result<(Measurement, GroupStats, (String, String)), LedgerError> {
    use crate::provider::stub::{StubConfig, StubProvider};
    use crate::queue::embedded::EmbeddedQueue;
    use crate::worker::{dispatcher, Timings, Worker, WorkerConfig};
    use tokio_util::sync::CancellationToken;

    let run = uuid::Uuid::now_v7().simple().to_string();
    let name = format!("bench-{run}");
    // As `serve` and `worker` run on the embedded queue: a new job's message goes in with it.
    let options = LedgerOptions {
        direct_queue: Some(name.clone()),
        ..options.clone()
    };
    let ledger = Ledger::connect(database_url, &options).await?;
    let queue = EmbeddedQueue::new(ledger.clone(), &name, 5);
    let stub = StubProvider::new(StubConfig::default());
    let stop = CancellationToken::new();
    // The workers and the dispatcher start once this is cancelled: at once when fed live,
    // after the last submission when drained.
    let go = CancellationToken::new();
    let mut tasks = tokio::task::JoinSet::new();
    let metrics = Metrics::default();
    for i in 0..args.workers.max(1) {
        let mut config = WorkerConfig::new(format!("bench-{i}"));
        config.metrics = metrics.clone();
        config.timings = Timings {
            receive_wait: Duration::from_millis(50),
            ..Timings::default()
        };
        config.max_in_flight = args.in_flight.max(1);
        config.receivers = args.receivers.max(1);
        let worker = Worker::new(ledger.clone(), queue.clone(), stub.clone(), config);
        let (stop, go) = (stop.clone(), go.clone());
        tasks.spawn(async move {
            go.cancelled().await;
            worker.run(stop).await
        });
    }
    // The dispatcher sends what is not sent at creation and meters the queue, as `serve`'s
    // does: within twice what the workers hold (the fleet's capacity, as their reports would
    // say it). Until it starts, nothing goes straight into the queue: drained, every job waits
    // in the outbox, as a burst that arrives before any worker does.
    let capacity = args.workers.max(1) * args.in_flight.max(1);
    ledger.meter_direct(0, Default::default());
    let (l, q, s, g) = (ledger.clone(), queue.clone(), stop.clone(), go.clone());
    tasks.spawn(async move {
        g.cancelled().await;
        let lane = dispatcher::Lane::metered(dispatcher::Meter::Fixed(2 * capacity));
        dispatcher::run_lane(
            l,
            q,
            Duration::from_millis(100),
            Default::default(),
            lane,
            s,
        )
        .await
    });

    let tenant = format!("bench-{run}");
    if feed == Feed::Live {
        go.cancel();
    }
    let submitted = Instant::now();
    submit_jobs(
        &ledger,
        &tenant,
        &run,
        "bench",
        args.jobs,
        Duration::from_secs(3600),
        3,
    )
    .await?;
    let started = match feed {
        Feed::Live => submitted,
        Feed::Drained => {
            go.cancel();
            Instant::now()
        }
    };
    // The workers count the jobs they saw through to an accepted result (each after its
    // commit), in this process: the clock stops at the last, with no read of the database
    // being measured. Counting the tenant's jobs by state reads every one of them (about
    // 10 ms at 10,000, twenty times a run when it was the clock) and is left to confirm it.
    seen_through(&metrics, args.jobs).await;
    let mut elapsed = started.elapsed();
    let mut polls = 0;
    // Should the ledger not hold every job terminal (a job that failed, or the workers
    // stalled), its count decides: each poll waits a quarter of the time the rest should take
    // at the rate so far (at least 10 ms, at most 500). A terminal job stays as it is, so the
    // count that saw every job terminal also gives the succeeded ones.
    let counts = loop {
        let counts = ledger
            .count_by_state(Some(&tenant), Drills::Counted)
            .await?;
        let done: i64 = counts
            .iter()
            .filter(|(s, _)| s.is_terminal())
            .map(|(_, n)| n)
            .sum();
        let done = done.max(0) as usize;
        if done >= args.jobs {
            break counts;
        }
        polls += 1;
        let rate = done as f64 / started.elapsed().as_secs_f64().max(0.001);
        let rest = if rate > 0.0 {
            (args.jobs - done) as f64 / rate / 4.0
        } else {
            0.1
        };
        tokio::time::sleep(Duration::from_secs_f64(rest.clamp(0.01, 0.5))).await;
    };
    if polls > 0 {
        elapsed = started.elapsed();
    }
    stop.cancel();
    while tasks.join_next().await.is_some() {}
    let succeeded = counts
        .into_iter()
        .find(|(s, _)| *s == crate::job::JobState::Succeeded)
        .map_or(0, |(_, n)| n);
    let stats = ledger.group_stats();
    ledger.bench_settle().await?;
    ledger.close().await;
    let measured = Measurement {
        name: "",
        operations: succeeded as usize,
        elapsed,
        unit: "jobs",
    };
    Ok((measured, stats, (tenant, queue.name().to_owned())))
}

/// Until the workers behind `metrics` have seen `jobs` jobs through to an accepted result, or
/// none for [`STALLED`].
async fn seen_through(metrics: &Metrics, jobs: usize) {
    let mut seen = (0, Instant::now());
    while seen.0 < jobs as u64 && seen.1.elapsed() < STALLED {
        tokio::time::sleep(Duration::from_millis(1)).await;
        let now = metrics.deliveries(DeliveryOutcome::Succeeded);
        if now > seen.0 {
            seen = (now, Instant::now());
        }
    }
}

/// Writers of the record's reference: as many batches in flight as the group commit's
/// runners and worker loops keep on PostgreSQL (SQLite takes one at a time anyway).
const RECORD_WRITERS: usize = 8;

/// The rows every job of the pipeline writes, by set-based statements and nothing else
/// ([`Ledger::record_reference`]), on the ledger as the passes left it; then forgotten.
async fn record_reference(ledger: &Ledger, jobs: usize) -> Result<Measurement, LedgerError> {
    let run = uuid::Uuid::now_v7().simple().to_string();
    let name = format!("reference-{run}");
    let started = Instant::now();
    let done = ledger
        .record_reference(&name, &name, &run, jobs, RECORD_WRITERS)
        .await?;
    let elapsed = started.elapsed();
    ledger.bench_forget(&name, &name).await?;
    Ok(Measurement {
        name: "reference: the same rows a job writes, by set-based SQL alone (batches of 128, no worker, no queue client)",
        operations: done.max(0) as usize,
        elapsed,
        unit: "jobs",
    })
}

/// A job table with no fencing, no events and no queue: insert every job, then workers take
/// and finish one per `UPDATE … RETURNING`.
async fn naive_pipeline(
    ledger: &Ledger,
    jobs: usize,
    workers: usize,
) -> Result<Measurement, LedgerError> {
    ledger.naive_reset().await?;
    let started = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let mut inserters = tokio::task::JoinSet::new();
    for _ in 0..SUBMITTERS {
        let (ledger, next) = (ledger.clone(), Arc::clone(&next));
        inserters.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= jobs {
                    return Ok::<(), LedgerError>(());
                }
                let payload = json!({ "bench": i }).to_string();
                ledger.naive_insert(i as i64, &payload).await?;
            }
        });
    }
    while let Some(joined) = inserters.join_next().await {
        joined.map_err(|e| LedgerError::Invalid(e.to_string()))??;
    }
    let mut takers = tokio::task::JoinSet::new();
    for _ in 0..workers.max(1) {
        let ledger = ledger.clone();
        takers.spawn(async move {
            let mut done = 0usize;
            while ledger.naive_take().await?.is_some() {
                done += 1;
            }
            Ok::<usize, LedgerError>(done)
        });
    }
    let mut done = 0;
    while let Some(joined) = takers.join_next().await {
        done += joined.map_err(|e| LedgerError::Invalid(e.to_string()))??;
    }
    Ok(Measurement {
        name: "baseline: naive job table (insert, then one claim-and-complete UPDATE per job)",
        operations: done,
        elapsed: started.elapsed(),
        unit: "jobs",
    })
}
