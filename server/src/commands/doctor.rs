//! `fenceline doctor`: a line per check of this deployment's wiring; non-zero on a failure.

use fenceline::doctor::{examine, Verdict};
use fenceline::settings::Settings;

pub(super) async fn run(settings: &Settings) -> anyhow::Result<()> {
    let found = examine(settings).await;
    let width = found.iter().map(|f| f.check.len()).max().unwrap_or(0);
    for f in &found {
        println!("{:<4}  {:<width$}  {}", f.verdict, f.check, f.detail);
    }
    let count = |v: Verdict| found.iter().filter(|f| f.verdict == v).count();
    let (failed, warned) = (count(Verdict::Fail), count(Verdict::Warn));
    println!("{} checks: {failed} failed, {warned} warned", found.len());
    anyhow::ensure!(failed == 0, "{failed} of the checks failed");
    Ok(())
}
