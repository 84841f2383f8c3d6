//! The soak checker can fail: each invariant it reports is planted by hand, on both backends,
//! and found on exactly the job it was planted on.

use std::time::Duration;

use fenceline::job::{detail, Actor, EventKind};
use fenceline::ledger::{Failure, Ledger, NewEvent};
use serde_json::json;

use crate::helpers::{as_owner, create, fresh_ledger, new_job, Db};
use crate::on_both_backends;

const LONG: Duration = Duration::from_secs(600);

fn worker() -> Actor {
    Actor::Worker("w".into())
}

async fn plant(ledger: &Ledger, job_id: &str, event: NewEvent) {
    ledger.record_event(job_id, &event).await.unwrap();
}

/// A job that ran once, was accepted and had its message deleted: as it should be.
async fn a_clean_job(ledger: &Ledger, key: &str) -> String {
    let id = create(ledger, new_job("soak", key, json!(key))).await;
    ledger
        .claim_and_start(&id, "w", LONG, None, "stub")
        .await
        .unwrap();
    ledger
        .accept_result(&as_owner(&id, 1, "w"), 1, "answer")
        .await
        .unwrap();
    plant(
        ledger,
        &id,
        NewEvent::new(EventKind::MessageDeleted, &worker()).detail(detail::MessageDeleted {
            reason: "succeeded".into(),
        }),
    )
    .await;
    id
}

async fn the_checker_finds_each_planted_violation_on_its_job(db: Db) {
    let (ledger, test_db) = fresh_ledger(db).await;
    let clean = a_clean_job(&ledger, "clean").await;
    let verdict = fenceline::soak::check(
        &ledger,
        Some("soak"),
        Some(1),
        (&stub_prices(), "stub"),
        None,
    )
    .await
    .unwrap();
    assert!(verdict.holds(), "{}", verdict.render());
    assert_eq!(verdict.by_state.get("succeeded"), Some(&1));

    // Two accepted results.
    let doubled = a_clean_job(&ledger, "doubled").await;
    plant(
        &ledger,
        &doubled,
        NewEvent::new(EventKind::ResultAccepted, &worker()),
    )
    .await;
    // A commit under epoch 1 after the job had moved to epoch 2.
    let stale = create(&ledger, new_job("soak", "stale", json!(1))).await;
    ledger
        .claim_and_start(&stale, "w", LONG, None, "stub")
        .await
        .unwrap();
    plant(
        &ledger,
        &stale,
        NewEvent::new(EventKind::RecoveryClaimed, &Actor::System).epoch(2),
    )
    .await;
    plant(
        &ledger,
        &stale,
        NewEvent::new(EventKind::ResultAccepted, &worker()).epoch(1),
    )
    .await;
    // The message deleted while the call was still under way.
    let early = create(&ledger, new_job("soak", "early", json!(1))).await;
    ledger
        .claim_and_start(&early, "w", LONG, None, "stub")
        .await
        .unwrap();
    plant(
        &ledger,
        &early,
        NewEvent::new(EventKind::MessageDeleted, &worker()).detail(detail::MessageDeleted {
            reason: "oops".into(),
        }),
    )
    .await;
    // A second attempt after the job went unknown, with no decision between.
    let blind = create(&ledger, new_job("soak", "blind", json!(1))).await;
    plant(
        &ledger,
        &blind,
        NewEvent::new(EventKind::StateChanged, &Actor::System).detail(detail::StateChanged {
            to: "unknown".into(),
            ..Default::default()
        }),
    )
    .await;
    plant(
        &ledger,
        &blind,
        NewEvent::new(EventKind::AttemptStarted, &worker()),
    )
    .await;
    plant(
        &ledger,
        &blind,
        NewEvent::new(EventKind::AttemptStarted, &worker()),
    )
    .await;

    // A number handed out that no event holds, before the last event (`holed`) or after it
    // (`reserved`).
    let raw = test_db.raw_pool().await;
    let skip = "UPDATE jobs SET next_event_seq = next_event_seq + 1 WHERE job_id = $1";
    let holed = a_clean_job(&ledger, "holed").await;
    sqlx::query(skip).bind(&holed).execute(&raw).await.unwrap();
    plant(
        &ledger,
        &holed,
        NewEvent::new(EventKind::VisibilityRenewed, &worker()),
    )
    .await;
    let reserved = a_clean_job(&ledger, "reserved").await;
    sqlx::query(skip)
        .bind(&reserved)
        .execute(&raw)
        .await
        .unwrap();

    let verdict = fenceline::soak::check(
        &ledger,
        Some("soak"),
        Some(9),
        (&stub_prices(), "stub"),
        None,
    )
    .await
    .unwrap();
    let text = verdict.render();
    assert!(!verdict.holds(), "{text}");
    assert!(text.contains("verdict: FAILED"), "{text}");
    assert!(text.contains("jobs whose timeline has a gap"), "{text}");
    assert_eq!(verdict.jobs, 7);
    let mut gaps = verdict.timeline_gaps.clone();
    gaps.sort();
    let mut planted = vec![holed, reserved];
    planted.sort();
    assert_eq!(gaps, planted, "{text}");
    assert_eq!(verdict.two_accepted, vec![doubled], "{text}");
    assert_eq!(
        verdict.stale_commits_accepted,
        vec![stale.clone()],
        "{text}"
    );
    assert_eq!(
        verdict.deletes_before_outcome,
        vec![early.clone()],
        "{text}"
    );
    assert_eq!(
        verdict.attempts_after_uncertain_without_decision,
        vec![blind.clone()],
        "{text}"
    );
    // Jobs left running or ready are lost; five of seven submitted are in the ledger.
    let mut lost = verdict.lost.clone();
    lost.sort();
    let mut expected = vec![stale, early, blind];
    expected.sort();
    assert_eq!(lost, expected, "{text}");
    assert_eq!(verdict.missing, 2);
    assert!(!verdict.two_accepted.contains(&clean));
    assert_eq!(
        verdict.repeated_calls.get("nothing recorded (unexplained)"),
        Some(&1),
        "{text}"
    );
    // Nothing checked is not a pass.
    let empty = fenceline::soak::check(
        &ledger,
        Some("nobody"),
        None,
        (&stub_prices(), "stub"),
        None,
    )
    .await
    .unwrap();
    assert!(!empty.holds());
}

/// A delete is judged by the epoch it was made under: an owner that recorded its failure deletes
/// its message, even once a second owner has started on a copy of it; an owner whose attempt
/// has no outcome does not, whether it still owns the job or was recovered from.
async fn the_checker_judges_a_delete_by_the_epoch_it_was_made_under(db: Db) {
    let (ledger, _db) = fresh_ledger(db).await;
    let retry = Failure::Retryable {
        error_code: "rate_limited".into(),
        backoff: Duration::ZERO,
    };
    let deleted = |epoch: i64, by: &str| {
        NewEvent::new(EventKind::MessageDeleted, &Actor::Worker(by.into()))
            .epoch(epoch)
            .detail(detail::MessageDeleted {
                reason: "planted".into(),
            })
    };
    // Owner a fails retryably, b claims the retry, and a's delete lands after b started
    // (`copied`); or b deletes before its own outcome (`early`).
    let mut second_owners = Vec::new();
    for key in ["copied", "early"] {
        let id = create(&ledger, new_job("soak", key, json!(key))).await;
        let (a, _) = ledger
            .claim_and_start(&id, "a", LONG, None, "stub")
            .await
            .unwrap();
        ledger
            .record_failure(&as_owner(&id, a.epoch, "a"), 1, &retry)
            .await
            .unwrap();
        let (b, _) = ledger
            .claim_and_start(&id, "b", LONG, None, "stub")
            .await
            .unwrap();
        let (epoch, by) = if key == "copied" {
            (a.epoch, "a")
        } else {
            (b.epoch, "b")
        };
        plant(&ledger, &id, deleted(epoch, by)).await;
        ledger
            .accept_result(&as_owner(&id, b.epoch, "b"), 2, "answer")
            .await
            .unwrap();
        second_owners.push(id);
    }
    let [copied, early] = <[String; 2]>::try_from(second_owners).unwrap();
    // Owner a's lease runs out, the job is recovered as `unknown`, and a deletes anyway.
    let stale = create(&ledger, new_job("soak", "stale", json!(1))).await;
    let (a, _) = ledger
        .claim_and_start(&stale, "a", Duration::from_millis(50), None, "stub")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await;
    ledger
        .recovery_claim(&stale, &Actor::System, "lease_expired", false)
        .await
        .unwrap();
    plant(&ledger, &stale, deleted(a.epoch, "a")).await;

    let verdict = fenceline::soak::check(
        &ledger,
        Some("soak"),
        Some(3),
        (&stub_prices(), "stub"),
        None,
    )
    .await
    .unwrap();
    let text = verdict.render();
    let mut expected = vec![early, stale];
    expected.sort();
    let mut found = verdict.deletes_before_outcome.clone();
    found.sort();
    assert_eq!(found, expected, "{text}");
    assert!(!found.contains(&copied), "{text}");
    assert!(verdict.lost.is_empty(), "{text}");
    assert_eq!(verdict.by_state.get("succeeded"), Some(&2), "{text}");
    assert_eq!(verdict.by_state.get("unknown"), Some(&1), "{text}");
}

/// A bound on `unknown` jobs fails the verdict when more end there, or when one ended there
/// after its provider id was kept (adoption should have settled it).
async fn the_checker_holds_unknown_jobs_to_the_bound_it_is_given(db: Db) {
    let (ledger, _db) = fresh_ledger(db).await;
    let prices = stub_prices();
    a_clean_job(&ledger, "clean").await;
    let lost = create(&ledger, new_job("soak", "lost", json!(1))).await;
    ledger
        .claim_and_start(&lost, "w", Duration::from_millis(1), None, "stub")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    ledger
        .recovery_claim(&lost, &Actor::System, "lease_expired", false)
        .await
        .unwrap();
    let check =
        |max| fenceline::soak::check(&ledger, Some("soak"), Some(2), (&prices, "stub"), max);
    // One of two, before any id was kept.
    assert!(check(Some(0.5)).await.unwrap().holds());
    let over = check(Some(0.25)).await.unwrap();
    assert!(!over.holds(), "{}", over.render());
    assert!(over.render().contains("EXCEEDED"));

    // Kept its id, then still ended unknown: fails whatever the share.
    let kept = create(&ledger, new_job("soak", "kept", json!(1))).await;
    let (claimed, attempt) = ledger
        .claim_and_start(&kept, "w", LONG, None, "stub")
        .await
        .unwrap();
    ledger
        .record_submitted(&claimed.owner, attempt.attempt_no, "stub", "resp_1")
        .await
        .unwrap();
    ledger.release(&claimed.owner, "shutdown").await.unwrap();
    let check =
        |max| fenceline::soak::check(&ledger, Some("soak"), Some(3), (&prices, "stub"), max);
    let verdict = check(Some(1.0)).await.unwrap();
    assert!(!verdict.holds(), "{}", verdict.render());
    assert!(
        check(None).await.unwrap().holds(),
        "without a bound, unknown is no violation"
    );
}

on_both_backends!(the_checker_finds_each_planted_violation_on_its_job);
on_both_backends!(the_checker_judges_a_delete_by_the_epoch_it_was_made_under);
on_both_backends!(the_checker_holds_unknown_jobs_to_the_bound_it_is_given);

fn stub_prices() -> fenceline::provider::prices::Prices {
    fenceline::provider::prices::Prices::parse(&[fenceline::provider::prices::STUB_PRICE]).unwrap()
}
