//! Retention: finished records pruned after the cutoff, live jobs never.

use super::*;

on_both_backends!(
    terminal_records_older_than_the_cutoff_are_pruned_and_live_jobs_never_are,
    rolled_up_hours_go_with_retention_once_no_chart_reads_them,
);

async fn terminal_records_older_than_the_cutoff_are_pruned_and_live_jobs_never_are(db: Db) {
    let (ledger, test_db) = fresh_ledger(db).await;
    let old = succeeded_job(&ledger, "old").await;
    // Live jobs created before the cutoff: ready, and unknown.
    let ready = create(&ledger, new_job("acme", "ready", json!(1))).await;
    let unknown = create(&ledger, new_job("acme", "unknown", json!(2))).await;
    let (claimed, _) = ledger
        .claim_and_start(&unknown, "w", LONG, None, "stub")
        .await
        .unwrap();
    ledger
        .release(&as_owner(&unknown, claimed.epoch, "w"), "test")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let young = succeeded_job(&ledger, "young").await;
    let cutoff = ledger
        .job(&young)
        .await
        .unwrap()
        .unwrap()
        .terminal_at
        .unwrap();

    let raw = test_db.raw_pool().await;
    let owned = [&old, &ready, &unknown, &young];
    let before = rows_owned(&raw, &owned).await;
    let pruned = ledger.prune_before(cutoff).await.unwrap();
    assert_eq!(pruned.jobs, 1, "only the old terminal job");
    assert!(ledger.job(&old).await.unwrap().is_none());
    // Every row the old job owned went with it, and no other job's.
    let after = rows_owned(&raw, &owned).await;
    for ((table, was), (_, now)) in before.iter().zip(&after) {
        assert!(was[0] > 0, "the old job had rows in {table}");
        assert_eq!(now[0], 0, "the old job's rows in {table}");
        assert_eq!(now[1..], was[1..], "the kept jobs' rows in {table}");
    }
    for live in [&ready, &unknown, &young] {
        assert!(ledger.job(live).await.unwrap().is_some(), "{live} is kept");
        assert!(!ledger.events(live, 0, 10).await.unwrap().is_empty());
    }
    assert_eq!(
        ledger.job(&young).await.unwrap().unwrap().state,
        JobState::Succeeded
    );

    // A policy run is recorded, and nothing younger than its keep period goes.
    let again = ledger.prune(Duration::from_secs(3600)).await.unwrap();
    assert_eq!(again.jobs, 0);
    let run = ledger
        .last_retention_run()
        .await
        .unwrap()
        .expect("recorded");
    assert_eq!(run.keep, Duration::from_secs(3600));
    assert_eq!(run.pruned, again);
}

async fn rolled_up_hours_go_with_retention_once_no_chart_reads_them(db: Db) {
    use fenceline::ledger::HOUR;
    let (ledger, test_db) = fresh_ledger(db).await;
    let raw = test_db.raw_pool().await;
    let now = ledger.now_us().await.unwrap();
    let this_hour = now - now.rem_euclid(HOUR);
    let day = 24 * HOUR;
    // Hours of the overview's rollup: 30 days old, 3 days old (inside the week's chart), 1 hour.
    let hours = [this_hour - 30 * day, this_hour - 3 * day, this_hour - HOUR];
    for hour in hours {
        sqlx::query(
            "INSERT INTO activity_hours (hour, series, bin, n) VALUES ($1, 'job_created', 0, 7)",
        )
        .bind(hour)
        .execute(&raw)
        .await
        .unwrap();
        sqlx::query("INSERT INTO activity_hours_done (hour) VALUES ($1)")
            .bind(hour)
            .execute(&raw)
            .await
            .unwrap();
    }
    let left = |table: &'static str| {
        let raw = raw.clone();
        async move {
            let rows: Vec<i64> =
                sqlx::query_scalar(&format!("SELECT hour FROM {table} ORDER BY hour"))
                    .fetch_all(&raw)
                    .await
                    .unwrap();
            rows
        }
    };
    // Kept 60 days: every hour is younger than the cutoff.
    ledger
        .prune(Duration::from_secs(60 * 86_400))
        .await
        .unwrap();
    assert_eq!(left("activity_hours").await, hours);
    // Kept an hour: the 30-day-old hour goes; the 3-day-old one stays, since the week's chart
    // still reads it and its events are gone (it could not be counted again).
    ledger.prune(Duration::from_secs(3600)).await.unwrap();
    assert_eq!(left("activity_hours").await, hours[1..]);
    assert_eq!(left("activity_hours_done").await, hours[1..]);
}
