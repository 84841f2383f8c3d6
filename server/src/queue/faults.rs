//! Fault injection at the transport: wraps any queue and drops deletes (reported as timed
//! out, or as SQS reports an outdated handle: success with nothing deleted), times out
//! visibility changes without applying them, and delivers duplicate copies of received
//! messages. Drills arm these per job through a [`Faults`] registry; tests may also arm a
//! rate [`FaultPlan`] over every message. Inert when unarmed; rate draws are deterministic
//! per message and call, so a run can be repeated.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use super::{BatchResult, DeletePlan, Deleted, Delivery, Depth, Queue, QueueError, ReceiptHandle};
use crate::faults::{FaultPoint, Faults};
use crate::job::draw;
use crate::ledger::Ledger;

/// Fractions in `0.0..=1.0` of the calls that fail.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct FaultPlan {
    /// `DeleteMessage` times out without deleting.
    pub delete_timeout: f64,
    /// `ChangeMessageVisibility` times out without changing anything.
    pub visibility_timeout: f64,
    /// A received message is sent again: a duplicate copy, as a standard queue may deliver.
    pub duplicate: f64,
}

#[derive(Clone)]
pub struct FaultyQueue<Q> {
    inner: Q,
    plan: Arc<RwLock<FaultPlan>>,
    calls: Arc<AtomicU64>,
    injected: Arc<[AtomicU64; 3]>,
    /// Bodies already copied once: a copy is never copied again, so even a 100 % duplicate
    /// rate gives each message one extra delivery rather than an endless storm.
    copied: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
    /// Faults armed per job by a drill.
    faults: Option<Faults>,
}

impl<Q: Queue> FaultyQueue<Q> {
    pub fn new(inner: Q) -> Self {
        FaultyQueue {
            inner,
            plan: Arc::default(),
            calls: Arc::default(),
            injected: Arc::new([AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)]),
            copied: Arc::default(),
            faults: None,
        }
    }

    /// The queue with a drill's per-job faults.
    pub fn with_faults(inner: Q, faults: Faults) -> Self {
        FaultyQueue {
            faults: Some(faults),
            ..FaultyQueue::new(inner)
        }
    }

    /// Whether a per-job fault fires for the delivery behind this receipt.
    fn fires_for(&self, receipt: &ReceiptHandle, point: FaultPoint) -> bool {
        let Some(faults) = &self.faults else {
            return false;
        };
        let fingerprint = receipt.fingerprint();
        if point == FaultPoint::QueueChangeVisibility && !faults.is_first_receipt(&fingerprint) {
            return false;
        }
        faults
            .job_of_receipt(&fingerprint)
            .is_some_and(|job| faults.fire(&job, point).is_some())
    }

    pub fn arm(&self, plan: FaultPlan) {
        *self.plan.write().expect("plan lock") = plan;
    }

    pub fn disarm(&self) {
        self.arm(FaultPlan::default());
    }

    pub fn inner(&self) -> &Q {
        &self.inner
    }

    /// How many faults were injected: (deletes dropped, visibility changes dropped,
    /// duplicates delivered).
    pub fn injected(&self) -> (u64, u64, u64) {
        let get = |i: usize| self.injected[i].load(Ordering::Relaxed);
        (get(0), get(1), get(2))
    }

    fn fires(&self, key: &str, rate: f64, slot: usize) -> bool {
        if rate <= 0.0 {
            return false;
        }
        let n = self.calls.fetch_add(1, Ordering::Relaxed);
        let fires = draw(key, n) < rate;
        if fires {
            self.injected[slot].fetch_add(1, Ordering::Relaxed);
        }
        fires
    }

    fn plan(&self) -> FaultPlan {
        *self.plan.read().expect("plan lock")
    }

    /// Which visibility changes time out here, and the ones passed on.
    #[allow(clippy::type_complexity)]
    fn drop_changes(
        &self,
        entries: &[(ReceiptHandle, Duration)],
    ) -> (Vec<bool>, Vec<(ReceiptHandle, Duration)>) {
        let rate = self.plan().visibility_timeout;
        let dropped: Vec<bool> = entries
            .iter()
            .map(|(r, _)| {
                self.fires_for(r, FaultPoint::QueueChangeVisibility)
                    || self.fires(&r.fingerprint(), rate, 1)
            })
            .collect();
        let kept = entries
            .iter()
            .zip(&dropped)
            .filter(|(_, d)| !**d)
            .map(|(e, _)| e.clone())
            .collect();
        (dropped, kept)
    }
}

/// The results of the changes passed on, with a timeout in place of each dropped one.
fn merge_dropped(dropped: Vec<bool>, passed: BatchResult) -> BatchResult {
    let mut passed = passed.into_iter();
    dropped
        .into_iter()
        .map(|d| {
            if d {
                Err(QueueError::Timeout)
            } else {
                passed.next().unwrap_or(Err(QueueError::Timeout))
            }
        })
        .collect()
}

impl<Q: Queue> Queue for FaultyQueue<Q> {
    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn send_round(&self) -> usize {
        self.inner.send_round()
    }

    async fn send(&self, body: &str, delay: Duration) -> Result<String, QueueError> {
        self.inner.send(body, delay).await
    }

    async fn send_batch(
        &self,
        bodies: &[String],
    ) -> Result<Vec<Result<String, QueueError>>, QueueError> {
        self.inner.send_batch(bodies).await
    }

    async fn receive(
        &self,
        max: usize,
        visibility: Duration,
        wait: Duration,
    ) -> Result<Vec<Delivery>, QueueError> {
        let deliveries = self.inner.receive(max, visibility, wait).await?;
        if let Some(faults) = &self.faults {
            for d in &deliveries {
                let Ok(msg) = crate::job::message::parse(&d.body) else {
                    continue;
                };
                faults.note_receipt(&d.receipt.fingerprint(), &msg.job_id);
                if faults
                    .fire(&msg.job_id, FaultPoint::QueueReceiveDuplicate)
                    .is_some()
                {
                    let _ = self.inner.send(&d.body, Duration::ZERO).await;
                }
            }
        }
        let rate = self.plan().duplicate;
        for d in &deliveries {
            if rate <= 0.0 {
                break;
            }
            let fresh = {
                let mut copied = self.copied.lock().expect("copies lock");
                if copied.len() > 100_000 {
                    copied.clear();
                }
                !copied.contains(&d.body)
            };
            if fresh && self.fires(&d.message_id, rate, 2) {
                self.copied
                    .lock()
                    .expect("copies lock")
                    .insert(d.body.clone());
                let _ = self.inner.send(&d.body, Duration::ZERO).await;
            }
        }
        Ok(deliveries)
    }

    async fn change_visibility(
        &self,
        receipt: &ReceiptHandle,
        timeout: Duration,
    ) -> Result<(), QueueError> {
        if self.fires_for(receipt, FaultPoint::QueueChangeVisibility)
            || self.fires(&receipt.fingerprint(), self.plan().visibility_timeout, 1)
        {
            return Err(QueueError::Timeout);
        }
        self.inner.change_visibility(receipt, timeout).await
    }

    async fn change_visibility_batch(
        &self,
        entries: &[(ReceiptHandle, Duration)],
    ) -> Result<BatchResult, QueueError> {
        let (dropped, kept) = self.drop_changes(entries);
        let results = self.inner.change_visibility_batch(&kept).await?;
        Ok(merge_dropped(dropped, results))
    }

    async fn change_visibility_all(
        &self,
        entries: Vec<(ReceiptHandle, Duration)>,
    ) -> Vec<Result<(), QueueError>> {
        let (dropped, kept) = self.drop_changes(&entries);
        merge_dropped(dropped, self.inner.change_visibility_all(kept).await)
    }

    async fn delete(&self, receipt: &ReceiptHandle) -> Result<(), QueueError> {
        self.delete_known(receipt).await.map(|_| ())
    }

    /// A queue with a drill's faults, or with visibility changes failing at a rate, changes
    /// visibility apart, where those faults are injected.
    fn visibility_in(
        &self,
        ledger: &Ledger,
        receipt: &ReceiptHandle,
        timeout: Duration,
    ) -> Option<crate::ledger::LedgerMessage> {
        if self.faults.is_some() || self.plan().visibility_timeout > 0.0 {
            return None;
        }
        self.inner.visibility_in(ledger, receipt, timeout)
    }

    async fn delete_known(&self, receipt: &ReceiptHandle) -> Result<Deleted, QueueError> {
        if self.fires_for(receipt, FaultPoint::QueueDelete)
            || self.fires(&receipt.fingerprint(), self.plan().delete_timeout, 0)
        {
            return Err(QueueError::Timeout);
        }
        if self.fires_for(receipt, FaultPoint::QueueDeleteStaleHandle) {
            return Ok(Deleted::Reported);
        }
        self.inner.delete_known(receipt).await
    }

    /// A drill's per-job faults arm a delete by the time it is made: its queue deletes apart.
    /// A rate is drawn here, once for the delete to come.
    fn delete_plan(&self, ledger: &Ledger, receipt: &ReceiptHandle) -> DeletePlan {
        if self.faults.is_some() {
            return DeletePlan::Apart;
        }
        if self.fires(&receipt.fingerprint(), self.plan().delete_timeout, 0) {
            return DeletePlan::Injected(Err(QueueError::Timeout));
        }
        self.inner.delete_plan(ledger, receipt)
    }

    async fn delete_batch(&self, receipts: &[ReceiptHandle]) -> Result<BatchResult, QueueError> {
        let mut out = Vec::with_capacity(receipts.len());
        for receipt in receipts {
            out.push(self.delete(receipt).await);
        }
        Ok(out)
    }

    async fn depth(&self) -> Result<Depth, QueueError> {
        self.inner.depth().await
    }

    fn dead_letters(&self) -> Option<Self> {
        // Dead letters are inspected by hand: no fault reaches them.
        self.inner.dead_letters().map(FaultyQueue::new)
    }
}
