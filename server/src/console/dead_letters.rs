//! `/dlq`: dead letters grouped by job, each with why it was dead-lettered, how often it was
//! received and when it was first sent and moved, beside its job's ledger state and what an
//! inspected replay would do.

use fenceline_app::console::{DeadLetterGroup, DeadLetterRow, DeadLetters};

use crate::job::message;
use crate::job::JobState;
use crate::ledger::LedgerError;

use super::LedgerConsole;

impl LedgerConsole {
    pub(super) async fn build_dead_letters(&self) -> Result<DeadLetters, LedgerError> {
        let Some(dlq) = &self.queue.embedded_dead_letters else {
            return Ok(DeadLetters {
                queue: format!("{}-dlq", self.queue.description),
                groups: vec![],
                notice: Some(
                    "SQS lists dead letters only by receiving them. `fenceline dlq-replay` inspects \
                     and replays them; the SQS console shows their count."
                        .into(),
                ),
            });
        };
        let mut groups: Vec<DeadLetterGroup> = Vec::new();
        for letter in self.ledger.embedded_dead_letters(dlq, 200).await? {
            let parsed = message::parse(&letter.body).ok();
            let job = match &parsed {
                Some(m) => self.ledger.job(&m.job_id).await?,
                None => None,
            };
            // A letter no job of this console's tenants explains is not shown to it.
            if self.tenants.is_some() && !job.as_ref().is_some_and(|j| self.covers(&j.tenant)) {
                continue;
            }
            let reason = match (&letter.refused, &parsed) {
                (Some(why), _) => format!("refused by a worker: {why}"),
                (None, None) => "not a job message".to_owned(),
                (None, Some(_)) => format!(
                    "received {} times without being deleted{}",
                    letter.receive_count,
                    letter
                        .dead_from
                        .as_deref()
                        .map(|q| format!(" from {q}"))
                        .unwrap_or_default()
                ),
            };
            let row = DeadLetterRow {
                message_id: letter.message_id.clone(),
                reason,
                receive_count: letter.receive_count,
                first_seen: self.at(letter.sent_at),
                last_seen: self.at(letter.dead_at),
            };
            let job_id = parsed.as_ref().map(|m| m.job_id.clone());
            if let Some(group) = groups
                .iter_mut()
                .find(|g| job_id.is_some() && g.job_id == job_id)
            {
                group.letters.push(row);
                continue;
            }
            let note = match (&parsed, &job) {
                (None, _) => "kept: not a job message".to_owned(),
                (Some(_), None) => "kept: no such job in the ledger".to_owned(),
                (Some(_), Some(j)) if j.state.is_terminal() => {
                    format!("dropped: the job is already {}", j.state)
                }
                (Some(_), Some(j)) if j.state == JobState::Unknown => {
                    "kept until a decision is recorded".to_owned()
                }
                (Some(_), Some(_)) => {
                    "re-dispatched with the same job id, deadline and attempt budget".to_owned()
                }
            };
            groups.push(DeadLetterGroup {
                job_id,
                tenant: job.as_ref().map(|j| j.tenant.clone()),
                state: job.as_ref().map(|j| j.state.as_str().to_owned()),
                note,
                letters: vec![row],
            });
        }
        Ok(DeadLetters {
            queue: format!("embedded:{dlq}"),
            groups,
            notice: None,
        })
    }
}
