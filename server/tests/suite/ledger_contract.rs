//! The ledger contract, run against SQLite and PostgreSQL alike.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use fenceline::job::{Actor, JobState};
use fenceline::ledger::{
    AttemptOutcome, Created, Decision, Failure, JobFilter, LedgerError, Refusal, ReplayPolicy,
};
use serde_json::json;

use crate::helpers::{as_owner, assert_gap_free, create, fresh_ledger, kinds, new_job, Db};
use crate::on_both_backends;

const LONG: Duration = Duration::from_secs(60);

fn refusal(result: Result<impl std::fmt::Debug, LedgerError>) -> Refusal {
    match result {
        Err(LedgerError::Refused { refusal, .. }) => refusal,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

on_both_backends!(
    every_statement_of_the_catalogue_prepares,
    a_group_commit_at_its_cap_carries_every_kind_of_write,
    the_same_key_and_request_return_the_same_job_and_a_different_request_conflicts,
    a_job_runs_from_claim_to_one_accepted_result_with_every_step_on_its_timeline,
    thirty_two_racing_claims_make_exactly_one_owner,
    an_owner_fenced_by_a_recovery_claim_can_neither_renew_nor_start_nor_accept,
    an_accept_after_the_lease_or_the_deadline_is_refused_even_at_the_right_epoch,
    an_uncertain_attempt_needs_a_recorded_decision_before_another_attempt,
    a_recovery_with_no_attempt_in_flight_authorizes_a_retry,
    a_live_owner_holds_off_claims_and_recoveries,
    retryable_failures_back_off_and_end_in_failed_terminal_when_the_budget_is_spent,
    a_fatal_failure_is_terminal_at_once,
    many_leases_renew_in_one_call_and_each_refusal_says_why,
    a_lease_renewal_leaves_no_number_for_a_write_that_may_never_come,
    two_results_of_one_owner_sent_at_once_accept_the_one_answered,
    a_commit_whose_answer_is_lost_writes_nothing_twice,
    an_event_for_no_job_is_not_found_on_every_path,
    on_a_queue_in_the_ledger_a_lease_and_its_visibility_renew_in_one_transaction,
    only_a_replay_policy_job_may_be_retried_by_the_policy,
    an_operator_can_resolve_an_unknown_job_as_succeeded_with_evidence,
    the_database_refuses_illegal_states_even_from_raw_sql,
    jobs_and_timelines_page_by_keyset,
    a_timeline_folds_into_the_same_runs_read_forward_back_or_around_any_event,
    a_worker_claims_and_starts_in_one_step_with_its_delivery_on_the_timeline,
    terminal_records_older_than_the_cutoff_are_pruned_and_live_jobs_never_are,
    rolled_up_hours_go_with_retention_once_no_chart_reads_them,
    a_worker_is_seen_by_its_reports_and_by_the_jobs_it_owns,
    a_release_after_the_deadline_is_refused_and_the_job_expires,
    a_client_retrying_the_same_request_in_a_loop_does_not_grow_the_timeline,
    a_conflicting_request_repeated_in_a_loop_is_recorded_once_per_digest,
    a_new_job_on_a_queue_in_the_ledger_is_sent_in_its_own_transaction,
    an_accepted_result_deletes_its_embedded_delivery_in_its_own_transaction,
    several_workers_claims_in_one_commit_each_take_their_own_worker_and_lease,
);

/// Claims straight from deliveries by several workers at once, so that commits carry claims
/// of different workers with different leases, two copies of one job's message, and messages
/// naming another tenant: each job has exactly one owner, the one its claim answered, under
/// that worker's own lease; a claim for the wrong tenant takes nothing and fails no neighbour.
async fn several_workers_claims_in_one_commit_each_take_their_own_worker_and_lease(db: Db) {
    use fenceline::job::EventKind;
    use fenceline::ledger::NewEvent;
    const JOBS: usize = 40;
    let (ledger, _db) = fresh_ledger(db).await;
    let mut ids = Vec::new();
    for i in 0..JOBS {
        ids.push(create(&ledger, new_job("acme", &format!("shared-{i}"), json!(i))).await);
    }
    // Each job: two workers' copies of its message (the second worker's lease twice the
    // first's); every fifth also a copy naming another tenant.
    let mut tasks = tokio::task::JoinSet::new();
    for (i, id) in ids.iter().enumerate() {
        let mut claims = vec![
            (format!("w{}", i % 4), "acme", 30 + i as u64),
            (format!("w{}", (i + 1) % 4 + 4), "acme", 2 * (30 + i as u64)),
        ];
        if i % 5 == 0 {
            claims.push(("w-other".into(), "globex", 45));
        }
        for (worker, tenant, secs) in claims {
            let (ledger, id) = (ledger.clone(), id.clone());
            tasks.spawn(async move {
                let received =
                    NewEvent::new(EventKind::DeliveryReceived, &Actor::Worker(worker.clone()));
                let lease = Duration::from_secs(secs);
                if tenant != "acme" {
                    let got = ledger
                        .claim_received(&id, tenant, &worker, lease, &received, "stub")
                        .await;
                    assert!(
                        matches!(got, Ok(None)),
                        "{id} claimed for {tenant}: {:?}",
                        got.map(|g| g.map(|(job, ..)| job))
                    );
                    return None;
                }
                // As the worker does: in a group commit, or alone if the job's row was busy.
                match ledger
                    .claim_delivered(&id, tenant, &worker, lease, &received, "stub")
                    .await
                {
                    Ok((claimed, attempt, _)) => Some((id, worker, lease, claimed, attempt)),
                    Err(LedgerError::Refused { .. }) => None,
                    Err(e) => panic!("{id} by {worker}: {e}"),
                }
            });
        }
    }
    // A lease's end and the claim's time are two readings of the database clock.
    let grants = |granted: i64, lease: Duration| (granted - lease.as_micros() as i64).abs() < 1_000;
    let mut owners: HashMap<String, Vec<(String, Duration, i64)>> = HashMap::new();
    while let Some(joined) = tasks.join_next().await {
        if let Some((id, worker, lease, claimed, attempt)) = joined.unwrap() {
            let granted = claimed.owner_until - claimed.at;
            assert!(
                grants(granted, lease),
                "{db:?}: {id} by {worker}: {granted} µs granted for {lease:?}"
            );
            assert_eq!((claimed.epoch, attempt.attempt_no), (1, 1), "{db:?}: {id}");
            owners
                .entry(id)
                .or_default()
                .push((worker, lease, claimed.at));
        }
    }
    let stats = ledger.group_stats();
    assert!(
        stats.largest > 1,
        "{db:?}: no commit carried two writes: {stats:?}"
    );
    for id in &ids {
        let winners = owners.get(id).map_or(0, Vec::len);
        assert_eq!(winners, 1, "{db:?}: {id} has {winners} owners: {owners:?}");
        let (worker, lease, at) = &owners[id][0];
        let job = ledger.job(id).await.unwrap().unwrap();
        assert_eq!(job.state, JobState::Running, "{db:?}: {id}");
        assert_eq!(
            job.owner_id.as_deref(),
            Some(worker.as_str()),
            "{db:?}: {id}"
        );
        let until = job.owner_until.expect("a running job's lease");
        assert!(
            grants(until - at, *lease),
            "{db:?}: {id}: its lease is not {worker}'s {lease:?}"
        );
        assert_eq!(
            kinds(&ledger, id).await,
            [
                "job_created",
                "delivery_received",
                "claimed",
                "attempt_started"
            ],
            "{db:?}: {id}"
        );
    }
}

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
        assert_eq!(events[1].detail["message_id"], got[0].message_id.as_str());
        assert_eq!(events[1].detail["queue"], "embedded:jobs");
        assert_eq!(events[1].detail["reason"], "created");
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

async fn a_worker_claims_and_starts_in_one_step_with_its_delivery_on_the_timeline(db: Db) {
    use fenceline::job::EventKind;
    use fenceline::ledger::{DeliveryRef, NewEvent};
    let (ledger, _db) = fresh_ledger(db).await;
    let job_id = create(&ledger, new_job("acme", "one-step", json!(1))).await;
    let received = NewEvent::new(EventKind::DeliveryReceived, &Actor::Worker("w".into())).delivery(
        DeliveryRef {
            message_id: "m-1".into(),
            receive_count: 1,
            handle_hash: "0123abcd".into(),
        },
    );
    let (claimed, attempt) = ledger
        .claim_and_start(&job_id, "w", LONG, Some(&received), "stub")
        .await
        .unwrap();
    assert_eq!((claimed.epoch, claimed.attempt_count), (1, 0));
    assert_eq!((attempt.attempt_no, attempt.epoch), (1, 1));
    let job = ledger.job(&job_id).await.unwrap().unwrap();
    assert_eq!(
        (job.state, job.attempt_count, job.pending_attempt),
        (JobState::Running, 1, Some(1))
    );
    let events = ledger.events(&job_id, 0, 10).await.unwrap();
    let kinds: Vec<_> = events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "job_created",
            "delivery_received",
            "claimed",
            "attempt_started"
        ]
    );
    assert_eq!(events[1].epoch, 0, "received before the claim");
    assert_eq!(events[3].attempt_no, Some(1));
    let attempts = ledger.attempts(&job_id).await.unwrap();
    assert_eq!(
        attempts[0].provider_request_id.as_deref(),
        Some(format!("{job_id}:1").as_str())
    );
    // The owner goes on as usual; a second claim is refused and writes nothing.
    ledger
        .accept_result(&as_owner(&job_id, 1, "w"), 1, "answer")
        .await
        .unwrap();
    assert_eq!(
        refusal(
            ledger
                .claim_and_start(&job_id, "x", LONG, Some(&received), "stub")
                .await
        ),
        Refusal::AlreadyTerminal(JobState::Succeeded)
    );
    assert_eq!(ledger.events(&job_id, 0, 20).await.unwrap().len(), 6);
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

async fn a_job_runs_from_claim_to_one_accepted_result_with_every_step_on_its_timeline(db: Db) {
    let (ledger, _db) = fresh_ledger(db).await;
    let job_id = create(&ledger, new_job("acme", "k", json!("summarise"))).await;
    let claimed = ledger.claim(&job_id, "w1", LONG).await.unwrap();
    assert_eq!(claimed.epoch, 1);
    assert!(claimed.owner_until <= claimed.deadline_at);
    let attempt = ledger
        .start_attempt(&as_owner(&job_id, 1, "w1"), "stub")
        .await
        .unwrap();
    assert_eq!(attempt.attempt_no, 1);
    ledger
        .set_provider_request_id(&as_owner(&job_id, 1, "w"), 1, "req-123")
        .await
        .unwrap();
    let accepted = ledger
        .accept_result(&as_owner(&job_id, 1, "w1"), 1, r#"{"summary":"ok"}"#)
        .await
        .unwrap();

    let job = ledger.job(&job_id).await.unwrap().unwrap();
    assert_eq!(job.state, JobState::Succeeded);
    assert_eq!(
        job.result_ref.as_deref(),
        Some(accepted.result_ref.as_str())
    );
    assert!(job.terminal_at.is_some());
    assert_eq!(job.attempt_count, 1);
    assert_eq!(job.pending_attempt, None);
    assert_eq!(
        ledger
            .result_body(&accepted.result_ref)
            .await
            .unwrap()
            .as_deref(),
        Some(r#"{"summary":"ok"}"#)
    );
    let attempts = ledger.attempts(&job_id).await.unwrap();
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].outcome, AttemptOutcome::Succeeded);
    assert_eq!(attempts[0].provider_request_id.as_deref(), Some("req-123"));

    let events = ledger.events(&job_id, 0, 100).await.unwrap();
    let seqs: Vec<_> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, [1, 2, 3, 4, 5]);
    let kinds: Vec<_> = events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "job_created",
            "claimed",
            "attempt_started",
            "attempt_finished",
            "result_accepted"
        ]
    );
    assert_eq!(events[1].epoch, 1);
    assert_eq!(events[1].actor, "worker:w1");
    assert_eq!(events[2].attempt_no, Some(1));
    assert!(events.windows(2).all(|w| w[0].at <= w[1].at));
    assert!(events[1].deadline_left_ms.unwrap() > 500_000);

    // A terminal job refuses everything; a second accept never writes.
    let again = ledger
        .accept_result(&as_owner(&job_id, 1, "w1"), 1, "other")
        .await;
    assert_eq!(
        refusal(again),
        Refusal::AlreadyTerminal(JobState::Succeeded)
    );
    assert_eq!(
        refusal(ledger.claim(&job_id, "w2", LONG).await),
        Refusal::AlreadyTerminal(JobState::Succeeded)
    );
}

async fn thirty_two_racing_claims_make_exactly_one_owner(db: Db) {
    let (ledger, _db) = fresh_ledger(db).await;
    let job_id = create(&ledger, new_job("acme", "race", json!(1))).await;
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..32 {
        let ledger = ledger.clone();
        let job_id = job_id.clone();
        tasks.spawn(async move { ledger.claim(&job_id, &format!("w{i}"), LONG).await });
    }
    let mut winners = 0;
    let mut refusals = HashSet::new();
    while let Some(joined) = tasks.join_next().await {
        match joined.unwrap() {
            Ok(claimed) => {
                winners += 1;
                assert_eq!(claimed.epoch, 1);
            }
            Err(error) => {
                refusals.insert(refusal(Err::<(), _>(error)));
            }
        }
    }
    assert_eq!(winners, 1);
    assert_eq!(refusals, HashSet::from([Refusal::LiveOwner { epoch: 1 }]));
    let job = ledger.job(&job_id).await.unwrap().unwrap();
    assert_eq!(job.owner_epoch, 1);
    assert_eq!(kinds(&ledger, &job_id).await, ["job_created", "claimed"]);
}

async fn an_owner_fenced_by_a_recovery_claim_can_neither_renew_nor_start_nor_accept(db: Db) {
    let (ledger, _db) = fresh_ledger(db).await;
    let job_id = create(&ledger, new_job("acme", "fence", json!(1))).await;
    let (a, attempt) = ledger
        .claim_and_start(&job_id, "a", Duration::from_millis(300), None, "stub")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;

    let recovered = ledger
        .recovery_claim(&job_id, &Actor::Worker("b".into()), "lease_expired", false)
        .await
        .unwrap();
    assert_eq!(recovered.epoch, a.epoch + 1);
    assert_eq!(recovered.state, JobState::Unknown);
    assert_eq!(recovered.lost_attempts, 1);

    let stale = Refusal::StaleEpoch {
        expected: a.epoch,
        found: a.epoch + 1,
    };
    let renewals = ledger
        .renew_leases("a", &[(job_id.clone(), a.epoch)], LONG)
        .await
        .unwrap();
    assert_eq!(renewals[0].outcome, Err(stale.clone()));
    assert_eq!(
        refusal(
            ledger
                .start_attempt(&as_owner(&job_id, a.epoch, "a"), "stub")
                .await
        ),
        stale
    );
    let rejected = ledger
        .accept_result(
            &as_owner(&job_id, a.epoch, "a"),
            attempt.attempt_no,
            "late answer",
        )
        .await;
    assert_eq!(refusal(rejected), stale);

    let job = ledger.job(&job_id).await.unwrap().unwrap();
    assert_eq!(job.state, JobState::Unknown);
    assert_eq!(
        job.result_ref, None,
        "a stale answer never becomes the result"
    );
    let attempts = ledger.attempts(&job_id).await.unwrap();
    assert_eq!(attempts[0].outcome, AttemptOutcome::StaleDiscarded);
    let evidence = attempts[0]
        .result_ref
        .clone()
        .expect("stale answer kept as evidence");
    assert_eq!(
        ledger.result_body(&evidence).await.unwrap().as_deref(),
        Some("late answer")
    );
    let events = ledger.events(&job_id, 0, 100).await.unwrap();
    let rejected = events.iter().find(|e| e.kind == "result_rejected").unwrap();
    assert_eq!(rejected.detail["reason"], "stale_epoch");
    assert_eq!(
        rejected.epoch, a.epoch,
        "the event names the epoch the stale owner held"
    );
    assert!(events.iter().any(|e| e.kind == "lease_renewal_failed"));
    assert!(events
        .iter()
        .any(|e| e.kind == "recovery_claimed" && e.epoch == a.epoch + 1));
}

async fn an_accept_after_the_lease_or_the_deadline_is_refused_even_at_the_right_epoch(db: Db) {
    let (ledger, _db) = fresh_ledger(db).await;
    let job_id = create(&ledger, new_job("acme", "lease", json!(1))).await;
    let (a, attempt) = ledger
        .claim_and_start(&job_id, "a", Duration::from_millis(200), None, "stub")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let late = ledger
        .accept_result(
            &as_owner(&job_id, a.epoch, "a"),
            attempt.attempt_no,
            "answer",
        )
        .await;
    assert_eq!(refusal(late), Refusal::LeaseExpired);
    assert_eq!(
        ledger.job(&job_id).await.unwrap().unwrap().state,
        JobState::Running
    );

    let mut short = new_job("acme", "deadline", json!(2));
    short.deadline = Duration::from_millis(400);
    let job_id = create(&ledger, short).await;
    let a = ledger.claim(&job_id, "a", LONG).await.unwrap();
    assert_eq!(
        a.owner_until, a.deadline_at,
        "a lease never outlives the deadline"
    );
    let attempt = ledger
        .start_attempt(&as_owner(&job_id, a.epoch, "a"), "stub")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let late = ledger
        .accept_result(
            &as_owner(&job_id, a.epoch, "a"),
            attempt.attempt_no,
            "answer",
        )
        .await;
    assert_eq!(refusal(late), Refusal::DeadlinePassed);
    let renewed = ledger
        .renew_leases("a", &[(job_id.clone(), a.epoch)], LONG)
        .await
        .unwrap();
    assert_eq!(renewed[0].outcome, Err(Refusal::DeadlinePassed));
    assert!(ledger.expire_if_due(&job_id, &Actor::System).await.unwrap());
    assert!(!ledger.expire_if_due(&job_id, &Actor::System).await.unwrap());
    let job = ledger.job(&job_id).await.unwrap().unwrap();
    assert_eq!(job.state, JobState::Expired);
    assert_eq!(
        ledger.attempts(&job_id).await.unwrap()[0].outcome,
        AttemptOutcome::StaleDiscarded
    );
    let expired = kinds(&ledger, &job_id).await;
    assert_eq!(expired.last().map(String::as_str), Some("deadline_expired"));
}

async fn an_uncertain_attempt_needs_a_recorded_decision_before_another_attempt(db: Db) {
    let (ledger, _db) = fresh_ledger(db).await;
    let job_id = create(&ledger, new_job("acme", "unknown", json!(1))).await;
    let (a, _) = ledger
        .claim_and_start(&job_id, "a", Duration::from_millis(200), None, "stub")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let recovered = ledger
        .recovery_claim(&job_id, &Actor::System, "lease_expired", true)
        .await
        .unwrap();
    assert_eq!(recovered.state, JobState::Unknown);

    // Nothing starts from unknown.
    assert_eq!(
        refusal(ledger.claim(&job_id, "b", LONG).await),
        Refusal::WrongState(JobState::Unknown)
    );
    let outbox_before = ledger.outbox_pending().await.unwrap();

    let operator = Actor::Operator("ana".into());
    let stale = ledger
        .decide(
            &job_id,
            a.epoch,
            &Decision::AuthorizeRetry,
            &operator,
            "saw old page",
        )
        .await;
    assert_eq!(
        refusal(stale),
        Refusal::StaleEpoch {
            expected: a.epoch,
            found: recovered.epoch
        }
    );
    let blank = ledger
        .decide(
            &job_id,
            recovered.epoch,
            &Decision::AuthorizeRetry,
            &operator,
            "  ",
        )
        .await;
    assert!(matches!(blank, Err(LedgerError::Invalid(_))));

    let to = ledger
        .decide(
            &job_id,
            recovered.epoch,
            &Decision::AuthorizeRetry,
            &operator,
            "provider shows no request; duplicate cost accepted",
        )
        .await
        .unwrap();
    assert_eq!(to, JobState::RetryAuthorized);
    assert_eq!(ledger.outbox_pending().await.unwrap(), outbox_before + 1);
    let b = ledger.claim(&job_id, "b", LONG).await.unwrap();
    assert_eq!(
        b.epoch,
        recovered.epoch + 2,
        "decision and claim each authorize a new owner"
    );
    let attempt = ledger
        .start_attempt(&as_owner(&job_id, b.epoch, "b"), "stub")
        .await
        .unwrap();
    assert_eq!(
        attempt.attempt_no, 2,
        "attempts are cumulative across owners"
    );
    ledger
        .accept_result(&as_owner(&job_id, b.epoch, "b"), 2, "answer")
        .await
        .unwrap();
    let decisions = ledger.decisions(&job_id).await.unwrap();
    assert_eq!(decisions.len(), 1);
    assert_eq!(decisions[0].actor, "operator:ana");
    assert_eq!(decisions[0].seen_epoch, recovered.epoch);
    assert_eq!(decisions[0].decision, "authorize_retry");
    let kinds = kinds(&ledger, &job_id).await;
    let decided = kinds.iter().position(|k| k == "decision_recorded").unwrap();
    let second_attempt = kinds.iter().rposition(|k| k == "attempt_started").unwrap();
    assert!(decided < second_attempt);
}

async fn a_recovery_with_no_attempt_in_flight_authorizes_a_retry(db: Db) {
    let (ledger, _db) = fresh_ledger(db).await;
    let job_id = create(&ledger, new_job("acme", "no-attempt", json!(1))).await;
    ledger
        .claim(&job_id, "a", Duration::from_millis(150))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(250)).await;
    let recovered = ledger
        .recovery_claim(&job_id, &Actor::Worker("b".into()), "lease_expired", false)
        .await
        .unwrap();
    assert_eq!(recovered.state, JobState::RetryAuthorized);
    assert_eq!(recovered.lost_attempts, 0);
    let b = ledger.claim(&job_id, "b", LONG).await.unwrap();
    assert_eq!(b.epoch, 3);
    assert_eq!(b.attempt_count, 0);
}

async fn a_live_owner_holds_off_claims_and_recoveries(db: Db) {
    let (ledger, _db) = fresh_ledger(db).await;
    let job_id = create(&ledger, new_job("acme", "live", json!(1))).await;
    ledger.claim(&job_id, "a", LONG).await.unwrap();
    assert_eq!(
        refusal(ledger.claim(&job_id, "b", LONG).await),
        Refusal::LiveOwner { epoch: 1 }
    );
    assert_eq!(
        refusal(
            ledger
                .recovery_claim(&job_id, &Actor::System, "lease_expired", true)
                .await
        ),
        Refusal::LiveOwner { epoch: 1 }
    );
    assert_eq!(
        refusal(
            ledger
                .claim("job_0190b3c2-0000-7000-8000-000000000000", "b", LONG)
                .await
        ),
        Refusal::NotFound
    );
}

async fn retryable_failures_back_off_and_end_in_failed_terminal_when_the_budget_is_spent(db: Db) {
    let (ledger, _db) = fresh_ledger(db).await;
    let mut new = new_job("acme", "retry", json!(1));
    new.max_attempts = 2;
    let job_id = create(&ledger, new).await;
    let retry = Failure::Retryable {
        error_code: "rate_limited".into(),
        backoff: Duration::from_millis(300),
    };
    let a = ledger.claim(&job_id, "a", LONG).await.unwrap();
    ledger
        .start_attempt(&as_owner(&job_id, a.epoch, "a"), "stub")
        .await
        .unwrap();
    // The owner may not start a second attempt while the first has no outcome.
    assert_eq!(
        refusal(
            ledger
                .start_attempt(&as_owner(&job_id, a.epoch, "a"), "stub")
                .await
        ),
        Refusal::AttemptPending
    );
    let outcome = ledger
        .record_failure(&as_owner(&job_id, a.epoch, "a"), 1, &retry)
        .await
        .unwrap();
    assert_eq!(outcome.state, JobState::RetryAuthorized);
    assert_eq!(
        refusal(ledger.claim(&job_id, "b", LONG).await),
        Refusal::BackoffPending
    );
    tokio::time::sleep(Duration::from_millis(350)).await;
    let b = ledger.claim(&job_id, "b", LONG).await.unwrap();
    let attempt = ledger
        .start_attempt(&as_owner(&job_id, b.epoch, "b"), "stub")
        .await
        .unwrap();
    assert_eq!(attempt.attempt_no, 2);
    let outcome = ledger
        .record_failure(&as_owner(&job_id, b.epoch, "b"), 2, &retry)
        .await
        .unwrap();
    assert_eq!(outcome.state, JobState::FailedTerminal);
    let job = ledger.job(&job_id).await.unwrap().unwrap();
    assert_eq!(job.error_code.as_deref(), Some("rate_limited"));
    assert_eq!(job.attempt_count, 2);
    let kinds = kinds(&ledger, &job_id).await;
    assert_eq!(kinds.last().map(String::as_str), Some("budget_exhausted"));
    assert_eq!(kinds.iter().filter(|k| *k == "attempt_started").count(), 2);
}

async fn a_fatal_failure_is_terminal_at_once(db: Db) {
    let (ledger, _db) = fresh_ledger(db).await;
    let job_id = create(&ledger, new_job("acme", "fatal", json!(1))).await;
    let a = ledger.claim(&job_id, "a", LONG).await.unwrap();
    ledger
        .start_attempt(&as_owner(&job_id, a.epoch, "a"), "stub")
        .await
        .unwrap();
    let fatal = Failure::Fatal {
        error_code: "invalid_request".into(),
    };
    // Only the pending attempt of the current owner can be reported.
    assert_eq!(
        refusal(
            ledger
                .record_failure(&as_owner(&job_id, a.epoch, "a"), 7, &fatal)
                .await
        ),
        Refusal::NoSuchAttempt(7)
    );
    let outcome = ledger
        .record_failure(&as_owner(&job_id, a.epoch, "a"), 1, &fatal)
        .await
        .unwrap();
    assert_eq!(outcome.state, JobState::FailedTerminal);
    assert_eq!(
        ledger.attempts(&job_id).await.unwrap()[0].outcome,
        AttemptOutcome::FailedFatal
    );
}

/// `n` jobs claimed by worker `w`, each `(job_id, epoch)`; the lease of job `fenced` ran out
/// and a recovery fenced its owner out (epoch 2), the others hold long leases.
async fn claimed_with_one_fenced_out(
    ledger: &fenceline::ledger::Ledger,
    label: &str,
    n: usize,
    fenced: usize,
) -> Vec<(String, i64)> {
    let mut leases = Vec::new();
    for i in 0..n {
        let job_id = create(ledger, new_job("acme", &format!("{label}-{i}"), json!(i))).await;
        let lease = if i == fenced {
            Duration::from_millis(150)
        } else {
            LONG
        };
        let claimed = ledger.claim(&job_id, "w", lease).await.unwrap();
        leases.push((job_id, claimed.epoch));
    }
    tokio::time::sleep(Duration::from_millis(250)).await;
    ledger
        .recovery_claim(&leases[fenced].0, &Actor::System, "lease_expired", true)
        .await
        .unwrap();
    leases
}

async fn many_leases_renew_in_one_call_and_each_refusal_says_why(db: Db) {
    let (ledger, _db) = fresh_ledger(db).await;
    let leases = claimed_with_one_fenced_out(&ledger, "renew", 5, 0).await;
    let before = ledger
        .job(&leases[1].0)
        .await
        .unwrap()
        .unwrap()
        .owner_until
        .unwrap();
    let renewals = ledger.renew_leases("w", &leases, LONG).await.unwrap();
    assert_eq!(renewals.len(), 5);
    assert_eq!(
        renewals[0].outcome,
        Err(Refusal::StaleEpoch {
            expected: 1,
            found: 2
        })
    );
    for renewal in &renewals[1..] {
        let until = renewal.outcome.clone().expect("renewed");
        assert!(until > before, "the lease moved forward");
    }
    assert_eq!(
        kinds(&ledger, &leases[3].0).await,
        ["job_created", "claimed", "lease_renewed"]
    );
}

/// With the embedded queue in the ledger's database, a delivery's visibility changes in the
/// transaction that renews its job's lease, and the outcome takes the place right after
/// `lease_renewed`, at the same instant. Each is still its own compare-and-set: an outdated
/// handle leaves the lease renewed, a fenced-out owner's lease is refused while the visibility
/// it asked for is changed, and each says why.
async fn on_a_queue_in_the_ledger_a_lease_and_its_visibility_renew_in_one_transaction(db: Db) {
    use fenceline::job::EventKind;
    use fenceline::ledger::{NewEvent, RenewBoth, VisibilityChange};
    use fenceline::queue::{embedded::EmbeddedQueue, Queue, ReceiptHandle, VISIBILITY_CAP};
    let options = fenceline::ledger::LedgerOptions {
        direct_queue: Some("jobs".into()),
        ..crate::helpers::options()
    };
    let (ledger, test_db) = crate::helpers::fresh_ledger_with(db, &options).await;
    let queue = EmbeddedQueue::new(ledger.clone(), "jobs", 5);
    let leases = claimed_with_one_fenced_out(&ledger, "both", 4, 3).await;
    let got = queue
        .receive(10, Duration::from_secs(30), Duration::from_millis(200))
        .await
        .unwrap();
    assert_eq!(got.len(), 4, "{got:?}");
    let receipt = |job_id: &str| {
        got.iter()
            .find(|d| d.body.contains(job_id))
            .map(|d| d.receipt.clone())
            .unwrap()
    };
    let message_id = |receipt: &ReceiptHandle| -> i64 {
        receipt.expose().split_once('.').unwrap().0.parse().unwrap()
    };
    let raw = test_db.raw_pool().await;
    let visible_at = |id: i64| {
        let raw = raw.clone();
        async move {
            sqlx::query_scalar::<_, i64>("SELECT visible_at FROM queue_messages WHERE id = $1")
                .bind(id)
                .fetch_one(&raw)
                .await
                .unwrap()
        }
    };
    let minute = Duration::from_secs(60);
    // 0: as it should be; 1: a handle this message no longer has; 2: no visibility asked
    // (deadline or cap reached); 3: its owner fenced out, its handle still the latest.
    let outdated = ReceiptHandle::new(format!(
        "{}.{}",
        message_id(&receipt(&leases[1].0)),
        "0".repeat(32)
    ));
    let asked = [
        Some(receipt(&leases[0].0)),
        Some(outdated),
        None,
        Some(receipt(&leases[3].0)),
    ];
    let mut renewals = Vec::new();
    for ((job_id, epoch), asked) in leases.iter().zip(&asked) {
        let visibility = asked.as_ref().map(|r| {
            let message = queue
                .visibility_in(&ledger, r, minute)
                .expect("a message of this ledger");
            (message, minute)
        });
        renewals.push(RenewBoth {
            job_id: job_id.clone(),
            epoch: *epoch,
            visibility,
        });
    }
    let before: Vec<i64> = [0, 3]
        .iter()
        .map(|&i| message_id(asked[i].as_ref().unwrap()))
        .collect();
    let before_at = (visible_at(before[0]).await, visible_at(before[1]).await);
    let worker = Actor::Worker("w".into());
    let out = ledger
        .renew_leases_with_visibility("w", &renewals, LONG, VISIBILITY_CAP, |i, change| {
            let kind = match change {
                Some(VisibilityChange::Changed) => EventKind::VisibilityRenewed,
                _ => EventKind::VisibilityRenewalFailed,
            };
            NewEvent::new(kind, &worker)
                .raw_detail(json!({ "i": i, "change": format!("{change:?}") }))
        })
        .await;
    assert!(out.failed.is_none(), "{:?}", out.failed);
    let out = out.renewed;
    let changes: Vec<Option<VisibilityChange>> = out.iter().map(|(_, c)| *c).collect();
    assert_eq!(
        changes,
        [
            Some(VisibilityChange::Changed),
            Some(VisibilityChange::UnknownHandle),
            None,
            Some(VisibilityChange::Changed)
        ]
    );
    for (renewal, _) in &out[..3] {
        assert!(renewal.outcome.is_ok(), "{renewal:?}");
    }
    assert_eq!(
        out[3].0.outcome,
        Err(Refusal::StaleEpoch {
            expected: 1,
            found: 2
        })
    );
    // Both changed messages are hidden for the minute asked, the fenced-out owner's too.
    let after_at = (visible_at(before[0]).await, visible_at(before[1]).await);
    assert!(
        after_at.0 >= before_at.0 + 25_000_000,
        "{before_at:?} {after_at:?}"
    );
    assert!(
        after_at.1 >= before_at.1 + 25_000_000,
        "{before_at:?} {after_at:?}"
    );
    for (i, outcome) in [
        (0, "visibility_renewed"),
        (1, "visibility_renewal_failed"),
        (2, "visibility_renewal_failed"),
    ] {
        let events = ledger.events(&leases[i].0, 0, 100).await.unwrap();
        let tail: Vec<(i64, &str)> = events[3..]
            .iter()
            .map(|e| (e.seq, e.kind.as_str()))
            .collect();
        assert_eq!(tail, [(4, "lease_renewed"), (5, outcome)], "job {i}");
        assert_eq!(events[4].at, events[3].at, "job {i}: the same instant");
        assert_eq!(events[4].epoch, 1, "job {i}");
        assert_eq!(events[4].detail["i"], i, "job {i}");
    }
    let events = ledger.events(&leases[1].0, 0, 100).await.unwrap();
    assert_eq!(events[4].detail["change"], "Some(UnknownHandle)");
    let events = ledger.events(&leases[2].0, 0, 100).await.unwrap();
    assert_eq!(events[4].detail["change"], "None");
    // The refused lease says why, then its visibility's outcome, each in a place of its own.
    let fenced = kinds(&ledger, &leases[3].0).await;
    assert_eq!(
        fenced[fenced.len() - 2..],
        ["lease_renewal_failed", "visibility_renewed"],
        "{fenced:?}"
    );
    // The next event of a renewed job follows them.
    let seq = unrelated_event(&ledger, &leases[0].0).await;
    assert_eq!(seq, 6);
}

/// The heartbeat's lease renewal reserves the place right after its `lease_renewed` for the
/// visibility renewal that went beside it, and that outcome goes there later without touching
/// the job's row: the place holds however many events come meanwhile. A refused lease
/// reserves nothing; a plain renewal reserves no place.
/// A lease renewal reserves no number for what is written after it: when the visibility
/// outcome that went beside it is never written, the next event follows `lease_renewed`.
async fn a_lease_renewal_leaves_no_number_for_a_write_that_may_never_come(db: Db) {
    let (ledger, _db) = fresh_ledger(db).await;
    let leases = claimed_with_one_fenced_out(&ledger, "slot", 3, 2).await;
    let renewals = ledger.renew_leases("w", &leases, LONG).await.unwrap();
    assert!(renewals[0].outcome.is_ok() && renewals[1].outcome.is_ok());
    assert!(renewals[2].outcome.is_err());
    let seq = unrelated_event(&ledger, &leases[0].0).await;
    assert_eq!(
        seq, 4,
        "the event after lease_renewed (#3) takes the next number"
    );
    assert_gap_free(&ledger, &leases[0].0).await;
}

/// Both answers of one owner for its attempt, sent at once, may share a commit: the one the
/// ledger says it accepted is the job's result, the other is refused, and the timeline has
/// no hole.
async fn two_results_of_one_owner_sent_at_once_accept_the_one_answered(db: Db) {
    const JOBS: usize = 60;
    let (ledger, _db) = fresh_ledger(db).await;
    let mut ids = Vec::new();
    for i in 0..JOBS {
        let id = create(&ledger, new_job("acme", &format!("twice-{i}"), json!(i))).await;
        ledger
            .claim_and_start(&id, "w", LONG, None, "stub")
            .await
            .unwrap();
        ids.push(id);
    }
    let mut calls = tokio::task::JoinSet::new();
    for id in &ids {
        for body in ["first", "second"] {
            let (ledger, id) = (ledger.clone(), id.clone());
            calls.spawn(async move {
                let body = format!("{body} answer for {id}");
                let accepted = ledger.accept_result(&as_owner(&id, 1, "w"), 1, &body).await;
                (id, body, accepted)
            });
        }
    }
    // Each job's two answers: the body sent, and its result ref or why it was refused.
    type Answer = (String, Result<String, Refusal>);
    let mut answers: HashMap<String, Vec<Answer>> = HashMap::new();
    for (id, body, accepted) in calls.join_all().await {
        let answer = match accepted {
            Ok(accepted) => Ok(accepted.result_ref),
            Err(error) => Err(error.refusal().cloned().expect("a refusal")),
        };
        answers.entry(id).or_default().push((body, answer));
    }
    for id in &ids {
        let answers = &answers[id];
        let accepted: Vec<&Answer> = answers.iter().filter(|(_, a)| a.is_ok()).collect();
        assert_eq!(accepted.len(), 1, "{id}: one accepted, {answers:?}");
        let (body, Ok(result_ref)) = accepted[0] else {
            unreachable!()
        };
        let job = ledger.job(id).await.unwrap().unwrap();
        assert_eq!(job.state, JobState::Succeeded);
        assert_eq!(job.result_ref.as_ref(), Some(result_ref), "{id}");
        assert_eq!(
            ledger.result_body(result_ref).await.unwrap().as_ref(),
            Some(body),
            "{id}: the stored result is the one answered accepted"
        );
        let refused = answers.iter().find(|(_, a)| a.is_err()).unwrap();
        assert!(
            matches!(refused.1, Err(Refusal::AlreadyTerminal(_))),
            "{id}: {refused:?}"
        );
        assert_gap_free(&ledger, id).await;
        let kinds = kinds(&ledger, id).await;
        assert_eq!(
            kinds.iter().filter(|k| *k == "result_accepted").count(),
            1,
            "{kinds:?}"
        );
    }
}

/// A group commit whose answer is lost (the connection gone as it committed) is looked up
/// before anything is written again: a batch that landed answers its writes as written, once
/// each; one that did not sends each write alone, also once.
async fn a_commit_whose_answer_is_lost_writes_nothing_twice(db: Db) {
    use fenceline::job::EventKind;
    use fenceline::ledger::NewEvent;
    const JOBS: usize = 20;
    let (ledger, _db) = fresh_ledger(db).await;
    for landed in [true, false] {
        let mut ids = Vec::new();
        for i in 0..JOBS {
            let key = format!("lost-{landed}-{i}");
            ids.push(create(&ledger, new_job("acme", &key, json!(i))).await);
        }
        // Half the jobs claimed from a delivery, half already claimed and answering.
        let (claiming, answering) = ids.split_at(JOBS / 2);
        for id in answering {
            ledger
                .claim_and_start(id, "w", LONG, None, "stub")
                .await
                .unwrap();
        }
        ledger.lose_commit_answers(u32::MAX, landed);
        let mut calls = tokio::task::JoinSet::new();
        for id in claiming {
            let (ledger, id) = (ledger.clone(), id.clone());
            calls.spawn(async move {
                let worker = Actor::Worker("w".into());
                let received = NewEvent::new(EventKind::DeliveryReceived, &worker);
                let noted = NewEvent::new(EventKind::VisibilityRenewed, &worker);
                ledger.note_event(&id, noted).await.unwrap();
                let claimed = ledger
                    .claim_delivered(&id, "acme", "w", LONG, &received, "stub")
                    .await;
                assert!(claimed.is_ok(), "{id}: {claimed:?}");
            });
        }
        for id in answering {
            let (ledger, id) = (ledger.clone(), id.clone());
            calls.spawn(async move {
                let accepted = ledger
                    .accept_result(&as_owner(&id, 1, "w"), 1, "answer")
                    .await;
                assert!(accepted.is_ok(), "{id}: {accepted:?}");
            });
        }
        calls.join_all().await;
        ledger.lose_commit_answers(0, landed);
        for id in claiming {
            let kinds = kinds(&ledger, id).await;
            for once in ["visibility_renewed", "delivery_received", "claimed"] {
                let n = kinds.iter().filter(|k| *k == once).count();
                assert_eq!(n, 1, "{id} (landed: {landed}): {once} in {kinds:?}");
            }
            assert_eq!(job_state(&ledger, id).await, JobState::Running);
            assert_gap_free(&ledger, id).await;
        }
        for id in answering {
            let kinds = kinds(&ledger, id).await;
            assert!(!kinds.iter().any(|k| k == "result_rejected"), "{kinds:?}");
            assert_eq!(job_state(&ledger, id).await, JobState::Succeeded);
            assert_gap_free(&ledger, id).await;
        }
    }
    assert!(
        ledger.group_stats().failed > 0,
        "the commits' answers were lost"
    );
}

/// An event for a job that does not exist is refused as not found, in a group commit as alone.
async fn an_event_for_no_job_is_not_found_on_every_path(db: Db) {
    use fenceline::job::EventKind;
    use fenceline::ledger::NewEvent;
    let (ledger, _db) = fresh_ledger(db).await;
    let real = create(&ledger, new_job("acme", "real", json!(1))).await;
    let event = NewEvent::new(EventKind::VisibilityRenewed, &Actor::Worker("w".into()));
    let (ghost, there) = tokio::join!(
        ledger.note_event("no-such-job", event.clone()),
        ledger.note_event(&real, event.clone()),
    );
    assert!(there.is_ok());
    assert_eq!(refusal(ghost), Refusal::NotFound);
    assert_eq!(
        refusal(ledger.record_event("no-such-job", &event).await),
        Refusal::NotFound
    );
}

async fn only_a_replay_policy_job_may_be_retried_by_the_policy(db: Db) {
    let (ledger, _db) = fresh_ledger(db).await;
    let mut jobs = Vec::new();
    for policy in [ReplayPolicy::Manual, ReplayPolicy::ReplayOnUnknown] {
        let mut new = new_job("acme", policy.as_str(), json!(1));
        new.replay_policy = policy;
        let job_id = create(&ledger, new).await;
        let _ = ledger
            .claim_and_start(&job_id, "a", Duration::from_millis(150), None, "stub")
            .await
            .unwrap();
        jobs.push(job_id);
    }
    tokio::time::sleep(Duration::from_millis(250)).await;
    let mut epochs = Vec::new();
    for job_id in &jobs {
        let r = ledger
            .recovery_claim(job_id, &Actor::System, "lease_expired", true)
            .await
            .unwrap();
        epochs.push(r.epoch);
    }
    let manual = ledger
        .decide(
            &jobs[0],
            epochs[0],
            &Decision::ReplayPolicy,
            &Actor::Policy,
            "policy",
        )
        .await;
    assert_eq!(refusal(manual), Refusal::PolicyForbids);
    let replay = ledger
        .decide(
            &jobs[1],
            epochs[1],
            &Decision::ReplayPolicy,
            &Actor::Policy,
            "policy",
        )
        .await
        .unwrap();
    assert_eq!(replay, JobState::RetryAuthorized);
}

async fn an_operator_can_resolve_an_unknown_job_as_succeeded_with_evidence(db: Db) {
    let (ledger, _db) = fresh_ledger(db).await;
    let job_id = create(&ledger, new_job("acme", "resolve", json!(1))).await;
    let _ = ledger
        .claim_and_start(&job_id, "a", Duration::from_millis(150), None, "stub")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(250)).await;
    let r = ledger
        .recovery_claim(&job_id, &Actor::System, "lease_expired", true)
        .await
        .unwrap();
    let operator = Actor::Operator("ana".into());
    let no_evidence = Decision::ResolveSucceeded {
        result: "answer".into(),
        evidence: String::new(),
    };
    assert!(matches!(
        ledger
            .decide(&job_id, r.epoch, &no_evidence, &operator, "x")
            .await,
        Err(LedgerError::Invalid(_))
    ));
    let resolve = Decision::ResolveSucceeded {
        result: "answer from the provider console".into(),
        evidence: "provider request req-9 completed".into(),
    };
    let to = ledger
        .decide(&job_id, r.epoch, &resolve, &operator, "retrieved by hand")
        .await
        .unwrap();
    assert_eq!(to, JobState::Succeeded);
    let job = ledger.job(&job_id).await.unwrap().unwrap();
    assert_eq!(job.owner_epoch, r.epoch);
    let body = ledger
        .result_body(job.result_ref.as_deref().unwrap())
        .await
        .unwrap();
    assert_eq!(body.as_deref(), Some("answer from the provider console"));
    // A second decision finds the job terminal.
    assert_eq!(
        refusal(
            ledger
                .decide(
                    &job_id,
                    r.epoch,
                    &Decision::AuthorizeRetry,
                    &operator,
                    "again"
                )
                .await
        ),
        Refusal::AlreadyTerminal(JobState::Succeeded)
    );
}

async fn the_database_refuses_illegal_states_even_from_raw_sql(db: Db) {
    let (ledger, test_db) = fresh_ledger(db).await;
    let raw = test_db.raw_pool().await;
    let pool = &raw;
    let job_id = create(&ledger, new_job("acme", "raw", json!(1))).await;
    let exec = |sql: &'static str| {
        let job_id = job_id.clone();
        async move { sqlx::query(sql).bind(job_id).execute(pool).await }
    };
    assert!(exec("UPDATE jobs SET state = 'bogus' WHERE job_id = $1")
        .await
        .is_err());
    assert!(
        exec("UPDATE jobs SET state = 'succeeded', result_ref = 'r', terminal_at = 1 WHERE job_id = $1")
            .await
            .is_err(),
        "ready → succeeded skips the owner"
    );
    assert!(
        exec("UPDATE jobs SET state = 'unknown' WHERE job_id = $1")
            .await
            .is_err(),
        "ready → unknown is not in the table"
    );
    assert!(
        exec("UPDATE jobs SET state = 'running' WHERE job_id = $1")
            .await
            .is_err(),
        "running needs an owner and a lease"
    );
    assert!(
        exec("UPDATE jobs SET deadline_at = deadline_at + 1 WHERE job_id = $1")
            .await
            .is_err()
    );

    let _ = ledger
        .claim_and_start(&job_id, "a", Duration::from_millis(100), None, "stub")
        .await
        .unwrap();
    assert!(exec("UPDATE jobs SET owner_epoch = 0 WHERE job_id = $1")
        .await
        .is_err());
    assert!(
        exec("UPDATE jobs SET attempt_count = 0, pending_attempt = NULL WHERE job_id = $1")
            .await
            .is_err()
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    ledger
        .recovery_claim(&job_id, &Actor::System, "lease_expired", true)
        .await
        .unwrap();
    assert!(
        exec("UPDATE jobs SET state = 'running' WHERE job_id = $1")
            .await
            .is_err(),
        "unknown → running needs a decision"
    );
    // At most one accepted result per job, in the schema itself.
    exec(
        "INSERT INTO results (result_ref, job_id, epoch, status, body, digest, created_at) \
          VALUES ('r1', $1, 2, 'accepted', 'x', 'd', 0)",
    )
    .await
    .unwrap();
    assert!(exec(
        "INSERT INTO results (result_ref, job_id, epoch, status, body, digest, created_at) \
         VALUES ('r2', $1, 2, 'accepted', 'y', 'd', 0)"
    )
    .await
    .is_err());
    exec("UPDATE jobs SET state = 'failed_terminal', terminal_at = 5 WHERE job_id = $1")
        .await
        .expect("unknown → failed_terminal is allowed");
    assert!(
        exec("UPDATE jobs SET state = 'retry_authorized', terminal_at = NULL WHERE job_id = $1")
            .await
            .is_err(),
        "terminal states are final"
    );
}

async fn jobs_and_timelines_page_by_keyset(db: Db) {
    let (ledger, _db) = fresh_ledger(db).await;
    let mut ids = Vec::new();
    for i in 0..7 {
        ids.push(create(&ledger, new_job("acme", &format!("p{i}"), json!(i))).await);
    }
    create(&ledger, new_job("globex", "other", json!(0))).await;
    ledger.claim(&ids[2], "w", LONG).await.unwrap();

    let mut seen = Vec::new();
    let mut before = None;
    loop {
        let page = ledger
            .list_jobs(&JobFilter {
                tenants: None,
                tenant: Some("acme".into()),
                state: None,
                before: before.clone(),
                from_id: None,
                limit: 3,
                ..Default::default()
            })
            .await
            .unwrap();
        assert!(page.jobs.len() <= 3);
        seen.extend(page.jobs.iter().map(|j| j.job_id.clone()));
        match page.next {
            Some(next) => before = Some(next),
            None => break,
        }
    }
    let mut newest_first = ids.clone();
    newest_first.reverse();
    assert_eq!(seen, newest_first);

    let running = ledger
        .list_jobs(&JobFilter {
            tenants: None,
            tenant: Some("acme".into()),
            state: Some(JobState::Running),
            before: None,
            from_id: None,
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(running.jobs.len(), 1);
    assert_eq!(running.jobs[0].job_id, ids[2]);
    let counts = ledger
        .count_by_state(Some("acme"), fenceline::ledger::Drills::Counted)
        .await
        .unwrap();
    assert_eq!(counts.len(), 7);
    assert!(counts.contains(&(JobState::Ready, 6)));
    assert!(counts.contains(&(JobState::Running, 1)));
    assert!(counts.contains(&(JobState::Unknown, 0)));

    // A long timeline, read page by page.
    let leases = vec![(ids[2].clone(), 1_i64)];
    for _ in 0..12 {
        ledger.renew_leases("w", &leases, LONG).await.unwrap();
    }
    let mut after = 0;
    let mut total = 0;
    loop {
        let page = ledger.events(&ids[2], after, 5).await.unwrap();
        if page.is_empty() {
            break;
        }
        assert!(page.iter().all(|e| e.seq > after));
        after = page.last().unwrap().seq;
        total += page.len();
    }
    assert_eq!(total, 14);
}

/// The console's folded timeline: runs of consecutive events of one kind (successful lease and
/// visibility renewals as one), read a page at a time forward, a page back from any page, and
/// around any event, are the runs of the whole timeline folded at once.
async fn a_timeline_folds_into_the_same_runs_read_forward_back_or_around_any_event(db: Db) {
    use fenceline::job::EventKind::{
        self, DeliveryReceived, DuplicateSuppressed, LeaseRenewalFailed, LeaseRenewed,
        VisibilityRenewed,
    };
    use fenceline::ledger::NewEvent;
    let (ledger, _db) = fresh_ledger(db).await;
    let job_id = create(&ledger, new_job("acme", "fold", json!(1))).await;
    let worker = Actor::Worker("w".into());
    // A fixed pseudo-random walk: runs of renewals, failed renewals that break them, single
    // events and repeats; appended in batches, so that times differ between them.
    let mut x: u64 = 7;
    for _ in 0..40 {
        let batch: Vec<NewEvent> = (0..10)
            .map(|_| {
                x = x
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                let kind = match (x >> 33) % 10 {
                    0..=2 => LeaseRenewed,
                    3..=5 => VisibilityRenewed,
                    6 => LeaseRenewalFailed,
                    7 => DuplicateSuppressed,
                    _ => DeliveryReceived,
                };
                NewEvent::new(kind, &worker)
            })
            .collect();
        ledger.append_events(&job_id, &batch).await.unwrap();
    }
    let events = ledger.all_events(&job_id).await.unwrap();
    let folded = |kind: EventKind| match kind {
        LeaseRenewed | VisibilityRenewed => "renewed",
        other => other.as_str(),
    };
    // (kind, first seq, last seq, first at, last at), folded at once.
    let mut want: Vec<(&str, i64, i64, i64, i64)> = Vec::new();
    for e in &events {
        match want.last_mut() {
            Some(run) if run.0 == folded(e.kind) && run.2 + 1 == e.seq => {
                run.2 = e.seq;
                run.4 = e.at;
            }
            _ => want.push((folded(e.kind), e.seq, e.seq, e.at, e.at)),
        }
    }
    assert!(
        want.len() > 60 && want.iter().filter(|r| r.2 - r.1 >= 3).count() > 5,
        "the walk makes both long runs and short ones: {want:?}"
    );
    assert!(want.windows(2).any(|w| w[0].4 != w[1].3), "times differ");
    let as_tuple = |r: &fenceline::ledger::Run| {
        (
            r.kind.as_str(),
            r.first_seq,
            r.last_seq,
            r.first_at,
            r.last_at,
        )
    };

    // Forward, as the console pages: 7 runs shown, an eighth asked for to know there is more.
    let (mut got, mut after, mut pages) = (Vec::new(), 0, Vec::new());
    loop {
        let runs = ledger.timeline_runs(&job_id, after, 8).await.unwrap();
        let shown = runs.len().min(7);
        let (idx, _) = want.iter().enumerate().find(|(_, r)| r.1 > after).unwrap();
        let expect: Vec<_> = want[idx..].iter().take(8).cloned().collect();
        let runs: Vec<_> = runs.iter().map(as_tuple).collect();
        assert_eq!(runs, expect, "the runs after {after}");
        got.extend(runs[..shown].iter().cloned());
        pages.push(after);
        if runs.len() <= 7 {
            break;
        }
        after = runs[shown - 1].1;
    }
    assert_eq!(got, want);
    assert!(pages.len() > 8, "{} pages", pages.len());
    assert!(ledger
        .timeline_runs(&job_id, want.last().unwrap().1, 8)
        .await
        .unwrap()
        .is_empty());

    // A page back: the run 7 before the first one shown after `after`.
    for &after in &pages {
        let upto = want.iter().filter(|r| r.1 <= after).count();
        let expect = upto.checked_sub(7).map(|i| want[i].1);
        assert_eq!(
            ledger.timeline_run_before(&job_id, after, 7).await.unwrap(),
            expect,
            "a page back from {after}"
        );
    }

    // Around any event: the run that holds it; none past the last event.
    for e in &events {
        let holder = want.iter().find(|r| r.1 <= e.seq && e.seq <= r.2).unwrap();
        assert_eq!(
            ledger.timeline_run_of(&job_id, e.seq).await.unwrap(),
            Some(holder.1),
            "the run of event {}",
            e.seq
        );
    }
    let past = events.last().unwrap().seq + 1;
    assert_eq!(ledger.timeline_run_of(&job_id, past).await.unwrap(), None);
}

/// How many rows each table of a job's own rows holds for each of `jobs`, in their order.
async fn rows_owned(raw: &sqlx::AnyPool, jobs: &[&String]) -> Vec<(&'static str, Vec<i64>)> {
    let mut out = Vec::new();
    for table in ["events", "attempts", "results", "job_inputs", "outbox"] {
        let mut counts = Vec::new();
        for job in jobs {
            let sql = format!("SELECT COUNT(*) FROM {table} WHERE job_id = $1");
            let n: i64 = sqlx::query_scalar(&sql)
                .bind(job.as_str())
                .fetch_one(raw)
                .await
                .unwrap();
            counts.push(n);
        }
        out.push((table, counts));
    }
    out
}

/// Runs a job to `succeeded` and returns its id.
async fn succeeded_job(ledger: &fenceline::ledger::Ledger, key: &str) -> String {
    let job_id = create(ledger, new_job("acme", key, json!(key))).await;
    let (claimed, attempt) = ledger
        .claim_and_start(&job_id, "w", LONG, None, "stub")
        .await
        .unwrap();
    ledger
        .accept_result(
            &as_owner(&job_id, claimed.epoch, "w"),
            attempt.attempt_no,
            "answer",
        )
        .await
        .unwrap();
    job_id
}

async fn terminal_records_older_than_the_cutoff_are_pruned_and_live_jobs_never_are(db: Db) {
    let (ledger, test_db) = fresh_ledger(db).await;
    let old = succeeded_job(&ledger, "old").await;
    // Live jobs created before the cutoff: ready, and unknown.
    let ready = create(&ledger, new_job("acme", "ready", json!(1))).await;
    let unknown = create(&ledger, new_job("acme", "unknown", json!(2))).await;
    let (claimed, _) = ledger
        .claim_and_start(&unknown, "w", LONG, None, "stub")
        .await
        .unwrap();
    ledger
        .release(&as_owner(&unknown, claimed.epoch, "w"), "test")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let young = succeeded_job(&ledger, "young").await;
    let cutoff = ledger
        .job(&young)
        .await
        .unwrap()
        .unwrap()
        .terminal_at
        .unwrap();

    let raw = test_db.raw_pool().await;
    let owned = [&old, &ready, &unknown, &young];
    let before = rows_owned(&raw, &owned).await;
    let pruned = ledger.prune_before(cutoff).await.unwrap();
    assert_eq!(pruned.jobs, 1, "only the old terminal job");
    assert!(ledger.job(&old).await.unwrap().is_none());
    // Every row the old job owned went with it, and no other job's.
    let after = rows_owned(&raw, &owned).await;
    for ((table, was), (_, now)) in before.iter().zip(&after) {
        assert!(was[0] > 0, "the old job had rows in {table}");
        assert_eq!(now[0], 0, "the old job's rows in {table}");
        assert_eq!(now[1..], was[1..], "the kept jobs' rows in {table}");
    }
    for live in [&ready, &unknown, &young] {
        assert!(ledger.job(live).await.unwrap().is_some(), "{live} is kept");
        assert!(!ledger.events(live, 0, 10).await.unwrap().is_empty());
    }
    assert_eq!(
        ledger.job(&young).await.unwrap().unwrap().state,
        JobState::Succeeded
    );

    // A policy run is recorded, and nothing younger than its keep period goes.
    let again = ledger.prune(Duration::from_secs(3600)).await.unwrap();
    assert_eq!(again.jobs, 0);
    let run = ledger
        .last_retention_run()
        .await
        .unwrap()
        .expect("recorded");
    assert_eq!(run.keep, Duration::from_secs(3600));
    assert_eq!(run.pruned, again);
}

async fn rolled_up_hours_go_with_retention_once_no_chart_reads_them(db: Db) {
    use fenceline::ledger::HOUR;
    let (ledger, test_db) = fresh_ledger(db).await;
    let raw = test_db.raw_pool().await;
    let now = ledger.now_us().await.unwrap();
    let this_hour = now - now.rem_euclid(HOUR);
    let day = 24 * HOUR;
    // Hours of the overview's rollup: 30 days old, 3 days old (inside the week's chart), 1 hour.
    let hours = [this_hour - 30 * day, this_hour - 3 * day, this_hour - HOUR];
    for hour in hours {
        sqlx::query(
            "INSERT INTO activity_hours (hour, series, bin, n) VALUES ($1, 'job_created', 0, 7)",
        )
        .bind(hour)
        .execute(&raw)
        .await
        .unwrap();
        sqlx::query("INSERT INTO activity_hours_done (hour) VALUES ($1)")
            .bind(hour)
            .execute(&raw)
            .await
            .unwrap();
    }
    let left = |table: &'static str| {
        let raw = raw.clone();
        async move {
            let rows: Vec<i64> =
                sqlx::query_scalar(&format!("SELECT hour FROM {table} ORDER BY hour"))
                    .fetch_all(&raw)
                    .await
                    .unwrap();
            rows
        }
    };
    // Kept 60 days: every hour is younger than the cutoff.
    ledger
        .prune(Duration::from_secs(60 * 86_400))
        .await
        .unwrap();
    assert_eq!(left("activity_hours").await, hours);
    // Kept an hour: the 30-day-old hour goes; the 3-day-old one stays, since the week's chart
    // still reads it and its events are gone (it could not be counted again).
    ledger.prune(Duration::from_secs(3600)).await.unwrap();
    assert_eq!(left("activity_hours").await, hours[1..]);
    assert_eq!(left("activity_hours_done").await, hours[1..]);
}

async fn a_worker_is_seen_by_its_reports_and_by_the_jobs_it_owns(db: Db) {
    use fenceline::ledger::WorkerReport;
    let (ledger, _db) = fresh_ledger(db).await;
    let report = WorkerReport {
        worker_id: "w1".into(),
        queue: "sqs:jobs".into(),
        provider: "openai".into(),
        max_in_flight: 32,
        capacity: 32,
    };
    ledger.report_worker(&report).await.unwrap();
    let job_id = create(&ledger, new_job("acme", "held", json!(1))).await;
    ledger
        .claim_and_start(&job_id, "w1", LONG, None, "stub")
        .await
        .unwrap();
    let now = ledger.now_us().await.unwrap();
    let seen = ledger
        .workers_seen(now - 60_000_000, now, None)
        .await
        .unwrap();
    assert_eq!(seen.len(), 1, "{seen:?}");
    let w1 = &seen[0];
    let reported = w1.reported.clone().unwrap();
    assert_eq!(
        (reported.queue.as_str(), reported.max_in_flight),
        ("sqs:jobs", 32)
    );
    assert_eq!(reported.started_at, reported.seen_at);
    assert_eq!((w1.held, w1.lapsed), (1, 0));
    assert!(w1.lease_until.unwrap() > now);
    // Judged later than its lease: lapsed.
    let later = w1.lease_until.unwrap() + 1;
    let seen = ledger.workers_seen(0, later, None).await.unwrap();
    assert_eq!((seen[0].held, seen[0].lapsed), (1, 1));
    // Reports older than `since` are not listed; what it owns still is.
    let seen = ledger
        .workers_seen(now + 3_600_000_000, now, None)
        .await
        .unwrap();
    assert!(seen[0].reported.is_none() && seen[0].held == 1, "{seen:?}");
    // Another tenant's view: the process, none of the jobs.
    let other = ["globex".to_owned()];
    let seen = ledger.workers_seen(0, now, Some(&other)).await.unwrap();
    assert_eq!((seen.len(), seen[0].held), (1, 0));
    // A clean stop is recorded; a report after it (the same id started again) clears it.
    ledger.worker_stopped("w1").await.unwrap();
    let stopped = ledger.workers_seen(0, now, None).await.unwrap()[0].clone();
    assert!(stopped.reported.unwrap().stopped_at.is_some());
    ledger.report_worker(&report).await.unwrap();
    let again = ledger.workers_seen(0, now, None).await.unwrap()[0].clone();
    let again = again.reported.unwrap();
    assert_eq!(again.stopped_at, None);
    assert_eq!(
        again.started_at, reported.started_at,
        "still the first report's start"
    );
}

async fn a_release_after_the_deadline_is_refused_and_the_job_expires(db: Db) {
    let (ledger, test_db) = fresh_ledger(db).await;
    let mut job = new_job("acme", "late", json!(1));
    job.deadline = Duration::from_millis(400);
    let job_id = create(&ledger, job).await;
    let (claimed, _) = ledger
        .claim_and_start(&job_id, "w", LONG, None, "stub")
        .await
        .unwrap();
    // A lease that reaches past the deadline (no write makes one today; the guard must not
    // depend on that).
    sqlx::query("UPDATE jobs SET owner_until = owner_until + 60000000 WHERE job_id = $1")
        .bind(&job_id)
        .execute(&test_db.raw_pool().await)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    let refused = refusal(
        ledger
            .release(&as_owner(&job_id, claimed.epoch, "w"), "shutdown")
            .await,
    );
    assert_eq!(refused, Refusal::DeadlinePassed);
    assert!(ledger.expire_if_due(&job_id, &Actor::System).await.unwrap());
    let job = ledger.job(&job_id).await.unwrap().unwrap();
    assert_eq!(job.state, JobState::Expired);
    assert_eq!(
        ledger.outbox_pending().await.unwrap(),
        1,
        "only the creation's row"
    );
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

/// Every write that names its rows by key finds them by key on PostgreSQL, even when the
/// planner's statistics are wrong in the way that makes another path look cheaper: the tables
/// analysed empty, then live jobs and messages arriving before the next analyse (a fresh or
/// freshly vacuumed ledger taking a burst). A guard condition written so that it implies a
/// partial index's predicate made the planner walk every live job instead. Lists of keys
/// passed as one JSON array are held to the same: each key looked up in an index.
///
/// The plans are checked with a thousand rows a table, then with six thousand. A connection
/// keeps the plan it settles on after its first few runs of a statement, until the next
/// analyse: in a burst that is while the tables are still small. Planned there, the accept's
/// update of `attempts` hashed the whole table, and every later accept on that connection read
/// every attempt as the table grew; lease renewals, claims and queue takes read whole tables
/// the same way (migration 0018).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_by_key_looks_its_row_up_by_key_whatever_the_statistics_say() {
    use sqlx::Executor;
    if crate::helpers::skip_postgres() {
        return;
    }
    let (ledger, test_db) = fresh_ledger(Db::Postgres).await;
    let raw = test_db.raw_pool().await;
    let mut conn = raw.acquire().await.unwrap();
    conn.execute("VACUUM ANALYZE").await.unwrap();
    // The plan kept for every call, whatever the values: what a pooled connection runs.
    conn.execute("SET plan_cache_mode = force_generic_plan")
        .await
        .unwrap();
    let mut wrong = Vec::new();
    for (from, to) in [(1, 1000), (1001, 6000)] {
        let rows = format!("generate_series({from}, {to}) AS g");
        for sql in [
            format!(
                "INSERT INTO jobs (job_id, tenant, idempotency_key, request_digest, input_ref, \
                 contract_version, state, owner_epoch, owner_id, owner_until, created_at, \
                 updated_at, deadline_at, max_attempts) \
                 SELECT 'job-' || g, 'acme', 'key-' || g, 'd', 'r', 'v1', \
                 CASE WHEN g % 2 = 0 THEN 'ready' ELSE 'running' END, \
                 CASE WHEN g % 2 = 0 THEN 0 ELSE 1 END, \
                 CASE WHEN g % 2 = 0 THEN NULL ELSE 'w' END, \
                 CASE WHEN g % 2 = 0 THEN NULL ELSE 9000000000000000 END, \
                 0, 0, 9000000000000000, 3 FROM {rows}"
            ),
            format!(
                "INSERT INTO queue_messages (queue, message_id, body, sent_at, visible_at, \
                 handle_hash) SELECT 'work', 'm-' || g, '{{}}', 0, 0, '0123abcd' FROM {rows}"
            ),
            format!(
                "INSERT INTO job_inputs (job_id, input, model) \
                 SELECT 'job-' || g, '{{}}', '{{}}' FROM {rows}"
            ),
            format!(
                "INSERT INTO outbox (job_id, epoch, reason, created_at, available_at) \
                 SELECT 'job-' || g, 0, 'created', 0, 0 FROM {rows}"
            ),
            format!(
                "INSERT INTO attempts (job_id, attempt_no, epoch, worker_id, provider, \
                 started_at) SELECT 'job-' || g, 1, 1, 'w', 'stub', 0 FROM {rows}"
            ),
        ] {
            conn.execute(sql.as_str()).await.unwrap();
        }
        let mut checked = Vec::new();
        for (name, sql) in ledger.statements() {
            // The key's equality must be a condition of the index scan that finds the rows.
            let key = if sql.starts_with("UPDATE jobs ") {
                "job_id = "
            } else if sql.starts_with("DELETE FROM queue_messages WHERE (id") {
                "(id = "
            } else if sql.contains("fl_keys(")
                || (sql.contains("fl_rows(") && !sql.starts_with("INSERT"))
            {
                // A list of keys, or rows joined to the table they change by its key, passed as
                // one JSON array: looked up key by key all the same.
                " = "
            } else {
                continue;
            };
            let plan = generic_plan(&mut conn, &name, &sql, "NULL").await;
            let by_key = plan
                .lines()
                .any(|line| line.contains("Index Cond: ") && line.contains(key));
            if !by_key || plan.contains("Seq Scan") {
                wrong.push(format!("{name} with {to} rows a table:\n{plan}"));
            }
            checked.push(name);
        }
        assert!(checked.len() >= 25, "only {checked:?}");
    }
    assert!(
        wrong.is_empty(),
        "not found by key:\n{}",
        wrong.join("\n\n")
    );
}

/// On SQLite every batched statement, its rows one JSON array (`json_each`) or a `VALUES` list
/// of any of its lengths, finds the rows it names through an index: none scans a table of the
/// ledger, however many jobs it holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_sqlite_a_batched_statement_finds_its_rows_by_key() {
    let (ledger, test_db) = fresh_ledger(Db::Sqlite).await;
    let raw = test_db.raw_pool().await;
    let tables: Vec<String> =
        sqlx::query_scalar("SELECT name FROM sqlite_master WHERE type = 'table'")
            .fetch_all(&raw)
            .await
            .unwrap();
    assert!(tables.iter().any(|t| t == "queue_messages"), "{tables:?}");
    let mut checked = Vec::new();
    let mut wrong = Vec::new();
    for (name, sql) in ledger.statements() {
        if !sql.contains("json_each(?)") && !sql.contains("(VALUES (") {
            continue;
        }
        let plan = sqlite_plan(&raw, &sql).await;
        // A scan of the JSON rows (or of a one-row `WITH`) is the point; a table is only
        // searched, by its key.
        let by_key = ["job_id=?", "(rowid=?", "(id=?"];
        let scans: Vec<&String> = plan
            .iter()
            .filter(|line| {
                let table = tables.iter().any(|t| {
                    line.starts_with(&format!("SCAN {t}"))
                        || line.starts_with(&format!("SEARCH {t} "))
                });
                table && !by_key.iter().any(|k| line.contains(k))
            })
            .collect();
        if !scans.is_empty() {
            wrong.push(format!("{name} scans: {}", plan.join(" / ")));
        }
        checked.push(name);
    }
    // Each statement of rows also as its `VALUES` lists (five, or three joined to a table).
    assert!(checked.len() >= 22 + 5 * 10 + 3 * 7, "only {checked:?}");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// SQLite's plan of `sql`, a line of `EXPLAIN QUERY PLAN` each.
async fn sqlite_plan(raw: &sqlx::AnyPool, sql: &str) -> Vec<String> {
    use sqlx::Row;
    sqlx::query(&format!("EXPLAIN QUERY PLAN {sql}"))
        .fetch_all(raw)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .iter()
        .map(|row| row.get::<String, _>("detail"))
        .collect()
}

/// The overview takes drill jobs off its counts ([`fenceline::ledger::Drills`]) after finding
/// them through their own index: a drill's jobs are few, whatever the number of jobs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_sqlite_drill_jobs_are_found_by_their_own_index() {
    let (ledger, test_db) = fresh_ledger(Db::Sqlite).await;
    ledger.seed_generated_jobs("many", 20_000).await.unwrap();
    // No `ANALYZE`: the embedded ledger runs on SQLite's default estimates.
    let raw = test_db.raw_pool().await;
    let sql = fenceline::ledger::DRILL_JOBS_BY_STATE.replace("$1", "NULL");
    let plan = sqlite_plan(&raw, &sql).await;
    assert!(
        plan.iter().any(|l| l.contains("jobs_drill_run"))
            && !plan.iter().any(|l| l.starts_with("SCAN jobs")),
        "{plan:?}"
    );
}

/// A tenant's jobs newest first, and the search by key across tenants, read indexes only over
/// many jobs on both backends. Neither has an index of its own (migration 0017): the list reads
/// the tenant's jobs state by state, the search finds the tenants and the key in each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_list_and_the_search_by_key_read_no_whole_table() {
    use fenceline::ledger::{find_key_statement, list_jobs_statement};
    use sqlx::Executor;
    for db in [Db::Sqlite, Db::Postgres] {
        if db == Db::Postgres && crate::helpers::skip_postgres() {
            continue;
        }
        let (ledger, test_db) = fresh_ledger(db).await;
        ledger.seed_generated_jobs("many", 20_000).await.unwrap();
        let mut few = Vec::new();
        for i in 0..4 {
            few.push(create(&ledger, new_job("few", &format!("f{i}"), json!(i))).await);
        }
        ledger.claim(&few[1], "w", LONG).await.unwrap();

        // What they find: the tenant's jobs newest first across states, the key in its tenant.
        let filter = JobFilter {
            tenant: Some("few".into()),
            limit: 3,
            ..Default::default()
        };
        let page = ledger.list_jobs(&filter).await.unwrap();
        let ids: Vec<&str> = page.jobs.iter().map(|j| j.job_id.as_str()).collect();
        assert_eq!(ids, [&few[3], &few[2], &few[1]], "{db:?}");
        assert_eq!(page.next.as_deref(), Some(few[1].as_str()), "{db:?}");
        let found = ledger.find_jobs("seed-12345").await.unwrap();
        assert_eq!(found.len(), 1, "{db:?}");
        assert_eq!(found[0].tenant, "many", "{db:?}");
        assert_eq!(ledger.find_jobs(&few[2]).await.unwrap()[0].job_id, few[2]);

        // How: no statement reads the whole table.
        let (list, args) = list_jobs_statement(&filter).unwrap();
        assert_eq!(args, ["few"]);
        let find = find_key_statement();
        let raw = test_db.raw_pool().await;
        let mut plans = Vec::new();
        if db == Db::Postgres {
            let mut conn = raw.acquire().await.unwrap();
            conn.execute("ANALYZE jobs").await.unwrap();
            for (name, sql, args) in [
                ("list", &list, &["'many'", "51"][..]),
                ("find", &find, &["'seed-12345'"][..]),
            ] {
                plans.push((name, pg_plan(&mut conn, name, sql, args).await));
            }
            let (list_plan, find_plan) = (&plans[0].1, &plans[1].1);
            // Each state's newest jobs through `jobs_tenant_state_id`, merged in order.
            assert!(
                list_plan.contains("jobs_tenant_state_id") && list_plan.contains("Merge Append"),
                "{list_plan}"
            );
            // The key looked up in each tenant: both columns of its unique index.
            assert!(
                find_plan.contains("Index Cond: ((tenant = t.tenant) AND (idempotency_key = "),
                "{find_plan}"
            );
            for (name, plan) in &plans {
                assert!(!plan.contains("Seq Scan on jobs"), "{name}: {plan}");
            }
        } else {
            for (name, sql) in [
                ("list", list.replace("$2", "51").replace("$1", "'many'")),
                ("find", find.replace("$1", "'seed-12345'")),
            ] {
                let plan = sqlite_plan(&raw, &sql).await;
                assert!(
                    !plan.iter().any(|l| l.starts_with("SCAN jobs")),
                    "{name}: {plan:?}"
                );
                plans.push((name, plan.join(" / ")));
            }
            assert!(plans[0].1.contains("jobs_tenant_state_id"), "{plans:?}");
            assert!(
                plans[1].1.contains("(tenant=? AND idempotency_key=?)"),
                "{plans:?}"
            );
        }
    }
}

/// The bundled SQLite is built without memory statistics (`.cargo/config.toml`): with them,
/// every allocation of the ledger's one writer takes a process-wide mutex.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bundled_sqlite_keeps_no_memory_statistics() {
    let (_ledger, test_db) = fresh_ledger(Db::Sqlite).await;
    let raw = test_db.raw_pool().await;
    let options: Vec<String> = sqlx::query_scalar("PRAGMA compile_options")
        .fetch_all(&raw)
        .await
        .unwrap();
    assert!(
        options.iter().any(|o| o == "DEFAULT_MEMSTATUS=0"),
        "{options:?}"
    );
}

/// The plan PostgreSQL keeps for `sql` whatever its parameters (with the connection's
/// `plan_cache_mode = force_generic_plan`), each parameter given as `arg`.
async fn generic_plan(conn: &mut sqlx::AnyConnection, name: &str, sql: &str, arg: &str) -> String {
    let params = (1..=2000)
        .take_while(|n| sql.contains(&format!("${n}")))
        .count();
    pg_plan(conn, name, sql, &vec![arg; params]).await
}

/// PostgreSQL's plan of `sql` prepared and executed with `args` (SQL literals, in order), its
/// lines joined.
async fn pg_plan(conn: &mut sqlx::AnyConnection, name: &str, sql: &str, args: &[&str]) -> String {
    use sqlx::{Executor, Row};
    conn.execute(format!("PREPARE planned AS {sql}").as_str())
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let execute = if args.is_empty() {
        "EXPLAIN EXECUTE planned".to_owned()
    } else {
        format!("EXPLAIN EXECUTE planned({})", args.join(", "))
    };
    let plan: Vec<String> = sqlx::query(&execute)
        .fetch_all(&mut *conn)
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .iter()
        .map(|row| row.get::<String, _>(0))
        .collect();
    conn.execute("DEALLOCATE planned").await.unwrap();
    plan.join("\n")
}

/// The group commit's runners keep their connections between commits (PostgreSQL). The pool
/// hands out its idle connections in turn: taking one for each commit, a run of commits went
/// through every connection of the pool, each a database process with caches of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_commits_run_on_the_runners_own_connections() {
    if crate::helpers::skip_postgres() {
        return;
    }
    let (ledger, test_db) = fresh_ledger(Db::Postgres).await;
    // Every connection of the pool open and idle, as a busy service leaves them.
    let pool = ledger.read_pool().clone();
    let opened: Vec<_> = (0..crate::helpers::options().max_connections)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move { pool.acquire().await.unwrap() })
        })
        .collect();
    let mut conns = Vec::new();
    for conn in opened {
        conns.push(conn.await.unwrap());
    }
    drop(conns);
    let raw = test_db.raw_pool().await;
    let before: String = sqlx::query_scalar("SELECT CAST(clock_timestamp() AS TEXT)")
        .fetch_one(&raw)
        .await
        .unwrap();
    // One job after another: a commit each.
    for i in 0..60 {
        create(&ledger, new_job("acme", &format!("one-{i}"), json!(i))).await;
    }
    assert_eq!(
        ledger.group_stats().commits,
        60,
        "{:?}",
        ledger.group_stats()
    );
    // The database processes whose last statement was one of those commits.
    let committed: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() \
         AND query = 'COMMIT' AND state_change > CAST($1 AS TIMESTAMPTZ)",
    )
    .bind(&before)
    .fetch_one(&raw)
    .await
    .unwrap();
    // Three runners: at most three processes, where the pool's turns took forty.
    assert!(
        (1..=3).contains(&committed),
        "60 commits ran on {committed} database processes"
    );
    // The connections kept do not hold the ledger's closing up.
    let closed = tokio::time::timeout(Duration::from_secs(5), ledger.close()).await;
    assert!(closed.is_ok(), "the ledger did not close");
}

/// The ledger closes when every connection its pool has open is one the group commit's
/// runners keep, as in a service whose other connections were closed for idleness: closing
/// the pool waits for each connection out of it, and a kept one only came back with the
/// runner's next commit, which never came. A `worker` or `serve` stopped then did not exit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ledger_closes_while_the_runners_keep_every_open_connection() {
    if crate::helpers::skip_postgres() {
        return;
    }
    let options = fenceline::ledger::LedgerOptions {
        max_connections: 1,
        ..crate::helpers::options()
    };
    let (ledger, _test_db) = crate::helpers::fresh_ledger_with(Db::Postgres, &options).await;
    create(&ledger, new_job("acme", "kept", json!(1))).await;
    assert_eq!(ledger.group_stats().commits, 1);
    let pool = ledger.read_pool();
    assert_eq!(
        (pool.size(), pool.num_idle()),
        (1, 0),
        "the pool's one connection is the runner's"
    );
    let closed = tokio::time::timeout(Duration::from_secs(5), ledger.close()).await;
    assert!(closed.is_ok(), "the ledger did not close");
    assert_eq!(pool.size(), 0, "a connection outlived the ledger's closing");
}

/// A ledger handle may be the last one left after its runtime has stopped (a test's harness
/// drops its runtime and its ledger in turn). Dropping it then must not let go of a
/// connection the group commit kept: a connection let go spawns its return to the pool, and
/// with no runtime that panics (and, during a panic's cleanup, aborts the process).
#[test]
fn a_ledger_dropped_after_its_runtime_lets_no_kept_connection_go() {
    if crate::helpers::skip_postgres() {
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (ledger, _test_db) = runtime.block_on(fresh_ledger(Db::Postgres));
    runtime.block_on(create(&ledger, new_job("acme", "outlives", json!(1))));
    assert_eq!(ledger.group_stats().commits, 1);
    // The runtime stops with the runners, and the kept connection goes with their tasks.
    drop(runtime);
    let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(ledger)));
    assert!(dropped.is_ok(), "dropping the ledger panicked");
}

/// Every scan for what is due now (visible messages, due sends, passed deadlines) walks its
/// index only up to the database clock on PostgreSQL. The clock is a volatile function, which
/// an index scan cannot take as a bound: written bare, each poll walked every message in
/// flight, evaluating the clock per row. The lease's expiry has no index there (a renewal
/// must stay on its page): the scan for expired leases reads the running jobs by their state,
/// never the finished ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_for_what_is_due_stops_at_the_clock() {
    use sqlx::Executor;
    if crate::helpers::skip_postgres() {
        return;
    }
    let (ledger, test_db) = fresh_ledger(Db::Postgres).await;
    let raw = test_db.raw_pool().await;
    let mut conn = raw.acquire().await.unwrap();
    // 6,000 running jobs holding leases far ahead, their messages in flight and their sends
    // made, as in a busy deployment.
    for sql in [
        "INSERT INTO jobs (job_id, tenant, idempotency_key, request_digest, input_ref, \
         contract_version, state, owner_epoch, owner_id, owner_until, created_at, updated_at, \
         deadline_at, max_attempts) \
         SELECT 'job-' || g, 'acme', 'key-' || g, 'd', 'r', 'v1', 'running', 1, 'w', \
         9000000000000000, 0, 0, 9000000000000000, 3 FROM generate_series(1, 6000) AS g",
        // Many more finished, as a ledger keeps them until retention.
        "INSERT INTO jobs (job_id, tenant, idempotency_key, request_digest, input_ref, \
         contract_version, state, owner_epoch, created_at, updated_at, deadline_at, \
         max_attempts, terminal_at) \
         SELECT 'done-' || g, 'acme', 'done-' || g, 'd', 'r', 'v1', 'failed_terminal', 1, 0, 0, 0, \
         3, 0 FROM generate_series(1, 60000) AS g",
        "INSERT INTO queue_messages (queue, message_id, body, sent_at, visible_at, handle_hash) \
         SELECT 'work', 'm-' || g, '{}', 0, 9000000000000000, '0123abcd' \
         FROM generate_series(1, 6000) AS g",
        "INSERT INTO outbox (job_id, epoch, reason, created_at, available_at, dispatched_at) \
         SELECT 'job-' || g, 1, 'created', 0, CASE WHEN g % 10 = 0 THEN 9000000000000000 \
         ELSE 0 END, CASE WHEN g % 10 = 0 THEN NULL ELSE 1 END \
         FROM generate_series(1, 6000) AS g",
        "ANALYZE",
        "SET plan_cache_mode = force_generic_plan",
    ] {
        conn.execute(sql).await.unwrap();
    }
    let statements: HashMap<String, String> = ledger.statements().into_iter().collect();
    let mut wrong = Vec::new();
    for (name, column) in [
        ("queue_any_visible", "visible_at"),
        ("queue_visible", "visible_at"),
        ("outbox_due", "available_at"),
        ("outbox_due_rows", "available_at"),
        ("expired_leases", "state"),
        ("past_deadline", "deadline_at"),
    ] {
        let plan = generic_plan(&mut conn, name, &statements[name], "'1'").await;
        let bounded = plan
            .lines()
            .any(|line| line.contains("Index Cond: ") && line.contains(column));
        if !bounded || plan.contains("Seq Scan") {
            wrong.push(format!("{name} does not stop at the clock:\n{plan}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
}

/// Many callers at once fill group commits to their cap (512 writes on SQLite, 128 on
/// PostgreSQL), and every kind of write still fits its statements' limits there: new jobs,
/// events, receives and deletes all go through, and no batch fails whole.
async fn a_group_commit_at_its_cap_carries_every_kind_of_write(db: Db) {
    use fenceline::job::EventKind;
    use fenceline::ledger::NewEvent;
    const N: usize = 1_200;
    let (ledger, _db) = fresh_ledger(db).await;
    // Every call started before any is answered.
    async fn all<T: Send + 'static>(
        calls: impl Iterator<Item = impl std::future::Future<Output = T> + Send + 'static>,
    ) -> Vec<T> {
        let mut tasks = tokio::task::JoinSet::new();
        for call in calls {
            tasks.spawn(call);
        }
        tasks.join_all().await
    }
    let created = all((0..N).map(|i| {
        let ledger = ledger.clone();
        let new = new_job("acme", &format!("cap-{i}"), json!(i));
        async move { ledger.create_job(new, &Actor::Api("t".into())).await }
    }))
    .await;
    let ids: Vec<String> = created
        .into_iter()
        .map(|c| match c.unwrap() {
            Created::New(job) => job.job_id,
            other => panic!("{other:?}"),
        })
        .collect();
    let noted = all(ids.clone().into_iter().map(|id| {
        let ledger = ledger.clone();
        let event = NewEvent::new(EventKind::VisibilityRenewed, &Actor::Worker("w".into()));
        async move { ledger.note_event(&id, event).await }
    }))
    .await;
    assert!(noted.iter().all(Result::is_ok));
    for id in ids.iter().step_by(97) {
        assert_eq!(
            kinds(&ledger, id).await,
            ["job_created", "visibility_renewed"]
        );
    }
    let messages: Vec<(String, String)> = (0..N)
        .map(|i| (format!("m-{i}"), format!("{{\"n\":{i}}}")))
        .collect();
    ledger
        .queue_send("work", &messages, Duration::ZERO)
        .await
        .unwrap();
    let received = all((0..N / 10).map(|r| {
        let ledger = ledger.clone();
        let handles: Vec<String> = (0..10).map(|k| format!("{r:04}{k:04}")).collect();
        async move {
            let got = ledger.queue_receive("work", &handles, LONG, None).await;
            (handles, got)
        }
    }))
    .await;
    let mut taken = Vec::new();
    for (handles, got) in received {
        for message in got.unwrap() {
            taken.push((message.id, handles[message.handle].clone()));
        }
    }
    assert_eq!(taken.len(), N, "every message received once");
    let deleted = all(taken.into_iter().map(|(id, hash)| {
        let ledger = ledger.clone();
        async move { ledger.queue_delete("work", &[(id, hash)]).await }
    }))
    .await;
    assert!(deleted.into_iter().all(|d| d.unwrap() == [true]));
    let stats = ledger.group_stats();
    let cap = if db == Db::Sqlite { 512 } else { 128 };
    assert_eq!(stats.failed, 0, "{stats:?}");
    assert_eq!(stats.largest, cap, "{stats:?}");
}

async fn every_statement_of_the_catalogue_prepares(db: Db) {
    let (ledger, test_db) = fresh_ledger(db).await;
    // The benchmarks' reference table is made on demand; the statement that reads it needs it.
    ledger.naive_reset().await.unwrap();
    let raw = test_db.raw_pool().await;
    let statements = ledger.statements();
    assert!(statements.len() > 40, "{} statements", statements.len());
    let mut failed = Vec::new();
    for (name, sql) in statements {
        assert!(!sql.contains('{'), "{name} keeps a token: {sql}");
        if let Err(error) = sqlx::Executor::prepare(&raw, sql.as_str()).await {
            failed.push(format!("{name}: {error}\n  {sql}"));
        }
    }
    assert!(failed.is_empty(), "on {db:?}:\n{}", failed.join("\n"));
}

/// The overview's hourly rollup: closed hours are counted once, agree with counting live, and
/// keep their counts; the open stretch is always counted live.
async fn the_overview_rollup_counts_closed_hours_once_and_agrees_with_counting_live(db: Db) {
    use fenceline::job::EventKind;
    use fenceline::ledger::{DeliveryRef, NewEvent, FINISHED, HOUR, REDELIVERED};
    let (ledger, test_db) = fresh_ledger(db).await;
    let raw = test_db.raw_pool().await;
    let now = ledger.now_us().await.unwrap();
    let origin = (now / HOUR - 24) * HOUR;
    for i in 0..12i64 {
        // A job created 2i hours and 30 minutes ago, with a redelivery...
        let id = create(&ledger, new_job("acme", &format!("roll-{i}"), json!(i))).await;
        let received = NewEvent::new(EventKind::DeliveryReceived, &Actor::Worker("w".into()))
            .delivery(DeliveryRef {
                message_id: format!("m-{i}"),
                receive_count: 2,
                handle_hash: "0123abcd".into(),
            });
        ledger.record_event(&id, &received).await.unwrap();
        sqlx::query("UPDATE events SET at = at - $1 WHERE job_id = $2")
            .bind(i * 2 * HOUR + HOUR / 2)
            .bind(&id)
            .execute(&raw)
            .await
            .unwrap();
        // ...and a job that expired then, 30 s after it was created, having used 2 attempts.
        let at = now - i * 2 * HOUR - HOUR / 2;
        sqlx::query(
            "INSERT INTO jobs (job_id, tenant, idempotency_key, request_digest, input_ref, \
             contract_version, state, owner_epoch, deadline_at, attempt_count, budget_used, \
             max_attempts, created_at, updated_at, terminal_at, next_event_seq) \
             VALUES ($1, 'acme', $2, 'd', 'seed', 'seed', 'expired', 1, $3, 2, 2, 3, $4, $5, $5, 1)",
        )
        .bind(format!("job_{}", uuid::Uuid::now_v7()))
        .bind(format!("expired-{i}"))
        .bind(at + 60_000_000)
        .bind(at - 30_000_000)
        .bind(at)
        .execute(&raw)
        .await
        .unwrap();
    }
    let first = ledger.activity(origin, HOUR, 25).await.unwrap();
    assert!(
        first.rolled_until > origin,
        "closed hours came from the rollup"
    );
    let total =
        |a: &fenceline::ledger::Activity, series: &str| a.of(series, 25).iter().sum::<i64>();
    assert_eq!(total(&first, "job_created"), 12);
    assert_eq!(total(&first, REDELIVERED), 12);
    assert_eq!(total(&first, &format!("{FINISHED}expired")), 12);
    assert_eq!(first.took, [0, 0, 12, 0, 0, 0], "all took 30 s");
    assert_eq!(first.tries, [0, 0, 12, 0, 0, 0], "all used 2 attempts");
    // Job i's events sit in the bucket 2i hours and 30 minutes back.
    let created = first.of("job_created", 25);
    assert_eq!(
        created.iter().filter(|n| **n == 1).count(),
        12,
        "{created:?}"
    );
    // Again: the same counts, now all read from the rollup for the closed hours.
    assert_eq!(ledger.activity(origin, HOUR, 25).await.unwrap(), first);
    // Counted live throughout (buckets off the hour cannot use the rollup): the same.
    let live = ledger.activity(origin + 1, HOUR, 25).await.unwrap();
    assert_eq!(live.rolled_until, origin + 1, "nothing rolled");
    assert_eq!(live.series, first.series);
    assert_eq!(
        (live.took, live.tries),
        (first.took.clone(), first.tries.clone())
    );
    // Rolled-up hours keep their counts (retention may prune the rows they were counted
    // from); the open stretch is counted live.
    sqlx::query("DELETE FROM events WHERE kind = 'job_created'")
        .execute(&raw)
        .await
        .unwrap();
    let after = ledger.activity(origin, HOUR, 25).await.unwrap();
    let kept: i64 = after.of("job_created", 25).iter().sum();
    let closed_before: i64 = first
        .of("job_created", 25)
        .iter()
        .enumerate()
        .filter(|(b, _)| origin + (*b as i64 + 1) * HOUR <= first.rolled_until)
        .map(|(_, n)| n)
        .sum();
    assert_eq!(
        kept, closed_before,
        "closed hours kept, the open stretch recounted"
    );
}

on_both_backends!(the_overview_rollup_counts_closed_hours_once_and_agrees_with_counting_live);

/// Drill jobs are a drill's evidence, not the service's work: the overview's tiles and charts
/// and the metrics' job gauge leave them out (live and in rolled-up hours alike), and say how
/// many there are; the jobs list still counts them, since it lists them.
async fn drill_jobs_are_left_out_of_the_overview_and_the_job_gauge(db: Db) {
    use fenceline::job::{EventKind, JobState};
    use fenceline::ledger::{Drills, NewEvent, FINISHED, HOUR};
    let (ledger, test_db) = fresh_ledger(db).await;
    let raw = test_db.raw_pool().await;
    let now = ledger.now_us().await.unwrap();
    let origin = (now / HOUR - 24) * HOUR;
    let served = create(&ledger, new_job("acme", "served", json!(1))).await;
    let mut drill = new_job(fenceline::drill::DRILL_TENANT, "drilled", json!(2));
    drill.drill_run = Some("run-1".into());
    let drilled = create(&ledger, drill).await;
    let suppressed = NewEvent::new(EventKind::DuplicateSuppressed, &Actor::Worker("w".into()));
    for id in [&served, &drilled] {
        ledger.record_event(id, &suppressed).await.unwrap();
    }
    // A finished job of each kind, an hour and a half ago.
    for (key, tenant, run) in [
        ("old-served", "acme", None),
        ("old-drilled", "drill", Some("run-1")),
    ] {
        let at = now - HOUR - HOUR / 2;
        sqlx::query(
            "INSERT INTO jobs (job_id, tenant, idempotency_key, request_digest, input_ref, \
             contract_version, state, owner_epoch, deadline_at, attempt_count, max_attempts, \
             created_at, updated_at, terminal_at, next_event_seq, drill_run) \
             VALUES ($1, $2, $3, 'd', 'seed', 'seed', 'expired', 1, $4, 1, 3, $5, $6, $6, 1, $7)",
        )
        .bind(format!("job_{}", uuid::Uuid::now_v7()))
        .bind(tenant)
        .bind(key)
        .bind(at + 60_000_000)
        .bind(at - 30_000_000)
        .bind(at)
        .bind(run)
        .execute(&raw)
        .await
        .unwrap();
    }
    let total =
        |a: &fenceline::ledger::Activity, series: &str| a.of(series, 25).iter().sum::<i64>();
    let check = |a: &fenceline::ledger::Activity, how: &str| {
        assert_eq!(total(a, "job_created"), 1, "{how}: {a:?}");
        assert_eq!(total(a, "duplicate_suppressed"), 1, "{how}: {a:?}");
        assert_eq!(total(a, &format!("{FINISHED}expired")), 1, "{how}: {a:?}");
        assert_eq!(a.took.iter().sum::<i64>(), 1, "{how}: {a:?}");
        assert_eq!(a.tries.iter().sum::<i64>(), 1, "{how}: {a:?}");
    };
    check(
        &ledger.activity(origin + 1, HOUR, 25).await.unwrap(),
        "live",
    );
    // The same once the events are in closed hours and rolled up.
    sqlx::query("UPDATE events SET at = at - $1")
        .bind(2 * HOUR)
        .execute(&raw)
        .await
        .unwrap();
    let rolled = ledger.activity(origin, HOUR, 25).await.unwrap();
    assert!(rolled.rolled_until > now - 2 * HOUR, "{rolled:?}");
    check(&rolled, "rolled up");
    check(
        &ledger.activity(origin, HOUR, 25).await.unwrap(),
        "read back",
    );

    let of = |counts: &[(JobState, i64, bool)], state: JobState| {
        counts.iter().find(|c| c.0 == state).map(|c| c.1)
    };
    let apart = ledger
        .count_by_state_capped(None, 100, Drills::Apart)
        .await
        .unwrap();
    assert_eq!(of(&apart, JobState::Ready), Some(1), "{apart:?}");
    assert_eq!(of(&apart, JobState::Expired), Some(1), "{apart:?}");
    let listed = ledger
        .count_by_state_capped(None, 100, Drills::Counted)
        .await
        .unwrap();
    assert_eq!(of(&listed, JobState::Ready), Some(2), "{listed:?}");
    assert_eq!(of(&listed, JobState::Expired), Some(2), "{listed:?}");
    let gauge = ledger.count_by_state(None, Drills::Apart).await.unwrap();
    assert!(gauge.contains(&(JobState::Ready, 1)), "{gauge:?}");
    assert!(gauge.contains(&(JobState::Expired, 1)), "{gauge:?}");
    assert_eq!(ledger.drill_job_count().await.unwrap(), 2);
}
on_both_backends!(drill_jobs_are_left_out_of_the_overview_and_the_job_gauge);

/// A ledger write given up while its transaction is beginning (a heartbeat's bound running
/// out, a client hanging up) leaves no pooled connection inside a transaction on PostgreSQL.
/// One that did would run every later borrower's statements inside it, holding their locks,
/// and lose them when the connection closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_given_up_while_its_transaction_begins_leaves_no_connection_inside_it() {
    if crate::helpers::skip_postgres() {
        return;
    }
    let (ledger, test_db) = fresh_ledger(Db::Postgres).await;
    let raw = test_db.raw_pool().await;
    let job_id = create(&ledger, new_job("acme", "given-up", json!(1))).await;
    let (claimed, _) = ledger
        .claim_and_start(&job_id, "w", LONG, None, "stub")
        .await
        .unwrap();
    let leases = [(job_id.clone(), claimed.epoch)];
    let inside = "SELECT count(*) FROM pg_stat_activity \
                  WHERE datname = current_database() AND state LIKE 'idle in transaction%'";
    // Give the renewal up after one, two, … polls: one of them falls between `BEGIN` going
    // out and its answer coming back.
    for polls in 1..=40 {
        let mut renewal = Box::pin(ledger.renew_leases("w", &leases, LONG));
        for _ in 0..polls {
            let polled = std::future::poll_fn(|cx| {
                std::task::Poll::Ready(std::future::Future::poll(renewal.as_mut(), cx))
            })
            .await;
            if polled.is_ready() {
                break;
            }
            tokio::task::yield_now().await;
        }
        drop(renewal);
        // What a dropped transaction owes (its rollback) is settled by the next borrower at
        // the latest: use every connection the pool has once.
        for _ in 0..4 {
            ledger.job(&job_id).await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        let left: i64 = sqlx::query_scalar(inside).fetch_one(&raw).await.unwrap();
        assert_eq!(
            left, 0,
            "after a renewal given up at poll {polls}, a connection sits inside a transaction"
        );
    }
    // And the ledger still works: a renewal that runs to its end is on the timeline.
    ledger.renew_leases("w", &leases, LONG).await.unwrap();
    assert!(kinds(&ledger, &job_id)
        .await
        .contains(&"lease_renewed".to_string()));
}

/// On the embedded queue the result and the delete of its delivery are one transaction: the
/// message goes exactly when the result is durable, `message_deleted` right after
/// `result_accepted` at the same instant. A refused result deletes nothing; an outdated handle
/// deletes nothing and says so. A queue that injects delete faults, or a ledger without group
/// commit, leaves the delete to the caller.
async fn an_accepted_result_deletes_its_embedded_delivery_in_its_own_transaction(db: Db) {
    use fenceline::faults::Faults;
    use fenceline::job::message::JobMessage;
    use fenceline::job::EventKind;
    use fenceline::ledger::{AcceptDelete, Ledger, NewEvent};
    use fenceline::queue::embedded::EmbeddedQueue;
    use fenceline::queue::faults::{FaultPlan, FaultyQueue};
    use fenceline::queue::{DeletePlan, Delivery, Queue};

    const WAIT: Duration = Duration::from_secs(2);
    let (ledger, test_db) = fresh_ledger(db).await;
    let queue = EmbeddedQueue::new(ledger.clone(), "jobs", 5);
    /// Owner `a` at `epoch` accepts `body`, with the delete of `delivery` in its transaction.
    async fn accept_deleting(
        ledger: &Ledger,
        queue: &EmbeddedQueue,
        (job_id, epoch, attempt_no): (&str, i64, i64),
        body: &str,
        delivery: &Delivery,
    ) -> Result<(fenceline::ledger::Accepted, Option<bool>), LedgerError> {
        let actor = Actor::Worker("a".into());
        let message = match queue.delete_plan(ledger, &delivery.receipt) {
            DeletePlan::WithOutcome(message) => message,
            other => panic!("a delivery of the ledger's own queue is deleted with it: {other:?}"),
        };
        let delete = AcceptDelete {
            message,
            deleted: NewEvent::new(EventKind::MessageDeleted, &actor),
            not_deleted: NewEvent::new(EventKind::DeleteFailed, &actor),
        };
        let owner = as_owner(job_id, epoch, "a");
        ledger
            .accept_result_deleting(&owner, attempt_no, body, delete)
            .await
    }
    async fn job_with_delivery(
        ledger: &Ledger,
        queue: &EmbeddedQueue,
        key: &str,
        visibility: Duration,
    ) -> (String, Delivery) {
        let job_id = create(ledger, new_job("acme", key, json!(1))).await;
        queue
            .send(&JobMessage::body(&job_id, "acme"), Duration::ZERO)
            .await
            .unwrap();
        let mut got = queue.receive(1, visibility, WAIT).await.unwrap();
        assert_eq!(got.len(), 1);
        (job_id, got.remove(0))
    }
    let depth = |queue: &EmbeddedQueue| {
        let queue = queue.clone();
        async move {
            let d = queue.depth().await.unwrap();
            d.visible + d.in_flight
        }
    };

    // Accepted: the message is gone with it.
    let (job_id, delivery) = job_with_delivery(&ledger, &queue, "with", LONG).await;
    let (a, attempt) = ledger
        .claim_and_start(&job_id, "a", LONG, None, "stub")
        .await
        .unwrap();
    let (_, deleted) = accept_deleting(
        &ledger,
        &queue,
        (&job_id, a.epoch, attempt.attempt_no),
        "answer",
        &delivery,
    )
    .await
    .unwrap();
    assert_eq!(deleted, Some(true));
    assert_eq!(depth(&queue).await, 0, "the message went with the result");
    let events = ledger.events(&job_id, 0, 100).await.unwrap();
    let accepted = events.iter().find(|e| e.kind == "result_accepted").unwrap();
    let gone = events.iter().find(|e| e.kind == "message_deleted").unwrap();
    assert_eq!(
        (gone.seq, gone.at, gone.epoch),
        (accepted.seq + 1, accepted.at, a.epoch),
        "in the same transaction, right after the acceptance"
    );
    assert_eq!(events.last().unwrap().seq, gone.seq);

    // Refused (fenced out by a recovery): nothing is deleted.
    let (job_id, delivery) = job_with_delivery(&ledger, &queue, "fenced", LONG).await;
    let (a, attempt) = ledger
        .claim_and_start(&job_id, "a", Duration::from_millis(300), None, "stub")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    ledger
        .recovery_claim(&job_id, &Actor::Worker("b".into()), "lease_expired", false)
        .await
        .unwrap();
    let refused = accept_deleting(
        &ledger,
        &queue,
        (&job_id, a.epoch, attempt.attempt_no),
        "late",
        &delivery,
    )
    .await;
    assert_eq!(
        refusal(refused),
        Refusal::StaleEpoch {
            expected: a.epoch,
            found: a.epoch + 1
        }
    );
    assert_eq!(depth(&queue).await, 1, "a refused result deletes nothing");
    let kinds_now = kinds(&ledger, &job_id).await;
    assert!(!kinds_now
        .iter()
        .any(|k| k == "message_deleted" || k == "delete_failed"));

    // Overtaken: the message was received again under a new handle.
    let (job_id, first) =
        job_with_delivery(&ledger, &queue, "overtaken", Duration::from_millis(200)).await;
    let (a, attempt) = ledger
        .claim_and_start(&job_id, "a", LONG, None, "stub")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let before = depth(&queue).await;
    let again = queue.receive(10, LONG, WAIT).await.unwrap();
    assert!(again.iter().any(|d| d.message_id == first.message_id));
    let (_, deleted) = accept_deleting(
        &ledger,
        &queue,
        (&job_id, a.epoch, attempt.attempt_no),
        "answer",
        &first,
    )
    .await
    .unwrap();
    assert_eq!(deleted, Some(false));
    assert_eq!(depth(&queue).await, before, "the newer delivery keeps it");
    let events = ledger.events(&job_id, 0, 100).await.unwrap();
    assert_eq!(job_state(&ledger, &job_id).await, JobState::Succeeded);
    let last = events.last().unwrap();
    assert_eq!(last.kind, "delete_failed");
    assert!(!events.iter().any(|e| e.kind == "message_deleted"));

    // A queue that injects delete faults keeps them: a drill's deletes apart, a rate's drawn.
    let (_, delivery) = job_with_delivery(&ledger, &queue, "faults", LONG).await;
    let drilled = FaultyQueue::with_faults(queue.clone(), Faults::default());
    assert!(matches!(
        drilled.delete_plan(&ledger, &delivery.receipt),
        DeletePlan::Apart
    ));
    let lossy = FaultyQueue::new(queue.clone());
    lossy.arm(FaultPlan {
        delete_timeout: 1.0,
        ..FaultPlan::default()
    });
    assert!(matches!(
        lossy.delete_plan(&ledger, &delivery.receipt),
        DeletePlan::Injected(Err(_))
    ));
    lossy.disarm();
    assert!(matches!(
        lossy.delete_plan(&ledger, &delivery.receipt),
        DeletePlan::WithOutcome(_)
    ));

    // Without group commit the result goes alone and the caller deletes.
    let alone = Ledger::connect(
        test_db.url.as_str(),
        &fenceline::ledger::LedgerOptions {
            group_commit: false,
            ..crate::helpers::options()
        },
    )
    .await
    .unwrap();
    let queue_alone = EmbeddedQueue::new(alone.clone(), "jobs", 5);
    let (job_id, delivery) = job_with_delivery(&alone, &queue_alone, "alone", LONG).await;
    assert!(
        matches!(
            queue.delete_plan(&alone, &delivery.receipt),
            DeletePlan::Apart
        ),
        "another ledger handle's queue is not this transaction's"
    );
    let (a, attempt) = alone
        .claim_and_start(&job_id, "a", LONG, None, "stub")
        .await
        .unwrap();
    let (_, deleted) = accept_deleting(
        &alone,
        &queue_alone,
        (&job_id, a.epoch, attempt.attempt_no),
        "answer",
        &delivery,
    )
    .await
    .unwrap();
    assert_eq!(deleted, None);
    assert_eq!(job_state(&alone, &job_id).await, JobState::Succeeded);
    alone.close().await;
}

async fn job_state(ledger: &fenceline::ledger::Ledger, job_id: &str) -> JobState {
    ledger.job(job_id).await.unwrap().unwrap().state
}

/// Records an event that follows no renewal on `job_id`'s timeline; its place.
async fn unrelated_event(ledger: &fenceline::ledger::Ledger, job_id: &str) -> i64 {
    use fenceline::job::EventKind;
    use fenceline::ledger::NewEvent;
    let worker = Actor::Worker("w".into());
    let event = NewEvent::new(EventKind::DuplicateSuppressed, &worker);
    ledger.record_event(job_id, &event).await.unwrap()
}

/// The activity counts read events through the two partial indexes made for them: the kinds
/// the overview counts (`events_activity_kind_at`) and redeliveries (`events_redelivered_at`),
/// never a scan of the timeline. Each index holds only what its condition names, and a
/// planner takes it only when it can prove the statement asks for no more; the statement and
/// the migration list the kinds alike, and this fails when they drift.
async fn the_activity_counts_read_events_through_their_partial_indexes(db: Db) {
    use sqlx::{Executor, Row};
    let (ledger, test_db) = fresh_ledger(db).await;
    let raw = test_db.raw_pool().await;
    let mut conn = raw.acquire().await.unwrap();
    for (i, sql) in fenceline::ledger::activity_statements(ledger.backend())
        .into_iter()
        .enumerate()
    {
        let plan = match db {
            Db::Sqlite => {
                let sql = sql.replace("$1", "0").replace("$2", "1").replace("$3", "0");
                sqlx::query(&format!("EXPLAIN QUERY PLAN {sql}"))
                    .fetch_all(&mut *conn)
                    .await
                    .unwrap()
                    .iter()
                    .map(|row| row.get::<String, _>("detail"))
                    .collect::<Vec<_>>()
                    .join("\n")
            }
            Db::Postgres => {
                // Whatever the statistics of an empty table would prefer: the index must be
                // one the planner can take at all.
                conn.execute("SET enable_seqscan = off").await.unwrap();
                generic_plan(&mut conn, "activity", &sql, "0").await
            }
        };
        for index in ["events_activity_kind_at", "events_redelivered_at"] {
            assert!(
                plan.contains(index),
                "statement {i} does not use {index}:\n{plan}"
            );
        }
        assert!(
            !plan.contains("SCAN events") && !plan.contains("Seq Scan on events"),
            "statement {i} scans the timeline:\n{plan}"
        );
    }
}

on_both_backends!(the_activity_counts_read_events_through_their_partial_indexes);
