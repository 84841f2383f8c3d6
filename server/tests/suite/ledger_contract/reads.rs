//! What the ledger reads back: pages by keyset, folded timelines, workers, the overview's roll-up
//! and activity counts.

use super::*;

on_both_backends!(
    an_event_for_no_job_is_not_found_on_every_path,
    jobs_and_timelines_page_by_keyset,
    a_timeline_folds_into_the_same_runs_read_forward_back_or_around_any_event,
    a_worker_is_seen_by_its_reports_and_by_the_jobs_it_owns,
    the_overview_rollup_counts_closed_hours_once_and_agrees_with_counting_live,
    drill_jobs_are_left_out_of_the_overview_and_the_job_gauge,
    the_activity_counts_read_events_through_their_partial_indexes,
);

/// An event for a job that does not exist is refused as not found, in a group commit as alone.
async fn an_event_for_no_job_is_not_found_on_every_path(db: Db) {
    use fenceline::job::EventKind;
    use fenceline::ledger::NewEvent;
    let (ledger, _db) = fresh_ledger(db).await;
    let real = create(&ledger, new_job("acme", "real", json!(1))).await;
    let event = NewEvent::new(EventKind::VisibilityRenewed, &Actor::Worker("w".into()));
    let (ghost, there) = tokio::join!(
        ledger.note_event("no-such-job", event.clone()),
        ledger.note_event(&real, event.clone()),
    );
    assert!(there.is_ok());
    assert_eq!(refusal(ghost), Refusal::NotFound);
    assert_eq!(
        refusal(ledger.record_event("no-such-job", &event).await),
        Refusal::NotFound
    );
}

async fn jobs_and_timelines_page_by_keyset(db: Db) {
    let (ledger, _db) = fresh_ledger(db).await;
    let mut ids = Vec::new();
    for i in 0..7 {
        ids.push(create(&ledger, new_job("acme", &format!("p{i}"), json!(i))).await);
    }
    create(&ledger, new_job("globex", "other", json!(0))).await;
    ledger.claim(&ids[2], "w", LONG).await.unwrap();

    let mut seen = Vec::new();
    let mut before = None;
    loop {
        let page = ledger
            .list_jobs(&JobFilter {
                tenants: None,
                tenant: Some("acme".into()),
                state: None,
                before: before.clone(),
                from_id: None,
                limit: 3,
                ..Default::default()
            })
            .await
            .unwrap();
        assert!(page.jobs.len() <= 3);
        seen.extend(page.jobs.iter().map(|j| j.job_id.clone()));
        match page.next {
            Some(next) => before = Some(next),
            None => break,
        }
    }
    let mut newest_first = ids.clone();
    newest_first.reverse();
    assert_eq!(seen, newest_first);

    let running = ledger
        .list_jobs(&JobFilter {
            tenants: None,
            tenant: Some("acme".into()),
            state: Some(JobState::Running),
            before: None,
            from_id: None,
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(running.jobs.len(), 1);
    assert_eq!(running.jobs[0].job_id, ids[2]);
    let counts = ledger
        .count_by_state(Some("acme"), fenceline::ledger::Drills::Counted)
        .await
        .unwrap();
    assert_eq!(counts.len(), 7);
    assert!(counts.contains(&(JobState::Ready, 6)));
    assert!(counts.contains(&(JobState::Running, 1)));
    assert!(counts.contains(&(JobState::Unknown, 0)));

    // A long timeline, read page by page.
    let leases = vec![(ids[2].clone(), 1_i64)];
    for _ in 0..12 {
        ledger.renew_leases("w", &leases, LONG).await.unwrap();
    }
    let mut after = 0;
    let mut total = 0;
    loop {
        let page = ledger.events(&ids[2], after, 5).await.unwrap();
        if page.is_empty() {
            break;
        }
        assert!(page.iter().all(|e| e.seq > after));
        after = page.last().unwrap().seq;
        total += page.len();
    }
    assert_eq!(total, 14);
}

/// The console's folded timeline: runs of consecutive events of one kind (successful lease and
/// visibility renewals as one), read a page at a time forward, a page back from any page, and
/// around any event, are the runs of the whole timeline folded at once.
async fn a_timeline_folds_into_the_same_runs_read_forward_back_or_around_any_event(db: Db) {
    use fenceline::job::EventKind::{
        self, DeliveryReceived, DuplicateSuppressed, LeaseRenewalFailed, LeaseRenewed,
        VisibilityRenewed,
    };
    use fenceline::ledger::NewEvent;
    let (ledger, _db) = fresh_ledger(db).await;
    let job_id = create(&ledger, new_job("acme", "fold", json!(1))).await;
    let worker = Actor::Worker("w".into());
    // A fixed pseudo-random walk: runs of renewals, failed renewals that break them, single
    // events and repeats; appended in batches, so that times differ between them.
    let mut x: u64 = 7;
    for _ in 0..40 {
        let batch: Vec<NewEvent> = (0..10)
            .map(|_| {
                x = x
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                let kind = match (x >> 33) % 10 {
                    0..=2 => LeaseRenewed,
                    3..=5 => VisibilityRenewed,
                    6 => LeaseRenewalFailed,
                    7 => DuplicateSuppressed,
                    _ => DeliveryReceived,
                };
                NewEvent::new(kind, &worker)
            })
            .collect();
        ledger.append_events(&job_id, &batch).await.unwrap();
    }
    let events = ledger.all_events(&job_id).await.unwrap();
    let folded = |kind: EventKind| match kind {
        LeaseRenewed | VisibilityRenewed => "renewed",
        other => other.as_str(),
    };
    // (kind, first seq, last seq, first at, last at), folded at once.
    let mut want: Vec<(&str, i64, i64, i64, i64)> = Vec::new();
    for e in &events {
        match want.last_mut() {
            Some(run) if run.0 == folded(e.kind) && run.2 + 1 == e.seq => {
                run.2 = e.seq;
                run.4 = e.at;
            }
            _ => want.push((folded(e.kind), e.seq, e.seq, e.at, e.at)),
        }
    }
    assert!(
        want.len() > 60 && want.iter().filter(|r| r.2 - r.1 >= 3).count() > 5,
        "the walk makes both long runs and short ones: {want:?}"
    );
    assert!(want.windows(2).any(|w| w[0].4 != w[1].3), "times differ");
    let as_tuple = |r: &fenceline::ledger::Run| {
        (
            r.kind.as_str(),
            r.first_seq,
            r.last_seq,
            r.first_at,
            r.last_at,
        )
    };

    // Forward, as the console pages: 7 runs shown, an eighth asked for to know there is more.
    let (mut got, mut after, mut pages) = (Vec::new(), 0, Vec::new());
    loop {
        let runs = ledger.timeline_runs(&job_id, after, 8).await.unwrap();
        let shown = runs.len().min(7);
        let (idx, _) = want.iter().enumerate().find(|(_, r)| r.1 > after).unwrap();
        let expect: Vec<_> = want[idx..].iter().take(8).cloned().collect();
        let runs: Vec<_> = runs.iter().map(as_tuple).collect();
        assert_eq!(runs, expect, "the runs after {after}");
        got.extend(runs[..shown].iter().cloned());
        pages.push(after);
        if runs.len() <= 7 {
            break;
        }
        after = runs[shown - 1].1;
    }
    assert_eq!(got, want);
    assert!(pages.len() > 8, "{} pages", pages.len());
    assert!(ledger
        .timeline_runs(&job_id, want.last().unwrap().1, 8)
        .await
        .unwrap()
        .is_empty());

    // A page back: the run 7 before the first one shown after `after`.
    for &after in &pages {
        let upto = want.iter().filter(|r| r.1 <= after).count();
        let expect = upto.checked_sub(7).map(|i| want[i].1);
        assert_eq!(
            ledger.timeline_run_before(&job_id, after, 7).await.unwrap(),
            expect,
            "a page back from {after}"
        );
    }

    // Around any event: the run that holds it; none past the last event.
    for e in &events {
        let holder = want.iter().find(|r| r.1 <= e.seq && e.seq <= r.2).unwrap();
        assert_eq!(
            ledger.timeline_run_of(&job_id, e.seq).await.unwrap(),
            Some(holder.1),
            "the run of event {}",
            e.seq
        );
    }
    let past = events.last().unwrap().seq + 1;
    assert_eq!(ledger.timeline_run_of(&job_id, past).await.unwrap(), None);
}

async fn a_worker_is_seen_by_its_reports_and_by_the_jobs_it_owns(db: Db) {
    use fenceline::ledger::WorkerReport;
    let (ledger, _db) = fresh_ledger(db).await;
    let report = WorkerReport {
        worker_id: "w1".into(),
        queue: "sqs:jobs".into(),
        provider: "openai".into(),
        max_in_flight: 32,
        capacity: 32,
    };
    ledger.report_worker(&report).await.unwrap();
    let job_id = create(&ledger, new_job("acme", "held", json!(1))).await;
    ledger
        .claim_and_start(&job_id, "w1", LONG, None, "stub")
        .await
        .unwrap();
    let now = ledger.now_us().await.unwrap();
    let seen = ledger
        .workers_seen(now - 60_000_000, now, None)
        .await
        .unwrap();
    assert_eq!(seen.len(), 1, "{seen:?}");
    let w1 = &seen[0];
    let reported = w1.reported.clone().unwrap();
    assert_eq!(
        (reported.queue.as_str(), reported.max_in_flight),
        ("sqs:jobs", 32)
    );
    assert_eq!(reported.started_at, reported.seen_at);
    assert_eq!((w1.held, w1.lapsed), (1, 0));
    assert!(w1.lease_until.unwrap() > now);
    // Judged later than its lease: lapsed.
    let later = w1.lease_until.unwrap() + 1;
    let seen = ledger.workers_seen(0, later, None).await.unwrap();
    assert_eq!((seen[0].held, seen[0].lapsed), (1, 1));
    // Reports older than `since` are not listed; what it owns still is.
    let seen = ledger
        .workers_seen(now + 3_600_000_000, now, None)
        .await
        .unwrap();
    assert!(seen[0].reported.is_none() && seen[0].held == 1, "{seen:?}");
    // Another tenant's view: the process, none of the jobs.
    let other = ["globex".to_owned()];
    let seen = ledger.workers_seen(0, now, Some(&other)).await.unwrap();
    assert_eq!((seen.len(), seen[0].held), (1, 0));
    // A clean stop is recorded; a report after it (the same id started again) clears it.
    ledger.worker_stopped("w1").await.unwrap();
    let stopped = ledger.workers_seen(0, now, None).await.unwrap()[0].clone();
    assert!(stopped.reported.unwrap().stopped_at.is_some());
    ledger.report_worker(&report).await.unwrap();
    let again = ledger.workers_seen(0, now, None).await.unwrap()[0].clone();
    let again = again.reported.unwrap();
    assert_eq!(again.stopped_at, None);
    assert_eq!(
        again.started_at, reported.started_at,
        "still the first report's start"
    );
}

/// The overview's hourly rollup: closed hours are counted once, agree with counting live, and
/// keep their counts; the open stretch is always counted live.
async fn the_overview_rollup_counts_closed_hours_once_and_agrees_with_counting_live(db: Db) {
    use fenceline::job::EventKind;
    use fenceline::ledger::{DeliveryRef, NewEvent, FINISHED, HOUR, REDELIVERED};
    let (ledger, test_db) = fresh_ledger(db).await;
    let raw = test_db.raw_pool().await;
    let now = ledger.now_us().await.unwrap();
    let origin = (now / HOUR - 24) * HOUR;
    for i in 0..12i64 {
        // A job created 2i hours and 30 minutes ago, with a redelivery...
        let id = create(&ledger, new_job("acme", &format!("roll-{i}"), json!(i))).await;
        let received = NewEvent::new(EventKind::DeliveryReceived, &Actor::Worker("w".into()))
            .delivery(DeliveryRef {
                message_id: format!("m-{i}"),
                receive_count: 2,
                handle_hash: "0123abcd".into(),
            });
        ledger.record_event(&id, &received).await.unwrap();
        sqlx::query("UPDATE events SET at = at - $1 WHERE job_id = $2")
            .bind(i * 2 * HOUR + HOUR / 2)
            .bind(&id)
            .execute(&raw)
            .await
            .unwrap();
        // ...and a job that expired then, 30 s after it was created, having used 2 attempts.
        let at = now - i * 2 * HOUR - HOUR / 2;
        sqlx::query(
            "INSERT INTO jobs (job_id, tenant, idempotency_key, request_digest, input_ref, \
             contract_version, state, owner_epoch, deadline_at, attempt_count, budget_used, \
             max_attempts, created_at, updated_at, terminal_at, next_event_seq) \
             VALUES ($1, 'acme', $2, 'd', 'seed', 'seed', 'expired', 1, $3, 2, 2, 3, $4, $5, $5, 1)",
        )
        .bind(format!("job_{}", uuid::Uuid::now_v7()))
        .bind(format!("expired-{i}"))
        .bind(at + 60_000_000)
        .bind(at - 30_000_000)
        .bind(at)
        .execute(&raw)
        .await
        .unwrap();
    }
    let first = ledger.activity(origin, HOUR, 25).await.unwrap();
    assert!(
        first.rolled_until > origin,
        "closed hours came from the rollup"
    );
    let total =
        |a: &fenceline::ledger::Activity, series: &str| a.of(series, 25).iter().sum::<i64>();
    assert_eq!(total(&first, "job_created"), 12);
    assert_eq!(total(&first, REDELIVERED), 12);
    assert_eq!(total(&first, &format!("{FINISHED}expired")), 12);
    assert_eq!(first.took, [0, 0, 12, 0, 0, 0], "all took 30 s");
    assert_eq!(first.tries, [0, 0, 12, 0, 0, 0], "all used 2 attempts");
    // Job i's events sit in the bucket 2i hours and 30 minutes back.
    let created = first.of("job_created", 25);
    assert_eq!(
        created.iter().filter(|n| **n == 1).count(),
        12,
        "{created:?}"
    );
    // Again: the same counts, now all read from the rollup for the closed hours.
    assert_eq!(ledger.activity(origin, HOUR, 25).await.unwrap(), first);
    // Counted live throughout (buckets off the hour cannot use the rollup): the same.
    let live = ledger.activity(origin + 1, HOUR, 25).await.unwrap();
    assert_eq!(live.rolled_until, origin + 1, "nothing rolled");
    assert_eq!(live.series, first.series);
    assert_eq!(
        (live.took, live.tries),
        (first.took.clone(), first.tries.clone())
    );
    // Rolled-up hours keep their counts (retention may prune the rows they were counted
    // from); the open stretch is counted live.
    sqlx::query("DELETE FROM events WHERE kind = 'job_created'")
        .execute(&raw)
        .await
        .unwrap();
    let after = ledger.activity(origin, HOUR, 25).await.unwrap();
    let kept: i64 = after.of("job_created", 25).iter().sum();
    let closed_before: i64 = first
        .of("job_created", 25)
        .iter()
        .enumerate()
        .filter(|(b, _)| origin + (*b as i64 + 1) * HOUR <= first.rolled_until)
        .map(|(_, n)| n)
        .sum();
    assert_eq!(
        kept, closed_before,
        "closed hours kept, the open stretch recounted"
    );
}

/// Drill jobs are a drill's evidence, not the service's work: the overview's tiles and charts
/// and the metrics' job gauge leave them out (live and in rolled-up hours alike), and say how
/// many there are; the jobs list still counts them, since it lists them.
async fn drill_jobs_are_left_out_of_the_overview_and_the_job_gauge(db: Db) {
    use fenceline::job::{EventKind, JobState};
    use fenceline::ledger::{Drills, NewEvent, FINISHED, HOUR};
    let (ledger, test_db) = fresh_ledger(db).await;
    let raw = test_db.raw_pool().await;
    let now = ledger.now_us().await.unwrap();
    let origin = (now / HOUR - 24) * HOUR;
    let served = create(&ledger, new_job("acme", "served", json!(1))).await;
    let mut drill = new_job(fenceline::drill::DRILL_TENANT, "drilled", json!(2));
    drill.drill_run = Some("run-1".into());
    let drilled = create(&ledger, drill).await;
    let suppressed = NewEvent::new(EventKind::DuplicateSuppressed, &Actor::Worker("w".into()));
    for id in [&served, &drilled] {
        ledger.record_event(id, &suppressed).await.unwrap();
    }
    // A finished job of each kind, an hour and a half ago.
    for (key, tenant, run) in [
        ("old-served", "acme", None),
        ("old-drilled", "drill", Some("run-1")),
    ] {
        let at = now - HOUR - HOUR / 2;
        sqlx::query(
            "INSERT INTO jobs (job_id, tenant, idempotency_key, request_digest, input_ref, \
             contract_version, state, owner_epoch, deadline_at, attempt_count, max_attempts, \
             created_at, updated_at, terminal_at, next_event_seq, drill_run) \
             VALUES ($1, $2, $3, 'd', 'seed', 'seed', 'expired', 1, $4, 1, 3, $5, $6, $6, 1, $7)",
        )
        .bind(format!("job_{}", uuid::Uuid::now_v7()))
        .bind(tenant)
        .bind(key)
        .bind(at + 60_000_000)
        .bind(at - 30_000_000)
        .bind(at)
        .bind(run)
        .execute(&raw)
        .await
        .unwrap();
    }
    let total =
        |a: &fenceline::ledger::Activity, series: &str| a.of(series, 25).iter().sum::<i64>();
    let check = |a: &fenceline::ledger::Activity, how: &str| {
        assert_eq!(total(a, "job_created"), 1, "{how}: {a:?}");
        assert_eq!(total(a, "duplicate_suppressed"), 1, "{how}: {a:?}");
        assert_eq!(total(a, &format!("{FINISHED}expired")), 1, "{how}: {a:?}");
        assert_eq!(a.took.iter().sum::<i64>(), 1, "{how}: {a:?}");
        assert_eq!(a.tries.iter().sum::<i64>(), 1, "{how}: {a:?}");
    };
    check(
        &ledger.activity(origin + 1, HOUR, 25).await.unwrap(),
        "live",
    );
    // The same once the events are in closed hours and rolled up.
    sqlx::query("UPDATE events SET at = at - $1")
        .bind(2 * HOUR)
        .execute(&raw)
        .await
        .unwrap();
    let rolled = ledger.activity(origin, HOUR, 25).await.unwrap();
    assert!(rolled.rolled_until > now - 2 * HOUR, "{rolled:?}");
    check(&rolled, "rolled up");
    check(
        &ledger.activity(origin, HOUR, 25).await.unwrap(),
        "read back",
    );

    let of = |counts: &[(JobState, i64, bool)], state: JobState| {
        counts.iter().find(|c| c.0 == state).map(|c| c.1)
    };
    let apart = ledger
        .count_by_state_capped(None, 100, Drills::Apart)
        .await
        .unwrap();
    assert_eq!(of(&apart, JobState::Ready), Some(1), "{apart:?}");
    assert_eq!(of(&apart, JobState::Expired), Some(1), "{apart:?}");
    let listed = ledger
        .count_by_state_capped(None, 100, Drills::Counted)
        .await
        .unwrap();
    assert_eq!(of(&listed, JobState::Ready), Some(2), "{listed:?}");
    assert_eq!(of(&listed, JobState::Expired), Some(2), "{listed:?}");
    let gauge = ledger.count_by_state(None, Drills::Apart).await.unwrap();
    assert!(gauge.contains(&(JobState::Ready, 1)), "{gauge:?}");
    assert!(gauge.contains(&(JobState::Expired, 1)), "{gauge:?}");
    assert_eq!(ledger.drill_job_count().await.unwrap(), 2);
}

/// The activity counts read events through the two partial indexes made for them: the kinds
/// the overview counts (`events_activity_kind_at`) and redeliveries (`events_redelivered_at`),
/// never a scan of the timeline. Each index holds only what its condition names, and a
/// planner takes it only when it can prove the statement asks for no more; the statement and
/// the migration list the kinds alike, and this fails when they drift.
async fn the_activity_counts_read_events_through_their_partial_indexes(db: Db) {
    use sqlx::{Executor, Row};
    let (ledger, test_db) = fresh_ledger(db).await;
    let raw = test_db.raw_pool().await;
    let mut conn = raw.acquire().await.unwrap();
    for (i, sql) in fenceline::ledger::activity_statements(ledger.backend())
        .into_iter()
        .enumerate()
    {
        let plan = match db {
            Db::Sqlite => {
                let sql = sql.replace("$1", "0").replace("$2", "1").replace("$3", "0");
                sqlx::query(&format!("EXPLAIN QUERY PLAN {sql}"))
                    .fetch_all(&mut *conn)
                    .await
                    .unwrap()
                    .iter()
                    .map(|row| row.get::<String, _>("detail"))
                    .collect::<Vec<_>>()
                    .join("\n")
            }
            Db::Postgres => {
                // Whatever the statistics of an empty table would prefer: the index must be
                // one the planner can take at all.
                conn.execute("SET enable_seqscan = off").await.unwrap();
                generic_plan(&mut conn, "activity", &sql, "0").await
            }
        };
        for index in ["events_activity_kind_at", "events_redelivered_at"] {
            assert!(
                plan.contains(index),
                "statement {i} does not use {index}:\n{plan}"
            );
        }
        assert!(
            !plan.contains("SCAN events") && !plan.contains("Seq Scan on events"),
            "statement {i} scans the timeline:\n{plan}"
        );
    }
}
