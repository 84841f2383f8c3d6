//! Actions by filter: the preview records the exact jobs a filter matches, the confirmation
//! one audit entry, and the runner acts on each job fenced at what it was previewed at,
//! leaving alone those that moved on, each job's audit entry naming the action.

use super::*;
use fenceline::ledger::Decision;

/// `n` jobs of `tenant` whose provider call may have happened (`unknown`): claimed with a short
/// lease, let lapse together, recovered. Their ids and epochs.
async fn unknown_jobs(ledger: &Ledger, tenant: &str, prefix: &str, n: usize) -> Vec<(String, i64)> {
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        let id = create(ledger, new_job(tenant, &format!("{prefix}-{i}"), json!(i))).await;
        ledger
            .claim_and_start(&id, "w1", Duration::from_millis(300), None, "stub")
            .await
            .unwrap();
        ids.push(id);
    }
    tokio::time::sleep(Duration::from_millis(400)).await;
    let mut out = Vec::with_capacity(n);
    for id in ids {
        let recovered = ledger
            .recovery_claim(&id, &Actor::System, "lease_expired", true)
            .await
            .unwrap();
        assert_eq!(recovered.state, JobState::Unknown);
        out.push((id, recovered.epoch));
    }
    out
}

async fn a_filtered_action_over_a_thousand_unknown_jobs_is_previewed_run_and_audited_once(db: Db) {
    let app = spawn_app(db).await;
    let ledger = &app.ledger;
    let jobs = unknown_jobs(ledger, "acme", "inc", 1000).await;
    let others = unknown_jobs(ledger, "globex", "other", 5).await;
    let mut ana = signed_in(&app, "ana", Role::Operator, None).await;

    // The list offers the action on every job its filter matches.
    let list = ana.page("/jobs?state=unknown&tenant=acme").await;
    assert!(
        list.contains("Act on every job this filter matches"),
        "{list}"
    );
    let csrf = ana.token("/jobs?state=unknown&tenant=acme").await;
    let previewed = ana
        .post(
            "/bulk",
            &[
                ("csrf", &csrf),
                ("action", "authorize_retry"),
                ("state", "unknown"),
                ("tenant", "acme"),
            ],
        )
        .await;
    let at = location(&previewed);
    assert!(at.starts_with("/bulk/"), "{at}");
    let bulk_id: i64 = at["/bulk/".len()..].parse().unwrap();
    let preview = ana.page(&at).await;
    assert!(
        preview.contains("1000 jobs matched") && preview.contains("Confirm for 1000 jobs"),
        "the exact count: {preview}"
    );
    // Nothing changed yet.
    let bulk = ledger.bulk_action(bulk_id).await.unwrap().unwrap();
    assert_eq!((bulk.status.as_str(), bulk.total), ("previewed", 1000));
    assert_eq!(
        ledger.job(&jobs[0].0).await.unwrap().unwrap().state,
        JobState::Unknown
    );

    // Ten jobs move on between the preview and the confirmation.
    let operator = Actor::Operator("olga".into());
    for (id, epoch) in &jobs[..10] {
        ledger
            .decide(id, *epoch, &Decision::AuthorizeRetry, &operator, "by hand")
            .await
            .unwrap();
    }
    let moved: Vec<i64> = {
        let mut epochs = Vec::new();
        for (id, _) in &jobs[..10] {
            epochs.push(ledger.job(id).await.unwrap().unwrap().owner_epoch);
        }
        epochs
    };

    // Another operator cannot confirm ana's preview; ana can, with a reason.
    let mut olga = signed_in(&app, "olga", Role::Operator, None).await;
    let olga_csrf = olga.token(&at).await;
    olga.post(
        &format!("/bulk/{bulk_id}/confirm"),
        &[("csrf", &olga_csrf), ("reason", "not mine")],
    )
    .await;
    assert_eq!(
        ledger.bulk_action(bulk_id).await.unwrap().unwrap().status,
        "previewed"
    );
    let csrf = ana.token(&at).await;
    let confirmed = ana
        .post(
            &format!("/bulk/{bulk_id}/confirm"),
            &[
                ("csrf", &csrf),
                ("reason", "INC-42: the provider confirmed none ran"),
            ],
        )
        .await;
    assert_eq!(location(&confirmed), at);

    // The runner acts in the background, in chunks.
    let until = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        fenceline::bulk::run_once(ledger).await.unwrap();
        let bulk = ledger.bulk_action(bulk_id).await.unwrap().unwrap();
        if bulk.status == "done" {
            assert_eq!((bulk.applied, bulk.moved_on, bulk.refused), (990, 10, 0));
            break;
        }
        assert!(tokio::time::Instant::now() < until, "{bulk:?}");
    }
    for (id, _) in &jobs[10..] {
        assert_eq!(
            ledger.job(id).await.unwrap().unwrap().state,
            JobState::RetryAuthorized
        );
    }
    for ((id, _), epoch) in jobs[..10].iter().zip(moved) {
        let job = ledger.job(id).await.unwrap().unwrap();
        assert_eq!(job.owner_epoch, epoch, "a job that moved on is left alone");
    }
    for (id, _) in &others {
        assert_eq!(
            ledger.job(id).await.unwrap().unwrap().state,
            JobState::Unknown,
            "another tenant's job is not in the filter"
        );
    }

    // One audit entry for the action, and each of the 990 decisions names it.
    let audit = ledger.bulk_audit(bulk_id, 2000).await.unwrap();
    assert_eq!(audit.len(), 991);
    assert_eq!(audit[0].action, "bulk_authorize_retry");
    assert_eq!(audit[0].actor, "operator:ana");
    assert_eq!(audit[0].reason, "INC-42: the provider confirmed none ran");
    assert!(audit[0].job_id.is_none());
    let decided: std::collections::HashSet<&str> = audit[1..]
        .iter()
        .map(|e| {
            assert_eq!(e.action, "authorize_retry");
            assert_eq!(
                e.subject.as_deref(),
                Some(format!("bulk:{bulk_id}").as_str())
            );
            e.job_id.as_deref().unwrap()
        })
        .collect();
    assert_eq!(decided.len(), 990);
    assert!(jobs[10..]
        .iter()
        .all(|(id, _)| decided.contains(id.as_str())));

    let listed = ana.page("/bulk").await;
    assert!(
        listed.contains(&format!("href=\"/bulk/{bulk_id}\""))
            && listed.contains("1000 of 1000: 990 applied, 10 moved on (left alone), 0 refused"),
        "{listed}"
    );
    let log = ana.page("/audit").await;
    assert!(
        log.contains(&format!("href=\"/bulk/{bulk_id}\"")),
        "the audit links the action"
    );
    let done = ana.page(&at).await;
    assert!(
        done.contains("990") && done.contains("Moved on since (left alone)"),
        "{done}"
    );
    assert!(
        done.contains("991 (this action"),
        "the audit entries: {done}"
    );
}

on_both_backends!(a_filtered_action_over_a_thousand_unknown_jobs_is_previewed_run_and_audited_once);

/// A viewer cannot preview; a filter over more jobs than the cap, or a state the action does
/// not apply to, is refused with a reason and records nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preview_is_refused_past_the_cap_for_a_wrong_state_and_to_a_viewer() {
    let app = spawn_app_configured(Db::Sqlite, |s| s.http.bulk_cap = 3).await;
    unknown_jobs(&app.ledger, "acme", "k", 4).await;
    let mut vera = signed_in(&app, "vera", Role::Viewer, None).await;
    let csrf = vera.token("/jobs").await;
    let refused = vera
        .post(
            "/bulk",
            &[("csrf", &csrf), ("action", "cancel"), ("state", "unknown")],
        )
        .await;
    assert_eq!(refused.status(), 403);
    let mut ana = signed_in(&app, "ana", Role::Operator, None).await;
    let csrf = ana.token("/jobs").await;
    let over = ana
        .post(
            "/bulk",
            &[
                ("csrf", &csrf),
                ("action", "resolve_failed"),
                ("state", "unknown"),
            ],
        )
        .await;
    assert_eq!(location(&over), "/jobs?state=unknown");
    let page = ana.page("/jobs?state=unknown").await;
    assert!(page.contains("matches more than 3 jobs"), "{page}");
    let csrf = ana.token("/jobs").await;
    let wrong = ana
        .post(
            "/bulk",
            &[
                ("csrf", &csrf),
                ("action", "resolve_failed"),
                ("state", "ready"),
                ("with_drills", "1"),
            ],
        )
        .await;
    // Back to the list the filter describes, which opens as it was.
    assert_eq!(location(&wrong), "/jobs?state=ready&with_drills=1");
    let page = ana.page("/jobs?state=ready&with_drills=1").await;
    assert!(page.contains("applies to unknown jobs"), "{page}");
    assert!(app.ledger.bulk_actions(10).await.unwrap().is_empty());
}

/// The same over the API with an operator token: preview (the exact count, nothing changed),
/// confirm with a reason (only the operator who previewed), and read the progress; an operator
/// of one tenant previews within that tenant only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn automation_previews_confirms_and_follows_an_action_by_filter() {
    let app = spawn_app(Db::Sqlite).await;
    let ledger = &app.ledger;
    let acme = unknown_jobs(ledger, "acme", "a", 6).await;
    let globex = unknown_jobs(ledger, "globex", "g", 3).await;
    add_operator(ledger, "olga", Role::Operator, None).await;
    let scope = ["globex".to_owned()];
    add_operator(ledger, "gus", Role::Operator, Some(&scope)).await;
    let olga = ledger.add_operator_token("olga", "ops").await.unwrap();
    let gus = ledger.add_operator_token("gus", "ops").await.unwrap();
    let call =
        |token: &str, method: reqwest::Method, path: &str, body: Option<serde_json::Value>| {
            let mut request = app
                .client
                .request(method, format!("{}/api/v1{path}", app.base))
                .bearer_auth(token);
            if let Some(body) = body {
                request = request.json(&body);
            }
            async move {
                let response = request.send().await.unwrap();
                let status = response.status().as_u16();
                (status, response.json::<serde_json::Value>().await.unwrap())
            }
        };
    let (status, body) = call(
        &olga,
        reqwest::Method::POST,
        "/bulk",
        Some(
            json!({"action": "resolve_failed", "filter": {"state": "unknown", "key_prefix": "a-"}}),
        ),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(
        (body["status"].as_str(), body["total"].as_i64()),
        (Some("previewed"), Some(6))
    );
    assert_eq!(body["jobs"].as_array().unwrap().len(), 6);
    let bulk_id = body["bulk_id"].as_i64().unwrap();
    let confirm = format!("/bulk/{bulk_id}/confirm");
    let (status, body) = call(
        &gus,
        reqwest::Method::POST,
        &confirm,
        Some(json!({"reason": "x"})),
    )
    .await;
    assert_eq!(status, 404, "another operator's preview: {body}");
    let (status, _) = call(
        &olga,
        reqwest::Method::POST,
        &confirm,
        Some(json!({"reason": " "})),
    )
    .await;
    assert_eq!(status, 400, "a reason is needed");
    let (status, body) = call(
        &olga,
        reqwest::Method::POST,
        &confirm,
        Some(json!({"reason": "INC-7: nothing ran"})),
    )
    .await;
    assert_eq!(
        (status, body["status"].as_str()),
        (202, Some("running")),
        "{body}"
    );
    let (status, _) = call(
        &olga,
        reqwest::Method::POST,
        &confirm,
        Some(json!({"reason": "again"})),
    )
    .await;
    assert_eq!(status, 409, "confirmed once");
    while fenceline::bulk::run_once(ledger).await.unwrap() > 0 {}
    fenceline::bulk::run_once(ledger).await.unwrap();
    let (status, body) = call(
        &olga,
        reqwest::Method::GET,
        &format!("/bulk/{bulk_id}"),
        None,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        (body["status"].as_str(), body["applied"].as_i64()),
        (Some("done"), Some(6)),
        "{body}"
    );
    for (id, _) in &acme {
        assert_eq!(
            ledger.job(id).await.unwrap().unwrap().state,
            JobState::FailedTerminal
        );
    }
    // gus's filter without a tenant reaches globex's jobs only.
    let (status, body) = call(
        &gus,
        reqwest::Method::POST,
        "/bulk",
        Some(json!({"action": "cancel"})),
    )
    .await;
    assert_eq!((status, body["total"].as_i64()), (201, Some(3)), "{body}");
    let ids: Vec<&str> = body["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["job_id"].as_str().unwrap())
        .collect();
    assert!(globex.iter().all(|(id, _)| ids.contains(&id.as_str())));
    let (status, _) = call(
        &olga,
        reqwest::Method::POST,
        "/bulk",
        Some(json!({"action": "delete"})),
    )
    .await;
    assert_eq!(status, 400);
}

/// From a terminal: `fenceline bulk preview` prints the exact count and the id, `confirm`
/// starts it, and `show` follows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_previews_confirms_and_shows_an_action_by_filter() {
    let (ledger, db) = crate::helpers::fresh_ledger(Db::Sqlite).await;
    unknown_jobs(&ledger, "acme", "c", 3).await;
    add_operator(&ledger, "ana", Role::Operator, None).await;
    let fenceline = |args: &[&str]| {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_fenceline"));
        command.args(args).args(["--database-url", &db.url]);
        async move {
            let out = command.output().await.unwrap();
            let text = String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr);
            (out.status.success(), text)
        }
    };
    let (ok, printed) = fenceline(&[
        "bulk",
        "preview",
        "resolve_failed",
        "--operator",
        "ana",
        "--tenant",
        "acme",
    ])
    .await;
    assert!(ok, "{printed}");
    assert!(
        printed.contains("resolve_failed on 3 jobs matching tenant=acme (previewed)"),
        "{printed}"
    );
    let bulk_id = printed
        .split("fenceline bulk confirm ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .expect("the id to confirm")
        .to_owned();
    let (ok, printed) = fenceline(&[
        "bulk",
        "confirm",
        &bulk_id,
        "--operator",
        "ana",
        "--reason",
        "INC-9",
    ])
    .await;
    assert!(ok, "{printed}");
    let (ok, printed) = fenceline(&[
        "bulk",
        "confirm",
        &bulk_id,
        "--operator",
        "ana",
        "--reason",
        "INC-9",
    ])
    .await;
    assert!(!ok && printed.contains("confirmed already"), "{printed}");
    while fenceline::bulk::run_once(&ledger).await.unwrap() > 0 {}
    fenceline::bulk::run_once(&ledger).await.unwrap();
    let (ok, printed) = fenceline(&["bulk", "show", &bulk_id]).await;
    assert!(
        ok && printed.contains("(done); 3 applied, 0 moved on"),
        "{printed}"
    );
}

/// A re-run by filter makes one new job for each finished job, even when a try of it landed
/// before its outcome was recorded (a process that died in between): tried again, it finds the
/// job that try made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rerun_by_filter_tried_twice_makes_one_new_job() {
    let app = spawn_app(Db::Sqlite).await;
    let ledger = &app.ledger;
    let first = finished(ledger, "acme", "done-1").await;
    let second = finished(ledger, "acme", "done-2").await;
    add_operator(ledger, "ana", Role::Operator, None).await;
    let ana = ledger.operator("ana").await.unwrap().unwrap();
    let filter = fenceline::ledger::JobFilter {
        tenant: Some("acme".into()),
        ..Default::default()
    };
    let bulk_id = fenceline::bulk::preview(
        ledger,
        &ana,
        fenceline::bulk::BulkKind::Rerun,
        &filter,
        "tenant=acme",
        100,
    )
    .await
    .unwrap();
    assert!(ledger
        .confirm_bulk(bulk_id, "operator:ana", "INC-3: run them again")
        .await
        .unwrap());
    // A try that landed and was never recorded: the job it made already exists.
    let seen = ledger.bulk_jobs(bulk_id, None, 10).await.unwrap();
    let earlier = seen.iter().find(|j| j.job_id == first).unwrap();
    ledger
        .run_again(
            &first,
            Some(earlier.seen),
            &Actor::Operator("ana".into()),
            "INC-3: run them again",
        )
        .await
        .unwrap();
    while fenceline::bulk::run_once(ledger).await.unwrap() > 0 {}
    fenceline::bulk::run_once(ledger).await.unwrap();
    let bulk = ledger.bulk_action(bulk_id).await.unwrap().unwrap();
    assert_eq!(
        (bulk.status.as_str(), bulk.applied),
        ("done", 2),
        "{bulk:?}"
    );
    for job in [&first, &second] {
        let runs = ledger.rerun_links(job).await.unwrap();
        assert_eq!(runs.len(), 1, "one new job for {job}: {runs:?}");
    }
}
