//! Claims, leases and fencing: one owner at a time, every write under its epoch, renewals and
//! releases within the deadline.

use super::*;
use fenceline::job::detail;

on_both_backends!(
    several_workers_claims_in_one_commit_each_take_their_own_worker_and_lease,
    a_worker_claims_and_starts_in_one_step_with_its_delivery_on_the_timeline,
    a_job_runs_from_claim_to_one_accepted_result_with_every_step_on_its_timeline,
    thirty_two_racing_claims_make_exactly_one_owner,
    an_owner_fenced_by_a_recovery_claim_can_neither_renew_nor_start_nor_accept,
    an_accept_after_the_lease_or_the_deadline_is_refused_even_at_the_right_epoch,
    a_live_owner_holds_off_claims_and_recoveries,
    many_leases_renew_in_one_call_and_each_refusal_says_why,
    on_a_queue_in_the_ledger_a_lease_and_its_visibility_renew_in_one_transaction,
    a_lease_renewal_leaves_no_number_for_a_write_that_may_never_come,
    two_results_of_one_owner_sent_at_once_accept_the_one_answered,
    a_release_after_the_deadline_is_refused_and_the_job_expires,
    an_accepted_result_deletes_its_embedded_delivery_in_its_own_transaction,
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
    assert_eq!(
        rejected
            .detail_as::<detail::ResultRejected>()
            .unwrap()
            .reason,
        "stale_epoch"
    );
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
