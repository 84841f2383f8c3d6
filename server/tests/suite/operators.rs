//! Operators: who may sign in, with which role and tenants; their sessions and throttling
//! records; and the `fenceline operator` commands, which never take a password as an argument.

use std::process::Stdio;
use std::time::Duration;

use fenceline::ledger::FailureScope;
use fenceline::operators::{hash_password, verify_password, Role};
use tokio::io::AsyncWriteExt;

use crate::helpers::{fresh_ledger, Db};

crate::on_both_backends!(
    operators_are_added_once_scoped_to_tenants_and_managed,
    sessions_expire_and_are_deleted,
    sign_in_failures_are_counted_per_key_within_a_window,
);

async fn operators_are_added_once_scoped_to_tenants_and_managed(db: Db) {
    let (ledger, _db) = fresh_ledger(db).await;
    let hash = hash_password("a long enough password").unwrap();
    let acme = ["acme".to_owned()];
    let ana = ledger
        .add_operator("ana", Role::Operator, Some(&acme), &hash)
        .await
        .unwrap();
    assert_eq!(ana.role, Role::Operator);
    assert!(ana.covers("acme") && !ana.covers("globex"));
    let again = ledger
        .add_operator("ana", Role::Admin, None, &hash)
        .await
        .unwrap_err();
    assert!(again.to_string().contains("already"), "{again}");
    assert!(ledger
        .add_operator("ana lopez", Role::Viewer, None, &hash)
        .await
        .is_err());

    let credentials = ledger.credentials("ana").await.unwrap().unwrap();
    assert!(verify_password(
        "a long enough password",
        &credentials.password_hash
    ));
    assert!(ledger.credentials("bob").await.unwrap().is_none());

    let admin = ledger
        .set_operator_role("ana", Role::Admin, Some(None))
        .await
        .unwrap();
    assert_eq!((admin.role, admin.tenants.clone()), (Role::Admin, None));
    let kept = ledger
        .set_operator_role("ana", Role::Viewer, None)
        .await
        .unwrap();
    assert_eq!((kept.role, kept.tenants), (Role::Viewer, None));

    assert_eq!(ledger.active_operator_count().await.unwrap(), 1);
    let disabled = ledger.set_operator_disabled("ana", true).await.unwrap();
    assert!(disabled.is_disabled());
    assert_eq!(ledger.active_operator_count().await.unwrap(), 0);
    assert!(!ledger
        .set_operator_disabled("ana", false)
        .await
        .unwrap()
        .is_disabled());

    tokio::time::sleep(Duration::from_millis(5)).await;
    let new_hash = hash_password("another long password").unwrap();
    ledger
        .set_operator_password("ana", &new_hash)
        .await
        .unwrap();
    let after = ledger.credentials("ana").await.unwrap().unwrap();
    assert!(after.password_set_at > credentials.password_set_at);
    assert!(!verify_password(
        "a long enough password",
        &after.password_hash
    ));
    assert!(ledger
        .set_operator_password("bob", &new_hash)
        .await
        .is_err());
    assert_eq!(ledger.list_operators().await.unwrap().len(), 1);
}

async fn sessions_expire_and_are_deleted(db: Db) {
    let (ledger, _db) = fresh_ledger(db).await;
    let now = ledger.now_us().await.unwrap();
    assert!(ledger
        .create_session("s1", r#"{"operator":"ana"}"#, now + 60_000_000)
        .await
        .unwrap());
    assert!(
        !ledger.create_session("s1", "{}", now + 1).await.unwrap(),
        "an id is never reused"
    );
    let (data, _) = ledger.session("s1").await.unwrap().unwrap();
    assert_eq!(data, r#"{"operator":"ana"}"#);
    ledger
        .save_session("s1", r#"{"operator":"ana","n":2}"#, now + 60_000_000)
        .await
        .unwrap();
    assert!(ledger
        .session("s1")
        .await
        .unwrap()
        .unwrap()
        .0
        .contains("\"n\":2"));

    ledger.save_session("old", "{}", now - 1).await.unwrap();
    assert!(ledger.session("old").await.unwrap().is_none(), "expired");
    assert_eq!(ledger.prune_sessions().await.unwrap(), 1);

    ledger.delete_session("s1").await.unwrap();
    assert!(ledger.session("s1").await.unwrap().is_none());
}

async fn sign_in_failures_are_counted_per_key_within_a_window(db: Db) {
    let (ledger, _db) = fresh_ledger(db).await;
    for _ in 0..3 {
        ledger
            .record_sign_in_failure(FailureScope::Account, "ana")
            .await
            .unwrap();
    }
    ledger
        .record_sign_in_failure(FailureScope::Address, "ana")
        .await
        .unwrap();
    let minute = 60_000_000;
    let count = |scope, key: &'static str, window| {
        let ledger = ledger.clone();
        async move {
            ledger
                .recent_sign_in_failures(scope, key, window)
                .await
                .unwrap()
        }
    };
    assert_eq!(count(FailureScope::Account, "ana", minute).await, 3);
    assert_eq!(count(FailureScope::Address, "ana", minute).await, 1);
    assert_eq!(count(FailureScope::Account, "bob", minute).await, 0);
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(
        count(FailureScope::Account, "ana", 10_000).await,
        0,
        "outside the window"
    );
}

async fn fenceline(args: &[&str], stdin: Option<&str>) -> std::process::Output {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_fenceline"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run fenceline");
    let mut input = child.stdin.take().unwrap();
    if let Some(text) = stdin {
        input.write_all(text.as_bytes()).await.unwrap();
    }
    drop(input);
    child.wait_with_output().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_commands_take_passwords_only_from_stdin_or_a_prompt() {
    let db = crate::helpers::fresh_db(Db::Sqlite).await;
    let url = db.url.as_str();
    let secret = "correct horse battery staple";
    let added = fenceline(
        &[
            "operator",
            "add",
            "ana",
            "--role",
            "operator",
            "--tenant",
            "acme",
            "--password-stdin",
            "--database-url",
            url,
        ],
        Some(&format!("{secret}\n")),
    )
    .await;
    assert!(added.status.success(), "{added:?}");
    assert!(String::from_utf8_lossy(&added.stdout).contains("added ana (operator)"));

    let listed = fenceline(&["operator", "list", "--database-url", url], None).await;
    let text = String::from_utf8_lossy(&listed.stdout).into_owned();
    let row = text
        .lines()
        .find(|l| l.starts_with("ana"))
        .expect("ana listed");
    assert!(row.contains("operator") && row.contains("acme"), "{row}");
    assert!(!text.contains(secret) && !text.contains("argon2"), "{text}");

    // No flag takes a password; short passwords and unknown roles are refused with a message.
    let flag = fenceline(
        &[
            "operator",
            "add",
            "bob",
            "--role",
            "viewer",
            "--password",
            secret,
            "--database-url",
            url,
        ],
        None,
    )
    .await;
    assert!(!flag.status.success());
    let short = fenceline(
        &[
            "operator",
            "add",
            "bob",
            "--role",
            "viewer",
            "--password-stdin",
            "--database-url",
            url,
        ],
        Some("short\n"),
    )
    .await;
    assert!(!short.status.success());
    assert!(String::from_utf8_lossy(&short.stderr).contains("at least 12 characters"));
    let role = fenceline(
        &[
            "operator",
            "add",
            "bob",
            "--role",
            "root",
            "--password-stdin",
            "--database-url",
            url,
        ],
        Some(&format!("{secret}\n")),
    )
    .await;
    assert!(
        String::from_utf8_lossy(&role.stderr).contains("not a role"),
        "{role:?}"
    );

    let disabled = fenceline(&["operator", "disable", "ana", "--database-url", url], None).await;
    assert!(disabled.status.success(), "{disabled:?}");
    let reset = fenceline(
        &[
            "operator",
            "reset",
            "ana",
            "--password-stdin",
            "--database-url",
            url,
        ],
        Some("a different long password\n"),
    )
    .await;
    assert!(reset.status.success(), "{reset:?}");
    let ledger = fenceline::ledger::Ledger::connect(url, &Default::default())
        .await
        .unwrap();
    let credentials = ledger.credentials("ana").await.unwrap().unwrap();
    assert!(credentials.operator.is_disabled());
    assert!(verify_password(
        "a different long password",
        &credentials.password_hash
    ));
    assert!(!verify_password(secret, &credentials.password_hash));
}
