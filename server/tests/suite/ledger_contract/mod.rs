//! The ledger contract, run against SQLite and PostgreSQL alike.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use fenceline::job::{Actor, JobState};
use fenceline::ledger::{
    AttemptOutcome, Created, Decision, Failure, JobFilter, LedgerError, Refusal, ReplayPolicy,
};
use serde_json::json;

use crate::helpers::{as_owner, assert_gap_free, create, fresh_ledger, kinds, new_job, Db};
use crate::on_both_backends;

const LONG: Duration = Duration::from_secs(60);

fn refusal(result: Result<impl std::fmt::Debug, LedgerError>) -> Refusal {
    match result {
        Err(LedgerError::Refused { refusal, .. }) => refusal,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

mod creation;
mod group_commit;
mod outcomes;
mod ownership;
mod plans;
mod reads;
mod retention;

/// `n` jobs claimed by worker `w`, each `(job_id, epoch)`; the lease of job `fenced` ran out
/// and a recovery fenced its owner out (epoch 2), the others hold long leases.
async fn claimed_with_one_fenced_out(
    ledger: &fenceline::ledger::Ledger,
    label: &str,
    n: usize,
    fenced: usize,
) -> Vec<(String, i64)> {
    let mut leases = Vec::new();
    for i in 0..n {
        let job_id = create(ledger, new_job("acme", &format!("{label}-{i}"), json!(i))).await;
        let lease = if i == fenced {
            Duration::from_millis(150)
        } else {
            LONG
        };
        let claimed = ledger.claim(&job_id, "w", lease).await.unwrap();
        leases.push((job_id, claimed.epoch));
    }
    tokio::time::sleep(Duration::from_millis(250)).await;
    ledger
        .recovery_claim(&leases[fenced].0, &Actor::System, "lease_expired", true)
        .await
        .unwrap();
    leases
}

/// How many rows each table of a job's own rows holds for each of `jobs`, in their order.
async fn rows_owned(raw: &sqlx::AnyPool, jobs: &[&String]) -> Vec<(&'static str, Vec<i64>)> {
    let mut out = Vec::new();
    for table in ["events", "attempts", "results", "job_inputs", "outbox"] {
        let mut counts = Vec::new();
        for job in jobs {
            let sql = format!("SELECT COUNT(*) FROM {table} WHERE job_id = $1");
            let n: i64 = sqlx::query_scalar(&sql)
                .bind(job.as_str())
                .fetch_one(raw)
                .await
                .unwrap();
            counts.push(n);
        }
        out.push((table, counts));
    }
    out
}

/// Runs a job to `succeeded` and returns its id.
async fn succeeded_job(ledger: &fenceline::ledger::Ledger, key: &str) -> String {
    let job_id = create(ledger, new_job("acme", key, json!(key))).await;
    let (claimed, attempt) = ledger
        .claim_and_start(&job_id, "w", LONG, None, "stub")
        .await
        .unwrap();
    ledger
        .accept_result(
            &as_owner(&job_id, claimed.epoch, "w"),
            attempt.attempt_no,
            "answer",
        )
        .await
        .unwrap();
    job_id
}

/// SQLite's plan of `sql`, a line of `EXPLAIN QUERY PLAN` each.
async fn sqlite_plan(raw: &sqlx::AnyPool, sql: &str) -> Vec<String> {
    use sqlx::Row;
    sqlx::query(&format!("EXPLAIN QUERY PLAN {sql}"))
        .fetch_all(raw)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .iter()
        .map(|row| row.get::<String, _>("detail"))
        .collect()
}

/// The plan PostgreSQL keeps for `sql` whatever its parameters (with the connection's
/// `plan_cache_mode = force_generic_plan`), each parameter given as `arg`.
async fn generic_plan(conn: &mut sqlx::AnyConnection, name: &str, sql: &str, arg: &str) -> String {
    let params = (1..=2000)
        .take_while(|n| sql.contains(&format!("${n}")))
        .count();
    pg_plan(conn, name, sql, &vec![arg; params]).await
}

/// PostgreSQL's plan of `sql` prepared and executed with `args` (SQL literals, in order), its
/// lines joined.
async fn pg_plan(conn: &mut sqlx::AnyConnection, name: &str, sql: &str, args: &[&str]) -> String {
    use sqlx::{Executor, Row};
    conn.execute(format!("PREPARE planned AS {sql}").as_str())
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let execute = if args.is_empty() {
        "EXPLAIN EXECUTE planned".to_owned()
    } else {
        format!("EXPLAIN EXECUTE planned({})", args.join(", "))
    };
    let plan: Vec<String> = sqlx::query(&execute)
        .fetch_all(&mut *conn)
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .iter()
        .map(|row| row.get::<String, _>(0))
        .collect();
    conn.execute("DEALLOCATE planned").await.unwrap();
    plan.join("\n")
}

async fn job_state(ledger: &fenceline::ledger::Ledger, job_id: &str) -> JobState {
    ledger.job(job_id).await.unwrap().unwrap().state
}

/// Records an event that follows no renewal on `job_id`'s timeline; its place.
async fn unrelated_event(ledger: &fenceline::ledger::Ledger, job_id: &str) -> i64 {
    use fenceline::job::EventKind;
    use fenceline::ledger::NewEvent;
    let worker = Actor::Worker("w".into());
    let event = NewEvent::new(EventKind::DuplicateSuppressed, &worker);
    ledger.record_event(job_id, &event).await.unwrap()
}
