//! Cancelling jobs, one or in bulk from the jobs list: fenced by what the operator saw.

use super::*;

on_both_backends!(
    a_running_job_is_cancelled_fenced_and_its_attempt_cannot_commit,
    a_bulk_cancel_from_the_jobs_list_fences_each_job_on_its_own,
    a_ready_job_is_not_offered_for_cancelling_and_a_request_to_is_told_why,
);

async fn a_running_job_is_cancelled_fenced_and_its_attempt_cannot_commit(db: Db) {
    let app = spawn_app(db).await;
    let ledger = &app.ledger;
    let job_id = create(ledger, new_job("acme", "cancel", json!("input"))).await;
    let claimed = ledger
        .claim(&job_id, "w1", Duration::from_secs(60))
        .await
        .unwrap();
    let owner = as_owner(&job_id, claimed.epoch, "w1");
    let attempt = ledger.start_attempt(&owner, "stub").await.unwrap();
    let mut olga = signed_in(&app, "olga", Role::Operator, None).await;
    let page = format!("/jobs/{job_id}");
    let html = olga.page(&page).await;
    assert!(html.contains("?act=cancel"), "a live job offers cancel");
    assert!(
        html.contains("<dt>Owner</dt><dd>w1</dd>"),
        "a running job names its owner"
    );
    assert!(
        html.contains("http-equiv=\"refresh\""),
        "a live job's page refreshes"
    );
    let html = olga.page(&format!("{page}?act=cancel")).await;
    assert!(html.contains(&format!("action=\"/jobs/{job_id}/cancel\"")));
    assert!(
        !html.contains("http-equiv=\"refresh\""),
        "the page holds still while the reason is typed"
    );
    // A page that showed the job in another state is stale: nothing changes.
    let html = olga
        .cancel(&job_id, claimed.epoch, "ready", "wrong view")
        .await;
    assert!(html.contains("This job changed since you loaded it"));
    assert_eq!(
        ledger.job(&job_id).await.unwrap().unwrap().state,
        JobState::Running
    );
    let html = olga
        .cancel(
            &job_id,
            claimed.epoch,
            "running",
            "the customer withdrew the document",
        )
        .await;
    assert!(html.contains("Job cancelled"), "{html}");
    assert!(!html.contains("?act=cancel"), "a terminal job offers none");
    // The cancel took the job at a new epoch: nobody owns it now, the operator had it last.
    assert!(
        html.contains("<dt>Last owner</dt><dd>operator:olga</dd>")
            && !html.contains("<dt>Owner</dt>"),
        "a finished job is owned by nobody: the page says who had it last"
    );
    let job = ledger.job(&job_id).await.unwrap().unwrap();
    assert_eq!(job.state, JobState::FailedTerminal);
    assert_eq!(job.error_code.as_deref(), Some("cancelled"));
    assert_eq!(job.owner_epoch, claimed.epoch + 1);
    let attempts = ledger.attempts(&job_id).await.unwrap();
    assert_eq!(
        attempts[0].outcome.as_str(),
        "lost",
        "the call in flight is lost"
    );
    // The worker's call returns: its commit is fenced out.
    let late = ledger
        .accept_result(&owner, attempt.attempt_no, "late answer")
        .await;
    assert!(matches!(
        late,
        Err(fenceline::ledger::LedgerError::Refused {
            refusal: Refusal::StaleEpoch { .. },
            ..
        })
    ));
    let attempts = ledger.attempts(&job_id).await.unwrap();
    assert_eq!(
        attempts[0].outcome.as_str(),
        "stale_discarded",
        "its late answer is discarded"
    );
    // The page tells what became of the call after the cancel: its answer came late, was
    // rejected and kept as evidence; the swimlane draws the attempt up to that answer.
    let html = olga.page(&page).await;
    assert!(
        html.contains("its answer came at +") && html.contains("was rejected (stale_epoch, #"),
        "{html}"
    );
    assert!(html.contains("kept as evidence"), "{html}");
    assert!(
        html.contains("<g class=\"attempt outcome-stale_discarded\"><title>attempt 1 at epoch 1"),
        "{html}"
    );
    let entries = ledger
        .audit_entries(&fenceline::ledger::AuditFilter {
            action: Some("cancel".into()),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].state_before.as_deref(), Some("running"));
    assert_eq!(entries[0].state_after.as_deref(), Some("failed_terminal"));
    assert_eq!(entries[0].actor, "operator:olga");
    // Once terminal, a second cancel changes nothing.
    assert!(ledger
        .cancel(
            &job_id,
            job.owner_epoch,
            JobState::FailedTerminal,
            &Actor::System,
            "again"
        )
        .await
        .is_err());
}

async fn a_bulk_cancel_from_the_jobs_list_fences_each_job_on_its_own(db: Db) {
    let app = spawn_app(db).await;
    let ledger = &app.ledger;
    // Three running jobs, and one still ready (not offered: it has not started).
    let mut running = Vec::new();
    for i in 0..3 {
        let id = claimed_job(ledger, "acme", &format!("cancel-{i}"), "w1").await;
        running.push(id);
    }
    let waiting = create(ledger, new_job("acme", "cancel-waiting", json!(8))).await;
    let theirs = claimed_job(ledger, "globex", "cancel-theirs", "w1").await;
    let list = "/jobs?tenant=acme";
    let mut olga = signed_in(&app, "olga", Role::Operator, None).await;
    let page = olga.page(list).await;
    assert_eq!(
        page.matches("name=\"job\"").count(),
        3,
        "a pick box per running job"
    );
    assert!(page.contains(&waiting) && !page.contains(&format!("{waiting}:")));
    let nothing_to_pick = olga.page("/jobs?tenant=acme&state=ready").await;
    assert!(nothing_to_pick.contains(&waiting));
    assert!(
        !nothing_to_pick.contains("Cancel picked jobs") && !nothing_to_pick.contains(">Pick<"),
        "no pick column or cancel form where no job can be cancelled"
    );
    assert!(
        !page.contains("name=\"job\" checked"),
        "nothing picked unless asked"
    );
    assert!(page.contains("action=\"/jobs/cancel\""));
    let all = olga.page(&format!("{list}&select=all")).await;
    assert_eq!(all.matches("name=\"job\" checked").count(), 3);
    // Someone else cancels the second job before olga submits.
    ledger
        .cancel(
            &running[1],
            1,
            JobState::Running,
            &Actor::Operator("omar".into()),
            "first",
        )
        .await
        .unwrap();
    let picks: Vec<String> = running.iter().map(|id| format!("{id}:1:running")).collect();
    let response = olga
        .cancel_picked(list, &picks, "submitted by mistake")
        .await;
    assert_eq!(
        location(&response),
        list,
        "back to the same list, filters kept"
    );
    let page = olga.page(list).await;
    assert!(
        page.contains("2 jobs cancelled: each failed for good at a new epoch")
            && page.contains("; 1 had changed since the page was loaded and was left as it is.")
            && !page.contains("could not be cancelled"),
        "{page}"
    );
    for (i, id) in running.iter().enumerate() {
        let job = ledger.job(id).await.unwrap().unwrap();
        assert_eq!(job.state, JobState::FailedTerminal);
        assert_eq!(job.error_code.as_deref(), Some("cancelled"));
        assert_eq!(
            job.owner_epoch, 2,
            "job {i} moved past the epoch it was seen at"
        );
    }
    let audit = ledger
        .audit_entries(&fenceline::ledger::AuditFilter {
            actor: Some("operator:olga".into()),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    let mut cancelled: Vec<String> = audit
        .iter()
        .filter(|e| e.action == "cancel")
        .filter_map(|e| e.job_id.clone())
        .collect();
    cancelled.sort();
    let mut expected = vec![running[0].clone(), running[2].clone()];
    expected.sort();
    assert_eq!(
        cancelled, expected,
        "one audit entry for each job olga cancelled"
    );

    // Nothing changes without a reason, and the way back stays in this console.
    let other = claimed_job(ledger, "acme", "cancel-3", "w1").await;
    let pick = format!("{other}:1:running");
    let csrf = olga.token("/jobs").await;
    let response = olga
        .post(
            "/jobs/cancel",
            &[
                ("csrf", csrf.as_str()),
                ("reason", " "),
                ("back", "//evil.example/jobs"),
                ("job", pick.as_str()),
            ],
        )
        .await;
    assert_eq!(location(&response), "/jobs");
    assert!(olga
        .page("/jobs")
        .await
        .contains("A cancellation needs a reason"));
    assert_eq!(
        ledger.job(&other).await.unwrap().unwrap().state,
        JobState::Running
    );

    // An operator limited to acme cannot cancel globex's job by naming it.
    let acme = ["acme".to_owned()];
    let mut sam = signed_in(&app, "sam", Role::Operator, Some(&acme)).await;
    let csrf = sam.token("/jobs").await;
    let forged = format!("{theirs}:1:running");
    let response = sam
        .post(
            "/jobs/cancel",
            &[
                ("csrf", csrf.as_str()),
                ("reason", "not mine"),
                ("job", forged.as_str()),
            ],
        )
        .await;
    assert_eq!(location(&response), "/jobs");
    assert!(sam.page("/jobs").await.contains(
        "No job was cancelled; 1 could not be cancelled (finished or not started, not yours"
    ));
    assert_eq!(
        ledger.job(&theirs).await.unwrap().unwrap().state,
        JobState::Running
    );

    // A viewer sees no pick boxes and cannot cancel.
    let mut vera = signed_in(&app, "vera", Role::Viewer, None).await;
    let page = vera.page("/jobs").await;
    assert!(!page.contains("name=\"job\""));
    let csrf = token_in(&page).unwrap();
    let response = vera
        .post(
            "/jobs/cancel",
            &[
                ("csrf", csrf.as_str()),
                ("reason", "look"),
                ("job", pick.as_str()),
            ],
        )
        .await;
    assert_eq!(response.status(), 403);
    assert_eq!(
        ledger.job(&other).await.unwrap().unwrap().state,
        JobState::Running
    );
}

/// The state table has no edge from `ready` to `failed_terminal`: a job fails only after an
/// attempt or a decision. Asked to cancel a ready job, every way in says so, and nothing
/// changes (it was a server error on the API, and "the ledger did not answer" on the console).
async fn a_ready_job_is_not_offered_for_cancelling_and_a_request_to_is_told_why(db: Db) {
    let app = spawn_app(db).await;
    let ledger = &app.ledger;
    let job_id = create(ledger, new_job("acme", "still-ready", json!(1))).await;
    let refused = ledger
        .cancel(
            &job_id,
            0,
            JobState::Ready,
            &Actor::Operator("olga".into()),
            "too early",
        )
        .await;
    match refused {
        Err(fenceline::ledger::LedgerError::Invalid(why)) => {
            assert!(why.contains("ready"), "{why}")
        }
        other => panic!("a ready job's cancel must be refused as invalid: {other:?}"),
    }
    add_operator(ledger, "olga", Role::Operator, None).await;
    let token = ledger.add_operator_token("olga", "bot").await.unwrap();
    let response = app
        .client
        .post(format!("{}/api/v1/jobs/{job_id}/cancel", app.base))
        .bearer_auth(token)
        .json(&json!({ "epoch": 0, "state": "ready", "reason": "too early" }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let body: serde_json::Value = response.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("ready"), "{message}");

    let mut browser = signed_in(&app, "olivia", Role::Operator, None).await;
    let page = browser.page(&format!("/jobs/{job_id}")).await;
    assert!(
        !page.contains("Cancel this job"),
        "no cancel offered for a ready job"
    );
    let page = browser.page(&format!("/jobs/{job_id}?act=cancel")).await;
    assert!(!page.contains(&format!("action=\"/jobs/{job_id}/cancel\"")));
    let csrf = token_in(&page).unwrap();
    browser
        .post(
            &format!("/jobs/{job_id}/cancel"),
            &[
                ("csrf", csrf.as_str()),
                ("epoch", "0"),
                ("state", "ready"),
                ("reason", "too early"),
            ],
        )
        .await;
    let page = browser.page(&format!("/jobs/{job_id}")).await;
    assert!(
        page.contains("A ready job cannot be cancelled"),
        "the operator is told why: {page}"
    );
    assert_eq!(
        ledger.job(&job_id).await.unwrap().unwrap().state,
        JobState::Ready
    );
}
