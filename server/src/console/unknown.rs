//! `/unknown`: the reconciliation queue, oldest first, in keyset pages.

use fenceline_app::console::{UnknownPage, UnknownRow};

use crate::job::JobState;
use crate::ledger::{Drills, LedgerError};

use super::format::{ago, left};
use super::LedgerConsole;
use crate::provider::prices::Usd;

impl LedgerConsole {
    pub(super) async fn build_unknown(
        &self,
        after: Option<String>,
    ) -> Result<UnknownPage, LedgerError> {
        const PAGE: u32 = 100;
        let now = self.ledger.now_us().await?;
        // `after` is `<updated_at>.<job_id>` from a previous page; anything else starts over.
        let cursor = after
            .as_deref()
            .and_then(|a| a.split_once('.'))
            .and_then(|(at, id)| Some((at.parse::<i64>().ok()?, id.to_owned())));
        let first = cursor.is_none();
        let cursor = cursor.unwrap_or((i64::MIN, String::new()));
        let page = self.ledger.unknown_jobs(&cursor, PAGE + 1).await?;
        let next = (page.len() > PAGE as usize)
            .then(|| &page[PAGE as usize - 1])
            .map(|u| format!("{}.{}", u.job.updated_at, u.job.job_id));
        let mut rows = Vec::with_capacity(page.len());
        // The page's lost attempts: what they may have cost, and how many had no bound.
        let (mut risk_sum, mut risk_attempts, mut unbounded) = (0_i64, 0_usize, 0_usize);
        for unknown in page.into_iter().take(PAGE as usize) {
            let job = &unknown.job;
            if !self.covers(&job.tenant) {
                continue;
            }
            let attempts = self.ledger.attempts(&job.job_id).await?;
            let spend = self
                .ledger
                .job_spend(
                    job,
                    &attempts,
                    &self.queue.prices,
                    &self.queue.default_model,
                )
                .await?;
            let at_risk = (spend.at_risk_attempts > 0).then(|| {
                risk_attempts += spend.at_risk_attempts;
                match spend.at_risk {
                    Some(bound) => {
                        risk_sum = risk_sum.saturating_add(bound);
                        format!("≤\u{a0}{}", Usd(bound))
                    }
                    None => {
                        unbounded += spend.at_risk_attempts;
                        "unbounded".to_owned()
                    }
                }
            });
            let last = attempts.into_iter().last();
            let retrieval = if unknown.retrieval_unsupported {
                "not possible: needs a decision"
            } else if unknown.last_request.is_some() {
                "being asked"
            } else {
                "no request id: needs a decision"
            };
            rows.push(UnknownRow {
                job_id: job.job_id.clone(),
                tenant: job.tenant.clone(),
                epoch: job.owner_epoch,
                since: ago(now, job.updated_at),
                last_attempt: last.map(|a| {
                    format!(
                        "#{} by {} at epoch {}, {}",
                        a.attempt_no,
                        a.worker_id,
                        a.epoch,
                        a.outcome.as_str().replace('_', " ")
                    )
                }),
                provider_request_id: unknown.last_request,
                deadline_left: left(now, job.deadline_at),
                recovery_reason: job.recovery_reason.clone(),
                replay_policy: job.replay_policy.as_str().replace('_', " "),
                retrieval: retrieval.into(),
                at_risk,
            });
        }
        let total = self
            .counts_in(self.tenants.as_deref(), 10_000, Drills::Counted)
            .await?
            .into_iter()
            .find(|(state, _, _)| *state == JobState::Unknown)
            .map_or("0".into(), |(_, n, capped)| {
                if capped {
                    format!("{n}+")
                } else {
                    n.to_string()
                }
            });
        Ok(UnknownPage {
            rows,
            total,
            next,
            first,
            at_risk: (risk_attempts > 0).then(|| {
                let mut line = format!(
                    "at most {} on {} {}",
                    Usd(risk_sum),
                    risk_attempts,
                    if risk_attempts == 1 {
                        "attempt"
                    } else {
                        "attempts"
                    }
                );
                if unbounded > 0 {
                    line.push_str(&format!(
                        " ({unbounded} without a bound: no price for the model, or no max_tokens)"
                    ));
                }
                line
            }),
        })
    }
}
