//! Safeguards a test can switch off for one drill run, to show that the drill proving each
//! one fails without it. The switches exist only when the crate is built with the `sabotage`
//! feature, which only the test suite enables: the release binary cannot turn any off.

/// One safeguard of the worker, dispatcher or replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Safeguard {
    /// A copy of a message whose job has a live owner is suppressed, not worked.
    SuppressLiveOwnerCopies,
    /// A result is accepted only under the epoch its owner claimed.
    FenceCommits,
    /// An `unknown` job waits for a recorded decision.
    WaitForDecision,
    /// A delivery of a terminal job is acknowledged without inference.
    AckTerminalWithoutInference,
    /// Work stops when the lease can no longer be confirmed.
    StopOnUnconfirmedLease,
    /// Visibility renewals never ask past the job's deadline.
    CapRenewalsAtDeadline,
    /// An outbox row whose send was lost is sent again once its lock lapses.
    ResendLostDispatch,
    /// A dead letter is replayed only after its job is inspected in the ledger.
    InspectBeforeReplay,
    /// Retryable failures back off before the next attempt.
    BackOffRetries,
    /// A refusal the provider confirms it never ran spends none of the attempt budget.
    RefusalsSpendNoBudget,
}

impl Safeguard {
    pub const ALL: [Safeguard; 10] = [
        Safeguard::SuppressLiveOwnerCopies,
        Safeguard::FenceCommits,
        Safeguard::WaitForDecision,
        Safeguard::AckTerminalWithoutInference,
        Safeguard::StopOnUnconfirmedLease,
        Safeguard::CapRenewalsAtDeadline,
        Safeguard::ResendLostDispatch,
        Safeguard::InspectBeforeReplay,
        Safeguard::BackOffRetries,
        Safeguard::RefusalsSpendNoBudget,
    ];
}
