//! Running finished jobs again, one or in bulk, from the console and the API: once for each view.

use super::*;

on_both_backends!(
    a_terminal_job_runs_again_as_a_new_linked_job_and_stays_terminal,
    finished_jobs_run_again_in_bulk_from_the_jobs_list_once_for_each_view,
    automation_reads_and_runs_a_finished_job_again_over_the_api_once_for_each_view,
);

async fn a_terminal_job_runs_again_as_a_new_linked_job_and_stays_terminal(db: Db) {
    let app = spawn_app(db).await;
    let ledger = &app.ledger;
    let old = create(
        ledger,
        new_job("acme", "rerun-me", json!({ "document": "d" })),
    )
    .await;
    let mut olga = signed_in(&app, "olga", Role::Operator, None).await;
    // Not terminal yet: no such action, and a hand-made one changes nothing.
    let page = olga.page(&format!("/jobs/{old}")).await;
    assert!(!page.contains(&format!("/jobs/{old}/rerun")));
    let csrf = token_in(&page).unwrap();
    let response = olga
        .post(
            &format!("/jobs/{old}/rerun"),
            &[("csrf", &csrf), ("reason", "too early")],
        )
        .await;
    assert_eq!(location(&response), format!("/jobs/{old}"));
    assert!(olga
        .page(&format!("/jobs/{old}"))
        .await
        .contains("Only a terminal job can run again"));

    succeed(ledger, &old, "w", "{}").await;
    let page = olga.page(&format!("/jobs/{old}")).await;
    assert!(page.contains(&format!("/jobs/{old}/rerun")));
    let csrf = token_in(&page).unwrap();
    let seen = hidden_value(&page, "seen").expect("the form names the timeline it was shown with");
    let form = [
        ("csrf", csrf.as_str()),
        ("seen", seen.as_str()),
        ("reason", "the prompt template was fixed"),
    ];
    let response = olga.post(&format!("/jobs/{old}/rerun"), &form).await;
    let new_page = location(&response);
    let new = new_page.strip_prefix("/jobs/").unwrap().to_owned();
    assert_ne!(new, old);
    let page = olga.page(&new_page).await;
    assert!(page.contains("again as this new job"), "{page}");
    // The same form sent twice (a double click, a resent request) makes no second job.
    let response = olga.post(&format!("/jobs/{old}/rerun"), &form).await;
    assert_eq!(location(&response), new_page);
    assert!(olga
        .page(&new_page)
        .await
        .contains("was already run again from the page you sent this from, as this job"));
    assert!(
        page.contains(&format!("href=\"/jobs/{old}\"")),
        "the new job links back"
    );
    assert!(olga
        .page(&format!("/jobs/{old}"))
        .await
        .contains(&format!("href=\"/jobs/{new}\"")));

    let (old_job, new_job) = (
        ledger.job(&old).await.unwrap().unwrap(),
        ledger.job(&new).await.unwrap().unwrap(),
    );
    assert_eq!(
        old_job.state,
        JobState::Succeeded,
        "the old job stays terminal"
    );
    assert_eq!(new_job.state, JobState::Ready);
    assert_eq!(new_job.tenant, "acme");
    assert_eq!(new_job.idempotency_key, "rerun-me~rerun-1");
    assert_eq!(new_job.max_attempts, old_job.max_attempts);
    let span = |j: &fenceline::ledger::Job| (j.deadline_at - j.created_at) / 1000;
    assert!(
        (span(&new_job) - span(&old_job)).abs() <= 1,
        "the same deadline length"
    );
    assert_eq!(
        ledger.job_input(&new).await.unwrap(),
        ledger.job_input(&old).await.unwrap()
    );
    // Running it again once more makes another job with the next key.
    let again = ledger
        .run_again(&old, None, &Actor::Operator("olga".into()), "once more")
        .await
        .unwrap();
    assert_eq!(again.job().idempotency_key, "rerun-me~rerun-2");
    let audit = run_again_audits(ledger).await;
    assert_eq!(audit.len(), 2);
    assert!(audit
        .iter()
        .all(|e| e.job_id.as_deref() == Some(old.as_str())));
    // Each entry names the job it made, and /audit links it.
    let made: Vec<Option<&str>> = audit.iter().map(|e| e.new_job_id.as_deref()).collect();
    assert_eq!(
        made,
        vec![Some(again.job().job_id.as_str()), Some(new.as_str())]
    );
    let mut vera = signed_in(&app, "vera", Role::Viewer, None).await;
    let log = vera.page("/audit?action=run_again").await;
    assert!(
        log.contains(&format!(
            r#"made <a href="/jobs/{new}" class="mono">{new}</a>"#
        )),
        "{log}"
    );
    let page = vera.page(&format!("/jobs/{old}")).await;
    assert!(!page.contains(&format!("/jobs/{old}/rerun")));
    let csrf = token_in(&page).unwrap();
    let refused = vera
        .post(
            &format!("/jobs/{old}/rerun"),
            &[("csrf", &csrf), ("reason", "no")],
        )
        .await;
    assert_eq!(refused.status(), 403);
}

async fn finished_jobs_run_again_in_bulk_from_the_jobs_list_once_for_each_view(db: Db) {
    let app = spawn_app(db).await;
    let ledger = &app.ledger;
    let done = finished(ledger, "acme", "bulk-a").await;
    let failed = claimed_job(ledger, "acme", "bulk-b", "w").await;
    ledger
        .cancel(
            &failed,
            1,
            JobState::Running,
            &Actor::Operator("omar".into()),
            "stop",
        )
        .await
        .unwrap();
    let running = claimed_job(ledger, "acme", "bulk-c", "w").await;
    let theirs = finished(ledger, "globex", "bulk-theirs").await;

    let list = "/jobs?tenant=acme";
    let mut olga = signed_in(&app, "olga", Role::Operator, None).await;
    let page = olga.page(list).await;
    let picks = pick_values(&page);
    assert_eq!(
        picks.len(),
        3,
        "finished and running jobs can be picked: {picks:?}"
    );
    assert!(page.contains("formaction=\"/jobs/rerun\"") && page.contains("Cancel picked jobs"));
    let succeeded = olga.page("/jobs?tenant=acme&state=succeeded").await;
    assert!(
        succeeded.contains("Run picked jobs again") && !succeeded.contains("Cancel picked jobs"),
        "only the action that suits the jobs shown"
    );
    let response = olga
        .rerun_picked(list, &picks, "the provider outage is over")
        .await;
    assert_eq!(location(&response), list, "back to the same list");
    let page = olga.page(list).await;
    assert!(
        page.contains(
            "2 jobs run again as new jobs; the finished ones stay as they are; 1 could not run \
             again (not finished"
        ),
        "{page}"
    );
    assert_eq!(
        keys_of(ledger, "acme").await,
        [
            "bulk-a",
            "bulk-a~rerun-1",
            "bulk-b",
            "bulk-b~rerun-1",
            "bulk-c"
        ]
    );
    assert_eq!(
        ledger.job(&done).await.unwrap().unwrap().state,
        JobState::Succeeded
    );
    assert_eq!(
        ledger.job(&failed).await.unwrap().unwrap().state,
        JobState::FailedTerminal
    );
    assert_eq!(
        ledger.job(&running).await.unwrap().unwrap().state,
        JobState::Running
    );
    let audit = run_again_audits(ledger).await;
    assert_eq!(audit.len(), 2, "one audit entry a job run again");

    // The same form again (a double click, a resent request): nothing new.
    olga.rerun_picked(list, &picks, "the provider outage is over")
        .await;
    assert!(olga.page(list).await.contains(
        "No job was run again; 2 had already been run again from the page you sent this from, \
         and nothing new was made for them; 1 could not run again"
    ));
    assert_eq!(keys_of(ledger, "acme").await.len(), 5);

    // From a fresh view of the finished jobs, each runs again once more.
    let page = olga.page("/jobs?tenant=acme&state=succeeded").await;
    let picks = pick_values(&page);
    assert_eq!(picks.len(), 1);
    let csrf = token_in(&page).unwrap();
    olga.post(
        "/jobs/rerun",
        &[("csrf", &csrf), ("reason", "once more"), ("job", &picks[0])],
    )
    .await;
    assert!(olga
        .page("/jobs")
        .await
        .contains("1 job runs again as a new job"));
    assert!(keys_of(ledger, "acme")
        .await
        .contains(&"bulk-a~rerun-2".to_owned()));

    // Cancelling a finished job it picked is refused and counted, changing nothing.
    let pick = pick_values(&olga.page("/jobs?tenant=acme&state=failed_terminal").await);
    let csrf = olga.token("/jobs").await;
    olga.post(
        "/jobs/cancel",
        &[("csrf", &csrf), ("reason", "x"), ("job", &pick[0])],
    )
    .await;
    assert!(olga
        .page("/jobs")
        .await
        .contains("No job was cancelled; 1 could not be cancelled (finished or not started"));

    // No reason, nothing made; another tenant's job named by an operator limited to acme, refused.
    let csrf = olga.token("/jobs").await;
    let pick = format!("{theirs}:1:succeeded:9");
    olga.post(
        "/jobs/rerun",
        &[("csrf", &csrf), ("reason", " "), ("job", &pick)],
    )
    .await;
    assert!(olga
        .page("/jobs")
        .await
        .contains("Running jobs again needs a reason"));
    let acme = ["acme".to_owned()];
    let mut sam = signed_in(&app, "sam", Role::Operator, Some(&acme)).await;
    let csrf = sam.token("/jobs").await;
    sam.post(
        "/jobs/rerun",
        &[("csrf", &csrf), ("reason", "not mine"), ("job", &pick)],
    )
    .await;
    assert!(sam
        .page("/jobs")
        .await
        .contains("No job was run again; 1 could not run again (not finished, not yours"));
    assert_eq!(keys_of(ledger, "globex").await, ["bulk-theirs"]);
    let mut vera = signed_in(&app, "vera", Role::Viewer, None).await;
    let page = vera.page(list).await;
    assert!(pick_values(&page).is_empty() && !page.contains("Run picked jobs again"));
    let csrf = token_in(&page).unwrap();
    let refused = vera
        .post(
            "/jobs/rerun",
            &[("csrf", &csrf), ("reason", "x"), ("job", &pick)],
        )
        .await;
    assert_eq!(refused.status(), 403);
}

async fn automation_reads_and_runs_a_finished_job_again_over_the_api_once_for_each_view(db: Db) {
    let app = spawn_app(db).await;
    let ledger = &app.ledger;
    let done = finished(ledger, "acme", "api-rerun").await;
    let running = claimed_job(ledger, "acme", "api-running", "w").await;
    add_operator(ledger, "olga", Role::Operator, None).await;
    add_operator(ledger, "vera", Role::Viewer, None).await;
    let globex = ["globex".to_owned()];
    add_operator(ledger, "gus", Role::Operator, Some(&globex)).await;
    let olga = ledger.add_operator_token("olga", "ops").await.unwrap();
    let vera = ledger.add_operator_token("vera", "read").await.unwrap();
    let gus = ledger.add_operator_token("gus", "ops").await.unwrap();
    let post = |token: &str, job_id: &str, body: serde_json::Value| {
        let request = app
            .client
            .post(format!("{}/api/v1/jobs/{job_id}/rerun", app.base))
            .bearer_auth(token)
            .json(&body);
        async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            let location = response
                .headers()
                .get("location")
                .map(|l| l.to_str().unwrap().to_owned());
            let body = response.json::<serde_json::Value>().await.unwrap();
            (status, location, body)
        }
    };
    // An operator token of any role reads the jobs of the operator's tenants, and the timeline
    // it then acts on; submitting and listing stay with the tenant's token, and say so.
    let get = |token: &str, path: String| {
        let request = app
            .client
            .get(format!("{}/api/v1{path}", app.base))
            .bearer_auth(token);
        async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            (status, response.json::<serde_json::Value>().await.unwrap())
        }
    };
    let (status, read) = get(&olga, format!("/jobs/{done}")).await;
    assert_eq!((status, read["state"].as_str()), (200, Some("succeeded")));
    assert_eq!(get(&vera, format!("/jobs/{done}")).await.0, 200);
    assert_eq!(get(&gus, format!("/jobs/{done}")).await.0, 404);
    let (status, page) = get(&olga, format!("/jobs/{done}/events")).await;
    assert_eq!(status, 200);
    let seen = page["events"].as_array().unwrap().len() as i64;
    assert_eq!(seen, ledger.event_count(&done).await.unwrap());
    assert_eq!(get(&gus, format!("/jobs/{done}/events")).await.0, 404);
    for path in ["/jobs".to_owned(), format!("/jobs/{done}/result")] {
        let (status, body) = get(&olga, path.clone()).await;
        assert_eq!(status, 403, "{path}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("take a tenant's token"),
            "{body}"
        );
    }
    assert_eq!(get("flo_nope", format!("/jobs/{done}")).await.0, 401);
    let body = json!({ "reason": "the template was fixed", "seen_events": seen });
    let (status, location, first) = post(&olga, &done, body.clone()).await;
    assert_eq!(status, 201, "{first}");
    let new = first["job_id"].as_str().unwrap().to_owned();
    assert_eq!(location, Some(format!("/api/v1/jobs/{new}")));
    assert_eq!(first["idempotency_key"], "api-rerun~rerun-1");
    // Sent again with what it saw: the job the first request made, nothing new.
    let (status, _, again) = post(&olga, &done, body.clone()).await;
    assert_eq!(
        (status, again["job_id"].as_str()),
        (200, Some(new.as_str()))
    );
    // Without `seen_events`, once more.
    let (status, _, more) = post(&olga, &done, json!({ "reason": "once more" })).await;
    assert_eq!(
        (status, more["idempotency_key"].as_str()),
        (201, Some("api-rerun~rerun-2"))
    );
    let (status, _, refused) = post(&olga, &running, json!({ "reason": "too early" })).await;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(post(&olga, &done, json!({ "reason": " " })).await.0, 400);
    assert_eq!(
        post(&olga, &done, json!({ "reason": "x", "seen": 3 }))
            .await
            .0,
        400
    );
    assert_eq!(post(&vera, &done, body.clone()).await.0, 403);
    assert_eq!(post(&gus, &done, body.clone()).await.0, 404);
    let tenant = app.token("acme").await;
    assert_eq!(post(&tenant, &done, body).await.0, 403);
    let audit = run_again_audits(ledger).await;
    assert_eq!(audit.len(), 2);
    assert!(audit.iter().all(|e| e.actor == "operator:olga"));
    assert_eq!(
        ledger.job(&done).await.unwrap().unwrap().state,
        JobState::Succeeded
    );
}
