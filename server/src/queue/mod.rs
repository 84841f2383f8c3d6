//! Queues: what the worker needs of a message transport, with SQS's semantics.
//!
//! Owns the transport only: send, receive with visibility, change visibility, delete, and the
//! dead-letter queue. Must not decide anything about jobs — a delivery only triggers an
//! examination of the ledger — and must never log or display a receipt handle.
//!
//! Two implementations, one contract (`tests/suite/queue_contract.rs`):
//! [`sqs::SqsQueue`] (Amazon SQS or any SQS-compatible endpoint through `aws-sdk-sqs`) and
//! [`embedded::EmbeddedQueue`] (durable in the ledger database, the default of `serve`).

pub mod embedded;
pub mod faults;
pub mod sqs;

use std::fmt;
use std::future::Future;
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::ledger::Ledger;

/// SQS's caps, which both implementations keep.
pub const MAX_BATCH: usize = 10;

/// Refuses a batch request over [`MAX_BATCH`] entries, as SQS does.
pub(crate) fn check_batch(entries: usize) -> Result<(), QueueError> {
    if entries > MAX_BATCH {
        Err(QueueError::Invalid("at most 10 entries per batch".into()))
    } else {
        Ok(())
    }
}
/// One result per entry of a request of `n` entries: its own answers, or the request's error
/// for each when the request failed as a whole.
pub(crate) fn per_entry<T>(
    n: usize,
    answer: Result<Vec<Result<T, QueueError>>, QueueError>,
) -> Vec<Result<T, QueueError>> {
    match answer {
        Ok(results) => results,
        Err(error) => (0..n).map(|_| Err(error.clone())).collect(),
    }
}

/// A visibility chain ends 12 hours after the first receive; renewals do not restart it.
pub const VISIBILITY_CAP: Duration = Duration::from_secs(12 * 3600);
/// Longest single visibility timeout.
pub const MAX_VISIBILITY: Duration = Duration::from_secs(12 * 3600);
/// Longest long-poll wait.
pub const MAX_WAIT: Duration = Duration::from_secs(20);

/// A per-receive capability to delete or extend one delivery. Never logged or shown: `Debug`
/// prints only its 8-hex-character fingerprint.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ReceiptHandle(String);

impl ReceiptHandle {
    pub fn new(handle: String) -> Self {
        ReceiptHandle(handle)
    }

    /// The handle itself, for the transport request that needs it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// 8 hex characters of SHA-256, safe for events and logs.
    pub fn fingerprint(&self) -> String {
        hex::encode(&Sha256::digest(self.0.as_bytes())[..4])
    }
}

impl fmt::Debug for ReceiptHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ReceiptHandle({})", self.fingerprint())
    }
}

/// One receive of one message.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub message_id: String,
    pub receipt: ReceiptHandle,
    pub body: String,
    /// How many times the message has been received, this time included.
    pub receive_count: u32,
    /// When the message was first received (ms since the Unix epoch, the queue's clock); the
    /// 12-hour visibility cap counts from here.
    pub first_receive_at_ms: Option<i64>,
    pub sent_at_ms: Option<i64>,
}

/// Approximate message counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Depth {
    pub visible: i64,
    pub in_flight: i64,
    pub delayed: i64,
}

/// Transport errors, classified where they happen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueueError {
    /// The handle is malformed, or not the latest for an in-flight message.
    #[error("the receipt handle is not valid for this message")]
    InvalidReceiptHandle,
    /// The message is not in flight (visible again, or gone).
    #[error("the message is not in flight")]
    MessageNotInflight,
    /// The change would pass the 12-hour visibility cap counted from the first receive.
    #[error("the visibility change passes the 12-hour cap from the first receive")]
    VisibilityCapExceeded,
    /// Too many messages in flight.
    #[error("too many messages in flight")]
    OverLimit,
    #[error("invalid request: {0}")]
    Invalid(String),
    /// No answer within the bound: the request may or may not have taken effect.
    #[error("the queue did not answer in time")]
    Timeout,
    /// The queue cannot be reached or refused to work; retry later.
    #[error("the queue is unavailable: {0}")]
    Unavailable(String),
}

impl QueueError {
    /// Whether the request may have taken effect although it failed (record as uncertain).
    pub fn is_uncertain(&self) -> bool {
        matches!(self, QueueError::Timeout | QueueError::Unavailable(_))
    }

    /// A stable code for events and metrics labels.
    pub fn code(&self) -> &'static str {
        match self {
            QueueError::InvalidReceiptHandle => "invalid_receipt_handle",
            QueueError::MessageNotInflight => "message_not_inflight",
            QueueError::VisibilityCapExceeded => "visibility_cap_exceeded",
            QueueError::OverLimit => "over_limit",
            QueueError::Invalid(_) => "invalid",
            QueueError::Timeout => "timeout",
            QueueError::Unavailable(_) => "unavailable",
        }
    }
}

/// What a successful delete is known to have done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deleted {
    /// The queue reported success (on SQS that is all anyone can know).
    Reported,
    /// The queue knows the handle was outdated and the message remains; a later delivery
    /// resolves it.
    NothingDeleted,
}

/// How the delete of a delivery goes once its job's outcome is being recorded
/// ([`Queue::delete_plan`]).
#[derive(Debug)]
pub enum DeletePlan {
    /// Through the queue, after the outcome is durable.
    Apart,
    /// In the ledger's transaction that records the outcome: the queue is a table of that
    /// ledger, so the message goes exactly when the outcome becomes durable, never before.
    WithOutcome(crate::ledger::LedgerMessage),
    /// What the delete comes to without being made: a fault injected in its place.
    Injected(Result<Deleted, QueueError>),
}

/// The outcome of each entry of a batch request, in request order.
pub type BatchResult = Vec<Result<(), QueueError>>;

/// What the worker, dispatcher and console need of a queue.
pub trait Queue: Clone + Send + Sync + 'static {
    /// A short name for logs and the console ("embedded:jobs", "sqs:jobs").
    fn describe(&self) -> String;

    /// Sends one message, visible after `delay`. Returns its message id.
    fn send(
        &self,
        body: &str,
        delay: Duration,
    ) -> impl Future<Output = Result<String, QueueError>> + Send;

    /// Sends up to [`MAX_BATCH`] messages; each entry gets its message id or its error.
    fn send_batch(
        &self,
        bodies: &[String],
    ) -> impl Future<Output = Result<Vec<Result<String, QueueError>>, QueueError>> + Send;

    /// Most messages an outbox dispatcher's round sends: what one request carries, so that a
    /// round lasts one request and is recorded before the next. The embedded queue writes a
    /// round of any size in one statement.
    fn send_round(&self) -> usize {
        MAX_BATCH
    }

    /// Sends any number of messages, [`MAX_BATCH`] a request; each entry gets its message id
    /// or its error. The embedded queue writes them all in one statement.
    fn send_all(
        &self,
        bodies: &[String],
    ) -> impl Future<Output = Vec<Result<String, QueueError>>> + Send {
        async move {
            let mut out = Vec::with_capacity(bodies.len());
            for chunk in bodies.chunks(MAX_BATCH) {
                out.extend(per_entry(chunk.len(), self.send_batch(chunk).await));
            }
            out
        }
    }

    /// Receives up to `max` (≤ 10) messages, hiding them for `visibility`, waiting up to
    /// `wait` (≤ 20 s) for the first one.
    fn receive(
        &self,
        max: usize,
        visibility: Duration,
        wait: Duration,
    ) -> impl Future<Output = Result<Vec<Delivery>, QueueError>> + Send;

    /// Makes an in-flight message invisible for `timeout` from now (not added to what is left).
    fn change_visibility(
        &self,
        receipt: &ReceiptHandle,
        timeout: Duration,
    ) -> impl Future<Output = Result<(), QueueError>> + Send;

    /// Up to [`MAX_BATCH`] visibility changes.
    fn change_visibility_batch(
        &self,
        entries: &[(ReceiptHandle, Duration)],
    ) -> impl Future<Output = Result<BatchResult, QueueError>> + Send;

    /// Any number of visibility changes, each entry with its own result: [`MAX_BATCH`] a
    /// request, the requests sent side by side. The embedded queue makes them in one
    /// transaction per few hundred.
    fn change_visibility_all(
        &self,
        entries: Vec<(ReceiptHandle, Duration)>,
    ) -> impl Future<Output = Vec<Result<(), QueueError>>> + Send {
        let queue = self.clone();
        async move {
            let mut requests = tokio::task::JoinSet::new();
            let mut out: Vec<Result<(), QueueError>> =
                vec![Err(QueueError::Timeout); entries.len()];
            for (at, chunk) in entries.chunks(MAX_BATCH).enumerate() {
                let (queue, chunk) = (queue.clone(), chunk.to_vec());
                requests.spawn(async move {
                    let answer = queue.change_visibility_batch(&chunk).await;
                    (at * MAX_BATCH, per_entry(chunk.len(), answer))
                });
            }
            while let Some(joined) = requests.join_next().await {
                // A request that panicked leaves its entries uncertain (a timeout).
                if let Ok((first, results)) = joined {
                    for (slot, result) in out[first..].iter_mut().zip(results) {
                        *slot = result;
                    }
                }
            }
            out
        }
    }

    /// Deletes the delivery. With an outdated handle this may succeed without deleting, as on
    /// SQS: only a durable job record makes a later copy harmless.
    fn delete(
        &self,
        receipt: &ReceiptHandle,
    ) -> impl Future<Output = Result<(), QueueError>> + Send;

    /// Deletes the delivery and says what is known of the effect. SQS cannot tell (it reports
    /// success for an outdated handle too), so by default a success is [`Deleted::Reported`];
    /// the embedded queue knows when nothing was deleted.
    fn delete_known(
        &self,
        receipt: &ReceiptHandle,
    ) -> impl Future<Output = Result<Deleted, QueueError>> + Send {
        let delete = self.delete(receipt);
        async move { delete.await.map(|()| Deleted::Reported) }
    }

    /// Up to [`MAX_BATCH`] deletes.
    fn delete_batch(
        &self,
        receipts: &[ReceiptHandle],
    ) -> impl Future<Output = Result<BatchResult, QueueError>> + Send;

    /// How to delete the delivery behind `receipt` once `ledger` records its job's outcome.
    /// By default apart, through [`Queue::delete_known`]; a queue kept in that very ledger
    /// lets the outcome's transaction delete it.
    fn delete_plan(&self, ledger: &Ledger, receipt: &ReceiptHandle) -> DeletePlan {
        let _ = (ledger, receipt);
        DeletePlan::Apart
    }

    /// The message behind `receipt` when its visibility can change to `timeout` in `ledger`'s
    /// own transaction renewing its job's lease (a queue kept in that very ledger); `None`, the
    /// default, when it changes through the queue, beside the lease renewal.
    fn visibility_in(
        &self,
        ledger: &Ledger,
        receipt: &ReceiptHandle,
        timeout: Duration,
    ) -> Option<crate::ledger::LedgerMessage> {
        let _ = (ledger, receipt, timeout);
        None
    }

    /// When this queue is kept in `ledger` itself (the embedded queue): its name, and what to
    /// wake once messages were written to it, so that a dispatcher can send in the ledger's own
    /// transaction. `None`, the default, for a queue apart.
    fn kept_in(&self, ledger: &Ledger) -> Option<(String, std::sync::Arc<tokio::sync::Notify>)> {
        let _ = ledger;
        None
    }

    /// Approximate counts.
    fn depth(&self) -> impl Future<Output = Result<Depth, QueueError>> + Send;

    /// The dead-letter queue behind this one, as a queue of the same kind.
    fn dead_letters(&self) -> Option<Self>;
}

/// Either queue, chosen at start-up.
#[derive(Clone)]
pub enum AnyQueue {
    Embedded(embedded::EmbeddedQueue),
    Sqs(sqs::SqsQueue),
}

macro_rules! dispatch {
    ($self:ident, $q:ident => $call:expr) => {
        match $self {
            AnyQueue::Embedded($q) => $call,
            AnyQueue::Sqs($q) => $call,
        }
    };
}

impl Queue for AnyQueue {
    fn describe(&self) -> String {
        dispatch!(self, q => q.describe())
    }

    fn send_round(&self) -> usize {
        dispatch!(self, q => q.send_round())
    }

    async fn send(&self, body: &str, delay: Duration) -> Result<String, QueueError> {
        dispatch!(self, q => q.send(body, delay).await)
    }

    async fn send_batch(
        &self,
        bodies: &[String],
    ) -> Result<Vec<Result<String, QueueError>>, QueueError> {
        dispatch!(self, q => q.send_batch(bodies).await)
    }

    async fn send_all(&self, bodies: &[String]) -> Vec<Result<String, QueueError>> {
        dispatch!(self, q => q.send_all(bodies).await)
    }

    async fn receive(
        &self,
        max: usize,
        visibility: Duration,
        wait: Duration,
    ) -> Result<Vec<Delivery>, QueueError> {
        dispatch!(self, q => q.receive(max, visibility, wait).await)
    }

    async fn change_visibility(
        &self,
        receipt: &ReceiptHandle,
        timeout: Duration,
    ) -> Result<(), QueueError> {
        dispatch!(self, q => q.change_visibility(receipt, timeout).await)
    }

    async fn change_visibility_batch(
        &self,
        entries: &[(ReceiptHandle, Duration)],
    ) -> Result<BatchResult, QueueError> {
        dispatch!(self, q => q.change_visibility_batch(entries).await)
    }

    async fn change_visibility_all(
        &self,
        entries: Vec<(ReceiptHandle, Duration)>,
    ) -> Vec<Result<(), QueueError>> {
        dispatch!(self, q => q.change_visibility_all(entries).await)
    }

    async fn delete(&self, receipt: &ReceiptHandle) -> Result<(), QueueError> {
        dispatch!(self, q => q.delete(receipt).await)
    }

    async fn delete_known(&self, receipt: &ReceiptHandle) -> Result<Deleted, QueueError> {
        dispatch!(self, q => q.delete_known(receipt).await)
    }

    async fn delete_batch(&self, receipts: &[ReceiptHandle]) -> Result<BatchResult, QueueError> {
        dispatch!(self, q => q.delete_batch(receipts).await)
    }

    fn delete_plan(&self, ledger: &Ledger, receipt: &ReceiptHandle) -> DeletePlan {
        dispatch!(self, q => q.delete_plan(ledger, receipt))
    }

    fn visibility_in(
        &self,
        ledger: &Ledger,
        receipt: &ReceiptHandle,
        timeout: Duration,
    ) -> Option<crate::ledger::LedgerMessage> {
        dispatch!(self, q => q.visibility_in(ledger, receipt, timeout))
    }

    fn kept_in(&self, ledger: &Ledger) -> Option<(String, std::sync::Arc<tokio::sync::Notify>)> {
        dispatch!(self, q => q.kept_in(ledger))
    }

    async fn depth(&self) -> Result<Depth, QueueError> {
        dispatch!(self, q => q.depth().await)
    }

    fn dead_letters(&self) -> Option<Self> {
        match self {
            AnyQueue::Embedded(q) => q.dead_letters().map(AnyQueue::Embedded),
            AnyQueue::Sqs(q) => q.dead_letters().map(AnyQueue::Sqs),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_receipt_handle_never_prints_itself() {
        let handle = ReceiptHandle::new("AQEBsecret-handle-value".into());
        let shown = format!("{handle:?}");
        assert!(!shown.contains("secret"), "{shown}");
        assert_eq!(handle.fingerprint().len(), 8);
        assert!(shown.contains(&handle.fingerprint()));
    }
}
