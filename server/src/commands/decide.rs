//! `fenceline decide`: a decision on an `unknown` job, from a terminal, as a named operator.

use anyhow::Context;

use fenceline::settings::Settings;

/// `fenceline decide`.
pub(super) async fn run(
    settings: &Settings,
    args: &fenceline::settings::DecideArgs,
) -> anyhow::Result<()> {
    let ledger = &super::open_ledger(settings).await?;
    use fenceline::ledger::{Decision, DecisionKind};
    let actor = super::acting_operator(ledger, &args.operator).await?;
    let kind = match args.decision.as_str() {
        "retry" => DecisionKind::AuthorizeRetry,
        "failed" => DecisionKind::ResolveFailed,
        _ => DecisionKind::ResolveSucceeded,
    };
    // The result file goes with resolving as succeeded only; another decision never reads it.
    let result = match (&args.result_file, kind) {
        (Some(path), DecisionKind::ResolveSucceeded) => {
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?
        }
        _ => String::new(),
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
        .map_err(super::refused_plainly)?;
    println!("{}: {}", args.job_id, to.as_str());
    Ok(())
}
