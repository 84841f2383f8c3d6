//! Operators' actions as both crates write and read them: the bounds of a reason, and a job
//! picked on a list with the fence its row showed. The console's forms write these; the server
//! reads them back with the same code, so a form and its handler cannot drift apart.

use std::fmt;
use std::str::FromStr;

/// Most characters an operator's reason holds.
pub const REASON_MAX: usize = 2000;

/// [`REASON_MAX`] as a form field's `maxlength`.
pub const REASON_MAXLENGTH: &str = "2000";

/// Most characters a decision's evidence (the provider's reference for the call) holds.
pub const EVIDENCE_MAX: usize = 500;

/// [`EVIDENCE_MAX`] as a form field's `maxlength`.
pub const EVIDENCE_MAXLENGTH: &str = "500";

/// Why an operator acted: trimmed, 1 to [`REASON_MAX`] characters. Every action needs one;
/// the audit log and the job's timeline keep it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reason(String);

/// A reason that was empty or too long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoReason;

impl fmt::Display for NoReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a reason of 1 to {REASON_MAX} characters")
    }
}

impl std::error::Error for NoReason {}

impl Reason {
    /// `text`, trimmed, if it is a reason.
    pub fn parse(text: &str) -> Result<Reason, NoReason> {
        let text = text.trim();
        if text.is_empty() || text.chars().count() > REASON_MAX {
            return Err(NoReason);
        }
        Ok(Reason(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A job picked on a list for a bulk action, with what its row showed: the epoch (and on the
/// jobs list the state and the number of events), so that the action is fenced by what the
/// operator saw. Written `ID:EPOCH[:STATE[:EVENTS]]` as a checkbox's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobPick {
    pub job_id: String,
    pub epoch: i64,
    pub state: Option<String>,
    pub events: Option<i64>,
}

impl fmt::Display for JobPick {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.job_id, self.epoch)?;
        if let Some(state) = &self.state {
            write!(f, ":{state}")?;
            if let Some(events) = self.events {
                write!(f, ":{events}")?;
            }
        }
        Ok(())
    }
}

/// A checkbox value that is not `ID:EPOCH[:STATE[:EVENTS]]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadPick;

impl fmt::Display for BadPick {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a picked job is written ID:EPOCH[:STATE[:EVENTS]]")
    }
}

impl FromStr for JobPick {
    type Err = BadPick;

    fn from_str(text: &str) -> Result<JobPick, BadPick> {
        let mut parts = text.split(':');
        let job_id = parts.next().filter(|id| !id.is_empty()).ok_or(BadPick)?;
        let epoch = parts.next().ok_or(BadPick)?.parse().map_err(|_| BadPick)?;
        let state = parts.next().map(str::to_owned);
        let events = match parts.next() {
            None => None,
            Some(events) => Some(events.parse().map_err(|_| BadPick)?),
        };
        if parts.next().is_some() || state.as_deref() == Some("") {
            return Err(BadPick);
        }
        Ok(JobPick {
            job_id: job_id.to_owned(),
            epoch,
            state,
            events,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reason_is_trimmed_and_bounded_in_characters() {
        assert_eq!(Reason::parse("  checked  ").unwrap().as_str(), "checked");
        assert_eq!(Reason::parse("   "), Err(NoReason));
        assert!(Reason::parse(&"é".repeat(REASON_MAX)).is_ok());
        assert_eq!(Reason::parse(&"a".repeat(REASON_MAX + 1)), Err(NoReason));
        assert_eq!(REASON_MAXLENGTH, REASON_MAX.to_string());
        assert_eq!(EVIDENCE_MAXLENGTH, EVIDENCE_MAX.to_string());
    }

    #[test]
    fn a_pick_reads_back_what_it_wrote() {
        for text in ["job_1:3", "job_1:3:running", "job_1:3:running:17"] {
            let pick: JobPick = text.parse().unwrap();
            assert_eq!(pick.to_string(), text);
        }
        let full: JobPick = "job_1:3:running:17".parse().unwrap();
        assert_eq!(full.epoch, 3);
        assert_eq!(full.state.as_deref(), Some("running"));
        assert_eq!(full.events, Some(17));
        for bad in [
            "",
            "job_1",
            ":3",
            "job_1:x",
            "job_1:3::",
            "job_1:3:s:x",
            "a:1:s:2:3",
        ] {
            assert_eq!(bad.parse::<JobPick>(), Err(BadPick), "{bad}");
        }
    }
}
