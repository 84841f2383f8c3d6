//! What each attempt spent: the usage its answer reported and its cost at the deployment's
//! prices, kept on the attempt (an accepted answer and a fenced owner's late one alike), the
//! job's duplicate spend, and the most an attempt of unknown outcome may have cost, as the job
//! page, its decision panel, the exports and the API show them.

use std::time::Duration;

use fenceline::job::Actor;
use fenceline::ledger::{Answered, Decision, JobSpend, Spend};
use fenceline::operators::Role;
use fenceline::provider::prices::{Prices, Usage, STUB_PRICE};
use serde_json::{json, Value};

use crate::helpers::{as_owner, create, new_job, Db};

fn answered(body: &str, input: u64, output: u64) -> Answered {
    let usage = Usage {
        input,
        output,
        ..Usage::default()
    };
    let prices = Prices::parse(&[STUB_PRICE]).unwrap();
    Answered {
        body: body.to_owned(),
        spend: Some(Spend {
            model: "stub".into(),
            cost: prices.cost("stub", &usage),
            usage,
        }),
        request_id: Some(format!("req-{}", body.len() + input as usize)),
    }
}

async fn spend_is_kept_shown_and_exported(db: Db) {
    let app = crate::helpers::spawn_app_configured(db, |s| {
        s.http.metrics_token = Some(fenceline::settings::Secret::new("metrics-token"));
    })
    .await;
    let ledger = &app.ledger;
    let system = Actor::System;

    // A: worker w1's call outlives its lease; the job goes unknown, an operator authorizes a
    // retry, w2's answer is accepted, and then w1's late answer comes: rejected, kept as
    // evidence, and what it cost is duplicate spend.
    let a = create(ledger, new_job("acme", "dup", json!("abcd"))).await;
    ledger
        .claim_and_start(&a, "w1", Duration::from_millis(1), None, "stub")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    ledger
        .recovery_claim(&a, &system, "lease_expired", false)
        .await
        .unwrap();
    ledger
        .decide(
            &a,
            2,
            &Decision::AuthorizeRetry,
            &Actor::Operator("olga".into()),
            "retry",
        )
        .await
        .unwrap();
    let (claimed, attempt) = ledger
        .claim_and_start(&a, "w2", Duration::from_secs(60), None, "stub")
        .await
        .unwrap();
    ledger
        .accept_result(
            &claimed.owner,
            attempt.attempt_no,
            answered("{\"n\":2}", 1_000, 500),
        )
        .await
        .unwrap();
    let late = ledger
        .accept_result(
            &as_owner(&a, 1, "w1"),
            1,
            answered("{\"n\":1}", 2_000, 1_000),
        )
        .await;
    assert!(late.is_err(), "a fenced owner's answer is refused");
    let job = ledger.job(&a).await.unwrap().unwrap();
    let attempts = ledger.attempts(&a).await.unwrap();
    // 1,000 × $0.15 + 500 × $0.60 per million = $0.00045; the late one twice that.
    assert_eq!(attempts[1].cost_nusd, Some(450_000));
    assert_eq!(
        attempts[0].cost_nusd,
        Some(900_000),
        "the stale answer's cost is kept"
    );
    assert_eq!(attempts[0].spend().unwrap().usage.input, 2_000);
    // The provider's own request ids, kept with each answer, accepted or stale.
    assert_eq!(
        (
            attempts[0].provider_request_id.as_deref(),
            attempts[1].provider_request_id.as_deref()
        ),
        (Some("req-2007"), Some("req-1007"))
    );
    let spend = JobSpend::of(&job, &attempts, None);
    assert_eq!(
        (
            spend.tokens,
            spend.spent,
            spend.duplicate,
            spend.duplicate_attempts
        ),
        (4_500, 1_350_000, 900_000, 1)
    );

    // B: its only attempt is lost with no answer: at risk, at most its input's bytes and its
    // max_tokens at the stub's price.
    let mut new = new_job("acme", "risk", json!("abcd"));
    new.model = json!({ "max_tokens": 100 });
    let b = create(ledger, new).await;
    ledger
        .claim_and_start(&b, "w1", Duration::from_millis(1), None, "stub")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    ledger
        .recovery_claim(&b, &system, "lease_expired", false)
        .await
        .unwrap();

    let mut browser = app.signed_in(Role::Operator).await;
    let page = browser.page(&format!("/jobs/{a}")).await;
    assert!(page.contains("4,500 tokens, $0.0014"), "{page}");
    assert!(
        page.contains("Duplicate spend: $0.00090 on 1 answer not accepted"),
        "{page}"
    );
    assert!(
        page.contains("1,000 in · 500 out"),
        "the attempts show their tokens: {page}"
    );
    assert!(page.contains("$0.00045"), "and their cost");
    // "abcd" is 6 bytes as stored JSON: 6 × $0.15 + 100 × $0.60 per million.
    let page = browser.page(&format!("/jobs/{b}")).await;
    assert!(
        page.contains("At risk: at most $0.000061 on 1 attempt whose outcome is unknown"),
        "{page}"
    );
    assert!(
        page.contains("A retry calls the model again. What the lost attempt may already have cost: at most $0.000061"),
        "the decision panel says what a retry may spend again: {page}"
    );

    let overview = browser.page("/").await;
    assert!(
        overview.contains(
            "Answers in the last hour cost $0.0014 (2 answers, drills left out); $0.00090 of it \
             on 1 answer not accepted (duplicate spend)."
        ),
        "{overview}"
    );
    assert!(
        overview.contains("Model spend, in millionths of a dollar"),
        "{overview}"
    );

    let unknown = browser.page("/unknown").await;
    assert!(
        unknown.contains("≤\u{a0}$0.000061"),
        "each job says what it may have cost: {unknown}"
    );
    assert!(
        unknown.contains(
            "What the lost attempts on this page may already have cost: at most $0.000061 on 1 \
             attempt."
        ),
        "{unknown}"
    );

    let export: Value = browser
        .get(&format!("/jobs/{a}/export.json"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(export["spend"]["duplicate_nanousd"], 900_000);
    assert_eq!(export["spend"]["spent_nanousd"], 1_350_000);
    assert_eq!(export["attempts"][1]["usage"]["output_tokens"], 500);
    let export: Value = browser
        .get(&format!("/jobs/{b}/export.json"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(export["spend"]["at_risk_nanousd"], 60_900);
    let markdown = browser.page(&format!("/jobs/{a}/export.md")).await;
    assert!(
        markdown.contains("duplicate $0.00090 (1 answers not accepted)"),
        "{markdown}"
    );

    // The last hour by model and fate, for alerts.
    let metrics = app
        .get(Some("metrics-token"), "/metrics")
        .await
        .text()
        .await
        .unwrap();
    for line in [
        "fenceline_model_tokens_last_hour{model=\"stub\",fate=\"accepted\"} 1500",
        "fenceline_model_tokens_last_hour{model=\"stub\",fate=\"duplicate\"} 3000",
        "fenceline_model_spend_last_hour_usd{model=\"stub\",fate=\"duplicate\"} 0.0009",
    ] {
        assert!(metrics.contains(line), "{line} in {metrics}");
    }

    let token = app.token("acme").await;
    let view: Value = app
        .get(Some(&token), &format!("/api/v1/jobs/{a}"))
        .await
        .json()
        .await
        .unwrap();
    let attempts = view["attempts"].as_array().unwrap();
    assert_eq!(attempts[1]["usage"]["input_tokens"], 1_000);
    assert_eq!(attempts[1]["cost_nanousd"], 450_000);
}

#[tokio::test]
async fn spend_is_kept_shown_and_exported_on_sqlite() {
    spend_is_kept_shown_and_exported(Db::Sqlite).await;
}

#[tokio::test]
async fn spend_is_kept_shown_and_exported_on_postgres() {
    if crate::helpers::skip_postgres() {
        return;
    }
    spend_is_kept_shown_and_exported(Db::Postgres).await;
}
