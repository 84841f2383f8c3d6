//! Group commit: writes sharing transactions, a commit whose answer is lost, and the runners'
//! connections.

use super::*;

on_both_backends!(
    a_commit_whose_answer_is_lost_writes_nothing_twice,
    a_group_commit_at_its_cap_carries_every_kind_of_write,
);

/// A group commit whose answer is lost (the connection gone as it committed) is looked up
/// before anything is written again: a batch that landed answers its writes as written, once
/// each; one that did not sends each write alone, also once.
async fn a_commit_whose_answer_is_lost_writes_nothing_twice(db: Db) {
    use fenceline::job::EventKind;
    use fenceline::ledger::NewEvent;
    const JOBS: usize = 20;
    let (ledger, _db) = fresh_ledger(db).await;
    for landed in [true, false] {
        let mut ids = Vec::new();
        for i in 0..JOBS {
            let key = format!("lost-{landed}-{i}");
            ids.push(create(&ledger, new_job("acme", &key, json!(i))).await);
        }
        // Half the jobs claimed from a delivery, half already claimed and answering.
        let (claiming, answering) = ids.split_at(JOBS / 2);
        for id in answering {
            ledger
                .claim_and_start(id, "w", LONG, None, "stub")
                .await
                .unwrap();
        }
        ledger.lose_commit_answers(u32::MAX, landed);
        let mut calls = tokio::task::JoinSet::new();
        for id in claiming {
            let (ledger, id) = (ledger.clone(), id.clone());
            calls.spawn(async move {
                let worker = Actor::Worker("w".into());
                let received = NewEvent::new(EventKind::DeliveryReceived, &worker);
                let noted = NewEvent::new(EventKind::VisibilityRenewed, &worker);
                ledger.note_event(&id, noted).await.unwrap();
                let claimed = ledger
                    .claim_delivered(&id, "acme", "w", LONG, &received, "stub")
                    .await;
                assert!(claimed.is_ok(), "{id}: {claimed:?}");
            });
        }
        for id in answering {
            let (ledger, id) = (ledger.clone(), id.clone());
            calls.spawn(async move {
                let accepted = ledger
                    .accept_result(&as_owner(&id, 1, "w"), 1, "answer")
                    .await;
                assert!(accepted.is_ok(), "{id}: {accepted:?}");
            });
        }
        calls.join_all().await;
        ledger.lose_commit_answers(0, landed);
        for id in claiming {
            let kinds = kinds(&ledger, id).await;
            for once in ["visibility_renewed", "delivery_received", "claimed"] {
                let n = kinds.iter().filter(|k| *k == once).count();
                assert_eq!(n, 1, "{id} (landed: {landed}): {once} in {kinds:?}");
            }
            assert_eq!(job_state(&ledger, id).await, JobState::Running);
            assert_gap_free(&ledger, id).await;
        }
        for id in answering {
            let kinds = kinds(&ledger, id).await;
            assert!(!kinds.iter().any(|k| k == "result_rejected"), "{kinds:?}");
            assert_eq!(job_state(&ledger, id).await, JobState::Succeeded);
            assert_gap_free(&ledger, id).await;
        }
    }
    assert!(
        ledger.group_stats().failed > 0,
        "the commits' answers were lost"
    );
}

/// The group commit's runners keep their connections between commits (PostgreSQL). The pool
/// hands out its idle connections in turn: taking one for each commit, a run of commits went
/// through every connection of the pool, each a database process with caches of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_commits_run_on_the_runners_own_connections() {
    if crate::helpers::skip_postgres() {
        return;
    }
    let (ledger, test_db) = fresh_ledger(Db::Postgres).await;
    // Every connection of the pool open and idle, as a busy service leaves them.
    let pool = ledger.read_pool().clone();
    let opened: Vec<_> = (0..crate::helpers::options().max_connections)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move { pool.acquire().await.unwrap() })
        })
        .collect();
    let mut conns = Vec::new();
    for conn in opened {
        conns.push(conn.await.unwrap());
    }
    drop(conns);
    let raw = test_db.raw_pool().await;
    let before: String = sqlx::query_scalar("SELECT CAST(clock_timestamp() AS TEXT)")
        .fetch_one(&raw)
        .await
        .unwrap();
    // One job after another: a commit each.
    for i in 0..60 {
        create(&ledger, new_job("acme", &format!("one-{i}"), json!(i))).await;
    }
    assert_eq!(
        ledger.group_stats().commits,
        60,
        "{:?}",
        ledger.group_stats()
    );
    // The database processes whose last statement was one of those commits.
    let committed: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() \
         AND query = 'COMMIT' AND state_change > CAST($1 AS TIMESTAMPTZ)",
    )
    .bind(&before)
    .fetch_one(&raw)
    .await
    .unwrap();
    // Three runners: at most three processes, where the pool's turns took forty.
    assert!(
        (1..=3).contains(&committed),
        "60 commits ran on {committed} database processes"
    );
    // The connections kept do not hold the ledger's closing up.
    let closed = tokio::time::timeout(Duration::from_secs(5), ledger.close()).await;
    assert!(closed.is_ok(), "the ledger did not close");
}

/// The ledger closes when every connection its pool has open is one the group commit's
/// runners keep, as in a service whose other connections were closed for idleness: closing
/// the pool waits for each connection out of it, and a kept one only came back with the
/// runner's next commit, which never came. A `worker` or `serve` stopped then did not exit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ledger_closes_while_the_runners_keep_every_open_connection() {
    if crate::helpers::skip_postgres() {
        return;
    }
    let options = fenceline::ledger::LedgerOptions {
        max_connections: 1,
        ..crate::helpers::options()
    };
    let (ledger, _test_db) = crate::helpers::fresh_ledger_with(Db::Postgres, &options).await;
    create(&ledger, new_job("acme", "kept", json!(1))).await;
    assert_eq!(ledger.group_stats().commits, 1);
    let pool = ledger.read_pool();
    assert_eq!(
        (pool.size(), pool.num_idle()),
        (1, 0),
        "the pool's one connection is the runner's"
    );
    let closed = tokio::time::timeout(Duration::from_secs(5), ledger.close()).await;
    assert!(closed.is_ok(), "the ledger did not close");
    assert_eq!(pool.size(), 0, "a connection outlived the ledger's closing");
}

/// A ledger handle may be the last one left after its runtime has stopped (a test's harness
/// drops its runtime and its ledger in turn). Dropping it then must not let go of a
/// connection the group commit kept: a connection let go spawns its return to the pool, and
/// with no runtime that panics (and, during a panic's cleanup, aborts the process).
#[test]
fn a_ledger_dropped_after_its_runtime_lets_no_kept_connection_go() {
    if crate::helpers::skip_postgres() {
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (ledger, _test_db) = runtime.block_on(fresh_ledger(Db::Postgres));
    runtime.block_on(create(&ledger, new_job("acme", "outlives", json!(1))));
    assert_eq!(ledger.group_stats().commits, 1);
    // The runtime stops with the runners, and the kept connection goes with their tasks.
    drop(runtime);
    let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(ledger)));
    assert!(dropped.is_ok(), "dropping the ledger panicked");
}

/// Many callers at once fill group commits to their cap (512 writes on SQLite, 128 on
/// PostgreSQL), and every kind of write still fits its statements' limits there: new jobs,
/// events, receives and deletes all go through, and no batch fails whole.
async fn a_group_commit_at_its_cap_carries_every_kind_of_write(db: Db) {
    use fenceline::job::EventKind;
    use fenceline::ledger::NewEvent;
    const N: usize = 1_200;
    let (ledger, _db) = fresh_ledger(db).await;
    // Every call started before any is answered.
    async fn all<T: Send + 'static>(
        calls: impl Iterator<Item = impl std::future::Future<Output = T> + Send + 'static>,
    ) -> Vec<T> {
        let mut tasks = tokio::task::JoinSet::new();
        for call in calls {
            tasks.spawn(call);
        }
        tasks.join_all().await
    }
    let created = all((0..N).map(|i| {
        let ledger = ledger.clone();
        let new = new_job("acme", &format!("cap-{i}"), json!(i));
        async move { ledger.create_job(new, &Actor::Api("t".into())).await }
    }))
    .await;
    let ids: Vec<String> = created
        .into_iter()
        .map(|c| match c.unwrap() {
            Created::New(job) => job.job_id,
            other => panic!("{other:?}"),
        })
        .collect();
    let noted = all(ids.clone().into_iter().map(|id| {
        let ledger = ledger.clone();
        let event = NewEvent::new(EventKind::VisibilityRenewed, &Actor::Worker("w".into()));
        async move { ledger.note_event(&id, event).await }
    }))
    .await;
    assert!(noted.iter().all(Result::is_ok));
    for id in ids.iter().step_by(97) {
        assert_eq!(
            kinds(&ledger, id).await,
            ["job_created", "visibility_renewed"]
        );
    }
    let messages: Vec<(String, String)> = (0..N)
        .map(|i| (format!("m-{i}"), format!("{{\"n\":{i}}}")))
        .collect();
    ledger
        .queue_send("work", &messages, Duration::ZERO)
        .await
        .unwrap();
    let received = all((0..N / 10).map(|r| {
        let ledger = ledger.clone();
        let handles: Vec<String> = (0..10).map(|k| format!("{r:04}{k:04}")).collect();
        async move {
            let got = ledger.queue_receive("work", &handles, LONG, None).await;
            (handles, got)
        }
    }))
    .await;
    let mut taken = Vec::new();
    for (handles, got) in received {
        for message in got.unwrap() {
            taken.push((message.id, handles[message.handle].clone()));
        }
    }
    assert_eq!(taken.len(), N, "every message received once");
    let deleted = all(taken.into_iter().map(|(id, hash)| {
        let ledger = ledger.clone();
        async move { ledger.queue_delete("work", &[(id, hash)]).await }
    }))
    .await;
    assert!(deleted.into_iter().all(|d| d.unwrap() == [true]));
    let stats = ledger.group_stats();
    let cap = if db == Db::Sqlite { 512 } else { 128 };
    assert_eq!(stats.failed, 0, "{stats:?}");
    assert_eq!(stats.largest, cap, "{stats:?}");
}

/// A ledger write given up while its transaction is beginning (a heartbeat's bound running
/// out, a client hanging up) leaves no pooled connection inside a transaction on PostgreSQL.
/// One that did would run every later borrower's statements inside it, holding their locks,
/// and lose them when the connection closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_given_up_while_its_transaction_begins_leaves_no_connection_inside_it() {
    if crate::helpers::skip_postgres() {
        return;
    }
    let (ledger, test_db) = fresh_ledger(Db::Postgres).await;
    let raw = test_db.raw_pool().await;
    let job_id = create(&ledger, new_job("acme", "given-up", json!(1))).await;
    let (claimed, _) = ledger
        .claim_and_start(&job_id, "w", LONG, None, "stub")
        .await
        .unwrap();
    let leases = [(job_id.clone(), claimed.epoch)];
    let inside = "SELECT count(*) FROM pg_stat_activity \
                  WHERE datname = current_database() AND state LIKE 'idle in transaction%'";
    // Give the renewal up after one, two, … polls: one of them falls between `BEGIN` going
    // out and its answer coming back.
    for polls in 1..=40 {
        let mut renewal = Box::pin(ledger.renew_leases("w", &leases, LONG));
        for _ in 0..polls {
            let polled = std::future::poll_fn(|cx| {
                std::task::Poll::Ready(std::future::Future::poll(renewal.as_mut(), cx))
            })
            .await;
            if polled.is_ready() {
                break;
            }
            tokio::task::yield_now().await;
        }
        drop(renewal);
        // What a dropped transaction owes (its rollback) is settled by the next borrower at
        // the latest: use every connection the pool has once.
        for _ in 0..4 {
            ledger.job(&job_id).await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        let left: i64 = sqlx::query_scalar(inside).fetch_one(&raw).await.unwrap();
        assert_eq!(
            left, 0,
            "after a renewal given up at poll {polls}, a connection sits inside a transaction"
        );
    }
    // And the ledger still works: a renewal that runs to its end is on the timeline.
    ledger.renew_leases("w", &leases, LONG).await.unwrap();
    assert!(kinds(&ledger, &job_id)
        .await
        .contains(&"lease_renewed".to_string()));
}
