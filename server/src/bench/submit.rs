//! `fenceline bench submit`: jobs submitted through the API by concurrent clients, one job a
//! request (`POST /api/v1/jobs`) beside batches (`POST /api/v1/jobs/batch`), on one server and
//! one database, in alternating rounds.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::ledger::{Ledger, LedgerError};
use crate::settings::cli::SubmitBenchArgs;
use crate::settings::Settings;

/// One pass: `jobs` jobs sent `per_request` at a time by `clients` clients.
struct Pass {
    per_request: usize,
    elapsed: Duration,
    latencies: Vec<Duration>,
    commits: u64,
}

fn failed(e: impl std::fmt::Display) -> LedgerError {
    LedgerError::Invalid(format!("bench submit: {e}"))
}

/// The body of job `i` of pass `pass`: a small document to summarise, as a client sends it.
fn job(pass: usize, i: u64) -> Value {
    json!({
        "idempotency_key": format!("submit-{pass}-{i}"),
        "input": {"document": format!("document {i}: {}", "lorem ipsum dolor sit amet ".repeat(6))},
        "model": {"temperature": 0},
    })
}

/// Sends pass `pass` and checks that every job of it was created.
async fn run_pass(
    base: &str,
    token: &str,
    ledger: &Ledger,
    args: &SubmitBenchArgs,
    pass: usize,
    per_request: usize,
) -> Result<Pass, LedgerError> {
    let client = reqwest::Client::new();
    let next = Arc::new(AtomicU64::new(0));
    let commits_before = ledger.group_stats().commits;
    let started = Instant::now();
    let mut clients = tokio::task::JoinSet::new();
    for _ in 0..args.clients {
        let (client, next, base, token) = (
            client.clone(),
            next.clone(),
            base.to_owned(),
            token.to_owned(),
        );
        let (jobs, per) = (args.jobs, per_request as u64);
        clients.spawn(async move {
            let mut latencies = Vec::new();
            loop {
                let first = next.fetch_add(per, Ordering::Relaxed);
                if first >= jobs {
                    return Ok::<_, LedgerError>(latencies);
                }
                let last = (first + per).min(jobs);
                let sent = Instant::now();
                let (url, body) = if per == 1 {
                    (format!("{base}/api/v1/jobs"), job(pass, first))
                } else {
                    let batch: Vec<Value> = (first..last).map(|i| job(pass, i)).collect();
                    (
                        format!("{base}/api/v1/jobs/batch"),
                        json!({ "jobs": batch }),
                    )
                };
                let response = client
                    .post(url)
                    .bearer_auth(&token)
                    .json(&body)
                    .send()
                    .await
                    .map_err(failed)?;
                let status = response.status();
                let answer: Value = response.json().await.map_err(failed)?;
                latencies.push(sent.elapsed());
                let created = if per == 1 {
                    u64::from(status.as_u16() == 201)
                } else {
                    answer["created"].as_u64().unwrap_or(0)
                };
                if created != last - first {
                    return Err(failed(format!(
                        "jobs {first} to {last} were not all created ({status}): {answer}"
                    )));
                }
            }
        });
    }
    let mut latencies = Vec::new();
    while let Some(done) = clients.join_next().await {
        latencies.extend(done.map_err(failed)??);
    }
    Ok(Pass {
        per_request,
        elapsed: started.elapsed(),
        latencies,
        commits: ledger.group_stats().commits - commits_before,
    })
}

/// `fenceline bench submit`.
pub async fn submit(settings: &Settings, args: &SubmitBenchArgs) -> Result<String, LedgerError> {
    if args.batch < 2 || args.batch > crate::http::contract::MAX_BATCH {
        return Err(failed(format!(
            "--batch is 2 to {} jobs a request",
            crate::http::contract::MAX_BATCH
        )));
    }
    let ledger = Ledger::connect(&settings.ledger.url, &settings.ledger.options).await?;
    ledger.migrate().await?;
    let token = ledger.add_token("bench-submit", "bench").await?;
    let served = super::Served::start(settings).await?;
    let mut out = format!(
        "API submissions on {}: {} jobs a pass, {} clients, {} (one job a request, then \
         {} a request)\n\
         | pass | jobs/s | requests/s | request p50 | request p95 | commits |\n\
         | --- | ---: | ---: | ---: | ---: | ---: |\n",
        ledger.backend().as_str(),
        args.jobs,
        args.clients,
        if args.rounds == 1 {
            "1 round".to_owned()
        } else {
            format!("{} rounds", args.rounds)
        },
        args.batch
    );
    let mut pass = 0;
    let mut rates: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for _ in 0..args.rounds {
        for (which, per_request) in [1, args.batch].into_iter().enumerate() {
            pass += 1;
            let mut p = run_pass(
                &served.base,
                &token,
                &served.ledger,
                args,
                pass,
                per_request,
            )
            .await?;
            p.latencies.sort_unstable();
            let at = |q: f64| {
                p.latencies[((p.latencies.len() - 1) as f64 * q).round() as usize].as_secs_f64()
                    * 1000.0
            };
            let seconds = p.elapsed.as_secs_f64();
            let rate = args.jobs as f64 / seconds;
            rates[which].push(rate);
            out.push_str(&format!(
                "| {} a request | {:.0} | {:.0} | {:.1} ms | {:.1} ms | {} |\n",
                p.per_request,
                rate,
                p.latencies.len() as f64 / seconds,
                at(0.5),
                at(0.95),
                p.commits
            ));
        }
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    out.push_str(&format!(
        "batches of {}: {:.1}x the jobs/s of one job a request (means over the rounds)\n",
        args.batch,
        mean(&rates[1]) / mean(&rates[0])
    ));
    served.stop().await;
    ledger.close().await;
    Ok(out)
}
