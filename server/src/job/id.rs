//! Job identities: `job_` followed by a UUIDv7, so that ids sort by creation time and the
//! console can page by id alone.

use std::fmt;

/// One intended workload. Stable across deliveries, attempts, replays and decisions.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobId(String);

impl JobId {
    const PREFIX: &'static str = "job_";

    /// A new, time-ordered id.
    pub fn generate() -> Self {
        JobId(format!(
            "{}{}",
            Self::PREFIX,
            uuid::Uuid::now_v7().hyphenated()
        ))
    }

    /// The smallest id a job created at `unix_ms` (or later) can have: job ids sort by
    /// creation time, so "created after" is a keyset bound on the id.
    pub fn lower_bound_at(unix_ms: i64) -> String {
        let ms = unix_ms.clamp(0, (1 << 48) - 1) as u64;
        let hex = format!("{ms:012x}");
        format!(
            "{}{}-{}-7000-8000-000000000000",
            Self::PREFIX,
            &hex[..8],
            &hex[8..]
        )
    }

    /// An id read back from the ledger, which only ever stores normalised ids.
    pub(crate) fn from_stored(id: String) -> Self {
        JobId(id)
    }

    /// The id as stored and shown.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The text is not a job id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a job id: expected `job_` followed by a UUID")]
pub struct ParseJobIdError;

impl std::str::FromStr for JobId {
    type Err = ParseJobIdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let rest = s.strip_prefix(Self::PREFIX).ok_or(ParseJobIdError)?;
        let uuid = uuid::Uuid::try_parse(rest).map_err(|_| ParseJobIdError)?;
        // Normalise, so that the same job is never two strings.
        Ok(JobId(format!("{}{}", Self::PREFIX, uuid.hyphenated())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_ids_parse_back_and_sort_by_creation() {
        let first = JobId::generate();
        let second = JobId::generate();
        assert_eq!(first.as_str().parse::<JobId>(), Ok(first.clone()));
        assert!(first < second);
    }

    #[test]
    fn the_lower_bound_sorts_before_ids_made_at_that_time_and_after_older_ones() {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        let id = JobId::generate();
        assert!(JobId::lower_bound_at(now_ms - 1000).as_str() < id.as_str());
        assert!(JobId::lower_bound_at(now_ms + 1000).as_str() > id.as_str());
        assert!(JobId::lower_bound_at(now_ms).parse::<JobId>().is_ok());
    }

    #[test]
    fn foreign_text_is_not_a_job_id() {
        for bad in [
            "",
            "job_",
            "job_xyz",
            "42",
            "JOB_0190b3c2-0000-7000-8000-000000000000",
        ] {
            assert_eq!(bad.parse::<JobId>(), Err(ParseJobIdError), "{bad}");
        }
    }
}
