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
    pub title: String,
    pub runs: Vec<Measurement>,
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
        Ok(())
    }
}

/// A generated job (benchmarks and demos): `input` is `{"<label>": i}`.
fn generated_job(
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
        title: format!(
            "ledger benchmark on {} with {owners} concurrent owners",
            ledger.backend().as_str()
        ),
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

/// `fenceline bench pipeline`.
pub async fn pipeline(
    database_url: &str,
    options: &LedgerOptions,
    args: &crate::config::PipelineArgs,
) -> Result<Report, LedgerError> {
    use crate::provider::stub::{StubConfig, StubProvider};
    use crate::queue::embedded::EmbeddedQueue;
    use crate::worker::{dispatcher, Timings, Worker, WorkerConfig};
    use tokio_util::sync::CancellationToken;

    let ledger = Ledger::connect(database_url, options).await?;
    ledger.migrate().await?;
    let baseline = naive_pipeline(&ledger, args.jobs, args.workers).await?;

    let run = uuid::Uuid::now_v7().simple().to_string();
    let queue = EmbeddedQueue::new(ledger.clone(), &format!("bench-{run}"), 5);
    let stub = StubProvider::new(StubConfig::default());
    let stop = CancellationToken::new();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..args.workers.max(1) {
        let mut config = WorkerConfig::new(format!("bench-{i}"));
        config.timings = Timings {
            receive_wait: Duration::from_millis(50),
            ..Timings::default()
        };
        config.max_in_flight = 64;
        let worker = Worker::new(ledger.clone(), queue.clone(), stub.clone(), config);
        let stop = stop.clone();
        tasks.spawn(async move { worker.run(stop).await });
    }
    let (l, q, s) = (ledger.clone(), queue.clone(), stop.clone());
    tasks.spawn(async move { dispatcher::run(l, q, Duration::from_millis(2), s).await });

    let tenant = format!("bench-{run}");
    let started = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let mut submitters = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let (ledger, next, tenant, run) = (
            ledger.clone(),
            Arc::clone(&next),
            tenant.clone(),
            run.clone(),
        );
        let jobs = args.jobs;
        submitters.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= jobs {
                    return Ok::<(), LedgerError>(());
                }
                let job = generated_job(
                    &tenant,
                    format!("{run}-{i}"),
                    "bench",
                    i,
                    Duration::from_secs(3600),
                    3,
                );
                ledger.create_job(job, &Actor::Drill).await?;
            }
        });
    }
    while let Some(joined) = submitters.join_next().await {
        joined.map_err(|e| LedgerError::Invalid(format!("submitter failed: {e}")))??;
    }
    loop {
        let counts = ledger.count_by_state(Some(&tenant)).await?;
        let done: i64 = counts
            .iter()
            .filter(|(s, _)| s.is_terminal())
            .map(|(_, n)| n)
            .sum();
        if done as usize >= args.jobs {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let elapsed = started.elapsed();
    stop.cancel();
    while tasks.join_next().await.is_some() {}
    let succeeded = ledger
        .count_by_state(Some(&tenant))
        .await?
        .into_iter()
        .find(|(s, _)| *s == crate::job::JobState::Succeeded)
        .map_or(0, |(_, n)| n);
    ledger.close().await;
    Ok(Report {
        title: format!(
            "end-to-end benchmark on {} with {} worker loops, {} jobs",
            ledger.backend().as_str(),
            args.workers,
            args.jobs
        ),
        runs: vec![
            baseline,
            Measurement {
                name: "fenceline: submit → dispatch → receive → claim → attempt → accept → delete (embedded queue, stub 0 ms)",
                operations: succeeded as usize,
                elapsed,
                unit: "jobs",
            },
        ],
    })
}

/// A job table with no fencing, no events and no queue: insert every job, then workers take
/// and finish one per `UPDATE … RETURNING`.
async fn naive_pipeline(
    ledger: &Ledger,
    jobs: usize,
    workers: usize,
) -> Result<Measurement, LedgerError> {
    let pool = ledger.write_pool().clone();
    sqlx::query("DROP TABLE IF EXISTS bench_naive")
        .execute(&pool)
        .await?;
    sqlx::query("CREATE TABLE bench_naive (id BIGINT PRIMARY KEY, state TEXT NOT NULL, payload TEXT NOT NULL)")
        .execute(&pool)
        .await?;
    sqlx::query("CREATE INDEX bench_naive_state ON bench_naive (state, id)")
        .execute(&pool)
        .await?;
    let started = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let mut inserters = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let (pool, next) = (pool.clone(), Arc::clone(&next));
        inserters.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= jobs {
                    return Ok::<(), sqlx::Error>(());
                }
                sqlx::query(
                    "INSERT INTO bench_naive (id, state, payload) VALUES ($1, 'ready', $2)",
                )
                .bind(i as i64)
                .bind(json!({ "bench": i }).to_string())
                .execute(&pool)
                .await?;
            }
        });
    }
    while let Some(joined) = inserters.join_next().await {
        joined.map_err(|e| LedgerError::Invalid(e.to_string()))??;
    }
    let take = ledger.sql(
        "UPDATE bench_naive SET state = 'done' WHERE id = \
         (SELECT id FROM bench_naive WHERE state = 'ready' ORDER BY id LIMIT 1{skip_locked}) RETURNING id",
    );
    let mut takers = tokio::task::JoinSet::new();
    for _ in 0..workers.max(1) {
        let (pool, take) = (pool.clone(), take.clone());
        takers.spawn(async move {
            let mut done = 0usize;
            while sqlx::query(&take).fetch_optional(&pool).await?.is_some() {
                done += 1;
            }
            Ok::<usize, sqlx::Error>(done)
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

/// `fenceline bench renewals`: lateness of scheduled renewals with many calls in flight.
pub async fn renewals(
    database_url: &str,
    options: &LedgerOptions,
    args: &crate::config::RenewalArgs,
) -> Result<String, LedgerError> {
    use crate::provider::stub::{StubConfig, StubProvider};
    use crate::queue::embedded::EmbeddedQueue;
    use crate::worker::{dispatcher, Timings, Worker, WorkerConfig};
    use tokio_util::sync::CancellationToken;

    let heartbeat = Duration::from_secs(args.heartbeat_secs.max(1));
    let measure = Duration::from_secs(args.measure_secs.max(1));

    // Baseline: the same number of plain timers on this runtime, each due every `heartbeat`.
    let baseline = timer_lateness(args.in_flight, heartbeat, measure).await;

    let ledger = Ledger::connect(database_url, options).await?;
    ledger.migrate().await?;
    let run = uuid::Uuid::now_v7().simple().to_string();
    let queue = EmbeddedQueue::new(ledger.clone(), &format!("renew-{run}"), 5);
    let hold = measure + heartbeat * 2 + Duration::from_secs(600);
    let stub = StubProvider::new(StubConfig {
        latency: hold,
        ..Default::default()
    });
    let mut config = WorkerConfig::new("renewals");
    config.max_in_flight = args.in_flight;
    config.drain_timeout = Duration::ZERO;
    config.timings = Timings {
        heartbeat,
        visibility: heartbeat * 3 + Duration::from_secs(15),
        lease: heartbeat * 3 + Duration::from_secs(15),
        margin: Duration::from_secs(15),
        progress_timeout: hold * 2,
        receive_wait: Duration::from_millis(50),
        ..Timings::default()
    };
    let worker = Worker::new(ledger.clone(), queue.clone(), stub, config);
    let stop = CancellationToken::new();
    let running = tokio::spawn({
        let (worker, stop) = (worker.clone(), stop.clone());
        async move { worker.run(stop).await }
    });
    let dispatching = tokio::spawn(dispatcher::run(
        ledger.clone(),
        queue,
        Duration::from_millis(5),
        stop.clone(),
    ));
    let tenant = format!("renew-{run}");
    let ramp = Instant::now();
    for i in 0..args.in_flight {
        let job = generated_job(&tenant, format!("{run}-{i}"), "hold", i, hold * 2, 1);
        ledger.create_job(job, &Actor::Drill).await?;
    }
    while worker.in_flight() < args.in_flight {
        tokio::time::sleep(Duration::from_millis(200)).await;
        if ramp.elapsed() > Duration::from_secs(1800) {
            return Err(LedgerError::Invalid("the worker never filled up".into()));
        }
    }
    let ramp = ramp.elapsed();
    let stats = worker.renewal_stats();
    stats.clear();
    let cpu_before = process_cpu();
    tokio::time::sleep(measure).await;
    let cpu = process_cpu().saturating_sub(cpu_before);
    let (count, p50, p99, max) = stats.summary();
    let rss = rss_mib();
    stop.cancel();
    running.abort();
    let _ = dispatching.await;
    ledger.close().await;
    Ok(format!(
        "renewal lateness on {backend}, {n} calls in flight, renewals every {hb:?}, measured {measure:?} (ramp-up {ramp:.1?})\n\
         | run | renewals | p50 late | p99 late | max late |\n| --- | ---: | ---: | ---: | ---: |\n\
         | baseline: {n} plain tokio timers | {bc} | {bp50} ms | {bp99} ms | {bmax} ms |\n\
         | fenceline worker: visibility + lease renewals, events recorded | {count} | {p50} ms | {p99} ms | {max} ms |\n\
         process CPU during the measurement: {cpu_pct:.0} % of one core; RSS at the end: {rss} MiB",
        backend = ledger.backend().as_str(),
        n = args.in_flight,
        hb = heartbeat,
        bc = baseline.0,
        bp50 = baseline.1,
        bp99 = baseline.2,
        bmax = baseline.3,
        cpu_pct = cpu.as_secs_f64() / measure.as_secs_f64() * 100.0,
    ))
}

async fn timer_lateness(n: usize, every: Duration, measure: Duration) -> (usize, u32, u32, u32) {
    let samples = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = tokio::task::JoinSet::new();
    let started = tokio::time::Instant::now();
    for i in 0..n {
        let samples = Arc::clone(&samples);
        // Spread first deadlines over one interval, as jobs arriving over time would be.
        let offset = every.mul_f64(i as f64 / n as f64);
        tasks.spawn(async move {
            let mut due = started + offset + every;
            while due <= started + measure {
                tokio::time::sleep_until(due).await;
                let late = tokio::time::Instant::now().duration_since(due).as_millis();
                samples
                    .lock()
                    .expect("samples")
                    .push(u32::try_from(late).unwrap_or(u32::MAX));
                due += every;
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    let mut s = samples.lock().expect("samples").clone();
    if s.is_empty() {
        return (0, 0, 0, 0);
    }
    s.sort_unstable();
    let at = |q: f64| s[((s.len() - 1) as f64 * q).round() as usize];
    (s.len(), at(0.5), at(0.99), *s.last().unwrap_or(&0))
}

/// User + system CPU time of this process (Linux), zero elsewhere.
fn process_cpu() -> Duration {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return Duration::ZERO;
    };
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime are fields 14 and 15 of stat; 12 and 13 after the command name.
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

fn rss_mib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb / 1024)
}

/// Creates a running job for tenant `tenant` and gives it `events` more timeline events.
pub async fn seed_timeline(
    ledger: &Ledger,
    tenant: &str,
    events: usize,
    pattern: &str,
) -> Result<String, LedgerError> {
    use crate::job::EventKind;
    use crate::ledger::{DeliveryRef, NewEvent};
    let run = uuid::Uuid::now_v7().simple().to_string();
    let job = generated_job(
        tenant,
        format!("seed-{run}"),
        "seed",
        0,
        Duration::from_secs(12 * 3600),
        3,
    );
    let created = ledger.create_job(job, &Actor::Drill).await?;
    let job_id = created.job().job_id.clone();
    let claimed = ledger
        .claim(&job_id, "seed-worker", Duration::from_secs(11 * 3600))
        .await?;
    ledger
        .start_attempt(&job_id, claimed.epoch, "seed-worker", "stub")
        .await?;
    let worker = Actor::Worker("seed-worker".into());
    let other = Actor::Worker("seed-other".into());
    let delivery = |n: i64| DeliveryRef {
        message_id: format!("{run}-m"),
        receive_count: n,
        handle_hash: format!("{:08x}", n),
    };
    let mut batch = Vec::with_capacity(500);
    for i in 0..events {
        let n = i as i64;
        let event = if pattern == "alternating" {
            if i % 2 == 0 {
                NewEvent::new(EventKind::DeliveryReceived, &other).delivery(delivery(n / 2 + 2))
            } else {
                NewEvent::new(EventKind::DuplicateSuppressed, &other)
                    .delivery(delivery(n / 2 + 2))
                    .detail(json!({ "owner_epoch": claimed.epoch, "defer_ms": 30000 }))
            }
        } else if i % 100 == 50 {
            NewEvent::new(EventKind::DuplicateSuppressed, &other)
                .delivery(delivery(n / 100 + 2))
                .detail(json!({ "owner_epoch": claimed.epoch, "defer_ms": 30000 }))
        } else if i % 2 == 0 {
            NewEvent::new(EventKind::LeaseRenewed, &worker).detail(json!({ "lease_ms": 90000 }))
        } else {
            NewEvent::new(EventKind::VisibilityRenewed, &worker)
                .delivery(delivery(1))
                .detail(json!({ "timeout_ms": 90000 }))
        };
        batch.push(event.epoch(claimed.epoch));
        if batch.len() == 500 {
            ledger.append_events(&job_id, &batch).await?;
            batch.clear();
        }
    }
    ledger.append_events(&job_id, &batch).await?;
    Ok(job_id)
}

/// Inserts `n` synthetic jobs across all states (SQL-generated, for list benchmarks).
pub async fn seed_jobs(ledger: &Ledger, tenant: &str, n: u64) -> Result<(), LedgerError> {
    // Ids sort like real ones (time-ordered), and every row satisfies the schema's checks.
    let (series, id) = match ledger.backend() {
        crate::ledger::Backend::Postgres => (
            "SELECT x FROM generate_series(1, $2::BIGINT) AS x",
            "'job_' || lpad(to_hex(x), 8, '0') || '-0000-7000-8000-' || lpad(to_hex(x), 12, '0')",
        ),
        crate::ledger::Backend::Sqlite => (
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < $2) SELECT x FROM c",
            "'job_' || printf('%08x', x) || '-0000-7000-8000-' || printf('%012x', x)",
        ),
    };
    let states = "CASE x % 7 WHEN 0 THEN 'ready' WHEN 1 THEN 'running' WHEN 2 THEN 'unknown' \
                  WHEN 3 THEN 'retry_authorized' WHEN 4 THEN 'succeeded' WHEN 5 THEN 'failed_terminal' \
                  ELSE 'expired' END";
    // Spread over the last 30 days (ids and creation times rise together); terminal jobs
    // finished up to ten minutes after they were created.
    let created = "({now} - ($2 - x) * (2592000000000 / $2))";
    let sql = ledger.sql(&format!(
        "INSERT INTO jobs (job_id, tenant, idempotency_key, request_digest, input_ref, \
         contract_version, state, owner_epoch, owner_id, owner_until, deadline_at, attempt_count, \
         max_attempts, result_ref, created_at, updated_at, terminal_at, next_event_seq) \
         SELECT {id}, $1, 'seed-' || x, 'd', 'seed', 'seed', {states}, \
         CASE WHEN x % 7 = 0 THEN 0 ELSE 1 END, \
         CASE WHEN x % 7 = 1 THEN 'seed' END, CASE WHEN x % 7 = 1 THEN {{now}} + 60000000 END, \
         {created} + 86400000000, CASE WHEN x % 7 IN (0, 1, 3) THEN 0 ELSE 1 END, 3, \
         CASE WHEN x % 7 = 4 THEN 'res_seed' END, {created}, {created}, \
         CASE WHEN x % 7 >= 4 THEN {{least}}({created} + (x % 600) * 1000000, {{now}}) END, 1 \
         FROM ({series}) AS s"
    ));
    sqlx::query(&sql)
        .bind(tenant)
        .bind(n as i64)
        .execute(ledger.write_pool())
        .await?;
    Ok(())
}

/// `fenceline bench console`: render times of the console's pages over generated data.
pub async fn console(
    database_url: &str,
    options: &LedgerOptions,
    args: &crate::config::ConsoleBenchArgs,
) -> Result<String, LedgerError> {
    let ledger = Ledger::connect(database_url, options).await?;
    ledger.migrate().await?;
    let started = Instant::now();
    seed_jobs(&ledger, "bench-list", args.jobs).await?;
    let seeded_jobs = started.elapsed();
    let started = Instant::now();
    let long = seed_timeline(&ledger, "bench-timeline", args.events, "renewals").await?;
    let alternating = seed_timeline(&ledger, "bench-timeline", args.events, "alternating").await?;
    let seeded_events = started.elapsed();
    if ledger.backend() == crate::ledger::Backend::Postgres {
        sqlx::query("ANALYZE").execute(ledger.write_pool()).await?;
    }
    let app = crate::startup::Application::build(
        database_url,
        options,
        ([127, 0, 0, 1], 0).into(),
        1 << 20,
    )
    .await
    .map_err(|e| LedgerError::Invalid(e.to_string()))?;
    let base = format!("http://{}", app.local_addr());
    let stop = tokio_util::sync::CancellationToken::new();
    let server = tokio::spawn({
        let stop = stop.clone();
        async move {
            app.run_until_stopped(async move { stop.cancelled().await })
                .await
        }
    });
    let client = reqwest::Client::new();
    // A keyset cursor half-way down the list.
    let half = format!(
        "job_{:08x}-0000-7000-8000-{:012x}",
        args.jobs / 2,
        args.jobs / 2
    );
    let pages = [
        (
            "baseline: /healthz (same server, no rendering)",
            "/healthz".to_owned(),
        ),
        ("jobs list, first page", "/jobs".to_owned()),
        (
            "jobs list, state filter",
            "/jobs?state=succeeded".to_owned(),
        ),
        (
            "jobs list, state filter, page half-way down",
            format!("/jobs?state=unknown&before={half}"),
        ),
        (
            "jobs list, tenant filter",
            "/jobs?tenant=bench-list".to_owned(),
        ),
        ("find by idempotency key", "/jobs?q=seed-123456".to_owned()),
        (
            "job timeline, 10,000-event long call (folded)",
            format!("/jobs/{long}"),
        ),
        (
            "job timeline, 10,000 alternating events (paged), first page",
            format!("/jobs/{alternating}"),
        ),
        (
            "job timeline, 10,000 alternating events, page around event 9,000",
            format!("/jobs/{alternating}?around=9000"),
        ),
        ("overview (charts, last hour)", "/".to_owned()),
        ("overview (charts, last day)", "/?window=day".to_owned()),
        ("overview (charts, last week)", "/?window=week".to_owned()),
    ];
    let mut out = format!(
        "console render times on {}, {} jobs (generated in {:.1?}), two {}-event timelines (generated in {:.1?}), {} requests per page\n\
         | page | p50 | p95 | bytes |\n| --- | ---: | ---: | ---: |\n",
        ledger.backend().as_str(),
        args.jobs,
        seeded_jobs,
        args.events,
        seeded_events,
        args.requests
    );
    for (name, path) in pages {
        let mut times = Vec::with_capacity(args.requests);
        let mut bytes = 0;
        for _ in 0..args.requests {
            let t = Instant::now();
            let response = client
                .get(format!("{base}{path}"))
                .send()
                .await
                .map_err(|e| LedgerError::Invalid(e.to_string()))?;
            let status = response.status();
            let body = response
                .bytes()
                .await
                .map_err(|e| LedgerError::Invalid(e.to_string()))?;
            times.push(t.elapsed());
            if !status.is_success() {
                return Err(LedgerError::Invalid(format!("{path} answered {status}")));
            }
            bytes = body.len();
        }
        times.sort_unstable();
        let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
        out.push_str(&format!(
            "| {name} | {:.1} ms | {:.1} ms | {bytes} |\n",
            at(0.5).as_secs_f64() * 1000.0,
            at(0.95).as_secs_f64() * 1000.0
        ));
    }
    stop.cancel();
    let _ = server.await;
    ledger.close().await;
    Ok(out)
}
