//! `fenceline bench renewals`: one worker holding many long calls, renewing visibility and
//! lease on schedule; how late the renewals run, beside plain timers on the same runtime, with
//! the process's CPU time and memory.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::submit_jobs;
use crate::ledger::{Ledger, LedgerError, LedgerOptions};

/// `fenceline bench renewals`: lateness of scheduled renewals with many calls in flight.
pub async fn renewals(
    database_url: &str,
    options: &LedgerOptions,
    args: &crate::settings::cli::RenewalArgs,
) -> Result<String, LedgerError> {
    use crate::provider::stub::{StubConfig, StubProvider};
    use crate::queue::embedded::EmbeddedQueue;
    use crate::worker::{dispatcher, Timings, Worker, WorkerConfig};
    use tokio_util::sync::CancellationToken;

    let heartbeat = Duration::from_secs(args.heartbeat_secs.max(1));
    let measure = Duration::from_secs(args.measure_secs.max(1));

    // Baseline: the same number of plain timers on this runtime, each due every `heartbeat`.
    let baseline = timer_lateness(args.in_flight, heartbeat, measure).await;

    let run = uuid::Uuid::now_v7().simple().to_string();
    let name = format!("renew-{run}");
    // As `serve` and `worker` run on the embedded queue: a new job's message goes in with it,
    // on this run's queue.
    let options = LedgerOptions {
        direct_queue: Some(name.clone()),
        ..options.clone()
    };
    let ledger = Ledger::connect(database_url, &options).await?;
    ledger.migrate().await?;
    let queue = EmbeddedQueue::new(ledger.clone(), &name, 5);
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
    let rss_before = rss_mib();
    let worker = Worker::new(ledger.clone(), queue.clone(), stub, config);
    // What one delivery's work holds for as long as its call runs, before any heap data.
    let task_bytes = std::mem::size_of_val(&worker.handle_delivery(crate::queue::Delivery {
        message_id: String::new(),
        receipt: crate::queue::ReceiptHandle::new(String::new()),
        body: String::new(),
        receive_count: 1,
        first_receive_at_ms: None,
        sent_at_ms: None,
    }));
    let stop = CancellationToken::new();
    let running = tokio::spawn({
        let (worker, stop) = (worker.clone(), stop.clone());
        async move { worker.run(stop).await }
    });
    let dispatching = tokio::spawn(dispatcher::run(
        ledger.clone(),
        queue,
        Duration::from_millis(5),
        Default::default(),
        stop.clone(),
    ));
    let tenant = format!("renew-{run}");
    let ramp = Instant::now();
    submit_jobs(&ledger, &tenant, &run, "hold", args.in_flight, hold * 2, 1).await?;
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
    let statements_before = super::statements_run();
    tokio::time::sleep(measure).await;
    let cpu = process_cpu().saturating_sub(cpu_before);
    let statements = super::statements_run() - statements_before;
    let (count, p50, p99, max) = stats.summary();
    let rss = rss_mib();
    // The calls are left as they are: handing 120,000 of them back would measure the ledger's
    // releases, not the renewals. The process ends with the report; the ledger stays open
    // until then, so the heartbeat's last rounds do not fail against a closed pool.
    stop.cancel();
    running.abort();
    let _ = dispatching.await;
    Ok(format!(
        "renewal lateness on {backend}, {n} calls in flight, renewals every {hb:?}, measured {measure:?} (ramp-up {ramp:.1?})\n\
         | run | renewals | p50 late | p99 late | max late |\n| --- | ---: | ---: | ---: | ---: |\n\
         | baseline: {n} plain tokio timers | {bc} | {bp50} ms | {bp99} ms | {bmax} ms |\n\
         | fenceline worker: visibility + lease renewals, events recorded | {count} | {p50} ms | {p99} ms | {max} ms |\n\
         process CPU during the measurement: {cpu_pct:.0} % of one core; RSS at the end: {rss} MiB, \
         {rss_before} MiB before the worker started ({per_call:.1} KiB per call in flight); \
         one delivery's future: {task_bytes} bytes\n\
         database statements during the measurement: {statements} ({per_sec:.0} a second, \
         {per_renewal:.2} a renewal)",
        backend = ledger.backend().as_str(),
        n = args.in_flight,
        hb = heartbeat,
        bc = baseline.0,
        bp50 = baseline.1,
        bp99 = baseline.2,
        bmax = baseline.3,
        cpu_pct = cpu.as_secs_f64() / measure.as_secs_f64() * 100.0,
        per_sec = statements as f64 / measure.as_secs_f64(),
        per_renewal = statements as f64 / count.max(1) as f64,
        per_call = rss.saturating_sub(rss_before) as f64 * 1024.0 / args.in_flight.max(1) as f64,
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
