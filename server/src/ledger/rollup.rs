//! The overview's activity counts, from an hourly rollup where it can.
//!
//! A week's charts would otherwise count every event and every finished job of the week on
//! each view. Hours that closed more than [`SETTLE`] ago cannot gain events or finished jobs
//! (both are stamped with the database clock when written), so their counts are computed
//! once, the first time a chart needs them, into `activity_hours`; a chart then sums a few
//! hundred rows for its closed hours and counts only the open stretch since live. Computing is
//! idempotent (`ON CONFLICT DO NOTHING`), so two processes that need the same hour at once
//! agree. Windows whose buckets do not fall on hour boundaries (5-minute buckets, zones with a
//! half-hour offset) are counted live.

use std::collections::{BTreeSet, HashMap};

use sqlx::Row;

use super::console_reads::kind_list;
use super::{Backend, Ledger, LedgerError};
use crate::job::EventKind;

/// An hour, in µs.
pub const HOUR: i64 = 3_600_000_000;
/// How long after an hour closes before it is rolled up: commits stamped just before the
/// hour's end have long landed by then.
const SETTLE: i64 = 5 * 60 * 1_000_000;

/// The event kinds the overview counts, each its own series. The partial index
/// `events_activity_kind_at` (migration 0015) lists the same kinds in the same order: SQLite
/// uses it only for a condition written as its own.
const ACTIVITY_KINDS: [EventKind; 7] = [
    EventKind::JobCreated,
    EventKind::DuplicateSuppressed,
    EventKind::ResultRejected,
    EventKind::VisibilityRenewalFailed,
    EventKind::LeaseRenewalFailed,
    EventKind::DeleteFailed,
    EventKind::Throttled,
];

/// Upper bounds (µs) of the time-to-terminal bins; the last bin is open.
const TOOK_BOUNDS: [i64; 5] = [
    1_000_000,
    10_000_000,
    60_000_000,
    600_000_000,
    3_600_000_000,
];

/// Series names besides the event kinds.
pub const REDELIVERED: &str = "redelivered";
/// `finished:<state>` for each terminal state.
pub const FINISHED: &str = "finished:";

/// What the overview draws for a window: counts per series per bucket, and the histograms.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Activity {
    /// Per series (an event kind, [`REDELIVERED`], `finished:<state>`), a count per bucket.
    pub series: HashMap<String, Vec<i64>>,
    /// Finished jobs by time from creation to terminal: under 1 s, 10 s, 1 min, 10 min, 1 h, and longer.
    pub took: Vec<i64>,
    /// Finished jobs by attempts used, 0 to 5 (5 or more).
    pub tries: Vec<i64>,
    /// Where the rolled-up hours end and live counting starts.
    pub rolled_until: i64,
}

impl Activity {
    fn new(count: usize) -> Activity {
        Activity {
            series: HashMap::with_capacity(count.min(16)),
            took: vec![0; TOOK_BOUNDS.len() + 1],
            tries: vec![0; 6],
            rolled_until: 0,
        }
    }

    fn add(&mut self, count: usize, series: &str, bucket: i64, n: i64) {
        let v = self
            .series
            .entry(series.to_owned())
            .or_insert_with(|| vec![0; count]);
        if let Some(slot) = usize::try_from(bucket).ok().and_then(|i| v.get_mut(i)) {
            *slot += n;
        }
    }

    /// Rows of `(series, bin, k, n)`, `k` the bucket: the histograms by bin, the rest by bucket.
    fn absorb(&mut self, count: usize, rows: &[sqlx::any::AnyRow]) -> Result<(), LedgerError> {
        for r in rows {
            let series: String = r.try_get("series")?;
            let (bin, bucket, n): (i64, i64, i64) =
                (r.try_get("bin")?, r.try_get("k")?, r.try_get("n")?);
            match series.as_str() {
                "took" => add_bin(&mut self.took, bin, n),
                "tries" => add_bin(&mut self.tries, bin, n),
                _ => self.add(count, &series, bucket, n),
            }
        }
        Ok(())
    }

    /// The counts of one series (zeros when nothing happened).
    pub fn of(&self, series: &str, count: usize) -> Vec<i64> {
        self.series
            .get(series)
            .cloned()
            .unwrap_or_else(|| vec![0; count])
    }
}

/// Time from creation to terminal, as the bin of [`TOOK_BOUNDS`] it falls in.
fn took_bin() -> String {
    let mut case = String::from("CASE");
    for (i, b) in TOOK_BOUNDS.iter().enumerate() {
        case.push_str(&format!(" WHEN terminal_at - created_at < {b} THEN {i}"));
    }
    case.push_str(&format!(" ELSE {} END", TOOK_BOUNDS.len()));
    case
}

/// Attempts that may have run the model (refusals the provider confirmed are not counted).
const TRIES: &str = "CASE WHEN budget_used >= 5 THEN 5 ELSE budget_used END";

/// Leaves out the events of drill jobs, which the overview keeps apart ([`super::Drills`]).
/// The drill jobs are few and found by `jobs_drill_run`: PostgreSQL hashes them once for an
/// anti-join (spilling to disk rather than probing row by row, however many there are);
/// SQLite builds the list once and probes it, about twice as fast there as a look-up of each
/// event's job.
fn not_drill(backend: Backend) -> &'static str {
    match backend {
        Backend::Postgres => {
            "NOT EXISTS (SELECT 1 FROM jobs d WHERE d.job_id = events.job_id \
             AND d.drill_run IS NOT NULL)"
        }
        Backend::Sqlite => "job_id NOT IN (SELECT job_id FROM jobs WHERE drill_run IS NOT NULL)",
    }
}

/// Every series' counts as rows of `(k, series, bin, n)`: events and finished jobs whose time
/// column `c` satisfies `range(c)`, grouped by `key(c)`, drill jobs left out. Rolling hours up
/// and counting the open stretch live are this one statement with different keys and ranges.
fn counts(
    backend: Backend,
    key: impl Fn(&str) -> String,
    range: impl Fn(&str) -> String,
) -> String {
    let (ke, re) = (
        key("at"),
        format!("{} AND {}", range("at"), not_drill(backend)),
    );
    let (kj, rj) = (
        key("terminal_at"),
        format!("{} AND drill_run IS NULL", range("terminal_at")),
    );
    let (kinds, took) = (kind_list(&ACTIVITY_KINDS), took_bin());
    format!(
        "SELECT {ke} AS k, kind AS series, 0 AS bin, COUNT(*) AS n FROM events \
         WHERE {re} AND kind IN ({kinds}) GROUP BY {ke}, kind \
         UNION ALL SELECT {ke}, '{REDELIVERED}', 0, COUNT(*) FROM events \
         WHERE {re} AND kind = 'delivery_received' AND receive_count > 1 GROUP BY {ke} \
         UNION ALL SELECT {kj}, '{FINISHED}' || state, 0, COUNT(*) FROM jobs \
         WHERE {rj} GROUP BY {kj}, state \
         UNION ALL SELECT {kj}, 'took', {took}, COUNT(*) FROM jobs \
         WHERE {rj} GROUP BY {kj}, {took} \
         UNION ALL SELECT {kj}, 'tries', {TRIES}, COUNT(*) FROM jobs \
         WHERE {rj} GROUP BY {kj}, {TRIES}"
    )
}

/// Activity counted from the records for rolling hours up: `[$1, $2)`, keyed by hour.
fn hourly_counts(backend: Backend) -> String {
    counts(
        backend,
        |c| format!("{c} - {c} % {HOUR}"),
        |c| format!("{c} >= $1 AND {c} < $2"),
    )
}

/// Activity counted from the records live: from `$3`, keyed by bucket of `$2` µs from `$1`.
fn live_counts(backend: Backend) -> String {
    counts(
        backend,
        |c| format!("({c} - $1) / $2"),
        |c| format!("{c} >= $3"),
    )
}

/// The two statements that count activity from the records, as rolling hours up and counting
/// the open stretch live run them (`$1`…`$3` unbound): for the suite's check that they read
/// events through the partial indexes made for them.
#[doc(hidden)]
pub fn activity_statements(backend: Backend) -> [String; 2] {
    [hourly_counts(backend), live_counts(backend)]
}

impl Ledger {
    /// The overview's counts for `count` buckets of `width` µs from `origin`, up to now.
    pub async fn activity(
        &self,
        origin: i64,
        width: i64,
        count: usize,
    ) -> Result<Activity, LedgerError> {
        let width = width.max(1);
        let now = self.now_us().await?;
        let end = origin + width * count as i64;
        let aligned = origin % HOUR == 0 && width % HOUR == 0;
        let rolled_until = if aligned {
            ((now - SETTLE).div_euclid(HOUR) * HOUR).clamp(origin, end)
        } else {
            origin
        };
        let mut activity = Activity::new(count);
        activity.rolled_until = rolled_until;
        if rolled_until > origin {
            self.roll_up(origin, rolled_until).await?;
            self.add_rolled(&mut activity, origin, width, count, rolled_until)
                .await?;
        }
        self.add_live(&mut activity, origin, width, count, rolled_until)
            .await?;
        Ok(activity)
    }

    /// Makes sure every hour of `[from, to)` (hour-aligned) is in the rollup.
    pub async fn roll_up(&self, from: i64, to: i64) -> Result<(), LedgerError> {
        let done: BTreeSet<i64> =
            sqlx::query("SELECT hour FROM activity_hours_done WHERE hour >= $1 AND hour < $2")
                .bind(from)
                .bind(to)
                .fetch_all(&self.reader)
                .await?
                .iter()
                .map(|r| r.try_get::<i64, _>("hour"))
                .collect::<Result<_, _>>()?;
        // Contiguous runs of hours not yet rolled up.
        let mut runs: Vec<(i64, i64)> = Vec::new();
        let mut hour = from;
        while hour < to {
            if !done.contains(&hour) {
                match runs.last_mut() {
                    Some(run) if run.1 == hour => run.1 = hour + HOUR,
                    _ => runs.push((hour, hour + HOUR)),
                }
            }
            hour += HOUR;
        }
        for (a, b) in runs {
            let mut tx = self.begin_write().await?;
            let sql = format!(
                "INSERT INTO activity_hours (hour, series, bin, n) SELECT k, series, bin, n \
                 FROM ({}) c WHERE true ON CONFLICT DO NOTHING",
                hourly_counts(self.backend())
            );
            sqlx::query(&sql).bind(a).bind(b).execute(&mut *tx).await?;
            let mut hour = a;
            while hour < b {
                sqlx::query(
                    "INSERT INTO activity_hours_done (hour) VALUES ($1) ON CONFLICT DO NOTHING",
                )
                .bind(hour)
                .execute(&mut *tx)
                .await?;
                hour += HOUR;
            }
            tx.commit().await?;
        }
        Ok(())
    }

    async fn add_rolled(
        &self,
        activity: &mut Activity,
        origin: i64,
        width: i64,
        count: usize,
        until: i64,
    ) -> Result<(), LedgerError> {
        let rows = sqlx::query(
            "SELECT series, bin, (hour - $1) / $2 AS k, CAST(SUM(n) AS BIGINT) AS n \
             FROM activity_hours WHERE hour >= $1 AND hour < $3 \
             GROUP BY series, bin, (hour - $1) / $2",
        )
        .bind(origin)
        .bind(width)
        .bind(until)
        .fetch_all(&self.reader)
        .await?;
        activity.absorb(count, &rows)
    }

    async fn add_live(
        &self,
        activity: &mut Activity,
        origin: i64,
        width: i64,
        count: usize,
        from: i64,
    ) -> Result<(), LedgerError> {
        let sql = live_counts(self.backend());
        let rows = sqlx::query(&sql)
            .bind(origin)
            .bind(width)
            .bind(from)
            .fetch_all(&self.reader)
            .await?;
        activity.absorb(count, &rows)
    }
}

fn add_bin(bins: &mut [i64], bin: i64, n: i64) {
    if let Some(slot) = usize::try_from(bin).ok().and_then(|i| bins.get_mut(i)) {
        *slot += n;
    }
}
