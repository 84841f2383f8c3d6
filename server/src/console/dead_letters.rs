//! `/dlq`: dead letters joined to their job's ledger state, with what an inspected replay
//! would do.

use fenceline_app::console::{DeadLetterRow, DeadLetters};

use crate::job::JobState;
use crate::ledger::LedgerError;
use crate::worker::message;

use super::format::ago;
use super::LedgerConsole;

impl LedgerConsole {
    pub(super) async fn build_dead_letters(&self) -> Result<DeadLetters, LedgerError> {
        let Some(dlq) = &self.queue.embedded_dead_letters else {
            return Ok(DeadLetters {
                queue: format!("{}-dlq", self.queue.description),
                rows: vec![],
                notice: Some(
                    "SQS lists dead letters only by receiving them. `fenceline dlq-replay` inspects \
                     and replays them; the SQS console shows their count."
                        .into(),
                ),
            });
        };
        let now = self.ledger.now_us().await?;
        let mut rows = Vec::new();
        for (message_id, body, receives, since) in
            self.ledger.embedded_dead_letters(dlq, 200).await?
        {
            let parsed = message::parse(&body).ok();
            let job = match &parsed {
                Some(m) => self.ledger.job(&m.job_id).await?,
                None => None,
            };
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
            // A letter no job of this console's tenants explains is not shown to it.
            if self.tenants.is_some() && !job.as_ref().is_some_and(|j| self.covers(&j.tenant)) {
                continue;
            }
            rows.push(DeadLetterRow {
                message_id,
                job_id: parsed.as_ref().map(|m| m.job_id.clone()),
                tenant: job.as_ref().map(|j| j.tenant.clone()),
                state: job.as_ref().map(|j| j.state.as_str().to_owned()),
                receive_count: receives,
                dead_since: ago(now, since),
                note,
            });
        }
        Ok(DeadLetters {
            queue: format!("embedded:{dlq}"),
            rows,
            notice: None,
        })
    }
}
