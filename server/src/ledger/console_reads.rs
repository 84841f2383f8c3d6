//! Reads for the console: timelines folded into runs, key events for the swimlane chart,
//! activity buckets for the overview, jobs by creation time and lookup. Every query is bounded
//! and served by an index; none loads a whole timeline into memory to show one page.

use serde_json::Value;
use sqlx::Row;

use super::model::Event;
use super::read::{event_from_row, job_from_row, JOB_COLUMNS};
use super::{Backend, Job, Ledger, LedgerError};
use crate::job::EventKind;

/// Whether a count takes in drill jobs (those with a `drill_run`). The overview and the
/// metrics leave them apart: a drill's jobs are its evidence, made to fail, be rejected or
/// end `unknown`, and counted with the service's work they would raise its failure figures
/// and alerts after every drill. The jobs list counts them, since it lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drills {
    Counted,
    Apart,
}

/// What a run of the timeline is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunKind {
    /// Successful lease and visibility renewals, which alternate while a call runs.
    Renewed,
    /// Refusal cycles: every event of the epochs whose attempt the provider refused.
    Throttled,
    Event(EventKind),
}

impl RunKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RunKind::Renewed => "renewed",
            RunKind::Throttled => "throttled",
            RunKind::Event(kind) => kind.as_str(),
        }
    }
}

impl TryFrom<String> for RunKind {
    type Error = crate::job::ParseEventKindError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        match s.as_str() {
            "renewed" => Ok(RunKind::Renewed),
            // A run of refusal cycles (an event of kind `throttled` alone is one too).
            "throttled" => Ok(RunKind::Throttled),
            _ => s.parse().map(RunKind::Event),
        }
    }
}

/// A run of consecutive events of one kind on a job's timeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub kind: RunKind,
    pub first_seq: i64,
    pub last_seq: i64,
    pub first_at: i64,
    pub last_at: i64,
}

impl Run {
    pub fn len(&self) -> i64 {
        self.last_seq - self.first_seq + 1
    }

    pub fn is_empty(&self) -> bool {
        self.len() <= 0
    }
}

/// Event kinds that repeat while a call runs; the swimlane draws them in buckets.
pub const RENEWAL_KINDS: [EventKind; 4] = [
    EventKind::VisibilityRenewed,
    EventKind::VisibilityRenewalFailed,
    EventKind::LeaseRenewed,
    EventKind::LeaseRenewalFailed,
];

/// Transport facts that can repeat many times (a storm of redeliveries); the swimlane draws
/// them one by one when there are few, in buckets when there are many.
pub const TRANSPORT_KINDS: [EventKind; 5] = [
    EventKind::DeliveryReceived,
    EventKind::DuplicateSuppressed,
    EventKind::DeliveryDeferred,
    EventKind::DeliveryAckedTerminal,
    EventKind::Dispatched,
];

/// A count of one kind of thing (an event kind, a terminal state) in one time bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bucket<K> {
    pub kind: K,
    pub bucket: i64,
    pub count: i64,
}

/// `'a', 'b'` for an `IN` list of kinds (constants of the program, never input).
pub(super) fn kind_list(kinds: &[EventKind]) -> String {
    kinds
        .iter()
        .map(|k| format!("'{}'", k.as_str()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// An event's kind on the folded timeline (columns `kind` and `epoch`, or `alias.kind`,
/// `alias.epoch` of an events row): every event of an epoch whose attempt the provider
/// refused — the claim, the attempt, its refusal, the delete, the send again and the next
/// receive — counts as one kind (`throttled`), so that a run of refusal cycles folds into one
/// row; successful lease and visibility renewals, which alternate while a call runs, count as
/// one kind (`renewed`). Failed renewals never join, nor does a move along the fallback route
/// (`provider_fallback`), which stays in view. The refused epochs are found through
/// `attempts_throttled`, one probe an event.
fn folded_kind(alias: &str) -> String {
    let (kind, epoch, job) = if alias.is_empty() {
        ("kind".to_owned(), "epoch".to_owned(), "job_id".to_owned())
    } else {
        (
            format!("{alias}.kind"),
            format!("{alias}.epoch"),
            format!("{alias}.job_id"),
        )
    };
    format!(
        "CASE WHEN {kind} = 'provider_fallback' THEN {kind} \
         WHEN EXISTS (SELECT 1 FROM attempts t WHERE t.job_id = {job} \
         AND t.epoch = {epoch} AND t.outcome = 'throttled') THEN 'throttled' \
         WHEN {kind} IN ('lease_renewed', 'visibility_renewed') \
         THEN 'renewed' ELSE {kind} END"
    )
}

/// On PostgreSQL, whether the event (`seq`, `kind`) after `before_seq`, `before_kind` starts
/// a run, the kinds folded first.
const PG_STARTS: &str = "(before_seq IS NULL OR before_seq <> seq - 1 OR before_kind <> kind)";

/// The events of job `$1` after sequence number `$2` that start a run (a run: consecutive
/// events of one folded kind), oldest first, at most `$3`: `seq`, `kind` (folded), `at`, and
/// the sequence number and time of the event before it (`before_seq`, `before_at`), where the
/// previous run ends. Each backend walks the job's events in key order from `$2` only as far
/// as the runs asked for, never the whole timeline: PostgreSQL through a window that looks one
/// event back (its window runs row by row over the index), SQLite by looking up each event's
/// predecessor (it would compute a window over every event first).
fn run_starts_after(backend: Backend) -> String {
    match backend {
        Backend::Postgres => format!(
            "SELECT seq, kind, at, before_seq, (SELECT b.at FROM events b \
             WHERE b.job_id = $1 AND b.seq = s.before_seq) AS before_at \
             FROM (SELECT seq, kind, at, LAG(kind) OVER w AS before_kind, \
             LAG(seq) OVER w AS before_seq FROM (SELECT seq, at, {k} AS kind FROM events \
             WHERE job_id = $1 AND seq >= $2) AS f \
             WINDOW w AS (ORDER BY seq)) AS s WHERE seq > $2 AND {starts} \
             ORDER BY seq LIMIT $3",
            k = folded_kind(""),
            starts = PG_STARTS,
        ),
        Backend::Sqlite => format!(
            "SELECT e.seq, {e} AS kind, e.at, \
             (SELECT b.seq FROM events b WHERE b.job_id = e.job_id AND b.seq < e.seq \
              ORDER BY b.seq DESC LIMIT 1) AS before_seq, \
             (SELECT b.at FROM events b WHERE b.job_id = e.job_id AND b.seq < e.seq \
              ORDER BY b.seq DESC LIMIT 1) AS before_at \
             FROM events e LEFT JOIN events p ON p.job_id = e.job_id AND p.seq = e.seq - 1 \
             WHERE e.job_id = $1 AND e.seq > $2 AND (p.seq IS NULL OR {p} <> {e}) \
             ORDER BY e.seq LIMIT $3",
            e = folded_kind("e"),
            p = folded_kind("p"),
        ),
    }
}

/// The sequence number of the run start `$3` starts back from event `$2` of job `$1` (0: the
/// start of the run holding `$2`), walking back from `$2` as far as that. `exists` adds the
/// condition that event `$2` is there.
fn run_start_back(backend: Backend, exists: bool) -> String {
    let there = if exists {
        " AND EXISTS (SELECT 1 FROM events x WHERE x.job_id = $1 AND x.seq = $2)"
    } else {
        ""
    };
    match backend {
        Backend::Postgres => format!(
            "SELECT seq FROM (SELECT seq, kind, LEAD(kind) OVER w AS before_kind, \
             LEAD(seq) OVER w AS before_seq FROM (SELECT seq, {k} AS kind FROM events \
             WHERE job_id = $1 AND seq <= $2) AS f \
             WINDOW w AS (ORDER BY seq DESC)) AS s WHERE {PG_STARTS}{there} \
             ORDER BY seq DESC LIMIT 1 OFFSET $3",
            k = folded_kind(""),
        ),
        Backend::Sqlite => format!(
            "SELECT e.seq FROM events e \
             LEFT JOIN events p ON p.job_id = e.job_id AND p.seq = e.seq - 1 \
             WHERE e.job_id = $1 AND e.seq <= $2 AND (p.seq IS NULL OR {p} <> {e}){there} \
             ORDER BY e.seq DESC LIMIT 1 OFFSET $3",
            e = folded_kind("e"),
            p = folded_kind("p"),
        ),
    }
}

/// Where a run starts, and where the run before it ends.
struct RunStart {
    kind: RunKind,
    seq: i64,
    at: i64,
    before: Option<(i64, i64)>,
}

fn run_start_from_row(row: &sqlx::any::AnyRow) -> Result<RunStart, LedgerError> {
    let kind: String = row.try_get("kind")?;
    let before_seq: Option<i64> = row.try_get("before_seq")?;
    let before_at: Option<i64> = row.try_get("before_at")?;
    Ok(RunStart {
        kind: RunKind::try_from(kind).map_err(|e| LedgerError::Corrupt(e.to_string()))?,
        seq: row.try_get("seq")?,
        at: row.try_get("at")?,
        before: before_seq.zip(before_at),
    })
}

/// A recursive `t(tenant, n)`: every tenant that has jobs, in order, the `n`th at `n`, each
/// found by one probe of a tenant-led index (a skip scan), so it stays fast over millions of
/// jobs; with `most`, it stops at that many.
fn tenants_skip_scan(most: Option<&str>) -> String {
    let stop = most.map(|m| format!(" AND n < {m}")).unwrap_or_default();
    format!(
        "WITH RECURSIVE t(tenant, n) AS ( \
            SELECT MIN(tenant), 1 FROM jobs \
            UNION ALL \
            SELECT (SELECT MIN(tenant) FROM jobs WHERE tenant > t.tenant), n + 1 \
            FROM t WHERE t.tenant IS NOT NULL{stop} \
         )"
    )
}

/// The ids of the jobs whose idempotency key is `$1`, in any tenant ([`Ledger::find_jobs`]):
/// the tenants by a skip scan, then the key in each through its unique index, one probe a
/// tenant. No index holds the keys alone: it would be one more entry written at every change
/// of a job's state (migration 0017). A tenant without the key answers `NULL`.
pub fn find_key_statement() -> String {
    format!(
        "{} SELECT (SELECT k.job_id FROM jobs k \
         WHERE k.tenant = t.tenant AND k.idempotency_key = $1) AS job_id \
         FROM t WHERE t.tenant IS NOT NULL",
        tenants_skip_scan(None)
    )
}

/// Drill jobs per state, of one tenant (`$1`) or all (`$1` null), found by `jobs_drill_run`: a
/// drill's jobs are few. Grouped by an expression, not the column: grouped by `state`, SQLite
/// (on its default estimates) walks `jobs_state_id` — every job, in state order, to save a
/// sort — and reads each job's row to test `drill_run`: 1.2 s over 1,000,000 jobs.
pub const DRILL_JOBS_BY_STATE: &str = "SELECT state || '' AS state, COUNT(*) AS n FROM jobs \
    WHERE drill_run IS NOT NULL AND ($1 IS NULL OR tenant = $1) GROUP BY state || ''";

/// Rows of `(kind column, bucket, n)` as buckets, each kind parsed into `K`.
fn buckets_from<K>(
    rows: &[sqlx::any::AnyRow],
    kind_col: &str,
) -> Result<Vec<Bucket<K>>, LedgerError>
where
    K: TryFrom<String>,
    K::Error: std::fmt::Display,
{
    rows.iter()
        .map(|r| {
            let kind: String = r.try_get(kind_col)?;
            Ok(Bucket {
                kind: K::try_from(kind).map_err(|e| LedgerError::Corrupt(e.to_string()))?,
                bucket: r.try_get("bucket")?,
                count: r.try_get("n")?,
            })
        })
        .collect()
}

impl Ledger {
    /// Up to `limit` runs starting after sequence number `after`, oldest first.
    pub async fn timeline_runs(
        &self,
        job_id: &str,
        after: i64,
        limit: u32,
    ) -> Result<Vec<Run>, LedgerError> {
        // One start more than the runs asked for: where it starts, the last of them ends.
        let rows = sqlx::query(&run_starts_after(self.backend()))
            .bind(job_id)
            .bind(after)
            .bind(i64::from(limit) + 1)
            .fetch_all(&self.reader)
            .await?;
        let mut starts = rows
            .iter()
            .map(run_start_from_row)
            .collect::<Result<Vec<_>, _>>()?;
        let end = if starts.len() > limit as usize {
            starts.pop().and_then(|next| next.before)
        } else if starts.is_empty() {
            return Ok(Vec::new());
        } else {
            // The last run ends with the job's last event.
            self.last_event(job_id).await?
        };
        let ends: Vec<Option<(i64, i64)>> = starts
            .iter()
            .skip(1)
            .map(|s| s.before)
            .chain(std::iter::once(end))
            .collect();
        starts
            .iter()
            .zip(ends)
            .map(|(start, end)| {
                let (last_seq, last_at) = end.ok_or_else(|| {
                    LedgerError::Corrupt(format!("a run of job {job_id} has no last event"))
                })?;
                Ok(Run {
                    kind: start.kind,
                    first_seq: start.seq,
                    last_seq,
                    first_at: start.at,
                    last_at,
                })
            })
            .collect()
    }

    /// The sequence number and time of the job's last event.
    pub async fn last_event(&self, job_id: &str) -> Result<Option<(i64, i64)>, LedgerError> {
        let row =
            sqlx::query("SELECT seq, at FROM events WHERE job_id = $1 ORDER BY seq DESC LIMIT 1")
                .bind(job_id)
                .fetch_optional(&self.reader)
                .await?;
        Ok(row
            .map(|r| Ok::<_, sqlx::Error>((r.try_get("seq")?, r.try_get("at")?)))
            .transpose()?)
    }

    /// The first sequence number of the run `back` runs before the one starting after
    /// `after` (for "earlier events" links), if there is one.
    pub async fn timeline_run_before(
        &self,
        job_id: &str,
        after: i64,
        back: u32,
    ) -> Result<Option<i64>, LedgerError> {
        Ok(sqlx::query_scalar(&run_start_back(self.backend(), false))
            .bind(job_id)
            .bind(after)
            .bind(i64::from(back.saturating_sub(1)))
            .fetch_optional(&self.reader)
            .await?)
    }

    /// The first sequence number of the run holding event `seq`.
    pub async fn timeline_run_of(
        &self,
        job_id: &str,
        seq: i64,
    ) -> Result<Option<i64>, LedgerError> {
        Ok(sqlx::query_scalar(&run_start_back(self.backend(), true))
            .bind(job_id)
            .bind(seq)
            .bind(0_i64)
            .fetch_optional(&self.reader)
            .await?)
    }

    /// The job's events with these sequence numbers, in order: a page's unfolded runs,
    /// wherever they lie between its folded ones, in one statement.
    pub async fn events_numbered(
        &self,
        job_id: &str,
        seqs: &[i64],
    ) -> Result<Vec<Event>, LedgerError> {
        if seqs.is_empty() {
            return Ok(Vec::new());
        }
        // The numbers as one JSON array, looked up in the key one by one.
        let numbers = match self.backend() {
            Backend::Postgres => {
                "= ANY(ARRAY(SELECT CAST(value AS BIGINT) \
                 FROM json_array_elements_text(CAST($2 AS JSON))))"
            }
            Backend::Sqlite => "IN (SELECT CAST(value AS BIGINT) FROM json_each($2))",
        };
        let sql = format!(
            "SELECT job_id, seq, at, kind, epoch, actor, message_id, receive_count, handle_hash, \
             attempt_no, deadline_left_ms, detail FROM events \
             WHERE job_id = $1 AND seq {numbers} ORDER BY seq"
        );
        let rows = sqlx::query(&sql)
            .bind(job_id)
            .bind(serde_json::to_string(seqs).map_err(|e| LedgerError::Corrupt(e.to_string()))?)
            .fetch_all(&self.reader)
            .await?;
        rows.iter().map(event_from_row).collect()
    }

    /// How many events the job has.
    pub async fn event_count(&self, job_id: &str) -> Result<i64, LedgerError> {
        Ok(
            sqlx::query_scalar("SELECT next_event_seq - 1 FROM jobs WHERE job_id = $1")
                .bind(job_id)
                .fetch_optional(&self.reader)
                .await?
                .unwrap_or(0),
        )
    }

    /// Events not of the `except` kinds (for the swimlane chart), up to `limit`.
    pub async fn key_events(
        &self,
        job_id: &str,
        except: &[EventKind],
        limit: u32,
    ) -> Result<Vec<Event>, LedgerError> {
        let kinds = kind_list(except);
        let sql = format!(
            "SELECT job_id, seq, at, kind, epoch, actor, message_id, receive_count, handle_hash, \
             attempt_no, deadline_left_ms, detail FROM events \
             WHERE job_id = $1 AND kind NOT IN ({kinds}) ORDER BY seq LIMIT $2"
        );
        let rows = sqlx::query(&sql)
            .bind(job_id)
            .bind(i64::from(limit))
            .fetch_all(&self.reader)
            .await?;
        rows.iter().map(event_from_row).collect()
    }

    /// How many events of `kinds` the job has, counted only up to `cap` (so a job with a
    /// storm of them is not walked to its end to learn that there are many).
    pub async fn kind_count_capped(
        &self,
        job_id: &str,
        kinds: &[EventKind],
        cap: i64,
    ) -> Result<i64, LedgerError> {
        let kinds = kind_list(kinds);
        let sql = format!(
            "SELECT COUNT(*) FROM (SELECT 1 FROM events WHERE job_id = $1 AND kind IN ({kinds}) \
             LIMIT $2) AS c"
        );
        Ok(sqlx::query_scalar(&sql)
            .bind(job_id)
            .bind(cap)
            .fetch_one(&self.reader)
            .await?)
    }

    /// Events of `kind` on one job numbered `first..=last`.
    pub async fn kind_count_between(
        &self,
        job_id: &str,
        kind: EventKind,
        first: i64,
        last: i64,
    ) -> Result<i64, LedgerError> {
        Ok(sqlx::query_scalar(
            "SELECT COUNT(*) FROM events WHERE job_id = $1 AND seq BETWEEN $2 AND $3 \
             AND kind = $4",
        )
        .bind(job_id)
        .bind(first)
        .bind(last)
        .bind(kind.as_str())
        .fetch_one(&self.reader)
        .await?)
    }

    /// Events of `kinds` on one job counted in `width`-microsecond buckets from `start`.
    pub async fn kind_buckets(
        &self,
        job_id: &str,
        kinds: &[EventKind],
        start: i64,
        width: i64,
    ) -> Result<Vec<Bucket<EventKind>>, LedgerError> {
        let kinds = kind_list(kinds);
        let sql = format!(
            "SELECT kind, (at - $2) / $3 AS bucket, COUNT(*) AS n FROM events \
             WHERE job_id = $1 AND at >= $2 AND kind IN ({kinds}) GROUP BY kind, (at - $2) / $3"
        );
        let rows = sqlx::query(&sql)
            .bind(job_id)
            .bind(start)
            .bind(width.max(1))
            .fetch_all(&self.reader)
            .await?;
        buckets_from(&rows, "kind")
    }

    /// Jobs per state, counting each state only up to `cap` (an index range scan each, run
    /// concurrently, so it stays fast over millions of jobs); `true` marks a count that
    /// reached the cap. Drill jobs left apart are counted on their own and taken off: a
    /// condition on `drill_run` would cost each counted row a read of the table, where the
    /// index alone answers.
    pub async fn count_by_state_capped(
        &self,
        tenant: Option<&str>,
        cap: i64,
        drills: Drills,
    ) -> Result<Vec<(crate::job::JobState, i64, bool)>, LedgerError> {
        let mut counting = tokio::task::JoinSet::new();
        for (i, state) in crate::job::JobState::ALL.into_iter().enumerate() {
            let (pool, tenant) = (self.reader.clone(), tenant.map(str::to_owned));
            counting.spawn(async move {
                let n: Result<i64, sqlx::Error> = match tenant {
                    Some(t) => sqlx::query_scalar(
                        "SELECT COUNT(*) FROM (SELECT 1 FROM jobs WHERE tenant = $1 AND state = $2 LIMIT $3) AS c",
                    )
                    .bind(t)
                    .bind(state.as_str())
                    .bind(cap + 1)
                    .fetch_one(&pool)
                    .await,
                    None => sqlx::query_scalar(
                        "SELECT COUNT(*) FROM (SELECT 1 FROM jobs WHERE state = $1 LIMIT $2) AS c",
                    )
                    .bind(state.as_str())
                    .bind(cap + 1)
                    .fetch_one(&pool)
                    .await,
                };
                (i, state, n)
            });
        }
        let drill_jobs = match drills {
            Drills::Counted => Vec::new(),
            Drills::Apart => self.drill_jobs_by_state(tenant).await?,
        };
        let mut out = Vec::with_capacity(7);
        while let Some(joined) = counting.join_next().await {
            let (i, state, n) =
                joined.map_err(|e| LedgerError::Invalid(format!("count task: {e}")))?;
            let n = n?;
            let (n, over) = if n > cap {
                (cap, true)
            } else {
                (super::read::without(n, &drill_jobs, state), false)
            };
            out.push((i, state, n, over));
        }
        out.sort_by_key(|c| c.0);
        Ok(out
            .into_iter()
            .map(|(_, s, n, over)| (s, n, over))
            .collect())
    }

    /// The oldest `ready` job outside drills (of `tenant`, or of any): its id and how long it
    /// has waited, in microseconds by the database clock.
    pub async fn oldest_ready(
        &self,
        tenant: Option<&str>,
    ) -> Result<Option<(String, i64)>, LedgerError> {
        let query = match tenant {
            Some(tenant) => sqlx::query_as(&self.sql.oldest_ready_of).bind(tenant),
            None => sqlx::query_as(&self.sql.oldest_ready),
        };
        Ok(query.fetch_optional(&self.reader).await?)
    }

    /// Drill jobs per state ([`DRILL_JOBS_BY_STATE`]).
    pub async fn drill_jobs_by_state(
        &self,
        tenant: Option<&str>,
    ) -> Result<Vec<(crate::job::JobState, i64)>, LedgerError> {
        let rows = sqlx::query(DRILL_JOBS_BY_STATE)
            .bind(tenant)
            .fetch_all(&self.reader)
            .await?;
        super::read::state_counts(&rows)
    }

    /// How many drill jobs the ledger holds (those the overview leaves apart).
    pub async fn drill_job_count(&self) -> Result<i64, LedgerError> {
        Ok(self
            .drill_jobs_by_state(None)
            .await?
            .iter()
            .map(|d| d.1)
            .sum())
    }

    /// Finds jobs by exact job id, or by idempotency key in any tenant ([`find_key_statement`]),
    /// at most 50.
    pub async fn find_jobs(&self, needle: &str) -> Result<Vec<Job>, LedgerError> {
        let keyed: Vec<Option<String>> = sqlx::query_scalar(&find_key_statement())
            .bind(needle)
            .fetch_all(&self.reader)
            .await?;
        let mut ids = vec![needle.to_owned()];
        ids.extend(keyed.into_iter().flatten().filter(|id| id != needle));
        ids.truncate(50);
        let marks: Vec<String> = (1..=ids.len()).map(|n| format!("${n}")).collect();
        let sql = format!(
            "SELECT {JOB_COLUMNS} FROM jobs WHERE job_id IN ({}) ORDER BY job_id DESC",
            marks.join(", ")
        );
        let mut query = sqlx::query(&sql);
        for id in &ids {
            query = query.bind(id.as_str());
        }
        let rows = query.fetch_all(&self.reader).await?;
        rows.iter().map(job_from_row).collect()
    }

    /// Every tenant that has jobs, in order, at most `limit` ([`tenants_skip_scan`]).
    pub async fn job_tenants(&self, limit: u32) -> Result<Vec<String>, LedgerError> {
        let sql = format!(
            "{} SELECT tenant FROM t WHERE tenant IS NOT NULL",
            tenants_skip_scan(Some("$1"))
        );
        Ok(sqlx::query_scalar(&sql)
            .bind(i64::from(limit))
            .fetch_all(&self.reader)
            .await?)
    }

    /// Dead letters of an embedded queue, read without receiving them.
    pub async fn embedded_dead_letters(
        &self,
        dlq: &str,
        limit: u32,
    ) -> Result<Vec<DeadLetter>, LedgerError> {
        Ok(sqlx::query_as(
            "SELECT m.message_id, m.body, COALESCE(m.dead_receive_count, m.receive_count) AS receive_count, \
             m.sent_at, COALESCE(m.dead_at, m.sent_at) AS dead_at, m.dead_from, \
             (SELECT r.reason FROM rejected_messages r WHERE r.message_id = m.message_id \
              ORDER BY r.id DESC LIMIT 1) AS refused \
             FROM queue_messages m WHERE m.queue = $1 ORDER BY m.id DESC LIMIT $2",
        )
        .bind(dlq)
        .bind(i64::from(limit))
        .fetch_all(&self.reader)
        .await?)
    }

    /// Every event of a job, read a thousand at a time, held whole: for checks that need the
    /// whole timeline at once (the soak's). Exports stream theirs page by page instead.
    pub async fn all_events(&self, job_id: &str) -> Result<Vec<Event>, LedgerError> {
        let mut out = Vec::new();
        let mut after = 0;
        loop {
            let page = self.events(job_id, after, 1000).await?;
            let Some(last) = page.last() else { break };
            after = last.seq;
            let full = page.len() == 1000;
            out.extend(page);
            if !full {
                break;
            }
        }
        Ok(out)
    }
}

/// A short, single-line rendering of an event's detail for tables.
pub fn detail_text(detail: &Value) -> String {
    match detail {
        Value::Object(map) if map.is_empty() => String::new(),
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => format!("{k}={s}"),
                other => format!("{k}={other}"),
            })
            .collect::<Vec<_>>()
            .join(" "),
        other => other.to_string(),
    }
}

impl Ledger {
    /// Removes one dead letter from the embedded dead-letter queue `dlq`; its body if it was
    /// there.
    pub async fn drop_dead_letter(
        &self,
        dlq: &str,
        message_id: &str,
    ) -> Result<Option<String>, LedgerError> {
        Ok(sqlx::query_scalar(
            "DELETE FROM queue_messages WHERE queue = $1 AND message_id = $2 RETURNING body",
        )
        .bind(dlq)
        .bind(message_id)
        .fetch_optional(&self.writer)
        .await?)
    }

    /// One dead letter's body, if it is in the embedded dead-letter queue `dlq`.
    pub async fn dead_letter_body(
        &self,
        dlq: &str,
        message_id: &str,
    ) -> Result<Option<String>, LedgerError> {
        Ok(sqlx::query_scalar(
            "SELECT body FROM queue_messages WHERE queue = $1 AND message_id = $2",
        )
        .bind(dlq)
        .bind(message_id)
        .fetch_optional(&self.reader)
        .await?)
    }
}

/// A message in an embedded dead-letter queue, as the console shows it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct DeadLetter {
    pub message_id: String,
    pub body: String,
    /// How often it was received before it was moved.
    pub receive_count: i64,
    /// When it was first sent.
    pub sent_at: i64,
    /// When it was moved to the dead-letter queue.
    pub dead_at: i64,
    /// The queue it was moved from.
    pub dead_from: Option<String>,
    /// Why a worker refused it, when one did (a message that is not a job message).
    pub refused: Option<String>,
}
