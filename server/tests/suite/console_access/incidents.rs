//! Incidents: jobs pinned to one are kept from retention, each job's timeline names the
//! incident, and closing it freezes a bundle whose bytes never change after and whose SHA-256
//! is the one in the audit.

use sha2::{Digest, Sha256};

use super::*;
use fenceline::ledger::AuditFilter;

on_both_backends!(a_pinned_job_outlives_retention_and_its_frozen_bundle_never_changes);

const LONG: Duration = Duration::from_secs(60);

/// A job of `tenant` that succeeded.
async fn finished_job(ledger: &Ledger, tenant: &str, key: &str) -> String {
    let job_id = create(ledger, new_job(tenant, key, json!("the input text"))).await;
    let (claimed, attempt) = ledger
        .claim_and_start(&job_id, "w", LONG, None, "stub")
        .await
        .unwrap();
    ledger
        .accept_result(
            &as_owner(&job_id, claimed.epoch, "w"),
            attempt.attempt_no,
            "\"the answer text\"",
        )
        .await
        .unwrap();
    job_id
}

/// Opens an incident from the console; its id.
async fn open_incident(browser: &mut Browser, title: &str) -> i64 {
    let csrf = browser.token("/incidents").await;
    let opened = browser
        .post(
            "/incidents",
            &[
                ("csrf", &csrf),
                ("title", title),
                ("external_id", "INC-4711"),
            ],
        )
        .await;
    let at = location(&opened);
    assert!(at.starts_with("/incidents/"), "{at}");
    at["/incidents/".len()..].parse().unwrap()
}

async fn download(browser: &mut Browser, path: &str) -> Vec<u8> {
    let response = browser.get(path).await;
    assert_eq!(response.status(), 200, "{path}");
    response.bytes().await.unwrap().to_vec()
}

async fn a_pinned_job_outlives_retention_and_its_frozen_bundle_never_changes(db: Db) {
    let app = spawn_app(db).await;
    let ledger = &app.ledger;
    let pinned = finished_job(ledger, "acme", "pinned").await;
    let neighbour = finished_job(ledger, "acme", "neighbour").await;
    let mut ana = signed_in(&app, "ana", Role::Operator, None).await;
    let id = open_incident(&mut ana, "Answers lost after the deploy").await;

    // Pinned from the job's own page.
    let job_page = ana.page(&format!("/jobs/{pinned}")).await;
    assert!(job_page.contains("Pin to incident"), "{job_page}");
    let csrf = ana.token(&format!("/jobs/{pinned}")).await;
    let response = ana
        .post(
            "/incidents/pin",
            &[
                ("csrf", &csrf),
                ("incident", &id.to_string()),
                ("job_ids", &pinned),
                ("back", "job"),
            ],
        )
        .await;
    assert_eq!(location(&response), format!("/jobs/{pinned}"));
    let job_page = ana.page(&format!("/jobs/{pinned}")).await;
    assert!(
        job_page.contains(&format!("#{id} Answers lost after the deploy")),
        "the job's page names its incident: {job_page}"
    );
    let kinds = crate::helpers::kinds(ledger, &pinned).await;
    assert_eq!(kinds.last().map(String::as_str), Some("incident_pinned"));
    crate::helpers::assert_gap_free(ledger, &pinned).await;

    // Retention prunes the neighbour and keeps the pinned job whole.
    let now = ledger.now_us().await.unwrap();
    let pruned = ledger.prune_before(now + 1).await.unwrap();
    assert_eq!(pruned.jobs, 1);
    assert!(ledger.job(&neighbour).await.unwrap().is_none());
    assert!(ledger.job(&pinned).await.unwrap().is_some());
    assert_eq!(ledger.attempts(&pinned).await.unwrap().len(), 1);

    // The incident's page lists it, with its key events merged.
    let page = ana.page(&format!("/incidents/{id}")).await;
    assert!(
        page.contains(&pinned) && page.contains("INC-4711") && page.contains("result_accepted"),
        "{page}"
    );
    assert!(
        !ana.get(&format!("/incidents/{id}/bundle.md"))
            .await
            .status()
            .is_success(),
        "no bundle before it closes"
    );

    // Closed: the bundle is made once and its digests go to the audit.
    let csrf = ana.token(&format!("/incidents/{id}")).await;
    let closed = ana
        .post(
            &format!("/incidents/{id}/close"),
            &[("csrf", &csrf), ("reason", "post-mortem written")],
        )
        .await;
    assert_eq!(location(&closed), format!("/incidents/{id}"));
    let audit = ledger
        .audit_entries(&AuditFilter {
            action: Some("incident_closed".into()),
            limit: 10,
            ..AuditFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(audit.len(), 1);
    let recorded = audit[0].state_after.clone().unwrap_or_default();
    let page = ana.page(&format!("/incidents/{id}")).await;

    let mut first = Vec::new();
    for file in ["md", "json", "html"] {
        let bytes = download(&mut ana, &format!("/incidents/{id}/bundle.{file}")).await;
        let digest = hex::encode(Sha256::digest(&bytes));
        assert!(
            recorded.contains(&format!("{file} sha256:{digest}")),
            "{file}: the audit names {recorded}"
        );
        assert!(page.contains(&digest), "the page shows the {file} digest");
        first.push(bytes);
    }
    let json: serde_json::Value = serde_json::from_slice(&first[1]).unwrap();
    assert_eq!(json["jobs"].as_array().unwrap().len(), 1);
    assert_eq!(json["jobs"][0]["job_id"], pinned.as_str());
    assert!(json["jobs"][0]["events"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["kind"] == "incident_pinned"));
    let html = String::from_utf8(first[2].clone()).unwrap();
    assert!(
        html.contains("<svg") && html.contains("<style>"),
        "swimlanes and style inline"
    );
    assert!(
        !html.contains("<script") && !html.contains("<link"),
        "nothing to fetch"
    );
    for bytes in &first {
        let text = String::from_utf8_lossy(bytes);
        assert!(
            !text.contains("the input text") && !text.contains("the answer text"),
            "no input or answer in the bundle"
        );
    }

    // A minute on, with the job's record grown meanwhile (its result read, audited), every
    // download is still the same bytes.
    let read = ana.get(&format!("/jobs/{pinned}/result")).await;
    assert_eq!(read.status(), 200);
    tokio::time::sleep(Duration::from_secs(61)).await;
    for (file, before) in ["md", "json", "html"].into_iter().zip(&first) {
        let again = download(&mut ana, &format!("/incidents/{id}/bundle.{file}")).await;
        assert!(&again == before, "{file} changed between downloads");
    }

    // Closed, it takes no more jobs; its jobs stay kept for the configured time after.
    let other = finished_job(ledger, "acme", "late").await;
    let csrf = ana.token(&format!("/jobs/{other}")).await;
    ana.post(
        "/incidents/pin",
        &[
            ("csrf", &csrf),
            ("incident", &id.to_string()),
            ("job_ids", &other),
        ],
    )
    .await;
    assert!(ledger.incidents_of_job(&other).await.unwrap().is_empty());
    let now = ledger.now_us().await.unwrap();
    ledger.prune_before(now + 1).await.unwrap();
    assert!(
        ledger.job(&pinned).await.unwrap().is_some(),
        "kept after closing"
    );
    assert!(ledger.job(&other).await.unwrap().is_none());
}

/// Viewers read incidents but change none; an operator of some tenants pins only their jobs,
/// and neither closes nor downloads an incident holding another tenant's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incidents_keep_to_roles_and_tenants() {
    let app = spawn_app(Db::Sqlite).await;
    let ledger = &app.ledger;
    let theirs = finished_job(ledger, "globex", "theirs").await;
    let ours = finished_job(ledger, "acme", "ours").await;
    let mut ana = signed_in(&app, "ana", Role::Operator, None).await;
    let id = open_incident(&mut ana, "Mixed").await;
    let csrf = ana.token("/incidents").await;
    ana.post(
        "/incidents/pin",
        &[
            ("csrf", &csrf),
            ("incident", &id.to_string()),
            ("job_ids", &theirs),
        ],
    )
    .await;

    let mut vic = signed_in(&app, "vic", Role::Viewer, None).await;
    let page = vic.page("/incidents").await;
    assert!(page.contains("Mixed") && !page.contains("Open an incident"));
    let csrf = vic.token("/incidents").await;
    let refused = vic
        .post("/incidents", &[("csrf", &csrf), ("title", "nope")])
        .await;
    assert_eq!(refused.status(), 403);

    let acme = ["acme".to_owned()];
    let mut olga = signed_in(&app, "olga", Role::Operator, Some(&acme)).await;
    // An incident of another tenant's jobs does not exist for her.
    assert!(!olga.page("/incidents").await.contains("Mixed"));
    assert_eq!(olga.get(&format!("/incidents/{id}")).await.status(), 404);
    let csrf = olga.token("/incidents").await;
    // Another tenant's job does not exist for her.
    olga.post(
        "/incidents/pin",
        &[
            ("csrf", &csrf),
            ("incident", &id.to_string()),
            ("job_ids", &format!("{ours} {theirs}")),
        ],
    )
    .await;
    assert!(
        ledger.incidents_of_job(&ours).await.unwrap().is_empty(),
        "all or nothing"
    );
    olga.post(
        "/incidents/pin",
        &[
            ("csrf", &csrf),
            ("incident", &id.to_string()),
            ("job_ids", &ours),
        ],
    )
    .await;
    assert_eq!(ledger.incidents_of_job(&ours).await.unwrap().len(), 1);
    let page = olga.page(&format!("/incidents/{id}")).await;
    assert!(page.contains(&ours) && !page.contains(&theirs), "{page}");
    assert!(!page.contains("Close and freeze"));
    let refused = olga
        .post(
            &format!("/incidents/{id}/close"),
            &[("csrf", &csrf), ("reason", "done")],
        )
        .await;
    assert_eq!(refused.status(), 403);
    assert!(ledger
        .incident(id)
        .await
        .unwrap()
        .unwrap()
        .closed_at
        .is_none());

    // Every job a filter matches, pinned at once.
    let more: Vec<String> = {
        let mut ids = Vec::new();
        for i in 0..3 {
            ids.push(finished_job(ledger, "initech", &format!("batch-{i}")).await);
        }
        ids
    };
    let csrf = ana.token("/jobs?tenant=initech").await;
    let response = ana
        .post(
            "/incidents/pin-filter",
            &[
                ("csrf", &csrf),
                ("incident", &id.to_string()),
                ("tenant", "initech"),
            ],
        )
        .await;
    assert_eq!(location(&response), format!("/incidents/{id}"));
    for job in &more {
        assert_eq!(
            ledger.incidents_of_job(job).await.unwrap().len(),
            1,
            "{job}"
        );
    }
    assert_eq!(ledger.incident(id).await.unwrap().unwrap().jobs, 5);

    // Jobs picked on the list, pinned together.
    let picked = [
        finished_job(ledger, "umbrella", "picked-1").await,
        finished_job(ledger, "umbrella", "picked-2").await,
    ];
    let list = ana.page("/jobs?tenant=umbrella").await;
    assert!(list.contains("Pin picked jobs"), "{list}");
    let picks = pick_values(&list);
    assert_eq!(picks.len(), 2, "{picks:?}");
    let csrf = crate::helpers::token_in(&list).unwrap();
    let incident = id.to_string();
    let mut form = vec![
        ("csrf", csrf.as_str()),
        ("incident", incident.as_str()),
        ("back", "/jobs?tenant=umbrella"),
        ("reason", ""),
    ];
    form.extend(picks.iter().map(|p| ("job", p.as_str())));
    let response = ana.post("/incidents/pin-picked", &form).await;
    assert_eq!(location(&response), "/jobs?tenant=umbrella");
    for job in &picked {
        assert_eq!(
            ledger.incidents_of_job(job).await.unwrap().len(),
            1,
            "{job}"
        );
    }
    assert_eq!(ledger.incident(id).await.unwrap().unwrap().jobs, 7);
    let audit = ledger
        .audit_entries(&AuditFilter {
            action: Some("incident_pinned".into()),
            limit: 10,
            ..AuditFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(audit.len(), 4, "one entry per pinning: {audit:?}");

    // Closed, and kept no longer: retention prunes its jobs, and the record stays another
    // tenant's.
    let incident = ledger.incident(id).await.unwrap().unwrap();
    let bundle = fenceline::ledger::Bundle {
        markdown: "m".into(),
        json: "{}".into(),
        html: "h".into(),
    };
    let now = ledger.now_us().await.unwrap();
    assert!(ledger
        .close_incident(
            id,
            &Actor::Operator("ana".into()),
            ("done", incident.jobs),
            &bundle,
            now
        )
        .await
        .unwrap());
    ledger.prune_before(now + 1).await.unwrap();
    assert!(ledger.job(&theirs).await.unwrap().is_none(), "pruned");
    assert_eq!(
        olga.get(&format!("/incidents/{id}/bundle.md"))
            .await
            .status(),
        404,
        "the bundle holds another tenant's jobs"
    );
    assert_eq!(
        ana.get(&format!("/incidents/{id}/bundle.md"))
            .await
            .status(),
        200
    );
}
