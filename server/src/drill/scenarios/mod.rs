//! The scenarios of the catalogue. Each creates its own jobs (tagged with the run), arms its
//! faults on them before they exist, lets the real workers, dispatcher and reaper run, and
//! evaluates its checks from the ledger — the job record, its attempts and its events — never
//! from its own bookkeeping. A check whose evidence cannot be read, or a scenario that never
//! reaches the point it checks, fails.

mod attempt_budget_exhausted;
mod commit_survives_failed_delete;
mod common;
mod crash_before_dispatch;
mod deadline_exhausted;
mod delivery_after_delete;
mod dlq_replay_inspected;
mod lease_renewal_failure;
mod live_owner_suppresses_duplicate;
mod paused_worker_stale_epoch;
mod provider_rate_limits_a_burst;
mod renewal_timeout_lease_valid;
mod stale_receipt_handle_delete;
mod uncertain_attempt_requires_decision;
mod worker_crash_mid_call;

use std::sync::Mutex;

use super::rig::Rig;
use super::DrillKind;
use common::Ctx;
pub(crate) use common::Outcome;

pub(crate) async fn run(kind: DrillKind, rig: &Rig) -> Outcome {
    let ctx = Ctx {
        kind,
        rig,
        checks: Mutex::default(),
        jobs: Mutex::default(),
        notes: Mutex::default(),
    };
    let _ = match kind {
        DrillKind::LiveOwnerSuppressesDuplicate => live_owner_suppresses_duplicate::run(&ctx).await,
        DrillKind::PausedWorkerStaleEpoch => paused_worker_stale_epoch::paused_worker(&ctx)
            .await
            .map(|_| ()),
        DrillKind::UncertainAttemptRequiresDecision => {
            uncertain_attempt_requires_decision::run(&ctx).await
        }
        DrillKind::CommitSurvivesFailedDelete => commit_survives_failed_delete::run(&ctx).await,
        DrillKind::StaleReceiptHandleDelete => stale_receipt_handle_delete::run(&ctx).await,
        DrillKind::RenewalTimeoutLeaseValid => renewal_timeout_lease_valid::run(&ctx).await,
        DrillKind::LeaseRenewalFailure => lease_renewal_failure::run(&ctx).await,
        DrillKind::DeadlineExhausted => deadline_exhausted::run(&ctx).await,
        DrillKind::DeliveryAfterDelete => delivery_after_delete::run(&ctx).await,
        DrillKind::CrashBeforeDispatch => crash_before_dispatch::run(&ctx).await,
        DrillKind::DlqReplayInspected => dlq_replay_inspected::run(&ctx).await,
        DrillKind::AttemptBudgetExhausted => attempt_budget_exhausted::run(&ctx).await,
        DrillKind::WorkerCrashMidCall => worker_crash_mid_call::run(&ctx).await,
        DrillKind::ProviderRateLimitsABurst => provider_rate_limits_a_burst::run(&ctx).await,
    };
    ctx.finish().await
}
