//! `fenceline dlq-replay`: dead letters replayed after their jobs are inspected.

use fenceline::settings::Settings;
use fenceline::startup::runtime;

pub(super) async fn replay(settings: &Settings, max: usize, operator: &str) -> anyhow::Result<()> {
    let ledger = super::open_ledger(settings).await?;
    let queue = runtime::queue(&ledger, settings).await?;
    let actor = fenceline::job::Actor::Operator(operator.to_owned());
    let replay = fenceline::worker::dlq::replay_inspected(&ledger, &queue, &actor, max).await?;
    println!(
        "re-dispatched {}, dropped (terminal) {}, kept awaiting a decision {}, kept (not job messages) {}",
        replay.redispatched, replay.dropped_terminal, replay.awaiting_decision, replay.not_job_messages
    );
    Ok(())
}
