//! Signing in and out: where a visitor is sent, sessions, the password throttle, proxies, the form
//! token, and the first administrator.

use super::*;

on_both_backends!(
    a_signed_out_visitor_is_sent_to_sign_in_and_back_to_the_same_address,
    every_redirect_stays_on_this_site_whatever_next_holds,
    signing_in_starts_a_new_session_and_signing_out_ends_it,
    a_thousand_visits_to_the_sign_in_page_store_no_session,
    the_sixth_wrong_password_in_a_minute_is_throttled,
    sixty_guesses_at_once_on_one_form_get_five_checked,
    behind_a_trusted_proxy_each_forwarded_client_has_its_own_address_limit,
    an_untrusted_peers_forwarded_for_is_ignored,
    forms_without_the_sessions_token_or_from_another_site_are_refused,
);

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
        "/alerts".to_owned(),
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
