//! Separate `fenceline worker` processes on one PostgreSQL ledger (with the embedded queue in
//! it): scale-out, a worker paused past its lease (SIGSTOP/SIGCONT), and one killed mid-call
//! (SIGKILL).

use std::process::Stdio;
use std::time::Duration;

use fenceline::job::{detail, JobState};
use fenceline::ledger::{AttemptOutcome, Job, Ledger};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

use crate::helpers::{create, fresh_ledger, kinds, new_job, skip_postgres, Db};

struct WorkerProcess(Child);

impl WorkerProcess {
    fn spawn(database_url: &str, id: &str, latency_ms: u64, extra: &[&str]) -> Self {
        Self::spawn_with(database_url, id, latency_ms, extra, &[])
    }

    /// [`WorkerProcess::spawn`] with environment variables of its own.
    fn spawn_with(
        database_url: &str,
        id: &str,
        latency_ms: u64,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        // Compressed timings unless `extra` names others.
        let timings: &[&str] = if extra.contains(&"--timings") {
            &[]
        } else {
            &["--timings", "compressed"]
        };
        let child = Command::new(env!("CARGO_BIN_EXE_fenceline"))
            // The queue is the embedded default unless `extra` names another.
            .args(["worker", "--database-url", database_url])
            .args(timings)
            .args(["--worker-id", id, "--reaper-interval-ms", "300"])
            .args(["--stub-latency-ms", &latency_ms.to_string()])
            .args(extra)
            // `FENCELINE_TEST_WORKER_LOG=info` shows what the workers did.
            .env(
                "FENCELINE_LOG",
                std::env::var("FENCELINE_TEST_WORKER_LOG").unwrap_or_else(|_| "error".into()),
            )
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start a fenceline worker process");
        WorkerProcess(child)
    }

    fn signal(&self, signal: Signal) {
        let pid = self.0.id().expect("running") as i32;
        kill(Pid::from_raw(pid), signal).expect("signal the worker");
    }
}

/// Workers that share the work and nothing more: production timings, whose leases outlast
/// a loaded machine's slow commits (the compressed two-second lease does not always, and a
/// job whose lease ran out during its call rightly waits in `unknown` for a decision).
const SCALE_OUT: [&str; 4] = ["--timings", "production", "--max-in-flight", "8"];

/// Creates `n` jobs keyed `{prefix}-{i}` and returns their ids.
async fn create_many(ledger: &Ledger, prefix: &str, n: usize) -> Vec<String> {
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        let job = new_job("acme", &format!("{prefix}-{i}"), serde_json::json!(i));
        ids.push(create(ledger, job).await);
    }
    ids
}

/// Asserts each job reached the model exactly once; returns the workers that did the work.
async fn workers_of_single_attempts(
    ledger: &Ledger,
    ids: &[String],
) -> std::collections::HashSet<String> {
    let mut workers = std::collections::HashSet::new();
    for id in ids {
        let attempts = ledger.attempts(id).await.unwrap();
        assert_eq!(attempts.len(), 1, "{id}: one provider call");
        workers.insert(attempts[0].worker_id.clone());
    }
    workers
}

/// Waits until every job is terminal, asserting each one succeeded.
async fn wait_all_succeeded(ledger: &Ledger, ids: &[String], limit: Duration) {
    let until = tokio::time::Instant::now() + limit;
    for id in ids {
        loop {
            let job = ledger.job(id).await.unwrap().unwrap();
            if job.state.is_terminal() {
                assert_eq!(job.state, JobState::Succeeded, "{id}");
                break;
            }
            if tokio::time::Instant::now() >= until {
                panic!(
                    "{id} is still {}: {}",
                    job.state,
                    crate::helpers::timeline(ledger, id).await
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Waits until the job's attempt has started (the model call is under way).
async fn wait_for_attempt(ledger: &Ledger, job_id: &str) {
    wait_until(
        ledger,
        job_id,
        Duration::from_secs(20),
        "the attempt",
        |k| k.iter().any(|k| k == "attempt_started"),
    )
    .await
}

/// Waits until another worker's recovery claim is on the job's timeline; returns the job then.
async fn wait_for_recovery(ledger: &Ledger, job_id: &str, limit: Duration) -> Job {
    wait_until(ledger, job_id, limit, "recovery", |k| {
        k.iter().any(|k| k == "recovery_claimed")
    })
    .await;
    ledger.job(job_id).await.unwrap().unwrap()
}

/// Runs the reaper until it has recovered the job, whose call may have run: `unknown`.
async fn reaped_to_unknown(ledger: &Ledger, job_id: &str) {
    let until = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        fenceline::worker::reaper::reap_once(ledger, Duration::from_secs(600))
            .await
            .unwrap();
        let job = ledger.job(job_id).await.unwrap().unwrap();
        if job.state != JobState::Running {
            assert_eq!(job.state, JobState::Unknown);
            return;
        }
        assert!(tokio::time::Instant::now() < until, "never recovered");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn wait_until(
    ledger: &Ledger,
    job_id: &str,
    limit: Duration,
    what: &str,
    done: impl Fn(&[String]) -> bool,
) {
    let until = tokio::time::Instant::now() + limit;
    loop {
        let kinds = kinds(ledger, job_id).await;
        if done(&kinds) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "timed out waiting for {what}: {kinds:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn several_worker_processes_give_each_job_one_result() {
    if skip_postgres() {
        return;
    }
    let (ledger, db) = fresh_ledger(Db::Postgres).await;
    let workers: Vec<_> = (0..3)
        .map(|i| WorkerProcess::spawn(&db.url, &format!("p{i}"), 20, &SCALE_OUT))
        .collect();
    let ids = create_many(&ledger, "proc", 150).await;
    wait_all_succeeded(&ledger, &ids, Duration::from_secs(90)).await;
    let workers_seen = workers_of_single_attempts(&ledger, &ids).await;
    assert!(
        workers_seen.len() >= 2,
        "the work spread over processes: {workers_seen:?}"
    );
    drop(workers);
}

/// A worker stopped after a burst exits by itself. Its group commit's runners keep a
/// connection each between commits; on a pool of four they kept more than the pool had idle,
/// and closing the pool waited for them for ever: the worker logged every task stopped, then
/// never exited.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_on_a_small_pool_exits_after_sigterm_once_its_burst_is_done() {
    if skip_postgres() {
        return;
    }
    let (ledger, db) = fresh_ledger(Db::Postgres).await;
    let ids = create_many(&ledger, "burst", 300).await;
    let mut worker = spawn_fenceline(
        "worker",
        &db.url,
        "B",
        &["--db-max-connections", "4", "--stub-latency-ms", "0"],
    );
    wait_all_succeeded(&ledger, &ids, Duration::from_secs(60)).await;
    let status = terminate(&mut worker, Duration::from_secs(15)).await;
    assert!(status.success(), "the worker exits cleanly: {status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_paused_past_its_lease_cannot_commit_or_delete_and_its_replacement_recovers() {
    if skip_postgres() {
        return;
    }
    let (ledger, db) = fresh_ledger(Db::Postgres).await;
    let job_id = create(&ledger, new_job("acme", "paused", serde_json::json!(1))).await;
    let a = WorkerProcess::spawn(&db.url, "A", 5000, &[]);
    wait_for_attempt(&ledger, &job_id).await;
    a.signal(Signal::SIGSTOP);
    let b = WorkerProcess::spawn(&db.url, "B", 100, &[]);
    let recovered = wait_for_recovery(&ledger, &job_id, Duration::from_secs(20)).await;
    assert_eq!(
        recovered.state,
        JobState::Unknown,
        "an attempt may have reached the provider"
    );
    assert_eq!(recovered.owner_epoch, 2);
    a.signal(Signal::SIGCONT);
    // A wakes up fenced: its heartbeat or its commit finds epoch 2.
    let events_of_a = || async {
        ledger
            .events(&job_id, 0, 500)
            .await
            .unwrap()
            .into_iter()
            .filter(|e| e.actor == "worker:A")
            .collect::<Vec<_>>()
    };
    let until = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let events = events_of_a().await;
        let noticed = events.iter().any(|e| {
            e.detail_as::<detail::ResultRejected>()
                .is_some_and(|d| d.reason == "stale_epoch")
                || e.kind == "lease_lost"
        });
        if noticed {
            break;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "A never noticed it was fenced: {events:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(6)).await;
    let events = events_of_a().await;
    assert!(
        !events.iter().any(|e| e.kind == "result_accepted"),
        "A never commits"
    );
    assert!(
        !events
            .iter()
            .any(|e| e.kind == "message_deleted" && e.epoch >= 1 && e.at > recovered.updated_at),
        "A deletes nothing after it was fenced"
    );
    let job = ledger.job(&job_id).await.unwrap().unwrap();
    assert_eq!(job.state, JobState::Unknown);
    assert_eq!(job.result_ref, None);
    drop((a, b));
}

/// A worker paused with one of its transactions open — between two statements of a lease
/// renewal, its rows locked — does not hold its job up: the database ends the transaction, and
/// the replacement recovers the job as from any paused owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_paused_inside_a_transaction_does_not_hold_up_its_replacement() {
    if skip_postgres() {
        return;
    }
    let (ledger, db) = fresh_ledger(Db::Postgres).await;
    let job_id = create(
        &ledger,
        new_job("acme", "paused-inside", serde_json::json!(1)),
    )
    .await;
    let a = WorkerProcess::spawn(&db.url, "A", 120_000, &[]);
    wait_for_attempt(&ledger, &job_id).await;
    // Pause A at moment after moment until it is caught inside a transaction that has written.
    let raw = db.raw_pool().await;
    let until = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut tries = 0u32;
    loop {
        a.signal(Signal::SIGSTOP);
        let open: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() \
             AND state = 'idle in transaction' AND backend_xid IS NOT NULL",
        )
        .fetch_one(&raw)
        .await
        .unwrap();
        if open > 0 {
            break;
        }
        a.signal(Signal::SIGCONT);
        tries += 1;
        assert!(
            tokio::time::Instant::now() < until,
            "A was never caught inside a transaction ({tries} tries)"
        );
        tokio::time::sleep(Duration::from_micros(300 + u64::from(tries % 7) * 200)).await;
    }
    let b = WorkerProcess::spawn(&db.url, "B", 100, &[]);
    let recovered = wait_for_recovery(&ledger, &job_id, Duration::from_secs(30)).await;
    assert_eq!(recovered.state, JobState::Unknown);
    assert_eq!(recovered.owner_epoch, 2);
    a.signal(Signal::SIGCONT);
    drop((a, b));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_killed_mid_call_leaves_a_job_the_reaper_moves_to_unknown_with_its_evidence() {
    if skip_postgres() {
        return;
    }
    let (ledger, db) = fresh_ledger(Db::Postgres).await;
    let job_id = create(&ledger, new_job("acme", "killed", serde_json::json!(1))).await;
    let mut a = WorkerProcess::spawn(&db.url, "A", 10_000, &[]);
    wait_for_attempt(&ledger, &job_id).await;
    a.signal(Signal::SIGKILL);
    let _ = a.0.wait().await;
    // No worker is left: the reaper alone recovers the job.
    reaped_to_unknown(&ledger, &job_id).await;
    let attempts = ledger.attempts(&job_id).await.unwrap();
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].outcome, AttemptOutcome::Lost);
    assert_eq!(attempts[0].worker_id, "A");
    assert_eq!(
        attempts[0].provider_request_id.as_deref(),
        Some(format!("{job_id}:1").as_str()),
        "the evidence for reconciliation is kept"
    );
    let events = ledger.events(&job_id, 0, 200).await.unwrap();
    assert!(events
        .iter()
        .any(|e| e.kind == "recovery_claimed" && e.actor == "system"));
}

/// A TCP relay to an endpoint that can hold every byte in flight: calls through it hang, as
/// over a network that stopped answering, until it lets go.
struct Relay {
    url: String,
    held: tokio::sync::watch::Sender<bool>,
}

impl Relay {
    async fn to(endpoint: &str) -> Relay {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let target = endpoint
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_owned();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (held, watch) = tokio::sync::watch::channel(false);
        async fn pipe(
            mut from: tokio::net::tcp::OwnedReadHalf,
            mut to: tokio::net::tcp::OwnedWriteHalf,
            mut held: tokio::sync::watch::Receiver<bool>,
        ) {
            let mut buf = vec![0u8; 16 * 1024];
            while let Ok(n @ 1..) = from.read(&mut buf).await {
                while *held.borrow_and_update() {
                    if held.changed().await.is_err() {
                        return;
                    }
                }
                if to.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        }
        tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let Ok(outbound) = tokio::net::TcpStream::connect(&target).await else {
                    continue;
                };
                let (in_read, in_write) = inbound.into_split();
                let (out_read, out_write) = outbound.into_split();
                tokio::spawn(pipe(in_read, out_write, watch.clone()));
                tokio::spawn(pipe(out_read, in_write, watch.clone()));
            }
        });
        Relay { url, held }
    }

    fn hold(&self, held: bool) {
        self.held.send_replace(held);
    }
}

/// Kills a worker right after a lease renewal of its heartbeat committed, before the outcome
/// of the visibility renewal that went beside it was written, and finds the job's timeline
/// numbered without a hole once the reaper has recovered it. On SQS the visibility change
/// hangs (the endpoint held) while the ledger renews the lease; on the embedded queue both
/// are one transaction.
async fn a_worker_killed_between_a_lease_renewal_and_its_visibility_outcome(sqs: bool) {
    let (ledger, db) = fresh_ledger(Db::Postgres).await;
    let name = format!("q{}", uuid::Uuid::now_v7().simple());
    let mut relay = None;
    let mut extra: Vec<&str> = Vec::new();
    if sqs {
        use fenceline::queue::sqs::SqsQueue;
        let client = SqsQueue::client_from_env().await;
        SqsQueue::create(client, &name, 5, Duration::from_secs(10))
            .await
            .expect("create the queue");
        let endpoint = std::env::var("AWS_ENDPOINT_URL_SQS").expect("an SQS endpoint");
        relay = Some(Relay::to(&endpoint).await);
        extra.extend(["--queue", "sqs", "--queue-name", name.as_str()]);
    }
    let env: Vec<(&str, &str)> = relay
        .iter()
        .map(|r| ("AWS_ENDPOINT_URL_SQS", r.url.as_str()))
        .collect();
    let job_id = create(&ledger, new_job("acme", "between", serde_json::json!(1))).await;
    let mut a = WorkerProcess::spawn_with(&db.url, "A", 30_000, &extra, &env);
    wait_for_attempt(&ledger, &job_id).await;
    let renewals = |kinds: &[String]| kinds.iter().filter(|k| *k == "lease_renewed").count();
    wait_until(
        &ledger,
        &job_id,
        Duration::from_secs(20),
        "a renewal",
        |k| renewals(k) >= 1,
    )
    .await;
    if let Some(relay) = &relay {
        relay.hold(true);
    }
    // Two more lease renewals: the second one's round began with the endpoint held.
    let seen = renewals(&kinds(&ledger, &job_id).await);
    let until = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        if renewals(&kinds(&ledger, &job_id).await) >= seen + 2 {
            break;
        }
        assert!(tokio::time::Instant::now() < until, "no lease renewal");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    a.signal(Signal::SIGKILL);
    let _ = a.0.wait().await;
    if let Some(relay) = &relay {
        relay.hold(false);
    }
    reaped_to_unknown(&ledger, &job_id).await;
    crate::helpers::assert_gap_free(&ledger, &job_id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_killed_between_a_lease_renewal_and_its_visibility_outcome_on_sqs() {
    if skip_postgres() || crate::helpers::skip_sqs() {
        return;
    }
    a_worker_killed_between_a_lease_renewal_and_its_visibility_outcome(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_killed_between_a_lease_renewal_and_its_visibility_outcome_on_the_embedded_queue()
{
    if skip_postgres() {
        return;
    }
    a_worker_killed_between_a_lease_renewal_and_its_visibility_outcome(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn worker_processes_scale_out_on_postgres_and_an_sqs_endpoint() {
    if skip_postgres() || crate::helpers::skip_sqs() {
        return;
    }
    use fenceline::queue::sqs::SqsQueue;
    let (ledger, db) = fresh_ledger(Db::Postgres).await;
    let name = format!("q{}", uuid::Uuid::now_v7().simple());
    let client = SqsQueue::client_from_env().await;
    SqsQueue::create(client, &name, 5, Duration::from_secs(10))
        .await
        .expect("create the queue");
    let sqs = [
        &SCALE_OUT[..],
        &["--queue", "sqs", "--queue-name", name.as_str()],
    ]
    .concat();
    let workers = [
        WorkerProcess::spawn(&db.url, "s0", 20, &sqs),
        WorkerProcess::spawn(&db.url, "s1", 20, &sqs),
    ];
    let ids = create_many(&ledger, "sqs", 40).await;
    wait_all_succeeded(&ledger, &ids, Duration::from_secs(60)).await;
    workers_of_single_attempts(&ledger, &ids).await;
    drop(workers);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenceline_submit_creates_a_job_idempotently_and_waits_for_its_result() {
    let db = crate::helpers::fresh_db(Db::Sqlite).await;
    let bin = env!("CARGO_BIN_EXE_fenceline");
    let token = crate::helpers::cli_token(&db.url, "acme").await;
    let (_server, api) = crate::helpers::spawn_serve(&db.url, &["--stub-latency-ms", "100"]).await;
    let submit = |wait: bool| {
        let mut command = Command::new(bin);
        command
            .args(["submit", "--api", &api, "--token", &token, "--key", "cli-1"])
            .args(["--input", r#"{"document": "from the command line"}"#]);
        if wait {
            command.arg("--wait");
        }
        command.output()
    };
    let waited = submit(true).await.unwrap();
    assert!(
        waited.status.success(),
        "{}",
        String::from_utf8_lossy(&waited.stderr)
    );
    let result: serde_json::Value =
        serde_json::from_slice(&waited.stdout).expect("the result as JSON");
    assert!(result["summary"]
        .as_str()
        .unwrap()
        .starts_with("stub answer"));
    assert!(String::from_utf8_lossy(&waited.stderr).contains("created job"));
    let again = submit(false).await.unwrap();
    assert!(again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already had job"));
    let bad = Command::new(bin)
        .args([
            "submit", "--api", &api, "--token", "fl_nope", "--key", "k", "--input", "x",
        ])
        .output()
        .await
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("401"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenceline_submit_file_sends_a_job_a_line_in_batches_and_answers_each_line() {
    let db = crate::helpers::fresh_db(Db::Sqlite).await;
    let bin = env!("CARGO_BIN_EXE_fenceline");
    let token = crate::helpers::cli_token(&db.url, "acme").await;
    let (_server, api) = crate::helpers::spawn_serve(&db.url, &[]).await;
    let dir = tempfile_dir();
    // 620 jobs (two requests of at most 500), a blank line, a line that is not JSON, one
    // that reuses a key for another request, and one the API refuses.
    let mut lines: Vec<String> = (0..620)
        .map(|i| format!(r#"{{"idempotency_key": "file-{i}", "input": {{"n": {i}}}}}"#))
        .collect();
    lines.insert(10, String::new());
    lines.push("not json".into());
    lines.push(r#"{"idempotency_key": "file-3", "input": "another"}"#.into());
    lines.push(r#"{"idempotency_key": "file-x", "input": 1, "tenant": "globex"}"#.into());
    let path = dir.join("jobs.jsonl");
    std::fs::write(&path, lines.join("\n")).unwrap();
    let send = || {
        Command::new(bin)
            .args(["submit", "--api", &api, "--token", &token, "--file"])
            .arg(&path)
            .output()
    };
    let first = send().await.unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&first.stdout),
        String::from_utf8_lossy(&first.stderr),
    );
    assert!(!first.status.success(), "three lines were refused: {err}");
    assert!(
        err.contains("created 620, already had 0, refused 3 (lines 622, 623, 624)"),
        "{err}"
    );
    let answers: Vec<Vec<&str>> = out.lines().map(|l| l.split('\t').collect()).collect();
    assert_eq!(answers.len(), 623, "one answer a line but the blank one");
    let numbers: Vec<usize> = answers.iter().map(|a| a[0].parse().unwrap()).collect();
    assert!(
        numbers.windows(2).all(|w| w[0] < w[1]),
        "in the file's order"
    );
    assert!(!numbers.contains(&11), "the blank line is skipped");
    assert_eq!(&answers[0][1..2], ["201"]);
    assert!(answers[0][2].starts_with("job_"));
    assert_eq!(answers[620][..2], ["622", "-"]);
    assert!(answers[620][2].starts_with("not JSON"));
    assert_eq!(answers[621][..2], ["623", "409"]);
    assert_eq!(answers[622][..2], ["624", "400"]);
    assert!(
        answers[622][2].starts_with("not a valid job: unknown field `tenant`"),
        "{:?}",
        answers[622]
    );
    // Sent again, every job is the one made before.
    let again = send().await.unwrap();
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(
        err.contains("created 0, already had 620, refused 3"),
        "{err}"
    );
    let again = String::from_utf8_lossy(&again.stdout);
    assert_eq!(
        again.lines().next(),
        out.lines()
            .next()
            .map(|l| l.replace("\t201\t", "\t200\t"))
            .as_deref()
    );

    // A request refused whole (here the second: 400 jobs of 3 KB, over the 1 MiB body limit):
    // the lines answered before it are printed, and the error says where sending stopped.
    let big = "x".repeat(3000);
    let lines: Vec<String> = (0..900)
        .map(|i| {
            let input = if i < 500 { format!("{i}") } else { big.clone() };
            format!(r#"{{"idempotency_key": "big-{i}", "input": "{input}"}}"#)
        })
        .collect();
    let path = dir.join("big.jsonl");
    std::fs::write(&path, lines.join("\n")).unwrap();
    let cut = Command::new(bin)
        .args(["submit", "--api", &api, "--token", &token, "--file"])
        .arg(&path)
        .output()
        .await
        .unwrap();
    assert!(!cut.status.success());
    let err = String::from_utf8_lossy(&cut.stderr);
    assert!(
        err.contains("sending the jobs from line 501 on") && err.contains("413"),
        "{err}"
    );
    let out = String::from_utf8_lossy(&cut.stdout);
    assert_eq!(
        out.lines().count(),
        500,
        "the first request's answers stay on record"
    );
    assert!(out.lines().all(|l| l.contains("\t201\t")));
    let _ = std::fs::remove_dir_all(dir);
}

/// A directory of its own under the system's temporary one.
fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("fenceline-test-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A `fenceline serve` or `fenceline worker` process (compressed timings unless `extra` names
/// others).
fn spawn_fenceline(command: &str, database_url: &str, id: &str, extra: &[&str]) -> Child {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fenceline"));
    cmd.args([command, "--database-url", database_url]).args([
        "--worker-id",
        id,
        "--reaper-interval-ms",
        "300",
    ]);
    if !extra.contains(&"--timings") {
        cmd.args(["--timings", "compressed"]);
    }
    cmd.args(extra)
        .env("FENCELINE_LOG", "warn")
        .stdout(Stdio::null())
        .kill_on_drop(true);
    if command == "serve" && !extra.contains(&"--bind") {
        cmd.args([
            "--bind",
            &format!("127.0.0.1:{}", crate::helpers::free_port()),
        ]);
    }
    cmd.spawn().expect("start fenceline")
}

/// Sends SIGTERM and waits for the process to exit by itself.
async fn terminate(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let pid = child.id().expect("running") as i32;
    kill(Pid::from_raw(pid), Signal::SIGTERM).expect("SIGTERM");
    tokio::time::timeout(limit, child.wait())
        .await
        .expect("the process exits by itself after SIGTERM")
        .expect("wait")
}

/// Starts `command` on a fresh database, submits one job, sends SIGTERM once its model call
/// is under way, and waits for a clean exit. Returns the ledger and the job.
async fn sigterm_during_a_call(
    db: Db,
    command: &str,
    extra: &[&str],
) -> (Ledger, crate::helpers::TestDb, String) {
    let (ledger, test_db) = fresh_ledger(db).await;
    let job_id = create(&ledger, new_job("acme", "sigterm", serde_json::json!(1))).await;
    let mut process = spawn_fenceline(command, &test_db.url, "T", extra);
    wait_for_attempt(&ledger, &job_id).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let status = terminate(&mut process, Duration::from_secs(30)).await;
    assert!(status.success(), "{command} exits cleanly: {status:?}");
    (ledger, test_db, job_id)
}

/// SIGTERM while the model call runs: the process stops taking work, lets the call finish
/// within its drain, commits the answer and deletes the message before closing the ledger.
async fn sigterm_during_a_call_keeps_the_answer(db: Db, command: &str) {
    let (ledger, _db, job_id) =
        sigterm_during_a_call(db, command, &["--stub-latency-ms", "3000"]).await;
    let kinds = kinds(&ledger, &job_id).await;
    let job = ledger.job(&job_id).await.unwrap().unwrap();
    assert_eq!(
        job.state,
        JobState::Succeeded,
        "the answer that arrived during the drain is accepted: {kinds:?}"
    );
    assert!(kinds.iter().any(|k| k == "message_deleted"), "{kinds:?}");
    assert_eq!(ledger.attempts(&job_id).await.unwrap().len(), 1);
    // The process reported itself while it ran, and its clean stop after the drain.
    let now = ledger.now_us().await.unwrap();
    let workers = ledger.workers_seen(0, now, None).await.unwrap();
    let me = workers
        .iter()
        .find(|w| w.worker_id == "T")
        .expect("T reported");
    let reported = me.reported.as_ref().expect("T reported");
    assert!(reported.stopped_at.is_some(), "{command}: {me:?}");
    assert!(reported.queue.starts_with("embedded:"), "{me:?}");
    assert_eq!(reported.provider, "stub");
    assert_eq!(me.held, 0, "{me:?}");
}

/// SIGTERM while a call runs longer than the drain allows: the call is handed back to the
/// ledger (`unknown`, its attempt `lost`), never left `running` behind a closed pool.
async fn sigterm_past_the_drain_hands_the_call_back(db: Db, command: &str) {
    let extra = ["--stub-latency-ms", "30000", "--drain-timeout-ms", "500"];
    let (ledger, _db, job_id) = sigterm_during_a_call(db, command, &extra).await;
    let job = ledger.job(&job_id).await.unwrap().unwrap();
    assert_eq!(
        job.state,
        JobState::Unknown,
        "handed back, not left running: {:?}",
        kinds(&ledger, &job_id).await
    );
    assert_eq!(job.recovery_reason.as_deref(), Some("shutdown"));
    assert_eq!(
        ledger.attempts(&job_id).await.unwrap()[0].outcome,
        AttemptOutcome::Lost
    );
}

mod sigterm {
    use super::*;

    async fn on_serve_keeps_the_answer(db: Db) {
        sigterm_during_a_call_keeps_the_answer(db, "serve").await
    }
    async fn on_a_worker_keeps_the_answer(db: Db) {
        sigterm_during_a_call_keeps_the_answer(db, "worker").await
    }
    async fn on_serve_past_the_drain_hands_the_call_back(db: Db) {
        sigterm_past_the_drain_hands_the_call_back(db, "serve").await
    }
    async fn on_a_worker_past_the_drain_hands_the_call_back(db: Db) {
        sigterm_past_the_drain_hands_the_call_back(db, "worker").await
    }

    crate::on_both_backends!(
        on_serve_keeps_the_answer,
        on_a_worker_keeps_the_answer,
        on_serve_past_the_drain_hands_the_call_back,
        on_a_worker_past_the_drain_hands_the_call_back
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn serve_and_a_worker_process_on_one_sqlite_file_finish_every_job() {
    let (ledger, test_db) = fresh_ledger(Db::Sqlite).await;
    // The default timings, as a user runs them; calls long enough that neither process can
    // drain the queue alone before the other has started.
    let fast = [
        "--timings",
        "production",
        "--stub-latency-ms",
        "100",
        "--max-in-flight",
        "8",
    ];
    let bind = format!("127.0.0.1:{}", crate::helpers::free_port());
    let serve_args: Vec<&str> = fast.iter().copied().chain(["--bind", &bind]).collect();
    let mut serve = spawn_fenceline("serve", &test_db.url, "serve", &serve_args);
    // `serve` answers only once its worker runs; the worker process has nothing slower to
    // do than open the ledger.
    crate::helpers::wait_ready(&format!("http://{bind}")).await;
    let mut worker = spawn_fenceline("worker", &test_db.url, "worker", &fast);
    let ids = create_many(&ledger, "shared", 200).await;
    wait_all_succeeded(&ledger, &ids, Duration::from_secs(90)).await;
    let workers_seen = workers_of_single_attempts(&ledger, &ids).await;
    assert_eq!(
        workers_seen.len(),
        2,
        "both processes worked: {workers_seen:?}"
    );
    for process in [&mut serve, &mut worker] {
        assert!(process.try_wait().unwrap().is_none(), "still running");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_wait_on_a_job_that_goes_unknown_says_so_and_exits_non_zero() {
    let db = crate::helpers::fresh_db(Db::Sqlite).await;
    let bin = env!("CARGO_BIN_EXE_fenceline");
    let token = crate::helpers::cli_token(&db.url, "acme").await;
    // Every response is lost and nothing can be retrieved: the job must go `unknown`.
    let extra = ["--stub-latency-ms", "50", "--stub-lost-rate", "1"];
    let (_server, api) = crate::helpers::spawn_serve(&db.url, &extra).await;
    let waited = tokio::time::timeout(
        Duration::from_secs(30),
        Command::new(bin)
            .args(["submit", "--api", &api, "--token", &token, "--key", "lost"])
            .args(["--input", "x", "--wait"])
            .output(),
    )
    .await
    .expect("submit --wait returns instead of waiting for the deadline")
    .unwrap();
    assert!(!waited.status.success());
    let stderr = String::from_utf8_lossy(&waited.stderr);
    assert!(stderr.contains("is unknown"), "{stderr}");
    assert!(stderr.contains(&format!("{api}/jobs/job_")), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_listed_without_their_secret_and_a_revoked_one_is_refused() {
    let (ledger, db) = fresh_ledger(Db::Sqlite).await;
    let bin = env!("CARGO_BIN_EXE_fenceline");
    let token = crate::helpers::cli_token(&db.url, "acme").await;
    let _other = crate::helpers::cli_token(&db.url, "globex").await;
    ledger
        .add_operator("olga", fenceline::operators::Role::Operator, None, "x")
        .await
        .unwrap();
    let automation = ledger
        .add_operator_token("olga", "reconciler")
        .await
        .unwrap();
    assert_eq!(
        ledger.tenant_for_token(&token).await.unwrap().as_deref(),
        Some("acme")
    );
    let list = Command::new(bin)
        .args(["token", "list", "--database-url", &db.url])
        .output()
        .await
        .unwrap();
    assert!(list.status.success());
    let listed = String::from_utf8_lossy(&list.stdout).into_owned();
    assert!(
        listed.contains("tenant acme") && listed.contains("tenant globex"),
        "{listed}"
    );
    assert!(!listed.contains(&token), "the secret is never shown again");
    assert!(
        !listed.contains(&automation),
        "the secret is never shown again"
    );
    // An operator's token is listed and revoked the same way.
    let operator_id = listed
        .lines()
        .find(|l| l.contains("operator olga") && l.contains("reconciler"))
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or_else(|| panic!("{listed}"))
        .to_owned();
    let revoke = Command::new(bin)
        .args(["token", "revoke", &operator_id, "--database-url", &db.url])
        .output()
        .await
        .unwrap();
    assert!(revoke.status.success(), "{revoke:?}");
    assert!(
        String::from_utf8_lossy(&revoke.stdout).contains("acting as operator olga"),
        "{revoke:?}"
    );
    assert!(ledger
        .operator_for_token(&automation)
        .await
        .unwrap()
        .is_none());
    assert_eq!(
        ledger.tenant_for_token(&token).await.unwrap().as_deref(),
        Some("acme"),
        "revoking an operator's token leaves the tenants' alone"
    );
    let id = listed
        .lines()
        .find(|l| l.contains("acme"))
        .and_then(|l| l.split_whitespace().next())
        .unwrap()
        .to_owned();
    let revoke = Command::new(bin)
        .args(["token", "revoke", &id, "--database-url", &db.url])
        .output()
        .await
        .unwrap();
    assert!(revoke.status.success(), "{revoke:?}");
    assert_eq!(ledger.tenant_for_token(&token).await.unwrap(), None);
    let again = Command::new(bin)
        .args(["token", "revoke", &id, "--database-url", &db.url])
        .output()
        .await
        .unwrap();
    assert!(
        !again.status.success(),
        "a revoked token cannot be revoked twice"
    );
    assert_eq!(ledger.list_tokens().await.unwrap().len(), 3);
}

#[tokio::test]
async fn boolean_settings_from_the_environment_accept_one_and_yes() {
    for value in ["1", "yes", "true", "0", "no", "off"] {
        let out = Command::new(env!("CARGO_BIN_EXE_fenceline"))
            .args(["worker", "--database-url", "nope://x"])
            .env("FENCELINE_PROVIDER_RETRIEVAL", value)
            .env("FENCELINE_NO_WORKER", value)
            .output()
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("invalid value"), "{value}: {stderr}");
        assert!(
            stderr.contains("DATABASE_URL must start with"),
            "{value}: {stderr}"
        );
    }
}

#[tokio::test]
async fn a_command_that_fails_says_why_in_one_line_without_a_backtrace() {
    let db = crate::helpers::fresh_db(Db::Sqlite).await;
    // A user's mistake (no such drill) and a refusal by the ledger (no such token): each is
    // one `error:` line and a failed exit, even with backtraces asked for in the environment.
    let cases: [(&[&str], &str); 2] = [
        (
            &["drill", "run", "no-such-drill"],
            "error: no drill is called \"no-such-drill\"",
        ),
        (
            &["token", "revoke", "0123456789ab"],
            "error: invalid: no live token with id 0123456789ab",
        ),
    ];
    for (args, says) in cases {
        let out = Command::new(env!("CARGO_BIN_EXE_fenceline"))
            .args(args)
            .args(["--database-url", &db.url])
            .env("RUST_BACKTRACE", "1")
            .env("RUST_LIB_BACKTRACE", "1")
            .output()
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.starts_with(says), "{args:?}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: {stderr}");
    }
}

/// Logs written to a file (stderr not a terminal) carry no colour escapes: a log file reads as
/// text, and a search for `landed=Some(true)` finds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_to_a_file_carry_no_colour_codes() {
    let db = crate::helpers::fresh_db(Db::Sqlite).await;
    let out = Command::new(env!("CARGO_BIN_EXE_fenceline"))
        .args(["token", "list", "--database-url", &db.url])
        .env("FENCELINE_LOG", "debug")
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("DEBUG"), "some log lines: {stderr}");
    assert!(!stderr.contains('\u{1b}'), "colour codes in {stderr:?}");
}

async fn overview(browser: &mut crate::helpers::Browser) -> String {
    browser.page("/").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_serve_prints_where_to_sign_in_with_a_one_time_admin_password() {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let db = crate::helpers::fresh_db(Db::Sqlite).await;
    let port = crate::helpers::free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_fenceline"))
        .args(["serve", "--database-url", &db.url])
        .args(["--bind", &format!("127.0.0.1:{port}")])
        .env("FENCELINE_LOG", "error")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let base = format!("http://127.0.0.1:{port}");
    let mut printed = String::new();
    let password = loop {
        let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
            .await
            .expect("serve prints its addresses")
            .unwrap()
            .expect("more output");
        printed.push_str(&line);
        printed.push('\n');
        if let Some(rest) =
            line.split_once(&format!("Sign in at {base}/login as admin, password: "))
        {
            break rest.1.trim().to_owned();
        }
    };
    assert!(printed.contains(&format!("Console: {base}/")), "{printed}");
    assert_eq!(password.len(), 20);
    let mut browser = crate::helpers::Browser::new(&base);
    let response = browser.sign_in("admin", &password).await;
    assert_eq!(crate::helpers::location(&response), "/");
    assert!(overview(&mut browser).await.contains("<h1>Overview</h1>"));
    drop(child);

    // The next start finds an operator: no new password.
    let port = crate::helpers::free_port();
    let again = Command::new(env!("CARGO_BIN_EXE_fenceline"))
        .args(["serve", "--database-url", &db.url])
        .args(["--bind", &format!("127.0.0.1:{port}")])
        .env("FENCELINE_LOG", "error")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(again.stdout.unwrap()).lines();
    loop {
        let line = lines.next_line().await.unwrap().expect("a sign-in line");
        if line.contains("Sign in at") {
            assert!(!line.contains("password"), "{line}");
            break;
        }
    }

    // A production deployment with no operator refuses to start.
    let fresh = crate::helpers::fresh_db(Db::Sqlite).await;
    let refused = Command::new(env!("CARGO_BIN_EXE_fenceline"))
        .args([
            "--environment",
            "production",
            "serve",
            "--database-url",
            &fresh.url,
        ])
        .args([
            "--bind",
            "127.0.0.1:0",
            "--public-url",
            "https://fl.example.com",
        ])
        .env("FENCELINE_LOG", "error")
        .output()
        .await
        .unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("fenceline operator add"), "{stderr}");
    assert!(!String::from_utf8_lossy(&refused.stdout).contains("password"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_says_how_long_records_are_kept() {
    let demo = crate::helpers::fresh_db(Db::Sqlite).await;
    let (_demo, base) = crate::helpers::spawn_serve(&demo.url, &[]).await;
    let mut browser = crate::helpers::viewer_at(&demo.url, &base).await;
    let page = overview(&mut browser).await;
    assert!(
        page.contains("retention is off"),
        "the embedded demo keeps everything"
    );

    let pruned = crate::helpers::fresh_db(Db::Sqlite).await;
    let (_pruned, base) =
        crate::helpers::spawn_serve(&pruned.url, &["--retention-days", "30"]).await;
    let mut browser = crate::helpers::viewer_at(&pruned.url, &base).await;
    let until = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let page = overview(&mut browser).await;
        if page.contains("kept for 30 days") {
            assert!(page.contains("The last retention run"), "{page}");
            break;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "no retention run shown"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_call_decides_cancels_and_runs_again_from_a_terminal_fenced_and_audited() {
    use fenceline::operators::{hash_password, Role};
    let db = crate::helpers::fresh_db(Db::Sqlite).await;
    let ledger = Ledger::connect(&db.url, &crate::helpers::options())
        .await
        .unwrap();
    ledger.migrate().await.unwrap();
    let hash = hash_password("a long enough password").unwrap();
    ledger
        .add_operator("olga", Role::Operator, None, &hash)
        .await
        .unwrap();
    ledger
        .add_operator("vera", Role::Viewer, None, &hash)
        .await
        .unwrap();
    let job_id = create(&ledger, new_job("acme", "cli-decide", serde_json::json!(1))).await;
    let _ = ledger
        .claim_and_start(&job_id, "w1", Duration::from_millis(100), None, "stub")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let unknown = ledger
        .recovery_claim(
            &job_id,
            &fenceline::job::Actor::System,
            "lease_expired",
            false,
        )
        .await
        .unwrap();
    let run = |args: Vec<String>| {
        let url = db.url.clone();
        async move {
            Command::new(env!("CARGO_BIN_EXE_fenceline"))
                .args(&args)
                .args(["--database-url", &url])
                .env("FENCELINE_LOG", "error")
                .output()
                .await
                .unwrap()
        }
    };
    let decide = |who: &str, epoch: i64| {
        vec![
            "decide".to_owned(),
            job_id.clone(),
            "retry".into(),
            "--epoch".into(),
            epoch.to_string(),
            "--reason".into(),
            "no trace at the provider".into(),
            "--operator".into(),
            who.into(),
        ]
    };
    let viewer = run(decide("vera", unknown.epoch)).await;
    assert!(!viewer.status.success());
    assert!(String::from_utf8_lossy(&viewer.stderr).contains("only operators and admins"));
    // A result file goes with resolving as succeeded only: a retry never reads one.
    let mut stale_retry = decide("olga", unknown.epoch - 1);
    stale_retry.extend(["--result-file".into(), "/nonexistent/result.json".into()]);
    let stale = run(stale_retry).await;
    assert!(!stale.status.success());
    assert!(
        String::from_utf8_lossy(&stale.stderr).contains("nothing changed"),
        "{stale:?}"
    );
    assert_eq!(
        ledger.job(&job_id).await.unwrap().unwrap().state,
        JobState::Unknown
    );
    let applied = run(decide("olga", unknown.epoch)).await;
    assert!(applied.status.success(), "{applied:?}");
    assert_eq!(
        String::from_utf8_lossy(&applied.stdout).trim(),
        format!("{job_id}: retry_authorized")
    );
    let cancel = run(vec![
        "cancel".into(),
        job_id.clone(),
        "--epoch".into(),
        (unknown.epoch + 1).to_string(),
        "--reason".into(),
        "withdrawn".into(),
        "--operator".into(),
        "olga".into(),
    ])
    .await;
    assert!(cancel.status.success(), "{cancel:?}");
    let job = ledger.job(&job_id).await.unwrap().unwrap();
    assert_eq!(job.state, JobState::FailedTerminal);
    // Finished, it runs again as a new job; the same command again, from the same view, makes
    // no second one.
    let seen = ledger.event_count(&job_id).await.unwrap().to_string();
    let rerun = |who: &str| {
        vec![
            "rerun".to_owned(),
            job_id.clone(),
            "--reason".into(),
            "cancelled by mistake".into(),
            "--operator".into(),
            who.into(),
            "--seen-events".into(),
            seen.clone(),
        ]
    };
    let viewer = run(rerun("vera")).await;
    assert!(String::from_utf8_lossy(&viewer.stderr).contains("only operators and admins"));
    let first = run(rerun("olga")).await;
    assert!(first.status.success(), "{first:?}");
    let said = String::from_utf8_lossy(&first.stdout).trim().to_owned();
    let new = said
        .strip_prefix(&format!("{job_id} runs again as "))
        .unwrap_or_else(|| panic!("{said}"))
        .to_owned();
    let again = run(rerun("olga")).await;
    assert!(again.status.success(), "{again:?}");
    assert_eq!(
        String::from_utf8_lossy(&again.stdout).trim(),
        format!("{job_id} was already run again from that view, as {new}; nothing new was made")
    );
    let made = ledger.job(&new).await.unwrap().unwrap();
    assert_eq!(made.idempotency_key, "cli-decide~rerun-1");
    assert_eq!(made.state, JobState::Ready);
    let audit = ledger
        .audit_entries(&fenceline::ledger::AuditFilter {
            job_id: Some(job_id.clone()),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    let actions: Vec<_> = audit.iter().map(|e| e.action.as_str()).collect();
    assert_eq!(actions, ["run_again", "cancel", "authorize_retry"]);
    assert!(audit.iter().all(|e| e.actor == "operator:olga"));
}

/// `fenceline bench seed-timeline` makes its long timeline on a ledger that a worker is already
/// serving (the demo: `serve` running, a timeline seeded beside it). The seed owns the job it
/// creates: the job's message waits in the outbox for a dispatcher rather than going into the
/// queue with the job, where a live worker could receive it and claim first (one did, 3 ms
/// after the job was created). A worker that receives it later finds the job the seed finished.
/// The worker's dispatcher can still send it between the seed's create and claim; the seed then
/// makes another job. Forty seeds beside the worker: with the machine busy, a seed that gave up
/// on a job claimed first failed three runs in four.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeline_is_seeded_beside_a_running_worker() {
    let (ledger, test_db) = fresh_ledger(Db::Sqlite).await;
    let seed = |pattern: &'static str| {
        let url = test_db.url.clone();
        async move {
            let out = Command::new(env!("CARGO_BIN_EXE_fenceline"))
                .args(["bench", "seed-timeline", "--database-url", &url])
                .args(["--events", "40", "--pattern", pattern])
                .env("FENCELINE_LOG", "error")
                .output()
                .await
                .unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{pattern}: {stderr}");
            String::from_utf8_lossy(&out.stdout).trim().to_owned()
        }
    };
    // The seed's own call made the job's one attempt and its result: no worker ran it.
    let owned_by_the_seed = |job: Job| {
        assert_eq!(
            job.state,
            JobState::Succeeded,
            "a seeded demo leaves nothing running"
        );
        assert_eq!(job.owner_id.as_deref(), Some("seed-worker"));
        assert_eq!(job.attempt_count, 1);
    };
    // Seeded with no worker running: nothing has sent the message yet.
    let first = seed("renewals").await;
    owned_by_the_seed(ledger.job(&first).await.unwrap().unwrap());
    assert!(!kinds(&ledger, &first)
        .await
        .contains(&"dispatched".to_owned()));
    // A worker starts: its dispatcher sends the message, and the delivery finds the seed.
    let _worker = WorkerProcess::spawn(&test_db.url, "live", 0, &[]);
    wait_until(
        &ledger,
        &first,
        Duration::from_secs(30),
        "the live worker's delivery",
        |k| k.iter().any(|k| k == "delivery_acked_terminal"),
    )
    .await;
    owned_by_the_seed(ledger.job(&first).await.unwrap().unwrap());
    // And beside the running worker, every seed ends up owning the job it reports.
    for pattern in ["renewals", "alternating"].repeat(20) {
        let job_id = seed(pattern).await;
        owned_by_the_seed(ledger.job(&job_id).await.unwrap().unwrap());
        assert!(
            ledger.event_count(&job_id).await.unwrap() >= 45,
            "{pattern}"
        );
    }
}

/// The peak resident memory of process `pid` (`VmHWM`), in bytes.
fn peak_memory(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .expect("VmHWM");
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("a size in kB");
    kib * 1024
}

/// Sixty wrong passwords posted at once with one form token, against a `serve` process: the
/// account's limit lets five be checked, and the process's peak memory grows by less than
/// 200 MiB (each password check takes about 19 MiB, and only two run at a time).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_wrong_passwords_checks_five_and_keeps_memory_bounded() {
    use fenceline::ledger::FailureScope;
    use fenceline::operators::{hash_password, Role};
    let db = crate::helpers::fresh_db(Db::Sqlite).await;
    let (child, base) = crate::helpers::spawn_serve(&db.url, &[]).await;
    let pid = child.id().expect("running");
    let ledger = Ledger::connect(&db.url, &crate::helpers::options())
        .await
        .unwrap();
    let right = "correct horse battery staple";
    ledger
        .add_operator("ana", Role::Operator, None, &hash_password(right).unwrap())
        .await
        .unwrap();
    // A right password first: the process has checked one before the measure starts.
    let mut first = crate::helpers::Browser::new(&base);
    assert_eq!(
        crate::helpers::location(&first.sign_in("ana", right).await),
        "/"
    );
    let before = peak_memory(pid);
    let answers = crate::helpers::Browser::new(&base)
        .guesses_at_once("ana", 60)
        .await;
    assert!(
        answers.iter().all(|s| *s == 303 || *s == 429),
        "{answers:?}"
    );
    let checked = ledger
        .recent_sign_in_failures(FailureScope::Account, "ana", 60_000_000)
        .await
        .unwrap();
    assert_eq!(checked, 5, "wrong passwords checked for the account");
    let grown = peak_memory(pid).saturating_sub(before);
    assert!(
        grown < 200 * 1024 * 1024,
        "the burst grew the process's peak memory by {} MiB",
        grown / (1024 * 1024)
    );
    drop(child);
}

/// `fenceline worker --health-bind` answers `/healthz` and `/readyz` for a process manager's or
/// Kubernetes' probes, ready while its ledger answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_answers_its_probes_where_it_is_told() {
    let test_db = crate::helpers::fresh_db(Db::Sqlite).await;
    let bind = format!("127.0.0.1:{}", crate::helpers::free_port());
    let mut worker = spawn_fenceline("worker", &test_db.url, "probed", &["--health-bind", &bind]);
    let base = format!("http://{bind}");
    crate::helpers::wait_ready(&base).await;
    let health = reqwest::get(format!("{base}/healthz")).await.unwrap();
    assert_eq!(health.status(), 200);
    let ready: serde_json::Value = reqwest::get(format!("{base}/readyz"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(ready["ready"], true);
    assert_eq!(ready["database"], "sqlite");
    assert!(terminate(&mut worker, Duration::from_secs(20))
        .await
        .success());
}
