//! Roles and tenant scopes: a viewer does not act, an operator of one tenant neither sees nor acts
//! on another's jobs or drills.

use super::*;

on_both_backends!(
    a_viewer_sees_no_action_and_cannot_act,
    an_operator_limited_to_a_tenant_neither_sees_nor_acts_on_another,
    an_operator_limited_to_a_tenant_reads_no_drill_run,
);

async fn a_viewer_sees_no_action_and_cannot_act(db: Db) {
    let app = spawn_app(db).await;
    let (job_id, _, epoch) = unknown_job(&app.ledger, "acme", "viewer").await;
    let mut vera = signed_in(&app, "vera", Role::Viewer, None).await;
    let page = vera.page(&format!("/jobs/{job_id}")).await;
    assert!(page.contains(&job_id));
    assert!(
        !page.contains("/decisions"),
        "a viewer gets no decision form"
    );
    let csrf = token_in(&page).unwrap();
    let response = vera
        .post(
            &format!("/jobs/{job_id}/decisions"),
            &[
                ("csrf", &csrf),
                ("decision", "authorize_retry"),
                ("epoch", &epoch.to_string()),
                ("reason", "hand-made"),
            ],
        )
        .await;
    assert_eq!(response.status(), 403);
    assert_eq!(
        app.ledger.job(&job_id).await.unwrap().unwrap().state,
        JobState::Unknown
    );
    let mut olga = signed_in(&app, "olga", Role::Operator, None).await;
    let page = olga.page(&format!("/jobs/{job_id}")).await;
    assert!(page.contains(&format!("/jobs/{job_id}/decisions")));
}

async fn an_operator_limited_to_a_tenant_neither_sees_nor_acts_on_another(db: Db) {
    let app = spawn_app(db).await;
    let (theirs, _, epoch) = unknown_job(&app.ledger, "globex", "theirs").await;
    let (mine, _, _) = unknown_job(&app.ledger, "acme", "mine").await;
    let acme = ["acme".to_owned()];
    let mut ana = signed_in(&app, "ana", Role::Operator, Some(&acme)).await;
    for path in ["/jobs", "/unknown", "/", "/jobs?tenant=globex", "/audit"] {
        let page = ana.page(path).await;
        assert!(!page.contains(&theirs), "{path} shows another tenant's job");
    }
    assert!(ana.page("/jobs").await.contains(&mine));
    let unknown = ana.page("/unknown").await;
    assert!(unknown.contains(&mine));
    assert!(
        unknown.contains("1 job waits, oldest first."),
        "counted for her tenant alone: {unknown}"
    );
    let found = ana.page(&format!("/jobs?q={theirs}")).await;
    assert!(!found.contains(&format!("/jobs/{theirs}\"")));
    let response = ana.get(&format!("/jobs/{theirs}")).await;
    assert_eq!(
        response.status(),
        404,
        "another tenant's job does not exist for them"
    );
    assert!(response.text().await.unwrap().contains("No such job"));
    for export in ["export.json", "export.md"] {
        let response = ana.get(&format!("/jobs/{theirs}/{export}")).await;
        assert_eq!(response.status(), 404, "{export}");
    }
    let csrf = ana.token("/jobs").await;
    let response = ana
        .post(
            &format!("/jobs/{theirs}/decisions"),
            &[
                ("csrf", &csrf),
                ("decision", "resolve_failed"),
                ("epoch", &epoch.to_string()),
                ("reason", "not mine"),
            ],
        )
        .await;
    assert_eq!(response.status(), 404);
    assert_eq!(
        app.ledger.job(&theirs).await.unwrap().unwrap().state,
        JobState::Unknown
    );
}

/// Drill runs are the deployment's, not a tenant's: like starting one, reading one (its page,
/// its reports) needs an operator without a tenant limit. A limited one is told no such run
/// exists, and the drills page shows her the catalogue without the runs.
async fn an_operator_limited_to_a_tenant_reads_no_drill_run(db: Db) {
    let app = spawn_app(db).await;
    let report = fenceline::drill::Report {
        run_id: "drl_secret".into(),
        queue: "embedded".into(),
        timings: "compressed".into(),
        provider: "stub".into(),
        requested_by: "operator:olga".into(),
        version: "0.1.0".into(),
        scenarios: Vec::new(),
    };
    app.ledger
        .insert_drill_run(&fenceline::ledger::DrillRunRow {
            run_id: "drl_secret".into(),
            kinds: "[\"delivery-after-delete\"]".into(),
            queue: "embedded".into(),
            timings: "compressed".into(),
            requested_by: "operator:olga".into(),
            status: "failed".into(),
            started_at: 0,
            alive_at: 0,
            finished_at: None,
            report: serde_json::to_string(&report).unwrap(),
        })
        .await
        .unwrap();
    let paths = [
        "/drills/drl_secret",
        "/drills/drl_secret/report.json",
        "/drills/drl_secret/report.md",
    ];
    let mut olga = signed_in(&app, "olga", Role::Viewer, None).await;
    for path in paths {
        let response = olga.get(path).await;
        assert_eq!(response.status(), 200, "{path}");
        assert!(
            response.text().await.unwrap().contains("drl_secret"),
            "{path}"
        );
    }
    assert!(olga.page("/drills").await.contains("drl_secret"));

    let acme = ["acme".to_owned()];
    for role in [Role::Viewer, Role::Admin] {
        let name = format!("ana-{role}");
        let mut ana = signed_in(&app, &name, role, Some(&acme)).await;
        for path in paths {
            let response = ana.get(path).await;
            assert_eq!(response.status(), 404, "{role} {path}");
            let body = response.text().await.unwrap();
            assert!(!body.contains("operator:olga"), "{role} {path}: {body}");
        }
        let page = ana.page("/drills").await;
        assert!(!page.contains("drl_secret"), "{role}: {page}");
        assert!(
            page.contains("live-owner-suppresses-duplicate"),
            "the catalogue"
        );
        assert!(page.contains("without a tenant limit"), "{role}: {page}");
    }
}
