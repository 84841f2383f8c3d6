//! The queue message that triggers an examination of one job: its id and tenant, nothing
//! else — never the input.

use serde::{Deserialize, Serialize};

use crate::job::JobId;

/// Larger bodies are refused unread.
pub const MAX_BODY_BYTES: usize = 16 * 1024;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobMessage {
    pub job_id: String,
    pub tenant: String,
}

impl JobMessage {
    pub fn body(job_id: &str, tenant: &str) -> String {
        serde_json::to_string(&JobMessage {
            job_id: job_id.to_owned(),
            tenant: tenant.to_owned(),
        })
        .expect("a message serialises")
    }
}

/// Why a message was refused; persisted as a stable string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadMessage {
    Oversize,
    NotJson,
    NotAJobMessage,
    UnknownJob,
    WrongTenant,
}

impl BadMessage {
    pub fn as_str(self) -> &'static str {
        match self {
            BadMessage::Oversize => "oversize",
            BadMessage::NotJson => "not_json",
            BadMessage::NotAJobMessage => "not_a_job_message",
            BadMessage::UnknownJob => "unknown_job",
            BadMessage::WrongTenant => "wrong_tenant",
        }
    }
}

/// Parses a body without trusting it.
pub fn parse(body: &str) -> Result<JobMessage, BadMessage> {
    if body.len() > MAX_BODY_BYTES {
        return Err(BadMessage::Oversize);
    }
    let value: serde_json::Value = serde_json::from_str(body).map_err(|_| BadMessage::NotJson)?;
    let message: JobMessage =
        serde_json::from_value(value).map_err(|_| BadMessage::NotAJobMessage)?;
    let id: JobId = message
        .job_id
        .parse()
        .map_err(|_| BadMessage::NotAJobMessage)?;
    Ok(JobMessage {
        job_id: id.to_string(),
        tenant: message.tenant,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_message_round_trips() {
        let id = JobId::generate();
        let body = JobMessage::body(id.as_str(), "acme");
        assert_eq!(
            parse(&body),
            Ok(JobMessage {
                job_id: id.to_string(),
                tenant: "acme".into()
            })
        );
    }

    #[test]
    fn bad_bodies_are_classified() {
        assert_eq!(parse("nope"), Err(BadMessage::NotJson));
        assert_eq!(parse("[1]"), Err(BadMessage::NotAJobMessage));
        assert_eq!(
            parse(r#"{"job_id":"x","tenant":"a"}"#),
            Err(BadMessage::NotAJobMessage)
        );
        assert_eq!(
            parse(r#"{"job_id":"job_0190b3c2-0000-7000-8000-000000000000","tenant":"a","x":1}"#),
            Err(BadMessage::NotAJobMessage)
        );
        assert_eq!(
            parse(&"x".repeat(MAX_BODY_BYTES + 1)),
            Err(BadMessage::Oversize)
        );
    }
}
