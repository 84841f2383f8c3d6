//! Random interleavings of claims, attempts, renewals, recoveries, commits, failures and
//! decisions by several owners. After every step the invariants of domain.md must hold:
//! one accepted result at most (from the epoch that was current), the attempt count equal to
//! the attempt records and within budget, no attempt after an uncertain one without a
//! recorded decision, epochs that only grow, every state change on the transition table, and
//! a gap-free timeline.

use std::time::Duration;

use fenceline::job::{detail, Actor, EventKind, JobState};
use fenceline::ledger::{AttemptOutcome, Decision, Failure, Ledger, NewEvent, ReplayPolicy};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::json;
use sqlx::Row;

use crate::helpers::{as_owner, create, fresh_ledger, new_job, Db};

const OWNERS: usize = 2;
const TENANT: &str = "prop";

#[derive(Debug, Clone)]
enum Op {
    /// `expired` claims take a lease that is already over: the next step sees it lapsed.
    Claim {
        owner: usize,
        expired: bool,
    },
    Start {
        owner: usize,
    },
    /// A live claim and an attempt start in one transaction: the worker's way into an attempt.
    ClaimAndStart {
        owner: usize,
    },
    /// The claim a worker makes from a delivery, in the next group commit; with the wrong
    /// tenant it must not go through.
    ClaimDelivered {
        owner: usize,
        wrong_tenant: bool,
    },
    Renew {
        owner: usize,
        expired: bool,
    },
    Accept {
        owner: usize,
    },
    /// A confused owner commits under its own (maybe stale) epoch but names whatever attempt
    /// the job has in flight: only the epoch fence can stop it.
    AcceptGuessing {
        owner: usize,
    },
    FailRetryable {
        owner: usize,
    },
    FailFatal {
        owner: usize,
    },
    Recover {
        owner: usize,
    },
    Decide {
        kind: u8,
        stale: bool,
    },
    Expire,
}

fn op() -> impl Strategy<Value = Op> {
    let owner = 0..OWNERS;
    prop_oneof![
        3 => (owner.clone(), any::<bool>()).prop_map(|(owner, expired)| Op::Claim { owner, expired }),
        3 => owner.clone().prop_map(|owner| Op::Start { owner }),
        3 => owner.clone().prop_map(|owner| Op::ClaimAndStart { owner }),
        3 => (owner.clone(), prop::bool::weighted(0.2))
            .prop_map(|(owner, wrong_tenant)| Op::ClaimDelivered { owner, wrong_tenant }),
        3 => (owner.clone(), prop::bool::weighted(0.7)).prop_map(|(owner, expired)| Op::Renew { owner, expired }),
        2 => owner.clone().prop_map(|owner| Op::Accept { owner }),
        1 => owner.clone().prop_map(|owner| Op::AcceptGuessing { owner }),
        1 => owner.clone().prop_map(|owner| Op::FailRetryable { owner }),
        1 => owner.clone().prop_map(|owner| Op::FailFatal { owner }),
        3 => owner.clone().prop_map(|owner| Op::Recover { owner }),
        3 => (prop_oneof![3 => Just(0u8), 2 => Just(1u8), 1 => Just(2u8), 1 => Just(3u8)],
              prop::bool::weighted(0.25))
            .prop_map(|(kind, stale)| Op::Decide { kind, stale }),
        1 => Just(Op::Expire),
    ]
}

/// What one owner believes it holds.
#[derive(Debug, Clone, Default)]
struct OwnerView {
    epoch: Option<i64>,
    attempt: Option<i64>,
}

const LONG: Duration = Duration::from_secs(60);

async fn step(ledger: &Ledger, job_id: &str, owners: &mut [OwnerView], op: &Op) {
    let name = |owner: usize| format!("w{owner}");
    match *op {
        Op::Claim { owner, expired } => {
            let lease = if expired { Duration::ZERO } else { LONG };
            if let Ok(c) = ledger.claim(job_id, &name(owner), lease).await {
                owners[owner] = OwnerView {
                    epoch: Some(c.epoch),
                    attempt: None,
                };
            }
        }
        Op::ClaimAndStart { owner } => {
            // The worker's one-transaction path.
            if let Ok((c, a)) = ledger
                .claim_and_start(job_id, &name(owner), LONG, None, "stub")
                .await
            {
                owners[owner] = OwnerView {
                    epoch: Some(c.epoch),
                    attempt: Some(a.attempt_no),
                };
            }
        }
        Op::ClaimDelivered {
            owner,
            wrong_tenant,
        } => {
            let received = NewEvent::new(EventKind::DeliveryReceived, &Actor::Worker(name(owner)));
            if wrong_tenant {
                let claimed = ledger
                    .claim_received(job_id, "another", &name(owner), LONG, &received, "stub")
                    .await
                    .expect("a claim for the wrong tenant is not an error");
                assert!(claimed.is_none(), "claimed another tenant's job");
            } else if let Ok((c, a, _)) = ledger
                .claim_delivered(job_id, TENANT, &name(owner), LONG, &received, "stub")
                .await
            {
                owners[owner] = OwnerView {
                    epoch: Some(c.epoch),
                    attempt: Some(a.attempt_no),
                };
            }
        }
        Op::Start { owner } => {
            if let Some(epoch) = owners[owner].epoch {
                if let Ok(a) = ledger
                    .start_attempt(&as_owner(job_id, epoch, &name(owner)), "stub")
                    .await
                {
                    owners[owner].attempt = Some(a.attempt_no);
                }
            }
        }
        Op::Renew { owner, expired } => {
            if let Some(epoch) = owners[owner].epoch {
                let lease = if expired { Duration::ZERO } else { LONG };
                let _ = ledger
                    .renew_leases(&name(owner), &[(job_id.to_owned(), epoch)], lease)
                    .await
                    .expect("renewal itself never errors");
            }
        }
        Op::Accept { owner } => {
            if let (Some(epoch), Some(attempt)) = (owners[owner].epoch, owners[owner].attempt) {
                let _ = ledger
                    .accept_result(&as_owner(job_id, epoch, &name(owner)), attempt, "answer")
                    .await;
            }
        }
        Op::AcceptGuessing { owner } => {
            let job = ledger.job(job_id).await.unwrap().unwrap();
            if let (Some(epoch), Some(attempt)) = (owners[owner].epoch, job.pending_attempt) {
                let _ = ledger
                    .accept_result(&as_owner(job_id, epoch, &name(owner)), attempt, "guess")
                    .await;
            }
        }
        Op::FailRetryable { owner } | Op::FailFatal { owner } => {
            if let (Some(epoch), Some(attempt)) = (owners[owner].epoch, owners[owner].attempt) {
                let failure = if matches!(op, Op::FailFatal { .. }) {
                    Failure::Fatal {
                        error_code: "fatal".into(),
                    }
                } else {
                    Failure::Retryable {
                        error_code: "retry".into(),
                        backoff: Duration::ZERO,
                    }
                };
                let _ = ledger
                    .record_failure(&as_owner(job_id, epoch, &name(owner)), attempt, &failure)
                    .await;
            }
        }
        Op::Recover { owner } => {
            let actor = Actor::Worker(name(owner));
            if let Ok(r) = ledger
                .recovery_claim(job_id, &actor, "lease_expired", true)
                .await
            {
                owners[owner] = OwnerView {
                    epoch: Some(r.epoch),
                    attempt: None,
                };
            }
        }
        Op::Decide { kind, stale } => {
            let job = ledger.job(job_id).await.unwrap().unwrap();
            let seen = if stale {
                job.owner_epoch - 1
            } else {
                job.owner_epoch
            };
            let decision = match kind {
                0 => Decision::AuthorizeRetry,
                1 => Decision::ReplayPolicy,
                2 => Decision::ResolveFailed {
                    error_code: "operator".into(),
                },
                _ => Decision::ResolveSucceeded {
                    result: "resolved".into(),
                    evidence: "provider console".into(),
                },
            };
            let _ = ledger
                .decide(
                    job_id,
                    seen,
                    &decision,
                    &Actor::Operator("op".into()),
                    "drill",
                )
                .await;
        }
        Op::Expire => {
            let _ = ledger.expire_if_due(job_id, &Actor::System).await;
        }
    }
}

/// Everything the invariants look at, read fresh from the database.
struct Snapshot {
    state: JobState,
    epoch: i64,
    attempt_count: i64,
    max_attempts: i64,
    result_ref: Option<String>,
    pending_attempt: Option<i64>,
    accepted: Vec<(String, i64)>,
    attempts: Vec<(i64, AttemptOutcome)>,
    events: Vec<(i64, String, serde_json::Value)>,
}

async fn snapshot(ledger: &Ledger, job_id: &str) -> Snapshot {
    let job = ledger.job(job_id).await.unwrap().unwrap();
    let accepted = sqlx::query(
        "SELECT result_ref, epoch FROM results WHERE job_id = $1 AND status = 'accepted'",
    )
    .bind(job_id)
    .fetch_all(ledger.read_pool())
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get::<String, _>("result_ref"), r.get::<i64, _>("epoch")))
    .collect();
    let attempts = ledger
        .attempts(job_id)
        .await
        .unwrap()
        .into_iter()
        .map(|a| (a.attempt_no, a.outcome))
        .collect();
    let events = ledger
        .events(job_id, 0, 1000)
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.seq, e.kind.to_string(), e.detail))
        .collect();
    Snapshot {
        state: job.state,
        epoch: job.owner_epoch,
        attempt_count: job.attempt_count,
        max_attempts: job.max_attempts,
        result_ref: job.result_ref,
        pending_attempt: job.pending_attempt,
        accepted,
        attempts,
        events,
    }
}

fn check(before: &Snapshot, after: &Snapshot, op: &Op) -> Result<(), String> {
    let ctx = |what: &str| format!("after {op:?}: {what}");
    // 1. At most one accepted result, ever; it came from the epoch that was current.
    if after.accepted.len() > 1 {
        return Err(ctx("two accepted results"));
    }
    if after.state == JobState::Succeeded {
        let [(result_ref, epoch)] = after.accepted.as_slice() else {
            return Err(ctx("succeeded without exactly one accepted result"));
        };
        if after.result_ref.as_deref() != Some(result_ref.as_str()) || *epoch != after.epoch {
            return Err(ctx("the accepted result is not from the current epoch"));
        }
    } else if !after.accepted.is_empty() {
        return Err(ctx("an accepted result on a job that did not succeed"));
    }
    // 2. Cumulative attempts: one record each, never above the budget.
    if after.attempt_count != after.attempts.len() as i64
        || after.attempt_count > after.max_attempts
    {
        return Err(ctx(
            "attempt count differs from records or exceeds the budget",
        ));
    }
    let pending: Vec<_> = after
        .attempts
        .iter()
        .filter(|(_, o)| *o == AttemptOutcome::Pending)
        .map(|(n, _)| *n)
        .collect();
    // The job's attempt in flight is its latest; a lapsed owner's rejected answer may have
    // marked it `stale_discarded` already, and recovery will still treat it as uncertain.
    if pending.len() > 1 || pending.iter().any(|n| Some(*n) != after.pending_attempt) {
        return Err(ctx("a pending attempt the job does not know"));
    }
    if let Some(n) = after.pending_attempt {
        let outcome = after
            .attempts
            .iter()
            .find(|(no, _)| *no == n)
            .map(|(_, o)| *o);
        if n != after.attempt_count
            || !matches!(
                outcome,
                Some(AttemptOutcome::Pending | AttemptOutcome::StaleDiscarded)
            )
        {
            return Err(ctx(
                "the job's attempt in flight is not its latest open attempt",
            ));
        }
    }
    // 3. Epochs only grow; every state change is on the table.
    if after.epoch < before.epoch {
        return Err(ctx("the epoch went backwards"));
    }
    if after.state != before.state && before.state.can_move_to(after.state).is_err() {
        return Err(ctx(&format!(
            "{} → {} is not on the table",
            before.state, after.state
        )));
    }
    // 4. A gap-free timeline; no attempt after an uncertain one without a decision between.
    let mut uncertain = false;
    for (i, (seq, kind, detail)) in after.events.iter().enumerate() {
        if *seq != i as i64 + 1 {
            return Err(ctx("the timeline has a gap"));
        }
        match kind.as_str() {
            "state_changed"
                if detail::read_as::<detail::StateChanged>(EventKind::StateChanged, detail)
                    .is_some_and(|d| d.to == "unknown") =>
            {
                uncertain = true
            }
            "decision_recorded" => uncertain = false,
            "attempt_started" if uncertain => {
                return Err(ctx(
                    "an attempt started after an uncertain one without a decision",
                ))
            }
            _ => {}
        }
    }
    Ok(())
}

/// Which interesting events the cases reached, so a generator that stops reaching them fails.
#[derive(Default)]
struct Coverage {
    accepted: std::sync::atomic::AtomicUsize,
    rejected: std::sync::atomic::AtomicUsize,
    unknown: std::sync::atomic::AtomicUsize,
    decided: std::sync::atomic::AtomicUsize,
    retried_after_decision: std::sync::atomic::AtomicUsize,
}

impl Coverage {
    fn record(&self, events: &[(i64, String, serde_json::Value)]) {
        use std::sync::atomic::Ordering::Relaxed;
        let has = |kind: &str| events.iter().any(|(_, k, _)| k == kind);
        let bump = |counter: &std::sync::atomic::AtomicUsize, hit: bool| {
            if hit {
                counter.fetch_add(1, Relaxed);
            }
        };
        bump(&self.accepted, has("result_accepted"));
        bump(&self.rejected, has("result_rejected"));
        bump(
            &self.unknown,
            events
                .iter()
                .any(|(_, k, d)| k == "state_changed" && d["to"] == "unknown"),
        );
        bump(&self.decided, has("decision_recorded"));
        let decided_at = events.iter().position(|(_, k, _)| k == "decision_recorded");
        bump(
            &self.retried_after_decision,
            decided_at.is_some_and(|i| events[i..].iter().any(|(_, k, _)| k == "attempt_started")),
        );
    }
}

async fn run_case(
    ledger: &Ledger,
    ops: &[Op],
    case: usize,
    policy: ReplayPolicy,
    coverage: &Coverage,
) -> Result<(), String> {
    let mut new = new_job(
        TENANT,
        &format!("case-{case}-{}", uuid::Uuid::now_v7()),
        json!(case),
    );
    new.max_attempts = 3;
    new.replay_policy = policy;
    let job_id = create(ledger, new).await;
    let mut owners = vec![OwnerView::default(); OWNERS];
    let mut before = snapshot(ledger, &job_id).await;
    for op in ops {
        step(ledger, &job_id, &mut owners, op).await;
        let after = snapshot(ledger, &job_id).await;
        check(&before, &after, op)?;
        before = after;
    }
    coverage.record(&before.events);
    Ok(())
}

/// A runtime, a migrated ledger on a fresh database, a case runner, a case counter and an
/// empty coverage record.
struct Harness {
    runtime: tokio::runtime::Runtime,
    ledger: Ledger,
    _db: crate::helpers::TestDb,
    runner: TestRunner,
    case: std::sync::atomic::AtomicUsize,
    coverage: Coverage,
}

fn harness(db: Db, cases: u32) -> Harness {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (ledger, _db) = runtime.block_on(fresh_ledger(db));
    let runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    Harness {
        runtime,
        ledger,
        _db,
        runner,
        case: Default::default(),
        coverage: Coverage::default(),
    }
}

fn run(db: Db, cases: u32) {
    let Harness {
        runtime,
        ledger,
        _db,
        mut runner,
        case,
        coverage,
    } = harness(db, cases);
    let strategy = (proptest::collection::vec(op(), 1..60), any::<bool>());
    runner
        .run(&strategy, |(ops, replay)| {
            let case = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let policy = if replay {
                ReplayPolicy::ReplayOnUnknown
            } else {
                ReplayPolicy::Manual
            };
            runtime
                .block_on(run_case(&ledger, &ops, case, policy, &coverage))
                .map_err(TestCaseError::fail)
        })
        .unwrap();
    use std::sync::atomic::Ordering::Relaxed;
    for (what, counter) in [
        ("an accepted result", &coverage.accepted),
        ("a rejected result", &coverage.rejected),
        ("an unknown job", &coverage.unknown),
        ("a decision", &coverage.decided),
        (
            "an attempt after a decision",
            &coverage.retried_after_decision,
        ),
    ] {
        eprintln!("COVER {what}: {}", counter.load(Relaxed));
        assert!(counter.load(Relaxed) > 0, "no case reached {what}");
    }
}

#[test]
fn random_interleavings_by_several_owners_keep_the_invariants_on_sqlite() {
    run(Db::Sqlite, 256);
}

#[test]
fn random_interleavings_by_several_owners_keep_the_invariants_on_postgres() {
    if crate::helpers::skip_postgres() {
        return;
    }
    run(Db::Postgres, 240);
}

/// Four jobs stepped in lockstep: each round runs one op on every job at once, so their
/// grouped writes (claims from deliveries, results, events) share commits while some of them
/// are refused. Every job's invariants are checked after every round.
async fn run_shared_case(
    ledger: &Ledger,
    rounds: &[[Op; 4]],
    case: usize,
    coverage: &Coverage,
) -> Result<(), String> {
    let mut jobs = Vec::with_capacity(4);
    for j in 0..4 {
        let mut new = new_job(
            TENANT,
            &format!("shared-{case}-{j}-{}", uuid::Uuid::now_v7()),
            json!([case, j]),
        );
        new.max_attempts = 3;
        jobs.push(create(ledger, new).await);
    }
    let mut owners = vec![vec![OwnerView::default(); OWNERS]; 4];
    let mut before = Vec::with_capacity(4);
    for job in &jobs {
        before.push(snapshot(ledger, job).await);
    }
    for round in rounds {
        let [o0, o1, o2, o3] = &mut owners[..] else {
            unreachable!()
        };
        tokio::join!(
            step(ledger, &jobs[0], o0, &round[0]),
            step(ledger, &jobs[1], o1, &round[1]),
            step(ledger, &jobs[2], o2, &round[2]),
            step(ledger, &jobs[3], o3, &round[3]),
        );
        for (j, job) in jobs.iter().enumerate() {
            let after = snapshot(ledger, job).await;
            check(&before[j], &after, &round[j]).map_err(|e| format!("job {j}: {e}"))?;
            before[j] = after;
        }
    }
    for snap in &before {
        coverage.record(&snap.events);
    }
    Ok(())
}

fn run_shared(db: Db, cases: u32) {
    let Harness {
        runtime,
        ledger,
        _db,
        mut runner,
        case,
        coverage,
    } = harness(db, cases);
    let round = [op(), op(), op(), op()];
    let strategy = proptest::collection::vec(round, 1..30);
    runner
        .run(&strategy, |rounds| {
            let case = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            runtime
                .block_on(run_shared_case(&ledger, &rounds, case, &coverage))
                .map_err(TestCaseError::fail)
        })
        .unwrap();
    let stats = ledger.group_stats();
    eprintln!("GROUP {stats:?}");
    // The lockstep rounds must actually have shared commits, with refused writes among
    // accepted ones: otherwise this test proves nothing about group commit.
    assert!(
        stats.writes > stats.commits,
        "no commit carried two writes: {stats:?}"
    );
    assert!(
        stats.mixed > 0,
        "no commit carried a write beside a refused one: {stats:?}"
    );
    use std::sync::atomic::Ordering::Relaxed;
    assert!(
        coverage.accepted.load(Relaxed) > 0,
        "no case reached an accepted result"
    );
    assert!(
        coverage.rejected.load(Relaxed) > 0,
        "no case reached a rejected result"
    );
}

#[test]
fn several_jobs_sharing_commits_with_refused_writes_among_them_keep_the_invariants_on_sqlite() {
    run_shared(Db::Sqlite, 96);
}

#[test]
fn several_jobs_sharing_commits_with_refused_writes_among_them_keep_the_invariants_on_postgres() {
    if crate::helpers::skip_postgres() {
        return;
    }
    run_shared(Db::Postgres, 96);
}
