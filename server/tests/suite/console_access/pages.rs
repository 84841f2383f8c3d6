//! The pages as an operator reads them: overview, workers, jobs list, job page, exports, the API
//! page, 404s and live refresh, and the pages' script policy.

use super::*;

on_both_backends!(
    an_export_shows_outside_values_as_written_never_as_links,
    an_export_of_a_long_timeline_is_sent_as_it_is_read_complete_and_in_order,
    the_overview_leaves_drill_jobs_out_of_its_counts_and_says_so,
    the_overview_says_how_long_the_oldest_ready_job_has_waited_within_the_operators_tenants,
    the_workers_page_shows_who_is_alive_silent_or_stopped_and_what_each_owns,
    the_jobs_list_filters_by_prefix_tenant_time_worker_error_and_trouble,
    a_job_page_folds_long_runs_and_shows_every_other_event_in_place,
);

/// A tenant's key and a worker's id that read as Markdown (a link, an image) are shown in the
/// Markdown export as written: each in a code span whose fence no backtick inside can close.
async fn an_export_shows_outside_values_as_written_never_as_links(db: Db) {
    let app = spawn_app(db).await;
    let key = "x` [click](https://evil.example) `";
    let job_id = create(&app.ledger, new_job("acme", key, json!("input"))).await;
    let worker = "w``![i](https://evil.example/i.png)";
    app.ledger
        .claim_and_start(&job_id, worker, Duration::from_secs(60), None, "stub")
        .await
        .unwrap();
    let mut browser = signed_in(&app, "ana", Role::Operator, None).await;
    let markdown = browser.page(&format!("/jobs/{job_id}/export.md")).await;
    for span in [
        "| `` x` [click](https://evil.example) ` `` |",
        "| ```w``![i](https://evil.example/i.png)``` |",
        "`acme`",
    ] {
        assert!(markdown.contains(span), "{span}: {markdown}");
    }
    // Every mention of the outside links sits in one of those spans.
    assert_eq!(
        markdown.matches("](https://evil.example").count(),
        markdown
            .matches("[click](https://evil.example) ` ``")
            .count()
            + markdown
                .matches("![i](https://evil.example/i.png)```")
                .count(),
        "{markdown}"
    );
}

/// A timeline longer than any page the ledger reads at once is exported as it is read, page
/// by page (no length announced beforehand, none of it held whole), and arrives complete and
/// in order; a run of one kind across a page's end is folded as one line, a short one is not.
async fn an_export_of_a_long_timeline_is_sent_as_it_is_read_complete_and_in_order(db: Db) {
    use fenceline::job::EventKind;
    use fenceline::ledger::NewEvent;
    const EVENTS: i64 = 1_200;
    let app = spawn_app(db).await;
    let job_id = create(&app.ledger, new_job("acme", "long", json!(1))).await;
    let kind = |seq: i64| match seq {
        400..=700 | 999..=1001 => EventKind::LeaseRenewed,
        _ if seq % 2 == 0 => EventKind::VisibilityRenewed,
        _ => EventKind::DeliveryReceived,
    };
    let worker = Actor::Worker("w1".into());
    let all: Vec<NewEvent> = (2..=EVENTS)
        .map(|seq| NewEvent::new(kind(seq), &worker).raw_detail(json!({ "n": seq })))
        .collect();
    for batch in all.chunks(100) {
        app.ledger.append_events(&job_id, batch).await.unwrap();
    }
    let mut ana = signed_in(&app, "ana", Role::Viewer, None).await;

    let response = ana.get(&format!("/jobs/{job_id}/export.json")).await;
    assert_eq!(response.status(), 200);
    assert!(
        response.headers().get("content-length").is_none(),
        "sent as it is read: {:?}",
        response.headers()
    );
    let export: serde_json::Value = response.json().await.unwrap();
    assert_eq!(export["job"]["job_id"], job_id.as_str());
    let events = export["events"].as_array().unwrap();
    let seqs: Vec<i64> = events.iter().map(|e| e["seq"].as_i64().unwrap()).collect();
    assert_eq!(seqs, (1..=EVENTS).collect::<Vec<_>>());
    for e in &events[1..] {
        let seq = e["seq"].as_i64().unwrap();
        assert_eq!(e["detail"]["n"], seq);
        assert_eq!(e["kind"], kind(seq).as_str());
        assert!(e["permalink"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/jobs/{job_id}#e{seq}")));
    }

    let response = ana.get(&format!("/jobs/{job_id}/export.md")).await;
    assert_eq!(response.status(), 200);
    assert!(response.headers().get("content-length").is_none());
    let markdown = response.text().await.unwrap();
    let timeline = markdown.split("## Timeline").nth(1).unwrap();
    let rows: Vec<String> = timeline
        .lines()
        .filter(|l| l.starts_with("| [") || l.contains('–'))
        .map(|l| {
            let first = l.trim_start_matches("| ").split(" |").next().unwrap();
            first
                .strip_prefix('[')
                .map_or(first, |f| f.split(']').next().unwrap())
                .to_owned()
        })
        .collect();
    let mut expected: Vec<String> = (1..400).map(|s| s.to_string()).collect();
    expected.push("400–700".into());
    expected.extend((701..=EVENTS).map(|s| s.to_string()));
    assert_eq!(rows, expected);
    assert!(
        timeline.contains("| 400–700 |"),
        "one line for the long run"
    );
    assert!(timeline.contains("301 × lease_renewed"));
    assert!(markdown.ends_with("|\n"), "the table is finished");
}

/// The tile of a state on the overview: its count.
fn tile(page: &str, state: &str) -> Option<i64> {
    let link = page.find(&format!("href=\"/jobs?state={state}"))?;
    let count = &page[link..];
    let start = count.find("tile-count\">")? + "tile-count\">".len();
    count[start..].split('<').next()?.trim().parse().ok()
}

/// Where the tile of a state on the overview links to, as written in the page.
fn tile_link(page: &str, state: &str) -> Option<String> {
    let at = page.find(&format!("href=\"/jobs?state={state}"))? + "href=\"".len();
    Some(page[at..].split('"').next()?.replace("&amp;", "&"))
}

async fn the_overview_leaves_drill_jobs_out_of_its_counts_and_says_so(db: Db) {
    let app = spawn_app(db).await;
    create(&app.ledger, new_job("acme", "served", json!(1))).await;
    let mut drill = new_job(fenceline::drill::DRILL_TENANT, "drilled", json!(2));
    drill.drill_run = Some("run-1".into());
    create(&app.ledger, drill).await;
    let mut olga = signed_in(&app, "olga", Role::Operator, None).await;
    let page = olga.page("/").await;
    assert_eq!(tile(&page, "ready"), Some(1), "{page}");
    assert!(
        page.contains("The 1 drill job (tenant drill) is left out of these counts"),
        "{page}"
    );
    assert!(page.contains("href=\"/jobs?tenant=drill\""), "{page}");
    // The tile opens the jobs list, which counts as the tile does: the drill's job left out,
    // and one click away.
    let link = tile_link(&page, "ready").unwrap();
    assert_eq!(link, "/jobs?state=ready");
    let list = olga.page(&link).await;
    assert!(list.contains("served"), "{list}");
    assert!(!list.contains("drilled"), "{list}");
    assert!(list.contains("ready 1"), "{list}");
    assert!(
        list.contains("Drill jobs (tenant drill) are left out"),
        "{list}"
    );
    assert!(
        list.contains("href=\"/jobs?state=ready&amp;with_drills=1\""),
        "{list}"
    );
    // Asked for, they are listed and counted, and the tabs keep the choice.
    let list = olga.page("/jobs?state=ready&with_drills=1").await;
    assert!(list.contains("drilled"), "{list}");
    assert!(list.contains("ready 2"), "{list}");
    assert!(
        list.contains("name=\"with_drills\" value=\"1\" checked"),
        "{list}"
    );
    assert!(
        list.contains("href=\"/jobs?state=succeeded&amp;with_drills=1\""),
        "{list}"
    );
    // The drill tenant chosen shows its jobs.
    let list = olga.page("/jobs?tenant=drill").await;
    assert!(list.contains("drilled"), "{list}");
    // The audit log leaves drills' entries out unless asked for.
    app.ledger
        .audit_drill_started("operator:olga", "drl_x", "all on embedded")
        .await
        .unwrap();
    let audit = olga.page("/audit").await;
    assert!(!audit.contains("drl_x"), "{audit}");
    assert!(
        audit.contains("Drills&#x27; entries") || audit.contains("Drills' entries"),
        "{audit}"
    );
    let audit = olga.page("/audit?drills=1").await;
    assert!(audit.contains("drl_x"), "{audit}");
    let audit = olga.page("/audit?action=drill_started").await;
    assert!(audit.contains("drl_x"), "{audit}");
    let acme = ["acme".to_owned()];
    let mut ana = signed_in(&app, "ana", Role::Operator, Some(&acme)).await;
    let page = ana.page("/").await;
    assert_eq!(tile(&page, "ready"), Some(1), "{page}");
    assert!(!page.contains("drill job"), "{page}");
    // No drill job in her view, nothing to leave out: the plain list.
    assert_eq!(tile_link(&page, "ready").unwrap(), "/jobs?state=ready");
}

async fn the_overview_says_how_long_the_oldest_ready_job_has_waited_within_the_operators_tenants(
    db: Db,
) {
    let app = crate::helpers::spawn_app_configured(db, |s| {
        s.http.metrics_token = Some(fenceline::settings::Secret::new("metrics-token"));
    })
    .await;
    // The same figure for alerts, in seconds.
    let latency = || async {
        let metrics = app.get(Some("metrics-token"), "/metrics").await;
        let metrics = metrics.text().await.unwrap();
        let line = metrics
            .lines()
            .find(|l| l.starts_with("fenceline_oldest_ready_age_seconds "))
            .unwrap_or_else(|| panic!("no latency gauge: {metrics}"))
            .to_owned();
        line.rsplit(' ').next().unwrap().parse::<f64>().unwrap()
    };
    let mut olga = signed_in(&app, "olga", Role::Viewer, None).await;
    let empty = olga.page("/").await;
    assert!(!empty.contains("oldest ready"));
    assert!(empty.contains("No tenant has jobs waiting to be sent or running."));
    assert_eq!(latency().await, 0.0);
    // The drill's job is the oldest of all, then globex's, then acme's.
    let mut drill = new_job(fenceline::drill::DRILL_TENANT, "drilled", json!(1));
    drill.drill_run = Some("run-1".into());
    create(&app.ledger, drill).await;
    let theirs = create(&app.ledger, new_job("globex", "theirs", json!(2))).await;
    let served = create(&app.ledger, new_job("acme", "served", json!(3))).await;
    let raw = app.db.raw_pool().await;
    for (job_id, back_us) in [(&theirs, 3_725_000_000_i64), (&served, 125_000_000)] {
        sqlx::query(&format!(
            "UPDATE jobs SET created_at = created_at - {back_us} WHERE job_id = '{job_id}'"
        ))
        .execute(&raw)
        .await
        .unwrap();
    }
    let page = olga.page("/").await;
    assert!(
        page.contains("The oldest ready job has waited 1h 2m for a worker: "),
        "{page}"
    );
    assert!(page.contains(&format!("href=\"/jobs/{theirs}\"")), "{page}");
    // The tenants with work in flight, each linked to its jobs.
    let tenants = &page[page
        .find("<table class=\"tenant-flow")
        .expect("the tenants' table")..];
    assert!(tenants.contains("href=\"/jobs?tenant=acme\""), "{tenants}");
    assert!(
        tenants.contains("href=\"/jobs?tenant=globex\""),
        "{tenants}"
    );
    let seconds = latency().await;
    assert!((3725.0..3800.0).contains(&seconds), "{seconds}");
    // An operator of acme alone hears of acme's job only.
    let acme = ["acme".to_owned()];
    let mut ana = signed_in(&app, "ana", Role::Operator, Some(&acme)).await;
    let page = ana.page("/").await;
    assert!(
        page.contains("The oldest ready job has waited 2m "),
        "{page}"
    );
    assert!(page.contains(&format!("href=\"/jobs/{served}\"")), "{page}");
    assert!(!page.contains(theirs.as_str()), "{page}");
    // Once claimed, it no longer waits.
    app.ledger
        .claim_and_start(&served, "w-1", Duration::from_secs(60), None, "stub")
        .await
        .unwrap();
    assert!(!ana.page("/").await.contains("oldest ready"));
}

fn report(worker_id: &str) -> fenceline::ledger::WorkerReport {
    fenceline::ledger::WorkerReport {
        worker_id: worker_id.into(),
        queue: "embedded:jobs".into(),
        provider: "stub".into(),
        max_in_flight: 16,
        capacity: 16,
    }
}

async fn the_workers_page_shows_who_is_alive_silent_or_stopped_and_what_each_owns(db: Db) {
    let app = crate::helpers::spawn_app_configured(db, |s| {
        s.http.metrics_token = Some(fenceline::settings::Secret::new("metrics-token"));
    })
    .await;
    let ledger = &app.ledger;
    // Before any worker reports, the overview says that nothing runs the jobs.
    let mut olga = signed_in(&app, "olga", Role::Viewer, None).await;
    let overview = olga.page("/").await;
    assert!(
        overview.contains(
            "No worker is running (none has reported in the last 24 hours): jobs wait in ready"
        ),
        "{overview}"
    );
    for worker in ["w-alive", "w-silent", "w-gone"] {
        ledger.report_worker(&report(worker)).await.unwrap();
    }
    ledger.worker_stopped("w-gone").await.unwrap();
    // w-silent last reported a minute ago and owns a job whose lease has lapsed; w-alive owns
    // one of acme's and one of globex's, leases held.
    let raw = app.db.raw_pool().await;
    sqlx::query("UPDATE workers SET seen_at = seen_at - 60000000 WHERE worker_id = 'w-silent'")
        .execute(&raw)
        .await
        .unwrap();
    let stuck = create(ledger, new_job("acme", "stuck", json!(1))).await;
    ledger
        .claim_and_start(&stuck, "w-silent", Duration::from_millis(1), None, "stub")
        .await
        .unwrap();
    for (tenant, key) in [("acme", "mine"), ("globex", "theirs")] {
        let job = create(ledger, new_job(tenant, key, json!(2))).await;
        ledger
            .claim_and_start(&job, "w-alive", Duration::from_secs(600), None, "stub")
            .await
            .unwrap();
    }
    // A worker that never reported (a drill's, say) still shows with what it owns.
    let drilled = create(ledger, new_job("globex", "drilled", json!(3))).await;
    ledger
        .claim_and_start(&drilled, "w-quiet", Duration::from_secs(600), None, "stub")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;

    let page = olga.page("/workers").await;
    let row = |page: &str, worker: &str| -> String {
        let at = page
            .find(&format!("<code>{worker}</code>"))
            .unwrap_or_else(|| panic!("no row for {worker}: {page}"));
        let end = page[at..].find("</tr>").unwrap() + at;
        page[at..end].to_owned()
    };
    // Silent first: that is where jobs wait for the reaper.
    let order: Vec<usize> = ["w-silent", "w-alive", "w-quiet", "w-gone"]
        .iter()
        .map(|w| page.find(&format!("<code>{w}</code>")).unwrap())
        .collect();
    assert!(order.windows(2).all(|p| p[0] < p[1]), "{page}");
    let silent = row(&page, "w-silent");
    assert!(silent.contains(">silent<"), "{silent}");
    assert!(silent.contains("1 lease lapsed"), "{silent}");
    assert!(
        silent.contains("href=\"/jobs?state=running&amp;owner=w-silent\""),
        "{silent}"
    );
    assert!(
        page.contains("1 silent worker still owns 1 running job."),
        "{page}"
    );
    // The overview says it in one line, and links here.
    let overview = olga.page("/").await;
    let line = &overview[overview.find("Workers: ").expect(&overview)..];
    let line = &line[..line.find("</p>").unwrap()];
    assert!(
        line.starts_with("Workers: 1 alive, 1 silent, owning 1 running job (every lease lapsed)."),
        "{line}"
    );
    assert!(line.contains("href=\"/workers\""), "{line}");
    let alive = row(&page, "w-alive");
    assert!(alive.contains(">alive<"), "{alive}");
    assert!(alive.contains("embedded:jobs"), "{alive}");
    assert!(alive.contains(">2</a>"), "{alive}");
    assert!(alive.contains("ends in"), "{alive}");
    assert!(!alive.contains("lapsed"), "{alive}");
    let quiet = row(&page, "w-quiet");
    assert!(quiet.contains(">no reports<"), "{quiet}");
    assert!(quiet.contains(">1</a>"), "{quiet}");
    assert!(row(&page, "w-gone").contains(">stopped<"));

    // The count opens the jobs that worker owns, and only those.
    let list = olga.page("/jobs?state=running&owner=w-silent").await;
    assert!(list.contains(&stuck), "{list}");
    assert!(!list.contains("mine") && !list.contains("theirs"), "{list}");
    assert!(list.contains("owns now"), "{list}");

    // An operator of acme counts acme's jobs only; the processes stay listed.
    let acme = ["acme".to_owned()];
    let mut ana = signed_in(&app, "ana", Role::Operator, Some(&acme)).await;
    let page = ana.page("/workers").await;
    assert!(row(&page, "w-alive").contains(">1</a>"), "{page}");
    assert!(!page.contains("w-quiet"), "{page}");
    assert!(row(&page, "w-gone").contains(">stopped<"));
    assert!(ana
        .page("/")
        .await
        .contains("1 silent, owning 1 running job"));
    // The silent worker owns none of globex's jobs.
    let globex = ["globex".to_owned()];
    let mut gus = signed_in(&app, "gus", Role::Viewer, Some(&globex)).await;
    let overview = gus.page("/").await;
    assert!(
        overview.contains("Workers: 1 alive, 1 silent, owning no running job."),
        "{overview}"
    );

    // The same judgement for alerts: the gauge counts the processes by status.
    let metrics = app.get(Some("metrics-token"), "/metrics").await;
    let metrics = metrics.text().await.unwrap();
    for (status, n) in [("alive", 1), ("silent", 1), ("stopped", 1)] {
        let line = format!("fenceline_workers{{status=\"{status}\"}} {n}");
        assert!(metrics.contains(&line), "{line}: {metrics}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn addresses_that_find_nothing_answer_404_and_unknown_filters_are_said() {
    let app = spawn_app(Db::Sqlite).await;
    let mut vera = signed_in(&app, "vera", Role::Viewer, None).await;
    let missing = format!("/jobs/job_{}", uuid::Uuid::now_v7());
    for path in [missing.as_str(), "/jobs/garbage"] {
        let response = vera.get(path).await;
        assert_eq!(response.status(), 404, "{path}");
        let page = response.text().await.unwrap();
        assert!(page.contains("No such job"), "{path}: {page}");
        assert!(
            page.contains("Sign out"),
            "{path} is in the console's frame"
        );
    }
    // An address no page answers: the console's "not found" page, with its menu, naming the
    // address; signed out, sign in first and come back to it, as for any page.
    let nope = vera.get("/nope/x").await;
    assert_eq!(nope.status(), 404);
    assert_eq!(nope.headers()["content-type"], "text/html; charset=utf-8");
    let page = nope.text().await.unwrap();
    assert!(page.contains("/style/fenceline.css") && page.contains("Back to the overview"));
    assert!(page.contains("<code>/nope/x</code>"), "{page}");
    assert!(
        page.contains(r#"href="/dlq""#) && page.contains("Sign out"),
        "the menu is on the page: {page}"
    );
    let signed_out = Browser::new(&app.base).get("/nope/x").await;
    assert_eq!(signed_out.status(), 303);
    assert_eq!(
        signed_out.headers()["location"],
        "/login?next=%2Fnope%2Fx",
        "nothing about the address is said before sign-in"
    );
    // A parameter a page cannot use is a 400 that names it, never silently ignored.
    let job_id = create(&app.ledger, new_job("acme", "bad-params", json!(1))).await;
    for (path, named) in [
        ("/?window=year".to_owned(), "window=year"),
        ("/jobs?before=garbage".to_owned(), "before=garbage"),
        ("/jobs?state=nope".to_owned(), "state=nope"),
        (
            "/jobs?created_after=2026-02-31".to_owned(),
            "created_after=2026-02-31",
        ),
        (
            "/jobs?created_after=2026-12-01T25:00".to_owned(),
            "created_after=2026-12-01T25:00",
        ),
        ("/audit?within=year".to_owned(), "within=year"),
        ("/audit?before=x".to_owned(), "before=x"),
        (format!("/jobs/{job_id}?around=x"), "around=x"),
        (
            "/jobs?created_before=2026-02-30".to_owned(),
            "created_before=2026-02-30",
        ),
        (
            "/jobs?created_after=2026-12-02&created_before=2026-12-01".to_owned(),
            "created_before=2026-12-01",
        ),
        (format!("/jobs/{job_id}?from=5"), "from=5"),
        (format!("/jobs/{job_id}?from=9&to=3"), "to=3"),
        (format!("/jobs/{job_id}?from=1.5s&to=3"), "from=1.5s"),
        ("/?tz=Nowhere/City".to_owned(), "tz=Nowhere/City"),
        ("/jobs?tz=UTC%2B1".to_owned(), "tz=UTC+1"),
        // A parameter the page does not have at all.
        ("/jobs?foo=bar".to_owned(), "foo=bar"),
        ("/jobs?state=ready&limit=abc".to_owned(), "limit=abc"),
        ("/workers?x=1".to_owned(), "x=1"),
        ("/audit?actor=olga".to_owned(), "actor=olga"),
        (format!("/jobs/{job_id}?page=2"), "page=2"),
    ] {
        let response = vera.get(&path).await;
        assert_eq!(response.status(), 400, "{path}");
        let page = response.text().await.unwrap();
        assert!(page.contains(named), "{path} names {named}: {page}");
        assert!(page.contains("Open the page without it"), "{path}");
        if ["foo", "limit", "x=", "actor", "page"]
            .iter()
            .any(|n| named.starts_with(n))
        {
            let name = named.split('=').next().unwrap();
            assert!(
                page.contains(&format!("this page has no parameter {name} (it takes ")),
                "{page}"
            );
        }
    }
    assert!(vera.page("/?window=day").await.contains("Activity"));
    let listed = vera
        .page("/jobs?state=ready&created_after=2026-11-01T09:30")
        .await;
    assert!(
        listed.contains(&job_id),
        "good filters still list: {listed}"
    );
    assert!(
        listed.contains(">bad-params</td>"),
        "the list shows each job's idempotency key"
    );
}

#[tokio::test]
async fn the_api_page_is_a_readable_reference_beside_the_document() {
    let app = spawn_app(Db::Sqlite).await;
    let mut browser = app.signed_in(Role::Viewer).await;
    let overview = browser.page("/").await;
    assert!(overview.contains(r#"<a href="/api">API</a>"#), "{overview}");
    let page = browser.page("/api").await;
    assert!(
        page.contains("<h1>Fenceline API 1 reference</h1>"),
        "{page}"
    );
    assert!(page.contains(r#"href="/api/v1/openapi.json""#), "{page}");
    assert!(
        page.contains("<code>POST /api/v1/jobs</code>")
            && page.contains("<code>POST /api/v1/jobs/{job_id}/decisions</code>"),
        "{page}"
    );
    // A body and a field's type lead to their schema.
    assert!(
        page.contains(r##"Request body: <a href="#schema-CreateJob">CreateJob</a>"##),
        "{page}"
    );
    assert!(page.contains(r#"<h3 id="schema-Job">Job</h3>"#), "{page}");
    assert!(
        page.contains(r##"<a href="#schema-JobState">JobState</a>"##),
        "{page}"
    );
    assert!(
        page.contains("<code>unknown</code>"),
        "the states are listed"
    );
    let bad = browser.get("/api?x=1").await;
    assert_eq!(bad.status(), 400);
}

#[tokio::test]
async fn a_live_page_refreshes_without_script_and_can_be_paused() {
    let app = spawn_app(Db::Sqlite).await;
    let job_id = create(&app.ledger, new_job("acme", "live", json!(1))).await;
    let mut browser = app.signed_in(Role::Viewer).await;
    let live = browser.page(&format!("/jobs/{job_id}?around=1")).await;
    assert!(
        live.contains("http-equiv=\"refresh\""),
        "a live job refreshes itself"
    );
    assert!(
        live.contains(&format!("href=\"/jobs/{job_id}?around=1&amp;refresh=off\""))
            || live.contains(&format!("href=\"/jobs/{job_id}?around=1&refresh=off\"")),
        "the pause keeps the view: {live}"
    );
    let paused = browser
        .page(&format!("/jobs/{job_id}?around=1&refresh=off"))
        .await;
    assert!(
        !paused.contains("http-equiv=\"refresh\""),
        "a paused page holds still"
    );
    assert!(paused.contains("Auto-refresh is paused"));
    assert!(
        paused.contains(&format!("href=\"/jobs/{job_id}?around=1\"")),
        "resume"
    );
}

#[tokio::test]
async fn exports_and_the_job_page_give_absolute_links_that_work_once_pasted() {
    let app = spawn_app(Db::Sqlite).await;
    let job_id = create(&app.ledger, new_job("acme", "shared", json!(1))).await;
    let mut browser = app.signed_in(Role::Viewer).await;
    let json: serde_json::Value = browser
        .get(&format!("/jobs/{job_id}/export.json"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(json["permalink"], format!("{}/jobs/{job_id}", app.base));
    assert_eq!(
        json["events"][0]["permalink"],
        format!("{}/jobs/{job_id}#e1", app.base)
    );
    let markdown = browser.page(&format!("/jobs/{job_id}/export.md")).await;
    assert!(
        markdown.contains(&format!("({}/jobs/{job_id}#e1)", app.base)),
        "{markdown}"
    );
    let page = browser.page(&format!("/jobs/{job_id}")).await;
    assert!(
        page.contains(&format!("value=\"{}/jobs/{job_id}?tz=UTC\"", app.base)),
        "the page offers its own absolute address, in the zone it is shown in"
    );
    // Opened in another zone, the page shows its times there and shares that view.
    let page = browser
        .page(&format!("/jobs/{job_id}?tz=asia/tokyo&from=0&to=5000"))
        .await;
    assert!(page.contains(" JST"), "times are in Tokyo time: {page}");
    assert!(
        page.contains(&format!(
            "value=\"{}/jobs/{job_id}?from=0&amp;to=5000&amp;tz=Asia%2FTokyo\"",
            app.base
        )),
        "the shared link keeps the zoom and the zone: {page}"
    );
    let bad = browser.get(&format!("/jobs/{job_id}?tz=Mars/Base")).await;
    assert_eq!(bad.status(), 400);
    assert!(bad.text().await.unwrap().contains("tz=Mars/Base"));
}

/// The jobs list answers the questions of an incident: by key prefix, by tenant whatever its
/// case, created between two instants, by worker and error code, and what went wrong.
async fn the_jobs_list_filters_by_prefix_tenant_time_worker_error_and_trouble(db: Db) {
    use fenceline::job::EventKind;
    use fenceline::ledger::{DeliveryRef, NewEvent};
    let app = spawn_app(db).await;
    let ledger = &app.ledger;
    let first = create(ledger, new_job("acme", "invoice-2026-001", json!(1))).await;
    let second = create(ledger, new_job("acme", "invoice-2026-002", json!(2))).await;
    let other = create(ledger, new_job("Globex", "report-7", json!(3))).await;
    // `second` ran on worker w-7, was delivered twice and had a stale result refused.
    let worker = Actor::Worker("w-7".into());
    ledger
        .claim_and_start(&second, "w-7", Duration::from_secs(60), None, "stub")
        .await
        .unwrap();
    let redelivered = NewEvent::new(EventKind::DeliveryReceived, &worker).delivery(DeliveryRef {
        message_id: "m-2".into(),
        receive_count: 2,
        handle_hash: "0123abcd".into(),
    });
    ledger.record_event(&second, &redelivered).await.unwrap();
    ledger
        .record_event(&first, &NewEvent::new(EventKind::ResultRejected, &worker))
        .await
        .unwrap();
    let mut vera = signed_in(&app, "vera", Role::Viewer, None).await;
    let listed = |page: &str| -> Vec<bool> {
        [&first, &second, &other]
            .iter()
            .map(|id| page.contains(id.as_str()))
            .collect()
    };
    let page = vera.page("/jobs?key_prefix=invoice-2026-").await;
    assert_eq!(listed(&page), [true, true, false], "key prefix");
    let page = vera.page("/jobs?tenant=globex").await;
    assert_eq!(listed(&page), [false, false, true], "tenant, any case");
    assert!(
        page.contains("<option value=\"Globex\" selected")
            && page.contains("<option value=\"acme\""),
        "the tenant picker offers the tenants that exist: {page}"
    );
    let page = vera.page("/jobs?worker=w-7").await;
    assert_eq!(listed(&page), [false, true, false], "worker");
    let page = vera.page("/jobs?redelivered=1").await;
    assert_eq!(listed(&page), [false, true, false], "redelivered");
    let page = vera.page("/jobs?stale_rejected=1").await;
    assert_eq!(
        listed(&page),
        [true, false, false],
        "stale results rejected"
    );
    let page = vera.page("/jobs?error_code=provider_timeout").await;
    assert_eq!(listed(&page), [false, false, false], "error code");
    // Created between two instants, read in the page's zone.
    let page = vera
        .page("/jobs?created_after=2000-01-01&created_before=2100-01-01T00:00")
        .await;
    assert_eq!(listed(&page), [true, true, true], "created between");
    let page = vera.page("/jobs?created_before=2000-01-01T00:00").await;
    assert_eq!(listed(&page), [false, false, false], "created before");
    // The tabs and the pages keep every filter.
    let page = vera
        .page("/jobs?key_prefix=invoice&redelivered=1&tz=UTC")
        .await;
    assert!(
        page.contains("href=\"/jobs?state=running&amp;key_prefix=invoice&amp;redelivered=1\""),
        "{page}"
    );
}

/// A job's page lists its timeline in order: a run of four or more events of one kind (lease
/// and visibility renewals as one) as one folded row, every other event as its own row, and a
/// folded run opened shows each of its events.
async fn a_job_page_folds_long_runs_and_shows_every_other_event_in_place(db: Db) {
    use fenceline::job::EventKind::{
        self, DeliveryReceived, DuplicateSuppressed, LeaseRenewalFailed, LeaseRenewed,
        VisibilityRenewed,
    };
    use fenceline::ledger::NewEvent;
    let app = spawn_app(db).await;
    let job_id = create(&app.ledger, new_job("acme", "folds", json!(1))).await;
    let worker = Actor::Worker("w".into());
    let pattern: Vec<(EventKind, usize)> = vec![
        (DeliveryReceived, 2),
        (LeaseRenewed, 1),
        (VisibilityRenewed, 1),
        (LeaseRenewed, 1),
        (VisibilityRenewed, 1),
        (LeaseRenewed, 1),
        (VisibilityRenewed, 1),
        (DuplicateSuppressed, 1),
        (LeaseRenewed, 1),
        (VisibilityRenewed, 1),
        (LeaseRenewalFailed, 1),
        (DuplicateSuppressed, 5),
        (VisibilityRenewed, 3),
        (DeliveryReceived, 1),
        (LeaseRenewed, 1),
        (VisibilityRenewed, 1),
        (LeaseRenewed, 1),
        (VisibilityRenewed, 1),
        (LeaseRenewed, 1),
    ];
    for (kind, n) in &pattern {
        let batch: Vec<NewEvent> = (0..*n).map(|_| NewEvent::new(*kind, &worker)).collect();
        app.ledger.append_events(&job_id, &batch).await.unwrap();
    }
    // What the page should list, folded from the whole timeline at once.
    let events = app.ledger.all_events(&job_id).await.unwrap();
    let folded = |kind: EventKind| match kind {
        LeaseRenewed | VisibilityRenewed => "renewed",
        other => other.as_str(),
    };
    let mut runs: Vec<(&str, i64, i64)> = Vec::new();
    for e in &events {
        match runs.last_mut() {
            Some(run) if run.0 == folded(e.kind) => run.2 = e.seq,
            _ => runs.push((folded(e.kind), e.seq, e.seq)),
        }
    }
    let rows_of = |open: Option<i64>| -> Vec<String> {
        runs.iter()
            .flat_map(|&(_, first, last)| {
                if last - first + 1 >= 4 && open != Some(first) {
                    vec![format!("e{first} folded")]
                } else {
                    events
                        .iter()
                        .filter(|e| (first..=last).contains(&e.seq))
                        .map(|e| format!("e{} kind-{}", e.seq, e.kind.as_str()))
                        .collect()
                }
            })
            .collect()
    };
    let shown = |page: &str| -> Vec<String> {
        page.split("<tr id=\"")
            .skip(1)
            .map(|row| {
                let (id, rest) = row.split_once('"').unwrap();
                let class = rest
                    .strip_prefix(" class=\"")
                    .and_then(|c| c.split_once('"'))
                    .map_or("", |c| c.0);
                format!("{id} {class}")
            })
            .collect()
    };
    let mut viewer = signed_in(&app, "vera", Role::Viewer, None).await;
    let page = viewer.page(&format!("/jobs/{job_id}")).await;
    let want = rows_of(None);
    assert_eq!(shown(&page), want);
    assert_eq!(
        want.iter().filter(|r| r.ends_with("folded")).count(),
        3,
        "{want:?}"
    );
    assert!(page.contains("6 × lease and visibility renewed, all answered"));
    assert!(page.contains("5 × duplicate suppressed"));
    // Opened, a folded run lists each of its events where it was.
    let renewals = runs
        .iter()
        .find(|r| r.0 == "renewed" && r.2 - r.1 == 5)
        .unwrap();
    let opened = viewer
        .page(&format!("/jobs/{job_id}?open={}", renewals.1))
        .await;
    assert_eq!(shown(&opened), rows_of(Some(renewals.1)));
}

/// The content security policy allows no inline script but the page's own: each rendered page
/// names a fresh nonce, every inline `<script>` it sends carries it, and every other response
/// allows scripts from this origin only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_allow_only_their_own_inline_scripts_by_a_fresh_nonce() {
    fn policy(response: &reqwest::Response) -> String {
        response.headers()["content-security-policy"]
            .to_str()
            .unwrap()
            .to_owned()
    }
    fn script_src(policy: &str) -> Vec<String> {
        let directive = policy
            .split(';')
            .map(str::trim)
            .find(|d| d.starts_with("script-src "))
            .unwrap_or_else(|| panic!("no script-src in {policy}"));
        directive
            .split_whitespace()
            .skip(1)
            .map(str::to_owned)
            .collect()
    }
    async fn rendered(browser: &mut Browser, path: &str) -> String {
        rendered_as(browser, path, 200).await
    }
    async fn rendered_as(browser: &mut Browser, path: &str, status: u16) -> String {
        let response = browser.get(path).await;
        assert_eq!(response.status(), status, "GET {path}");
        let policy = policy(&response);
        let sources = script_src(&policy);
        let nonce = sources
            .iter()
            .find_map(|s| s.strip_prefix("'nonce-")?.strip_suffix('\''))
            .unwrap_or_else(|| panic!("{path}: no nonce in {policy}"))
            .to_owned();
        assert_eq!(sources.len(), 2, "{path}: {policy}");
        assert_eq!(sources[0], "'self'", "{path}: {policy}");
        assert!(nonce.len() >= 22, "{path}: a short nonce {nonce:?}");
        let body = response.text().await.unwrap();
        let mut inline = 0;
        for tag in body.split("<script").skip(1) {
            let open = &tag[..tag.find('>').unwrap()];
            if !open.contains(" src=") {
                inline += 1;
                assert!(
                    open.contains(&format!("nonce=\"{nonce}\"")),
                    "{path}: an inline script without the policy's nonce: <script{open}>"
                );
            }
        }
        assert!(inline > 0, "{path}: no inline script to check");
        nonce
    }

    let app = spawn_app(Db::Sqlite).await;
    let mut visitor = Browser::new(&app.base);
    let first = rendered(&mut visitor, "/login").await;
    let second = rendered(&mut visitor, "/login").await;
    assert_ne!(first, second, "the nonce is not fresh for each page");
    let mut browser = app.signed_in(Role::Operator).await;
    let job_id = create(&app.ledger, new_job("acme", "csp", json!("input"))).await;
    for path in [
        "/",
        "/jobs",
        &format!("/jobs/{job_id}"),
        "/unknown",
        "/drills",
    ] {
        rendered(&mut browser, path).await;
    }
    // An address no page answers is rendered by the console too.
    rendered_as(&mut browser, "/no/such/page", 404).await;
    for path in ["/api/v1/openapi.json", "/healthz", "/style/fenceline.css"] {
        let response = browser.get(path).await;
        let policy = policy(&response);
        assert_eq!(script_src(&policy), ["'self'"], "{path}: {policy}");
    }
    let export = browser.get(&format!("/jobs/{job_id}/export.md")).await;
    assert_eq!(export.status(), 200);
    assert_eq!(script_src(&policy(&export)), ["'self'"]);
}
