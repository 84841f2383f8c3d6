//! The embedded queue: SQS semantics, stored in the ledger database so a restart loses
//! nothing (and, on SQLite, a lost tail of transactions rolls back queue and ledger together).
//!
//! What it keeps of SQS: a new receipt handle on every receive (only its hash is stored);
//! visibility that starts when changed; the 12-hour cap from the first receive, refused rather
//! than clamped; receive counts; redrive to the dead-letter queue once `max_receive_count` is
//! exceeded; a delete with an outdated handle that reports success without deleting. For
//! drills it can also deliver a copy of a message, during visibility or after deletion, as a
//! standard queue sometimes does.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::sync::Notify;

use super::{
    check_batch, per_entry, BatchResult, DeletePlan, Deleted, Delivery, Depth, Queue, QueueError,
    ReceiptHandle, MAX_BATCH, MAX_VISIBILITY, MAX_WAIT, VISIBILITY_CAP,
};
use crate::ledger::{Ledger, LedgerMessage, VisibilityChange};

/// What a visibility change made in the ledger comes to, as SQS would answer it.
pub(crate) fn visibility_answer(change: VisibilityChange) -> Result<(), QueueError> {
    match change {
        VisibilityChange::Changed => Ok(()),
        VisibilityChange::UnknownHandle => Err(QueueError::InvalidReceiptHandle),
        VisibilityChange::NotInFlight => Err(QueueError::MessageNotInflight),
        VisibilityChange::CapExceeded => Err(QueueError::VisibilityCapExceeded),
    }
}

/// How often a long poll looks again when no send in this process woke it.
const POLL_INTERVAL: Duration = Duration::from_millis(50);
/// Most messages one statement sends or changes.
const CHUNK: usize = 500;

/// One queue (and its dead-letter queue) in the ledger database. Cheap to clone.
#[derive(Clone)]
pub struct EmbeddedQueue {
    ledger: Ledger,
    name: Arc<str>,
    dead_letter: Option<(Arc<str>, i64)>,
    sent: Arc<Notify>,
    /// The last receive took as many messages as it asked for: more are likely visible, so
    /// the next receive takes at once instead of looking first.
    backlog: Arc<AtomicBool>,
}

fn secret_hash(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

pub(crate) fn unavailable(error: impl std::fmt::Display) -> QueueError {
    QueueError::Unavailable(format!("ledger database: {error}"))
}

/// `<row id>.<secret>`: the id finds the message, the secret proves this is the latest receive.
fn parse_handle(receipt: &ReceiptHandle) -> Result<(i64, &str), QueueError> {
    let (id, secret) = receipt
        .expose()
        .split_once('.')
        .ok_or(QueueError::InvalidReceiptHandle)?;
    let id = id.parse().map_err(|_| QueueError::InvalidReceiptHandle)?;
    if secret.len() != 32 || !secret.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(QueueError::InvalidReceiptHandle);
    }
    Ok((id, secret))
}

fn new_secret() -> Result<String, QueueError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| QueueError::Unavailable(e.to_string()))?;
    Ok(hex::encode(bytes))
}

impl EmbeddedQueue {
    /// The queue `name`; messages received more than `max_receive_count` times move to
    /// `name-dlq` on their next receive.
    pub fn new(ledger: Ledger, name: &str, max_receive_count: u32) -> Self {
        // New jobs sent to this queue in their own transaction wake its long polls too.
        let sent = ledger.direct_sends(name).unwrap_or_default();
        EmbeddedQueue {
            ledger,
            name: name.into(),
            dead_letter: Some((
                format!("{name}-dlq").into(),
                i64::from(max_receive_count.max(1)),
            )),
            sent,
            backlog: Arc::default(),
        }
    }

    /// The message `receipt` names, when this queue is a table of `ledger` itself: what that
    /// ledger's own transactions can delete or change the visibility of.
    fn in_ledger(&self, ledger: &Ledger, receipt: &ReceiptHandle) -> Option<LedgerMessage> {
        let (id, secret) = parse_handle(receipt).ok()?;
        ledger
            .is_same(&self.ledger)
            .then(|| LedgerMessage::new(&self.name, id, &secret_hash(secret)))
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// For drills: a copy of a message, as a standard queue may deliver — visible after
    /// `delay`, with the same message id, whether or not the original is still there.
    pub async fn deliver_copy(
        &self,
        message_id: &str,
        body: &str,
        delay: Duration,
    ) -> Result<(), QueueError> {
        self.ledger
            .queue_copy(&self.name, message_id, body, delay)
            .await
            .map_err(unavailable)?;
        self.sent.notify_waiters();
        Ok(())
    }

    /// Sends messages in one statement.
    async fn insert(&self, bodies: &[String], delay: Duration) -> Result<Vec<String>, QueueError> {
        if bodies.is_empty() {
            return Ok(Vec::new());
        }
        let messages: Vec<(String, String)> = bodies
            .iter()
            .map(|body| (uuid::Uuid::now_v7().to_string(), body.clone()))
            .collect();
        self.ledger
            .queue_send(&self.name, &messages, delay)
            .await
            .map_err(unavailable)?;
        self.sent.notify_waiters();
        Ok(messages.into_iter().map(|(id, _)| id).collect())
    }

    async fn receive_now(
        &self,
        max: usize,
        visibility: Duration,
    ) -> Result<Vec<Delivery>, QueueError> {
        let secrets = (0..max)
            .map(|_| new_secret())
            .collect::<Result<Vec<_>, _>>()?;
        let hashes: Vec<String> = secrets.iter().map(|s| secret_hash(s)).collect();
        let dead_letter = self.dead_letter.as_ref().map(|(dlq, n)| (&**dlq, *n));
        let taken = self
            .ledger
            .queue_receive(&self.name, &hashes, visibility, dead_letter)
            .await
            .map_err(unavailable)?;
        taken
            .into_iter()
            .map(|m| {
                let secret = secrets
                    .get(m.handle)
                    .ok_or_else(|| QueueError::Unavailable("a receive lost its handle".into()))?;
                Ok(Delivery {
                    message_id: m.message_id,
                    receipt: ReceiptHandle::new(format!("{}.{secret}", m.id)),
                    body: m.body,
                    receive_count: u32::try_from(m.receive_count).unwrap_or(u32::MAX),
                    first_receive_at_ms: Some(m.first_receive_at / 1000),
                    sent_at_ms: Some(m.sent_at / 1000),
                })
            })
            .collect()
    }

    /// Visibility changes, each checked here first (handle form, the 12-hour limit), the valid
    /// ones made in one transaction.
    async fn change(
        &self,
        entries: &[(ReceiptHandle, Duration)],
    ) -> Result<BatchResult, QueueError> {
        let mut results: Vec<Result<(), QueueError>> = Vec::with_capacity(entries.len());
        let mut valid = Vec::with_capacity(entries.len());
        for (receipt, timeout) in entries {
            if *timeout > MAX_VISIBILITY {
                results.push(Err(QueueError::Invalid(
                    "a visibility timeout is at most 12 hours".into(),
                )));
                continue;
            }
            match parse_handle(receipt) {
                Ok((id, secret)) => {
                    valid.push((id, secret_hash(secret), *timeout));
                    results.push(Ok(()));
                }
                Err(error) => results.push(Err(error)),
            }
        }
        let changed = self
            .ledger
            .queue_change_visibility(&self.name, &valid, VISIBILITY_CAP)
            .await
            .map_err(unavailable)?;
        let mut changed = changed.into_iter();
        for result in results.iter_mut().filter(|r| r.is_ok()) {
            *result = changed
                .next()
                .map_or(Err(QueueError::InvalidReceiptHandle), visibility_answer);
        }
        Ok(results)
    }

    /// Deletes, each handle checked here first, the valid ones made in one transaction.
    /// An outdated handle matches nothing and still succeeds: SQS's documented ambiguity.
    /// Unlike SQS, this queue can say so to whoever asks (`delete_known`).
    async fn remove(
        &self,
        receipts: &[ReceiptHandle],
    ) -> Result<Vec<Result<Deleted, QueueError>>, QueueError> {
        let mut results: Vec<Result<Deleted, QueueError>> = Vec::with_capacity(receipts.len());
        let mut valid = Vec::with_capacity(receipts.len());
        for receipt in receipts {
            match parse_handle(receipt) {
                Ok((id, secret)) => {
                    valid.push((id, secret_hash(secret)));
                    results.push(Ok(Deleted::Reported));
                }
                Err(error) => results.push(Err(error)),
            }
        }
        let deleted = self
            .ledger
            .queue_delete(&self.name, &valid)
            .await
            .map_err(unavailable)?;
        let mut deleted = deleted.into_iter();
        for result in results.iter_mut().filter(|r| r.is_ok()) {
            if deleted.next() != Some(true) {
                *result = Ok(Deleted::NothingDeleted);
            }
        }
        Ok(results)
    }
}

impl Queue for EmbeddedQueue {
    fn describe(&self) -> String {
        crate::ledger::describe_embedded(&self.name)
    }

    fn send_round(&self) -> usize {
        CHUNK
    }

    async fn send(&self, body: &str, delay: Duration) -> Result<String, QueueError> {
        let ids = self.insert(&[body.to_owned()], delay).await?;
        Ok(ids.into_iter().next().unwrap_or_default())
    }

    async fn send_batch(
        &self,
        bodies: &[String],
    ) -> Result<Vec<Result<String, QueueError>>, QueueError> {
        check_batch(bodies.len())?;
        Ok(self
            .insert(bodies, Duration::ZERO)
            .await?
            .into_iter()
            .map(Ok)
            .collect())
    }

    async fn send_all(&self, bodies: &[String]) -> Vec<Result<String, QueueError>> {
        let mut out = Vec::with_capacity(bodies.len());
        for chunk in bodies.chunks(CHUNK) {
            let sent = self.insert(chunk, Duration::ZERO).await;
            out.extend(per_entry(
                chunk.len(),
                sent.map(|ids| ids.into_iter().map(Ok).collect()),
            ));
        }
        out
    }

    async fn receive(
        &self,
        max: usize,
        visibility: Duration,
        wait: Duration,
    ) -> Result<Vec<Delivery>, QueueError> {
        if !(1..=MAX_BATCH).contains(&max) {
            return Err(QueueError::Invalid("receive 1 to 10 messages".into()));
        }
        if visibility > MAX_VISIBILITY || wait > MAX_WAIT {
            return Err(QueueError::Invalid(
                "visibility is at most 12 hours and wait at most 20 seconds".into(),
            ));
        }
        let until = tokio::time::Instant::now() + wait;
        loop {
            let notified = self.sent.notified();
            // An idle poll only reads: the write transaction is taken when there is work, or
            // straight away while the last receive came back full.
            let visible = self.backlog.load(Ordering::Relaxed)
                || self
                    .ledger
                    .queue_any_visible(&self.name)
                    .await
                    .map_err(unavailable)?;
            let deliveries = if visible {
                let taken = self.receive_now(max, visibility).await?;
                self.backlog.store(taken.len() == max, Ordering::Relaxed);
                taken
            } else {
                Vec::new()
            };
            let now = tokio::time::Instant::now();
            if !deliveries.is_empty() || now >= until {
                return Ok(deliveries);
            }
            let _ = tokio::time::timeout((until - now).min(POLL_INTERVAL), notified).await;
        }
    }

    async fn change_visibility(
        &self,
        receipt: &ReceiptHandle,
        timeout: Duration,
    ) -> Result<(), QueueError> {
        self.change(&[(receipt.clone(), timeout)])
            .await?
            .pop()
            .unwrap_or(Err(QueueError::InvalidReceiptHandle))
    }

    async fn change_visibility_batch(
        &self,
        entries: &[(ReceiptHandle, Duration)],
    ) -> Result<BatchResult, QueueError> {
        check_batch(entries.len())?;
        self.change(entries).await
    }

    async fn change_visibility_all(
        &self,
        entries: Vec<(ReceiptHandle, Duration)>,
    ) -> Vec<Result<(), QueueError>> {
        let mut out = Vec::with_capacity(entries.len());
        for chunk in entries.chunks(CHUNK) {
            out.extend(per_entry(chunk.len(), self.change(chunk).await));
        }
        out
    }

    async fn delete(&self, receipt: &ReceiptHandle) -> Result<(), QueueError> {
        self.delete_known(receipt).await.map(|_| ())
    }

    async fn delete_known(&self, receipt: &ReceiptHandle) -> Result<Deleted, QueueError> {
        self.remove(std::slice::from_ref(receipt))
            .await?
            .pop()
            .unwrap_or(Ok(Deleted::NothingDeleted))
    }

    async fn delete_batch(&self, receipts: &[ReceiptHandle]) -> Result<BatchResult, QueueError> {
        check_batch(receipts.len())?;
        Ok(self
            .remove(receipts)
            .await?
            .into_iter()
            .map(|r| r.map(|_| ()))
            .collect())
    }

    fn delete_plan(&self, ledger: &Ledger, receipt: &ReceiptHandle) -> DeletePlan {
        self.in_ledger(ledger, receipt)
            .map_or(DeletePlan::Apart, DeletePlan::WithOutcome)
    }

    fn visibility_in(
        &self,
        ledger: &Ledger,
        receipt: &ReceiptHandle,
        timeout: Duration,
    ) -> Option<LedgerMessage> {
        self.in_ledger(ledger, receipt)
            .filter(|_| timeout <= MAX_VISIBILITY)
    }

    fn kept_in(&self, ledger: &Ledger) -> Option<(String, Arc<Notify>)> {
        ledger
            .is_same(&self.ledger)
            .then(|| (self.name.to_string(), Arc::clone(&self.sent)))
    }

    async fn depth(&self) -> Result<Depth, QueueError> {
        let depth = self
            .ledger
            .queue_depth(&self.name)
            .await
            .map_err(unavailable)?;
        Ok(Depth {
            visible: depth.visible,
            in_flight: depth.in_flight,
            delayed: depth.delayed,
        })
    }

    fn dead_letters(&self) -> Option<Self> {
        self.dead_letter.as_ref().map(|(dlq, _)| EmbeddedQueue {
            ledger: self.ledger.clone(),
            name: dlq.clone(),
            dead_letter: None,
            sent: Arc::new(Notify::new()),
            backlog: Arc::default(),
        })
    }
}
