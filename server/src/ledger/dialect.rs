//! The few places where PostgreSQL and SQLite SQL differ.

/// Which database holds the ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Postgres,
    Sqlite,
}

impl Backend {
    /// The backend a connection URL names.
    pub fn from_url(url: &str) -> Option<Backend> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Some(Backend::Postgres)
        } else if url.starts_with("sqlite:") {
            Some(Backend::Sqlite)
        } else {
            None
        }
    }

    /// A short name for logs and the console.
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Postgres => "postgres",
            Backend::Sqlite => "sqlite",
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Dialect {
    pub(crate) backend: Backend,
}

impl Dialect {
    /// Fills the dialect tokens of a statement template:
    /// `{now}` the database clock in microseconds, `{least}` the two-argument minimum,
    /// `{for_update}` a row lock where the backend has one (SQLite serialises writers anyway),
    /// `{skip_locked}` the same lock skipping rows another transaction holds.
    pub(crate) fn sql(&self, template: &str) -> String {
        let (now, least, for_update, skip_locked) = match self.backend {
            Backend::Postgres => (
                "fl_now_us()",
                "LEAST",
                " FOR UPDATE",
                " FOR UPDATE SKIP LOCKED",
            ),
            Backend::Sqlite => (
                "CAST(unixepoch('subsec') * 1000000 AS INTEGER)",
                "MIN",
                "",
                "",
            ),
        };
        template
            .replace("{now}", now)
            .replace("{least}", least)
            .replace("{for_update}", for_update)
            .replace("{skip_locked}", skip_locked)
    }
}

/// `$first, $first+1, …` for one row of `width` values, as `($a, $b, …)`.
pub(crate) fn row_placeholders(first: usize, width: usize) -> String {
    let mut out = String::from("(");
    for i in 0..width {
        if i > 0 {
            out.push_str(", ");
        }
        out.push('$');
        out.push_str(&(first + i).to_string());
    }
    out.push(')');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_number_from_the_first_parameter() {
        assert_eq!(row_placeholders(3, 2), "($3, $4)");
        assert_eq!(row_placeholders(1, 1), "($1)");
    }

    #[test]
    fn backends_are_chosen_by_url_scheme() {
        assert_eq!(Backend::from_url("postgres://x/y"), Some(Backend::Postgres));
        assert_eq!(
            Backend::from_url("sqlite://a.db?mode=rwc"),
            Some(Backend::Sqlite)
        );
        assert_eq!(Backend::from_url("mysql://x"), None);
    }

    #[test]
    fn sqlite_has_no_row_locks_and_its_own_clock() {
        let d = Dialect {
            backend: Backend::Sqlite,
        };
        let sql = d.sql("SELECT {least}({now}, 1) FROM jobs{for_update}");
        assert!(sql.contains("MIN(CAST(unixepoch"), "{sql}");
        assert!(sql.ends_with("FROM jobs"), "{sql}");
    }
}
