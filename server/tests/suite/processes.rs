//! Separate `fenceline worker` processes on one PostgreSQL ledger (with the embedded queue in
//! it): scale-out, a worker paused past its lease (SIGSTOP/SIGCONT), and one killed mid-call
//! (SIGKILL).

use std::process::Stdio;
use std::time::Duration;

use fenceline::job::JobState;
use fenceline::ledger::{AttemptOutcome, Ledger};
use fenceline::provider::stub::StubProvider;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

use crate::helpers::{create, fresh_ledger, kinds, new_job, skip_postgres, Db};

struct WorkerProcess(Child);

impl WorkerProcess {
    fn spawn(database_url: &str, id: &str, latency_ms: u64, extra: &[&str]) -> Self {
        let child = Command::new(env!("CARGO_BIN_EXE_fenceline"))
            // The queue is the embedded default unless `extra` names another.
            .args(["worker", "--database-url", database_url])
            .args([
                "--timings",
                "compressed",
                "--worker-id",
                id,
                "--reaper-interval-ms",
                "300",
            ])
            .args(["--stub-latency-ms", &latency_ms.to_string()])
            .args(extra)
            .env("FENCELINE_LOG", "error")
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
            assert!(
                tokio::time::Instant::now() < until,
                "{id} is still {}",
                job.state
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
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
async fn several_worker_processes_with_injected_faults_give_each_job_one_result() {
    if skip_postgres() {
        return;
    }
    let (ledger, db) = fresh_ledger(Db::Postgres).await;
    let chaos = [
        "--chaos-delete-timeout",
        "0.05",
        "--chaos-visibility-timeout",
        "0.05",
        "--chaos-duplicate",
        "0.05",
    ];
    let workers: Vec<_> = (0..3)
        .map(|i| {
            let mut args = chaos.to_vec();
            args.extend(["--max-in-flight", "8"]);
            WorkerProcess::spawn(&db.url, &format!("p{i}"), 20, &args)
        })
        .collect();
    let mut ids = Vec::new();
    for i in 0..150 {
        ids.push(
            create(
                &ledger,
                new_job("acme", &format!("proc-{i}"), serde_json::json!(i)),
            )
            .await,
        );
    }
    wait_all_succeeded(&ledger, &ids, Duration::from_secs(90)).await;
    let mut workers_seen = std::collections::HashSet::new();
    for id in &ids {
        let attempts = ledger.attempts(id).await.unwrap();
        assert_eq!(attempts.len(), 1, "{id}: one provider call");
        workers_seen.insert(attempts[0].worker_id.clone());
    }
    assert!(
        workers_seen.len() >= 2,
        "the work spread over processes: {workers_seen:?}"
    );
    drop(workers);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_paused_past_its_lease_cannot_commit_or_delete_and_its_replacement_recovers() {
    if skip_postgres() {
        return;
    }
    let (ledger, db) = fresh_ledger(Db::Postgres).await;
    let job_id = create(&ledger, new_job("acme", "paused", serde_json::json!(1))).await;
    let a = WorkerProcess::spawn(&db.url, "A", 5000, &[]);
    wait_until(
        &ledger,
        &job_id,
        Duration::from_secs(20),
        "A's attempt",
        |k| k.iter().any(|k| k == "attempt_started"),
    )
    .await;
    a.signal(Signal::SIGSTOP);
    let b = WorkerProcess::spawn(&db.url, "B", 100, &[]);
    wait_until(&ledger, &job_id, Duration::from_secs(20), "recovery", |k| {
        k.iter().any(|k| k == "recovery_claimed")
    })
    .await;
    let recovered = ledger.job(&job_id).await.unwrap().unwrap();
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
            (e.kind == "result_rejected" && e.detail["reason"] == "stale_epoch")
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_killed_mid_call_leaves_a_job_the_reaper_moves_to_unknown_with_its_evidence() {
    if skip_postgres() {
        return;
    }
    let (ledger, db) = fresh_ledger(Db::Postgres).await;
    let job_id = create(&ledger, new_job("acme", "killed", serde_json::json!(1))).await;
    let mut a = WorkerProcess::spawn(&db.url, "A", 10_000, &[]);
    wait_until(
        &ledger,
        &job_id,
        Duration::from_secs(20),
        "A's attempt",
        |k| k.iter().any(|k| k == "attempt_started"),
    )
    .await;
    a.signal(Signal::SIGKILL);
    let _ = a.0.wait().await;
    // No worker is left: the reaper alone recovers the job.
    let reaper_provider = StubProvider::default();
    let until = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        fenceline::worker::reaper::reap_once(
            &ledger,
            &NoRetrieval(reaper_provider.clone()),
            Duration::from_secs(600),
        )
        .await
        .unwrap();
        let job = ledger.job(&job_id).await.unwrap().unwrap();
        if job.state != JobState::Running {
            assert_eq!(job.state, JobState::Unknown);
            break;
        }
        assert!(tokio::time::Instant::now() < until, "never recovered");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
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

/// A provider whose retrieval knows nothing: the killed worker's stub lived in its process.
struct NoRetrieval(StubProvider);

impl fenceline::provider::Provider for NoRetrieval {
    fn name(&self) -> &str {
        "stub"
    }

    async fn call(
        &self,
        request: fenceline::provider::ProviderRequest,
        progress: fenceline::provider::Progress,
    ) -> fenceline::provider::ProviderOutcome {
        self.0.call(request, progress).await
    }

    async fn retrieve(&self, _: &str) -> fenceline::provider::Retrieval {
        fenceline::provider::Retrieval::Inconclusive
    }
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
    let sqs = ["--queue", "sqs", "--queue-name", name.as_str()];
    let workers = [
        WorkerProcess::spawn(&db.url, "s0", 20, &sqs),
        WorkerProcess::spawn(&db.url, "s1", 20, &sqs),
    ];
    let mut ids = Vec::new();
    for i in 0..40 {
        ids.push(
            create(
                &ledger,
                new_job("acme", &format!("sqs-{i}"), serde_json::json!(i)),
            )
            .await,
        );
    }
    wait_all_succeeded(&ledger, &ids, Duration::from_secs(60)).await;
    for id in &ids {
        assert_eq!(ledger.attempts(id).await.unwrap().len(), 1);
    }
    drop(workers);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenceline_submit_creates_a_job_idempotently_and_waits_for_its_result() {
    let db = crate::helpers::fresh_db(Db::Sqlite).await;
    let bin = env!("CARGO_BIN_EXE_fenceline");
    let token = crate::helpers::cli_token(&db.url, "acme").await;
    let port = crate::helpers::free_port();
    let _server = Command::new(bin)
        .args([
            "serve",
            "--database-url",
            &db.url,
            "--bind",
            &format!("127.0.0.1:{port}"),
        ])
        .args(["--timings", "compressed", "--stub-latency-ms", "100"])
        .env("FENCELINE_LOG", "error")
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let api = format!("http://127.0.0.1:{port}");
    crate::helpers::wait_ready(&api).await;
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
