//! The `fenceline` binary: parses the command line and runs one command.

use std::time::Duration;

use anyhow::Context;

use fenceline::ledger::{Ledger, LedgerOptions};
use fenceline::queue::sqs::SqsQueue;
use fenceline::settings::{
    BenchCommand, Command, DrillCommand, OperatorCommand, QueueCommand, Settings, SoakCommand,
    TokenCommand,
};
use fenceline::startup::{runtime, shutdown_signal, Application, Supervisor};

/// mimalloc instead of the system's allocator: the worker, group commit and SQLite's writer
/// allocate and free a row's values, JSON parameters and results from several threads at
/// once, where glibc's allocator spent about two fifths of this process's CPU in the pipeline
/// benchmark (see docs/journal/2026-12-02-allocator-and-receive-poll.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Logs to standard error as `FENCELINE_LOG` asks (never the session library's spans below
/// warnings); with `count_statements`, also counts every SQL statement the process runs.
fn init_tracing(count_statements: bool) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;
    let filter = tracing_subscriber::EnvFilter::try_from_env("FENCELINE_LOG")
        .unwrap_or_else(|_| "info,sqlx=warn,aws=warn".into())
        // The session library's spans carry session values (form tokens) as fields: never
        // below warnings, whatever FENCELINE_LOG asks.
        .add_directive("tower_sessions=warn".parse().expect("a static directive"))
        .add_directive(
            "tower_sessions_core=warn"
                .parse()
                .expect("a static directive"),
        );
    // Colours only for a terminal: a log file or a collector gets plain text.
    let log = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_filter(filter);
    let counter = count_statements.then(fenceline::bench::statement_counter);
    tracing_subscriber::registry()
        .with(log)
        .with(counter)
        .init();
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            // One line, the causes after the context, as the settings' errors are: a refused
            // command is the operator's to read, and a backtrace (which `RUST_BACKTRACE` in the
            // environment would print under anyhow's own report) only hides the reason.
            eprintln!("error: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Runs the command the command line names.
async fn run() -> anyhow::Result<()> {
    let (cli, settings) = match Settings::load() {
        Ok(loaded) => loaded,
        Err(fenceline::settings::SettingsError::Cli(error)) => error.exit(),
        Err(error) => {
            eprintln!("error: {error}");
            std::process::exit(2);
        }
    };
    let command = cli.command.as_ref().expect("a subcommand");
    init_tracing(matches!(command, Command::Bench(BenchCommand::Renewals(_))));
    let url = settings.ledger.url.as_str();
    let options = &settings.ledger.options;
    match command {
        Command::Serve(_) => serve(&settings).await,
        Command::Worker(_) => work(&settings).await,
        Command::Migrate => {
            let ledger = Ledger::connect(url, options).await?;
            fenceline::startup::migrate(&ledger, settings.environment)
                .await
                .context("migrating the ledger")?;
            let marked = if ledger.marked_production().await? {
                " (marked production: drills refuse it)"
            } else {
                ""
            };
            println!("migrated the {} ledger{marked}", ledger.backend().as_str());
            Ok(())
        }
        Command::Token(TokenCommand::Add { tenant, name }) => {
            let ledger = Ledger::connect(url, options).await?;
            ledger.migrate().await?;
            let token = ledger.add_token(tenant, name).await?;
            eprintln!("API token for tenant {tenant:?} (shown once; only its hash is stored):");
            println!("{token}");
            Ok(())
        }
        Command::Token(TokenCommand::List) => {
            let ledger = Ledger::connect(url, options).await?;
            ledger.migrate().await?;
            println!(
                "{:<12}  {:<30}  {:<16}  {:<27}  revoked",
                "id", "acts as", "name", "created"
            );
            for t in ledger.list_tokens().await? {
                println!(
                    "{:<12}  {:<30}  {:<16}  {:<27}  {}",
                    t.id,
                    t.acts_as.to_string(),
                    t.name,
                    fenceline::time::rfc3339_us(t.created_at),
                    t.revoked_at.map_or("-".into(), fenceline::time::rfc3339_us)
                );
            }
            Ok(())
        }
        Command::Token(TokenCommand::Revoke { id }) => {
            let ledger = Ledger::connect(url, options).await?;
            ledger.migrate().await?;
            let t = ledger.revoke_token(id).await?;
            println!(
                "revoked token {} ({}, acting as {})",
                t.id, t.name, t.acts_as
            );
            Ok(())
        }
        Command::Operator(command) => {
            let ledger = Ledger::connect(url, options).await?;
            ledger.migrate().await?;
            operator_command(&ledger, command).await
        }
        Command::Queue(QueueCommand::Create {
            name,
            max_receive_count,
        }) => {
            let client = SqsQueue::client_from_env().await;
            let queue = SqsQueue::create(client, name, *max_receive_count, Duration::from_secs(10))
                .await
                .context("creating the SQS queue")?;
            use fenceline::queue::Queue;
            println!(
                "created {} with dead-letter queue {name}-dlq",
                queue.describe()
            );
            Ok(())
        }
        Command::Submit(args) => submit(args).await,
        Command::Decide(args) => {
            let ledger = Ledger::connect(url, options).await?;
            ledger.migrate().await?;
            decide_command(&ledger, args).await
        }
        Command::Cancel {
            job_id,
            epoch,
            reason,
            operator,
        } => {
            let ledger = Ledger::connect(url, options).await?;
            ledger.migrate().await?;
            let actor = acting_operator(&ledger, operator).await?;
            let job = ledger
                .job(job_id)
                .await?
                .with_context(|| format!("no job {job_id}"))?;
            ledger
                .cancel(job_id, *epoch, job.state, &actor, reason)
                .await
                .map_err(refused_plainly)?;
            println!("cancelled {job_id}: failed_terminal at epoch {}", epoch + 1);
            Ok(())
        }
        Command::Rerun {
            job_id,
            reason,
            operator,
            seen_events,
        } => {
            let ledger = Ledger::connect(url, options).await?;
            ledger.migrate().await?;
            let actor = acting_operator(&ledger, operator).await?;
            let created = ledger
                .run_again(job_id, *seen_events, &actor, reason)
                .await
                .map_err(refused_plainly)?;
            match created {
                fenceline::ledger::Created::New(new) => {
                    println!("{job_id} runs again as {}", new.job_id)
                }
                fenceline::ledger::Created::Existing(new) => println!(
                    "{job_id} was already run again from that view, as {}; nothing new was made",
                    new.job_id
                ),
            }
            Ok(())
        }
        Command::DlqReplay { max, operator, .. } => {
            let ledger = Ledger::connect(url, options).await?;
            ledger.migrate().await?;
            let queue = runtime::queue(&ledger, &settings).await?;
            let actor = fenceline::job::Actor::Operator(operator.clone());
            let replay =
                fenceline::worker::dlq::replay_inspected(&ledger, &queue, &actor, *max).await?;
            println!(
                "re-dispatched {}, dropped (terminal) {}, kept awaiting a decision {}, kept (not job messages) {}",
                replay.redispatched, replay.dropped_terminal, replay.awaiting_decision, replay.not_job_messages
            );
            Ok(())
        }
        Command::Bench(BenchCommand::Ledger(args)) => {
            let report = fenceline::bench::ledger(url, options, args).await?;
            println!("{report}");
            Ok(())
        }
        Command::Bench(BenchCommand::Pipeline(args)) => {
            let report = fenceline::bench::pipeline(url, options, args).await?;
            println!("{report}");
            Ok(())
        }
        Command::Bench(BenchCommand::Console(args)) => {
            let report = fenceline::bench::console(&settings, args).await?;
            println!("{report}");
            Ok(())
        }
        Command::Bench(BenchCommand::Submit(args)) => {
            let report = fenceline::bench::submit(&settings, args).await?;
            println!("{report}");
            Ok(())
        }
        Command::Bench(BenchCommand::Throttle(args)) => {
            println!("{}", fenceline::bench::throttle(args).await?);
            Ok(())
        }
        Command::Bench(BenchCommand::Fairness(args)) => {
            println!("{}", fenceline::bench::fairness(args).await?);
            Ok(())
        }
        Command::Bench(BenchCommand::SeedTimeline(args)) => {
            // The seed claims the job it creates. Its message waits in the outbox for a
            // dispatcher instead of going into the queue with the job, so a worker already
            // serving this ledger (a demo beside `serve`) does not receive it and claim first.
            let options = &LedgerOptions {
                direct_queue: None,
                ..options.clone()
            };
            let ledger = Ledger::connect(url, options).await?;
            ledger.migrate().await?;
            let job_id =
                fenceline::bench::seed_timeline(&ledger, &args.tenant, args.events, &args.pattern)
                    .await?;
            println!("{job_id}");
            Ok(())
        }
        Command::Bench(BenchCommand::Renewals(args)) => {
            let report = fenceline::bench::renewals(url, options, args).await?;
            println!("{report}");
            Ok(())
        }
        Command::Drill(DrillCommand::List) => {
            for kind in fenceline::drill::DrillKind::ALL {
                let faults: Vec<&str> = kind.faults().iter().map(|f| f.name()).collect();
                println!("{}", kind.as_str());
                println!("    setup:  {}", kind.setup());
                println!(
                    "    faults: {}",
                    if faults.is_empty() {
                        "none (a copy sent by the drill)".to_owned()
                    } else {
                        faults.join(", ")
                    }
                );
                println!("    proves: {}", kind.proves());
            }
            Ok(())
        }
        Command::Drill(DrillCommand::Run(args)) => drill(&settings, args).await,
        Command::Soak(SoakCommand::Check(args)) => {
            let ledger = Ledger::connect(&settings.ledger.url, &settings.ledger.options).await?;
            let verdict =
                fenceline::soak::check(&ledger, args.tenant.as_deref(), args.expect).await?;
            ledger.close().await;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&verdict)?);
            } else {
                print!("{}", verdict.render());
            }
            if !verdict.holds() {
                std::process::exit(1);
            }
            Ok(())
        }
    }
}

/// `fenceline drill run`: runs scenarios to their verdict, showing each as it finishes.
async fn drill(
    settings: &Settings,
    args: &fenceline::settings::DrillRunArgs,
) -> anyhow::Result<()> {
    use fenceline::drill::{DrillKind, DrillRequest, ScenarioStatus};
    let kinds = if args.kind.trim() == "all" {
        DrillKind::ALL.to_vec()
    } else {
        vec![DrillKind::parse(&args.kind).with_context(|| {
            format!(
                "no drill is called {:?}: `fenceline drill list` shows the catalogue, or use `all`",
                args.kind
            )
        })?]
    };
    fenceline::drill::runner::allowed(settings.environment)?;
    let ledger = Ledger::connect(&settings.ledger.url, &settings.ledger.options).await?;
    ledger.migrate().await?;
    let started = std::time::Instant::now();
    eprintln!(
        "running {} drill(s) on the {} queue with {} timings…",
        kinds.len(),
        args.queue.as_str(),
        args.timings.as_str()
    );
    let provider = match args.model {
        fenceline::settings::DrillModel::Stub => fenceline::drill::DrillProvider::Stub,
        fenceline::settings::DrillModel::Configured => {
            fenceline::drill::DrillProvider::Configured(runtime::provider(&settings.provider)?)
        }
    };
    eprintln!("the drill's jobs call the {} model", provider.describe());
    let request = DrillRequest {
        kinds,
        queue: args.queue,
        timings: args.timings,
        requested_by: "cli".into(),
        provider,
    };
    let report = fenceline::drill::runner::run(&ledger, settings.environment, request, |s| {
        let verdict = if s.status == ScenarioStatus::Passed {
            "PASS"
        } else {
            "FAIL"
        };
        let took = s.took_ms.unwrap_or(0) as f64 / 1000.0;
        eprintln!("{verdict}  {}  ({took:.1} s)", s.kind.as_str());
        for check in s.checks.iter().filter(|c| !c.passed) {
            eprintln!("      ✗ {}: {}", check.name, check.detail);
        }
    })
    .await?;
    let passed = report.passed();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    }
    eprintln!(
        "{}: {} of {} drill(s) passed in {:.1} s; report {} (the console shows it at /drills/{})",
        if passed { "PASS" } else { "FAIL" },
        report
            .scenarios
            .iter()
            .filter(|s| s.status == ScenarioStatus::Passed)
            .count(),
        report.scenarios.len(),
        started.elapsed().as_secs_f64(),
        report.run_id,
        report.run_id
    );
    ledger.close().await;
    if !passed {
        std::process::exit(1);
    }
    Ok(())
}

async fn serve(settings: &Settings) -> anyhow::Result<()> {
    let app = Application::build(settings)
        .await
        .context("starting fenceline")?;
    let addr = app.local_addr();
    let ledger = app.ledger().clone();
    let metrics = app.metrics().clone();
    let backend = ledger.backend().as_str();
    let first_password = fenceline::startup::first_operator(&ledger, settings.environment)
        .await
        .context("checking that someone can sign in")?;
    let mut supervisor = Supervisor::default();
    if settings.http.run_worker {
        runtime::start(&mut supervisor, &ledger, settings, &metrics).await?;
    }
    let stop = supervisor.stages().front.clone();
    supervisor.spawn("http", true, async move {
        if let Err(error) = app
            .run_until_stopped(async move { stop.cancelled().await })
            .await
        {
            tracing::error!(%error, "the HTTP server failed");
        }
    });
    tracing::info!(%addr, database = backend, "fenceline is serving");
    println!("Fenceline is running on the {backend} ledger.");
    let console = settings.console_url(addr);
    println!("  Console: {console}/");
    match first_password {
        // Shown once, here only: never logged. Only its argon2id hash is stored.
        Some(password) => {
            println!("  Sign in at {console}/login as admin, password: {password}");
            println!("  (shown once; change it with: fenceline operator reset admin)");
        }
        None => println!("  Sign in at {console}/login"),
    }
    println!("  API:     http://{addr}/api/v1  (reference: http://{addr}/api, OpenAPI: http://{addr}/api/v1/openapi.json)");
    println!("  Create an API token with: fenceline token add <tenant>");
    supervisor
        .run_until_stopped(&ledger, shutdown_signal())
        .await;
    tracing::info!("fenceline stopped");
    Ok(())
}

/// `fenceline submit`: the HTTP API, as any service would use it.
async fn submit(args: &fenceline::settings::SubmitArgs) -> anyhow::Result<()> {
    use fenceline::http::contract::{CreateJobRequest, JobResult, JobView};
    use fenceline::job::JobState;
    use serde_json::Value;
    if let Some(file) = &args.file {
        return submit_file(args, file).await;
    }
    let (Some(key), Some(input)) = (&args.key, &args.input) else {
        anyhow::bail!("--key and --input name the job (or --file many)");
    };
    let input: Value = serde_json::from_str(input).unwrap_or_else(|_| Value::String(input.clone()));
    let model: Value =
        serde_json::from_str(&args.model).context("--model must be a JSON object")?;
    let request = CreateJobRequest {
        idempotency_key: key.clone(),
        input,
        contract_version: "v1".into(),
        model,
        deadline_seconds: args.deadline_seconds,
        max_attempts: args.max_attempts,
        replay_policy: None,
    };
    let api = args.api.trim_end_matches('/');
    let client = reqwest::Client::new();
    let response = post_to_api(&client, api, &args.token, "/api/v1/jobs", &request).await?;
    let status = response.status();
    let job: JobView = response.json().await.context("reading the answer")?;
    let job_id = job.job_id;
    eprintln!(
        "{} job {job_id} ({}); console: {api}/jobs/{job_id}",
        if status.as_u16() == 201 {
            "created"
        } else {
            "already had"
        },
        job.state
    );
    if !args.wait {
        println!("{job_id}");
        return Ok(());
    }
    loop {
        let job: JobView = client
            .get(format!("{api}/api/v1/jobs/{job_id}"))
            .bearer_auth(&args.token)
            .send()
            .await?
            .json()
            .await?;
        if job.state == JobState::Unknown {
            anyhow::bail!(
                "job {job_id} is unknown: a model call may have run with no answer seen, and it \
                 waits for a decision (provider retrieval, a replay policy, or an operator). \
                 Console: {api}/jobs/{job_id}"
            );
        }
        if job.terminal {
            if job.state == JobState::Succeeded {
                let result: JobResult = client
                    .get(format!("{api}/api/v1/jobs/{job_id}/result"))
                    .bearer_auth(&args.token)
                    .send()
                    .await?
                    .json()
                    .await?;
                println!("{}", serde_json::to_string_pretty(&result.result)?);
                return Ok(());
            }
            anyhow::bail!(
                "job {job_id} ended {} ({})",
                job.state,
                job.error_code.as_deref().unwrap_or("no error code")
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// POSTs `body` to the API at `path`; a refusal is an error carrying the API's message.
async fn post_to_api(
    client: &reqwest::Client,
    api: &str,
    token: &str,
    path: &str,
    body: &impl serde::Serialize,
) -> anyhow::Result<reqwest::Response> {
    use fenceline::http::contract::ErrorBody;
    let response = client
        .post(format!("{api}{path}"))
        .bearer_auth(token)
        .json(body)
        .send()
        .await
        .with_context(|| format!("reaching {api}"))?;
    let status = response.status();
    if !status.is_success() {
        let message = response
            .json::<ErrorBody>()
            .await
            .map_or_else(|_| "request refused".to_owned(), |e| e.error.message);
        anyhow::bail!("{status}: {message}");
    }
    Ok(response)
}

/// `fenceline submit --file`: one job a line, sent in batches; one answer a line, in order.
async fn submit_file(
    args: &fenceline::settings::SubmitArgs,
    file: &std::path::Path,
) -> anyhow::Result<()> {
    use fenceline::http::contract::{BatchResponse, MAX_BATCH};
    use serde_json::Value;
    let text = if file == std::path::Path::new("-") {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
            .context("reading standard input")?;
        text
    } else {
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?
    };
    // Each job with its line number; a line that is not JSON is answered here.
    let mut jobs: Vec<(usize, Value)> = Vec::new();
    let (mut created, mut existing, mut refused) = (0, 0, Vec::new());
    let mut answers: Vec<(usize, String)> = Vec::new();
    for (n, line) in text.lines().enumerate().map(|(i, l)| (i + 1, l.trim())) {
        if line.is_empty() {
            continue;
        }
        match serde_json::from_str::<Value>(line) {
            Ok(job) => jobs.push((n, job)),
            Err(e) => {
                refused.push(n);
                answers.push((n, format!("{n}\t-\tnot JSON: {e}")));
            }
        }
    }
    let api = args.api.trim_end_matches('/');
    let client = reqwest::Client::new();
    for chunk in jobs.chunks(MAX_BATCH) {
        let body = serde_json::json!({ "jobs": chunk.iter().map(|(_, j)| j).collect::<Vec<_>>() });
        let sent = async {
            post_to_api(&client, api, &args.token, "/api/v1/jobs/batch", &body)
                .await?
                .json::<BatchResponse>()
                .await
                .context("reading the answer")
        };
        let batch = match sent.await {
            Ok(batch) => batch,
            Err(error) => {
                // What was answered before stays on record; from this line on nothing is known.
                let first = chunk[0].0;
                answers.sort_by_key(|(n, _)| *n);
                for (_, line) in answers.iter().filter(|(n, _)| *n < first) {
                    println!("{line}");
                }
                return Err(error.context(format!(
                    "sending the jobs from line {first} on; the lines above were answered, \
                     and sending the file again is safe (the same key and job make nothing new)"
                )));
            }
        };
        created += batch.created;
        existing += batch.existing;
        for ((n, _), item) in chunk.iter().zip(batch.jobs) {
            let what = match (item.job, item.error) {
                (Some(job), _) => job.job_id,
                (None, Some(error)) => {
                    refused.push(*n);
                    // The line number says which job; the batch's index would mislead.
                    match error.message.strip_prefix("jobs[") {
                        Some(rest) => rest
                            .split_once("] is ")
                            .map_or(error.message.clone(), |(_, why)| why.to_owned()),
                        None => error.message,
                    }
                }
                (None, None) => {
                    refused.push(*n);
                    "no answer".to_owned()
                }
            };
            answers.push((*n, format!("{n}\t{}\t{what}", item.status)));
        }
    }
    answers.sort_by_key(|(n, _)| *n);
    for (_, line) in &answers {
        println!("{line}");
    }
    refused.sort_unstable();
    eprintln!(
        "created {created}, already had {existing}, refused {}{}",
        refused.len(),
        if refused.is_empty() {
            String::new()
        } else {
            format!(
                " (lines {})",
                refused
                    .iter()
                    .map(usize::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
    );
    if !refused.is_empty() {
        anyhow::bail!("{} of the jobs were refused", refused.len());
    }
    Ok(())
}

async fn work(settings: &Settings) -> anyhow::Result<()> {
    let ledger = Ledger::connect(&settings.ledger.url, &settings.ledger.options)
        .await
        .context("opening the ledger")?;
    fenceline::startup::migrate(&ledger, settings.environment)
        .await
        .context("migrating the ledger")?;
    let mut supervisor = Supervisor::default();
    let metrics = fenceline::metrics::Metrics::default();
    runtime::start(&mut supervisor, &ledger, settings, &metrics).await?;
    supervisor
        .run_until_stopped(&ledger, shutdown_signal())
        .await;
    tracing::info!("fenceline worker stopped");
    Ok(())
}

/// A password from the first line of standard input, or typed at a prompt without echo.
fn read_password(from_stdin: bool, prompt: &str) -> anyhow::Result<String> {
    let password = if from_stdin {
        let mut line = String::new();
        std::io::stdin()
            .read_line(&mut line)
            .context("reading the password from standard input")?;
        line.trim_end_matches(['\r', '\n']).to_owned()
    } else {
        let first = rpassword::prompt_password(prompt).context("reading the password")?;
        let again = rpassword::prompt_password("Again: ").context("reading the password")?;
        anyhow::ensure!(first == again, "the two passwords differ");
        first
    };
    Ok(password)
}

fn role(name: &str) -> anyhow::Result<fenceline::operators::Role> {
    Ok(name.parse()?)
}

/// `fenceline operator …`.
async fn operator_command(ledger: &Ledger, command: &OperatorCommand) -> anyhow::Result<()> {
    use fenceline::operators::{hash_password, Operator};
    let show = |o: &Operator| {
        println!(
            "{:<24}  {:<8}  {:<24}  {:<19}  {}",
            o.name,
            o.role,
            o.tenants.as_ref().map_or("(all)".into(), |t| t.join(",")),
            fenceline::time::short_time(o.created_at),
            o.disabled_at
                .map_or("-".into(), fenceline::time::short_time)
        );
    };
    match command {
        OperatorCommand::Add {
            name,
            role: role_name,
            tenants,
            password_stdin,
        } => {
            let role = role(role_name)?;
            let password = read_password(*password_stdin, &format!("Password for {name}: "))?;
            let hash = hash_password(&password)?;
            let tenants = (!tenants.is_empty()).then_some(tenants.as_slice());
            let added = ledger.add_operator(name, role, tenants, &hash).await?;
            println!("added {} ({})", added.name, added.role);
        }
        OperatorCommand::List => {
            println!(
                "{:<24}  {:<8}  {:<24}  {:<19}  disabled",
                "name", "role", "tenants", "created"
            );
            for o in ledger.list_operators().await? {
                show(&o);
            }
        }
        OperatorCommand::SetRole {
            name,
            role: role_name,
            tenants,
            all_tenants,
        } => {
            let role = role(role_name)?;
            let scope = if *all_tenants {
                Some(None)
            } else if tenants.is_empty() {
                None
            } else {
                Some(Some(tenants.as_slice()))
            };
            let changed = ledger.set_operator_role(name, role, scope).await?;
            show(&changed);
        }
        OperatorCommand::Disable { name } => {
            show(&ledger.set_operator_disabled(name, true).await?);
        }
        OperatorCommand::Enable { name } => {
            show(&ledger.set_operator_disabled(name, false).await?);
        }
        OperatorCommand::Token { name, label } => {
            let token = ledger.add_operator_token(name, label).await?;
            eprintln!("operator token for {name} (shown once; only its hash is stored):");
            println!("{token}");
        }
        OperatorCommand::Reset {
            name,
            password_stdin,
        } => {
            anyhow::ensure!(
                ledger.operator(name).await?.is_some(),
                "no operator named {name}"
            );
            let password = read_password(*password_stdin, &format!("New password for {name}: "))?;
            let hash = hash_password(&password)?;
            ledger.set_operator_password(name, &hash).await?;
            println!("set a new password for {name}; their earlier sessions have ended");
        }
    }
    Ok(())
}

/// The operator a CLI action is taken as: one that exists, is enabled and may act.
async fn acting_operator(ledger: &Ledger, name: &str) -> anyhow::Result<fenceline::job::Actor> {
    let operator = ledger
        .operator(name)
        .await?
        .filter(|o| !o.is_disabled())
        .with_context(|| format!("no enabled operator named {name}"))?;
    anyhow::ensure!(
        operator.role.allows(fenceline::operators::Role::Operator),
        "{name} is a {}: only operators and admins act on jobs",
        operator.role
    );
    Ok(fenceline::job::Actor::Operator(operator.name))
}

/// A refused transition said as the console says it.
fn refused_plainly(error: fenceline::ledger::LedgerError) -> anyhow::Error {
    match error {
        fenceline::ledger::LedgerError::Refused { refusal, .. } => anyhow::anyhow!(
            "refused, nothing changed: {refusal} (the job changed since you looked, or the \
             decision does not apply)"
        ),
        other => other.into(),
    }
}

/// `fenceline decide`.
async fn decide_command(
    ledger: &Ledger,
    args: &fenceline::settings::DecideArgs,
) -> anyhow::Result<()> {
    use fenceline::ledger::{Decision, DecisionKind};
    let actor = acting_operator(ledger, &args.operator).await?;
    let kind = match args.decision.as_str() {
        "retry" => DecisionKind::AuthorizeRetry,
        "failed" => DecisionKind::ResolveFailed,
        _ => DecisionKind::ResolveSucceeded,
    };
    let result = match &args.result_file {
        Some(path) => {
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?
        }
        None => String::new(),
    };
    let evidence = args.evidence.as_deref().unwrap_or_default();
    let decision = Decision::by_operator(kind, evidence, &result).map_err(|_| {
        anyhow::anyhow!(
            "resolving as succeeded needs --evidence (the provider's reference) or --result-file"
        )
    })?;
    let to = ledger
        .decide(&args.job_id, args.epoch, &decision, &actor, &args.reason)
        .await
        .map_err(refused_plainly)?;
    println!("{}: {}", args.job_id, to.as_str());
    Ok(())
}
