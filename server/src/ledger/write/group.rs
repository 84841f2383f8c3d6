//! Group commit: the same write of many concurrent callers in one transaction.
//!
//! A caller hands its write to the ledger's lane and waits. A runner takes every write
//! waiting when it is free (up to a cap, of every kind), runs them as one transaction —
//! one multi-row statement per step, each row still its own compare-and-set — commits once
//! and answers each caller. While it commits, the next callers queue up: under load the batches
//! grow by themselves, and an idle ledger pays no added wait. Before taking the next batch, the
//! runner lets the callers it answered run, so that the write each makes next (a claim after
//! its receive, a result after its claim) is in that batch rather than the one after
//! ([`settle`]).
//!
//! A lane only ever takes the path where the write goes through. A row its statement did not
//! match (fenced out, lease gone, key already used) is answered "not here", and its caller
//! runs the one-job write, which re-checks it and explains a refusal exactly as before: a
//! refused write never fails its neighbours, and nothing about refusals lives here. A batch
//! that fails as a whole (a lost connection, a deadlock between two batches) answers every
//! caller the same way, and each retries alone.
//!
//! Only the batching lives here: each transition's batched form (`claim_many`, `accept_many`,
//! `create_many`; the embedded queue's `receive_many` and `delete_many`) sits beside its single
//! form in that transition's file, on what [`super::batch`] gives them all.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::pool::PoolConnection;
use sqlx::Any;
use tokio::sync::{mpsc, oneshot, Mutex};

use super::accept::AcceptOp;
use super::batch::{only_free, place, BatchFailed};
use super::claim::{ClaimDone, ClaimOp};
use super::create::CreateOp;
use super::{event_rows, insert_event_rows, EventRow, Reserved};
use crate::ledger::model::{Accepted, Job, NewEvent};
use crate::ledger::queue_store::{DeleteOp, ReceiveOp};
use crate::ledger::{Backend, Ledger, LedgerError, TakenMessage};

/// Most writes one transaction takes. SQLite's one writer commits one transaction at a time,
/// each ending in a flush to disk: under load its batches reach any cap, and a larger one
/// spreads each flush over more writes (10,000 jobs through the pipeline benchmark: 1,902
/// jobs/s at 128, 2,207 at 512). PostgreSQL's runners commit side by side, and their batches
/// (about 50 writes) stay under the cap.
fn most(backend: Backend) -> usize {
    match backend {
        Backend::Postgres => 128,
        Backend::Sqlite => 512,
    }
}
/// How long a runner whose commit got no answer keeps trying to read its mark.
const MARK_READ_BOUND: Duration = Duration::from_secs(10);

/// The error of a commit whose answer a fault made lose.
fn lost_answer() -> sqlx::Error {
    sqlx::Error::Io(std::io::Error::new(
        std::io::ErrorKind::ConnectionReset,
        "the connection was lost while committing",
    ))
}

type Waiting<Op, Out> = (Op, oneshot::Sender<Answer<Out>>);

/// A write's answer: it went through (`Some`), or it goes alone (`None`); an error when the
/// batch's commit got no answer and what it did could not be learned: the write may or may
/// not have happened, and trying it again could do it twice.
type Answer<Out> = Result<Option<Out>, LedgerError>;

/// Most turns a runner lets other tasks take after answering a commit's callers.
const SETTLE_TURNS: usize = 64;

/// Lets the callers a commit just answered run before the next batch is taken: each of them
/// usually writes again at once (a delivery's claim after its receive, the result after its
/// claim), and a write that arrives while the next transaction runs waits for the one after.
/// The runner yields to other tasks until two turns in a row add nothing to the waiting
/// writes, at most [`SETTLE_TURNS`] turns; an idle lane returns after two.
///
/// With the answered callers' next writes in the following commit, a job needs fewer
/// commits from its receive to its result, so each commit carries more jobs: in the pipeline
/// benchmark, about twice the writes a commit and 10–15 % more jobs a second on both
/// backends (`docs/benchmarks.md`).
async fn settle<Op, Out>(rx: &Mutex<mpsc::UnboundedReceiver<Waiting<Op, Out>>>) {
    let mut waiting = rx.lock().await.len();
    let mut still = 0;
    for _ in 0..SETTLE_TURNS {
        tokio::task::yield_now().await;
        let now = rx.lock().await.len();
        if now == waiting {
            still += 1;
            if still == 2 {
                return;
            }
        } else {
            still = 0;
            waiting = now;
        }
    }
}

/// Writes waiting for a group commit, and the runners that commit them.
pub(crate) struct Lane<Op, Out> {
    tx: mpsc::UnboundedSender<Waiting<Op, Out>>,
    stats: Arc<Counters>,
}

/// What group commit has done on one ledger so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupStats {
    /// Transactions committed for waiting writes.
    pub commits: u64,
    /// Writes they carried (through or not).
    pub writes: u64,
    /// Writes a commit did not take (refused, or a busy job) that then went alone.
    pub went_alone: u64,
    /// Commits that carried at least one write through beside one that went alone: a
    /// refused write did not fail its neighbours.
    pub mixed: u64,
    /// Batches that failed as a whole (every write in them then went alone).
    pub failed: u64,
    /// The most writes one batch carried.
    pub largest: u64,
}

#[derive(Default)]
struct Counters {
    commits: AtomicU64,
    writes: AtomicU64,
    went_alone: AtomicU64,
    mixed: AtomicU64,
    failed: AtomicU64,
    largest: AtomicU64,
}

impl Counters {
    fn snapshot(&self) -> GroupStats {
        GroupStats {
            commits: self.commits.load(Relaxed),
            writes: self.writes.load(Relaxed),
            went_alone: self.went_alone.load(Relaxed),
            mixed: self.mixed.load(Relaxed),
            failed: self.failed.load(Relaxed),
            largest: self.largest.load(Relaxed),
        }
    }
}

impl<Op: Send + 'static, Out: Send + 'static> Lane<Op, Out> {
    /// Starts `runners` runners of `run` on the ledger's pools. `run` is handed the runner's
    /// number and its batch's (counted from 1 on each runner), and answers each write of a
    /// batch, in order: `Some` when it went through, `None` when the caller must write alone.
    fn start<F, Fut>(ledger: &Ledger, runners: usize, run: F) -> Self
    where
        F: Fn(Ledger, Batch, Vec<Op>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<Option<Out>>, BatchFailed>> + Send,
    {
        Lane::start_on(ledger.clone(), most(ledger.backend()), runners, run)
    }

    /// [`Lane::start`] over any `ledger` its runs are handed, batches of at most `most`.
    fn start_on<L, F, Fut>(ledger: L, most: usize, runners: usize, run: F) -> Self
    where
        L: Clone + Send + 'static,
        F: Fn(L, Batch, Vec<Op>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<Option<Out>>, BatchFailed>> + Send,
    {
        let (tx, rx) = mpsc::unbounded_channel::<Waiting<Op, Out>>();
        let rx = Arc::new(Mutex::new(rx));
        let run = Arc::new(run);
        let stats = Arc::new(Counters::default());
        for runner in 0..runners {
            let (rx, run, ledger) = (Arc::clone(&rx), Arc::clone(&run), ledger.clone());
            let stats = Arc::clone(&stats);
            tokio::spawn(async move {
                let mut number = 0;
                loop {
                    let batch = {
                        let mut rx = rx.lock().await;
                        let Some(first) = rx.recv().await else { return };
                        // Sized once for what is waiting: grown a push at a time, a batch of
                        // hundreds of writes took fresh pages from the allocator each commit.
                        let mut batch = Vec::with_capacity(most.min(rx.len() + 1));
                        batch.push(first);
                        while batch.len() < most {
                            match rx.try_recv() {
                                Ok(next) => batch.push(next),
                                Err(_) => break,
                            }
                        }
                        batch
                    };
                    let (ops, replies): (Vec<Op>, Vec<_>) = batch.into_iter().unzip();
                    let n = ops.len() as u64;
                    stats.writes.fetch_add(n, Relaxed);
                    stats.largest.fetch_max(n, Relaxed);
                    number += 1;
                    let batch = Batch { runner, number };
                    match run(ledger.clone(), batch, ops).await {
                        Ok(outs) => {
                            let alone = outs.iter().filter(|out| out.is_none()).count() as u64;
                            stats.commits.fetch_add(1, Relaxed);
                            stats.went_alone.fetch_add(alone, Relaxed);
                            if alone > 0 && alone < n {
                                stats.mixed.fetch_add(1, Relaxed);
                            }
                            for (reply, out) in replies.into_iter().zip(outs) {
                                let _ = reply.send(Ok(out));
                            }
                            settle(&rx).await;
                        }
                        Err(BatchFailed::RolledBack(error)) => {
                            stats.failed.fetch_add(1, Relaxed);
                            stats.went_alone.fetch_add(n, Relaxed);
                            tracing::debug!(%error, "a group commit failed: its writes go alone");
                            for reply in replies {
                                let _ = reply.send(Ok(None));
                            }
                        }
                        Err(BatchFailed::Unknown(error)) => {
                            stats.failed.fetch_add(1, Relaxed);
                            tracing::warn!(
                                %error,
                                writes = n,
                                "a group commit got no answer and could not learn whether it \
                                 landed: its writes are answered as unknown"
                            );
                            for reply in replies {
                                let _ = reply.send(Err(LedgerError::TimedOut));
                            }
                        }
                    }
                }
            });
        }
        Lane { tx, stats }
    }

    /// Hands `op` to the lane: `None` means write it alone.
    pub(crate) async fn call(&self, op: Op) -> Answer<Out> {
        let (reply, answer) = oneshot::channel();
        if self.tx.send((op, reply)).is_err() {
            return Ok(None);
        }
        answer.await.unwrap_or(Ok(None))
    }
}

/// Tells each write's transition span the epoch and sequence numbers its job's events got in
/// this commit.
fn record_seqs<'a>(rows: &[EventRow], spans: impl Iterator<Item = (&'a str, &'a tracing::Span)>) {
    let mut by_job: std::collections::HashMap<&str, (i64, Vec<i64>)> =
        std::collections::HashMap::new();
    for row in rows {
        let entry = by_job
            .entry(row.job_id.as_str())
            .or_insert((row.epoch, Vec::new()));
        entry.0 = entry.0.max(row.epoch);
        entry.1.push(row.seq);
    }
    for (job_id, span) in spans {
        if let Some((epoch, seqs)) = by_job.get(job_id) {
            crate::telemetry::wrote(span, *epoch, seqs.iter().copied());
        }
    }
}

/// Group commits armed to lose their answer ([`Ledger::lose_commit_answers_at`]).
#[derive(Debug, Default)]
pub(crate) struct LostCommits {
    /// The next this many, each landing first when `landed`.
    next: u32,
    landed: bool,
    /// Then each at this rate, drawn in turn.
    rate: f64,
    drawn: u64,
}

/// Which batch of which runner a commit is.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Batch {
    runner: usize,
    number: i64,
}

/// A write waiting for the next group commit.
pub(crate) enum Op {
    Receive(ReceiveOp),
    Claim(ClaimOp),
    Accept(AcceptOp),
    Create(CreateOp),
    Event(String, NewEvent),
    Delete(DeleteOp),
}

/// What a write that went through gives back.
pub(crate) enum Done {
    Receive(Vec<TakenMessage>),
    Claim(Box<ClaimDone>),
    /// With whether the delivery it carried was deleted.
    Accept(Accepted, Option<bool>),
    Create(Box<Job>),
    Event,
    Delete(bool),
}

/// The group-commit lane of one ledger, started on first use: every kind of hot write shares
/// its transactions, so one commit (one WAL flush) carries claims, results, new jobs, events
/// and deletes together.
pub(crate) struct Groups {
    writes: Lane<Op, Done>,
    /// The connections its runners keep, given back when the ledger closes. Only the runners
    /// own them: a connection let go spawns its return to the pool, which needs the runtime,
    /// and the last handle on a ledger may be dropped outside it.
    kept: std::sync::Weak<std::sync::Mutex<KeptState>>,
}

impl Groups {
    /// A lane over `ledger`'s pools. On PostgreSQL three runners keep batches building while
    /// others commit, on connections they keep between commits ([`Kept`]); SQLite has one
    /// writer anyway.
    pub(crate) fn start(ledger: &Ledger) -> Groups {
        let runners = match ledger.backend() {
            Backend::Postgres => 3,
            Backend::Sqlite => 1,
        };
        let kept = Kept::default();
        let watched = Arc::downgrade(&kept.0);
        // Each runner's mark is its own row, under this lane's name and the runner's number.
        let lane = uuid::Uuid::now_v7().simple().to_string();
        let names: Arc<Vec<String>> =
            Arc::new((0..runners).map(|n| format!("{lane}/{n}")).collect());
        Groups {
            writes: Lane::start(ledger, runners, move |l, batch, ops| {
                let kept = kept.clone();
                let names = Arc::clone(&names);
                async move {
                    let mark = (names[batch.runner].as_str(), batch.number);
                    l.write_many(ops, &kept, mark).await
                }
            }),
            kept: watched,
        }
    }

    /// Gives back the connections the runners keep, and keeps none from now on: closing a
    /// pool waits for every connection out of it, and a kept one only came back with its
    /// runner's next commit.
    pub(crate) fn release(&self) {
        if let Some(kept) = self.kept.upgrade() {
            Kept(kept).close();
        }
    }
}

/// How long a group commit's connection is kept between commits before it goes back to the
/// pool, which tests a connection before handing it out again (the database may have
/// restarted) and closes it at the end of its lifetime.
const KEPT_FOR: Duration = Duration::from_secs(30);

/// The PostgreSQL connections the group commit's runners keep between commits, the last
/// returned taken first.
///
/// The pool hands out its idle connections in turn. With each commit taking one, every
/// connection of the pool took commits, each a database process running the same statements
/// with caches of its own: all sixteen in the pipeline benchmark, for three runners. Kept,
/// the commits run on as many processes as there are runners: about 7 % more jobs a second
/// in the benchmark's drained pass (`docs/benchmarks.md`). A connection goes back to the pool
/// after a commit that failed, when a runner next finds it kept for over [`KEPT_FOR`], and
/// when the ledger closes ([`Groups::release`]).
#[derive(Clone, Default)]
pub(crate) struct Kept(Arc<std::sync::Mutex<KeptState>>);

#[derive(Default)]
struct KeptState {
    connections: Vec<KeptConnection>,
    /// The ledger is closing: a connection goes back to the pool after each commit.
    closed: bool,
}

/// A kept connection, with when it was taken from the pool.
type KeptConnection = (PoolConnection<Any>, Instant);

impl Kept {
    fn state(&self) -> std::sync::MutexGuard<'_, KeptState> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The connection last kept, if it is still young enough.
    fn take(&self) -> Option<KeptConnection> {
        let mut state = self.state();
        while let Some((conn, since)) = state.connections.pop() {
            if since.elapsed() < KEPT_FOR {
                return Some((conn, since));
            }
        }
        None
    }

    fn keep(&self, conn: PoolConnection<Any>, since: Instant) {
        let mut state = self.state();
        if !state.closed {
            state.connections.push((conn, since));
        }
    }

    /// Gives every kept connection back to the pool, and keeps none after.
    fn close(&self) {
        let mut state = self.state();
        state.closed = true;
        state.connections.clear();
    }
}

impl Ledger {
    /// The lanes, started on first use (on the runtime of that first caller).
    fn groups(&self) -> Option<&Groups> {
        if !self.group_commit {
            return None;
        }
        Some(self.groups.get_or_init(|| {
            // The runners hold a ledger without lanes of its own: no cycle keeps them alive
            // once every handle on this one is gone.
            Groups::start(&self.without_groups())
        }))
    }

    /// What group commit has done on this ledger handle's lane so far (zeros without one).
    pub fn group_stats(&self) -> GroupStats {
        self.groups
            .get()
            .map(|g| g.writes.stats.snapshot())
            .unwrap_or_default()
    }

    /// `op` in the next group commit: `Some` when it went through, `None` when it goes alone
    /// (no lane, refused here, or its batch rolled back); an error when its batch's commit got
    /// no answer and whether it landed could not be learned.
    async fn grouped(&self, op: Op) -> Answer<Done> {
        match self.groups() {
            Some(groups) => groups.writes.call(op).await,
            None => Ok(None),
        }
    }

    pub(crate) async fn grouped_receive(&self, op: ReceiveOp) -> Answer<Vec<TakenMessage>> {
        Ok(match self.grouped(Op::Receive(op)).await? {
            Some(Done::Receive(taken)) => Some(taken),
            _ => None,
        })
    }

    pub(crate) async fn grouped_claim(&self, op: ClaimOp) -> Answer<ClaimDone> {
        Ok(match self.grouped(Op::Claim(op)).await? {
            Some(Done::Claim(done)) => Some(*done),
            _ => None,
        })
    }

    pub(crate) async fn grouped_accept(&self, op: AcceptOp) -> Answer<(Accepted, Option<bool>)> {
        Ok(match self.grouped(Op::Accept(op)).await? {
            Some(Done::Accept(accepted, deleted)) => Some((accepted, deleted)),
            _ => None,
        })
    }

    pub(crate) async fn grouped_create(&self, op: CreateOp) -> Answer<Job> {
        Ok(match self.grouped(Op::Create(op)).await? {
            Some(Done::Create(job)) => Some(*job),
            _ => None,
        })
    }

    pub(crate) async fn grouped_delete(&self, op: DeleteOp) -> Answer<bool> {
        Ok(match self.grouped(Op::Delete(op)).await? {
            Some(Done::Delete(deleted)) => Some(deleted),
            _ => None,
        })
    }

    /// Appends one event that changes no state, in the next group commit (the worker's
    /// transport facts). Its sequence number is not returned.
    pub async fn note_event(&self, job_id: &str, event: NewEvent) -> Result<(), LedgerError> {
        let op = Op::Event(job_id.to_owned(), event.clone());
        if let Some(Done::Event) = self.grouped(op).await? {
            return Ok(());
        }
        self.record_event(job_id, &event).await.map(|_| ())
    }

    /// Makes the next `commits` group commits lose their answer, as a connection lost while
    /// committing does: each either commits first (`landed`) or is rolled back. Only in test
    /// builds.
    #[cfg(feature = "sabotage")]
    pub fn lose_commit_answers(&self, commits: u32, landed: bool) {
        let mut lost = self.lost_commits.lock().expect("lost commits");
        lost.next = commits;
        lost.landed = landed;
    }

    /// Makes group commits lose their answer at `rate` (0 to 1), half of them after
    /// committing and half before: the chaos soak's fault, refused in production and
    /// against a ledger marked so.
    pub fn lose_commit_answers_at(&self, rate: f64) {
        self.lost_commits.lock().expect("lost commits").rate = rate;
    }

    /// Whether this commit's answer is to be lost, and whether it lands first.
    fn commit_fault(&self) -> Option<bool> {
        let mut lost = self.lost_commits.lock().expect("lost commits");
        if lost.next > 0 {
            lost.next -= 1;
            return Some(lost.landed);
        }
        if lost.rate > 0.0 {
            lost.drawn += 1;
            let draw = crate::job::draw("lost commit answer", lost.drawn);
            if draw < lost.rate {
                return Some(draw < lost.rate / 2.0);
            }
        }
        None
    }

    /// Whether the batch `number` of `runner` committed, read from the runner's mark once the
    /// database answers, within [`MARK_READ_BOUND`] however long each read waits: `None`
    /// when it could not be learned. The read waits
    /// for the batch's own transaction to end, if the database is still finishing it.
    async fn batch_landed(&self, runner: &str, number: i64) -> Option<bool> {
        let until = Instant::now() + MARK_READ_BOUND;
        loop {
            // A read that waits on the batch's transaction waits within the bound too.
            let left = until.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.read_mark(runner)).await {
                Ok(Ok(found)) => return Some(found == Some(number)),
                Ok(Err(error)) if Instant::now() < until => {
                    tracing::debug!(%error, "reading a group commit's mark");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                _ => return None,
            }
        }
    }

    async fn read_mark(&self, runner: &str) -> Result<Option<i64>, LedgerError> {
        let mut tx = self.begin_write().await?;
        // A first mark still being inserted holds the key, one being updated holds its row:
        // either way the read below waits until that transaction has ended.
        sqlx::query(
            "INSERT INTO commit_marks (runner, batch, at) VALUES ($1, 0, 0) \
             ON CONFLICT (runner) DO NOTHING",
        )
        .bind(runner)
        .execute(&mut *tx)
        .await?;
        let locking = match self.backend {
            Backend::Postgres => " FOR UPDATE",
            Backend::Sqlite => "",
        };
        let sql = format!("SELECT batch FROM commit_marks WHERE runner = $1{locking}");
        let found: Option<i64> = sqlx::query_scalar(&sql)
            .bind(runner)
            .fetch_optional(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(found)
    }

    /// One group commit: every kind's writes in one transaction, their job rows locked first
    /// in one order so that concurrent commits queue instead of deadlocking.
    ///
    /// The batch leaves its mark (`mark`: the runner's name and the batch's number) in the
    /// same transaction. A `COMMIT` that gets no answer is not taken for a failure: the mark
    /// says whether the batch landed, and only a batch that did not is tried again, a write at
    /// a time.
    async fn write_many(
        &self,
        ops: Vec<Op>,
        kept: &Kept,
        mark: (&str, i64),
    ) -> Result<Vec<Option<Done>>, BatchFailed> {
        let mut claims = Vec::new();
        let mut accepts = Vec::new();
        let mut creates = Vec::new();
        let mut events = Vec::new();
        let mut deletes = Vec::new();
        let mut receives = Vec::new();
        // Where each kind's answers go back to.
        let mut slots: [Vec<usize>; 6] = Default::default();
        for (i, op) in ops.into_iter().enumerate() {
            match op {
                Op::Receive(op) => (receives.push(op), slots[5].push(i)),
                Op::Claim(op) => (claims.push(op), slots[0].push(i)),
                Op::Accept(op) => (accepts.push(op), slots[1].push(i)),
                Op::Create(op) => (creates.push(op), slots[2].push(i)),
                Op::Event(job_id, event) => (events.push((job_id, event)), slots[3].push(i)),
                Op::Delete(op) => (deletes.push(op), slots[4].push(i)),
            };
        }
        let n = slots.iter().map(Vec::len).sum();
        // On PostgreSQL a connection the runners kept (a runner never gives its commit up, so
        // its `BEGIN` needs no task of its own, unlike `begin_write`'s). SQLite's one writer
        // goes back to its pool after each commit, for the writes that go alone.
        let mut conn = match self.backend {
            Backend::Postgres => Some(match kept.take() {
                Some(kept) => kept,
                None => (self.writer.acquire().await?, Instant::now()),
            }),
            Backend::Sqlite => None,
        };
        let mut tx = match conn.as_mut() {
            Some((conn, _)) => sqlx::Connection::begin(&mut **conn).await?,
            None => self.begin_write().await?,
        };
        let ids = claims
            .iter()
            .map(|op| op.job_id.as_str())
            .chain(accepts.iter().map(|op| op.owner.job_id()))
            .chain(events.iter().map(|(job_id, _)| job_id.as_str()));
        let mut out: Vec<Option<Done>> = (0..n).map(|_| None).collect();
        if let Some(free) = self.lock_free_jobs(&mut tx, ids).await? {
            // A job another transaction holds (a dispatcher marking its send, an operator's
            // decision) is left out: its write goes alone and waits there, not here.
            (claims, slots[0]) = only_free(claims, &mut slots[0], &free, |op| &op.job_id);
            (accepts, slots[1]) = only_free(accepts, &mut slots[1], &free, |op| op.owner.job_id());
            (events, slots[3]) = only_free(events, &mut slots[3], &free, |op| &op.0);
        }
        // The events of every write in it, inserted together last: about three a write (a
        // claim's, an accept's with its delete's, a new job's two).
        let mut events_out: Vec<EventRow> = Vec::with_capacity(3 * n);
        let mut answer = |kind: usize, done: Vec<Option<Done>>| {
            for (&i, done) in slots[kind].iter().zip(done) {
                out[i] = done;
            }
        };
        if !claims.is_empty() {
            let done = self.claim_many(&mut tx, &claims, &mut events_out).await?;
            answer(
                0,
                done.into_iter()
                    .map(|d| d.map(|d| Done::Claim(Box::new(d))))
                    .collect(),
            );
        }
        // Accepted results whose delivery goes in this transaction: the accept's index and
        // the place of its delete's event.
        let mut deleting: Vec<(usize, Reserved)> = Vec::new();
        let mut accepted: Vec<Option<Accepted>> = Vec::new();
        let mut accepted_gone: Vec<Option<bool>> = accepts.iter().map(|_| None).collect();
        if !accepts.is_empty() {
            (accepted, deleting) = self.accept_many(&mut tx, &accepts, &mut events_out).await?;
        }
        if !creates.is_empty() {
            let done = self.create_many(&mut tx, &creates, &mut events_out).await?;
            answer(
                2,
                done.into_iter()
                    .map(|d| d.map(|j| Done::Create(Box::new(j))))
                    .collect(),
            );
        }
        if !events.is_empty() {
            // Their rows were locked (or skipped) above.
            // An event for a job that does not exist goes alone, to be told so.
            let placed = self
                .record_events_locked(&mut tx, &events, &mut events_out)
                .await?;
            answer(
                3,
                placed
                    .into_iter()
                    .map(|p| p.then_some(Done::Event))
                    .collect(),
            );
        }
        if !deletes.is_empty() || !deleting.is_empty() {
            // Plain deletes and accepted results' deliveries in one statement.
            let plain = deletes.len();
            deletes.extend(deleting.iter().map(|&(i, _)| {
                let delete = accepts[i].delete.as_ref().expect("an accept that deletes");
                delete.message.0.clone()
            }));
            let mut done = self.delete_many(&mut tx, &deletes).await?;
            let folded = done.split_off(plain);
            let events: Vec<(usize, Reserved, Vec<NewEvent>)> = deleting
                .iter()
                .zip(folded)
                .map(|(&(i, r), deleted)| {
                    let delete = accepts[i].delete.as_ref().expect("an accept that deletes");
                    let deleted = deleted == Some(true);
                    accepted_gone[i] = Some(deleted);
                    let event = if deleted {
                        &delete.deleted
                    } else {
                        &delete.not_deleted
                    };
                    (i, r, vec![event.clone()])
                })
                .collect();
            events_out.extend(event_rows(&place(&accepts, &events, |op| {
                op.owner.job_id()
            })));
            answer(4, done.into_iter().map(|d| d.map(Done::Delete)).collect());
        }
        if !accepts.is_empty() {
            let done = accepted
                .into_iter()
                .zip(accepted_gone)
                .map(|(a, gone)| a.map(|a| Done::Accept(a, gone)));
            answer(1, done.collect());
        }
        let received = self.receive_many(&mut tx, &receives).await?;
        answer(
            5,
            received
                .into_iter()
                .map(|r| Some(Done::Receive(r)))
                .collect(),
        );
        insert_event_rows(&self.sql, &mut tx, &events_out).await?;
        // The transition spans of the writes that went through here, told once committed.
        let traced: Vec<(&str, &tracing::Span)> = if crate::telemetry::enabled() {
            let through = |slots: &[usize]| -> Vec<bool> {
                slots.iter().map(|&i| out[i].is_some()).collect()
            };
            let (c, a, n) = (through(&slots[0]), through(&slots[1]), through(&slots[2]));
            claims
                .iter()
                .zip(c)
                .filter(|(_, went)| *went)
                .map(|(op, _)| (op.job_id.as_str(), &op.span))
                .chain(
                    accepts
                        .iter()
                        .zip(a)
                        .filter(|(_, went)| *went)
                        .map(|(op, _)| (op.owner.job_id(), &op.span)),
                )
                .chain(
                    creates
                        .iter()
                        .zip(n)
                        .filter(|(_, went)| *went)
                        .map(|(op, _)| (op.job_id.as_str(), &op.span)),
                )
                .collect()
        } else {
            Vec::new()
        };
        sqlx::query(
            "INSERT INTO commit_marks (runner, batch, at) VALUES ($1, $2, $3) \
             ON CONFLICT (runner) DO UPDATE SET batch = excluded.batch, at = excluded.at",
        )
        .bind(mark.0)
        .bind(mark.1)
        .bind(chrono::Utc::now().timestamp_micros())
        .execute(&mut *tx)
        .await?;
        let committed = match self.commit_fault() {
            None => tx.commit().await,
            Some(true) => tx.commit().await.and(Err(lost_answer())),
            Some(false) => {
                drop(tx);
                Err(lost_answer())
            }
        };
        match committed {
            Ok(()) => {
                if let Some((conn, since)) = conn {
                    kept.keep(conn, since);
                }
                record_seqs(&events_out, traced.into_iter());
                Ok(out)
            }
            Err(error) => {
                // The connection goes back to the pool, which tests it before handing it out.
                drop(conn);
                let landed = self.batch_landed(mark.0, mark.1).await;
                tracing::warn!(
                    %error,
                    writes = n,
                    landed = ?landed,
                    "a group commit got no answer; its mark says whether it landed"
                );
                match landed {
                    Some(true) => Ok(out),
                    Some(false) => Err(BatchFailed::RolledBack(error.into())),
                    None => Err(BatchFailed::Unknown(error.into())),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Eight callers write twice each, the second write as soon as the first is answered, and
    /// one more caller's write arrives while the first commit runs. The callers' second writes
    /// go in the next commit beside it, not in one after it.
    #[tokio::test]
    async fn callers_answered_by_a_commit_write_again_in_the_next_one() {
        type Write = (usize, u8);
        let batches: Arc<std::sync::Mutex<Vec<Vec<Write>>>> = Arc::default();
        let seen = Arc::clone(&batches);
        let lane: Lane<Write, ()> = Lane::start_on((), 64, 1, move |(), _, ops: Vec<Write>| {
            let n = ops.len();
            seen.lock().unwrap().push(ops);
            async move {
                // The transaction takes a while.
                tokio::time::sleep(Duration::from_millis(5)).await;
                Ok(vec![Some(()); n])
            }
        });
        let lane = Arc::new(lane);
        let mut callers = tokio::task::JoinSet::new();
        for i in 0..8 {
            let lane = Arc::clone(&lane);
            callers.spawn(async move {
                lane.call((i, 1)).await.unwrap().unwrap();
                lane.call((i, 2)).await.unwrap().unwrap();
            });
        }
        let late = Arc::clone(&lane);
        callers.spawn(async move {
            tokio::time::sleep(Duration::from_millis(2)).await;
            late.call((8, 1)).await.unwrap().unwrap();
        });
        while let Some(joined) = callers.join_next().await {
            joined.unwrap();
        }
        let batches = batches.lock().unwrap().clone();
        let sorted = |mut b: Vec<Write>| {
            b.sort_unstable();
            b
        };
        let firsts: Vec<Write> = (0..8).map(|i| (i, 1)).collect();
        let mut seconds: Vec<Write> = (0..8).map(|i| (i, 2)).collect();
        seconds.push((8, 1));
        assert_eq!(
            batches.into_iter().map(sorted).collect::<Vec<_>>(),
            vec![firsts, sorted(seconds)]
        );
    }
}
