//! The seven job states and the one transition table every layer repeats.

use std::fmt;

/// Where a job stands. Each variant says who may move a job out of it, and to where.
///
/// The string forms (`as_str`) are persisted and must never change.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// Accepted; the first attempt is permitted.
    /// Out: a worker claim → `Running` (epoch + 1); the deadline → `Expired`.
    Ready,
    /// An owner holds a lease (`owner_epoch`, `owner_until`).
    /// Out: the owner accepts → `Succeeded`; a confirmed retryable failure within budget →
    /// `RetryAuthorized`; a refusal the provider confirms it never ran (throttled) →
    /// `RetryAuthorized` at the provider's reset, the budget unchanged; fatal or budget spent →
    /// `FailedTerminal`. After the lease expired a
    /// recovery claim (epoch + 1) → `Unknown` if an attempt may have been sent, else
    /// `RetryAuthorized`. The deadline → `Expired`.
    Running,
    /// A provider call may have happened with no confirmed outcome.
    /// Out: provider retrieval, an operator decision or a pre-approved replay policy →
    /// `Succeeded`, `FailedTerminal` or `RetryAuthorized`; the deadline → `Expired`.
    /// Never straight to a new attempt.
    Unknown,
    /// Another attempt is permitted, by policy, reconciliation or an operator.
    /// Out: a worker claim → `Running` (epoch + 1) if budget and deadline allow, else
    /// `FailedTerminal` (budget) or `Expired` (deadline).
    RetryAuthorized,
    /// Terminal: a result was accepted by a fenced compare-and-set. Nobody moves it.
    Succeeded,
    /// Terminal: a fatal failure, an operator's decision, or the attempt budget spent.
    FailedTerminal,
    /// Terminal: the fixed deadline passed before an accepted result.
    Expired,
}

impl JobState {
    /// Every state, in a stable order.
    pub const ALL: [JobState; 7] = [
        JobState::Ready,
        JobState::Running,
        JobState::Unknown,
        JobState::RetryAuthorized,
        JobState::Succeeded,
        JobState::FailedTerminal,
        JobState::Expired,
    ];

    /// The persisted name of the state.
    pub const fn as_str(self) -> &'static str {
        match self {
            JobState::Ready => "ready",
            JobState::Running => "running",
            JobState::Unknown => "unknown",
            JobState::RetryAuthorized => "retry_authorized",
            JobState::Succeeded => "succeeded",
            JobState::FailedTerminal => "failed_terminal",
            JobState::Expired => "expired",
        }
    }

    /// Terminal states are final: later deliveries acknowledge without inference.
    pub const fn is_terminal(self) -> bool {
        matches!(
            self,
            JobState::Succeeded | JobState::FailedTerminal | JobState::Expired
        )
    }

    /// Whether an operator may cancel a job in this state: the table lets it fail for good
    /// from here (it has started, or waits for a decision, and is not terminal).
    pub fn cancellable(self) -> bool {
        self.can_move_to(JobState::FailedTerminal).is_ok()
    }

    /// Whether the table has an edge `self → to`; the error says why not.
    pub fn can_move_to(self, to: JobState) -> Result<(), TransitionError> {
        use JobState::*;
        if self.is_terminal() {
            return Err(TransitionError::AlreadyTerminal { from: self });
        }
        if self == to {
            return Err(TransitionError::NoChange { state: self });
        }
        let allowed = match self {
            Ready => matches!(to, Running | Expired),
            Running => matches!(
                to,
                Succeeded | RetryAuthorized | FailedTerminal | Unknown | Expired
            ),
            Unknown => matches!(to, Succeeded | FailedTerminal | RetryAuthorized | Expired),
            RetryAuthorized => matches!(to, Running | FailedTerminal | Expired),
            Succeeded | FailedTerminal | Expired => false,
        };
        if allowed {
            Ok(())
        } else {
            Err(TransitionError::NoEdge {
                from: self,
                to,
                why: no_edge_reason(self, to),
            })
        }
    }
}

fn no_edge_reason(from: JobState, to: JobState) -> &'static str {
    use JobState::*;
    match (from, to) {
        (Unknown, Running) => "an uncertain attempt needs a recorded decision before a new attempt",
        (Ready, Unknown) | (RetryAuthorized, Unknown) => {
            "only a recovery claim over a running job can find an uncertain attempt"
        }
        (Ready, Succeeded) | (RetryAuthorized, Succeeded) => {
            "a result is accepted only from the running owner"
        }
        (Ready, RetryAuthorized) => "a ready job may already start its first attempt",
        (Ready, FailedTerminal) => "a job fails only after an attempt or a decision",
        (RetryAuthorized, _) | (_, Ready) => "no state returns to ready",
        _ => "not in the transition table",
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The persisted string was not a state name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown job state {0:?}")]
pub struct ParseStateError(pub String);

impl std::str::FromStr for JobState {
    type Err = ParseStateError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        JobState::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| ParseStateError(s.to_owned()))
    }
}

impl TryFrom<String> for JobState {
    type Error = ParseStateError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

/// What asks a job to move. The ledger names one of these for every guarded write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cause {
    /// A worker claims a workable job: `ready`/`retry_authorized` → `running`.
    Claim,
    /// The owner's guarded commit of a result: `running` → `succeeded`.
    AcceptResult,
    /// A confirmed retryable failure within budget: `running` → `retry_authorized`.
    RetryableFailure,
    /// The provider refused the attempt before running it (a rate limit, overload): `running`
    /// → `retry_authorized` at the provider's reset, spending none of the budget.
    Throttled,
    /// A confirmed fatal failure: `running` → `failed_terminal`.
    FatalFailure,
    /// The cumulative attempt budget is spent: `running`/`retry_authorized` → `failed_terminal`.
    BudgetExhausted,
    /// Recovery after lease expiry when an attempt may have been sent: `running` → `unknown`.
    RecoverUncertain,
    /// Recovery after lease expiry with no attempt in flight: `running` → `retry_authorized`.
    RecoverNoAttempt,
    /// Evidence (operator or provider retrieval) shows the call succeeded: `unknown` → `succeeded`.
    ResolveSucceeded,
    /// An operator decides the job failed: `unknown` → `failed_terminal`.
    ResolveFailed,
    /// An operator, retrieval or a pre-approved replay policy permits another attempt:
    /// `unknown` → `retry_authorized`.
    AuthorizeRetry,
    /// The fixed deadline passed: any live state → `expired`.
    DeadlinePassed,
}

impl Cause {
    /// Every cause, in a stable order.
    pub const ALL: [Cause; 12] = [
        Cause::Claim,
        Cause::AcceptResult,
        Cause::RetryableFailure,
        Cause::Throttled,
        Cause::FatalFailure,
        Cause::BudgetExhausted,
        Cause::RecoverUncertain,
        Cause::RecoverNoAttempt,
        Cause::ResolveSucceeded,
        Cause::ResolveFailed,
        Cause::AuthorizeRetry,
        Cause::DeadlinePassed,
    ];

    /// The state this cause leads to from `from`, or why it may not.
    pub fn apply(self, from: JobState) -> Result<JobState, TransitionError> {
        use JobState::*;
        if from.is_terminal() {
            return Err(TransitionError::AlreadyTerminal { from });
        }
        let to = match (self, from) {
            (Cause::Claim, Ready | RetryAuthorized) => Running,
            (Cause::AcceptResult, Running) => Succeeded,
            (Cause::RetryableFailure | Cause::Throttled, Running) => RetryAuthorized,
            (Cause::FatalFailure, Running) => FailedTerminal,
            (Cause::BudgetExhausted, Running | RetryAuthorized) => FailedTerminal,
            (Cause::RecoverUncertain, Running) => Unknown,
            (Cause::RecoverNoAttempt, Running) => RetryAuthorized,
            (Cause::ResolveSucceeded | Cause::ResolveFailed | Cause::AuthorizeRetry, Unknown) => {
                match self {
                    Cause::ResolveSucceeded => Succeeded,
                    Cause::ResolveFailed => FailedTerminal,
                    _ => RetryAuthorized,
                }
            }
            (Cause::DeadlinePassed, _) => Expired,
            _ => return Err(TransitionError::NotPermitted { cause: self, from }),
        };
        debug_assert!(from.can_move_to(to).is_ok());
        Ok(to)
    }

    /// Whether this cause hands the job to a new owner, which advances `owner_epoch`.
    pub const fn advances_epoch(self) -> bool {
        matches!(
            self,
            Cause::Claim
                | Cause::RecoverUncertain
                | Cause::RecoverNoAttempt
                | Cause::AuthorizeRetry
        )
    }
}

/// Why a transition was refused by the table.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransitionError {
    /// Terminal states are final.
    #[error("the job is already {from}; terminal states are final")]
    AlreadyTerminal { from: JobState },
    /// A transition must change the state.
    #[error("the job is already {state}")]
    NoChange { state: JobState },
    /// The table has no such edge.
    #[error("{from} → {to} is not allowed: {why}")]
    NoEdge {
        from: JobState,
        to: JobState,
        why: &'static str,
    },
    /// The cause does not apply to the current state.
    #[error("{cause:?} is not permitted from {from}")]
    NotPermitted { cause: Cause, from: JobState },
}

#[cfg(test)]
mod tests {
    use super::JobState::*;
    use super::*;

    /// The table of domain.md, written out independently of the implementation.
    const EDGES: &[(JobState, JobState)] = &[
        (Ready, Running),
        (Ready, Expired),
        (Running, Succeeded),
        (Running, RetryAuthorized),
        (Running, FailedTerminal),
        (Running, Unknown),
        (Running, Expired),
        (Unknown, Succeeded),
        (Unknown, FailedTerminal),
        (Unknown, RetryAuthorized),
        (Unknown, Expired),
        (RetryAuthorized, Running),
        (RetryAuthorized, FailedTerminal),
        (RetryAuthorized, Expired),
    ];

    #[test]
    fn every_pair_of_states_is_allowed_exactly_when_the_table_lists_it() {
        for from in JobState::ALL {
            for to in JobState::ALL {
                let listed = EDGES.contains(&(from, to));
                let verdict = from.can_move_to(to);
                assert_eq!(verdict.is_ok(), listed, "{from} → {to}: {verdict:?}");
                if let Err(refusal) = verdict {
                    assert!(!refusal.to_string().is_empty());
                    if from.is_terminal() {
                        assert_eq!(refusal, TransitionError::AlreadyTerminal { from });
                    }
                }
            }
        }
    }

    #[test]
    fn every_cause_from_every_state_lands_on_a_listed_edge_or_is_refused() {
        let expected = |cause: Cause, from: JobState| -> Option<JobState> {
            match (cause, from) {
                (Cause::Claim, Ready) | (Cause::Claim, RetryAuthorized) => Some(Running),
                (Cause::AcceptResult, Running) => Some(Succeeded),
                (Cause::RetryableFailure, Running) => Some(RetryAuthorized),
                (Cause::Throttled, Running) => Some(RetryAuthorized),
                (Cause::FatalFailure, Running) => Some(FailedTerminal),
                (Cause::BudgetExhausted, Running) => Some(FailedTerminal),
                (Cause::BudgetExhausted, RetryAuthorized) => Some(FailedTerminal),
                (Cause::RecoverUncertain, Running) => Some(Unknown),
                (Cause::RecoverNoAttempt, Running) => Some(RetryAuthorized),
                (Cause::ResolveSucceeded, Unknown) => Some(Succeeded),
                (Cause::ResolveFailed, Unknown) => Some(FailedTerminal),
                (Cause::AuthorizeRetry, Unknown) => Some(RetryAuthorized),
                (Cause::DeadlinePassed, Ready | Running | Unknown | RetryAuthorized) => {
                    Some(Expired)
                }
                _ => None,
            }
        };
        for cause in Cause::ALL {
            for from in JobState::ALL {
                let got = cause.apply(from).ok();
                assert_eq!(got, expected(cause, from), "{cause:?} from {from}");
                if let Some(to) = got {
                    assert!(EDGES.contains(&(from, to)), "{cause:?}: {from} → {to}");
                }
            }
        }
    }

    #[test]
    fn an_unknown_job_can_never_go_straight_to_a_new_attempt() {
        assert!(Cause::Claim.apply(Unknown).is_err());
        let refusal = Unknown.can_move_to(Running).unwrap_err();
        assert!(refusal.to_string().contains("decision"), "{refusal}");
    }

    #[test]
    fn state_names_round_trip_and_are_stable() {
        let names: Vec<_> = JobState::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(
            names,
            [
                "ready",
                "running",
                "unknown",
                "retry_authorized",
                "succeeded",
                "failed_terminal",
                "expired"
            ]
        );
        for state in JobState::ALL {
            assert_eq!(state.as_str().parse::<JobState>(), Ok(state));
        }
        assert!("Running".parse::<JobState>().is_err());
    }

    #[test]
    fn only_new_owners_advance_the_epoch() {
        let advancing: Vec<_> = Cause::ALL
            .into_iter()
            .filter(|c| c.advances_epoch())
            .collect();
        assert_eq!(
            advancing,
            [
                Cause::Claim,
                Cause::RecoverUncertain,
                Cause::RecoverNoAttempt,
                Cause::AuthorizeRetry
            ]
        );
    }
}
