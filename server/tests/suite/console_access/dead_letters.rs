//! Dead letters replayed or dropped from the console after their jobs are inspected.

use super::*;
use fenceline::job::detail;

on_both_backends!(
    an_operator_replays_dead_letters_after_inspection_from_the_console,
    one_dead_letter_is_replayed_after_inspection_or_dropped_by_an_operator_of_its_tenant,
);

async fn an_operator_replays_dead_letters_after_inspection_from_the_console(db: Db) {
    use fenceline::job::message::JobMessage;
    use fenceline::queue::embedded::EmbeddedQueue;
    use fenceline::queue::Queue;
    let app = spawn_app(db).await;
    let ledger = &app.ledger;
    let workable = create(ledger, new_job("acme", "dlq-workable", json!(1))).await;
    let (uncertain, _, _) = unknown_job(ledger, "acme", "dlq-unknown").await;
    // The console's queue: the embedded default, `jobs`, 5 receives before the dead letters.
    let queue = EmbeddedQueue::new(ledger.clone(), "jobs", 5);
    for id in [&workable, &uncertain] {
        queue
            .send(&JobMessage::body(id, "acme"), Duration::ZERO)
            .await
            .unwrap();
    }
    for _ in 0..8 {
        let _ = queue
            .receive(10, Duration::ZERO, Duration::from_millis(50))
            .await
            .unwrap();
    }
    let acme = ["acme".to_owned()];
    let mut scoped = signed_in(&app, "sam", Role::Operator, Some(&acme)).await;
    let page = scoped.page("/dlq").await;
    assert!(
        !page.contains("action=\"/dlq/replay\""),
        "a tenant-limited operator gets no replay"
    );
    let csrf = token_in(&page).unwrap();
    let refused = scoped
        .post("/dlq/replay", &[("csrf", &csrf), ("reason", "mine only")])
        .await;
    assert_eq!(refused.status(), 403);
    let mut vera = signed_in(&app, "vera", Role::Viewer, None).await;
    let refused = vera.replay_dead_letters("look").await;
    assert_eq!(refused.status(), 403);

    let mut olga = signed_in(&app, "olga", Role::Operator, None).await;
    let page = olga.page("/dlq").await;
    assert!(
        page.contains(&workable) && page.contains(&uncertain),
        "{page}"
    );
    assert!(page.contains("2 letters of 2 jobs or messages."), "{page}");
    assert!(page.contains("action=\"/dlq/replay\""));
    let outbox_before = ledger.outbox_pending().await.unwrap();
    let response = olga
        .replay_dead_letters("the provider outage is over")
        .await;
    assert_eq!(location(&response), "/dlq");
    let page = olga.page("/dlq").await;
    assert!(page.contains("1 re-dispatched"), "{page}");
    assert!(page.contains("1 kept until a decision"), "{page}");
    assert_eq!(ledger.outbox_pending().await.unwrap(), outbox_before + 1);
    let audit: Vec<(String, Option<String>)> = ledger
        .audit_entries(&fenceline::ledger::AuditFilter {
            actor: Some("operator:olga".into()),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.action, e.job_id))
        .collect();
    assert!(
        audit.contains(&("dlq_redispatched".into(), Some(workable.clone()))),
        "{audit:?}"
    );
    assert!(audit.contains(&("dlq_kept_awaiting_decision".into(), Some(uncertain.clone()))));
}

async fn one_dead_letter_is_replayed_after_inspection_or_dropped_by_an_operator_of_its_tenant(
    db: Db,
) {
    use fenceline::job::message::JobMessage;
    use fenceline::queue::embedded::EmbeddedQueue;
    use fenceline::queue::Queue;
    let app = spawn_app(db).await;
    let ledger = &app.ledger;
    let job_id = create(ledger, new_job("globex", "dlq-drop", json!(1))).await;
    let queue = EmbeddedQueue::new(ledger.clone(), "jobs", 5);
    queue
        .send(&JobMessage::body(&job_id, "globex"), Duration::ZERO)
        .await
        .unwrap();
    for _ in 0..8 {
        let _ = queue
            .receive(10, Duration::ZERO, Duration::from_millis(50))
            .await
            .unwrap();
    }
    let letters = ledger.embedded_dead_letters("jobs-dlq", 10).await.unwrap();
    assert_eq!(letters.len(), 1);
    let message_id = letters[0].message_id.clone();
    let path = format!("/dlq/{message_id}/drop");

    let acme = ["acme".to_owned()];
    let mut sam = signed_in(&app, "sam", Role::Operator, Some(&acme)).await;
    assert!(
        !sam.page("/dlq").await.contains(&job_id),
        "another tenant's letter is not shown"
    );
    let csrf = sam.token("/dlq").await;
    let refused = sam
        .post(&path, &[("csrf", &csrf), ("reason", "not mine")])
        .await;
    assert_eq!(refused.status(), 404);

    let mut olga = signed_in(&app, "olga", Role::Operator, None).await;
    let page = olga.page("/dlq").await;
    assert!(page.contains(&format!("formaction=\"{path}\"")));
    let csrf = token_in(&page).unwrap();
    let response = olga
        .post(
            &path,
            &[("csrf", &csrf), ("reason", "duplicate of a finished run")],
        )
        .await;
    assert_eq!(location(&response), "/dlq");
    let page = olga.page("/dlq").await;
    assert!(page.contains("dropped; its job is unchanged"), "{page}");
    assert!(page.contains("The dead-letter queue is empty."));
    assert!(ledger
        .embedded_dead_letters("jobs-dlq", 10)
        .await
        .unwrap()
        .is_empty());
    let events = ledger.events(&job_id, 0, 100).await.unwrap();
    assert!(events.iter().any(|e| e
        .detail_as::<detail::Replayed>()
        .is_some_and(|d| d.action == "dropped_by_operator")));
    let audit = ledger
        .audit_entries(&fenceline::ledger::AuditFilter {
            action: Some("dlq_dropped".into()),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(audit.len(), 1);
    assert_eq!(audit[0].reason, "duplicate of a finished run");
    let again = olga
        .post(&path, &[("csrf", &csrf), ("reason", "again")])
        .await;
    assert_eq!(location(&again), "/dlq");
    assert!(olga.page("/dlq").await.contains("no longer there"));

    // One letter replayed after inspection: a workable job goes again, an unknown one waits.
    let (uncertain, _, _) = unknown_job(ledger, "globex", "dlq-uncertain").await;
    for id in [&job_id, &uncertain] {
        queue
            .send(&JobMessage::body(id, "globex"), Duration::ZERO)
            .await
            .unwrap();
    }
    for _ in 0..8 {
        let _ = queue
            .receive(10, Duration::ZERO, Duration::from_millis(50))
            .await
            .unwrap();
    }
    let letters = ledger.embedded_dead_letters("jobs-dlq", 10).await.unwrap();
    assert_eq!(letters.len(), 2);
    let letter_of = |id: &str| {
        letters
            .iter()
            .find(|l| l.body.contains(id))
            .map(|l| l.message_id.clone())
            .unwrap()
    };
    let outbox_before = ledger.outbox_pending().await.unwrap();
    olga.replay_dead_letter(&letter_of(&uncertain), "try").await;
    assert!(olga.page("/dlq").await.contains("needs a decision first"));
    assert_eq!(
        ledger
            .embedded_dead_letters("jobs-dlq", 10)
            .await
            .unwrap()
            .len(),
        2,
        "kept"
    );
    olga.replay_dead_letter(&letter_of(&job_id), "outage over")
        .await;
    assert!(olga
        .page("/dlq")
        .await
        .contains("sent again with the same id"));
    assert_eq!(ledger.outbox_pending().await.unwrap(), outbox_before + 1);
    assert_eq!(
        ledger
            .embedded_dead_letters("jobs-dlq", 10)
            .await
            .unwrap()
            .len(),
        1
    );
}
