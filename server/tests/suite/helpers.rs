//! Fresh databases, a spawned application on port 0, and a client with one method per call.

use std::path::PathBuf;
use std::time::Duration;

use fenceline::job::{request_digest, Actor};
use fenceline::ledger::{Ledger, LedgerOptions, NewJob, Owner, ReplayPolicy, SqliteSync};
use fenceline::settings::Settings;
use fenceline::startup::Application;
use reqwest::StatusCode;
use serde_json::{json, Value};
use sqlx::{Connection, Executor};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Db {
    Sqlite,
    Postgres,
}

/// Generates one test per backend for each listed `async fn name(db: Db)`.
#[macro_export]
macro_rules! on_both_backends {
    ($($name:ident),+ $(,)?) => {
        $(
            mod $name {
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn on_sqlite() {
                    super::$name($crate::helpers::Db::Sqlite).await
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn on_postgres() {
                    if $crate::helpers::skip_postgres() {
                        return;
                    }
                    super::$name($crate::helpers::Db::Postgres).await
                }
            }
        )+
    };
}

pub(crate) fn skip_postgres() -> bool {
    std::env::var("FENCELINE_TEST_SKIP_PG").is_ok_and(|v| v == "1")
}

/// A database that exists for one test.
pub(crate) struct TestDb {
    pub(crate) url: String,
    sqlite_path: Option<PathBuf>,
}

impl TestDb {
    /// A pool of its own on the test database, for tests that write rows the ledger never
    /// would (to prove the schema refuses them).
    pub(crate) async fn raw_pool(&self) -> sqlx::AnyPool {
        sqlx::any::AnyPoolOptions::new()
            .max_connections(1)
            .connect(&self.url)
            .await
            .expect("a raw pool on the test database")
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if let Some(path) = &self.sqlite_path {
            for suffix in ["", "-wal", "-shm"] {
                let mut p = path.clone().into_os_string();
                p.push(suffix);
                let _ = std::fs::remove_file(p);
            }
        }
    }
}

pub(crate) async fn fresh_db(db: Db) -> TestDb {
    let name = format!("fl_test_{}", uuid::Uuid::now_v7().simple());
    match db {
        Db::Sqlite => {
            let path = std::env::temp_dir().join(format!("{name}.sqlite"));
            TestDb {
                url: format!("sqlite://{}?mode=rwc", path.display()),
                sqlite_path: Some(path),
            }
        }
        Db::Postgres => {
            let admin = std::env::var("FENCELINE_TEST_PG_URL").expect(
                "FENCELINE_TEST_PG_URL is not set: run scripts/test.sh, which starts a \
                 throwaway PostgreSQL (or set FENCELINE_TEST_SKIP_PG=1 to skip on purpose)",
            );
            let mut conn = sqlx::PgConnection::connect(&admin)
                .await
                .expect("connect to the test PostgreSQL");
            conn.execute(format!("CREATE DATABASE {name}").as_str())
                .await
                .expect("create a test database");
            let base = admin
                .rsplit_once('/')
                .map(|(base, _)| base)
                .expect("FENCELINE_TEST_PG_URL ends in /database");
            TestDb {
                url: format!("{base}/{name}"),
                sqlite_path: None,
            }
        }
    }
}

pub(crate) fn options() -> LedgerOptions {
    LedgerOptions {
        max_connections: 40,
        acquire_timeout: Duration::from_secs(10),
        sqlite_sync: SqliteSync::Normal,
        group_commit: true,
        direct_queue: None,
    }
}

/// A migrated ledger on a fresh database.
pub(crate) async fn fresh_ledger(db: Db) -> (Ledger, TestDb) {
    fresh_ledger_with(db, &options()).await
}

/// [`fresh_ledger`] opened with `options`.
pub(crate) async fn fresh_ledger_with(db: Db, options: &LedgerOptions) -> (Ledger, TestDb) {
    let test_db = fresh_db(db).await;
    let ledger = Ledger::connect(&test_db.url, options)
        .await
        .expect("connect the ledger");
    ledger.migrate().await.expect("migrate");
    (ledger, test_db)
}

pub(crate) fn new_job(tenant: &str, key: &str, input: Value) -> NewJob {
    NewJob {
        tenant: tenant.into(),
        idempotency_key: key.into(),
        request_digest: request_digest(&input, "v1", &json!({})),
        contract_version: "v1".into(),
        input,
        model: json!({}),
        deadline: Duration::from_secs(600),
        max_attempts: 3,
        replay_policy: ReplayPolicy::Manual,
        drill_run: None,
        traceparent: None,
    }
}

/// Creates a job and returns its id.
pub(crate) async fn create(ledger: &Ledger, new: NewJob) -> String {
    ledger
        .create_job(new, &Actor::Api("t".into()))
        .await
        .expect("create job")
        .job()
        .job_id
        .clone()
}

/// A job's timeline on one line for a failure message: `seq:kind@epoch/actor+ms` for each
/// event, the milliseconds counted from its first.
pub(crate) async fn timeline(ledger: &Ledger, job_id: &str) -> String {
    let events = ledger.events(job_id, 0, 1000).await.unwrap_or_default();
    let start = events.first().map_or(0, |e| e.at);
    events
        .iter()
        .map(|e| {
            format!(
                "{}:{}@{}/{}+{}ms",
                e.seq,
                e.kind.as_str(),
                e.epoch,
                e.actor,
                (e.at - start) / 1000
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The kinds of a job's whole timeline, in order.
pub(crate) async fn kinds(ledger: &Ledger, job_id: &str) -> Vec<String> {
    ledger
        .events(job_id, 0, 1000)
        .await
        .expect("events")
        .into_iter()
        .map(|e| e.kind.to_string())
        .collect()
}

/// The running application and a client for it.
pub(crate) struct TestApp {
    pub(crate) base: String,
    pub(crate) client: reqwest::Client,
    pub(crate) ledger: Ledger,
    pub(crate) db: TestDb,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

pub(crate) async fn spawn_app(db: Db) -> TestApp {
    spawn_app_with_body_limit(db, 1024 * 1024).await
}

pub(crate) async fn spawn_app_with_body_limit(db: Db, max_body_bytes: usize) -> TestApp {
    spawn_app_configured(db, |s| s.http.max_body_bytes = max_body_bytes).await
}

/// The application with settings changed by `configure`.
pub(crate) async fn spawn_app_configured(db: Db, configure: impl FnOnce(&mut Settings)) -> TestApp {
    let test_db = fresh_db(db).await;
    let mut settings = Settings::for_database(&test_db.url).expect("settings");
    settings.ledger.options = options();
    settings.http.bind = "127.0.0.1:0".parse().unwrap();
    configure(&mut settings);
    let app = Application::build(&settings)
        .await
        .expect("build the application");
    let base = format!("http://{}", app.local_addr());
    let ledger = app.ledger().clone();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(app.run_until_stopped(async move {
        let _ = stopped.await;
    }));
    TestApp {
        base,
        client: reqwest::Client::new(),
        ledger,
        db: test_db,
        stop: Some(stop),
    }
}

impl TestApp {
    pub(crate) async fn token(&self, tenant: &str) -> String {
        self.ledger.add_token(tenant, "test").await.expect("token")
    }

    pub(crate) async fn post_job(&self, token: &str, body: &Value) -> reqwest::Response {
        self.post_api(token, "/api/v1/jobs", body).await
    }

    /// `POST /api/v1/jobs/batch`.
    pub(crate) async fn post_batch(&self, token: &str, body: &Value) -> reqwest::Response {
        self.post_api(token, "/api/v1/jobs/batch", body).await
    }

    async fn post_api(&self, token: &str, path: &str, body: &Value) -> reqwest::Response {
        self.client
            .post(format!("{}{path}", self.base))
            .bearer_auth(token)
            .json(body)
            .send()
            .await
            .expect("request")
    }

    pub(crate) async fn post_raw(
        &self,
        token: Option<&str>,
        content_type: &str,
        body: Vec<u8>,
    ) -> reqwest::Response {
        let mut request = self
            .client
            .post(format!("{}/api/v1/jobs", self.base))
            .header("content-type", content_type)
            .body(body);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        request.send().await.expect("request")
    }

    pub(crate) async fn get(&self, token: Option<&str>, path: &str) -> reqwest::Response {
        let mut request = self.client.get(format!("{}{}", self.base, path));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        request.send().await.expect("request")
    }
}

/// The `error.code` of a JSON error response, checking it is JSON.
pub(crate) async fn error_code(response: reqwest::Response) -> String {
    let body: Value = response.json().await.expect("a JSON error body");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "error without a message: {body}"
    );
    body["error"]["code"]
        .as_str()
        .expect("error.code")
        .to_owned()
}

/// Where a queue under test lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum QueueKind {
    EmbeddedSqlite,
    EmbeddedPostgres,
    /// An SQS protocol peer (`moto_server`) at `AWS_ENDPOINT_URL_SQS`.
    Sqs,
}

/// Generates one test per queue for each listed `async fn name(kind: QueueKind)`.
#[macro_export]
macro_rules! on_every_queue {
    ($($name:ident),+ $(,)?) => {
        $(
            mod $name {
                use $crate::helpers::QueueKind;
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn on_embedded_sqlite() {
                    super::$name(QueueKind::EmbeddedSqlite).await
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn on_embedded_postgres() {
                    if $crate::helpers::skip_postgres() {
                        return;
                    }
                    super::$name(QueueKind::EmbeddedPostgres).await
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn on_sqs() {
                    if $crate::helpers::skip_sqs() {
                        return;
                    }
                    super::$name(QueueKind::Sqs).await
                }
            }
        )+
    };
}

/// LiteLLM's proxy, a real OpenAI-compatible server started by `scripts/test.sh`: its base URL
/// and master key, or `None` when `FENCELINE_TEST_SKIP_LITELLM=1` skips it on purpose.
pub(crate) fn litellm() -> Option<(String, String)> {
    if std::env::var("FENCELINE_TEST_SKIP_LITELLM").is_ok_and(|v| v == "1") {
        return None;
    }
    let url = std::env::var("FENCELINE_TEST_LITELLM_URL").expect(
        "FENCELINE_TEST_LITELLM_URL is not set: run scripts/test.sh, which starts LiteLLM's \
         proxy (or set FENCELINE_TEST_SKIP_LITELLM=1 to skip on purpose)",
    );
    let key = std::env::var("FENCELINE_TEST_LITELLM_KEY").unwrap_or_default();
    Some((url, key))
}

pub(crate) fn skip_sqs() -> bool {
    std::env::var("FENCELINE_TEST_SKIP_SQS").is_ok_and(|v| v == "1")
}

/// A fresh queue (with its dead-letter queue) and what keeps it alive.
pub(crate) struct TestQueue {
    pub(crate) queue: fenceline::queue::AnyQueue,
    pub(crate) ledger: Option<Ledger>,
    _db: Option<TestDb>,
}

pub(crate) async fn fresh_queue(kind: QueueKind, max_receive_count: u32) -> TestQueue {
    use fenceline::queue::{embedded::EmbeddedQueue, sqs::SqsQueue, AnyQueue};
    let name = format!("q{}", uuid::Uuid::now_v7().simple());
    match kind {
        QueueKind::EmbeddedSqlite | QueueKind::EmbeddedPostgres => {
            let db = if kind == QueueKind::EmbeddedSqlite {
                Db::Sqlite
            } else {
                Db::Postgres
            };
            // As `serve` and `worker` open it: new jobs' messages go in with the jobs.
            let options = LedgerOptions {
                direct_queue: Some(name.clone()),
                ..options()
            };
            let (ledger, test_db) = fresh_ledger_with(db, &options).await;
            TestQueue {
                queue: AnyQueue::Embedded(EmbeddedQueue::new(
                    ledger.clone(),
                    &name,
                    max_receive_count,
                )),
                ledger: Some(ledger),
                _db: Some(test_db),
            }
        }
        QueueKind::Sqs => {
            assert!(
                std::env::var("AWS_ENDPOINT_URL_SQS").is_ok(),
                "AWS_ENDPOINT_URL_SQS is not set: run scripts/test.sh, which starts moto_server \
                 (or set FENCELINE_TEST_SKIP_SQS=1 to skip on purpose)"
            );
            let client = SqsQueue::client_from_env().await;
            let queue = SqsQueue::create(client, &name, max_receive_count, Duration::from_secs(10))
                .await
                .expect("create the SQS queue");
            TestQueue {
                queue: AnyQueue::Sqs(queue),
                ledger: None,
                _db: None,
            }
        }
    }
}

/// A running system under test: ledger, queue (with fault injection), stub model, workers,
/// dispatcher and reaper, with compressed timings.
pub(crate) struct Rig {
    pub(crate) ledger: Ledger,
    pub(crate) queue: fenceline::queue::faults::FaultyQueue<fenceline::queue::AnyQueue>,
    pub(crate) stub: fenceline::provider::stub::StubProvider,
    pub(crate) shutdown: tokio_util::sync::CancellationToken,
    tasks: tokio::task::JoinSet<()>,
    _queue: TestQueue,
    _db: Option<TestDb>,
}

pub(crate) async fn rig(
    kind: QueueKind,
    stub: fenceline::provider::stub::StubConfig,
    workers: usize,
) -> Rig {
    rig_with(
        kind,
        stub,
        workers,
        fenceline::queue::faults::FaultPlan::default(),
    )
    .await
}

pub(crate) async fn rig_with(
    kind: QueueKind,
    stub: fenceline::provider::stub::StubConfig,
    workers: usize,
    faults: fenceline::queue::faults::FaultPlan,
) -> Rig {
    use fenceline::queue::faults::FaultyQueue;
    use fenceline::worker::{dispatcher, reaper, Timings, Worker, WorkerConfig};
    let test_queue = fresh_queue(kind, 5).await;
    let (ledger, db) = match &test_queue.ledger {
        Some(ledger) => (ledger.clone(), None),
        None => {
            let (ledger, db) = fresh_ledger(Db::Sqlite).await;
            (ledger, Some(db))
        }
    };
    let queue = FaultyQueue::new(test_queue.queue.clone());
    queue.arm(faults);
    let stub = fenceline::provider::stub::StubProvider::new(stub);
    let shutdown = tokio_util::sync::CancellationToken::new();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..workers {
        let mut config = WorkerConfig::new(format!("w{i}"));
        config.timings = Timings::compressed();
        config.max_in_flight = 32;
        config.drain_timeout = Duration::from_millis(300);
        let worker = Worker::new(ledger.clone(), queue.clone(), stub.clone(), config);
        let stop = shutdown.clone();
        tasks.spawn(async move { worker.run(stop).await });
    }
    let (l, q, stop) = (ledger.clone(), queue.clone(), shutdown.clone());
    tasks.spawn(async move {
        dispatcher::run(l, q, Duration::from_millis(20), Default::default(), stop).await
    });
    let (l, p, stop) = (ledger.clone(), stub.clone(), shutdown.clone());
    tasks.spawn(async move {
        reaper::run(
            l,
            p,
            Duration::from_millis(200),
            Duration::from_secs(600),
            stop,
        )
        .await
    });
    Rig {
        ledger,
        queue,
        stub,
        shutdown,
        tasks,
        _queue: test_queue,
        _db: db,
    }
}

impl Rig {
    pub(crate) async fn submit(&self, key: &str) -> String {
        create(&self.ledger, new_job("acme", key, json!({ "doc": key }))).await
    }

    pub(crate) async fn submit_job(&self, job: NewJob) -> String {
        create(&self.ledger, job).await
    }

    /// Waits until `done` holds for the job, or fails after `limit`.
    pub(crate) async fn wait_for(
        &self,
        job_id: &str,
        limit: Duration,
        done: impl Fn(&fenceline::ledger::Job) -> bool,
    ) -> fenceline::ledger::Job {
        let until = tokio::time::Instant::now() + limit;
        loop {
            let job = self.ledger.job(job_id).await.unwrap().expect("job exists");
            if done(&job) {
                return job;
            }
            assert!(
                tokio::time::Instant::now() < until,
                "timed out waiting; job is {} at epoch {}: {:?}",
                job.state,
                job.owner_epoch,
                kinds(&self.ledger, job_id).await
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub(crate) async fn stop(mut self) {
        self.shutdown.cancel();
        while self.tasks.join_next().await.is_some() {}
    }
}

/// How many of the job's events have this kind.
pub(crate) async fn count_kind(ledger: &Ledger, job_id: &str, kind: &str) -> usize {
    kinds(ledger, job_id)
        .await
        .iter()
        .filter(|k| *k == kind)
        .count()
}

/// Waits until the job's timeline has an event of `kind` (events after a commit, such as the
/// delete, land a moment after the state changes).
pub(crate) async fn wait_for_event(ledger: &Ledger, job_id: &str, kind: &str, limit: Duration) {
    let until = tokio::time::Instant::now() + limit;
    while count_kind(ledger, job_id, kind).await == 0 {
        assert!(
            tokio::time::Instant::now() < until,
            "no {kind} on the timeline: {:?}",
            kinds(ledger, job_id).await
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// An API token made with `fenceline token add`, as an operator would.
pub(crate) async fn cli_token(database_url: &str, tenant: &str) -> String {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_fenceline"))
        .args(["token", "add", tenant, "--database-url", database_url])
        .stderr(std::process::Stdio::null())
        .output()
        .await
        .expect("token add");
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// A loopback port free right now.
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Waits until a spawned `fenceline serve` answers `/readyz`.
pub(crate) async fn wait_ready(base: &str) {
    let until = tokio::time::Instant::now() + Duration::from_secs(20);
    while reqwest::get(format!("{base}/readyz")).await.is_err() {
        assert!(
            tokio::time::Instant::now() < until,
            "the server never came up"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A `fenceline serve` process on a free port with compressed timings and `extra` flags,
/// answering `/readyz`; returns it (killed on drop) and its base URL.
pub(crate) async fn spawn_serve(
    database_url: &str,
    extra: &[&str],
) -> (tokio::process::Child, String) {
    let port = free_port();
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_fenceline"))
        .args(["serve", "--database-url", database_url])
        .args([
            "--bind",
            &format!("127.0.0.1:{port}"),
            "--timings",
            "compressed",
        ])
        .args(extra)
        .env("FENCELINE_LOG", "error")
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start fenceline serve");
    let base = format!("http://127.0.0.1:{port}");
    wait_ready(&base).await;
    (child, base)
}

/// The fence a worker writes under, for tests that drive the ledger by hand.
pub(crate) fn as_owner(job_id: &str, epoch: i64, worker: &str) -> Owner {
    Owner::new(job_id.parse().expect("a job id"), epoch, worker)
}

/// A browser, as far as the console can tell: its cookies (the session's, the sign-in form's)
/// sent with every request, no redirects followed.
pub(crate) struct Browser {
    pub(crate) base: String,
    client: reqwest::Client,
    /// The `Cookie` header it sends: `name=value` pairs joined by `; `.
    pub(crate) cookie: Option<String>,
}

impl Browser {
    pub(crate) fn new(base: &str) -> Browser {
        Browser {
            base: base.to_owned(),
            client: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
            cookie: None,
        }
    }

    fn keep_cookie(&mut self, response: &reqwest::Response) {
        let mut jar: Vec<String> = self
            .cookie
            .iter()
            .flat_map(|c| c.split("; "))
            .map(str::to_owned)
            .collect();
        for value in response.headers().get_all("set-cookie") {
            let value = value.to_str().unwrap();
            let pair = value.split(';').next().unwrap();
            let name = pair.split('=').next().unwrap();
            jar.retain(|kept| kept.split('=').next() != Some(name));
            if !(pair.ends_with('=') || value.contains("Max-Age=0")) {
                jar.push(pair.to_owned());
            }
        }
        self.cookie = (!jar.is_empty()).then(|| jar.join("; "));
    }

    pub(crate) async fn get(&mut self, path: &str) -> reqwest::Response {
        let mut request = self.client.get(format!("{}{path}", self.base));
        if let Some(cookie) = &self.cookie {
            request = request.header("cookie", cookie);
        }
        let response = request.send().await.unwrap();
        self.keep_cookie(&response);
        response
    }

    pub(crate) async fn page(&mut self, path: &str) -> String {
        let response = self.get(path).await;
        assert_eq!(response.status(), 200, "GET {path}");
        response.text().await.unwrap()
    }

    pub(crate) async fn post_with(
        &mut self,
        path: &str,
        form: &[(&str, &str)],
        headers: &[(&str, &str)],
    ) -> reqwest::Response {
        let mut request = self.client.post(format!("{}{path}", self.base)).form(form);
        if let Some(cookie) = &self.cookie {
            request = request.header("cookie", cookie);
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request.send().await.unwrap();
        self.keep_cookie(&response);
        response
    }

    /// Posts as the console's own pages do: same origin.
    pub(crate) async fn post(&mut self, path: &str, form: &[(&str, &str)]) -> reqwest::Response {
        let origin = self.base.clone();
        self.post_with(path, form, &[("origin", &origin)]).await
    }

    /// The form token of the page at `path`.
    pub(crate) async fn token(&mut self, path: &str) -> String {
        let page = self.page(path).await;
        token_in(&page).expect("a page with a form token")
    }

    pub(crate) async fn sign_in(&mut self, name: &str, password: &str) -> reqwest::Response {
        self.sign_in_to(name, password, "/").await
    }

    /// Signs in from the sign-in form, asking to go on to `next`.
    pub(crate) async fn sign_in_to(
        &mut self,
        name: &str,
        password: &str,
        next: &str,
    ) -> reqwest::Response {
        let csrf = self.token("/login").await;
        self.post(
            "/login",
            &[
                ("csrf", &csrf),
                ("name", name),
                ("password", password),
                ("next", next),
            ],
        )
        .await
    }

    /// `n` wrong passwords for `name` posted at once with this browser's one sign-in form (its
    /// cookie and token): the status each got.
    pub(crate) async fn guesses_at_once(&mut self, name: &str, n: usize) -> Vec<StatusCode> {
        let csrf = self.token("/login").await;
        let cookie = self.cookie.clone().expect("the sign-in form's cookie");
        let mut guesses = tokio::task::JoinSet::new();
        for i in 0..n {
            let request = self
                .client
                .post(format!("{}/login", self.base))
                .header("cookie", &cookie)
                .header("origin", &self.base)
                .form(&[
                    ("csrf", csrf.as_str()),
                    ("name", name),
                    ("password", &format!("guess {i}")),
                    ("next", "/"),
                ]);
            guesses.spawn(async move { request.send().await.unwrap().status() });
        }
        guesses.join_all().await
    }
}

/// Every number a job handed out is held by one event, numbered from 1 without a hole.
pub(crate) async fn assert_gap_free(ledger: &Ledger, job_id: &str) {
    let events = ledger.all_events(job_id).await.unwrap();
    let seqs: Vec<i64> = events.iter().map(|e| e.seq).collect();
    let expected: Vec<i64> = (1..=events.len() as i64).collect();
    let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(
        seqs, expected,
        "{job_id}: numbered without a hole: {kinds:?}"
    );
    let job = ledger.job(job_id).await.unwrap().unwrap();
    assert_eq!(
        job.next_event_seq,
        events.len() as i64 + 1,
        "{job_id}: no number handed out that no event holds: {kinds:?}"
    );
}

/// A decision as an operator takes it on an `unknown` job's page.
pub(crate) enum Decision<'a> {
    /// Authorize a fenced retry.
    Retry,
    /// Resolve as failed.
    Failed,
    /// Resolve as succeeded, with the provider's reference and/or the result pasted (either
    /// may be empty, as a form sent with an empty field is).
    Succeeded { evidence: &'a str, result: &'a str },
}

/// The console's actions as an operator takes them: each reads the form token from the page
/// the form is on and posts what that form posts, fenced by what the page showed.
impl Browser {
    /// Decides on `job_id` from its page, seen at `epoch`; returns the page it goes back to.
    pub(crate) async fn decide(
        &mut self,
        job_id: &str,
        epoch: i64,
        decision: Decision<'_>,
        reason: &str,
    ) -> String {
        let page = format!("/jobs/{job_id}");
        let csrf = self.token(&page).await;
        let epoch = epoch.to_string();
        let mut form = vec![("csrf", csrf.as_str()), ("epoch", epoch.as_str())];
        match decision {
            Decision::Retry => form.push(("decision", "authorize_retry")),
            Decision::Failed => form.push(("decision", "resolve_failed")),
            Decision::Succeeded { evidence, result } => form.extend([
                ("decision", "resolve_succeeded"),
                ("evidence", evidence),
                ("result", result),
            ]),
        }
        form.push(("reason", reason));
        let response = self.post(&format!("{page}/decisions"), &form).await;
        assert_eq!(response.status(), 303);
        assert_eq!(location(&response), page);
        self.page(&page).await
    }

    /// Cancels `job_id` from its page, seen at `epoch` in `state`; returns the page it goes
    /// back to.
    pub(crate) async fn cancel(
        &mut self,
        job_id: &str,
        epoch: i64,
        state: &str,
        reason: &str,
    ) -> String {
        let page = format!("/jobs/{job_id}");
        let csrf = self.token(&page).await;
        let epoch = epoch.to_string();
        let form = [
            ("csrf", csrf.as_str()),
            ("epoch", epoch.as_str()),
            ("state", state),
            ("reason", reason),
        ];
        let response = self.post(&format!("{page}/cancel"), &form).await;
        assert_eq!(response.status(), 303);
        assert_eq!(location(&response), page);
        self.page(&page).await
    }

    /// Decides the jobs picked on `/unknown` (`ID:EPOCH`, as their rows showed them): a
    /// fenced retry or failed, the two decisions the list offers.
    pub(crate) async fn decide_picked(
        &mut self,
        picks: &[String],
        decision: Decision<'_>,
        reason: &str,
    ) -> reqwest::Response {
        let decision = match decision {
            Decision::Retry => "authorize_retry",
            Decision::Failed => "resolve_failed",
            Decision::Succeeded { .. } => panic!("the list offers no resolving as succeeded"),
        };
        let csrf = self.token("/unknown").await;
        let mut form = vec![
            ("csrf", csrf.as_str()),
            ("decision", decision),
            ("reason", reason),
        ];
        form.extend(picks.iter().map(|p| ("job", p.as_str())));
        self.post("/unknown/decisions", &form).await
    }

    /// Cancels the jobs picked on the jobs list at `list` (`ID:EPOCH:STATE[:EVENTS]`).
    pub(crate) async fn cancel_picked(
        &mut self,
        list: &str,
        picks: &[String],
        reason: &str,
    ) -> reqwest::Response {
        self.act_on_picked("/jobs/cancel", list, picks, reason)
            .await
    }

    /// Runs the jobs picked on the jobs list at `list` again; the same call twice sends the
    /// same form twice.
    pub(crate) async fn rerun_picked(
        &mut self,
        list: &str,
        picks: &[String],
        reason: &str,
    ) -> reqwest::Response {
        self.act_on_picked("/jobs/rerun", list, picks, reason).await
    }

    async fn act_on_picked(
        &mut self,
        action: &str,
        list: &str,
        picks: &[String],
        reason: &str,
    ) -> reqwest::Response {
        let csrf = self.token(list).await;
        let mut form = vec![("csrf", csrf.as_str()), ("reason", reason), ("back", list)];
        form.extend(picks.iter().map(|p| ("job", p.as_str())));
        self.post(action, &form).await
    }

    /// Replays the dead letter `message_id` from `/dlq`; returns the answer.
    pub(crate) async fn replay_dead_letter(
        &mut self,
        message_id: &str,
        reason: &str,
    ) -> reqwest::Response {
        let csrf = self.token("/dlq").await;
        let form = [("csrf", csrf.as_str()), ("reason", reason)];
        self.post(&format!("/dlq/{message_id}/replay"), &form).await
    }

    /// Replays every dead letter from `/dlq`; returns the answer.
    pub(crate) async fn replay_dead_letters(&mut self, reason: &str) -> reqwest::Response {
        let csrf = self.token("/dlq").await;
        let form = [("csrf", csrf.as_str()), ("reason", reason)];
        self.post("/dlq/replay", &form).await
    }
}

pub(crate) fn token_in(page: &str) -> Option<String> {
    let at = page.find("name=\"csrf\" value=\"")? + "name=\"csrf\" value=\"".len();
    Some(page[at..].split('"').next()?.to_owned())
}

pub(crate) fn location(response: &reqwest::Response) -> String {
    response
        .headers()
        .get("location")
        .map(|l| l.to_str().unwrap().to_owned())
        .unwrap_or_default()
}

impl TestApp {
    /// A browser signed in as a new operator of `role` (every tenant).
    pub(crate) async fn signed_in(&self, role: fenceline::operators::Role) -> Browser {
        let name = format!("test-{role}");
        let password = "test password, long enough";
        self.ledger
            .add_operator(
                &name,
                role,
                None,
                &fenceline::operators::hash_password(password).unwrap(),
            )
            .await
            .expect("add an operator");
        let mut browser = Browser::new(&self.base);
        let response = browser.sign_in(&name, password).await;
        assert_eq!(location(&response), "/", "signed in");
        browser
    }
}

/// A browser signed in to the `serve` process at `base` on `database_url`, as a new viewer.
pub(crate) async fn viewer_at(database_url: &str, base: &str) -> Browser {
    let ledger = Ledger::connect(database_url, &options())
        .await
        .expect("connect the ledger");
    let password = "test password, long enough";
    let name = format!("viewer-{}", uuid::Uuid::now_v7().simple());
    ledger
        .add_operator(
            &name,
            fenceline::operators::Role::Viewer,
            None,
            &fenceline::operators::hash_password(password).unwrap(),
        )
        .await
        .expect("add an operator");
    ledger.close().await;
    let mut browser = Browser::new(base);
    let response = browser.sign_in(&name, password).await;
    assert_eq!(location(&response), "/", "signed in");
    browser
}

/// Sends `job_id`'s message (tenant `acme`) on the embedded queue and receives it: the
/// delivery a worker would get.
pub(crate) async fn deliver(
    queue: &fenceline::queue::embedded::EmbeddedQueue,
    job_id: &str,
) -> fenceline::queue::Delivery {
    use fenceline::queue::Queue;
    queue
        .send(
            &fenceline::job::message::JobMessage::body(job_id, "acme"),
            Duration::ZERO,
        )
        .await
        .unwrap();
    let mut got = queue
        .receive(1, Duration::from_secs(60), Duration::from_secs(2))
        .await
        .unwrap();
    assert_eq!(got.len(), 1, "the message is delivered");
    got.remove(0)
}
