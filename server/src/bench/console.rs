//! `fenceline bench console`: console render times over generated data (a job with a long
//! timeline, many jobs for the lists), and the generators behind it.

use std::time::{Duration, Instant};

use super::generated_job;
use crate::job::detail;
use crate::job::Actor;
use crate::ledger::{Ledger, LedgerError};

/// Creates a job for tenant `tenant`, gives its call `events` more timeline events and lets it
/// finish (`succeeded`), so a seeded demo leaves nothing running; `unknown` leaves it waiting
/// for a decision instead.
pub async fn seed_timeline(
    ledger: &Ledger,
    tenant: &str,
    events: usize,
    pattern: &str,
) -> Result<String, LedgerError> {
    use crate::job::EventKind;
    use crate::ledger::{DeliveryRef, NewEvent};
    let mut tries = 0;
    let (run, job_id, claimed) = loop {
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
        let lease = if pattern == "unknown" {
            Duration::from_millis(200)
        } else {
            Duration::from_secs(11 * 3600)
        };
        // A worker already serving this ledger may claim the job between its creation and the
        // seed's claim (its dispatcher sends the message in that moment): that job is the
        // worker's, and the seed makes another.
        match ledger.claim(&job_id, "seed-worker", lease).await {
            Ok(claimed) => break (run, job_id, claimed),
            Err(LedgerError::Refused { .. }) if tries < 10 => {
                tries += 1;
                tracing::info!(%job_id, "a running worker claimed the seeded job first; seeding another");
            }
            Err(error) => return Err(error),
        }
    };
    let attempt = ledger.start_attempt(&claimed.owner, "stub").await?;
    if pattern == "unknown" {
        // A call that may have reached the model, whose worker vanished: `unknown`.
        tokio::time::sleep(Duration::from_millis(300)).await;
        // A running reaper may get there first: the job is as wanted either way.
        match ledger
            .recovery_claim(&job_id, &Actor::System, "lease_expired", false)
            .await
        {
            Ok(_)
            | Err(LedgerError::Refused {
                refusal: crate::ledger::Refusal::WrongState(crate::job::JobState::Unknown),
                ..
            }) => return Ok(job_id),
            Err(error) => return Err(error),
        }
    }
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
                    .detail(suppressed(claimed.epoch))
            }
        } else if i % 100 == 50 {
            NewEvent::new(EventKind::DuplicateSuppressed, &other)
                .delivery(delivery(n / 100 + 2))
                .detail(suppressed(claimed.epoch))
        } else if i % 2 == 0 {
            NewEvent::new(EventKind::LeaseRenewed, &worker)
                .detail(detail::LeaseRenewed { lease_ms: 90000 })
        } else {
            NewEvent::new(EventKind::VisibilityRenewed, &worker)
                .delivery(delivery(1))
                .detail(detail::VisibilityRenewed {
                    timeout_ms: 90000,
                    deadline_left_ms: None,
                })
        };
        batch.push(event.epoch(claimed.epoch));
        if batch.len() == 500 {
            ledger.append_events(&job_id, &batch).await?;
            batch.clear();
        }
    }
    ledger.append_events(&job_id, &batch).await?;
    ledger
        .accept_result(&claimed.owner, attempt.attempt_no, r#"{"seeded": true}"#)
        .await?;
    Ok(job_id)
}

/// Inserts `n` synthetic jobs across all states (SQL-generated, for list benchmarks).
pub async fn seed_jobs(ledger: &Ledger, tenant: &str, n: u64) -> Result<(), LedgerError> {
    ledger.seed_generated_jobs(tenant, n).await
}

/// `fenceline bench console`: render times of the console's pages over generated data.
pub async fn console(
    settings: &crate::settings::Settings,
    args: &crate::settings::cli::ConsoleBenchArgs,
) -> Result<String, LedgerError> {
    let ledger = Ledger::connect(&settings.ledger.url, &settings.ledger.options).await?;
    ledger.migrate().await?;
    let started = Instant::now();
    seed_jobs(&ledger, "bench-list", args.jobs).await?;
    let seeded_jobs = started.elapsed();
    let started = Instant::now();
    let long = seed_timeline(&ledger, "bench-timeline", args.events, "renewals").await?;
    let alternating = seed_timeline(&ledger, "bench-timeline", args.events, "alternating").await?;
    let seeded_events = started.elapsed();
    // The generated rows as autovacuum leaves them within a minute or so: analysed, and
    // vacuumed, which marks their pages all-visible. Unvacuumed, no index-only scan pays on
    // PostgreSQL, and the capped state counts walk the table instead (25.6 ms a state over
    // 1,000,000 jobs, against 5.5 ms through `jobs_state_id`).
    ledger.bench_settle().await?;
    let served = super::Served::start(settings).await?;
    let base = served.base.clone();
    // Pages are timed as a signed-in operator sees them: a redirect (to sign in, or anywhere)
    // is an error, never a fast page.
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| LedgerError::Invalid(e.to_string()))?;
    let cookie = sign_in(&ledger, &client, &base).await?;
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
         | page | first | p50 | p95 | bytes |\n| --- | ---: | ---: | ---: | ---: |\n",
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
                .header(reqwest::header::COOKIE, &cookie)
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
        let first = times.first().copied().unwrap_or_default();
        times.sort_unstable();
        let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
        out.push_str(&format!(
            "| {name} | {:.1} ms | {:.1} ms | {:.1} ms | {bytes} |\n",
            first.as_secs_f64() * 1000.0,
            at(0.5).as_secs_f64() * 1000.0,
            at(0.95).as_secs_f64() * 1000.0
        ));
    }
    served.stop().await;
    ledger.close().await;
    Ok(out)
}

/// Adds an operator with a random password and signs in as them, as a browser does; returns
/// the session cookie.
async fn sign_in(
    ledger: &Ledger,
    client: &reqwest::Client,
    base: &str,
) -> Result<String, LedgerError> {
    let fail = |e: &dyn std::fmt::Display| LedgerError::Invalid(format!("signing in: {e}"));
    let name = format!("bench-{}", &crate::http::sessions::new_token()[..12]);
    let password = crate::http::sessions::new_token();
    let hash = crate::operators::hash_password(&password).map_err(|e| fail(&e))?;
    ledger
        .add_operator(&name, crate::operators::Role::Viewer, None, &hash)
        .await?;
    let session = |response: &reqwest::Response| {
        response
            .headers()
            .get_all(reqwest::header::SET_COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .filter_map(|v| v.split(';').next())
            .find(|pair| !pair.ends_with('='))
            .map(str::to_owned)
    };
    let login = client
        .get(format!("{base}/login"))
        .send()
        .await
        .map_err(|e| fail(&e))?;
    let cookie = session(&login).ok_or_else(|| fail(&"no session cookie"))?;
    let page = login.text().await.map_err(|e| fail(&e))?;
    let marker = "name=\"csrf\" value=\"";
    let csrf = page
        .find(marker)
        .and_then(|at| page[at + marker.len()..].split('"').next())
        .ok_or_else(|| fail(&"no form token on /login"))?
        .to_owned();
    let response = client
        .post(format!("{base}/login"))
        .header(reqwest::header::COOKIE, &cookie)
        .header(reqwest::header::ORIGIN, base)
        .form(&[
            ("csrf", csrf.as_str()),
            ("name", name.as_str()),
            ("password", password.as_str()),
            ("next", "/"),
        ])
        .send()
        .await
        .map_err(|e| fail(&e))?;
    if response.status() != reqwest::StatusCode::SEE_OTHER {
        return Err(fail(&format!("/login answered {}", response.status())));
    }
    session(&response).ok_or_else(|| fail(&"no new session cookie"))
}

/// A copy suppressed while the owner at `epoch` held the job, pushed out 30 s.
fn suppressed(epoch: i64) -> detail::DuplicateSuppressed {
    detail::DuplicateSuppressed {
        owner_epoch: epoch,
        defer_ms: 30000,
        visibility: None,
    }
}
