//! Event kinds of the timeline and who acted. Stable strings: extend, never rename.

use std::fmt;

macro_rules! event_kinds {
    ($($variant:ident => $name:literal),+ $(,)?) => {
        /// One kind of timeline event. The string form is persisted and shown to operators.
        /// One of the stable event kinds of a job's timeline.
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, Hash,
            serde::Serialize, serde::Deserialize, utoipa::ToSchema,
        )]
        #[serde(rename_all = "snake_case")]
        pub enum EventKind { $($variant),+ }

        impl EventKind {
            /// Every kind, in declaration order.
            pub const ALL: &'static [EventKind] = &[$(EventKind::$variant),+];

            /// The persisted name of the kind.
            pub const fn as_str(self) -> &'static str {
                match self { $(EventKind::$variant => $name),+ }
            }
        }
    };
}

event_kinds! {
    JobCreated => "job_created",
    IdempotencyHit => "idempotency_hit",
    IdempotencyConflict => "idempotency_conflict",
    Dispatched => "dispatched",
    DispatchFailed => "dispatch_failed",
    DeliveryReceived => "delivery_received",
    DuplicateSuppressed => "duplicate_suppressed",
    DeliveryDeferred => "delivery_deferred",
    Claimed => "claimed",
    RecoveryClaimed => "recovery_claimed",
    AttemptStarted => "attempt_started",
    AttemptFinished => "attempt_finished",
    VisibilityRenewed => "visibility_renewed",
    VisibilityRenewalFailed => "visibility_renewal_failed",
    LeaseRenewed => "lease_renewed",
    LeaseRenewalFailed => "lease_renewal_failed",
    LeaseLost => "lease_lost",
    ResultAccepted => "result_accepted",
    ResultRejected => "result_rejected",
    StateChanged => "state_changed",
    DecisionRecorded => "decision_recorded",
    MessageDeleted => "message_deleted",
    DeleteFailed => "delete_failed",
    DeliveryAckedTerminal => "delivery_acked_terminal",
    MovedToDlq => "moved_to_dlq",
    Replayed => "replayed",
    DeadlineExpired => "deadline_expired",
    BudgetExhausted => "budget_exhausted",
    RetrievalUnsupported => "retrieval_unsupported",
    // A terminal job run again as a new job: `{"to": …}` on the old, `{"from": …}` on the new.
    Rerun => "rerun",
    // The provider refused an attempt before running it: the job waits for the provider's
    // reset (`retry_authorized`), its attempt budget untouched.
    Throttled => "throttled",
    // The provider took the attempt to run in the background and gave it an id, kept before
    // any waiting: a later owner polls the same request by it instead of running it again.
    AttemptSubmitted => "attempt_submitted",
    // An attempt running in the background was cancelled at the provider (its owner was fenced
    // out, the job was cancelled or its deadline passed, or the call was stopped).
    UpstreamCancelled => "upstream_cancelled",
    // A refusal that proved the model did not run moved the job on to the next provider/model
    // pair of its route: its next attempt goes there, within the same deadline and budget.
    ProviderFallback => "provider_fallback",
    // An operator pinned the job to an incident: it and its records are kept from retention
    // while the incident is open, and for a while after it closed.
    IncidentPinned => "incident_pinned",
}

/// The text is not a known event kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown event kind {0:?}")]
pub struct ParseEventKindError(pub String);

impl std::str::FromStr for EventKind {
    type Err = ParseEventKindError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        EventKind::ALL
            .iter()
            .copied()
            .find(|kind| kind.as_str() == s)
            .ok_or_else(|| ParseEventKindError(s.to_owned()))
    }
}

impl TryFrom<String> for EventKind {
    type Error = ParseEventKindError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

/// Compares with a persisted name: `kind == "claimed"`.
impl PartialEq<&str> for EventKind {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who caused an event: a worker, an operator, the system (reaper, dispatcher), a drill, or an
/// API client acting for a tenant. Rendered as `worker:<id>`, `operator:<name>`, `system`,
/// `drill`, `api:<tenant>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Actor {
    Worker(String),
    Operator(String),
    Api(String),
    System,
    Drill,
    /// A pre-approved replay policy acting on its own.
    Policy,
}

impl fmt::Display for Actor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Actor::Worker(id) => write!(f, "worker:{id}"),
            Actor::Operator(name) => write!(f, "operator:{name}"),
            Actor::Api(tenant) => write!(f, "api:{tenant}"),
            Actor::System => f.write_str("system"),
            Actor::Drill => f.write_str("drill"),
            Actor::Policy => f.write_str("policy"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_reads_and_writes_as_its_stable_name() {
        for kind in EventKind::ALL {
            let written = serde_json::to_value(kind).unwrap();
            assert_eq!(written, serde_json::json!(kind.as_str()));
            assert_eq!(serde_json::from_value::<EventKind>(written).unwrap(), *kind);
        }
    }

    #[test]
    fn event_kind_names_are_the_stable_ones_from_the_domain() {
        let names: Vec<_> = EventKind::ALL.iter().map(|k| k.as_str()).collect();
        // domain.md's 28, then Fenceline's own extensions (appended, never renamed).
        assert_eq!(names.len(), 35);
        assert_eq!(names[28], "retrieval_unsupported");
        assert_eq!(names[29], "rerun");
        assert_eq!(names[30], "throttled");
        assert_eq!(names[31], "attempt_submitted");
        assert_eq!(names[32], "upstream_cancelled");
        assert_eq!(names[33], "provider_fallback");
        assert_eq!(names[34], "incident_pinned");
        for name in [
            "job_created",
            "duplicate_suppressed",
            "recovery_claimed",
            "result_rejected",
            "delivery_acked_terminal",
            "budget_exhausted",
        ] {
            assert!(names.contains(&name), "{name} missing");
        }
        let mut unique = names.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), names.len(), "duplicate kind names");
        assert!(names
            .iter()
            .all(|n| n.chars().all(|c| c.is_ascii_lowercase() || c == '_')));
    }

    #[test]
    fn actors_render_with_their_role() {
        assert_eq!(Actor::Worker("w1".into()).to_string(), "worker:w1");
        assert_eq!(Actor::Operator("ana".into()).to_string(), "operator:ana");
        assert_eq!(Actor::System.to_string(), "system");
    }
}
