//! The queue contract, run against the embedded queue (on SQLite and PostgreSQL) and an SQS
//! protocol peer (`moto_server`). Where moto is more lenient than SQS — it lets an outdated
//! receipt handle delete or extend a message — the test says so and asserts SQS's behaviour on
//! the embedded queue only.

use std::collections::HashSet;
use std::time::Duration;

use fenceline::queue::{AnyQueue, Delivery, Queue, QueueError, ReceiptHandle};

use crate::helpers::{fresh_queue, QueueKind, TestQueue};
use crate::on_every_queue;

const SHORT: Duration = Duration::from_secs(2);

on_every_queue!(
    a_received_message_stays_hidden_for_its_visibility_then_returns_with_a_new_handle,
    a_visibility_change_starts_when_made,
    a_delete_with_the_current_handle_removes_the_message,
    batches_answer_each_entry,
    many_visibility_changes_answer_each_entry_in_order,
    a_message_received_too_often_moves_to_the_dead_letter_queue,
    a_malformed_handle_is_refused,
    a_visibility_change_past_the_twelve_hour_cap_is_an_error_not_clamped,
    depth_counts_visible_and_in_flight_messages,
    a_long_poll_after_a_full_receive_waits_for_the_next_message,
);

async fn receive_one(queue: &AnyQueue, visibility: Duration) -> Option<fenceline::queue::Delivery> {
    let mut got = queue
        .receive(1, visibility, Duration::from_secs(1))
        .await
        .expect("receive");
    assert!(got.len() <= 1);
    got.pop()
}

async fn a_received_message_stays_hidden_for_its_visibility_then_returns_with_a_new_handle(
    kind: QueueKind,
) {
    let t = fresh_queue(kind, 10).await;
    let sent = t
        .queue
        .send(r#"{"job_id":"a"}"#, Duration::ZERO)
        .await
        .unwrap();
    let first = receive_one(&t.queue, SHORT).await.expect("the message");
    assert_eq!(first.message_id, sent);
    assert_eq!(first.body, r#"{"job_id":"a"}"#);
    assert_eq!(first.receive_count, 1);
    assert!(first.first_receive_at_ms.is_some());
    assert!(
        receive_one(&t.queue, SHORT).await.is_none(),
        "hidden while visible"
    );
    tokio::time::sleep(Duration::from_millis(2300)).await;
    let second = receive_one(&t.queue, SHORT).await.expect("visible again");
    assert_eq!(second.message_id, sent);
    assert_eq!(second.receive_count, 2);
    assert_ne!(
        second.receipt, first.receipt,
        "every receive has its own handle"
    );
}

async fn a_visibility_change_starts_when_made(kind: QueueKind) {
    let t = fresh_queue(kind, 10).await;
    t.queue.send("m", Duration::ZERO).await.unwrap();
    let d = receive_one(&t.queue, Duration::from_secs(1)).await.unwrap();
    t.queue
        .change_visibility(&d.receipt, Duration::from_secs(3))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        receive_one(&t.queue, SHORT).await.is_none(),
        "the change replaced the first timeout"
    );
    tokio::time::sleep(Duration::from_millis(2000)).await;
    assert!(
        receive_one(&t.queue, SHORT).await.is_some(),
        "and expired on its own"
    );
}

async fn a_delete_with_the_current_handle_removes_the_message(kind: QueueKind) {
    let t = fresh_queue(kind, 10).await;
    t.queue.send("m", Duration::ZERO).await.unwrap();
    let d = receive_one(&t.queue, Duration::from_secs(1)).await.unwrap();
    t.queue.delete(&d.receipt).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(receive_one(&t.queue, SHORT).await.is_none());
    // Deleting again is harmless.
    t.queue.delete(&d.receipt).await.unwrap();
    if let (QueueKind::EmbeddedSqlite | QueueKind::EmbeddedPostgres, AnyQueue::Embedded(q)) =
        (kind, &t.queue)
    {
        // A standard queue may still deliver a copy after deletion; drills need that copy.
        q.deliver_copy(&d.message_id, "m", Duration::ZERO)
            .await
            .unwrap();
        let copy = receive_one(&t.queue, SHORT)
            .await
            .expect("a copy after deletion");
        assert_eq!(copy.message_id, d.message_id);
    }
}

/// Receives until `n` messages came back or `tries` receives were made.
async fn receive_up_to(t: &TestQueue, n: usize, tries: usize) -> Vec<Delivery> {
    let mut received = Vec::new();
    for _ in 0..tries {
        received.extend(
            t.queue
                .receive(10, SHORT, Duration::from_secs(1))
                .await
                .unwrap(),
        );
        if received.len() == n {
            break;
        }
    }
    received
}

async fn batches_answer_each_entry(kind: QueueKind) {
    let t = fresh_queue(kind, 10).await;
    let bodies: Vec<String> = (0..3).map(|i| format!("m{i}")).collect();
    let sent = t.queue.send_batch(&bodies).await.unwrap();
    assert_eq!(sent.len(), 3);
    assert!(sent.iter().all(Result::is_ok));
    let received = receive_up_to(&t, 3, 5).await;
    let bodies_seen: HashSet<_> = received.iter().map(|d| d.body.clone()).collect();
    assert_eq!(bodies_seen, bodies.iter().cloned().collect());

    let mut changes: Vec<_> = received
        .iter()
        .map(|d| (d.receipt.clone(), SHORT))
        .collect();
    changes.push((ReceiptHandle::new("not-a-handle".into()), SHORT));
    let changed = t.queue.change_visibility_batch(&changes).await.unwrap();
    assert_eq!(changed.len(), 4);
    assert!(changed[..3].iter().all(Result::is_ok), "{changed:?}");
    assert!(changed[3].is_err());

    let receipts: Vec<_> = received.iter().map(|d| d.receipt.clone()).collect();
    let deleted = t.queue.delete_batch(&receipts).await.unwrap();
    assert!(deleted.iter().all(Result::is_ok), "{deleted:?}");
    let over = vec![ReceiptHandle::new("x".into()); 11];
    assert!(matches!(
        t.queue.delete_batch(&over).await,
        Err(QueueError::Invalid(_))
    ));
}

/// What the heartbeat sends each round: more changes than one request carries, with a bad
/// handle among them, each answered in its place.
async fn many_visibility_changes_answer_each_entry_in_order(kind: QueueKind) {
    let t = fresh_queue(kind, 10).await;
    let bodies: Vec<String> = (0..23).map(|i| format!("m{i}")).collect();
    assert!(t.queue.send_all(&bodies).await.iter().all(Result::is_ok));
    let received = receive_up_to(&t, bodies.len(), 20).await;
    assert_eq!(received.len(), bodies.len());
    let mut changes: Vec<_> = received
        .iter()
        .map(|d| (d.receipt.clone(), Duration::from_secs(60)))
        .collect();
    changes.insert(12, (ReceiptHandle::new("not-a-handle".into()), SHORT));
    let changed = t.queue.change_visibility_all(changes).await;
    assert_eq!(changed.len(), bodies.len() + 1);
    for (i, result) in changed.iter().enumerate() {
        assert_eq!(result.is_err(), i == 12, "entry {i}: {changed:?}");
    }
    // Extended past the receive's visibility: nothing comes back after it lapses.
    tokio::time::sleep(SHORT + Duration::from_millis(500)).await;
    assert!(receive_one(&t.queue, SHORT).await.is_none(), "extended");
    if kind == QueueKind::Sqs {
        // moto accepts a deleted message's handle; SQS and the embedded queue refuse it.
        return;
    }
    // A deleted message among live ones is refused in its place, the others still change.
    t.queue.delete(&received[5].receipt).await.unwrap();
    let changes = received
        .iter()
        .map(|d| (d.receipt.clone(), Duration::from_secs(60)))
        .collect();
    let changed = t.queue.change_visibility_all(changes).await;
    for (i, result) in changed.iter().enumerate() {
        assert_eq!(result.is_err(), i == 5, "entry {i}: {changed:?}");
    }
}

async fn a_message_received_too_often_moves_to_the_dead_letter_queue(kind: QueueKind) {
    let t = fresh_queue(kind, 2).await;
    let sent = t.queue.send("poison", Duration::ZERO).await.unwrap();
    for count in 1..=2 {
        let d = receive_one(&t.queue, Duration::ZERO)
            .await
            .expect("delivered");
        assert_eq!(d.receive_count, count);
    }
    assert!(
        receive_one(&t.queue, Duration::ZERO).await.is_none(),
        "redriven"
    );
    let dlq = t.queue.dead_letters().expect("a dead-letter queue");
    let dead = receive_one(&dlq, SHORT)
        .await
        .expect("in the dead-letter queue");
    assert_eq!(dead.message_id, sent);
    assert_eq!(dead.body, "poison");
    assert!(dlq.dead_letters().is_none());
}

async fn a_malformed_handle_is_refused(kind: QueueKind) {
    let t = fresh_queue(kind, 10).await;
    t.queue.send("m", Duration::ZERO).await.unwrap();
    let bogus = ReceiptHandle::new("garbage".into());
    let changed = t.queue.change_visibility(&bogus, SHORT).await;
    assert_eq!(changed, Err(QueueError::InvalidReceiptHandle));
}

async fn a_visibility_change_past_the_twelve_hour_cap_is_an_error_not_clamped(kind: QueueKind) {
    let t = fresh_queue(kind, 10).await;
    t.queue.send("m", Duration::ZERO).await.unwrap();
    let d = receive_one(&t.queue, SHORT).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let refused = t
        .queue
        .change_visibility(&d.receipt, Duration::from_secs(12 * 3600))
        .await;
    assert_eq!(refused, Err(QueueError::VisibilityCapExceeded));
    // Within the cap it works.
    t.queue
        .change_visibility(&d.receipt, Duration::from_secs(3600))
        .await
        .unwrap();
}

async fn depth_counts_visible_and_in_flight_messages(kind: QueueKind) {
    let t = fresh_queue(kind, 10).await;
    for i in 0..3 {
        t.queue
            .send(&format!("m{i}"), Duration::ZERO)
            .await
            .unwrap();
    }
    receive_one(&t.queue, Duration::from_secs(30))
        .await
        .unwrap();
    let depth = t.queue.depth().await.unwrap();
    assert_eq!((depth.visible, depth.in_flight), (2, 1));
}

/// SQS semantics that moto does not reproduce (it honours outdated handles): asserted on the
/// embedded queue, on both databases.
mod stale_handles {
    use super::*;

    async fn an_outdated_handle_deletes_nothing_and_cannot_extend(kind: QueueKind) {
        let t = fresh_queue(kind, 10).await;
        t.queue.send("m", Duration::ZERO).await.unwrap();
        let old = receive_one(&t.queue, Duration::ZERO).await.unwrap();
        let new = receive_one(&t.queue, SHORT).await.expect("received again");
        assert_eq!(
            t.queue.change_visibility(&old.receipt, SHORT).await,
            Err(QueueError::InvalidReceiptHandle)
        );
        // Reported as success, but the message remains: only the ledger makes this harmless.
        t.queue.delete(&old.receipt).await.unwrap();
        tokio::time::sleep(Duration::from_millis(2200)).await;
        let again = receive_one(&t.queue, SHORT).await.expect("still there");
        assert_eq!(again.message_id, new.message_id);
        assert_eq!(again.receive_count, 3);
        // A message back in view is not in flight for the handle that hid it.
        tokio::time::sleep(Duration::from_millis(2200)).await;
        assert_eq!(
            t.queue.change_visibility(&again.receipt, SHORT).await,
            Err(QueueError::MessageNotInflight)
        );
        assert!(t.ledger.is_some());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn an_outdated_handle_deletes_nothing_on_the_embedded_queue_on_sqlite() {
        an_outdated_handle_deletes_nothing_and_cannot_extend(QueueKind::EmbeddedSqlite).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn an_outdated_handle_deletes_nothing_on_the_embedded_queue_on_postgres() {
        if crate::helpers::skip_postgres() {
            return;
        }
        an_outdated_handle_deletes_nothing_and_cannot_extend(QueueKind::EmbeddedPostgres).await
    }
}

/// A receive that got all it asked for, then one that finds nothing at once: the second still
/// waits for a message sent while it waits, rather than coming back empty.
async fn a_long_poll_after_a_full_receive_waits_for_the_next_message(kind: QueueKind) {
    let t = fresh_queue(kind, 10).await;
    t.queue
        .send(r#"{"job_id":"a"}"#, Duration::ZERO)
        .await
        .unwrap();
    let first = receive_one(&t.queue, SHORT).await.expect("the message");
    let queue = t.queue.clone();
    let sender = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(400)).await;
        queue
            .send(r#"{"job_id":"b"}"#, Duration::ZERO)
            .await
            .unwrap()
    });
    let started = std::time::Instant::now();
    let got = t
        .queue
        .receive(1, SHORT, Duration::from_secs(5))
        .await
        .unwrap();
    let sent = sender.await.unwrap();
    assert_eq!(got.len(), 1, "the message sent during the wait");
    assert_eq!(got[0].message_id, sent);
    assert_ne!(got[0].message_id, first.message_id);
    assert!(started.elapsed() >= Duration::from_millis(300));
}
