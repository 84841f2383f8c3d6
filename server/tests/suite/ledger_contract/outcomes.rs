//! How attempts end: failures and their backoff, uncertain attempts and the decisions they need,
//! replay policies, and the states the database refuses.

use super::*;

on_both_backends!(
    an_uncertain_attempt_needs_a_recorded_decision_before_another_attempt,
    a_recovery_with_no_attempt_in_flight_authorizes_a_retry,
    retryable_failures_back_off_and_end_in_failed_terminal_when_the_budget_is_spent,
    a_fatal_failure_is_terminal_at_once,
    only_a_replay_policy_job_may_be_retried_by_the_policy,
    an_operator_can_resolve_an_unknown_job_as_succeeded_with_evidence,
    the_database_refuses_illegal_states_even_from_raw_sql,
);

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
