//! Who may reach the console and act from it: sign-in, sessions, form tokens, other sites and
//! hosts, roles and tenant scopes, and the decisions an operator takes on an `unknown` job.

use std::time::Duration;

use fenceline::job::{Actor, JobState};
use fenceline::ledger::{ActsAs, Ledger, Refusal};
use fenceline::operators::{hash_password, Role};
use fenceline::settings::{Cli, Environment, Settings};
use serde_json::json;

use crate::helpers::{
    as_owner, create, location, new_job, spawn_app, spawn_app_configured, token_in, Browser, Db,
    TestApp,
};
use crate::on_both_backends;

on_both_backends!(
    a_signed_out_visitor_is_sent_to_sign_in_and_back_to_the_same_address,
    every_redirect_stays_on_this_site_whatever_next_holds,
    an_export_shows_outside_values_as_written_never_as_links,
    an_export_of_a_long_timeline_is_sent_as_it_is_read_complete_and_in_order,
    signing_in_starts_a_new_session_and_signing_out_ends_it,
    a_thousand_visits_to_the_sign_in_page_store_no_session,
    the_sixth_wrong_password_in_a_minute_is_throttled,
    sixty_guesses_at_once_on_one_form_get_five_checked,
    behind_a_trusted_proxy_each_forwarded_client_has_its_own_address_limit,
    an_untrusted_peers_forwarded_for_is_ignored,
    forms_without_the_sessions_token_or_from_another_site_are_refused,
    a_viewer_sees_no_action_and_cannot_act,
    an_operator_limited_to_a_tenant_neither_sees_nor_acts_on_another,
    an_operator_limited_to_a_tenant_reads_no_drill_run,
    an_operator_authorizes_a_fenced_retry_and_the_earlier_attempt_cannot_commit,
    two_operators_deciding_at_once_one_applies_the_other_is_told,
    an_unknown_job_is_resolved_as_succeeded_with_evidence_or_as_failed,
    a_running_job_is_cancelled_fenced_and_its_attempt_cannot_commit,
    automation_acts_over_the_api_with_an_operator_token_under_its_role_and_tenants,
    an_operator_replays_dead_letters_after_inspection_from_the_console,
    a_terminal_job_runs_again_as_a_new_linked_job_and_stays_terminal,
    a_bulk_decision_fences_each_job_on_its_own,
    a_bulk_cancel_from_the_jobs_list_fences_each_job_on_its_own,
    finished_jobs_run_again_in_bulk_from_the_jobs_list_once_for_each_view,
    automation_reads_and_runs_a_finished_job_again_over_the_api_once_for_each_view,
    a_ready_job_is_not_offered_for_cancelling_and_a_request_to_is_told_why,
    one_dead_letter_is_replayed_after_inspection_or_dropped_by_an_operator_of_its_tenant,
    the_overview_leaves_drill_jobs_out_of_its_counts_and_says_so,
    the_overview_says_how_long_the_oldest_ready_job_has_waited_within_the_operators_tenants,
    the_workers_page_shows_who_is_alive_silent_or_stopped_and_what_each_owns,
    a_job_page_folds_long_runs_and_shows_every_other_event_in_place,
    an_unknown_jobs_swimlane_shows_its_epoch_change_and_its_wait_for_a_decision,
);

const PASSWORD: &str = "correct horse battery staple";

/// The value of the first hidden field called `name` on a page.
fn hidden_value(page: &str, name: &str) -> Option<String> {
    let at = page.find(&format!("type=\"hidden\" name=\"{name}\" value=\""))?;
    let rest = &page[at..];
    let start = rest.find("value=\"")? + "value=\"".len();
    Some(rest[start..start + rest[start..].find('"')?].to_owned())
}

async fn add_operator(ledger: &Ledger, name: &str, role: Role, tenants: Option<&[String]>) {
    ledger
        .add_operator(name, role, tenants, &hash_password(PASSWORD).unwrap())
        .await
        .unwrap();
}

async fn signed_in(app: &TestApp, name: &str, role: Role, tenants: Option<&[String]>) -> Browser {
    add_operator(&app.ledger, name, role, tenants).await;
    let mut browser = Browser::new(&app.base);
    let response = browser.sign_in(name, PASSWORD).await;
    assert_eq!(response.status(), 303);
    assert_eq!(location(&response), "/");
    browser
}

/// A job of `tenant` whose provider call may have happened: `unknown`, at the returned epoch.
async fn unknown_job(ledger: &Ledger, tenant: &str, key: &str) -> (String, i64, i64) {
    let job_id = create(ledger, new_job(tenant, key, json!("input"))).await;
    let (a, _) = ledger
        .claim_and_start(&job_id, "w1", Duration::from_millis(100), None, "stub")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let recovered = ledger
        .recovery_claim(&job_id, &Actor::System, "lease_expired", true)
        .await
        .unwrap();
    assert_eq!(recovered.state, JobState::Unknown);
    (job_id, a.epoch, recovered.epoch)
}

async fn a_signed_out_visitor_is_sent_to_sign_in_and_back_to_the_same_address(db: Db) {
    let app = spawn_app(db).await;
    let job_id = create(&app.ledger, new_job("acme", "k", json!(1))).await;
    let mut browser = Browser::new(&app.base);
    for path in [
        "/".to_owned(),
        "/jobs?state=ready".to_owned(),
        format!("/jobs/{job_id}?after=2"),
        format!("/jobs/{job_id}/export.json"),
        format!("/jobs/{job_id}/export.md"),
        "/unknown".to_owned(),
        "/dlq".to_owned(),
        "/audit".to_owned(),
    ] {
        let response = browser.get(&path).await;
        assert_eq!(response.status(), 303, "{path}");
        let expected = format!(
            "/login?{}",
            serde_urlencoded::to_string([("next", path.as_str())]).unwrap()
        );
        assert_eq!(location(&response), expected, "{path}");
        let body = response.text().await.unwrap();
        assert!(!body.contains(&job_id), "{path} leaks nothing signed out");
    }
    let refused = browser
        .post(
            &format!("/jobs/{job_id}/decisions"),
            &[("decision", "resolve_failed")],
        )
        .await;
    assert_eq!(refused.status(), 403);

    add_operator(&app.ledger, "ana", Role::Viewer, None).await;
    let next = format!("/jobs/{job_id}?after=2");
    let login = browser
        .page(&format!(
            "/login?{}",
            serde_urlencoded::to_string([("next", next.as_str())]).unwrap()
        ))
        .await;
    assert!(login.contains(&format!(
        "name=\"next\" value=\"{}\"",
        next.replace('&', "&amp;")
    )));
    let csrf = token_in(&login).unwrap();
    let response = browser
        .post(
            "/login",
            &[
                ("csrf", &csrf),
                ("name", "ana"),
                ("password", PASSWORD),
                ("next", &next),
            ],
        )
        .await;
    assert_eq!(response.status(), 303);
    assert_eq!(
        location(&response),
        next,
        "back to the link that was opened"
    );
    let page = browser.page(&next).await;
    assert!(page.contains(&job_id));
    assert!(page.contains("ana"), "the frame names who is signed in");
    // Not a path of this site: the overview.
    let mut other = Browser::new(&app.base);
    let response = other.sign_in_to("ana", PASSWORD, "//evil.example/x").await;
    assert_eq!(location(&response), "/");
}

/// A `next` that a browser would read as another site (a tab or a line break inside `//`, a
/// backslash, a scheme) or that cannot be a header leads to the overview: after sign-in, after
/// choosing a time zone, and as the sign-in page's own field and "Continue" link.
async fn every_redirect_stays_on_this_site_whatever_next_holds(db: Db) {
    let app = spawn_app(db).await;
    let mut browser = signed_in(&app, "ana", Role::Operator, None).await;
    let abroad = [
        "/\t/evil.example/x",
        "/\n/evil.example/x",
        "/\r\n/evil.example/x",
        "\t//evil.example/x",
        " //evil.example/x",
        "/\\evil.example/x",
        "//evil.example/x",
        "https://evil.example/x",
        "javascript:alert(1)",
        "/jobs\n\rSet-Cookie: x=1",
        "/\u{0}/x",
    ];
    for next in abroad {
        let csrf = browser.token("/").await;
        let response = browser
            .post("/zone", &[("csrf", &csrf), ("tz", "UTC"), ("next", next)])
            .await;
        assert_eq!(response.status(), 303, "{next:?}");
        assert_eq!(location(&response), "/", "{next:?}");
        let query = serde_urlencoded::to_string([("next", next)]).unwrap();
        let page = browser.get(&format!("/login?{query}")).await;
        let page = page.text().await.unwrap();
        assert!(
            page.contains("<a href=\"/\">Continue</a>"),
            "{next:?}: {page}"
        );
    }
    // A path of this site keeps its query.
    let csrf = browser.token("/").await;
    let response = browser
        .post(
            "/zone",
            &[
                ("csrf", &csrf),
                ("tz", "UTC"),
                ("next", "/jobs?state=ready&q=a%20b"),
            ],
        )
        .await;
    assert_eq!(location(&response), "/jobs?state=ready&q=a%20b");
    // After sign-in too.
    let mut other = Browser::new(&app.base);
    let response = other
        .sign_in_to("ana", PASSWORD, "/\t/evil.example/x")
        .await;
    assert_eq!(location(&response), "/");
}

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

async fn signing_in_starts_a_new_session_and_signing_out_ends_it(db: Db) {
    let app = spawn_app(db).await;
    add_operator(&app.ledger, "ana", Role::Operator, None).await;
    let mut browser = Browser::new(&app.base);
    let csrf = browser.token("/login").await;
    let before = browser.cookie.clone().expect("the sign-in form's cookie");
    let response = browser
        .post(
            "/login",
            &[
                ("csrf", &csrf),
                ("name", "ana"),
                ("password", PASSWORD),
                ("next", "/jobs"),
            ],
        )
        .await;
    assert_eq!(location(&response), "/jobs");
    let after = browser.cookie.clone().unwrap();
    assert_ne!(before, after, "the session id changes at sign-in");
    let cookie = response
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(cookie.contains("HttpOnly"), "{cookie}");
    assert!(cookie.contains("SameSite=Strict"), "{cookie}");
    assert!(
        !cookie.contains("Secure"),
        "plain http on loopback: {cookie}"
    );
    assert_eq!(browser.get("/jobs").await.status(), 200);

    // The cookie from before sign-in opens nothing.
    let mut stale = Browser::new(&app.base);
    stale.cookie = Some(before);
    assert_eq!(stale.get("/jobs").await.status(), 303);

    // Signing out ends the session: its cookie opens nothing either.
    let csrf = browser.token("/jobs").await;
    let response = browser.post("/logout", &[("csrf", &csrf)]).await;
    assert_eq!(location(&response), "/login?said=signed-out");
    let mut old = Browser::new(&app.base);
    old.cookie = Some(after);
    assert_eq!(old.get("/jobs").await.status(), 303);
    assert!(browser
        .page("/login?said=signed-out")
        .await
        .contains("Signed out."));
    assert!(!browser.page("/login").await.contains("Signed out."));

    // A disabled operator's session ends at their next request.
    let mut ana = Browser::new(&app.base);
    ana.sign_in("ana", PASSWORD).await;
    assert_eq!(ana.get("/jobs").await.status(), 200);
    app.ledger.set_operator_disabled("ana", true).await.unwrap();
    assert_eq!(ana.get("/jobs").await.status(), 303);
}

/// The sign-in page stores nothing: a thousand visits without a cookie leave the sessions
/// table as it was (each row would be a write on SQLite's one writer, kept for hours). Its form
/// is still protected: posted without the page's cookie, with another token, or with a cookie
/// altered, it is refused; as served, it signs in.
async fn a_thousand_visits_to_the_sign_in_page_store_no_session(db: Db) {
    let app = spawn_app(db).await;
    add_operator(&app.ledger, "ana", Role::Viewer, None).await;
    let pool = app.db.raw_pool().await;
    let sessions = || async {
        sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM sessions")
            .fetch_one(&pool)
            .await
            .unwrap()
    };
    let before = sessions().await;
    let client = reqwest::Client::new();
    let mut visits = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let (client, url) = (client.clone(), format!("{}/login", app.base));
        visits.spawn(async move {
            for _ in 0..125 {
                let response = client.get(&url).send().await.unwrap();
                assert_eq!(response.status(), 200);
                let cookies: Vec<String> = response
                    .headers()
                    .get_all("set-cookie")
                    .iter()
                    .map(|v| v.to_str().unwrap().to_owned())
                    .collect();
                assert!(
                    !cookies.iter().any(|c| c.starts_with("fenceline_session=")),
                    "{cookies:?}"
                );
                assert!(token_in(&response.text().await.unwrap()).is_some());
            }
        });
    }
    visits.join_all().await;
    assert_eq!(sessions().await, before, "sessions stored by visits");

    let mut browser = Browser::new(&app.base);
    let csrf = browser.token("/login").await;
    let cookie = browser.cookie.clone().expect("the sign-in form's cookie");
    let form = |token: &str| {
        [
            ("csrf", token.to_owned()),
            ("name", "ana".to_owned()),
            ("password", PASSWORD.to_owned()),
            ("next", "/".to_owned()),
        ]
    };
    let post = |cookie: Option<String>, token: String| {
        let (client, base) = (client.clone(), app.base.clone());
        async move {
            let mut request = client
                .post(format!("{base}/login"))
                .header("origin", &base)
                .form(&form(&token));
            if let Some(cookie) = cookie {
                request = request.header("cookie", cookie);
            }
            request.send().await.unwrap().status()
        }
    };
    assert_eq!(post(None, csrf.clone()).await, 403, "without the cookie");
    assert_eq!(
        post(Some(cookie.clone()), "0".repeat(csrf.len())).await,
        403,
        "another token"
    );
    let mut altered = cookie.clone();
    let last = altered.pop().unwrap();
    altered.push(if last == '0' { '1' } else { '0' });
    assert_eq!(
        post(Some(altered), csrf.clone()).await,
        403,
        "an altered cookie"
    );
    let response = browser.sign_in("ana", PASSWORD).await;
    assert_eq!(location(&response), "/");
    assert_eq!(browser.get("/jobs").await.status(), 200);

    // Another `serve` process on the same ledger signs the form's cookie with the same key.
    let mut settings = fenceline::settings::Settings::for_database(&app.db.url).unwrap();
    settings.ledger.options = crate::helpers::options();
    settings.http.bind = "127.0.0.1:0".parse().unwrap();
    let other = fenceline::startup::Application::build(&settings)
        .await
        .unwrap();
    let other_base = format!("http://{}", other.local_addr());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(other.run_until_stopped(async move {
        let _ = stopped.await;
    }));
    let mut there = Browser::new(&app.base);
    let csrf = there.token("/login").await;
    there.base = other_base;
    let response = there
        .post(
            "/login",
            &[
                ("csrf", &csrf),
                ("name", "ana"),
                ("password", PASSWORD),
                ("next", "/"),
            ],
        )
        .await;
    assert_eq!(
        location(&response),
        "/",
        "served by one, posted to the other"
    );
    let _ = stop.send(());
}

async fn the_sixth_wrong_password_in_a_minute_is_throttled(db: Db) {
    let app = spawn_app(db).await;
    add_operator(&app.ledger, "ana", Role::Operator, None).await;
    let mut browser = Browser::new(&app.base);
    for _ in 0..5 {
        let response = browser.sign_in("ana", "wrong password, wrong").await;
        let back = location(&response);
        assert!(back.starts_with("/login"));
        assert!(browser
            .page(&back)
            .await
            .contains("Wrong name or password."));
    }
    // Now even the right password waits: the account is throttled.
    let response = browser.sign_in("ana", PASSWORD).await;
    let back = location(&response);
    assert!(back.starts_with("/login"));
    let page = browser.page(&back).await;
    assert!(page.contains("Too many failed sign-ins"), "{page}");
    assert!(!page.contains("Wrong name or password."), "{page}");
    assert_eq!(browser.get("/jobs").await.status(), 303, "not signed in");
}

/// One sign-in form's cookie and token posted sixty times at once, each with a wrong password:
/// the throttle takes each attempt's place before the password is checked, so the account's
/// five a minute are all that is checked; the rest are refused unchecked.
async fn sixty_guesses_at_once_on_one_form_get_five_checked(db: Db) {
    use fenceline::ledger::FailureScope;
    let app = spawn_app(db).await;
    add_operator(&app.ledger, "ana", Role::Operator, None).await;
    let failures = || async {
        app.ledger
            .recent_sign_in_failures(FailureScope::Account, "ana", 60_000_000)
            .await
            .unwrap()
    };
    // A right password counts as no failure once checked.
    let mut first = Browser::new(&app.base);
    assert_eq!(location(&first.sign_in("ana", PASSWORD).await), "/");
    let pool = app.db.raw_pool().await;
    let sessions = || async {
        sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM sessions")
            .fetch_one(&pool)
            .await
            .unwrap()
    };
    let sessions_before = sessions().await;
    assert_eq!(failures().await, 0);
    let mut browser = Browser::new(&app.base);
    let answers = browser.guesses_at_once("ana", 60).await;
    assert!(
        answers.iter().all(|s| *s == 303 || *s == 429),
        "{answers:?}"
    );
    assert_eq!(
        failures().await,
        5,
        "wrong passwords checked for the account"
    );
    assert_eq!(
        sessions().await,
        sessions_before,
        "refused sign-ins store no session"
    );
    // The right password now waits too.
    let response = browser.sign_in("ana", PASSWORD).await;
    assert!(location(&response).starts_with("/login"));
}

/// The application as `serve` with these flags would run it (on a fresh database, port 0).
async fn serving_with(db: Db, flags: &[&str]) -> TestApp {
    use clap::Parser;
    let flags: Vec<String> = flags.iter().map(|f| (*f).to_owned()).collect();
    spawn_app_configured(db, move |s| {
        let mut argv = vec![
            "fenceline".to_owned(),
            "--database-url".to_owned(),
            s.ledger.url.clone(),
            "serve".to_owned(),
        ];
        argv.extend(flags);
        let cli = Cli::try_parse_from(argv).expect("the flags parse");
        let mut configured = Settings::from_cli(&cli).expect("settings");
        configured.ledger.options = s.ledger.options.clone();
        configured.http.bind = s.http.bind;
        *s = configured;
    })
    .await
}

/// A sign-in posted from `client` through the proxy in front (the test's own address).
async fn sign_in_forwarded(app: &TestApp, client: &str, password: &str) -> reqwest::Response {
    let mut browser = Browser::new(&app.base);
    let csrf = browser.token("/login").await;
    browser
        .post_with(
            "/login",
            &[
                ("csrf", &csrf),
                ("name", "ana"),
                ("password", password),
                ("next", "/"),
            ],
            &[("origin", &app.base), ("x-forwarded-for", client)],
        )
        .await
}

/// Seeds `address` with failed sign-ins until a minute allows it no more.
async fn exhaust_address(ledger: &Ledger, address: &str) {
    for i in 0.. {
        let slot = ledger
            .take_sign_in_slot(&format!("guess-{i}"), address, (5, 20), 60_000_000)
            .await
            .unwrap();
        if slot.is_none() {
            break;
        }
    }
}

/// Behind the proxy that `--trusted-proxy` names, each operator's own address (the right-most
/// `X-Forwarded-For` entry that is not a trusted proxy) is counted: one office's failures do
/// not lock out another's.
async fn behind_a_trusted_proxy_each_forwarded_client_has_its_own_address_limit(db: Db) {
    use fenceline::ledger::FailureScope;
    let app = serving_with(db, &["--trusted-proxy", "127.0.0.0/8"]).await;
    add_operator(&app.ledger, "ana", Role::Viewer, None).await;
    let failures = |address: &'static str| {
        let ledger = app.ledger.clone();
        async move {
            ledger
                .recent_sign_in_failures(FailureScope::Address, address, 60_000_000)
                .await
                .unwrap()
        }
    };
    let wrong = sign_in_forwarded(&app, "198.51.100.9, 203.0.113.7", "wrong password").await;
    assert!(location(&wrong).starts_with("/login"));
    assert_eq!(failures("203.0.113.7").await, 1, "the forwarded client's");
    assert_eq!(failures("127.0.0.1").await, 0, "not the proxy's");
    assert_eq!(
        failures("198.51.100.9").await,
        0,
        "not one the client wrote"
    );

    exhaust_address(&app.ledger, "203.0.113.1").await;
    let refused = sign_in_forwarded(&app, "203.0.113.1", PASSWORD).await;
    assert!(location(&refused).starts_with("/login"), "over its limit");
    let signed_in = sign_in_forwarded(&app, "203.0.113.2", PASSWORD).await;
    assert_eq!(
        location(&signed_in),
        "/",
        "another client keeps its own limit"
    );
    // A proxy in the chain is skipped: the client is the address before it.
    let chained = sign_in_forwarded(&app, "203.0.113.1, 127.0.0.9", PASSWORD).await;
    assert!(
        location(&chained).starts_with("/login"),
        "still over its limit"
    );
}

/// Without `--trusted-proxy`, `X-Forwarded-For` is the client's own writing: the peer's
/// address is counted.
async fn an_untrusted_peers_forwarded_for_is_ignored(db: Db) {
    use fenceline::ledger::FailureScope;
    let app = serving_with(db, &[]).await;
    add_operator(&app.ledger, "ana", Role::Viewer, None).await;
    let wrong = sign_in_forwarded(&app, "203.0.113.7", "wrong password").await;
    assert!(location(&wrong).starts_with("/login"));
    for (address, expected) in [("203.0.113.7", 0), ("127.0.0.1", 1)] {
        let counted = app
            .ledger
            .recent_sign_in_failures(FailureScope::Address, address, 60_000_000)
            .await
            .unwrap();
        assert_eq!(counted, expected, "{address}");
    }
    exhaust_address(&app.ledger, "127.0.0.1").await;
    let refused = sign_in_forwarded(&app, "203.0.113.2", PASSWORD).await;
    assert!(
        location(&refused).starts_with("/login"),
        "a forwarded address does not escape the peer's limit"
    );
    // Trusting another network changes nothing for this peer.
    let elsewhere = serving_with(db, &["--trusted-proxy", "10.0.0.0/8"]).await;
    add_operator(&elsewhere.ledger, "ana", Role::Viewer, None).await;
    sign_in_forwarded(&elsewhere, "203.0.113.7", "wrong password").await;
    let counted = elsewhere
        .ledger
        .recent_sign_in_failures(FailureScope::Address, "127.0.0.1", 60_000_000)
        .await
        .unwrap();
    assert_eq!(counted, 1);
}

async fn forms_without_the_sessions_token_or_from_another_site_are_refused(db: Db) {
    let app = spawn_app(db).await;
    let (job_id, _, epoch) = unknown_job(&app.ledger, "acme", "csrf").await;
    let mut ana = signed_in(&app, "ana", Role::Operator, None).await;
    let csrf = ana.token(&format!("/jobs/{job_id}")).await;
    let path = format!("/jobs/{job_id}/decisions");
    let epoch = epoch.to_string();
    let form = |token: &'static str| -> Vec<(&'static str, String)> {
        vec![
            ("csrf", token.to_owned()),
            ("decision", "resolve_failed".into()),
            ("epoch", epoch.clone()),
            ("reason", "test".into()),
        ]
    };
    let as_pairs = |v: &Vec<(&'static str, String)>| -> Vec<(&'static str, String)> { v.clone() };
    for (what, token) in [("no token", ""), ("a wrong token", "0123456789abcdef")] {
        let f = as_pairs(&form(token));
        let pairs: Vec<(&str, &str)> = f.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let refused = ana.post(&path, &pairs).await;
        assert_eq!(refused.status(), 403, "{what}");
        // The console's own page: what went wrong, what was typed, the way back.
        assert!(refused.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html"));
        let page = refused.text().await.unwrap();
        assert!(page.contains("This form was refused"), "{page}");
        assert!(page.contains("This form has expired or did not come from this console"));
        assert!(
            page.contains(">test</textarea>"),
            "the typed reason is kept: {page}"
        );
        assert!(page.contains(&format!("href=\"/jobs/{job_id}\">Back to the page")));
        assert!(page.contains("Sign out"), "in the console's frame");
    }
    // A form too large to read: the console's 413 page, nothing done.
    let huge = "x".repeat(2 * 1024 * 1024);
    let f = as_pairs(&form("0123456789abcdef"));
    let mut pairs: Vec<(&str, &str)> = f.iter().map(|(k, v)| (*k, v.as_str())).collect();
    pairs.push(("evidence", &huge));
    let too_large = ana.post(&path, &pairs).await;
    assert_eq!(too_large.status(), 413);
    let page = too_large.text().await.unwrap();
    assert!(page.contains("This form is too large"), "{page}");
    assert!(page.contains("at most 1024 KiB"), "{page}");
    let mut good = form("");
    good[0].1 = csrf.clone();
    let pairs: Vec<(&str, &str)> = good.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let other_site = ana
        .post_with(&path, &pairs, &[("origin", "https://evil.example")])
        .await;
    assert_eq!(other_site.status(), 403, "another origin");
    let cross = ana
        .post_with(&path, &pairs, &[("sec-fetch-site", "cross-site")])
        .await;
    assert_eq!(cross.status(), 403, "a cross-site fetch");
    assert_eq!(
        app.ledger.job(&job_id).await.unwrap().unwrap().state,
        JobState::Unknown,
        "nothing changed"
    );
    // Another host name for this address (DNS rebinding) reaches nothing.
    let rebound = reqwest::Client::new()
        .get(format!("{}/login", app.base))
        .header("host", "rebound.attacker.example")
        .send()
        .await
        .unwrap();
    assert_eq!(rebound.status(), 421);
    // With the token, from the console itself: applied.
    let response = ana.post(&path, &pairs).await;
    assert_eq!(response.status(), 303);
    assert_eq!(
        app.ledger.job(&job_id).await.unwrap().unwrap().state,
        JobState::FailedTerminal
    );
}

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

async fn decide(
    browser: &mut Browser,
    job_id: &str,
    epoch: i64,
    fields: &[(&str, &str)],
) -> String {
    let page = format!("/jobs/{job_id}");
    let csrf = browser.token(&page).await;
    let epoch = epoch.to_string();
    let mut form = vec![("csrf", csrf.as_str()), ("epoch", epoch.as_str())];
    form.extend_from_slice(fields);
    let response = browser.post(&format!("{page}/decisions"), &form).await;
    assert_eq!(response.status(), 303);
    assert_eq!(location(&response), page);
    browser.page(&page).await
}

async fn an_operator_authorizes_a_fenced_retry_and_the_earlier_attempt_cannot_commit(db: Db) {
    let app = spawn_app(db).await;
    let ledger = &app.ledger;
    let (job_id, first_epoch, epoch) = unknown_job(ledger, "acme", "retry").await;
    let mut olga = signed_in(&app, "olga", Role::Operator, None).await;
    let page = decide(
        &mut olga,
        &job_id,
        epoch,
        &[
            ("decision", "authorize_retry"),
            ("reason", "provider shows no trace of the call"),
        ],
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
    let page = decide(
        &mut olga,
        &done,
        epoch,
        &[
            ("decision", "resolve_succeeded"),
            ("reason", "seen in the provider"),
        ],
    )
    .await;
    assert!(page.contains("needs evidence"), "{page}");
    let page = decide(
        &mut olga,
        &done,
        epoch,
        &[("decision", "resolve_failed"), ("reason", " ")],
    )
    .await;
    assert!(page.contains("Nothing was changed"), "{page}");
    assert_eq!(
        app.ledger.job(&done).await.unwrap().unwrap().state,
        JobState::Unknown
    );
    // Evidence is bounded on the server as on the form: 500 characters.
    let long = "r".repeat(5_000);
    let page = decide(
        &mut olga,
        &done,
        epoch,
        &[
            ("decision", "resolve_succeeded"),
            ("evidence", &long),
            ("reason", "seen in the provider"),
        ],
    )
    .await;
    assert!(page.contains("at most 500 characters"), "{page}");
    assert!(page.contains("Nothing was changed"), "{page}");
    assert_eq!(
        app.ledger.job(&done).await.unwrap().unwrap().state,
        JobState::Unknown
    );
    let page = decide(
        &mut olga,
        &done,
        epoch,
        &[
            ("decision", "resolve_succeeded"),
            ("evidence", "chatcmpl-123"),
            ("result", "{\"summary\":\"from the provider's log\"}"),
            ("reason", "the provider's log has the answer"),
        ],
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
    assert_eq!(recorded.detail["evidence"], "chatcmpl-123");
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

    decide(
        &mut olga,
        &gone,
        gone_epoch,
        &[
            ("decision", "resolve_failed"),
            ("reason", "the customer withdrew it"),
        ],
    )
    .await;
    assert_eq!(
        app.ledger.job(&gone).await.unwrap().unwrap().state,
        JobState::FailedTerminal
    );
    // A stale page changes nothing.
    let page = decide(
        &mut olga,
        &gone,
        gone_epoch,
        &[("decision", "authorize_retry"), ("reason", "again")],
    )
    .await;
    assert!(
        page.contains("This job changed since you loaded it"),
        "{page}"
    );
}

#[tokio::test]
async fn the_first_run_makes_an_administrator_only_outside_production() {
    let (ledger, _db) = crate::helpers::fresh_ledger(Db::Sqlite).await;
    let refused = fenceline::startup::first_operator(&ledger, Environment::Production).await;
    assert!(refused.is_err(), "production never makes an operator");
    assert_eq!(ledger.active_operator_count().await.unwrap(), 0);
    let password = fenceline::startup::first_operator(&ledger, Environment::Development)
        .await
        .unwrap()
        .expect("a one-time password");
    let credentials = ledger.credentials("admin").await.unwrap().unwrap();
    assert_eq!(credentials.operator.role, Role::Admin);
    assert!(fenceline::operators::verify_password(
        &password,
        &credentials.password_hash
    ));
    assert_eq!(
        fenceline::startup::first_operator(&ledger, Environment::Development)
            .await
            .unwrap(),
        None,
        "only once"
    );
    assert!(
        fenceline::startup::first_operator(&ledger, Environment::Production)
            .await
            .unwrap()
            .is_none()
    );
}

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
    let csrf = token_in(&html).unwrap();
    let epoch = claimed.epoch.to_string();
    let cancel = |reason: &'static str, state: &'static str| {
        vec![
            ("csrf", csrf.clone()),
            ("epoch", epoch.clone()),
            ("state", state.to_owned()),
            ("reason", reason.to_owned()),
        ]
    };
    // A page that showed the job in another state is stale: nothing changes.
    let stale = cancel("wrong view", "ready");
    let pairs: Vec<(&str, &str)> = stale.iter().map(|(k, v)| (*k, v.as_str())).collect();
    assert_eq!(
        olga.post(&format!("{page}/cancel"), &pairs).await.status(),
        303
    );
    assert!(olga
        .page(&page)
        .await
        .contains("This job changed since you loaded it"));
    assert_eq!(
        ledger.job(&job_id).await.unwrap().unwrap().state,
        JobState::Running
    );
    let good = cancel("the customer withdrew the document", "running");
    let pairs: Vec<(&str, &str)> = good.iter().map(|(k, v)| (*k, v.as_str())).collect();
    assert_eq!(
        olga.post(&format!("{page}/cancel"), &pairs).await.status(),
        303
    );
    let html = olga.page(&page).await;
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

async fn an_operator_replays_dead_letters_after_inspection_from_the_console(db: Db) {
    use fenceline::job::message::JobMessage;
    use fenceline::queue::embedded::EmbeddedQueue;
    use fenceline::queue::Queue;
    let app = spawn_app(db).await;
    let ledger = &app.ledger;
    let workable = create(ledger, new_job("acme", "dlq-workable", json!(1))).await;
    let (uncertain, _, _) = unknown_job(ledger, "acme", "dlq-unknown").await;
    // The console's queue: the embedded default, `jobs`, 5 receives before the dead letters.
    let queue = EmbeddedQueue::new(ledger.clone(), "jobs", 5);
    for id in [&workable, &uncertain] {
        queue
            .send(&JobMessage::body(id, "acme"), Duration::ZERO)
            .await
            .unwrap();
    }
    for _ in 0..8 {
        let _ = queue
            .receive(10, Duration::ZERO, Duration::from_millis(50))
            .await
            .unwrap();
    }
    let acme = ["acme".to_owned()];
    let mut scoped = signed_in(&app, "sam", Role::Operator, Some(&acme)).await;
    let page = scoped.page("/dlq").await;
    assert!(
        !page.contains("action=\"/dlq/replay\""),
        "a tenant-limited operator gets no replay"
    );
    let csrf = token_in(&page).unwrap();
    let refused = scoped
        .post("/dlq/replay", &[("csrf", &csrf), ("reason", "mine only")])
        .await;
    assert_eq!(refused.status(), 403);
    let mut vera = signed_in(&app, "vera", Role::Viewer, None).await;
    let csrf = vera.token("/dlq").await;
    let refused = vera
        .post("/dlq/replay", &[("csrf", &csrf), ("reason", "look")])
        .await;
    assert_eq!(refused.status(), 403);

    let mut olga = signed_in(&app, "olga", Role::Operator, None).await;
    let page = olga.page("/dlq").await;
    assert!(
        page.contains(&workable) && page.contains(&uncertain),
        "{page}"
    );
    assert!(page.contains("2 letters of 2 jobs or messages."), "{page}");
    assert!(page.contains("action=\"/dlq/replay\""));
    let csrf = token_in(&page).unwrap();
    let outbox_before = ledger.outbox_pending().await.unwrap();
    let response = olga
        .post(
            "/dlq/replay",
            &[("csrf", &csrf), ("reason", "the provider outage is over")],
        )
        .await;
    assert_eq!(location(&response), "/dlq");
    let page = olga.page("/dlq").await;
    assert!(page.contains("1 re-dispatched"), "{page}");
    assert!(page.contains("1 kept until a decision"), "{page}");
    assert_eq!(ledger.outbox_pending().await.unwrap(), outbox_before + 1);
    let audit: Vec<(String, Option<String>)> = ledger
        .audit_entries(&fenceline::ledger::AuditFilter {
            actor: Some("operator:olga".into()),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.action, e.job_id))
        .collect();
    assert!(
        audit.contains(&("dlq_redispatched".into(), Some(workable.clone()))),
        "{audit:?}"
    );
    assert!(audit.contains(&("dlq_kept_awaiting_decision".into(), Some(uncertain.clone()))));
}

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
    let csrf = token_in(&page).unwrap();
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
    let mut form = vec![
        ("csrf", csrf.as_str()),
        ("decision", "authorize_retry"),
        ("reason", "provider outage over"),
    ];
    for p in &picks {
        form.push(("job", p.as_str()));
    }
    let response = olga.post("/unknown/decisions", &form).await;
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

async fn one_dead_letter_is_replayed_after_inspection_or_dropped_by_an_operator_of_its_tenant(
    db: Db,
) {
    use fenceline::job::message::JobMessage;
    use fenceline::queue::embedded::EmbeddedQueue;
    use fenceline::queue::Queue;
    let app = spawn_app(db).await;
    let ledger = &app.ledger;
    let job_id = create(ledger, new_job("globex", "dlq-drop", json!(1))).await;
    let queue = EmbeddedQueue::new(ledger.clone(), "jobs", 5);
    queue
        .send(&JobMessage::body(&job_id, "globex"), Duration::ZERO)
        .await
        .unwrap();
    for _ in 0..8 {
        let _ = queue
            .receive(10, Duration::ZERO, Duration::from_millis(50))
            .await
            .unwrap();
    }
    let letters = ledger.embedded_dead_letters("jobs-dlq", 10).await.unwrap();
    assert_eq!(letters.len(), 1);
    let message_id = letters[0].message_id.clone();
    let path = format!("/dlq/{message_id}/drop");

    let acme = ["acme".to_owned()];
    let mut sam = signed_in(&app, "sam", Role::Operator, Some(&acme)).await;
    assert!(
        !sam.page("/dlq").await.contains(&job_id),
        "another tenant's letter is not shown"
    );
    let csrf = sam.token("/dlq").await;
    let refused = sam
        .post(&path, &[("csrf", &csrf), ("reason", "not mine")])
        .await;
    assert_eq!(refused.status(), 404);

    let mut olga = signed_in(&app, "olga", Role::Operator, None).await;
    let page = olga.page("/dlq").await;
    assert!(page.contains(&format!("formaction=\"{path}\"")));
    let csrf = token_in(&page).unwrap();
    let response = olga
        .post(
            &path,
            &[("csrf", &csrf), ("reason", "duplicate of a finished run")],
        )
        .await;
    assert_eq!(location(&response), "/dlq");
    let page = olga.page("/dlq").await;
    assert!(page.contains("dropped; its job is unchanged"), "{page}");
    assert!(page.contains("The dead-letter queue is empty."));
    assert!(ledger
        .embedded_dead_letters("jobs-dlq", 10)
        .await
        .unwrap()
        .is_empty());
    let events = ledger.events(&job_id, 0, 100).await.unwrap();
    assert!(events
        .iter()
        .any(|e| e.kind == "replayed" && e.detail["action"] == "dropped_by_operator"));
    let audit = ledger
        .audit_entries(&fenceline::ledger::AuditFilter {
            action: Some("dlq_dropped".into()),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(audit.len(), 1);
    assert_eq!(audit[0].reason, "duplicate of a finished run");
    let again = olga
        .post(&path, &[("csrf", &csrf), ("reason", "again")])
        .await;
    assert_eq!(location(&again), "/dlq");
    assert!(olga.page("/dlq").await.contains("no longer there"));

    // One letter replayed after inspection: a workable job goes again, an unknown one waits.
    let (uncertain, _, _) = unknown_job(ledger, "globex", "dlq-uncertain").await;
    for id in [&job_id, &uncertain] {
        queue
            .send(&JobMessage::body(id, "globex"), Duration::ZERO)
            .await
            .unwrap();
    }
    for _ in 0..8 {
        let _ = queue
            .receive(10, Duration::ZERO, Duration::from_millis(50))
            .await
            .unwrap();
    }
    let letters = ledger.embedded_dead_letters("jobs-dlq", 10).await.unwrap();
    assert_eq!(letters.len(), 2);
    let letter_of = |id: &str| {
        letters
            .iter()
            .find(|l| l.body.contains(id))
            .map(|l| l.message_id.clone())
            .unwrap()
    };
    let outbox_before = ledger.outbox_pending().await.unwrap();
    let replay = format!("/dlq/{}/replay", letter_of(&uncertain));
    olga.post(&replay, &[("csrf", &csrf), ("reason", "try")])
        .await;
    assert!(olga.page("/dlq").await.contains("needs a decision first"));
    assert_eq!(
        ledger
            .embedded_dead_letters("jobs-dlq", 10)
            .await
            .unwrap()
            .len(),
        2,
        "kept"
    );
    let replay = format!("/dlq/{}/replay", letter_of(&job_id));
    olga.post(&replay, &[("csrf", &csrf), ("reason", "outage over")])
        .await;
    assert!(olga
        .page("/dlq")
        .await
        .contains("sent again with the same id"));
    assert_eq!(ledger.outbox_pending().await.unwrap(), outbox_before + 1);
    assert_eq!(
        ledger
            .embedded_dead_letters("jobs-dlq", 10)
            .await
            .unwrap()
            .len(),
        1
    );
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

on_both_backends!(the_jobs_list_filters_by_prefix_tenant_time_worker_error_and_trouble);

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
    let csrf = token_in(&page).unwrap();
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
    let mut form = vec![
        ("csrf", csrf.as_str()),
        ("reason", "submitted by mistake"),
        ("back", list),
    ];
    for p in &picks {
        form.push(("job", p.as_str()));
    }
    let response = olga.post("/jobs/cancel", &form).await;
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

/// The values of the pick boxes on a page of the jobs list, in order.
fn pick_values(page: &str) -> Vec<String> {
    page.split("<input")
        .skip(1)
        .filter(|tag| tag.contains("name=\"job\""))
        .filter_map(|tag| {
            let start = tag.find("value=\"")? + "value=\"".len();
            Some(tag[start..start + tag[start..].find('"')?].to_owned())
        })
        .collect()
}

/// `worker` claims the job, records an attempt and has `answer` accepted.
async fn succeed(ledger: &Ledger, job_id: &str, worker: &str, answer: &str) {
    let claimed = ledger
        .claim(job_id, worker, Duration::from_secs(30))
        .await
        .unwrap();
    let owner = as_owner(job_id, claimed.epoch, worker);
    let attempt = ledger.start_attempt(&owner, "stub").await.unwrap();
    ledger
        .accept_result(&owner, attempt.attempt_no, answer)
        .await
        .unwrap();
}

/// A new job of `tenant`, claimed by `worker`: running at epoch 1.
async fn claimed_job(ledger: &Ledger, tenant: &str, key: &str, worker: &str) -> String {
    let id = create(ledger, new_job(tenant, key, json!({ "document": key }))).await;
    ledger
        .claim(&id, worker, Duration::from_secs(60))
        .await
        .unwrap();
    id
}

/// The audit log's entries for jobs run again.
async fn run_again_audits(ledger: &Ledger) -> Vec<fenceline::ledger::AuditEntry> {
    ledger
        .audit_entries(&fenceline::ledger::AuditFilter {
            action: Some("run_again".into()),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap()
}

/// A new job of `tenant`, already succeeded.
async fn finished(ledger: &Ledger, tenant: &str, key: &str) -> String {
    let id = create(ledger, new_job(tenant, key, json!({ "document": key }))).await;
    succeed(ledger, &id, "w", "{}").await;
    id
}

async fn keys_of(ledger: &Ledger, tenant: &str) -> Vec<String> {
    let page = ledger
        .list_jobs(&fenceline::ledger::JobFilter {
            tenant: Some(tenant.into()),
            limit: 100,
            ..Default::default()
        })
        .await
        .unwrap();
    let mut keys: Vec<String> = page.jobs.into_iter().map(|j| j.idempotency_key).collect();
    keys.sort();
    keys
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
    let csrf = token_in(&page).unwrap();
    let mut form = vec![
        ("csrf", csrf.as_str()),
        ("reason", "the provider outage is over"),
        ("back", list),
    ];
    for p in &picks {
        form.push(("job", p.as_str()));
    }
    let response = olga.post("/jobs/rerun", &form).await;
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
    olga.post("/jobs/rerun", &form).await;
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
