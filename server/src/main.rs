//! The `fenceline` binary: parses the command line and runs one command.

mod commands;

use fenceline::settings::{BenchCommand, Command, Settings};

/// mimalloc instead of the system's allocator: the worker, group commit and SQLite's writer
/// allocate and free a row's values, JSON parameters and results from several threads at
/// once, where glibc's allocator spent about two fifths of this process's CPU in the pipeline
/// benchmark (see docs/journal/2026-12-02-allocator-and-receive-poll.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Logs to standard error as `FENCELINE_LOG` asks (never the session library's spans below
/// warnings); with `count_statements`, also counts every SQL statement the process runs; with
/// `traces`, sends the trace spans over OTLP.
fn init_tracing(count_statements: bool, traces: Option<&fenceline::telemetry::Traces>) {
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
        )
        // The trace spans go to the OTLP exporter only: logs stay as they were.
        .add_directive(
            format!("{}=off", fenceline::telemetry::TARGET)
                .parse()
                .expect("a static directive"),
        );
    // Colours only for a terminal: a log file or a collector gets plain text.
    let log = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_filter(filter);
    let counter = count_statements.then(fenceline::bench::statement_counter);
    let traces = traces.map(fenceline::telemetry::layer);
    tracing_subscriber::registry()
        .with(log)
        .with(counter)
        .with(traces)
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
    let traces = match fenceline::telemetry::start() {
        Ok(traces) => traces,
        Err(error) => {
            eprintln!("error: {error:#}");
            std::process::exit(2);
        }
    };
    init_tracing(
        matches!(command, Command::Bench(BenchCommand::Renewals(_))),
        traces.as_ref(),
    );
    let ran = commands::run(&settings, command).await;
    if let Some(traces) = traces {
        // The exporter's last requests run on this runtime: wait on another thread.
        let _ = tokio::task::spawn_blocking(move || traces.shutdown()).await;
    }
    ran
}
