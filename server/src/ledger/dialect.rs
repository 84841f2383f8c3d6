//! Which database holds the ledger.

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backends_are_chosen_by_url_scheme() {
        assert_eq!(Backend::from_url("postgres://x/y"), Some(Backend::Postgres));
        assert_eq!(
            Backend::from_url("sqlite://a.db?mode=rwc"),
            Some(Backend::Sqlite)
        );
        assert_eq!(Backend::from_url("mysql://x"), None);
    }
}
