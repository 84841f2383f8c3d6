//! Alerts against a local webhook receiver: one notification when an episode opens, one when
//! it clears, none repeated by another round or a restart, none within the cooldown, and a
//! refused notification tried again until taken.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::StatusCode;
use axum::routing::post;
use fenceline::alerts::{AlertSettings, Alerts, DeadLetters};
use fenceline::console::{LedgerConsole, QueueInfo};
use fenceline::job::Actor;
use fenceline::ledger::{Decision, Ledger};
use fenceline::settings::Secret;
use fenceline_app::console::Console;
use serde_json::{json, Value};

use crate::helpers::{create, fresh_ledger, new_job, Db};

/// A webhook receiver: what it took, and how many requests it refuses first.
struct Receiver {
    url: String,
    taken: Arc<Mutex<Vec<Value>>>,
    refuse: Arc<AtomicUsize>,
}

async fn receiver() -> Receiver {
    let taken = Arc::new(Mutex::new(Vec::new()));
    let refuse = Arc::new(AtomicUsize::new(0));
    let (kept, refusing) = (Arc::clone(&taken), Arc::clone(&refuse));
    let app = axum::Router::new().route(
        "/hooks/T000/B000",
        post(move |body: axum::Json<Value>| {
            let (kept, refusing) = (Arc::clone(&kept), Arc::clone(&refusing));
            async move {
                if refusing
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok()
                {
                    return StatusCode::INTERNAL_SERVER_ERROR;
                }
                kept.lock().unwrap().push(body.0);
                StatusCode::OK
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hooks/T000/B000", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Receiver { url, taken, refuse }
}

impl Receiver {
    fn taken(&self) -> Vec<Value> {
        self.taken.lock().unwrap().clone()
    }
}

fn settings(webhook: &str) -> AlertSettings {
    AlertSettings {
        webhook: Some(Secret::new(webhook)),
        unknown_after: Duration::ZERO,
        ready_after: Duration::from_secs(3600),
        ..AlertSettings::default()
    }
}

fn alerts(ledger: &Ledger, settings: &AlertSettings) -> Alerts {
    Alerts::new(
        ledger.clone(),
        settings.clone(),
        "https://fl.example".into(),
        DeadLetters::Embedded("jobs-dlq".into()),
    )
}

/// A job whose attempt's outcome is unknown: claimed, its lease let lapse, recovered.
async fn unknown_job(ledger: &Ledger, key: &str) -> (String, i64) {
    let job_id = create(ledger, new_job("acme", key, json!(1))).await;
    ledger
        .claim_and_start(&job_id, "w", Duration::from_millis(100), None, "stub")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let recovered = ledger
        .recovery_claim(&job_id, &Actor::System, "lease_expired", true)
        .await
        .unwrap();
    (job_id, recovered.epoch)
}

async fn a_job_left_unknown_notifies_once_and_once_more_when_decided(db: Db) {
    let hook = receiver().await;
    let (ledger, _db) = fresh_ledger(db).await;
    let settings = settings(&hook.url);
    let (job_id, epoch) = unknown_job(&ledger, "k1").await;

    let first = alerts(&ledger, &settings);
    let changes = first.round().await.unwrap();
    assert_eq!(changes.len(), 1, "{changes:?}");
    let taken = hook.taken();
    assert_eq!(taken.len(), 1, "{taken:?}");
    assert_eq!(taken[0]["status"], "firing");
    assert_eq!(taken[0]["alert"], "unknown_waiting");
    assert_eq!(taken[0]["link"], "https://fl.example/unknown");
    let text = taken[0]["text"].as_str().unwrap();
    assert!(
        text.starts_with("[FIRING] Jobs wait in unknown: 1 job has waited")
            && text.contains(&job_id),
        "a Slack-compatible line: {text}"
    );

    // Still firing: another round, and a restarted process, send nothing more.
    first.round().await.unwrap();
    alerts(&ledger, &settings).round().await.unwrap();
    assert_eq!(hook.taken().len(), 1);

    // Decided: one "cleared", once.
    ledger
        .decide(
            &job_id,
            epoch,
            &Decision::AuthorizeRetry,
            &Actor::Operator("ana".into()),
            "retry",
        )
        .await
        .unwrap();
    first.round().await.unwrap();
    first.round().await.unwrap();
    let taken = hook.taken();
    assert_eq!(taken.len(), 2, "{taken:?}");
    assert_eq!(taken[1]["status"], "cleared");
    assert_eq!(taken[1]["episode"], taken[0]["episode"]);

    // Firing again within the cooldown: listed, not notified.
    let (again, _) = unknown_job(&ledger, "k2").await;
    let changes = first.round().await.unwrap();
    assert_eq!(changes.len(), 1);
    assert!(!changes[0].notify, "within the cooldown");
    assert_eq!(hook.taken().len(), 2, "nothing sent within the cooldown");

    // The page lists both episodes, the open one first, with what each notified.
    let console = LedgerConsole::new(
        ledger.clone(),
        QueueInfo {
            alerts: settings.clone(),
            ..QueueInfo::default()
        },
    );
    let page = console.alerts().await.unwrap();
    assert!(page.webhook && !page.restricted);
    assert_eq!(page.open.len(), 1);
    assert!(page.open[0].summary.contains(&again), "{:?}", page.open[0]);
    assert_eq!(page.open[0].path, "/unknown");
    assert_eq!(page.open[0].notified, ["within the cooldown: not notified"]);
    assert_eq!(page.closed.len(), 1);
    assert_eq!(page.closed[0].notified.len(), 2, "{:?}", page.closed[0]);
    assert!(page.closed[0].notified[0].starts_with("firing sent"));
    assert!(page.closed[0].notified[1].starts_with("cleared sent"));
    // An operator of some tenants only sees none of it.
    let scoped = LedgerConsole::new(ledger.clone(), QueueInfo::default())
        .for_tenants(Some(vec!["acme".into()]));
    let page = scoped.alerts().await.unwrap();
    assert!(page.restricted && page.open.is_empty() && page.closed.is_empty());

    // Still firing once the cooldown has passed: no flap, so it notifies after all.
    let later = AlertSettings {
        cooldown: Duration::ZERO,
        ..settings.clone()
    };
    alerts(&ledger, &later).round().await.unwrap();
    let taken = hook.taken();
    assert_eq!(taken.len(), 3, "{taken:?}");
    assert_eq!(taken[2]["status"], "firing");
    assert_ne!(taken[2]["episode"], taken[0]["episode"]);
    alerts(&ledger, &later).round().await.unwrap();
    assert_eq!(hook.taken().len(), 3, "once");
}

crate::on_both_backends!(a_job_left_unknown_notifies_once_and_once_more_when_decided);

/// A notification the receiver refuses stays in the ledger and is sent again after its
/// backoff; the page says why it waits; the alert's "cleared" waits for its "firing".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_notification_is_sent_again_after_its_backoff() {
    let hook = receiver().await;
    hook.refuse.store(1, Ordering::SeqCst);
    let (ledger, _db) = fresh_ledger(Db::Sqlite).await;
    let settings = settings(&hook.url);
    let (job_id, epoch) = unknown_job(&ledger, "k1").await;
    let alerts = alerts(&ledger, &settings);
    alerts.round().await.unwrap();
    assert!(hook.taken().is_empty(), "refused once");
    let episodes = ledger.alert_episodes(10).await.unwrap();
    let n = &episodes[0].notifications[0];
    assert_eq!((n.tries, n.sent_at), (1, None));
    assert_eq!(n.last_error.as_deref(), Some("HTTP 500"));
    // Not before its backoff (10 s); and the episode's "cleared", due at once, waits for it.
    ledger
        .decide(
            &job_id,
            epoch,
            &Decision::AuthorizeRetry,
            &Actor::Operator("ana".into()),
            "no trace",
        )
        .await
        .unwrap();
    alerts.round().await.unwrap();
    alerts.send_due().await.unwrap();
    assert!(hook.taken().is_empty(), "{:?}", hook.taken());
    tokio::time::sleep(Duration::from_secs(11)).await;
    alerts.send_due().await.unwrap();
    alerts.send_due().await.unwrap();
    let taken = hook.taken();
    let statuses: Vec<&str> = taken
        .iter()
        .map(|t| t["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["firing", "cleared"]);
    let episodes = ledger.alert_episodes(10).await.unwrap();
    assert!(episodes[0]
        .notifications
        .iter()
        .all(|n| n.sent_at.is_some()));
}

/// Retention prunes alerts that cleared before its cutoff and actions by filter that finished
/// or were never confirmed; an open alert stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_prunes_cleared_alerts_and_finished_bulk_actions() {
    use fenceline::ledger::AlertFiring;
    let (ledger, _db) = fresh_ledger(Db::Sqlite).await;
    let firing = |subject: &str| AlertFiring {
        rule: "dead_letters".into(),
        subject: subject.into(),
        summary: "s".into(),
        link: "l".into(),
    };
    let judged = ["dead_letters"];
    let sync = |f: Vec<AlertFiring>| {
        let ledger = ledger.clone();
        async move {
            ledger
                .sync_alerts(&judged, &f, Duration::ZERO, false, |_| String::new())
                .await
                .unwrap()
        }
    };
    sync(vec![firing("a"), firing("b")]).await;
    sync(vec![firing("b")]).await;
    ledger
        .preview_bulk("cancel", "state=running", "operator:ana", None, &[])
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    ledger.prune(Duration::ZERO).await.unwrap();
    let left = ledger.alert_episodes(10).await.unwrap();
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(left[0].subject, "b");
    assert!(ledger.bulk_actions(10).await.unwrap().is_empty());
}
