//! Operators' actions over the API with an operator token, under its role and tenants.

use super::*;

on_both_backends!(automation_acts_over_the_api_with_an_operator_token_under_its_role_and_tenants,);

async fn automation_acts_over_the_api_with_an_operator_token_under_its_role_and_tenants(db: Db) {
    let app = spawn_app(db).await;
    let ledger = &app.ledger;
    let (job_id, _, epoch) = unknown_job(ledger, "acme", "api-decide").await;
    add_operator(ledger, "olga", Role::Operator, None).await;
    add_operator(ledger, "vera", Role::Viewer, None).await;
    let globex = ["globex".to_owned()];
    add_operator(ledger, "gus", Role::Operator, Some(&globex)).await;
    let olga = ledger
        .add_operator_token("olga", "reconciler")
        .await
        .unwrap();
    let vera = ledger.add_operator_token("vera", "reader").await.unwrap();
    let gus = ledger
        .add_operator_token("gus", "reconciler")
        .await
        .unwrap();
    let tenant = app.token("acme").await;
    let post = |token: String, path: String, body: serde_json::Value| {
        let client = app.client.clone();
        let url = format!("{}/api/v1/jobs/{job_id}/{path}", app.base);
        async move {
            let response = client
                .post(url)
                .bearer_auth(token)
                .json(&body)
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            (status, response.json::<serde_json::Value>().await.unwrap())
        }
    };
    let retry = |epoch: i64| json!({ "decision": "authorize_retry", "epoch": epoch, "reason": "no trace at the provider" });
    let (status, body) = post(tenant, "decisions".into(), retry(epoch)).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (403, Some("forbidden"))
    );
    assert_eq!(post(vera, "decisions".into(), retry(epoch)).await.0, 403);
    assert_eq!(post(gus, "decisions".into(), retry(epoch)).await.0, 404);
    assert_eq!(
        post("flo_nope".into(), "decisions".into(), retry(epoch))
            .await
            .0,
        401
    );
    let (status, body) = post(
        olga.clone(),
        "decisions".into(),
        json!({ "decision": "authorize_retry", "epoch": epoch, "reason": "" }),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = post(olga.clone(), "decisions".into(), retry(epoch - 1)).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("stale_epoch"))
    );
    assert_eq!(
        ledger.job(&job_id).await.unwrap().unwrap().state,
        JobState::Unknown
    );
    // A revoked token stops working at once; the operator's other tokens go on.
    let spare = ledger.add_operator_token("olga", "spare").await.unwrap();
    assert_eq!(
        post(spare.clone(), "decisions".into(), retry(epoch - 1))
            .await
            .0,
        409
    );
    let listed = ledger.list_tokens().await.unwrap();
    let id = &listed.iter().find(|t| t.name == "spare").unwrap().id;
    let revoked = ledger.revoke_token(id).await.unwrap();
    assert_eq!(revoked.acts_as, ActsAs::Operator("olga".into()));
    assert!(revoked.revoked_at.is_some());
    assert_eq!(post(spare, "decisions".into(), retry(epoch)).await.0, 401);
    assert_eq!(
        post(olga.clone(), "decisions".into(), retry(epoch - 1))
            .await
            .0,
        409
    );
    let (status, body) = post(olga.clone(), "decisions".into(), retry(epoch)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "retry_authorized");
    assert_eq!(body["owner_epoch"], epoch + 1);
    let (status, body) = post(
        olga.clone(),
        "cancel".into(),
        json!({ "epoch": epoch + 1, "state": "retry_authorized", "reason": "withdrawn" }),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "failed_terminal");
    let actors: Vec<String> = ledger
        .audit_entries(&fenceline::ledger::AuditFilter {
            job_id: Some(job_id.clone()),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_iter()
        .map(|e| format!("{} {}", e.actor, e.action))
        .collect();
    assert_eq!(
        actors,
        ["operator:olga cancel", "operator:olga authorize_retry"]
    );
    // A disabled operator's token stops working.
    ledger.set_operator_disabled("olga", true).await.unwrap();
    assert_eq!(
        post(
            olga,
            "cancel".into(),
            json!({ "epoch": 0, "state": "ready", "reason": "x" })
        )
        .await
        .0,
        401
    );
}
