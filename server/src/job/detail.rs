//! What each event kind carries as its detail: one type per kind, written and read through
//! these types only, so the compiler checks the writers and the readers of a field alike.
//!
//! The stored form is the JSON object of the type's fields (the kind is the event's own
//! column): an absent optional field is left out, a field that some writers always name and
//! leave empty is stored as `null` (`Option<Option<_>>`: absent, `null`, or a value), and a
//! field an older row lacks reads as its default. Kinds not named here carry no detail.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::EventKind;

/// A detail type and the one event kind it belongs to.
pub trait KindDetail: Serialize + for<'de> Deserialize<'de> {
    const KIND: EventKind;
}

macro_rules! details {
    ($(
        $(#[$meta:meta])*
        $kind:ident { $($(#[$field_meta:meta])* $field:ident : $ty:ty),* $(,)? }
    )+) => {
        $(
            $(#[$meta])*
            #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
            #[serde(default)]
            pub struct $kind { $($(#[$field_meta])* pub $field: $ty,)* }

            impl KindDetail for $kind {
                const KIND: EventKind = EventKind::$kind;
            }

            impl From<$kind> for Detail {
                fn from(detail: $kind) -> Detail {
                    Detail::$kind(detail)
                }
            }
        )+

        /// The detail of one event, by its kind.
        #[derive(Debug, Clone, PartialEq, Serialize)]
        #[serde(untagged)]
        pub enum Detail {
            $($kind($kind),)+
        }

        impl Detail {
            /// The kind of event this detail belongs to.
            pub fn kind(&self) -> EventKind {
                match self {
                    $(Detail::$kind(_) => EventKind::$kind,)+
                }
            }

            /// A stored detail read by its event's kind: `None` for a kind that carries none,
            /// or a detail that is not an object of the kind's fields.
            pub fn read(kind: EventKind, stored: &Value) -> Option<Detail> {
                match kind {
                    $(EventKind::$kind => $kind::deserialize(stored).ok().map(Detail::$kind),)+
                    _ => None,
                }
            }
        }
    };
}

/// Reads a field that may be stored as `null` apart from absent: `null` is `Some(None)`.
fn named<'de, D, T>(stored: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(stored).map(Some)
}

/// A detail as stored: the JSON object of its fields.
pub fn stored(detail: &Detail) -> Value {
    serde_json::to_value(detail).expect("a detail serialises")
}

/// `stored` read as the detail of `D`'s kind, when `kind` is that kind.
pub fn read_as<D: KindDetail>(kind: EventKind, stored: &Value) -> Option<D> {
    (kind == D::KIND)
        .then(|| D::deserialize(stored).ok())
        .flatten()
}

details! {
    /// A job was created with these terms.
    JobCreated {
        contract_version: String,
        max_attempts: i64,
        deadline_ms: i64,
        replay_policy: String,
    }
    /// The same key was offered with another request: the digests' prefixes.
    IdempotencyConflict {
        existing_digest: String,
        offered_digest: String,
    }
    /// The job's message went to `queue`.
    Dispatched {
        message_id: String,
        queue: String,
        reason: String,
    }
    /// A send failed; the outbox tries again after `retry_in_ms`.
    DispatchFailed {
        error: String,
        retry_in_ms: i64,
    }
    /// A delivery arrived while the job was in `state`.
    DeliveryReceived {
        state: String,
    }
    /// A copy arrived while the owner at `owner_epoch` held the job; it was pushed out.
    DuplicateSuppressed {
        owner_epoch: i64,
        defer_ms: i64,
        /// `pushed`, or the queue's error code for the visibility change.
        #[serde(skip_serializing_if = "Option::is_none")]
        visibility: Option<String>,
    }
    /// A delivery was put off (`backoff`).
    DeliveryDeferred {
        reason: String,
        defer_ms: i64,
    }
    /// A worker claimed the job from `from`.
    Claimed {
        from: String,
        lease_ms: i64,
        attempts_used: i64,
        max_attempts: i64,
    }
    /// The job was claimed after its owner lapsed.
    RecoveryClaimed {
        from_epoch: i64,
        reason: String,
        lost_attempts: i64,
        /// The attempt in flight this recovery adopted (its provider id was kept): the job
        /// stays `running` under the new epoch with that attempt.
        #[serde(skip_serializing_if = "Option::is_none")]
        adopted_attempt: Option<i64>,
    }
    /// An attempt began with `provider`.
    AttemptStarted {
        provider: String,
    }
    /// An attempt ended.
    AttemptFinished {
        outcome: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        error_code: Option<String>,
        /// Which provider limit refused it, when it was throttled and the provider said.
        #[serde(skip_serializing_if = "Option::is_none")]
        limit: Option<String>,
    }
    /// The delivery's visibility was renewed.
    VisibilityRenewed {
        timeout_ms: i64,
        #[serde(skip_serializing_if = "Option::is_none")]
        deadline_left_ms: Option<i64>,
    }
    /// A visibility renewal failed (`error`), or was not asked (`reason`: `cap_or_deadline`).
    VisibilityRenewalFailed {
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        uncertain: bool,
    }
    /// The owner's lease was renewed.
    LeaseRenewed {
        lease_ms: i64,
    }
    /// The lease renewal was refused (`reason`: the refusal's code).
    LeaseRenewalFailed {
        reason: String,
    }
    /// The owner was fenced out; what became of its call (`stopped` after `call_ran_ms`, or
    /// `not_sent`).
    LeaseLost {
        reason: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        call: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        call_ran_ms: Option<i64>,
    }
    /// A result was accepted (`unfenced` when a drill forced it past the fence).
    ResultAccepted {
        #[serde(skip_serializing_if = "Option::is_none")]
        result_ref: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        to: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        unfenced: Option<bool>,
    }
    /// A result was refused; its body is kept as evidence under `evidence_ref` (null when it
    /// was not kept).
    ResultRejected {
        reason: String,
        evidence_ref: Option<String>,
    }
    /// The job moved to `to`, and why.
    StateChanged {
        to: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        retry_in_ms: Option<i64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        error_code: Option<String>,
        /// A decision names it always: `null` when the decision accepted no result.
        #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "named")]
        result_ref: Option<Option<String>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        why: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        released_by_epoch: Option<i64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        lost_attempts: Option<i64>,
    }
    /// A decision (or a cancel) over the job, naming the epoch the decider saw.
    DecisionRecorded {
        decision: String,
        seen_epoch: i64,
        reason: String,
        /// A decision names it always (`null` unless it resolved as succeeded); a cancel does not.
        #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "named")]
        evidence: Option<Option<String>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        lost_attempts: Option<i64>,
    }
    /// The delivery's message was deleted (`reason`: the outcome it followed).
    MessageDeleted {
        reason: String,
    }
    /// A delete did not get through.
    DeleteFailed {
        reason: String,
        error: String,
        uncertain: bool,
    }
    /// A delivery of a finished job was acknowledged without inference.
    DeliveryAckedTerminal {
        state: String,
    }
    /// The message went to the dead-letter queue.
    MovedToDlq {
        reason: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        message_id: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        receive_count: Option<i64>,
        /// The reaper names the queue it came from always (`null` when the queue did not say).
        #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "named")]
        from: Option<Option<String>>,
    }
    /// A dead letter was replayed after its job was inspected (`action`: what was done).
    Replayed {
        from: String,
        action: String,
        message_id: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        receive_count: Option<i64>,
        state: String,
    }
    /// The job's deadline passed in state `from`.
    DeadlineExpired {
        from: String,
        lost_attempts: i64,
        #[serde(skip_serializing_if = "Option::is_none")]
        last_error: Option<String>,
    }
    /// The attempt budget is spent.
    BudgetExhausted {
        attempts_used: i64,
        #[serde(skip_serializing_if = "Option::is_none")]
        to: Option<String>,
    }
    /// The provider offers no retrieval: the job needs a decision.
    RetrievalUnsupported {
        why: String,
    }
    /// A finished job was run again: `to` (and the operator's `reason`) on the old job,
    /// `from` on the new one.
    Rerun {
        #[serde(skip_serializing_if = "Option::is_none")]
        to: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        from: Option<String>,
    }
    /// The provider refused an attempt before running it; the job waits for its reset.
    Throttled {
        to: String,
        retry_in_ms: i64,
        provider: String,
        model: String,
        budget_used: i64,
        max_attempts: i64,
        #[serde(skip_serializing_if = "Option::is_none")]
        limit: Option<String>,
    }
    /// The provider took the attempt to run in the background as `provider_id`.
    AttemptSubmitted {
        provider: String,
        provider_id: String,
    }
    /// The attempt running in the background as `provider_id` was cancelled at the provider
    /// (`why`: `fenced_out`, `cancelled`, `deadline`, `no_progress`); `answer` is what the
    /// provider said (`cancelled`, or the error that kept it from cancelling).
    UpstreamCancelled {
        provider_id: String,
        why: String,
        answer: String,
    }
    /// The job moved on from `from_provider`/`from_model` to the route's step `step`,
    /// `to_provider`/`to_model`: `reason` is the refusal's code and what made it a move
    /// (`waited_past`: refused for `refused_for_ms` with `retry_in_ms` still to wait, past the
    /// configured `after_ms`; `not_ready`: the model was not ready to serve).
    ProviderFallback {
        from_provider: String,
        from_model: String,
        to_provider: String,
        to_model: String,
        step: i64,
        reason: String,
        error_code: String,
        refused_for_ms: i64,
        retry_in_ms: i64,
        after_ms: i64,
    }
    /// The job was pinned to incident `incident_id`, titled `title` then.
    IncidentPinned {
        incident_id: i64,
        title: String,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Shapes as rows written before these types existed hold them: each reads back as its
    /// kind's detail, and writes back as the same object.
    #[test]
    fn persisted_shapes_read_back_and_write_the_same_object() {
        let rows = [
            (
                EventKind::StateChanged,
                json!({"to": "retry_authorized", "retry_in_ms": 1500}),
            ),
            (
                EventKind::StateChanged,
                json!({"to": "failed_terminal", "error_code": "cancelled"}),
            ),
            (
                EventKind::StateChanged,
                json!({"to": "unknown", "released_by_epoch": 2, "reason": "provider_http_500", "lost_attempts": 1}),
            ),
            (
                EventKind::DecisionRecorded,
                json!({"decision": "resolve_succeeded", "seen_epoch": 3, "reason": "checked", "evidence": "resp_1"}),
            ),
            (
                EventKind::LeaseLost,
                json!({"reason": "stale_epoch", "call": "stopped", "call_ran_ms": 1200}),
            ),
            (
                EventKind::DeleteFailed,
                json!({"reason": "succeeded", "error": "timeout", "uncertain": true}),
            ),
            (
                EventKind::ResultRejected,
                json!({"reason": "stale_epoch", "evidence_ref": "res_1"}),
            ),
            (
                EventKind::ResultRejected,
                json!({"reason": "stale_epoch", "evidence_ref": null}),
            ),
            (
                EventKind::Throttled,
                json!({"to": "retry_authorized", "retry_in_ms": 900, "provider": "stub", "model": "m", "budget_used": 0, "max_attempts": 3, "limit": "requests"}),
            ),
            (
                EventKind::VisibilityRenewed,
                json!({"timeout_ms": 90000, "deadline_left_ms": 5000}),
            ),
            (
                EventKind::MovedToDlq,
                json!({"reason": "max_receive_count", "message_id": "m1", "receive_count": 5, "from": "jobs"}),
            ),
        ];
        for (kind, row) in rows {
            let detail = Detail::read(kind, &row).unwrap_or_else(|| panic!("{kind}: {row}"));
            assert_eq!(detail.kind(), kind);
            assert_eq!(stored(&detail), row, "{kind}");
        }
    }

    #[test]
    fn a_null_a_writer_names_stays_apart_from_an_absent_field() {
        let decided = json!({"decision": "authorize_retry", "seen_epoch": 1, "reason": "r", "evidence": null});
        let d: DecisionRecorded = read_as(EventKind::DecisionRecorded, &decided).unwrap();
        assert_eq!(d.evidence, Some(None));
        assert_eq!(stored(&d.into()), decided, "the null is written again");
        let cancelled =
            json!({"decision": "cancel", "seen_epoch": 1, "reason": "r", "lost_attempts": 0});
        let c: DecisionRecorded = read_as(EventKind::DecisionRecorded, &cancelled).unwrap();
        assert_eq!(c.evidence, None);
        assert_eq!(stored(&c.into()), cancelled, "no evidence key appears");
        let s: StateChanged = read_as(
            EventKind::StateChanged,
            &json!({"to": "retry_authorized", "result_ref": "res_1"}),
        )
        .unwrap();
        assert_eq!(s.result_ref, Some(Some("res_1".to_owned())));
        let older: StateChanged = read_as(EventKind::StateChanged, &json!({})).unwrap();
        assert_eq!(
            (older.to.as_str(), older.result_ref),
            ("", None),
            "a field a row lacks"
        );
    }

    #[test]
    fn a_detail_is_read_only_as_its_own_kind() {
        let row = json!({"reason": "stale_epoch"});
        assert!(read_as::<LeaseLost>(EventKind::LeaseLost, &row).is_some());
        assert!(read_as::<LeaseLost>(EventKind::MessageDeleted, &row).is_none());
        assert!(Detail::read(EventKind::IdempotencyHit, &row).is_none());
        assert!(Detail::read(EventKind::StateChanged, &json!("text")).is_none());
    }
}
