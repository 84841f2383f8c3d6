//! The reaper: recovers jobs whose lease expired (epoch + 1, then the state table), expires
//! jobs past their fixed deadline, reconciles `unknown` jobs through the provider's retrieval
//! mechanism, applies pre-approved replay policies, and re-dispatches workable jobs whose
//! message went missing. Every action is a guarded ledger write, so several reapers may run.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::job::{Actor, JobState};
use crate::ledger::{Decision, Ledger, LedgerError, ReplayPolicy};
use crate::provider::{Provider, Retrieval};

/// What one round did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Round {
    pub recovered: usize,
    pub expired: usize,
    pub reconciled: usize,
    pub redispatched: usize,
}

pub async fn reap_once<P: Provider>(
    ledger: &Ledger,
    provider: &P,
    quiet: Duration,
) -> Result<Round, LedgerError> {
    let mut round = Round::default();
    for job_id in ledger.past_deadline(100).await? {
        if ledger.expire_if_due(&job_id, &Actor::System).await? {
            round.expired += 1;
        }
    }
    for job_id in ledger.expired_leases(100).await? {
        match ledger
            .recovery_claim(&job_id, &Actor::System, "lease_expired", true)
            .await
        {
            Ok(_) => round.recovered += 1,
            Err(LedgerError::Refused { .. }) => {}
            Err(error) => return Err(error),
        }
    }
    for (job, last_request) in ledger.unknown_jobs(100).await? {
        let decision = match last_request {
            Some(id) => match provider.retrieve(&id).await {
                Retrieval::Found(answer) => Some((
                    Decision::ResolveSucceeded {
                        result: answer,
                        evidence: format!("retrieved from the provider by request {id}"),
                    },
                    "provider retrieval found the answer",
                )),
                Retrieval::NeverExecuted => Some((
                    Decision::AuthorizeRetry,
                    "provider retrieval shows the request never executed",
                )),
                Retrieval::Inconclusive => None,
            },
            None => None,
        };
        let decision = decision.or_else(|| {
            (job.replay_policy == ReplayPolicy::ReplayOnUnknown)
                .then_some((Decision::ReplayPolicy, "pre-approved replay policy"))
        });
        let Some((decision, reason)) = decision else {
            continue;
        };
        let actor = match decision {
            Decision::ReplayPolicy => Actor::Policy,
            _ => Actor::System,
        };
        match ledger
            .decide(&job.job_id, job.owner_epoch, &decision, &actor, reason)
            .await
        {
            Ok(_) => round.reconciled += 1,
            Err(LedgerError::Refused { .. }) => {}
            Err(error) => return Err(error),
        }
    }
    for job_id in ledger.quiet_workable(100, quiet).await? {
        if let Some(job) = ledger.job(&job_id).await? {
            if matches!(job.state, JobState::Ready | JobState::RetryAuthorized) {
                ledger.redispatch(&job_id, "reaper").await?;
                round.redispatched += 1;
            }
        }
    }
    Ok(round)
}

/// Reaps every `interval` until `shutdown`. Workable jobs quiet for `quiet` are re-sent.
pub async fn run<P: Provider>(
    ledger: Ledger,
    provider: P,
    interval: Duration,
    quiet: Duration,
    shutdown: CancellationToken,
) {
    loop {
        if let Err(error) = reap_once(&ledger, &provider, quiet).await {
            tracing::warn!(%error, "reaper round failed");
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(interval) => {}
        }
    }
}
