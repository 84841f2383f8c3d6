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

mod automation;
mod by_filter;
mod cancel;
mod dead_letters;
mod decisions;
mod incidents;
mod oidc;
mod operators;
mod pages;
mod rerun;
mod scopes;
mod sign_in;

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
