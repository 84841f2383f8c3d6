//! The statement catalogue: every statement whose text depends on the backend, by name,
//! rendered once per backend when the ledger connects.
//!
//! A template names the few things the dialects do differently with a token — `{now}` the
//! database clock in microseconds, `{least}` and `{greatest}` the two-argument minimum and
//! maximum, `{for_update}` a row
//! lock where the backend has one (SQLite serialises writers anyway), `{skip_locked}` the same
//! lock skipping rows another transaction holds, `{now_once}` the clock read once for the whole
//! statement, `{no_index}` before a column a backend must not look the rows up by (SQLite's
//! unary `+`, its documented way to keep the planner off an index). They are filled in once,
//! at connect; nothing
//! is templated per call. A *batched* statement is written with one row group (`?` marks each
//! of its parameters), and both backends take its rows as one JSON array in one statement text
//! (see [`Batched`]).
//! Statements that read the same on both backends and need no clock stay beside the function
//! that runs them.
//!
//! A write that names its job by key states the job's expected state as `(state …) IS TRUE`,
//! which means the same in a `WHERE` (a null is not true either way). Written bare, `state =
//! 'running'` implies the predicates of the partial indexes the reaper scans by
//! (`jobs_deadline_due`, and SQLite's `jobs_lease_due`), and a PostgreSQL planner whose statistics count
//! few live jobs — a fresh ledger, one just vacuumed, one whose finished jobs outnumber a
//! burst of new ones — then walks every live job in such an index to find the one it names
//! (1.7 ms instead of 0.02 with 10,000 jobs waiting). Wrapped, the condition implies nothing,
//! and the key is the only way in; `a_write_by_key_looks_its_row_up_by_key_whatever_the_statistics_say`
//! holds every such statement to that.
//!
//! A scan for what is due now compares with `{now_once}`. PostgreSQL's clock is a volatile
//! function, evaluated per row, which an index scan cannot take as a bound: compared with it
//! bare, each receive poll walked every message in flight and each reaper pass every lease
//! still held. Read once (a sub-select PostgreSQL runs before the scan), it bounds the index
//! walk; `a_scan_for_what_is_due_stops_at_the_clock` holds those scans to that. The one
//! exception is PostgreSQL's scan for expired leases, which has no index on the lease's
//! expiry (so that a lease renewal stays on its page, migration 0013) and reads the running
//! jobs only.
//!
//! The suite's `every_statement_of_the_catalogue_prepares` prepares each one, without
//! parameter types, against migrated PostgreSQL and SQLite databases: a parameter whose type
//! PostgreSQL cannot infer from its context (a `VALUES` row) is cast.

use super::dialect::Backend;

/// Fills the dialect tokens of a template for `backend`.
pub(crate) fn render(backend: Backend, template: &str) -> Box<str> {
    let (now, now_once, (least, greatest), for_update, skip_locked, no_index) = match backend {
        Backend::Postgres => (
            "fl_now_us()",
            "(SELECT fl_now_us())",
            ("LEAST", "GREATEST"),
            " FOR UPDATE",
            " FOR UPDATE SKIP LOCKED",
            "",
        ),
        // SQLite differs by necessity: no `now()` in microseconds, `MIN` is the scalar minimum,
        // and there are no row locks (one writer at a time holds the whole file).
        Backend::Sqlite => (
            "CAST(unixepoch('subsec') * 1000000 AS INTEGER)",
            "CAST(unixepoch('subsec') * 1000000 AS INTEGER)",
            ("MIN", "MAX"),
            "",
            "",
            "+",
        ),
    };
    template
        .replace("{now}", now)
        .replace("{now_once}", now_once)
        .replace("{least}", least)
        .replace("{greatest}", greatest)
        .replace("{for_update}", for_update)
        .replace("{skip_locked}", skip_locked)
        .replace("{no_index}", no_index)
        .into_boxed_str()
}

/// A statement over any number of rows of a call: one statement text for any number of rows,
/// which take one parameter after the shared ones — a JSON array of keys for a list of keys
/// (`… IN (?)`), of arrays for rows of several values (a `VALUES` list). Bind through
/// `bind_keys!` and `bind_rows!`.
///
/// Each length of a list written out was a statement text of its own: on PostgreSQL about a
/// thousand of them under load against a cache of a hundred prepared statements a connection,
/// so nearly every batched statement was parsed and planned again (a sixth of PostgreSQL's time
/// in the pipeline benchmark); on SQLite, whose one writer thread bounds the whole ledger, each
/// batch's statements were parsed again and every value bound on its own (the group commit of
/// the pipeline benchmark ran 12–18 % faster with the rows as one JSON array each).
///
/// On SQLite every parameter is anonymous (`?`), in the order of binding: SQLite looks a
/// numbered parameter's name up by walking the list of names. The shared parameters therefore
/// appear once each, in order, before the rows (a unit test holds every batched statement to
/// that).
#[derive(Debug)]
pub(crate) struct Batched {
    sql: Box<str>,
    /// Whether its one parameter after the shared ones is a JSON array of keys (`bind_keys!`)
    /// rather than of rows (`bind_rows!`).
    keys: bool,
    /// On SQLite, the same rows as a `VALUES` list of a fixed number of rows, each row's values
    /// bound one by one: `(rows, text)`, fewest rows first (see [`DIRECT_ROWS`]).
    direct: Vec<(usize, Box<str>)>,
    /// Whether each row of those lists ends in a marker (see `direct_rows`).
    marked: bool,
}

/// How a batch's rows are bound to a `VALUES` list: its number of rows (the batch padded to
/// it), and whether each row ends in a marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Listed {
    pub(crate) rows: usize,
    pub(crate) marked: bool,
}

/// The lengths of SQLite's `VALUES` lists, a batch's rows padded to the first that holds
/// them (a batch longer than the last goes as one JSON array).
///
/// SQLite reads a JSON array of rows element by element: each row is turned back into text
/// and parsed again for its values. In the group commit of the pipeline benchmark that was
/// about a third of the writer thread's time. Rows bound one value at a time skip it; a few
/// fixed lengths keep the texts few, so each is prepared once a connection, and a padding row
/// (every value `NULL`, its last one too) is dropped by the statement itself. A group commit
/// of the pipeline benchmark carries about 80 claims and 80 results: 128 rows hold them
/// without walking three times as many padding rows as real ones.
pub(crate) const DIRECT_ROWS: [usize; 5] = [16, 64, 128, 256, 1024];

/// The most rows of a list joined to a table (`FROM (VALUES …) AS v WHERE t.key = v.…`): from
/// 256 rows on, SQLite plans a scan of the whole table against the list instead of one lookup
/// a row, so a longer batch of those goes as one JSON array.
const JOINED_ROWS: usize = 128;

/// A list of keys (`… IN (` one parameter `)`) reading its keys from the JSON array `$first`,
/// on PostgreSQL through `fl_keys`, estimated at one key (migration 0018): each key is looked
/// up in an index once a table holds a thousand rows. As `= ANY` of an array (estimated at ten
/// keys) such a table was still scanned whole, and a connection keeps the plan it settles on
/// while a fresh ledger's tables are small.
fn json_keys(backend: Backend, head: &str, row: &str, tail: &str, first: usize) -> Option<String> {
    let key_type = match row {
        "?" => "TEXT",
        "CAST(? AS BIGINT)" => "BIGINT",
        _ => return None,
    };
    let head = head.strip_suffix(" IN (")?;
    let tail = tail.strip_prefix(')')?;
    Some(match backend {
        Backend::Postgres => format!(
            "{head} IN (SELECT CAST(k.value AS {key_type}) \
             FROM fl_keys(CAST(CAST(${first} AS TEXT) AS JSONB)) AS k(value)){tail}"
        ),
        Backend::Sqlite => {
            format!("{head} IN (SELECT CAST(value AS {key_type}) FROM json_each(${first})){tail}")
        }
    })
}

/// A batched template whose rows are a `VALUES` list — `INSERT … VALUES (…), (…)`,
/// `FROM (VALUES (…), (…)) AS v` or `IN (VALUES (…), (…))` — with its rows read from one JSON
/// array of arrays (`$first`) instead: each row's `k`-th parameter becomes the row's `k`-th
/// element, its expressions (casts, the clock) kept, its columns named as `VALUES` names them.
fn json_rows(backend: Backend, head: &str, row: &str, tail: &str, first: usize) -> Option<String> {
    let exprs = row_exprs(row)?;
    let mut k = 0;
    let columns: Vec<String> = exprs
        .iter()
        .enumerate()
        .map(|(n, expr)| {
            let mut out = String::new();
            for part in expr.split_inclusive('?') {
                match part.strip_suffix('?') {
                    Some(text) => {
                        out.push_str(text);
                        out.push_str(&format!("(r.value ->> {k})"));
                        k += 1;
                    }
                    None => out.push_str(part),
                }
            }
            format!("{out} AS column{}", n + 1)
        })
        .collect();
    let rows = match backend {
        Backend::Postgres => format!("fl_rows(CAST(CAST(${first} AS TEXT) AS JSONB)) AS r(value)"),
        Backend::Sqlite => format!("json_each(${first}) AS r"),
    };
    let select = format!("SELECT {} FROM {rows}", columns.join(", "));
    // SQLite reads `ON` after `INSERT … SELECT … FROM t` as the start of a join unless a
    // `WHERE` ends the select.
    let select = match backend {
        Backend::Postgres => select,
        Backend::Sqlite if !head.ends_with("(VALUES ") => format!("{select} WHERE true"),
        Backend::Sqlite => select,
    };
    in_place_of_values(head, &select, tail)
}

/// A row template's expressions, split at its top-level commas.
fn row_exprs(row: &str) -> Option<Vec<&str>> {
    let inner = row.strip_prefix('(')?.strip_suffix(')')?;
    let mut exprs = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                exprs.push(inner[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    exprs.push(inner[start..].trim());
    Some(exprs)
}

/// Whether a template's rows are inserted (`INSERT …`): its `VALUES` lists mark their rows.
fn inserted(head: &str) -> bool {
    head.trim_start().starts_with("INSERT")
}

/// Whether a template's rows are joined to a table (`FROM (VALUES …) AS v`), not inserted
/// (`INSERT … VALUES`) or matched as a list (`IN (VALUES …)`).
fn joined(head: &str) -> bool {
    head.ends_with("(VALUES ") && !head.ends_with(" IN (VALUES ")
}

/// The statement with `select` where its template lists `VALUES`.
fn in_place_of_values(head: &str, select: &str, tail: &str) -> Option<String> {
    if let Some(head) = head.strip_suffix("(VALUES ") {
        let tail = tail.strip_prefix(')')?;
        return Some(format!("{head}({select}){tail}"));
    }
    let head = head.strip_suffix("VALUES ")?;
    Some(format!("{head}{select}{tail}"))
}

/// A batched template of rows on SQLite as a `VALUES` list of `rows` rows. A padding row
/// binds `NULL` to every value. Where the rows are inserted, each row has one more value after
/// its own (1, and `NULL` only in padding), and a select around the list drops the rows
/// without it; where they are matched against a table's rows (`FROM (VALUES …) AS v WHERE
/// t.key = v.column1`, `(a, b) IN (VALUES …)`), a padding row matches none and the list stays
/// as the template wrote it, so that SQLite still walks the list and looks each row up by its
/// key.
fn direct_rows(head: &str, row: &str, tail: &str, rows: usize) -> Option<String> {
    if joined(head) && rows > JOINED_ROWS {
        return None;
    }
    if !inserted(head) {
        let list = vec![row; rows].join(", ");
        return Some(format!("{head}{list}{tail}"));
    }
    let exprs = row_exprs(row)?;
    let one = format!("({}, ?)", exprs.join(", "));
    let list = vec![one.as_str(); rows].join(", ");
    let columns: Vec<String> = (1..=exprs.len()).map(|n| format!("column{n}")).collect();
    let marker = exprs.len() + 1;
    let select = format!(
        "SELECT {} FROM (VALUES {list}) WHERE column{marker} IS NOT NULL",
        columns.join(", ")
    );
    in_place_of_values(head, &select, tail)
}

/// `$1`, `$2`, … of a template rendered as `?`.
fn anonymous(text: &str) -> Box<str> {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '$' && chars.peek().is_some_and(char::is_ascii_digit) {
            while chars.peek().is_some_and(char::is_ascii_digit) {
                chars.next();
            }
            out.push('?');
        } else {
            out.push(c);
        }
    }
    out.into_boxed_str()
}

impl Batched {
    fn render(backend: Backend, head: &str, row: &str, tail: &str, first: usize) -> Batched {
        let (sql, keys) = match json_keys(backend, head, row, tail, first) {
            Some(sql) => (sql, true),
            None => (
                json_rows(backend, head, row, tail, first).unwrap_or_else(|| {
                    panic!("a batched statement is neither a list of keys nor of VALUES: {head}")
                }),
                false,
            ),
        };
        let sql = match backend {
            Backend::Postgres => render(backend, &sql),
            Backend::Sqlite => anonymous(&render(backend, &sql)),
        };
        let direct = match backend {
            Backend::Sqlite if !keys => DIRECT_ROWS
                .iter()
                .filter_map(|&n| {
                    let sql = direct_rows(head, row, tail, n)?;
                    Some((n, anonymous(&render(backend, &sql))))
                })
                .collect(),
            _ => Vec::new(),
        };
        Batched {
            sql,
            keys,
            marked: !direct.is_empty() && inserted(head),
            direct,
        }
    }

    /// The text for a batch of `rows` rows, with the `VALUES` list it takes when its rows are
    /// bound one value at a time (`None`: as one JSON array).
    pub(crate) fn for_rows(&self, rows: usize) -> (&str, Option<Listed>) {
        match self.direct.iter().find(|(n, _)| *n >= rows) {
            Some((n, sql)) => (
                sql,
                Some(Listed {
                    rows: *n,
                    marked: self.marked,
                }),
            ),
            None => (&self.sql, None),
        }
    }

    /// The most rows one statement of this backend binds one value at a time (0: none).
    pub(crate) fn most_direct(&self) -> usize {
        self.direct.last().map_or(0, |(n, _)| *n)
    }

    /// Whether this statement takes its keys as one JSON array (see `bind_keys!`).
    pub(crate) fn keys_as_json(&self) -> bool {
        self.keys
    }

    /// Whether this statement takes rows rather than keys (see `bind_rows!`): as one JSON
    /// array of arrays, or on SQLite as a `VALUES` list.
    pub(crate) fn takes_rows(&self) -> bool {
        !self.keys
    }

    /// The statement's text, the same for any number of rows.
    pub(crate) fn sql(&self) -> &str {
        &self.sql
    }

    /// The shared parameters' numbers in the order they appear (PostgreSQL rendering).
    #[cfg(test)]
    fn shared_in_order(head: &str, row: &str, tail: &str) -> Vec<usize> {
        let mut found = Vec::new();
        for text in [head, row, tail] {
            let mut rest = text;
            while let Some(at) = rest.find('$') {
                let digits: String = rest[at + 1..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect();
                if let Ok(n) = digits.parse() {
                    found.push(n);
                }
                rest = &rest[at + 1..];
            }
        }
        found
    }
}

macro_rules! catalogue {
    (
        fixed { $( $(#[doc = $doc:literal])* $name:ident: $sql:expr, )+ }
        batched { $( $(#[doc = $bdoc:literal])* $bname:ident: ($head:expr, $row:expr, $tail:expr, $first:expr), )+ }
    ) => {
        /// The rendered catalogue of one backend.
        #[derive(Debug)]
        pub(crate) struct Statements {
            $( $(#[doc = $doc])* pub(crate) $name: Box<str>, )+
            $( $(#[doc = $bdoc])* pub(crate) $bname: Batched, )+
        }

        impl Statements {
            pub(crate) fn render(backend: Backend) -> Statements {
                Statements {
                    $( $name: render(backend, $sql), )+
                    $( $bname: Batched::render(backend, $head, $row, $tail, $first), )+
                }
            }

            /// Every batched template by name: `(head, row, tail, first)`.
            #[cfg(test)]
            fn batched_templates() -> Vec<(&'static str, String, String, String, usize)> {
                vec![$( (stringify!($bname), String::from($head), String::from($row), String::from($tail), $first), )+]
            }

            /// Every statement by name; a batched one as one JSON array, and on SQLite also as
            /// each of its `VALUES` lists.
            pub(crate) fn all(&self) -> Vec<(String, String)> {
                let mut out = vec![$( (stringify!($name).to_owned(), self.$name.to_string()), )+];
                $(
                    out.push((stringify!($bname).to_owned(), self.$bname.sql().to_owned()));
                    for (n, sql) in &self.$bname.direct {
                        out.push((format!("{} ({n} rows)", stringify!($bname)), sql.to_string()));
                    }
                )+
                out
            }
        }
    };
}

/// Whether a job's attempt in flight can be adopted: its provider id was kept, and it is still
/// pending, or its owner's answer came after the lease lapsed (kept as evidence only: the
/// provider still holds the response for a new owner to poll).
macro_rules! adoptable {
    () => {
        "(pending_attempt IS NOT NULL AND EXISTS (SELECT 1 FROM attempts \
         WHERE attempts.job_id = jobs.job_id AND attempts.attempt_no = jobs.pending_attempt \
         AND attempts.submitted_id IS NOT NULL \
         AND attempts.outcome IN ('pending', 'stale_discarded')))"
    };
}

/// What every guarded write on `jobs` returns after its own columns: where its events go.
/// `n` is how many events it reserved.
macro_rules! reserved {
    ($n:literal) => {
        concat!(
            "next_event_seq - ",
            $n,
            " AS seq, updated_at AS at, owner_epoch AS epoch, deadline_at"
        )
    };
}

/// The place in the fair queue of the next send of the tenant named by `$t` (an SQL
/// expression): after the tenant's last unsent row, or where sending has got to when that is
/// later (a tenant with nothing waiting starts at the head of the line), one step on.
macro_rules! fair_tag {
    ($t:literal) => {
        concat!(
            "{greatest}(COALESCE((SELECT MAX(o.fair_tag) FROM outbox o WHERE o.tenant = ",
            $t,
            " AND o.dispatched_at IS NULL), 0), \
             (SELECT c.tag FROM dispatch_clock c WHERE c.id = 1)) + ",
            fair_step!($t)
        )
    };
}

/// A tenant's step in the fair queue: 1,000,000 divided by its weight (1 unless configured).
macro_rules! fair_step {
    ($t:literal) => {
        concat!(
            "COALESCE((SELECT 1000000 / s.weight FROM tenant_shares s WHERE s.tenant = ",
            $t,
            "), 1000000)"
        )
    };
}

/// The lease renewal's head reserving `$n` events, and (`returning $n`) its tail.
macro_rules! renew_leases {
    ($n:literal) => {
        concat!(
            "UPDATE jobs SET owner_until = {least}({now} + $1, deadline_at), \
             updated_at = {now}, next_event_seq = next_event_seq + ",
            $n,
            " WHERE (state = 'running') IS TRUE AND owner_until > {now} AND deadline_at > {now} \
             AND (job_id, owner_epoch) IN (VALUES "
        )
    };
    (returning $n:literal) => {
        concat!(") RETURNING job_id, owner_until, ", reserved!($n))
    };
}

catalogue! {
    fixed {
        /// The database clock.
        now: "SELECT {now}",
        /// The oldest `ready` job outside drills (job ids are time-ordered, so the state's
        /// index leads to it at once), with how long it has waited by the database clock.
        oldest_ready: "SELECT job_id, {now} - created_at AS waited_us FROM jobs \
             WHERE state = 'ready' AND drill_run IS NULL ORDER BY job_id LIMIT 1",
        /// The same within one tenant.
        oldest_ready_of: "SELECT job_id, {now} - created_at AS waited_us FROM jobs \
             WHERE tenant = $1 AND state = 'ready' AND drill_run IS NULL ORDER BY job_id LIMIT 1",

        // create

        /// A new job, unless the tenant already used the key.
        create_job: "INSERT INTO jobs (job_id, tenant, idempotency_key, request_digest, input_ref, \
             contract_version, state, deadline_at, max_attempts, replay_policy, created_at, \
             updated_at, drill_run, next_event_seq) \
             VALUES ($1, $2, $3, $4, $5, $6, 'ready', {now} + $7, $8, $9, {now}, {now}, $10, $11) \
             ON CONFLICT (tenant, idempotency_key) DO NOTHING \
             RETURNING 1 AS seq, created_at AS at, owner_epoch AS epoch, deadline_at",
        /// Idempotency hits on a job's timeline in the last minute.
        recent_idempotency_hits: "SELECT COUNT(*) FROM events WHERE job_id = $1 \
             AND kind = 'idempotency_hit' AND at > {now} - 60000000",
        /// The details of a job's idempotency conflicts (each names the digest offered).
        idempotency_conflicts: "SELECT detail FROM events WHERE job_id = $1 \
             AND kind = 'idempotency_conflict'",

        // timeline

        /// Reserves `$2` event sequence numbers on one job without changing it.
        reserve_events: "UPDATE jobs SET next_event_seq = next_event_seq + $2 WHERE job_id = $1 \
             RETURNING next_event_seq - $2 AS seq, {now} AS at, owner_epoch AS epoch, deadline_at",

        // claim

        /// `ready`/`retry_authorized` → `running` under a new epoch; `$5` = 1 also starts
        /// the first attempt; `$4` events reserved.
        claim: "UPDATE jobs SET state = 'running', owner_epoch = owner_epoch + 1, owner_id = $2, \
             owner_until = {least}({now} + $3, deadline_at), retry_at = NULL, \
             attempt_count = attempt_count + $5, budget_used = budget_used + $5, \
             pending_attempt = CASE WHEN $5 = 1 THEN attempt_count + 1 ELSE NULL END, \
             updated_at = {now}, next_event_seq = next_event_seq + $4 \
             WHERE job_id = $1 AND (state IN ('ready', 'retry_authorized')) IS TRUE \
             AND deadline_at > {now} AND budget_used < max_attempts \
             AND (retry_at IS NULL OR retry_at <= {now}) \
             RETURNING owner_until, attempt_count, budget_used, max_attempts, route_step, \
             route_provider, route_model, route_since, \
             next_event_seq - $4 AS seq, updated_at AS at, owner_epoch AS epoch, deadline_at",

        // attempt

        /// The owner's next attempt, recorded before the provider is called.
        start_attempt: concat!("UPDATE jobs SET attempt_count = attempt_count + 1, \
             budget_used = budget_used + 1, pending_attempt = attempt_count + 1, \
             updated_at = {now}, next_event_seq = next_event_seq + 1 \
             WHERE job_id = $1 AND owner_epoch = $2 AND (state = 'running') IS TRUE \
             AND owner_until > {now} AND deadline_at > {now} \
             AND budget_used < max_attempts AND pending_attempt IS NULL \
             RETURNING attempt_count, ", reserved!(1)),

        // accept

        /// The guarded commit of the one accepted result.
        accept: concat!("UPDATE jobs SET state = 'succeeded', result_ref = $3, pending_attempt = NULL, \
             error_code = NULL, terminal_at = {now}, updated_at = {now}, \
             next_event_seq = next_event_seq + 2 \
             WHERE job_id = $1 AND owner_epoch = $2 AND (state = 'running') IS TRUE \
             AND owner_until > {now} AND deadline_at > {now} AND pending_attempt = $4 \
             RETURNING ", reserved!(2)),

        // failure

        /// A confirmed provider failure: `$5` = 1 when fatal, `$6` the backoff.
        record_failure: concat!("UPDATE jobs SET \
             state = CASE WHEN $5 = 0 AND budget_used < max_attempts \
                 THEN 'retry_authorized' ELSE 'failed_terminal' END, \
             retry_at = CASE WHEN $5 = 0 AND budget_used < max_attempts \
                 THEN {now} + $6 ELSE NULL END, \
             terminal_at = CASE WHEN $5 = 0 AND budget_used < max_attempts \
                 THEN NULL ELSE {now} END, \
             error_code = $4, pending_attempt = NULL, updated_at = {now}, route_since = NULL, \
             next_event_seq = next_event_seq + 2 \
             WHERE job_id = $1 AND owner_epoch = $2 AND (state = 'running') IS TRUE \
             AND owner_until > {now} AND deadline_at > {now} AND pending_attempt = $3 \
             RETURNING state, retry_at, budget_used, ", reserved!(2)),

        // throttle

        /// A refusal the provider confirmed it never ran: `running` → `retry_authorized` until
        /// `$5` µs from now (never past the deadline), the attempt's share of the budget given
        /// back; `$4` the error code.
        /// With `$6` = 1 the job moves on to its route's next pair (`$7`, `$8`) instead, and
        /// a third event is reserved for it; else the pair's first refusal is marked.
        record_throttle: "UPDATE jobs SET state = 'retry_authorized', \
             retry_at = {least}({now} + $5, deadline_at), error_code = $4, \
             budget_used = budget_used - 1, pending_attempt = NULL, updated_at = {now}, \
             route_step = route_step + $6, \
             route_provider = CASE WHEN $6 = 1 THEN $7 ELSE route_provider END, \
             route_model = CASE WHEN $6 = 1 THEN $8 ELSE route_model END, \
             route_since = CASE WHEN $6 = 1 THEN NULL ELSE COALESCE(route_since, {now}) END, \
             next_event_seq = next_event_seq + 2 + $6 \
             WHERE job_id = $1 AND owner_epoch = $2 AND (state = 'running') IS TRUE \
             AND owner_until > {now} AND deadline_at > {now} AND pending_attempt = $3 \
             RETURNING retry_at, budget_used, max_attempts, next_event_seq - 2 - $6 AS seq, \
             updated_at AS at, owner_epoch AS epoch, deadline_at",

        // recovery

        /// Recovery ownership of a `running` job whose lease expired. An attempt in flight
        /// whose provider id was kept is *held for adoption*: the job stays `running` under the
        /// new epoch with the same pending attempt, held by `$2` until `$4` µs from now (never
        /// past the deadline) for a worker to adopt it ([`adopt`](Statements::adopt)). A hold
        /// that lapsed with no worker adopting is not held again: the job goes `unknown`.
        recovery_claim: concat!("UPDATE jobs SET owner_epoch = owner_epoch + 1, owner_id = $2, \
             state = CASE WHEN pending_attempt IS NULL THEN 'retry_authorized' \
                 WHEN owner_id <> $2 AND ", adoptable!(), " THEN 'running' ELSE 'unknown' END, \
             owner_until = CASE WHEN owner_id <> $2 AND ", adoptable!(), " \
                 THEN {least}({now} + $4, deadline_at) ELSE owner_until END, \
             pending_attempt = CASE WHEN owner_id <> $2 AND ", adoptable!(), " \
                 THEN pending_attempt ELSE NULL END, \
             recovery_reason = $3, updated_at = {now}, \
             next_event_seq = next_event_seq + 2 \
             WHERE job_id = $1 AND (state = 'running') IS TRUE AND owner_until <= {now} \
             AND deadline_at > {now} \
             RETURNING state, pending_attempt, ", reserved!(2)),
        /// A worker adopts the attempt in flight of a `running` job whose lease expired, or
        /// which recovery holds for adoption (`owner_id = $5`), when its provider id was kept:
        /// a new epoch, owned by `$2` with a lease of `$3` µs (never past the deadline), the
        /// same pending attempt; `$4` the reason. Only a worker calling the provider that ran
        /// the attempt (`$6`) can poll it.
        adopt: concat!("UPDATE jobs SET owner_epoch = owner_epoch + 1, owner_id = $2, \
             owner_until = {least}({now} + $3, deadline_at), recovery_reason = $4, \
             updated_at = {now}, next_event_seq = next_event_seq + 1 \
             WHERE job_id = $1 AND (state = 'running') IS TRUE \
             AND (owner_until <= {now} OR owner_id = $5) AND deadline_at > {now} \
             AND ", adoptable!(), " AND EXISTS (SELECT 1 FROM attempts \
                 WHERE attempts.job_id = jobs.job_id AND attempts.attempt_no = jobs.pending_attempt \
                 AND attempts.provider = $6) \
             RETURNING owner_until, attempt_count, budget_used, max_attempts, pending_attempt, ",
             reserved!(1)),
        /// The owner keeps the provider's id of its pending attempt `$3`, before any waiting.
        record_submitted: concat!("UPDATE jobs SET updated_at = {now}, \
             next_event_seq = next_event_seq + 1 \
             WHERE job_id = $1 AND owner_epoch = $2 AND (state = 'running') IS TRUE \
             AND owner_until > {now} AND deadline_at > {now} AND pending_attempt = $3 \
             RETURNING ", reserved!(1)),
        /// The owner hands its job back, fencing itself out.
        release: concat!("UPDATE jobs SET owner_epoch = owner_epoch + 1, \
             state = CASE WHEN pending_attempt IS NULL THEN 'retry_authorized' ELSE 'unknown' END, \
             pending_attempt = NULL, recovery_reason = $3, updated_at = {now}, \
             route_since = NULL, next_event_seq = next_event_seq + 1 \
             WHERE job_id = $1 AND owner_epoch = $2 AND (state = 'running') IS TRUE \
             AND owner_until > {now} AND deadline_at > {now} \
             RETURNING state, ", reserved!(1)),

        // decide

        /// An operator cancels a live job at the epoch and state they saw: a new epoch fences
        /// out any owner (its attempt can never commit), and the job fails for good.
        cancel: concat!("UPDATE jobs SET state = 'failed_terminal', owner_epoch = owner_epoch + 1, \
             owner_id = $4, error_code = 'cancelled', pending_attempt = NULL, retry_at = NULL, \
             terminal_at = {now}, updated_at = {now}, next_event_seq = next_event_seq + 2 \
             WHERE job_id = $1 AND owner_epoch = $2 AND state = $3 \
             AND (state IN ('ready', 'running', 'unknown', 'retry_authorized')) IS TRUE \
             RETURNING ", reserved!(2)),
        /// A decision over an `unknown` job at the epoch the decider saw. `$4` = 1 (a retry)
        /// advances the epoch and needs budget and time; `$8` = 1 also needs the job's
        /// pre-approved replay policy.
        decide: concat!("UPDATE jobs SET state = $3, owner_epoch = owner_epoch + $4, \
             owner_id = CASE WHEN $4 = 1 THEN $5 ELSE owner_id END, \
             result_ref = COALESCE($6, result_ref), error_code = COALESCE($7, error_code), \
             terminal_at = CASE WHEN $3 = 'retry_authorized' THEN NULL ELSE {now} END, \
             retry_at = NULL, updated_at = {now}, next_event_seq = next_event_seq + 2 \
             WHERE job_id = $1 AND owner_epoch = $2 AND (state = 'unknown') IS TRUE \
             AND ($4 = 0 OR (deadline_at > {now} AND budget_used < max_attempts)) \
             AND ($8 = 0 OR replay_policy = 'replay_on_unknown') \
             RETURNING attempt_count, ", reserved!(2)),

        // expire

        /// A job's state, locked for the rest of the transaction.
        lock_state: "SELECT state FROM jobs WHERE job_id = $1{for_update}",
        /// A live job whose deadline has passed → `expired`.
        expire: concat!("UPDATE jobs SET state = 'expired', terminal_at = {now}, pending_attempt = NULL, \
             updated_at = {now}, next_event_seq = next_event_seq + 1 \
             WHERE job_id = $1 AND (state IN ('ready', 'running', 'unknown', 'retry_authorized')) IS TRUE \
             AND deadline_at <= {now} \
             RETURNING error_code, ", reserved!(1)),
        /// A `retry_authorized` job with its budget spent → `failed_terminal`.
        exhaust_budget: concat!("UPDATE jobs SET state = 'failed_terminal', error_code = 'budget_exhausted', \
             terminal_at = {now}, updated_at = {now}, next_event_seq = next_event_seq + 1 \
             WHERE job_id = $1 AND (state = 'retry_authorized') IS TRUE AND budget_used >= max_attempts \
             RETURNING budget_used, ", reserved!(1)),

        // outbox

        /// Due outbox rows nobody holds, of one lane: `$2` is a drill run, or `''` for
        /// every job no drill made.
        outbox_due: "SELECT id, tenant FROM outbox WHERE dispatched_at IS NULL \
             AND available_at <= {now_once} \
             AND (locked_until IS NULL OR locked_until <= {now_once}) \
             AND (SELECT COALESCE(j.drill_run, '') FROM jobs j \
                 WHERE j.job_id = outbox.job_id) = $2 \
             ORDER BY fair_tag, id LIMIT $1{skip_locked}",
        /// [`Statements::outbox_due`] of the lane of every job no drill made, each row whole.
        outbox_due_rows: "SELECT id, job_id, reason, send_attempts, fair_tag, tenant FROM outbox \
             WHERE dispatched_at IS NULL AND available_at <= {now_once} \
             AND (locked_until IS NULL OR locked_until <= {now_once}) \
             AND (SELECT COALESCE(j.drill_run, '') FROM jobs j \
                 WHERE j.job_id = outbox.job_id) = '' \
             ORDER BY fair_tag, id LIMIT $1{skip_locked}",
        /// A send of job `$1` at epoch `$2` for reason `$3`, due at `$4`, in its tenant's
        /// place in the fair queue (see migration 0019).
        insert_outbox: concat!("INSERT INTO outbox (job_id, epoch, reason, created_at, \
             available_at, tenant, fair_tag) SELECT $1, $2, $3, $4, $4, j.tenant, ",
             fair_tag!("j.tenant"), " FROM jobs j WHERE j.job_id = $1"),
        /// Where tenant `$1`'s next send goes in the fair queue, and its step.
        fair_next: concat!("SELECT ", fair_tag!("$1"), " AS tag, ", fair_step!("$1"), " AS step"),
        /// Sending has got to tag `$1` (never back).
        advance_dispatch_clock: "UPDATE dispatch_clock SET tag = {greatest}(tag, $1) WHERE id = 1",
        /// An outbox row that could not be sent, for another try later.
        outbox_failed: "UPDATE outbox SET locked_until = NULL, available_at = {now} + $2, \
             last_error = $3 WHERE id = $1",
        /// A re-dispatch of a job at its current epoch. The job's row is locked (PostgreSQL),
        /// as its other rows' writes hold it: a retention delete waits for it or goes first.
        redispatch: concat!("INSERT INTO outbox (job_id, epoch, reason, created_at, available_at, \
             tenant, fair_tag) SELECT j.job_id, j.owner_epoch, $2, {now}, {now}, j.tenant, ",
             fair_tag!("j.tenant"), " FROM jobs j WHERE j.job_id = $1{for_update}"),

        // scans (the reaper's)

        /// Running jobs whose lease has expired.
        expired_leases: "SELECT job_id FROM jobs WHERE state = 'running' \
             AND owner_until <= {now_once} \
             ORDER BY owner_until LIMIT $1",
        /// Live jobs whose deadline has passed.
        past_deadline: "SELECT job_id FROM jobs \
             WHERE state IN ('ready', 'running', 'unknown', 'retry_authorized') \
             AND deadline_at <= {now_once} ORDER BY deadline_at LIMIT $1",
        /// Workable jobs whose last dispatch is older than `$2` with no send pending.
        quiet_workable: "SELECT j.job_id FROM jobs j WHERE j.state IN ('ready', 'retry_authorized') \
             AND (j.retry_at IS NULL OR j.retry_at <= {now}) AND j.updated_at <= {now} - $2 \
             AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.job_id = j.job_id \
                 AND (o.dispatched_at IS NULL OR o.dispatched_at > {now} - $2)) \
             ORDER BY j.updated_at LIMIT $1",
        /// `unknown` jobs a pre-approved replay policy can act on now.
        unknown_replayable: "SELECT job_id, owner_epoch FROM jobs WHERE state = 'unknown' \
             AND replay_policy = 'replay_on_unknown' AND budget_used < max_attempts \
             AND deadline_at > {now} ORDER BY updated_at LIMIT $1",

        // transport

        /// A queue message the worker refused.
        insert_rejected_message: "INSERT INTO rejected_messages (at, worker_id, message_id, \
             receive_count, handle_hash, reason, body_bytes, job_id) \
             VALUES ({now}, $1, $2, $3, $4, $5, $6, $7)",

        // tokens

        add_operator_token: "INSERT INTO operator_tokens (token_hash, operator, name, created_at) \
             VALUES ($1, $2, $3, {now})",
        add_token: "INSERT INTO api_tokens (token_hash, tenant, name, created_at) \
             VALUES ($1, $2, $3, {now})",
        revoke_token: "UPDATE api_tokens SET revoked_at = {now} \
             WHERE substr(token_hash, 1, 12) = $1 AND revoked_at IS NULL",
        revoke_operator_token: "UPDATE operator_tokens SET revoked_at = {now} \
             WHERE substr(token_hash, 1, 12) = $1 AND revoked_at IS NULL",

        // operators, sessions, sign-in failures

        add_operator: "INSERT INTO operators (name, password_hash, role, tenants, created_at, \
             updated_at, password_set_at) VALUES ($1, $2, $3, $4, {now}, {now}, {now}) \
             ON CONFLICT (name) DO NOTHING",
        set_operator_role: "UPDATE operators SET role = $2, updated_at = {now} WHERE name = $1",
        set_operator_role_and_tenants: "UPDATE operators SET role = $2, tenants = $3, \
             updated_at = {now} WHERE name = $1",
        set_operator_password: "UPDATE operators SET password_hash = $2, \
             password_set_at = {now}, updated_at = {now} WHERE name = $1",
        set_operator_disabled: "UPDATE operators SET \
             disabled_at = CASE WHEN $2 = 1 THEN COALESCE(disabled_at, {now}) ELSE NULL END, \
             updated_at = {now} WHERE name = $1",
        /// A session record that has not expired.
        live_session: "SELECT data, expires_at FROM sessions WHERE id = $1 AND expires_at > {now}",
        prune_sessions: "DELETE FROM sessions WHERE expires_at <= {now}",
        prune_sign_in_failures: "DELETE FROM sign_in_failures WHERE at < {now} - 3600000000",
        record_sign_in_failure: "INSERT INTO sign_in_failures (scope, key, at) \
             VALUES ($1, $2, {now})",
        /// [`Statements::record_sign_in_failure`], giving back the row's id.
        take_sign_in_failure: "INSERT INTO sign_in_failures (scope, key, at) \
             VALUES ($1, $2, {now}) RETURNING id",
        recent_sign_in_failures: "SELECT COUNT(*) FROM sign_in_failures \
             WHERE scope = $1 AND key = $2 AND at > {now} - $3",

        // the embedded queue's table

        /// A copy of a message, visible after `$4`.
        queue_copy: "INSERT INTO queue_messages (queue, message_id, body, sent_at, visible_at) \
             VALUES ($1, $2, $3, {now}, {now} + $4)",
        /// Whether any message of a queue is visible.
        queue_any_visible: "SELECT id FROM queue_messages WHERE queue = $1 \
             AND visible_at <= {now_once} ORDER BY visible_at LIMIT 1",
        /// Visible messages, oldest first.
        queue_visible: "SELECT id, receive_count FROM queue_messages \
             WHERE queue = $1 AND visible_at <= {now_once} \
             ORDER BY visible_at, id LIMIT $2{skip_locked}",
        /// A message moved to the dead-letter queue `$2`.
        queue_redrive: "UPDATE queue_messages SET queue = $2, dead_from = queue, dead_at = {now}, \
             dead_receive_count = receive_count, receive_count = 0, first_receive_at = NULL, \
             handle_hash = NULL, visible_at = {now} WHERE id = $1",
        /// A visibility change by the latest receiver, within the 12-hour cap `$5`.
        queue_change_visibility: "UPDATE queue_messages SET visible_at = {now} + $3 \
             WHERE id = $1 AND queue = $2 AND handle_hash = $4 AND visible_at > {now} \
             AND {now} + $3 <= first_receive_at + $5 RETURNING id",
        /// Why a visibility change was refused.
        queue_handle_state: "SELECT handle_hash, CASE WHEN visible_at > {now} THEN 1 ELSE 0 END \
             AS in_flight FROM queue_messages WHERE id = $1 AND queue = $2",
        /// Visible, in-flight and delayed messages of a queue.
        queue_depth: "SELECT \
             COALESCE(SUM(CASE WHEN visible_at <= {now} THEN 1 ELSE 0 END), 0) AS visible, \
             COALESCE(SUM(CASE WHEN visible_at > {now} AND receive_count > 0 THEN 1 ELSE 0 END), 0) \
                 AS in_flight, \
             COALESCE(SUM(CASE WHEN visible_at > {now} AND receive_count = 0 THEN 1 ELSE 0 END), 0) \
                 AS delayed \
             FROM queue_messages WHERE queue = $1",

        // the benchmarks' reference table and generated data

        /// Takes and finishes one row of the naive reference table.
        naive_take: "UPDATE bench_naive SET state = 'done' WHERE id = \
             (SELECT id FROM bench_naive WHERE state = 'ready' ORDER BY id LIMIT 1{skip_locked}) \
             RETURNING id",
    }
    batched {
        // group commit: one statement for the same transition of many jobs (`write/group.rs`)

        /// Many jobs' rows locked in one order (PostgreSQL): every transaction that writes
        /// several jobs takes their locks through this first, so two never wait on each other.
        lock_jobs: (
            "SELECT job_id FROM jobs WHERE job_id IN (",
            "?",
            ") ORDER BY job_id{for_update}",
            1
        ),
        /// [`Self::lock_jobs`] skipping rows another transaction holds: a group commit leaves
        /// a busy job's write to go alone rather than wait with every other write in it.
        lock_free_jobs: (
            "SELECT job_id FROM jobs WHERE job_id IN (",
            "?",
            ") ORDER BY job_id{skip_locked}",
            1
        ),
        /// Claims of many `ready`/`retry_authorized` jobs, each
        /// `(job_id, tenant, worker, lease)` — a job is claimed only for the tenant its message
        /// named, by the worker that received it, with that worker's lease — starting its
        /// first attempt of the epoch, three events reserved each: the claims of every worker
        /// sharing the ledger in one statement. A job's id appears once in a statement. Each
        /// claimed job comes back whole, with its stored input and model.
        claim_each: (
            "UPDATE jobs SET state = 'running', owner_epoch = owner_epoch + 1, \
             owner_id = v.column3, owner_until = {least}({now} + v.column4, deadline_at), \
             retry_at = NULL, attempt_count = attempt_count + 1, \
             budget_used = budget_used + 1, pending_attempt = attempt_count + 1, updated_at = {now}, \
             next_event_seq = next_event_seq + 3 FROM (VALUES ",
            "(?, ?, ?, CAST(? AS BIGINT))",
            &format!(
                ") AS v WHERE jobs.job_id = v.column1 AND jobs.tenant = v.column2 \
                 AND (jobs.state IN ('ready', 'retry_authorized')) IS TRUE \
                 AND jobs.deadline_at > {{now}} AND jobs.budget_used < jobs.max_attempts \
                 AND (jobs.retry_at IS NULL OR jobs.retry_at <= {{now}}) \
                 RETURNING {}, jobs.next_event_seq - 3 AS seq, jobs.updated_at AS at, \
                 (SELECT input FROM job_inputs WHERE job_inputs.job_id = jobs.job_id) AS input, \
                 (SELECT model FROM job_inputs WHERE job_inputs.job_id = jobs.job_id) AS model",
                super::read::JOB_COLUMNS
            ),
            1
        ),
        /// Attempts recorded before their provider calls, seven parameters a row.
        insert_attempts: (
            "INSERT INTO attempts (job_id, attempt_no, epoch, worker_id, provider, \
             provider_request_id, started_at) VALUES ",
            "(?, CAST(? AS BIGINT), CAST(? AS BIGINT), ?, ?, ?, CAST(? AS BIGINT))", "", 1
        ),
        /// The guarded commits of many owners' results, each
        /// `(job_id, epoch, result_ref, attempt_no, events)`, reserving `events` places on the
        /// timeline. `seq` comes back as the place after them (SQLite's `RETURNING` cannot
        /// read the rows it joins).
        accept_each: (
            "UPDATE jobs SET state = 'succeeded', result_ref = v.column3, pending_attempt = NULL, \
             error_code = NULL, terminal_at = {now}, updated_at = {now}, \
             next_event_seq = next_event_seq + v.column5 FROM (VALUES ",
            "(?, CAST(? AS BIGINT), ?, CAST(? AS BIGINT), CAST(? AS BIGINT))",
            ") AS v WHERE jobs.job_id = v.column1 AND jobs.owner_epoch = v.column2 \
             AND (jobs.state = 'running') IS TRUE AND jobs.owner_until > {now} \
             AND jobs.deadline_at > {now} \
             AND jobs.pending_attempt = v.column4 \
             RETURNING jobs.job_id AS job_id, jobs.next_event_seq AS seq, \
             jobs.updated_at AS at, jobs.owner_epoch AS epoch, jobs.deadline_at AS deadline_at",
            1
        ),
        /// Result bodies, eight parameters a row.
        insert_results: (
            "INSERT INTO results (result_ref, job_id, attempt_no, epoch, status, body, digest, \
             created_at) VALUES ",
            "(?, ?, CAST(? AS BIGINT), CAST(? AS BIGINT), ?, ?, ?, CAST(? AS BIGINT))", "", 1
        ),
        /// Attempts that produced their job's accepted result, each
        /// `(job_id, attempt_no, epoch, finished_at, result_ref, usage, usage_model, tokens,
        /// cost_nusd, provider_request_id)` (the provider's id, when its answer named one).
        attempts_succeeded: (
            "UPDATE attempts SET outcome = 'succeeded', finished_at = v.column4, \
             result_ref = v.column5, usage = v.column6, usage_model = v.column7, \
             tokens = v.column8, cost_nusd = v.column9, \
             provider_request_id = COALESCE(v.column10, attempts.provider_request_id) \
             FROM (VALUES ",
            "(?, CAST(? AS BIGINT), CAST(? AS BIGINT), CAST(? AS BIGINT), ?, ?, ?, \
             CAST(? AS BIGINT), CAST(? AS BIGINT), ?)",
            ") AS v WHERE attempts.job_id = v.column1 AND attempts.attempt_no = v.column2 \
             AND attempts.epoch = v.column3",
            1
        ),
        /// New jobs, eleven parameters a row; a row whose tenant already used its key is skipped.
        /// Each new job comes back whole.
        create_each: (
            "INSERT INTO jobs (job_id, tenant, idempotency_key, request_digest, input_ref, \
             contract_version, state, deadline_at, max_attempts, replay_policy, created_at, \
             updated_at, drill_run, next_event_seq) VALUES ",
            "(?, ?, ?, ?, ?, ?, 'ready', {now} + CAST(? AS BIGINT), CAST(? AS BIGINT), ?, \
             {now}, {now}, ?, CAST(? AS BIGINT))",
            &format!(
                " ON CONFLICT (tenant, idempotency_key) DO NOTHING \
                 RETURNING {}, 1 AS seq, created_at AS at",
                super::read::JOB_COLUMNS
            ),
            1
        ),
        /// Inputs of new jobs.
        insert_inputs: (
            "INSERT INTO job_inputs (job_id, input, model) VALUES ",
            "(?, ?, ?)", "", 1
        ),
        /// First sends of new jobs, each `(job_id, at)`.
        insert_first_sends: (
            "INSERT INTO outbox (job_id, epoch, reason, created_at, available_at, tenant, \
             fair_tag) VALUES ",
            "(?, 0, 'created', CAST(? AS BIGINT), CAST(? AS BIGINT), ?, CAST(? AS BIGINT))", "", 1
        ),
        /// First sends of new jobs made in the jobs' own transaction (a queue in this
        /// database): recorded as sent, with the message's id.
        insert_sent_sends: (
            "INSERT INTO outbox (job_id, epoch, reason, created_at, available_at, dispatched_at, \
             message_id, send_attempts) VALUES ",
            "(?, 0, 'created', CAST(? AS BIGINT), CAST(? AS BIGINT), CAST(? AS BIGINT), ?, 1)",
            "", 1
        ),
        /// Visibility changes of many in-flight messages of one queue (`$1`), each checked
        /// against its handle and the visibility cap (`$2`) as [`Self::queue_change_visibility`]
        /// checks one; the id and handle hash of each message it changed come back. Each
        /// message is looked up by its id: SQLite, counting the JSON rows as many, would
        /// otherwise walk every message of the queue still in flight for each batch.
        queue_change_each: (
            "WITH s AS (SELECT CAST($1 AS TEXT) AS q, CAST($2 AS BIGINT) AS cap) \
             UPDATE queue_messages SET visible_at = {now} + v.column3 FROM s, (VALUES ",
            "(CAST(? AS BIGINT), ?, CAST(? AS BIGINT))",
            ") AS v WHERE queue_messages.id = v.column1 AND {no_index}queue_messages.queue = s.q \
             AND queue_messages.handle_hash = v.column2 AND queue_messages.visible_at > {now} \
             AND {now} + v.column3 <= queue_messages.first_receive_at + s.cap \
             RETURNING queue_messages.id, queue_messages.handle_hash",
            3
        ),
        /// Deletes of many messages, each `(id, hash of its handle, queue)`. The queue is a
        /// column of each row, not one condition beside the list: as a condition, a planner
        /// whose statistics call the table empty (a fresh or freshly vacuumed ledger) walks the
        /// whole queue in `queue_messages_visible` for every delete instead of looking each id
        /// up by its key (16 ms a call with 10,000 messages in flight, measured).
        queue_delete_each: (
            "DELETE FROM queue_messages WHERE (id, handle_hash, queue) IN (VALUES ",
            "(CAST(? AS BIGINT), ?, ?)",
            ") RETURNING id, handle_hash, queue",
            1
        ),
        /// Timeline events, twelve parameters a row.
        insert_events: (
            "INSERT INTO events (job_id, seq, at, kind, epoch, actor, message_id, receive_count, \
             handle_hash, attempt_no, deadline_left_ms, detail) VALUES ",
            "(?, CAST(? AS BIGINT), CAST(? AS BIGINT), ?, CAST(? AS BIGINT), ?, ?, \
             CAST(? AS BIGINT), ?, CAST(? AS BIGINT), CAST(? AS BIGINT), ?)",
            "",
            1
        ),
        /// One sequence number on each of many jobs.
        reserve_event_each: (
            "UPDATE jobs SET next_event_seq = next_event_seq + 1 WHERE job_id IN (",
            "?",
            ") RETURNING job_id, next_event_seq - 1 AS seq, {now} AS at, owner_epoch AS epoch, \
             deadline_at",
            1
        ),
        /// Lease renewals of many owners (`$1` the lease), each `(job_id, epoch)`.
        renew_leases: (renew_leases!(1), "(?, CAST(? AS BIGINT))", renew_leases!(returning 1), 2),
        /// [`Statements::renew_leases`] numbering two events after each renewal: its
        /// `lease_renewed` and the visibility change made in the same transaction.
        renew_leases_with_visibility: (
            renew_leases!(2),
            "(?, CAST(? AS BIGINT))",
            renew_leases!(returning 2),
            2
        ),
        /// Outbox rows held for `$1` by one dispatcher.
        outbox_lock: (
            "UPDATE outbox SET locked_until = {now} + $1, send_attempts = send_attempts + 1 \
             WHERE id IN (",
            "CAST(? AS BIGINT)",
            ") RETURNING id, job_id, reason, send_attempts, fair_tag",
            2
        ),
        /// Outbox rows sent, each `(id, message_id)`.
        outbox_dispatched: (
            "UPDATE outbox SET dispatched_at = {now}, message_id = v.column2, locked_until = NULL \
             FROM (VALUES ",
            "(CAST(? AS BIGINT), ?)",
            ") AS v WHERE outbox.id = v.column1",
            1
        ),
        /// Outbox rows sent by the round that read them, each `(id, message_id)`: one more
        /// send attempt each.
        outbox_sent_now: (
            "UPDATE outbox SET dispatched_at = {now}, message_id = v.column2, locked_until = NULL, \
             send_attempts = send_attempts + 1 FROM (VALUES ",
            "(CAST(? AS BIGINT), ?)",
            ") AS v WHERE outbox.id = v.column1",
            1
        ),
        /// Dead-letter moves put on their jobs' timelines.
        dead_letters_noted: (
            "UPDATE queue_messages SET timeline_noted_at = {now} WHERE id IN (",
            "CAST(? AS BIGINT)",
            ")",
            1
        ),
        /// New messages of queue `$1`, visible after `$2`, each `(message_id, body)`.
        queue_insert: (
            "INSERT INTO queue_messages (queue, message_id, body, sent_at, visible_at) \
             SELECT $1, v.column1, v.column2, {now}, {now} + $2 FROM (VALUES ",
            "(?, ?)",
            ") AS v",
            3
        ),
        /// The tenants of many jobs.
        tenants_of: (
            "SELECT job_id, tenant FROM jobs WHERE job_id IN (",
            "?",
            ")",
            1
        ),
        /// Visible messages taken for `$1`, each `(id, hash of its new handle)`.
        queue_take: (
            "UPDATE queue_messages SET visible_at = {now} + $1, \
             receive_count = receive_count + 1, \
             first_receive_at = COALESCE(first_receive_at, {now}), handle_hash = v.column2 \
             FROM (VALUES ",
            "(CAST(? AS BIGINT), ?)",
            ") AS v WHERE queue_messages.id = v.column1 \
             RETURNING queue_messages.id AS id, message_id, body, receive_count, \
             first_receive_at, sent_at",
            2
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_token_survives_rendering_on_either_backend() {
        for backend in [Backend::Postgres, Backend::Sqlite] {
            for (name, sql) in Statements::render(backend).all() {
                for token in [
                    "{now}",
                    "{least}",
                    "{for_update}",
                    "{skip_locked}",
                    "{no_index}",
                    "{event_rows}",
                    "{{",
                ] {
                    assert!(!sql.contains(token), "{name} keeps {token}: {sql}");
                }
                assert!(!sql.contains('{'), "{name}: {sql}");
                if backend == Backend::Postgres {
                    assert!(!sql.contains('?'), "{name} keeps ?: {sql}");
                }
            }
        }
    }

    #[test]
    fn on_postgres_batched_rows_are_one_json_array_after_the_shared_parameters() {
        let s = Statements::render(Backend::Postgres);
        let rows = "FROM fl_rows(CAST(CAST(";
        let sql = s.renew_leases.sql();
        assert!(
            sql.contains(
                "AND (job_id, owner_epoch) IN (SELECT (r.value ->> 0) AS column1, \
                 CAST((r.value ->> 1) AS BIGINT) AS column2 \
                 FROM fl_rows(CAST(CAST($2 AS TEXT) AS JSONB)) AS r(value)) RETURNING"
            ),
            "{sql}"
        );
        let sql = s.queue_insert.sql();
        assert!(sql.contains("SELECT $1, v.column1, v.column2, "), "{sql}");
        assert!(
            sql.contains(
                "+ $2 FROM (SELECT (r.value ->> 0) AS column1, (r.value ->> 1) AS column2 \
                 FROM fl_rows(CAST(CAST($3 AS TEXT) AS JSONB)) AS r(value)) AS v"
            ),
            "{sql}"
        );
        let sql = s.create_each.sql();
        assert!(
            sql.contains(", next_event_seq) SELECT (r.value ->> 0) AS column1, "),
            "{sql}"
        );
        assert!(
            sql.contains("fl_now_us() + CAST((r.value ->> 6) AS BIGINT) AS column8"),
            "{sql}"
        );
        assert!(
            sql.contains("AS r(value) ON CONFLICT (tenant, idempotency_key) DO NOTHING"),
            "{sql}"
        );
        let sql = s.claim_each.sql();
        assert!(
            sql.contains(
                "next_event_seq = next_event_seq + 3 FROM (SELECT (r.value ->> 0) AS column1, \
                 (r.value ->> 1) AS column2, (r.value ->> 2) AS column3, \
                 CAST((r.value ->> 3) AS BIGINT) AS column4 \
                 FROM fl_rows(CAST(CAST($1 AS TEXT) AS JSONB)) AS r(value)) AS v \
                 WHERE jobs.job_id = v.column1 AND jobs.tenant = v.column2 "
            ),
            "{sql}"
        );
        let sql = s.outbox_lock.sql();
        assert!(
            sql.contains("WHERE id IN (SELECT CAST(k.value AS BIGINT) FROM fl_keys(CAST("),
            "{sql}"
        );
        // Every batched statement: one text whatever the number of rows, its rows one
        // parameter.
        for (name, head, row, tail, first) in Statements::batched_templates() {
            let b = Batched::render(Backend::Postgres, &head, &row, &tail, first);
            assert!(b.keys_as_json() != b.takes_rows(), "{name}");
            let sql = b.sql();
            assert!(
                sql.contains(rows) || sql.contains("FROM fl_keys(CAST("),
                "{name}"
            );
            assert!(
                sql.contains(&format!("CAST(${first} AS TEXT)")),
                "{name}: {sql}"
            );
            assert!(!sql.contains(&format!("${}", first + 1)), "{name}: {sql}");
        }
    }

    #[test]
    fn on_sqlite_batched_rows_are_one_anonymous_json_array_after_the_shared_parameters() {
        let s = Statements::render(Backend::Sqlite);
        let sql = s.renew_leases.sql();
        assert!(!sql.contains('$'), "{sql}");
        assert!(
            sql.contains(
                "AND (job_id, owner_epoch) IN (SELECT (r.value ->> 0) AS column1, \
                 CAST((r.value ->> 1) AS BIGINT) AS column2 FROM json_each(?) AS r) RETURNING"
            ),
            "{sql}"
        );
        assert_eq!(sql.matches('?').count(), 2, "{sql}");
        // `INSERT … SELECT` ends its select before `ON CONFLICT`.
        let sql = s.create_each.sql();
        assert!(
            sql.contains("FROM json_each(?) AS r WHERE true ON CONFLICT (tenant, idempotency_key)"),
            "{sql}"
        );
        let sql = s.outbox_lock.sql();
        assert!(
            sql.contains("WHERE id IN (SELECT CAST(value AS BIGINT) FROM json_each(?))"),
            "{sql}"
        );
        // Anonymous parameters bind in the order they appear: every shared one must appear
        // once, in order, and none among the rows.
        for (name, head, row, tail, first) in Statements::batched_templates() {
            let shared: Vec<usize> = Batched::shared_in_order(&head, &row, &tail);
            let expected: Vec<usize> = (1..first).collect();
            assert_eq!(shared, expected, "{name}");
            assert!(!row.contains('$'), "{name}: {row}");
            let b = Batched::render(Backend::Sqlite, &head, &row, &tail, first);
            assert_eq!(b.sql().matches('?').count(), first, "{name}: {}", b.sql());
            assert!(b.sql().contains("json_each(?)"), "{name}: {}", b.sql());
        }
    }

    #[test]
    fn on_sqlite_batched_rows_are_also_values_lists_of_fixed_lengths_with_a_marker() {
        for (name, head, row, tail, first) in Statements::batched_templates() {
            let b = Batched::render(Backend::Sqlite, &head, &row, &tail, first);
            if b.keys_as_json() {
                assert!(b.direct.is_empty(), "{name}");
                assert_eq!(b.for_rows(3), (b.sql(), None), "{name}");
                continue;
            }
            // Rows that are inserted end in a marker after their columns; rows matched against
            // a table do not.
            let inserted = head.starts_with("INSERT");
            assert_eq!(b.marked, inserted, "{name}");
            let width = row.matches('?').count() + usize::from(inserted);
            let marker = row_exprs(&row).unwrap().len() + 1;
            let lengths: Vec<usize> = b.direct.iter().map(|(n, _)| *n).collect();
            if joined(&head) {
                assert_eq!(lengths, [16, 64, 128], "{name}");
                assert_eq!(b.for_rows(128).1.map(|l| l.rows), Some(128), "{name}");
                assert_eq!(b.for_rows(129), (b.sql(), None), "{name}");
                continue;
            }
            assert_eq!(lengths, DIRECT_ROWS, "{name}");
            for (n, sql) in &b.direct {
                assert_eq!(
                    sql.matches('?').count(),
                    first - 1 + n * width,
                    "{name}: {sql}"
                );
                assert!(
                    !sql.contains('$') && !sql.contains("json_each"),
                    "{name}: {sql}"
                );
                let marker = format!(") WHERE column{marker} IS NOT NULL");
                assert_eq!(sql.contains(&marker), inserted, "{name}: {sql}");
            }
            // A batch takes the shortest list that holds it; a longer one goes as JSON.
            let rows = |n| b.for_rows(n).1.map(|l| l.rows);
            assert_eq!(rows(0), Some(16), "{name}");
            assert_eq!(rows(16), Some(16), "{name}");
            assert_eq!(rows(17), Some(64), "{name}");
            assert_eq!(rows(65), Some(128), "{name}");
            assert_eq!(rows(129), Some(256), "{name}");
            assert_eq!(rows(1024), Some(1024), "{name}");
            assert_eq!(b.for_rows(1025), (b.sql(), None), "{name}");
            assert_eq!(b.most_direct(), 1024, "{name}");
        }
        // On PostgreSQL every batch is one JSON array.
        for (name, head, row, tail, first) in Statements::batched_templates() {
            let b = Batched::render(Backend::Postgres, &head, &row, &tail, first);
            assert_eq!(b.for_rows(3), (b.sql(), None), "{name}");
            assert_eq!(b.most_direct(), 0, "{name}");
        }
        let s = Statements::render(Backend::Sqlite);
        let (sql, _) = s.create_each.for_rows(1);
        assert!(
            sql.contains("IS NOT NULL ON CONFLICT (tenant, idempotency_key) DO NOTHING"),
            "{sql}"
        );
        let (sql, _) = s.claim_each.for_rows(1);
        assert!(
            sql.contains(" FROM (VALUES (?, ?, ?, CAST(? AS BIGINT)), (?, ?, ?, "),
            "{sql}"
        );
        let (sql, _) = s.accept_each.for_rows(1);
        assert!(sql.contains(" FROM (VALUES (?, "), "{sql}");
    }

    #[test]
    fn sqlite_has_no_row_locks_and_its_own_clock() {
        let s = Statements::render(Backend::Sqlite);
        assert!(s.lock_state.ends_with("job_id = $1"), "{}", s.lock_state);
        assert!(s.claim.contains("MIN(CAST(unixepoch"), "{}", s.claim);
        let p = Statements::render(Backend::Postgres);
        assert!(p.lock_state.ends_with(" FOR UPDATE"), "{}", p.lock_state);
    }
}
