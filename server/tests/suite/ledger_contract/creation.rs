//! Creating jobs: idempotency by key and request digest, and a job's first send in its own
//! transaction.

use super::*;
use fenceline::job::detail;

on_both_backends!(
    a_new_job_on_a_queue_in_the_ledger_is_sent_in_its_own_transaction,
    the_same_key_and_request_return_the_same_job_and_a_different_request_conflicts,
    a_client_retrying_the_same_request_in_a_loop_does_not_grow_the_timeline,
    a_conflicting_request_repeated_in_a_loop_is_recorded_once_per_digest,
);

/// With the embedded queue in the ledger's database, a new job's message goes in with the job:
/// receivable at once with no dispatcher, `dispatched` on its timeline right after
/// `job_created` naming that message, its outbox row recorded as sent. An idempotent replay
/// sends nothing more, and a drill's job still waits for its dispatcher lane. Alone and in a
/// group commit.
async fn a_new_job_on_a_queue_in_the_ledger_is_sent_in_its_own_transaction(db: Db) {
    use fenceline::job::EventKind;
    use fenceline::ledger::Ledger;
    use fenceline::queue::{embedded::EmbeddedQueue, Queue};
    for group_commit in [false, true] {
        let options = fenceline::ledger::LedgerOptions {
            direct_queue: Some("jobs".into()),
            group_commit,
            ..crate::helpers::options()
        };
        let (ledger, test_db) = crate::helpers::fresh_ledger_with(db, &options).await;
        let queue = EmbeddedQueue::new(ledger.clone(), "jobs", 5);
        let job_id = create(&ledger, new_job("acme", "direct", json!({"doc": 1}))).await;
        let again = create(&ledger, new_job("acme", "direct", json!({"doc": 1}))).await;
        assert_eq!(again, job_id, "group commit {group_commit}");
        let mut drill = new_job("acme", "drill", json!({"doc": 2}));
        drill.drill_run = Some("run-1".into());
        let drill_id = create(&ledger, drill).await;

        // No dispatcher has run: the one message on the queue is the job's.
        let got = queue
            .receive(10, Duration::from_secs(30), Duration::from_millis(200))
            .await
            .unwrap();
        assert_eq!(got.len(), 1, "group commit {group_commit}: {got:?}");
        let message: fenceline::job::message::JobMessage =
            serde_json::from_str(&got[0].body).unwrap();
        assert_eq!(
            (message.job_id.as_str(), message.tenant.as_str()),
            (job_id.as_str(), "acme")
        );
        let events = ledger.events(&job_id, 0, 10).await.unwrap();
        let seqs: Vec<(i64, EventKind)> = events.iter().map(|e| (e.seq, e.kind)).collect();
        assert_eq!(
            seqs,
            [
                (1, EventKind::JobCreated),
                (2, EventKind::Dispatched),
                (3, EventKind::IdempotencyHit)
            ],
            "group commit {group_commit}"
        );
        let sent = events[1].detail_as::<detail::Dispatched>().unwrap();
        assert_eq!(sent.message_id, got[0].message_id.as_str());
        assert_eq!(sent.queue, "embedded:jobs");
        assert_eq!(sent.reason, "created");
        // The job's outbox row is sent; the drill's waits for its lane, and only there.
        assert_eq!(ledger.outbox_pending().await.unwrap(), 1);
        let lock = Duration::from_secs(30);
        assert!(ledger.claim_outbox(10, lock, "").await.unwrap().is_empty());
        let drills = ledger.claim_outbox(10, lock, "run-1").await.unwrap();
        assert_eq!(
            drills.iter().map(|i| i.job_id.as_str()).collect::<Vec<_>>(),
            [drill_id.as_str()]
        );
        // The next event of the job follows them.
        let later = Ledger::note_event(
            &ledger,
            &job_id,
            fenceline::ledger::NewEvent::new(EventKind::DispatchFailed, &Actor::System),
        );
        later.await.unwrap();
        let last = ledger.events(&job_id, 0, 10).await.unwrap();
        assert_eq!(last.last().map(|e| e.seq), Some(4));
        ledger.close().await;
        drop(test_db);
    }
}

async fn the_same_key_and_request_return_the_same_job_and_a_different_request_conflicts(db: Db) {
    let (ledger, _db) = fresh_ledger(db).await;
    let actor = Actor::Api("acme".into());
    let first = ledger
        .create_job(new_job("acme", "k1", json!({"doc": 1})), &actor)
        .await
        .unwrap();
    assert!(matches!(first, Created::New(_)));
    let again = ledger
        .create_job(new_job("acme", "k1", json!({"doc": 1})), &actor)
        .await
        .unwrap();
    assert!(matches!(again, Created::Existing(_)));
    assert_eq!(again.job().job_id, first.job().job_id);

    let conflict = ledger
        .create_job(new_job("acme", "k1", json!({"doc": 2})), &actor)
        .await;
    match conflict {
        Err(LedgerError::IdempotencyConflict { existing }) => {
            assert_eq!(existing, first.job().job_id)
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    // The same key under another tenant is another job.
    let other = ledger
        .create_job(new_job("globex", "k1", json!({"doc": 2})), &actor)
        .await
        .unwrap();
    assert!(matches!(other, Created::New(_)));
    assert_ne!(other.job().job_id, first.job().job_id);

    assert_eq!(
        kinds(&ledger, &first.job().job_id).await,
        ["job_created", "idempotency_hit", "idempotency_conflict"]
    );
    assert_eq!(
        ledger.outbox_pending().await.unwrap(),
        2,
        "one outbox row per new job"
    );
    let (input, _) = ledger
        .job_input(&first.job().job_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(input, json!({"doc": 1}));
}

async fn a_client_retrying_the_same_request_in_a_loop_does_not_grow_the_timeline(db: Db) {
    let (ledger, _db) = fresh_ledger(db).await;
    let job_id = create(&ledger, new_job("acme", "retried", json!(1))).await;
    for _ in 0..20 {
        let again = ledger
            .create_job(
                new_job("acme", "retried", json!(1)),
                &Actor::Api("t".into()),
            )
            .await
            .unwrap();
        assert!(matches!(again, Created::Existing(ref j) if j.job_id == job_id));
    }
    let hits = kinds(&ledger, &job_id)
        .await
        .into_iter()
        .filter(|k| k == "idempotency_hit")
        .count();
    assert_eq!(
        hits, 1,
        "one idempotent hit a minute is on the timeline, not one per retry"
    );
}

/// A key reused with another request is refused every time, but recorded once for each
/// request it was reused with: fifty identical conflicting requests, twenty of them at once,
/// add one `idempotency_conflict`, and another request one more; the timeline stays numbered
/// without a hole.
async fn a_conflicting_request_repeated_in_a_loop_is_recorded_once_per_digest(db: Db) {
    let (ledger, _db) = fresh_ledger(db).await;
    let job_id = create(&ledger, new_job("acme", "reused", json!(1))).await;
    let conflict = |input: i64| {
        let ledger = ledger.clone();
        async move {
            let refused = ledger
                .create_job(
                    new_job("acme", "reused", json!(input)),
                    &Actor::Api("t".into()),
                )
                .await;
            assert!(
                matches!(refused, Err(LedgerError::IdempotencyConflict { .. })),
                "{refused:?}"
            );
        }
    };
    let mut at_once = tokio::task::JoinSet::new();
    for _ in 0..20 {
        at_once.spawn(conflict(2));
    }
    at_once.join_all().await;
    for _ in 0..30 {
        conflict(2).await;
    }
    let conflicts = |kinds: Vec<String>| {
        kinds
            .into_iter()
            .filter(|k| k == "idempotency_conflict")
            .count()
    };
    assert_eq!(
        conflicts(kinds(&ledger, &job_id).await),
        1,
        "fifty tries of one conflicting request"
    );
    for _ in 0..10 {
        conflict(3).await;
    }
    assert_eq!(
        conflicts(kinds(&ledger, &job_id).await),
        2,
        "one more for another request"
    );
    let events = ledger.all_events(&job_id).await.unwrap();
    let seqs: Vec<i64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=events.len() as i64).collect::<Vec<_>>());
    assert_eq!(
        ledger.event_count(&job_id).await.unwrap(),
        events.len() as i64,
        "no number reserved and left empty"
    );
}
