//! Planted secrets — a prompt, the answer, an API token, receipt handles — never appear in
//! logs, events, API timelines, console pages, exports or metrics.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::process::Command;

use crate::helpers::{fresh_db, Db};

/// An embedded-queue receipt handle: `<row id>.<32 hex>`.
fn looks_like_a_receipt_handle(text: &str) -> bool {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '.'))
        .any(|word| {
            word.split_once('.').is_some_and(|(id, secret)| {
                !id.is_empty()
                    && id.bytes().all(|b| b.is_ascii_digit())
                    && secret.len() == 32
                    && secret.bytes().all(|b| b.is_ascii_hexdigit())
            })
        })
}

#[test]
fn the_handle_detector_knows_a_handle_when_it_sees_one() {
    assert!(looks_like_a_receipt_handle(
        "x 12.0123456789abcdef0123456789abcdef y"
    ));
    assert!(!looks_like_a_receipt_handle("job_01a2 r1 #d689c1a9 1.5s"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planted_secrets_stay_out_of_logs_events_pages_and_exports() {
    let db = fresh_db(Db::Sqlite).await;
    let bin = env!("CARGO_BIN_EXE_fenceline");
    let token = crate::helpers::cli_token(&db.url, "acme").await;
    assert!(token.starts_with("fl_"));
    // An operator whose password and session cookie are planted too.
    let password = "PLANTED-PASSWORD-5c1e operator secret";
    let mut add = Command::new(bin)
        .args([
            "operator",
            "add",
            "ana",
            "--role",
            "operator",
            "--password-stdin",
        ])
        .args(["--database-url", &db.url])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("fenceline operator add");
    {
        use tokio::io::AsyncWriteExt;
        let mut stdin = add.stdin.take().unwrap();
        stdin
            .write_all(format!("{password}\n").as_bytes())
            .await
            .unwrap();
    }
    assert!(add.wait().await.unwrap().success());
    let metrics_token = "PLANTED-METRICS-TOKEN-0b7d";
    let port = crate::helpers::free_port();
    let log = std::env::temp_dir().join(format!("fenceline-secrets-{port}.log"));
    let log_file = std::fs::File::create(&log).unwrap();
    let mut server = Command::new(bin)
        .args([
            "serve",
            "--database-url",
            &db.url,
            "--bind",
            &format!("127.0.0.1:{port}"),
        ])
        .args(["--timings", "compressed", "--stub-latency-ms", "1500"])
        .env("FENCELINE_LOG", "trace")
        .env("FENCELINE_METRICS_TOKEN", metrics_token)
        .stdout(log_file.try_clone().unwrap())
        .stderr(log_file)
        .kill_on_drop(true)
        .spawn()
        .expect("start fenceline serve");
    let base = format!("http://127.0.0.1:{port}");
    crate::helpers::wait_ready(&base).await;
    let client = reqwest::Client::new();

    let prompt = "PLANTED-PROMPT-7f3a: the quarterly numbers are confidential";
    let created: Value = client
        .post(format!("{base}/api/v1/jobs"))
        .bearer_auth(&token)
        .json(&json!({ "idempotency_key": "secret", "input": { "document": prompt } }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let job_id = created["job_id"].as_str().unwrap().to_owned();
    let until = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let job: Value = client
            .get(format!("{base}/api/v1/jobs/{job_id}"))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if job["state"] == "succeeded" {
            break;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "never succeeded: {job}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let result: Value = client
        .get(format!("{base}/api/v1/jobs/{job_id}/result"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let answer = result["result"]["summary"].as_str().unwrap().to_owned();
    assert!(answer.starts_with("stub answer"), "{answer}");

    let mut browser = crate::helpers::Browser::new(&base);
    let signed = browser.sign_in("ana", password).await;
    assert_eq!(crate::helpers::location(&signed), "/");
    let cookie = browser.cookie.clone().unwrap();
    let session_id = cookie.split_once('=').unwrap().1.to_owned();
    assert!(session_id.len() >= 16, "{cookie}");
    let mut seen = Vec::new();
    for path in [
        "/".to_owned(),
        "/jobs".to_owned(),
        format!("/jobs/{job_id}"),
        format!("/jobs/{job_id}/export.md"),
        format!("/jobs/{job_id}/export.json"),
        "/unknown".to_owned(),
        "/dlq".to_owned(),
        "/audit".to_owned(),
        "/alerts".to_owned(),
    ] {
        let response = browser.get(&path).await;
        assert_eq!(response.status(), 200, "{path}");
        seen.push((path, response.text().await.unwrap()));
    }
    let unauthorized = client.get(format!("{base}/metrics")).send().await.unwrap();
    assert_eq!(unauthorized.status(), 401, "metrics need their token");
    let metrics = client
        .get(format!("{base}/metrics"))
        .bearer_auth(metrics_token)
        .send()
        .await
        .unwrap();
    assert_eq!(metrics.status(), 200);
    seen.push(("/metrics".to_owned(), metrics.text().await.unwrap()));
    let metrics = &seen.iter().find(|(p, _)| p == "/metrics").unwrap().1;
    assert!(
        metrics.contains("fenceline_jobs{state=\"succeeded\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("fenceline_ledger_up 1"));
    let succeeded = metrics
        .lines()
        .find(|l| l.starts_with("fenceline_deliveries_total{outcome=\"succeeded\"}"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<u64>().ok());
    assert_eq!(succeeded, Some(1), "the worker counted its delivery");
    let sent = metrics
        .lines()
        .find(|l| l.starts_with("fenceline_dispatched_total{result=\"sent\"}"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<u64>().ok());
    assert_eq!(
        sent,
        Some(1),
        "the job's send, made as it was created, is counted"
    );
    assert!(!metrics.contains(&job_id), "no job ids in metrics labels");
    let events = client
        .get(format!("{base}/api/v1/jobs/{job_id}/events?limit=1000"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        events.contains("visibility_renewed"),
        "the job renewed while it ran"
    );
    seen.push(("events API".to_owned(), events));
    server.kill().await.unwrap();
    let logs = std::fs::read_to_string(&log).unwrap();
    let _ = std::fs::remove_file(&log);
    assert!(
        logs.contains("fenceline is serving"),
        "the logs were captured"
    );
    seen.push(("logs".to_owned(), logs));

    for (place, text) in &seen {
        assert!(
            !text.contains("PLANTED-PROMPT"),
            "the prompt leaked into {place}"
        );
        assert!(!text.contains(&token), "the API token leaked into {place}");
        assert!(
            !looks_like_a_receipt_handle(text),
            "a receipt handle leaked into {place}"
        );
        assert!(!text.contains(&answer), "the answer leaked into {place}");
        assert!(
            !text.contains("PLANTED-PASSWORD"),
            "the operator's password leaked into {place}"
        );
        assert!(
            !text.contains(&session_id),
            "the session cookie leaked into {place}"
        );
        assert!(
            !text.contains(metrics_token),
            "the metrics token leaked into {place}"
        );
    }
}
