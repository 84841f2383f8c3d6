//! `fenceline drill list` and `fenceline drill run`.

use anyhow::Context;

use fenceline::settings::Settings;
use fenceline::startup::runtime;

/// `fenceline drill list`: the catalogue, with each drill's setup, faults and what it proves.
pub(super) fn list() -> anyhow::Result<()> {
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

/// `fenceline drill run`: runs scenarios to their verdict, showing each as it finishes.
pub(super) async fn run(
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
    let ledger = super::open_ledger(settings).await?;
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
