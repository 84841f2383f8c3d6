//! Decisions on `unknown` jobs, one or in bulk: fenced by the epoch seen, audited, and shown on the
//! swimlane.

use super::*;
use crate::helpers::Decision;
use fenceline::job::detail;

on_both_backends!(
    an_operator_authorizes_a_fenced_retry_and_the_earlier_attempt_cannot_commit,
    two_operators_deciding_at_once_one_applies_the_other_is_told,
    an_unknown_job_is_resolved_as_succeeded_with_evidence_or_as_failed,
    an_unknown_jobs_swimlane_shows_its_epoch_change_and_its_wait_for_a_decision,
    a_bulk_decision_fences_each_job_on_its_own,
);

async fn an_operator_authorizes_a_fenced_retry_and_the_earlier_attempt_cannot_commit(db: Db) {
    let app = spawn_app(db).await;
    let ledger = &app.ledger;
    let (job_id, first_epoch, epoch) = unknown_job(ledger, "acme", "retry").await;
    let mut olga = signed_in(&app, "olga", Role::Operator, None).await;
    let page = olga
        .decide(
            &job_id,
            epoch,
            Decision::Retry,
            "provider shows no trace of the call",
        )
        .await;
    assert!(
        page.contains("Retry authorized"),
        "the flash says what happened"
    );
    let job = ledger.job(&job_id).await.unwrap().unwrap();
    assert_eq!(job.state, JobState::RetryAuthorized);
    assert_eq!(job.owner_epoch, epoch + 1);

    // The first attempt's worker wakes up and tries to commit: fenced.
    let late = ledger
        .accept_result(&as_owner(&job_id, first_epoch, "w1"), 1, "late answer")
        .await;
    assert!(matches!(
        late,
        Err(fenceline::ledger::LedgerError::Refused {
            refusal: Refusal::StaleEpoch { .. },
            ..
        })
    ));
    // The retry runs and its result is accepted; the budget counts both attempts.
    succeed(ledger, &job_id, "w2", "{\"summary\":\"retried\"}").await;
    let job = ledger.job(&job_id).await.unwrap().unwrap();
    assert_eq!(job.state, JobState::Succeeded);
    assert_eq!(job.attempt_count, 2, "the attempt budget is cumulative");

    // The timeline and the audit log both say who decided, at which epoch and why.
    let page = olga.page(&format!("/jobs/{job_id}")).await;
    assert!(page.contains("operator:olga"));
    assert!(page.contains("provider shows no trace of the call"));
    let audit = olga.page("/audit?operator=olga").await;
    assert!(audit.contains(&job_id), "{audit}");
    assert!(audit.contains("authorize retry"));
    assert!(audit.contains("provider shows no trace of the call"));
    let entries = ledger
        .audit_entries(&fenceline::ledger::AuditFilter {
            job_id: Some(job_id.clone()),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(entries.len(), 1);
    let e = &entries[0];
    assert_eq!(
        (
            e.actor.as_str(),
            e.action.as_str(),
            e.seen_epoch,
            e.new_epoch
        ),
        (
            "operator:olga",
            "authorize_retry",
            Some(epoch),
            Some(epoch + 1)
        )
    );
    assert_eq!(e.state_before.as_deref(), Some("unknown"));
    assert_eq!(e.state_after.as_deref(), Some("retry_authorized"));
    assert_eq!(e.tenant.as_deref(), Some("acme"));
    assert!(ledger
        .events(&job_id, 0, 100)
        .await
        .unwrap()
        .iter()
        .any(|ev| ev.kind == "decision_recorded" && ev.actor == "operator:olga"));
}

async fn two_operators_deciding_at_once_one_applies_the_other_is_told(db: Db) {
    let app = spawn_app(db).await;
    let (job_id, _, epoch) = unknown_job(&app.ledger, "acme", "race").await;
    let mut olga = signed_in(&app, "olga", Role::Operator, None).await;
    let mut omar = signed_in(&app, "omar", Role::Operator, None).await;
    let page = format!("/jobs/{job_id}");
    let (a, b) = (olga.token(&page).await, omar.token(&page).await);
    let epoch_text = epoch.to_string();
    let path = format!("{page}/decisions");
    let form_a = [
        ("csrf", a.as_str()),
        ("epoch", epoch_text.as_str()),
        ("decision", "authorize_retry"),
        ("reason", "olga retries"),
    ];
    let form_b = [
        ("csrf", b.as_str()),
        ("epoch", epoch_text.as_str()),
        ("decision", "resolve_failed"),
        ("reason", "omar gives up"),
    ];
    let (ra, rb) = tokio::join!(olga.post(&path, &form_a), omar.post(&path, &form_b));
    assert_eq!((ra.status().as_u16(), rb.status().as_u16()), (303, 303));
    let decisions = app.ledger.decisions(&job_id).await.unwrap();
    assert_eq!(decisions.len(), 1, "exactly one decision applies");
    let (pa, pb) = (olga.page(&page).await, omar.page(&page).await);
    let told = |p: &str| p.contains("This job changed since you loaded it");
    assert!(
        told(&pa) != told(&pb),
        "exactly one is told the job changed"
    );
    let job = app.ledger.job(&job_id).await.unwrap().unwrap();
    assert!(matches!(
        job.state,
        JobState::RetryAuthorized | JobState::FailedTerminal
    ));
}

async fn an_unknown_job_is_resolved_as_succeeded_with_evidence_or_as_failed(db: Db) {
    let app = spawn_app(db).await;
    let (done, _, epoch) = unknown_job(&app.ledger, "acme", "done").await;
    let (gone, _, gone_epoch) = unknown_job(&app.ledger, "acme", "gone").await;
    let mut olga = signed_in(&app, "olga", Role::Operator, None).await;
    // Evidence is required to resolve as succeeded; a reason always.
    let page = olga
        .decide(
            &done,
            epoch,
            Decision::Succeeded {
                evidence: "",
                result: "",
            },
            "seen in the provider",
        )
        .await;
    assert!(page.contains("needs evidence"), "{page}");
    let page = olga.decide(&done, epoch, Decision::Failed, " ").await;
    assert!(page.contains("Nothing was changed"), "{page}");
    assert_eq!(
        app.ledger.job(&done).await.unwrap().unwrap().state,
        JobState::Unknown
    );
    // Evidence is bounded on the server as on the form: 500 characters.
    let long = "r".repeat(5_000);
    let page = olga
        .decide(
            &done,
            epoch,
            Decision::Succeeded {
                evidence: &long,
                result: "",
            },
            "seen in the provider",
        )
        .await;
    assert!(page.contains("at most 500 characters"), "{page}");
    assert!(page.contains("Nothing was changed"), "{page}");
    assert_eq!(
        app.ledger.job(&done).await.unwrap().unwrap().state,
        JobState::Unknown
    );
    let page = olga
        .decide(
            &done,
            epoch,
            Decision::Succeeded {
                evidence: "chatcmpl-123",
                result: "{\"summary\":\"from the provider's log\"}",
            },
            "the provider's log has the answer",
        )
        .await;
    assert!(page.contains("Decision recorded"), "{page}");
    // The evidence shows wherever the decision does: the job's decisions, its timeline, the
    // audit log and both exports.
    let decisions = page
        .split("id=\"decisions\"")
        .nth(1)
        .expect("the decisions section");
    assert!(decisions.contains("chatcmpl-123"), "{decisions}");
    let recorded = app
        .ledger
        .all_events(&done)
        .await
        .unwrap()
        .into_iter()
        .find(|e| e.kind.as_str() == "decision_recorded")
        .expect("decision_recorded");
    assert_eq!(
        recorded
            .detail_as::<detail::DecisionRecorded>()
            .unwrap()
            .evidence
            .flatten()
            .as_deref(),
        Some("chatcmpl-123")
    );
    let audit = olga.page("/audit").await;
    assert!(
        audit.contains("Evidence: <code>chatcmpl-123</code>"),
        "{audit}"
    );
    let markdown = olga.page(&format!("/jobs/{done}/export.md")).await;
    assert!(markdown.contains("| `chatcmpl-123` |"), "{markdown}");
    let json: serde_json::Value =
        serde_json::from_str(&olga.page(&format!("/jobs/{done}/export.json")).await).unwrap();
    assert_eq!(json["decisions"][0]["evidence"], "chatcmpl-123");
    let job = app.ledger.job(&done).await.unwrap().unwrap();
    assert_eq!(job.state, JobState::Succeeded);
    let body = app
        .ledger
        .result_body(job.result_ref.as_deref().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(body, "{\"summary\":\"from the provider's log\"}");
    // The job page links to the result; reading it is audited.
    let page = olga.page(&format!("/jobs/{done}")).await;
    assert!(page.contains(&format!("href=\"/jobs/{done}/result\"")));
    let result = olga.page(&format!("/jobs/{done}/result")).await;
    assert!(result.contains("from the provider's log"), "{result}");
    let viewed = app
        .ledger
        .audit_entries(&fenceline::ledger::AuditFilter {
            action: Some("result_viewed".into()),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(viewed.len(), 1);
    assert_eq!(viewed[0].actor, "operator:olga");
    assert_eq!(viewed[0].job_id.as_deref(), Some(done.as_str()));
    let acme_only = ["globex".to_owned()];
    let mut other = signed_in(&app, "gina", Role::Viewer, Some(&acme_only)).await;
    assert_eq!(
        other.get(&format!("/jobs/{done}/result")).await.status(),
        404
    );

    olga.decide(
        &gone,
        gone_epoch,
        Decision::Failed,
        "the customer withdrew it",
    )
    .await;
    assert_eq!(
        app.ledger.job(&gone).await.unwrap().unwrap().state,
        JobState::FailedTerminal
    );
    // A stale page changes nothing.
    let page = olga
        .decide(&gone, gone_epoch, Decision::Retry, "again")
        .await;
    assert!(
        page.contains("This job changed since you loaded it"),
        "{page}"
    );
}

async fn an_unknown_jobs_swimlane_shows_its_epoch_change_and_its_wait_for_a_decision(db: Db) {
    let app = spawn_app(db).await;
    let (job_id, _, epoch) = unknown_job(&app.ledger, "acme", "waits").await;
    assert_eq!(epoch, 2);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut vera = signed_in(&app, "vera", Role::Viewer, None).await;
    let page = vera.page(&format!("/jobs/{job_id}")).await;
    let chart = &page[page.find("swimlane-svg").expect("a swimlane")..];
    let chart = &chart[..chart.find("</svg>").unwrap()];
    // The move to `unknown` bumps the epoch on the lease lane, and epoch 2's wait runs on
    // to now.
    assert!(chart.contains("class=\"point epoch-change\""), "{chart}");
    assert!(chart.contains("epoch 1 → 2: recovery claimed"), "{chart}");
    assert!(chart.contains("<g class=\"waiting unknown\">"), "{chart}");
    assert!(
        chart.contains("epoch 2: unknown from +") && chart.contains("waiting for a decision"),
        "{chart}"
    );
    // A decision ends the wait; the retry it authorizes waits for a worker at epoch 3.
    app.ledger
        .decide(
            &job_id,
            epoch,
            &fenceline::ledger::Decision::AuthorizeRetry,
            &Actor::Operator("olga".into()),
            "the provider has no trace of it",
        )
        .await
        .unwrap();
    let page = vera.page(&format!("/jobs/{job_id}")).await;
    let chart = &page[page.find("swimlane-svg").unwrap()..];
    let chart = &chart[..chart.find("</svg>").unwrap()];
    assert!(chart.contains("<g class=\"waiting unknown\">"), "{chart}");
    assert!(!chart.contains("waiting for a decision"), "{chart}");
    assert!(chart.contains("until the decision"), "{chart}");
    assert!(chart.contains("epoch 2 → 3: decision"), "{chart}");
    assert!(
        chart.contains("<g class=\"waiting retry_authorized\">")
            && chart.contains("epoch 3: retry authorized from +"),
        "{chart}"
    );
}

async fn a_bulk_decision_fences_each_job_on_its_own(db: Db) {
    let app = spawn_app(db).await;
    let ledger = &app.ledger;
    let mut jobs = Vec::new();
    for i in 0..3 {
        jobs.push(unknown_job(ledger, "acme", &format!("bulk-{i}")).await);
    }
    let mut olga = signed_in(&app, "olga", Role::Operator, None).await;
    let page = olga.page("/unknown").await;
    assert!(page.contains("3 jobs wait, oldest first."), "{page}");
    assert_eq!(
        page.matches("type=\"checkbox\"").count(),
        3,
        "a pick box per job"
    );
    assert!(!page.contains("checked"), "nothing is picked unless asked");
    let all = olga.page("/unknown?select=all").await;
    assert_eq!(all.matches("checked").count(), 3);
    // Someone else decides the second job before olga submits.
    ledger
        .decide(
            &jobs[1].0,
            jobs[1].2,
            &fenceline::ledger::Decision::ResolveFailed {
                error_code: "x".into(),
            },
            &Actor::Operator("omar".into()),
            "first",
        )
        .await
        .unwrap();
    let picks: Vec<String> = jobs.iter().map(|(id, _, e)| format!("{id}:{e}")).collect();
    let response = olga
        .decide_picked(&picks, Decision::Retry, "provider outage over")
        .await;
    assert_eq!(location(&response), "/unknown");
    let page = olga.page("/unknown").await;
    assert!(
        page.contains(
            "Retry authorized for 2 jobs; 1 had changed since the page was loaded and was left \
             as it is."
        ),
        "{page}"
    );
    assert!(
        !page.contains("could not be decided"),
        "a count of 0 is left out"
    );
    for (i, (id, _, epoch)) in jobs.iter().enumerate() {
        let job = ledger.job(id).await.unwrap().unwrap();
        if i == 1 {
            assert_eq!(
                job.state,
                JobState::FailedTerminal,
                "left as the other decided"
            );
        } else {
            assert_eq!(job.state, JobState::RetryAuthorized);
            assert_eq!(job.owner_epoch, epoch + 1);
        }
    }
    let mut vera = signed_in(&app, "vera", Role::Viewer, None).await;
    let page = vera.page("/unknown").await;
    assert!(!page.contains("type=\"checkbox\""));
    let csrf = token_in(&page).unwrap();
    let refused = vera
        .post(
            "/unknown/decisions",
            &[
                ("csrf", &csrf),
                ("decision", "resolve_failed"),
                ("reason", "x"),
                ("job", &picks[0]),
            ],
        )
        .await;
    assert_eq!(refused.status(), 403);
}
