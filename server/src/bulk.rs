//! Actions by filter. A preview records the exact jobs a jobs-list filter matches now (within
//! the operator's tenants, at most a cap), each with its epoch and state; the operator sees the
//! count and a sample, and confirms with a reason (one audit entry for the whole action). The
//! runner then acts on the jobs in chunks in the background, each through the same fenced
//! transition as a single action, at the epoch and state it was previewed at: a job that moved
//! on since is counted and left alone. Each job's audit entry names the bulk action as its
//! subject. Progress lives in the ledger, so a restart picks up where it stopped.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::job::{Actor, JobState};
use crate::ledger::audit::BULK_SUBJECT;
use crate::ledger::{
    BulkAction, BulkJob, Decision, DecisionKind, JobFilter, Ledger, LedgerError, Refusal,
};
use crate::operators::{Operator, Role};

/// Most jobs one action may take, unless the deployment says otherwise.
pub const DEFAULT_CAP: usize = 10_000;

/// Jobs acted on between two looks at the action (and at the operator's rights).
const CHUNK: u32 = 100;

/// What a bulk action does to each job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BulkKind {
    AuthorizeRetry,
    ResolveFailed,
    Cancel,
    Rerun,
}

impl BulkKind {
    pub const ALL: [BulkKind; 4] = [
        BulkKind::AuthorizeRetry,
        BulkKind::ResolveFailed,
        BulkKind::Cancel,
        BulkKind::Rerun,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            BulkKind::AuthorizeRetry => "authorize_retry",
            BulkKind::ResolveFailed => "resolve_failed",
            BulkKind::Cancel => "cancel",
            BulkKind::Rerun => "rerun",
        }
    }

    /// As operators read it: "authorize a retry of".
    pub fn label(self) -> &'static str {
        match self {
            BulkKind::AuthorizeRetry => "authorize a fenced retry",
            BulkKind::ResolveFailed => "resolve as failed",
            BulkKind::Cancel => "cancel",
            BulkKind::Rerun => "run again as new jobs",
        }
    }

    /// The states of the jobs it applies to.
    pub fn states(self) -> &'static [JobState] {
        match self {
            BulkKind::AuthorizeRetry | BulkKind::ResolveFailed => &[JobState::Unknown],
            BulkKind::Cancel => &[
                JobState::Running,
                JobState::Unknown,
                JobState::RetryAuthorized,
            ],
            BulkKind::Rerun => &[
                JobState::Succeeded,
                JobState::FailedTerminal,
                JobState::Expired,
            ],
        }
    }
}

impl std::str::FromStr for BulkKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        BulkKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| {
                "the action must be authorize_retry, resolve_failed, cancel or rerun".to_owned()
            })
    }
}

/// Why a preview was refused.
#[derive(Debug, thiserror::Error)]
pub enum BulkError {
    #[error("a viewer reads; only an operator or an admin acts")]
    NotAllowed,
    #[error("the filter matches more than {cap} jobs: narrow it (a tenant, a time range, an error code)")]
    TooMany { cap: usize },
    #[error("no job the action applies to matches the filter")]
    Nothing,
    #[error("{state} jobs cannot be acted on so: {kind} applies to {states} jobs")]
    WrongState {
        state: &'static str,
        kind: &'static str,
        states: String,
    },
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

/// Records a preview of `kind` over every job `filter` matches (its state, if any, must be
/// one `kind` applies to; without one, every such state). `filter_text` is the filter as its
/// address has it. Returns the action's id.
pub async fn preview(
    ledger: &Ledger,
    operator: &Operator,
    kind: BulkKind,
    filter: &JobFilter,
    filter_text: &str,
    cap: usize,
) -> Result<i64, BulkError> {
    if !operator.role.allows(Role::Operator) {
        return Err(BulkError::NotAllowed);
    }
    let states: Vec<JobState> = match filter.state {
        Some(state) if kind.states().contains(&state) => vec![state],
        Some(state) => {
            return Err(BulkError::WrongState {
                state: state.as_str(),
                kind: kind.as_str(),
                states: kind
                    .states()
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
        }
        None => kind.states().to_vec(),
    };
    let mut jobs: Vec<BulkJob> = Vec::new();
    let mut seen_ids = std::collections::HashSet::new();
    for state in states {
        let state_filter = JobFilter {
            state: Some(state),
            tenants: narrowed(&filter.tenants, &operator.tenants),
            ..filter.clone()
        };
        let Some(found) = ledger.matching_jobs(&state_filter, cap).await? else {
            return Err(BulkError::TooMany { cap });
        };
        // A job that changed state between two pages is listed once, as first seen.
        jobs.extend(
            found
                .iter()
                .filter(|j| seen_ids.insert(j.job_id.clone()))
                .map(|j| BulkJob {
                    job_id: j.job_id.clone(),
                    epoch: j.owner_epoch,
                    state: j.state.as_str().to_owned(),
                    tenant: j.tenant.clone(),
                    seen: j.next_event_seq - 1,
                    outcome: None,
                }),
        );
        if jobs.len() > cap {
            return Err(BulkError::TooMany { cap });
        }
    }
    if jobs.is_empty() {
        return Err(BulkError::Nothing);
    }
    let tenants = operator.tenants.as_ref().map(|t| t.join(","));
    Ok(ledger
        .preview_bulk(
            kind.as_str(),
            filter_text,
            &Actor::Operator(operator.name.clone()).to_string(),
            tenants.as_deref(),
            &jobs,
        )
        .await?)
}

/// The tenants a filter may reach: those it asks for, within the operator's.
fn narrowed(asked: &Option<Vec<String>>, own: &Option<Vec<String>>) -> Option<Vec<String>> {
    match (asked, own) {
        (None, None) => None,
        (Some(a), None) => Some(a.clone()),
        (None, Some(o)) => Some(o.clone()),
        (Some(a), Some(o)) => Some(a.iter().filter(|t| o.contains(t)).cloned().collect()),
    }
}

/// Acts on the next chunk of every running bulk action; returns how many jobs it acted on.
pub async fn run_once(ledger: &Ledger) -> Result<usize, LedgerError> {
    let mut acted = 0;
    for bulk in ledger.running_bulk_actions().await? {
        // Another process acts on it now: its chunk is that one's.
        if !ledger.hold_bulk(bulk.bulk_id, holder(), HOLD).await? {
            continue;
        }
        let chunk = act_on_chunk(ledger, &bulk).await;
        ledger.release_bulk(bulk.bulk_id, holder()).await?;
        acted += chunk?;
    }
    Ok(acted)
}

/// This process, as it holds a bulk action.
fn holder() -> &'static str {
    static HOLDER: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HOLDER.get_or_init(|| format!("{}:{}", std::process::id(), uuid::Uuid::now_v7().simple()))
}

/// How long a process holds a bulk action while it acts on a chunk: far longer than a chunk
/// takes, so that a process that died lets another go on.
const HOLD: Duration = Duration::from_secs(120);

/// The next chunk of one bulk action, acted on; how many jobs.
async fn act_on_chunk(ledger: &Ledger, bulk: &BulkAction) -> Result<usize, LedgerError> {
    let pending = ledger.bulk_pending(bulk.bulk_id, CHUNK).await?;
    let may_act = acting_operator(ledger, bulk).await?;
    for job in &pending {
        // Still this process's (a job takes far less than the hold): another never acts
        // on the same job meanwhile.
        if !ledger.hold_bulk(bulk.bulk_id, holder(), HOLD).await? {
            break;
        }
        let outcome = match &may_act {
            Some((_, operator)) if !operator.covers(&job.tenant) => {
                "refused: no longer within the operator's tenants".to_owned()
            }
            Some((actor, _)) => match act(ledger, bulk, job, actor).await {
                Acted::Outcome(outcome) => outcome,
                // The ledger did not answer: the job is tried again with the next chunk.
                Acted::Unavailable(error) => return Err(error),
            },
            None => "refused: the operator may no longer act".to_owned(),
        };
        ledger
            .bulk_job_done(bulk.bulk_id, &job.job_id, &outcome)
            .await?;
    }
    ledger.finish_bulk(bulk.bulk_id).await?;
    Ok(pending.len())
}

/// The actor a bulk action acts as, and its operator as they are now, while they are enabled
/// and may still act.
async fn acting_operator(
    ledger: &Ledger,
    bulk: &BulkAction,
) -> Result<Option<(Actor, Operator)>, LedgerError> {
    let Some(name) = bulk.actor.strip_prefix("operator:") else {
        return Ok(None);
    };
    Ok(ledger
        .operator(name)
        .await?
        .filter(|o| o.disabled_at.is_none() && o.role.allows(Role::Operator))
        .map(|o| (Actor::Operator(o.name.clone()), o)))
}

/// What came of one job's action.
enum Acted {
    Outcome(String),
    /// The ledger did not answer (or its answer was lost): not recorded, tried again.
    Unavailable(LedgerError),
}

/// One job's action, fenced at the epoch and state it was previewed at (a re-run at the
/// timeline it had: tried twice, it makes one job); its outcome.
async fn act(ledger: &Ledger, bulk: &BulkAction, job: &BulkJob, actor: &Actor) -> Acted {
    let reason = bulk.reason.as_deref().unwrap_or_default();
    let done = BULK_SUBJECT
        .scope(bulk.subject(), async {
            match bulk.action.parse::<BulkKind>() {
                Ok(BulkKind::AuthorizeRetry) => ledger
                    .decide(
                        &job.job_id,
                        job.epoch,
                        &decision(DecisionKind::AuthorizeRetry),
                        actor,
                        reason,
                    )
                    .await
                    .map(|_| ()),
                Ok(BulkKind::ResolveFailed) => ledger
                    .decide(
                        &job.job_id,
                        job.epoch,
                        &decision(DecisionKind::ResolveFailed),
                        actor,
                        reason,
                    )
                    .await
                    .map(|_| ()),
                Ok(BulkKind::Cancel) => match job.state.parse::<JobState>() {
                    Ok(state) => {
                        ledger
                            .cancel(&job.job_id, job.epoch, state, actor, reason)
                            .await
                    }
                    Err(_) => Err(LedgerError::Invalid(
                        "a state the ledger does not know".into(),
                    )),
                },
                Ok(BulkKind::Rerun) => ledger
                    .run_again(&job.job_id, Some(job.seen), actor, reason)
                    .await
                    .map(|_| ()),
                Err(e) => Err(LedgerError::Invalid(e)),
            }
        })
        .await;
    Acted::Outcome(match done {
        Ok(()) => "applied".to_owned(),
        Err(LedgerError::Refused {
            refusal:
                Refusal::StaleEpoch { .. } | Refusal::WrongState(_) | Refusal::AlreadyTerminal(_),
            ..
        }) => "moved_on".to_owned(),
        Err(e) if e.is_unavailable() => return Acted::Unavailable(e),
        Err(e) => format!("refused: {e}"),
    })
}

fn decision(kind: DecisionKind) -> Decision {
    Decision::by_operator(kind, "", "").expect("needs no evidence")
}

/// Runs the bulk actions' chunks until `stop`: at once while there is work, every second
/// otherwise. Several processes may run it: a job's outcome is counted once.
pub async fn run(ledger: Ledger, stop: CancellationToken) {
    loop {
        let idle = match run_once(&ledger).await {
            Ok(0) => true,
            Ok(_) => false,
            Err(error) => {
                tracing::warn!(%error, "a bulk action's chunk failed");
                true
            }
        };
        if stop.is_cancelled() {
            return;
        }
        if idle {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
    }
}
