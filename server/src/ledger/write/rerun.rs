//! Running a terminal job again as a new job: the old job stays terminal (terminal states are
//! final), the new one gets its own id and an idempotency key derived from the old, the same
//! input, model, contract, attempt budget and deadline length, and both timelines link to each
//! other. Audited on the old job.
//!
//! The new key counts the re-runs the operator could see: `…~rerun-N`, N one more than the
//! re-runs among the first `seen` events of the old job's timeline. A request sent twice from
//! the same view (a double click, a resent form) names the same key, so it finds the job the
//! first one made instead of making another.

use fenceline_app::action::Reason;
use std::time::Duration;

use crate::job::detail;
use crate::job::{Actor, EventKind};
use crate::ledger::audit::NewAudit;
use crate::ledger::model::{Created, NewEvent, NewJob};
use crate::ledger::{Ledger, LedgerError, Refusal};

impl Ledger {
    /// The jobs `job_id` was run again as (`to`) or is a re-run of (`from`), oldest first.
    pub async fn rerun_links(&self, job_id: &str) -> Result<Vec<(String, String)>, LedgerError> {
        self.rerun_links_through(job_id, i64::MAX).await
    }

    /// The same, among the job's events up to number `last`.
    async fn rerun_links_through(
        &self,
        job_id: &str,
        last: i64,
    ) -> Result<Vec<(String, String)>, LedgerError> {
        let details: Vec<String> = sqlx::query_scalar(
            "SELECT detail FROM events WHERE job_id = $1 AND kind = 'rerun' AND seq <= $2 \
             ORDER BY seq",
        )
        .bind(job_id)
        .bind(last)
        .fetch_all(&self.reader)
        .await?;
        Ok(details
            .iter()
            .filter_map(|d| serde_json::from_str::<detail::Rerun>(d).ok())
            .filter_map(|rerun| match (rerun.to, rerun.from) {
                (Some(to), _) => Some(("to".to_owned(), to)),
                (None, Some(from)) => Some(("from".to_owned(), from)),
                (None, None) => None,
            })
            .collect())
    }

    /// The deadline the job was submitted with (its creation event keeps it), else the span
    /// from its creation to its deadline.
    async fn deadline_asked(&self, job: &crate::ledger::Job) -> Result<Duration, LedgerError> {
        let created: Option<String> = sqlx::query_scalar(
            "SELECT detail FROM events WHERE job_id = $1 AND kind = 'job_created' ORDER BY seq LIMIT 1",
        )
        .bind(&job.job_id)
        .fetch_optional(&self.reader)
        .await?;
        let asked = created
            .and_then(|d| serde_json::from_str::<detail::JobCreated>(&d).ok())
            .and_then(|d| u64::try_from(d.deadline_ms).ok())
            .filter(|ms| *ms > 0);
        Ok(match asked {
            Some(ms) => Duration::from_millis(ms),
            None => {
                Duration::from_micros(u64::try_from(job.deadline_at - job.created_at).unwrap_or(0))
            }
        })
    }

    /// Runs the terminal job `job_id` again as a new job (see the module), as seen with its
    /// first `seen` events (`None`: as it is now). Running it again twice from one view makes
    /// one new job: the derived key is idempotent, and `Created::Existing` says it was made.
    #[tracing::instrument(
        target = "fenceline::trace",
        name = "ledger.transition",
        skip_all,
        fields(
            transition = "rerun",
            job_id = job_id,
            epoch = tracing::field::Empty,
            event_seqs = tracing::field::Empty,
        )
    )]
    pub async fn run_again(
        &self,
        job_id: &str,
        seen: Option<i64>,
        actor: &Actor,
        reason: &str,
    ) -> Result<Created, LedgerError> {
        let reason = Reason::parse(reason)
            .map_err(|no| LedgerError::Invalid(format!("running a job again needs {no}")))?;
        let reason = reason.as_str();
        let refused = |refusal| LedgerError::Refused {
            job_id: job_id.to_owned(),
            refusal,
        };
        let old = self
            .job(job_id)
            .await?
            .ok_or_else(|| refused(Refusal::NotFound))?;
        if !old.state.is_terminal() {
            return Err(refused(Refusal::WrongState(old.state)));
        }
        let (input, model) = self
            .job_input(job_id)
            .await?
            .ok_or_else(|| LedgerError::Corrupt(format!("job {job_id} has no stored input")))?;
        let earlier = self
            .rerun_links_through(job_id, seen.unwrap_or(i64::MAX))
            .await?
            .into_iter()
            .filter(|(dir, _)| dir == "to")
            .count();
        let new = NewJob {
            tenant: old.tenant.clone(),
            idempotency_key: format!("{}~rerun-{}", old.idempotency_key, earlier + 1),
            request_digest: old.request_digest.clone(),
            contract_version: old.contract_version.clone(),
            input,
            model,
            deadline: self.deadline_asked(&old).await?,
            max_attempts: u32::try_from(old.max_attempts).unwrap_or(1),
            replay_policy: old.replay_policy,
            // A drill's run is over by the time its job can run again: the copy is ordinary
            // work of the drill tenant.
            drill_run: None,
            traceparent: None,
        };
        let created = self.create_job(new, actor).await?;
        if let Created::New(job) = &created {
            self.record_events(&[
                (
                    job_id.to_owned(),
                    NewEvent::new(EventKind::Rerun, actor)
                        .epoch(old.owner_epoch)
                        .detail(detail::Rerun {
                            to: Some(job.job_id.clone()),
                            reason: Some(reason.chars().take(200).collect()),
                            from: None,
                        }),
                ),
                (
                    job.job_id.clone(),
                    NewEvent::new(EventKind::Rerun, actor).detail(detail::Rerun {
                        from: Some(job_id.to_owned()),
                        ..Default::default()
                    }),
                ),
            ])
            .await?;
            let at = self.now_us().await?;
            self.record_audit(&NewAudit {
                at,
                actor: &actor.to_string(),
                action: "run_again",
                job_id,
                seen_epoch: old.owner_epoch,
                new_epoch: old.owner_epoch,
                state_before: old.state.as_str(),
                state_after: old.state.as_str(),
                reason,
                evidence: None,
                new_job_id: Some(&job.job_id),
            })
            .await?;
        }
        Ok(created)
    }
}
