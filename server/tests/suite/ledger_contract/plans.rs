//! Query plans: writes and scans find their rows by key on both databases, and every statement of
//! the catalogue prepares.

use super::*;

on_both_backends!(every_statement_of_the_catalogue_prepares,);

/// Every write that names its rows by key finds them by key on PostgreSQL, even when the
/// planner's statistics are wrong in the way that makes another path look cheaper: the tables
/// analysed empty, then live jobs and messages arriving before the next analyse (a fresh or
/// freshly vacuumed ledger taking a burst). A guard condition written so that it implies a
/// partial index's predicate made the planner walk every live job instead. Lists of keys
/// passed as one JSON array are held to the same: each key looked up in an index.
///
/// The plans are checked with a thousand rows a table, then with six thousand. A connection
/// keeps the plan it settles on after its first few runs of a statement, until the next
/// analyse: in a burst that is while the tables are still small. Planned there, the accept's
/// update of `attempts` hashed the whole table, and every later accept on that connection read
/// every attempt as the table grew; lease renewals, claims and queue takes read whole tables
/// the same way (migration 0018).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_by_key_looks_its_row_up_by_key_whatever_the_statistics_say() {
    use sqlx::Executor;
    if crate::helpers::skip_postgres() {
        return;
    }
    let (ledger, test_db) = fresh_ledger(Db::Postgres).await;
    let raw = test_db.raw_pool().await;
    let mut conn = raw.acquire().await.unwrap();
    conn.execute("VACUUM ANALYZE").await.unwrap();
    // The plan kept for every call, whatever the values: what a pooled connection runs.
    conn.execute("SET plan_cache_mode = force_generic_plan")
        .await
        .unwrap();
    let mut wrong = Vec::new();
    for (from, to) in [(1, 1000), (1001, 6000)] {
        let rows = format!("generate_series({from}, {to}) AS g");
        for sql in [
            format!(
                "INSERT INTO jobs (job_id, tenant, idempotency_key, request_digest, input_ref, \
                 contract_version, state, owner_epoch, owner_id, owner_until, created_at, \
                 updated_at, deadline_at, max_attempts) \
                 SELECT 'job-' || g, 'acme', 'key-' || g, 'd', 'r', 'v1', \
                 CASE WHEN g % 2 = 0 THEN 'ready' ELSE 'running' END, \
                 CASE WHEN g % 2 = 0 THEN 0 ELSE 1 END, \
                 CASE WHEN g % 2 = 0 THEN NULL ELSE 'w' END, \
                 CASE WHEN g % 2 = 0 THEN NULL ELSE 9000000000000000 END, \
                 0, 0, 9000000000000000, 3 FROM {rows}"
            ),
            format!(
                "INSERT INTO queue_messages (queue, message_id, body, sent_at, visible_at, \
                 handle_hash) SELECT 'work', 'm-' || g, '{{}}', 0, 0, '0123abcd' FROM {rows}"
            ),
            format!(
                "INSERT INTO job_inputs (job_id, input, model) \
                 SELECT 'job-' || g, '{{}}', '{{}}' FROM {rows}"
            ),
            format!(
                "INSERT INTO outbox (job_id, epoch, reason, created_at, available_at) \
                 SELECT 'job-' || g, 0, 'created', 0, 0 FROM {rows}"
            ),
            format!(
                "INSERT INTO attempts (job_id, attempt_no, epoch, worker_id, provider, \
                 started_at) SELECT 'job-' || g, 1, 1, 'w', 'stub', 0 FROM {rows}"
            ),
        ] {
            conn.execute(sql.as_str()).await.unwrap();
        }
        let mut checked = Vec::new();
        for (name, sql) in ledger.statements() {
            // The key's equality must be a condition of the index scan that finds the rows.
            let key = if sql.starts_with("UPDATE jobs ") {
                "job_id = "
            } else if sql.starts_with("DELETE FROM queue_messages WHERE (id") {
                "(id = "
            } else if sql.contains("fl_keys(")
                || (sql.contains("fl_rows(") && !sql.starts_with("INSERT"))
            {
                // A list of keys, or rows joined to the table they change by its key, passed as
                // one JSON array: looked up key by key all the same.
                " = "
            } else {
                continue;
            };
            let plan = generic_plan(&mut conn, &name, &sql, "NULL").await;
            let by_key = plan
                .lines()
                .any(|line| line.contains("Index Cond: ") && line.contains(key));
            if !by_key || plan.contains("Seq Scan") {
                wrong.push(format!("{name} with {to} rows a table:\n{plan}"));
            }
            checked.push(name);
        }
        assert!(checked.len() >= 25, "only {checked:?}");
    }
    assert!(
        wrong.is_empty(),
        "not found by key:\n{}",
        wrong.join("\n\n")
    );
}

/// On SQLite every batched statement, its rows one JSON array (`json_each`) or a `VALUES` list
/// of any of its lengths, finds the rows it names through an index: none scans a table of the
/// ledger, however many jobs it holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_sqlite_a_batched_statement_finds_its_rows_by_key() {
    let (ledger, test_db) = fresh_ledger(Db::Sqlite).await;
    let raw = test_db.raw_pool().await;
    let tables: Vec<String> =
        sqlx::query_scalar("SELECT name FROM sqlite_master WHERE type = 'table'")
            .fetch_all(&raw)
            .await
            .unwrap();
    assert!(tables.iter().any(|t| t == "queue_messages"), "{tables:?}");
    let mut checked = Vec::new();
    let mut wrong = Vec::new();
    for (name, sql) in ledger.statements() {
        if !sql.contains("json_each(?)") && !sql.contains("(VALUES (") {
            continue;
        }
        let plan = sqlite_plan(&raw, &sql).await;
        // A scan of the JSON rows (or of a one-row `WITH`) is the point; a table is only
        // searched, by its key.
        let by_key = ["job_id=?", "(rowid=?", "(id=?"];
        let scans: Vec<&String> = plan
            .iter()
            .filter(|line| {
                let table = tables.iter().any(|t| {
                    line.starts_with(&format!("SCAN {t}"))
                        || line.starts_with(&format!("SEARCH {t} "))
                });
                table && !by_key.iter().any(|k| line.contains(k))
            })
            .collect();
        if !scans.is_empty() {
            wrong.push(format!("{name} scans: {}", plan.join(" / ")));
        }
        checked.push(name);
    }
    // Each statement of rows also as its `VALUES` lists (five, or three joined to a table).
    assert!(checked.len() >= 22 + 5 * 10 + 3 * 7, "only {checked:?}");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The overview takes drill jobs off its counts ([`fenceline::ledger::Drills`]) after finding
/// them through their own index: a drill's jobs are few, whatever the number of jobs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_sqlite_drill_jobs_are_found_by_their_own_index() {
    let (ledger, test_db) = fresh_ledger(Db::Sqlite).await;
    ledger.seed_generated_jobs("many", 20_000).await.unwrap();
    // No `ANALYZE`: the embedded ledger runs on SQLite's default estimates.
    let raw = test_db.raw_pool().await;
    let sql = fenceline::ledger::DRILL_JOBS_BY_STATE.replace("$1", "NULL");
    let plan = sqlite_plan(&raw, &sql).await;
    assert!(
        plan.iter().any(|l| l.contains("jobs_drill_run"))
            && !plan.iter().any(|l| l.starts_with("SCAN jobs")),
        "{plan:?}"
    );
}

/// A tenant's jobs newest first, and the search by key across tenants, read indexes only over
/// many jobs on both backends. Neither has an index of its own (migration 0017): the list reads
/// the tenant's jobs state by state, the search finds the tenants and the key in each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_list_and_the_search_by_key_read_no_whole_table() {
    use fenceline::ledger::{find_key_statement, list_jobs_statement};
    use sqlx::Executor;
    for db in [Db::Sqlite, Db::Postgres] {
        if db == Db::Postgres && crate::helpers::skip_postgres() {
            continue;
        }
        let (ledger, test_db) = fresh_ledger(db).await;
        ledger.seed_generated_jobs("many", 20_000).await.unwrap();
        let mut few = Vec::new();
        for i in 0..4 {
            few.push(create(&ledger, new_job("few", &format!("f{i}"), json!(i))).await);
        }
        ledger.claim(&few[1], "w", LONG).await.unwrap();

        // What they find: the tenant's jobs newest first across states, the key in its tenant.
        let filter = JobFilter {
            tenant: Some("few".into()),
            limit: 3,
            ..Default::default()
        };
        let page = ledger.list_jobs(&filter).await.unwrap();
        let ids: Vec<&str> = page.jobs.iter().map(|j| j.job_id.as_str()).collect();
        assert_eq!(ids, [&few[3], &few[2], &few[1]], "{db:?}");
        assert_eq!(page.next.as_deref(), Some(few[1].as_str()), "{db:?}");
        let found = ledger.find_jobs("seed-12345").await.unwrap();
        assert_eq!(found.len(), 1, "{db:?}");
        assert_eq!(found[0].tenant, "many", "{db:?}");
        assert_eq!(ledger.find_jobs(&few[2]).await.unwrap()[0].job_id, few[2]);

        // How: no statement reads the whole table.
        let (list, args) = list_jobs_statement(&filter).unwrap();
        assert_eq!(args, ["few"]);
        let find = find_key_statement();
        let raw = test_db.raw_pool().await;
        let mut plans = Vec::new();
        if db == Db::Postgres {
            let mut conn = raw.acquire().await.unwrap();
            conn.execute("ANALYZE jobs").await.unwrap();
            for (name, sql, args) in [
                ("list", &list, &["'many'", "51"][..]),
                ("find", &find, &["'seed-12345'"][..]),
            ] {
                plans.push((name, pg_plan(&mut conn, name, sql, args).await));
            }
            let (list_plan, find_plan) = (&plans[0].1, &plans[1].1);
            // Each state's newest jobs through `jobs_tenant_state_id`, merged in order.
            assert!(
                list_plan.contains("jobs_tenant_state_id") && list_plan.contains("Merge Append"),
                "{list_plan}"
            );
            // The key looked up in each tenant: both columns of its unique index.
            assert!(
                find_plan.contains("Index Cond: ((tenant = t.tenant) AND (idempotency_key = "),
                "{find_plan}"
            );
            for (name, plan) in &plans {
                assert!(!plan.contains("Seq Scan on jobs"), "{name}: {plan}");
            }
        } else {
            for (name, sql) in [
                ("list", list.replace("$2", "51").replace("$1", "'many'")),
                ("find", find.replace("$1", "'seed-12345'")),
            ] {
                let plan = sqlite_plan(&raw, &sql).await;
                assert!(
                    !plan.iter().any(|l| l.starts_with("SCAN jobs")),
                    "{name}: {plan:?}"
                );
                plans.push((name, plan.join(" / ")));
            }
            assert!(plans[0].1.contains("jobs_tenant_state_id"), "{plans:?}");
            assert!(
                plans[1].1.contains("(tenant=? AND idempotency_key=?)"),
                "{plans:?}"
            );
        }
    }
}

/// The bundled SQLite is built without memory statistics (`.cargo/config.toml`): with them,
/// every allocation of the ledger's one writer takes a process-wide mutex.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bundled_sqlite_keeps_no_memory_statistics() {
    let (_ledger, test_db) = fresh_ledger(Db::Sqlite).await;
    let raw = test_db.raw_pool().await;
    let options: Vec<String> = sqlx::query_scalar("PRAGMA compile_options")
        .fetch_all(&raw)
        .await
        .unwrap();
    assert!(
        options.iter().any(|o| o == "DEFAULT_MEMSTATUS=0"),
        "{options:?}"
    );
}

/// Every scan for what is due now (visible messages, due sends, passed deadlines) walks its
/// index only up to the database clock on PostgreSQL. The clock is a volatile function, which
/// an index scan cannot take as a bound: written bare, each poll walked every message in
/// flight, evaluating the clock per row. The lease's expiry has no index there (a renewal
/// must stay on its page): the scan for expired leases reads the running jobs by their state,
/// never the finished ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_for_what_is_due_stops_at_the_clock() {
    use sqlx::Executor;
    if crate::helpers::skip_postgres() {
        return;
    }
    let (ledger, test_db) = fresh_ledger(Db::Postgres).await;
    let raw = test_db.raw_pool().await;
    let mut conn = raw.acquire().await.unwrap();
    // 6,000 running jobs holding leases far ahead, their messages in flight and their sends
    // made, as in a busy deployment.
    for sql in [
        "INSERT INTO jobs (job_id, tenant, idempotency_key, request_digest, input_ref, \
         contract_version, state, owner_epoch, owner_id, owner_until, created_at, updated_at, \
         deadline_at, max_attempts) \
         SELECT 'job-' || g, 'acme', 'key-' || g, 'd', 'r', 'v1', 'running', 1, 'w', \
         9000000000000000, 0, 0, 9000000000000000, 3 FROM generate_series(1, 6000) AS g",
        // Many more finished, as a ledger keeps them until retention.
        "INSERT INTO jobs (job_id, tenant, idempotency_key, request_digest, input_ref, \
         contract_version, state, owner_epoch, created_at, updated_at, deadline_at, \
         max_attempts, terminal_at) \
         SELECT 'done-' || g, 'acme', 'done-' || g, 'd', 'r', 'v1', 'failed_terminal', 1, 0, 0, 0, \
         3, 0 FROM generate_series(1, 60000) AS g",
        "INSERT INTO queue_messages (queue, message_id, body, sent_at, visible_at, handle_hash) \
         SELECT 'work', 'm-' || g, '{}', 0, 9000000000000000, '0123abcd' \
         FROM generate_series(1, 6000) AS g",
        "INSERT INTO outbox (job_id, epoch, reason, created_at, available_at, dispatched_at) \
         SELECT 'job-' || g, 1, 'created', 0, CASE WHEN g % 10 = 0 THEN 9000000000000000 \
         ELSE 0 END, CASE WHEN g % 10 = 0 THEN NULL ELSE 1 END \
         FROM generate_series(1, 6000) AS g",
        "ANALYZE",
        "SET plan_cache_mode = force_generic_plan",
    ] {
        conn.execute(sql).await.unwrap();
    }
    let statements: HashMap<String, String> = ledger.statements().into_iter().collect();
    let mut wrong = Vec::new();
    for (name, column) in [
        ("queue_any_visible", "visible_at"),
        ("queue_visible", "visible_at"),
        ("outbox_due", "available_at"),
        ("outbox_due_rows", "available_at"),
        ("expired_leases", "state"),
        ("past_deadline", "deadline_at"),
    ] {
        let plan = generic_plan(&mut conn, name, &statements[name], "'1'").await;
        let bounded = plan
            .lines()
            .any(|line| line.contains("Index Cond: ") && line.contains(column));
        if !bounded || plan.contains("Seq Scan") {
            wrong.push(format!("{name} does not stop at the clock:\n{plan}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
}

async fn every_statement_of_the_catalogue_prepares(db: Db) {
    let (ledger, test_db) = fresh_ledger(db).await;
    // The benchmarks' reference table is made on demand; the statement that reads it needs it.
    ledger.naive_reset().await.unwrap();
    let raw = test_db.raw_pool().await;
    let statements = ledger.statements();
    assert!(statements.len() > 40, "{} statements", statements.len());
    let mut failed = Vec::new();
    for (name, sql) in statements {
        assert!(!sql.contains('{'), "{name} keeps a token: {sql}");
        if let Err(error) = sqlx::Executor::prepare(&raw, sql.as_str()).await {
            failed.push(format!("{name}: {error}\n  {sql}"));
        }
    }
    assert!(failed.is_empty(), "on {db:?}:\n{}", failed.join("\n"));
}
