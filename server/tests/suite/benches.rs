//! The benchmark commands as `scripts/bench.sh` runs them (the embedded queue, its default
//! options), at a size that takes seconds: each finishes and reports what it measured.

use std::time::Duration;

/// Runs `fenceline bench …` on a fresh SQLite ledger; its report (stdout).
async fn bench(args: &[&str]) -> String {
    let db = crate::helpers::fresh_db(crate::helpers::Db::Sqlite).await;
    let run = tokio::process::Command::new(env!("CARGO_BIN_EXE_fenceline"))
        .arg("bench")
        .args(args)
        .args(["--database-url", &db.url])
        .env("FENCELINE_LOG", "error")
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .unwrap_or_else(|_| panic!("`fenceline bench {}` did not finish", args.join(" ")))
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "`fenceline bench {}` failed: {report}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    report
}

/// The row of a report's table that starts with `name`: its cells.
fn row<'a>(report: &'a str, name: &str) -> Vec<&'a str> {
    let line = report
        .lines()
        .find(|l| l.starts_with(&format!("| {name}")))
        .unwrap_or_else(|| panic!("no row `{name}` in:\n{report}"));
    line.split('|').map(str::trim).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pipeline_benchmark_runs_every_job_to_the_end_in_each_mode() {
    let report = bench(&["pipeline", "--jobs", "60"]).await;
    for name in [
        "baseline: naive job table",
        "reference: the same rows a job writes",
        "fenceline, one transaction per write",
        "fenceline, group commit: the same",
        "fenceline, group commit, drained",
    ] {
        assert_eq!(row(&report, name)[2], "60", "{name}:\n{report}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_renewal_benchmark_fills_up_and_measures_renewals() {
    let report = bench(&[
        "renewals",
        "--in-flight",
        "30",
        "--heartbeat-secs",
        "1",
        "--measure-secs",
        "3",
    ])
    .await;
    let renewals: u64 = row(&report, "fenceline worker")[2]
        .parse()
        .unwrap_or_else(|_| panic!("{report}"));
    // 30 calls renewed every second for three seconds.
    assert!(renewals >= 30, "{report}");
}
