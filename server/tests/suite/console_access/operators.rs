//! `/operators`: an admin of every tenant adds operators, changes their role and tenants,
//! resets their password, disables and enables them and revokes API tokens from the console,
//! each with a reason and an audit entry naming what it acted on; nobody else may.

use super::*;

async fn flash_of(browser: &mut Browser) -> String {
    browser.page("/operators").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_manages_operators_and_tokens_from_the_console_each_change_audited() {
    let app = spawn_app(Db::Sqlite).await;
    let mut admin = signed_in(&app, "root", Role::Admin, None).await;
    let page = admin.page("/operators").await;
    assert!(page.contains("href=\"/operators\""), "the menu leads here");
    assert!(page.contains("root") && page.contains("(you)"));
    let csrf = admin.token("/operators").await;

    // Add: a viewer of acme, who signs in with the password given.
    let added = admin
        .post(
            "/operators",
            &[
                ("csrf", &csrf),
                ("name", "ana"),
                ("role", "viewer"),
                ("tenants", "acme"),
                ("password", PASSWORD),
                ("reason", "joins the acme on-call"),
            ],
        )
        .await;
    assert_eq!(location(&added), "/operators");
    assert!(flash_of(&mut admin).await.contains("Added ana (viewer)."));
    let ana = app.ledger.operator("ana").await.unwrap().unwrap();
    assert_eq!(
        (ana.role, ana.tenants),
        (Role::Viewer, Some(vec!["acme".into()]))
    );
    let mut ana_browser = Browser::new(&app.base);
    assert_eq!(location(&ana_browser.sign_in("ana", PASSWORD).await), "/");

    // Nobody but an admin of every tenant: not ana, and not for the page either.
    let ana_csrf = ana_browser.token("/").await;
    let refused = ana_browser
        .post(
            "/operators/root/disable",
            &[("csrf", &ana_csrf), ("reason", "mutiny")],
        )
        .await;
    assert_eq!(refused.status(), 403);
    assert_eq!(ana_browser.get("/operators").await.status(), 403);
    assert!(!ana_browser.page("/").await.contains("href=\"/operators\""));

    // Role and tenants; a bad role changes nothing.
    let changed = admin
        .post(
            "/operators/ana/role",
            &[
                ("csrf", &csrf),
                ("role", "operator"),
                ("tenants", "acme, globex"),
                ("reason", "covers globex too"),
            ],
        )
        .await;
    assert_eq!(location(&changed), "/operators");
    let ana = app.ledger.operator("ana").await.unwrap().unwrap();
    assert_eq!(ana.role, Role::Operator);
    assert_eq!(ana.tenants, Some(vec!["acme".into(), "globex".into()]));
    admin
        .post(
            "/operators/ana/role",
            &[
                ("csrf", &csrf),
                ("role", "owner"),
                ("tenants", ""),
                ("reason", "typo"),
            ],
        )
        .await;
    assert!(flash_of(&mut admin).await.contains("is not a role"));
    assert_eq!(
        app.ledger.operator("ana").await.unwrap().unwrap().role,
        Role::Operator
    );

    // Reset: the old password no longer signs in, the new one does; ana's session ended.
    let new_password = "a fresh password, long";
    admin
        .post(
            "/operators/ana/password",
            &[
                ("csrf", &csrf),
                ("password", new_password),
                ("reason", "lost it"),
            ],
        )
        .await;
    assert_eq!(ana_browser.get("/jobs").await.status(), 303, "signed out");
    assert_ne!(
        location(&Browser::new(&app.base).sign_in("ana", PASSWORD).await),
        "/"
    );
    assert_eq!(
        location(&Browser::new(&app.base).sign_in("ana", new_password).await),
        "/"
    );

    // Disable, then enable again.
    admin
        .post(
            "/operators/ana/disable",
            &[("csrf", &csrf), ("reason", "left the team")],
        )
        .await;
    assert!(app
        .ledger
        .operator("ana")
        .await
        .unwrap()
        .unwrap()
        .is_disabled());
    assert_ne!(
        location(&Browser::new(&app.base).sign_in("ana", new_password).await),
        "/"
    );
    admin
        .post(
            "/operators/ana/enable",
            &[("csrf", &csrf), ("reason", "came back")],
        )
        .await;
    assert!(!app
        .ledger
        .operator("ana")
        .await
        .unwrap()
        .unwrap()
        .is_disabled());

    // An admin never changes their own account here, and every change needs a reason.
    admin
        .post(
            "/operators/root/disable",
            &[("csrf", &csrf), ("reason", "oops")],
        )
        .await;
    assert!(flash_of(&mut admin)
        .await
        .contains("another admin changes your own account"));
    assert!(!app
        .ledger
        .operator("root")
        .await
        .unwrap()
        .unwrap()
        .is_disabled());
    admin
        .post(
            "/operators/ana/disable",
            &[("csrf", &csrf), ("reason", " ")],
        )
        .await;
    assert!(!app
        .ledger
        .operator("ana")
        .await
        .unwrap()
        .unwrap()
        .is_disabled());

    // Tokens: listed by id, revoked one by one; a revoked token is refused by the API.
    let token = app.token("acme").await;
    let page = admin.page("/operators").await;
    let id = app.ledger.list_tokens().await.unwrap()[0].id.clone();
    assert!(page.contains(&id) && page.contains("tenant acme"));
    assert!(!page.contains(&token), "a token is never shown again");
    admin
        .post(
            &format!("/tokens/{id}/revoke"),
            &[("csrf", &csrf), ("reason", "leaked in a log")],
        )
        .await;
    assert_eq!(app.get(Some(&token), "/api/v1/jobs").await.status(), 401);

    // The audit log names each change, what it acted on and why.
    let audit = admin.page("/audit").await;
    for (action, subject, reason) in [
        ("operator added", "operator ana", "joins the acme on-call"),
        ("operator role changed", "operator ana", "covers globex too"),
        ("operator password reset", "operator ana", "lost it"),
        ("operator disabled", "operator ana", "left the team"),
        ("operator enabled", "operator ana", "came back"),
        ("token revoked", &format!("token {id}"), "leaked in a log"),
    ] {
        assert!(audit.contains(action), "{action}");
        assert!(audit.contains(subject), "{subject}");
        assert!(audit.contains(reason), "{reason}");
    }
    assert!(!audit.contains(new_password) && !audit.contains(PASSWORD));
    let entries = app
        .ledger
        .audit_entries(&fenceline::ledger::AuditFilter {
            action: Some("operator_disabled".into()),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].actor, "operator:root");
    assert_eq!(entries[0].subject.as_deref(), Some("operator ana"));
    assert_eq!(
        (
            entries[0].state_before.as_deref(),
            entries[0].state_after.as_deref()
        ),
        (Some("enabled"), Some("disabled"))
    );
    let roles = app
        .ledger
        .audit_entries(&fenceline::ledger::AuditFilter {
            action: Some("operator_role_changed".into()),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        (
            roles[0].state_before.as_deref(),
            roles[0].state_after.as_deref()
        ),
        (Some("viewer · acme"), Some("operator · acme, globex")),
        "what the role was and became"
    );
}
