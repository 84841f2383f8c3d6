//! The HTTP API through a real socket, on both backends.

use std::time::Duration;

use serde_json::{json, Value};

use crate::helpers::{as_owner, error_code, spawn_app, spawn_app_with_body_limit, Db};
use crate::on_both_backends;

on_both_backends!(
    creating_a_job_is_idempotent_and_a_changed_request_conflicts,
    one_tenant_never_sees_another_tenants_jobs,
    bad_input_gets_a_4xx_with_a_json_message,
    requests_without_a_valid_token_are_refused,
    an_oversized_body_is_refused_with_413,
    a_job_its_attempts_timeline_and_result_are_readable,
    every_documented_path_answers_without_a_server_error,
    a_tenants_replay_policy_applies_to_jobs_that_name_none,
    a_batch_answers_each_job_on_its_own_in_the_order_sent,
    a_batch_of_five_hundred_is_written_in_few_commits_and_a_refused_job_fails_no_other,
);

fn job_request(key: &str, input: Value) -> Value {
    json!({ "idempotency_key": key, "input": input, "model": {"temperature": 0} })
}

async fn creating_a_job_is_idempotent_and_a_changed_request_conflicts(db: Db) {
    let app = spawn_app(db).await;
    let token = app.token("acme").await;

    let first = app
        .post_job(&token, &job_request("doc-7", json!({"text": "a"})))
        .await;
    assert_eq!(first.status(), 201);
    let location = first.headers()["location"].to_str().unwrap().to_owned();
    let first: Value = first.json().await.unwrap();
    assert_eq!(first["state"], "ready");
    assert_eq!(
        location,
        format!("/api/v1/jobs/{}", first["job_id"].as_str().unwrap())
    );

    // Key order in the body does not change the request.
    let same =
        json!({ "model": {"temperature": 0}, "input": {"text": "a"}, "idempotency_key": "doc-7" });
    let again = app.post_job(&token, &same).await;
    assert_eq!(again.status(), 200);
    let again: Value = again.json().await.unwrap();
    assert_eq!(again["job_id"], first["job_id"]);

    let changed = app
        .post_job(&token, &job_request("doc-7", json!({"text": "b"})))
        .await;
    assert_eq!(changed.status(), 409);
    let body: Value = changed.json().await.unwrap();
    assert_eq!(body["error"]["code"], "idempotency_conflict");
    assert_eq!(body["error"]["job_id"], first["job_id"]);
}

async fn one_tenant_never_sees_another_tenants_jobs(db: Db) {
    let app = spawn_app(db).await;
    let acme = app.token("acme").await;
    let globex = app.token("globex").await;
    let created: Value = app
        .post_job(&acme, &job_request("k", json!("x")))
        .await
        .json()
        .await
        .unwrap();
    let job_id = created["job_id"].as_str().unwrap();

    for path in [
        format!("/api/v1/jobs/{job_id}"),
        format!("/api/v1/jobs/{job_id}/events"),
        format!("/api/v1/jobs/{job_id}/result"),
    ] {
        let response = app.get(Some(&globex), &path).await;
        assert_eq!(response.status(), 404, "{path}");
    }
    let listed: Value = app
        .get(Some(&globex), "/api/v1/jobs")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(listed["jobs"], json!([]));
    let own: Value = app
        .get(Some(&acme), "/api/v1/jobs")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(own["jobs"].as_array().unwrap().len(), 1);

    // The same key under another tenant is that tenant's own job.
    let theirs = app.post_job(&globex, &job_request("k", json!("x"))).await;
    assert_eq!(theirs.status(), 201);
}

async fn bad_input_gets_a_4xx_with_a_json_message(db: Db) {
    let app = spawn_app(db).await;
    let token = app.token("acme").await;
    let cases: Vec<(&str, Vec<u8>, u16, &str)> = vec![
        (
            "application/json",
            b"{not json".to_vec(),
            400,
            "invalid_json",
        ),
        ("application/json", b"[]".to_vec(), 400, "invalid_json"),
        (
            "application/json",
            b"{\"input\": 1}".to_vec(),
            400,
            "invalid_json",
        ),
        (
            "application/json",
            br#"{"idempotency_key":"k","input":1,"tenant":"globex"}"#.to_vec(),
            400,
            "invalid_json",
        ),
        (
            "application/json",
            br#"{"idempotency_key":"","input":1}"#.to_vec(),
            400,
            "bad_request",
        ),
        (
            "application/json",
            br#"{"idempotency_key":"k","input":null}"#.to_vec(),
            400,
            "bad_request",
        ),
        // Keys of that form are an operator's re-runs: a tenant cannot take one first.
        (
            "application/json",
            br#"{"idempotency_key":"k~rerun-1","input":1}"#.to_vec(),
            400,
            "bad_request",
        ),
        (
            "application/json",
            br#"{"idempotency_key":"k","input":1,"deadline_seconds":0}"#.to_vec(),
            400,
            "bad_request",
        ),
        (
            "application/json",
            br#"{"idempotency_key":"k","input":1,"deadline_seconds":99999999}"#.to_vec(),
            400,
            "bad_request",
        ),
        (
            "application/json",
            br#"{"idempotency_key":"k","input":1,"max_attempts":0}"#.to_vec(),
            400,
            "bad_request",
        ),
        (
            "application/json",
            br#"{"idempotency_key":"k","input":1,"model":[1]}"#.to_vec(),
            400,
            "bad_request",
        ),
        (
            "application/json",
            br#"{"idempotency_key":"k","input":1,"replay_policy":"always"}"#.to_vec(),
            400,
            "invalid_json",
        ),
        (
            "application/json",
            br#"{"idempotency_key":"k","input":1,"max_attempts":-1}"#.to_vec(),
            400,
            "invalid_json",
        ),
        (
            "application/json",
            vec![0xff, 0xfe, 0x00],
            400,
            "invalid_json",
        ),
        (
            "text/plain",
            br#"{"idempotency_key":"k","input":1}"#.to_vec(),
            415,
            "unsupported_media_type",
        ),
    ];
    for (content_type, body, status, code) in cases {
        let shown = String::from_utf8_lossy(&body).into_owned();
        let response = app.post_raw(Some(&token), content_type, body).await;
        assert_eq!(response.status().as_u16(), status, "{shown}");
        assert_eq!(error_code(response).await, code, "{shown}");
    }
    for (path, status) in [
        ("/api/v1/jobs/not-a-job", 400),
        ("/api/v1/jobs/job_0190b3c2-0000-7000-8000-000000000000", 404),
        ("/api/v1/jobs?state=finished", 400),
        ("/api/v1/jobs?limit=0", 400),
        ("/api/v1/jobs?limit=abc", 400),
        ("/api/v1/jobs?before=zzz", 400),
        ("/api/v1/nope", 404),
    ] {
        let response = app.get(Some(&token), path).await;
        assert_eq!(response.status().as_u16(), status, "{path}");
        error_code(response).await;
    }
    let wrong_method = app
        .client
        .delete(format!("{}/api/v1/jobs", app.base))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(wrong_method.status(), 405);
    assert_eq!(error_code(wrong_method).await, "method_not_allowed");
    // Nothing was created by any of it.
    let listed: Value = app
        .get(Some(&token), "/api/v1/jobs")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(listed["jobs"], json!([]));
}

async fn requests_without_a_valid_token_are_refused(db: Db) {
    let app = spawn_app(db).await;
    let missing = app.get(None, "/api/v1/jobs").await;
    assert_eq!(missing.status(), 401);
    assert_eq!(missing.headers()["www-authenticate"], "Bearer");
    assert_eq!(error_code(missing).await, "unauthorized");
    for token in ["fl_0000", "nonsense", ""] {
        let response = app.get(Some(token), "/api/v1/jobs").await;
        assert_eq!(response.status(), 401, "{token:?}");
    }
    let basic = app
        .client
        .get(format!("{}/api/v1/jobs", app.base))
        .basic_auth("acme", Some("pw"))
        .send()
        .await
        .unwrap();
    assert_eq!(basic.status(), 401);
    let post = app.post_raw(None, "application/json", b"{}".to_vec()).await;
    assert_eq!(post.status(), 401);
}

async fn an_oversized_body_is_refused_with_413(db: Db) {
    let app = spawn_app_with_body_limit(db, 16 * 1024).await;
    let token = app.token("acme").await;
    let big = job_request("big", json!("x".repeat(20 * 1024)));
    let response = app.post_job(&token, &big).await;
    assert_eq!(response.status(), 413);
    assert_eq!(error_code(response).await, "payload_too_large");
    let small = job_request("small", json!("x".repeat(1024)));
    assert_eq!(app.post_job(&token, &small).await.status(), 201);
}

async fn a_job_its_attempts_timeline_and_result_are_readable(db: Db) {
    let app = spawn_app(db).await;
    let token = app.token("acme").await;
    let created: Value = app
        .post_job(&token, &job_request("read", json!({"doc": "d"})))
        .await
        .json()
        .await
        .unwrap();
    let job_id = created["job_id"].as_str().unwrap().to_owned();
    let no_result = app
        .get(Some(&token), &format!("/api/v1/jobs/{job_id}/result"))
        .await;
    assert_eq!(no_result.status(), 404);

    // A worker runs it through the ledger.
    let claimed = app
        .ledger
        .claim(&job_id, "w1", Duration::from_secs(30))
        .await
        .unwrap();
    let attempt = app
        .ledger
        .start_attempt(&as_owner(&job_id, claimed.epoch, "w1"), "stub")
        .await
        .unwrap();
    app.ledger
        .accept_result(
            &as_owner(&job_id, claimed.epoch, "w1"),
            attempt.attempt_no,
            r#"{"summary":"s"}"#,
        )
        .await
        .unwrap();

    let job: Value = app
        .get(Some(&token), &format!("/api/v1/jobs/{job_id}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(job["state"], "succeeded");
    assert_eq!(job["terminal"], true);
    assert_eq!(job["owner_epoch"], 1);
    assert_eq!(job["attempts"][0]["outcome"], "succeeded");
    assert!(job["deadline_at"].as_str().unwrap().ends_with('Z'));

    let result: Value = app
        .get(Some(&token), &format!("/api/v1/jobs/{job_id}/result"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(result["result"], json!({"summary": "s"}));

    let page: Value = app
        .get(
            Some(&token),
            &format!("/api/v1/jobs/{job_id}/events?limit=2"),
        )
        .await
        .json()
        .await
        .unwrap();
    let kinds: Vec<_> = page["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].clone())
        .collect();
    assert_eq!(kinds, [json!("job_created"), json!("claimed")]);
    assert_eq!(page["next_after"], 2);
    assert_eq!(page["events"][1]["permalink"], format!("/jobs/{job_id}#e2"));
    let rest: Value = app
        .get(
            Some(&token),
            &format!("/api/v1/jobs/{job_id}/events?after=2"),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(rest["events"].as_array().unwrap().len(), 3);
    assert_eq!(rest["next_after"], Value::Null);

    let succeeded: Value = app
        .get(Some(&token), "/api/v1/jobs?state=succeeded")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(succeeded["jobs"][0]["job_id"], job_id.as_str());
}

async fn every_documented_path_answers_without_a_server_error(db: Db) {
    let app = spawn_app(db).await;
    let token = app.token("acme").await;
    let created: Value = app
        .post_job(&token, &job_request("doc", json!(1)))
        .await
        .json()
        .await
        .unwrap();
    let job_id = created["job_id"].as_str().unwrap();
    let spec: Value = app
        .get(None, "/api/v1/openapi.json")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(spec["openapi"], "3.1.0");
    let paths = spec["paths"].as_object().unwrap();
    assert!(paths.len() >= 4);
    for (path, operations) in paths {
        if operations.get("get").is_none() {
            continue;
        }
        let url = format!("/api/v1{}", path.replace("{job_id}", job_id));
        let response = app.get(Some(&token), &url).await;
        let status = response.status().as_u16();
        // A path for operator tokens only refuses a tenant's token, as it documents.
        let documented = |code: &str| operations["get"]["responses"].get(code).is_some();
        assert!(
            status == 200 || status == 404 || (status == 403 && documented("403")),
            "{url} answered {status}"
        );
    }
    assert_eq!(app.get(None, "/healthz").await.status(), 200);
    let ready: Value = app.get(None, "/readyz").await.json().await.unwrap();
    assert_eq!(ready["ready"], true);
    // Signed out, the console is its sign-in page; signed in, the overview.
    let console = app.get(None, "/").await;
    assert_eq!(console.status(), 200);
    assert_eq!(console.headers()["x-content-type-options"], "nosniff");
    let signin = console.text().await.unwrap();
    assert!(signin.contains("Sign in"));
    assert!(signin.contains(r#"<link rel="icon" href="/favicon.svg" type="image/svg+xml">"#));
    let icon = app.get(None, "/favicon.svg").await;
    assert_eq!(icon.status(), 200);
    assert_eq!(icon.headers()["content-type"], "image/svg+xml");
    assert!(icon.text().await.unwrap().starts_with("<svg "));
    let mut browser = app.signed_in(fenceline::operators::Role::Viewer).await;
    assert!(browser.page("/").await.contains("<h1>Overview</h1>"));
    let css = app.get(None, "/style/fenceline.css").await;
    assert_eq!(css.headers()["content-type"], "text/css; charset=utf-8");
    // The working directory is never served: signed in, there is no page there; signed out,
    // the address leads to sign-in.
    for path in ["/Cargo.toml", "/fenceline.sqlite", "/style/../Cargo.toml"] {
        let response = browser.get(path).await;
        assert_eq!(response.status(), 404, "{path}");
        assert!(
            response.text().await.unwrap().contains("Not found"),
            "{path}"
        );
        let signed_out = app.get(None, path).await;
        assert!(signed_out.url().path() == "/login", "{path}");
        assert!(!signed_out.text().await.unwrap().contains("[package]"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_database_makes_the_service_not_ready_and_requests_503_not_500() {
    if crate::helpers::skip_postgres() {
        return;
    }
    let app = spawn_app(Db::Postgres).await;
    let token = app.token("acme").await;
    assert_eq!(app.get(None, "/readyz").await.status(), 200);

    let admin = std::env::var("FENCELINE_TEST_PG_URL").unwrap();
    let name = app.db.url.rsplit('/').next().unwrap().to_owned();
    use sqlx::{Connection, Executor};
    let mut conn = sqlx::PgConnection::connect(&admin).await.unwrap();
    conn.execute(format!("DROP DATABASE {name} WITH (FORCE)").as_str())
        .await
        .unwrap();

    let ready = app.get(None, "/readyz").await;
    assert_eq!(ready.status(), 503);
    let body: Value = ready.json().await.unwrap();
    assert_eq!(body["ready"], false);
    let create = app.post_job(&token, &job_request("k", json!(1))).await;
    assert!(
        create.status().is_server_error() && create.status() != 500,
        "a lost database is 503, got {}",
        create.status()
    );
    let batch = app
        .post_batch(
            &token,
            &json!({ "jobs": [job_request("k", json!(1)), job_request("l", json!(2))] }),
        )
        .await;
    assert_eq!(batch.status(), 503, "a batch none of which could be made");
    assert_eq!(error_code(batch).await, "unavailable");
    assert_eq!(
        app.get(None, "/healthz").await.status(),
        200,
        "the process itself is alive"
    );
}

/// The deployment's model policy, as `serve` is configured with it: tenants cannot pick
/// unapproved models or parameters that make attempts costly or uncertain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_parameters_outside_the_deployments_policy_are_refused_with_400() {
    let db = crate::helpers::fresh_db(Db::Sqlite).await;
    let acme = crate::helpers::cli_token(&db.url, "acme").await;
    let vip = crate::helpers::cli_token(&db.url, "vip").await;
    let policy = [
        "--no-worker",
        "--allowed-models",
        "small",
        "--tenant-models",
        "vip=small,large",
        "--max-output-tokens",
        "1000",
    ];
    let (_server, base) = crate::helpers::spawn_serve(&db.url, &policy).await;
    let client = reqwest::Client::new();
    let post = |token: &str, key: &str, model: Value| {
        client
            .post(format!("{base}/api/v1/jobs"))
            .bearer_auth(token)
            .json(&json!({ "idempotency_key": key, "input": "x", "model": model }))
            .send()
    };
    for (i, (model, says)) in [
        (json!({"stream": true}), "stream"),
        (json!({"n": 3}), "`n` must be 1"),
        (json!({"max_tokens": 100000}), "1 to 1000"),
        (json!({"model": "large"}), "allowed: small"),
        (json!({"logit_bias": {}}), "not allowed"),
    ]
    .into_iter()
    .enumerate()
    {
        let response = post(&acme, &format!("bad-{i}"), model.clone())
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "{model}");
        let body: Value = response.json().await.unwrap();
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{model}: {message}");
    }
    let fine = post(
        &acme,
        "ok",
        json!({"model": "small", "temperature": 0, "max_tokens": 500}),
    )
    .await
    .unwrap();
    assert_eq!(fine.status(), 201);
    let vip_large = post(&vip, "vip", json!({"model": "large"})).await.unwrap();
    assert_eq!(vip_large.status(), 201, "a tenant's own list applies to it");
}

async fn a_tenants_replay_policy_applies_to_jobs_that_name_none(db: Db) {
    let app = crate::helpers::spawn_app_configured(db, |s| {
        s.http.tenant_replay.insert(
            "acme".into(),
            fenceline::ledger::ReplayPolicy::ReplayOnUnknown,
        );
    })
    .await;
    let (acme, globex) = (app.token("acme").await, app.token("globex").await);
    let policy = |token: String, body: Value| {
        let app = &app;
        async move {
            let job: Value = app.post_job(&token, &body).await.json().await.unwrap();
            job["replay_policy"].as_str().unwrap().to_owned()
        }
    };
    assert_eq!(
        policy(acme.clone(), job_request("a", json!(1))).await,
        "replay_on_unknown"
    );
    let mut manual = job_request("b", json!(2));
    manual["replay_policy"] = json!("manual");
    assert_eq!(
        policy(acme, manual).await,
        "manual",
        "a job's own choice wins"
    );
    assert_eq!(policy(globex, job_request("c", json!(3))).await, "manual");
}

fn statuses(body: &Value) -> Vec<u64> {
    body["jobs"]
        .as_array()
        .expect("an answer per job")
        .iter()
        .map(|j| j["status"].as_u64().expect("a status"))
        .collect()
}

async fn a_batch_answers_each_job_on_its_own_in_the_order_sent(db: Db) {
    let app = spawn_app(db).await;
    let token = app.token("acme").await;
    let before: Value = app
        .post_job(&token, &job_request("made-before", json!(0)))
        .await
        .json()
        .await
        .unwrap();
    let before = before["job_id"].as_str().unwrap().to_owned();
    let batch = json!({ "jobs": [
        job_request("b-0", json!(0)),
        job_request("made-before", json!(0)),
        job_request("made-before", json!("changed")),
        job_request("b-1", json!(1)),
        { "idempotency_key": "b-2", "input": 2, "tenant": "globex" },
        job_request("", json!(5)),
        job_request("b-1", json!(1)),
        job_request("b-1", json!("changed")),
    ]});
    let response = app.post_batch(&token, &batch).await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(statuses(&body), [201, 200, 409, 201, 400, 400, 200, 409]);
    assert_eq!(
        (&body["created"], &body["existing"], &body["failed"]),
        (&json!(2), &json!(2), &json!(4))
    );
    let jobs = &body["jobs"];
    assert_eq!(jobs[1]["job"]["job_id"], before.as_str());
    assert_eq!(jobs[2]["error"]["code"], "idempotency_conflict");
    assert_eq!(jobs[2]["error"]["job_id"], before.as_str());
    assert_eq!(jobs[4]["error"]["code"], "invalid_json");
    let why = jobs[4]["error"]["message"].as_str().unwrap();
    assert!(
        why.starts_with("jobs[4] ") && why.contains("tenant"),
        "{why}"
    );
    assert_eq!(jobs[5]["error"]["code"], "bad_request");
    // The same key later in the batch finds the job made earlier in it.
    let b1 = jobs[3]["job"]["job_id"].as_str().unwrap().to_owned();
    assert_eq!(jobs[6]["job"]["job_id"], b1.as_str());
    assert_eq!(jobs[7]["error"]["job_id"], b1.as_str());
    for (i, key) in [(0, "b-0"), (3, "b-1")] {
        let id = jobs[i]["job"]["job_id"].as_str().unwrap();
        assert_eq!(jobs[i]["job"]["state"], "ready");
        let read: Value = app
            .get(Some(&token), &format!("/api/v1/jobs/{id}"))
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(read["idempotency_key"], key);
    }
    // A refused request leaves its mark on the job whose key it reused.
    let events: Value = app
        .get(Some(&token), &format!("/api/v1/jobs/{b1}/events"))
        .await
        .json()
        .await
        .unwrap();
    assert!(
        events["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == "idempotency_conflict"),
        "{events}"
    );

    // A client that lost the answer sends the batch again: nothing new is made.
    let again: Value = app.post_batch(&token, &batch).await.json().await.unwrap();
    assert_eq!(statuses(&again), [200, 200, 409, 200, 400, 400, 200, 409]);
    assert_eq!(again["created"], 0);
    assert_eq!(again["jobs"][0]["job"]["job_id"], jobs[0]["job"]["job_id"]);

    // Another tenant's same key is its own job.
    let globex = app.token("globex").await;
    let theirs: Value = app
        .post_batch(&globex, &json!({ "jobs": [job_request("b-0", json!(0))] }))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(statuses(&theirs), [201]);
    assert_ne!(theirs["jobs"][0]["job"]["job_id"], jobs[0]["job"]["job_id"]);

    // What is not a batch is refused whole, and makes nothing.
    let too_many: Vec<Value> = (0..501)
        .map(|i| job_request(&format!("many-{i}"), json!(i)))
        .collect();
    for (bad, code, says) in [
        (json!({ "jobs": [] }), "bad_request", "it held 0"),
        (json!({ "jobs": too_many }), "bad_request", "it held 501"),
        (
            json!({ "jobs": [job_request("x", json!(1))], "tenant": "globex" }),
            "invalid_json",
            "tenant",
        ),
        (
            json!([job_request("x", json!(1))]),
            "invalid_json",
            "invalid type: map, expected a sequence",
        ),
    ] {
        let response = app.post_batch(&token, &bad).await;
        assert_eq!(response.status(), 400, "{bad}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], code);
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{message}");
    }
    let found = app
        .get(Some(&token), "/api/v1/jobs?limit=100")
        .await
        .json::<Value>()
        .await
        .unwrap();
    assert_eq!(
        found["jobs"].as_array().unwrap().len(),
        3,
        "made-before, b-0 and b-1: {found}"
    );
}

async fn a_batch_of_five_hundred_is_written_in_few_commits_and_a_refused_job_fails_no_other(
    db: Db,
) {
    let app = spawn_app(db).await;
    let token = app.token("acme").await;
    for i in 0..10 {
        let made = app
            .post_job(&token, &job_request(&format!("old-{i}"), json!(i)))
            .await;
        assert_eq!(made.status(), 201);
    }
    // Every fiftieth job reuses a key made above with another request.
    let jobs: Vec<Value> = (0..500)
        .map(|i| {
            if i % 50 == 0 {
                job_request(&format!("old-{}", i / 50), json!("changed"))
            } else {
                job_request(&format!("new-{i}"), json!(i))
            }
        })
        .collect();
    let commits_before = app.ledger.group_stats().commits;
    let body: Value = app
        .post_batch(&token, &json!({ "jobs": jobs }))
        .await
        .json()
        .await
        .unwrap();
    let commits = app.ledger.group_stats().commits - commits_before;
    let statuses = statuses(&body);
    for (i, status) in statuses.iter().enumerate() {
        let expected = if i % 50 == 0 { 409 } else { 201 };
        assert_eq!(*status, expected, "job {i}: {}", body["jobs"][i]);
    }
    assert_eq!(
        (&body["created"], &body["failed"]),
        (&json!(490), &json!(10))
    );
    let ids: std::collections::BTreeSet<&str> = body["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|j| j["job"]["job_id"].as_str())
        .collect();
    assert_eq!(ids.len(), 490, "a job of its own each");
    // One transaction a job would be 500 commits (and more for the conflicts' events).
    assert!(
        commits < 125,
        "{commits} commits for a batch of 500: the jobs were not written together"
    );
}
