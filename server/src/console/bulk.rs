//! `/bulk/{id}`: an action by filter, previewed or under way; and the filter a jobs-list
//! address describes, for the form that previews one.

use fenceline_app::components::BadParameter;
use fenceline_app::console::{BulkJobRow, BulkPage, BulkRow, JobsQuery};

use super::LedgerConsole;
use crate::ledger::{JobFilter, LedgerError, PREVIEW_VALID};

/// Jobs listed on the page.
const LISTED: u32 = 100;

/// A jobs-list filter as the list's address has it (`state=unknown&tenant=acme`), as a bulk
/// action records what it was previewed from.
pub fn filter_text(query: &JobsQuery) -> String {
    let address = fenceline_app::pages::jobs::href(query, query.state.as_deref(), None);
    address
        .strip_prefix("/jobs")
        .unwrap_or_default()
        .trim_start_matches('?')
        .to_owned()
}

impl LedgerConsole {
    /// The ledger's filter a jobs-list `query` describes, within this console's tenants.
    pub async fn bulk_filter(
        &self,
        query: &JobsQuery,
    ) -> Result<Result<JobFilter, BadParameter>, LedgerError> {
        let scoped = self.scope(query).await?;
        Ok(self.job_filter(query, &scoped))
    }

    pub(super) async fn build_bulk_list(&self) -> Result<Vec<BulkRow>, LedgerError> {
        let mine = self.visitor.as_ref().map(|name| format!("operator:{name}"));
        Ok(self
            .ledger
            .bulk_actions(LISTED)
            .await?
            .into_iter()
            .filter(|b| self.tenants.is_none() || mine.as_deref() == Some(b.actor.as_str()))
            .map(|b| BulkRow {
                bulk_id: b.bulk_id,
                action: b
                    .action
                    .parse::<crate::bulk::BulkKind>()
                    .map(|k| k.label().to_owned())
                    .unwrap_or_else(|_| b.action.clone()),
                filter: if b.filter.is_empty() {
                    "every job".to_owned()
                } else {
                    b.filter.replace('&', " · ")
                },
                by: b
                    .actor
                    .strip_prefix("operator:")
                    .unwrap_or(&b.actor)
                    .to_owned(),
                status: b.status.clone(),
                progress: format!(
                    "{} of {}: {} applied, {} moved on (left alone), {} refused",
                    b.done(),
                    b.total,
                    b.applied,
                    b.moved_on,
                    b.refused
                ),
                created: self.at(b.created_at),
            })
            .collect())
    }

    pub(super) async fn build_bulk(
        &self,
        raw: String,
        visitor: Option<&str>,
    ) -> Result<Option<BulkPage>, LedgerError> {
        let Ok(bulk_id) = raw.parse::<i64>() else {
            return Ok(None);
        };
        let Some(bulk) = self.ledger.bulk_action(bulk_id).await? else {
            return Ok(None);
        };
        let mine = visitor.is_some_and(|name| bulk.actor == format!("operator:{name}"));
        if !mine && self.tenants.is_some() {
            return Ok(None);
        }
        let now = self.ledger.now_us().await?;
        let valid_until = bulk.created_at + PREVIEW_VALID.as_micros() as i64;
        let lapsed = bulk.status == "previewed" && now >= valid_until;
        let action = bulk
            .action
            .parse::<crate::bulk::BulkKind>()
            .map(|k| k.label().to_owned())
            .unwrap_or_else(|_| bulk.action.clone());
        let jobs = self.ledger.bulk_jobs(bulk_id, None, LISTED).await?;
        Ok(Some(BulkPage {
            bulk_id,
            action,
            filter_link: format!("/jobs?{}", bulk.filter),
            filter: if bulk.filter.is_empty() {
                "every job".to_owned()
            } else {
                bulk.filter.replace('&', " · ")
            },
            by: bulk
                .actor
                .strip_prefix("operator:")
                .unwrap_or(&bulk.actor)
                .to_owned(),
            status: bulk.status.clone(),
            total: bulk.total,
            created: self.at(bulk.created_at),
            confirmed: bulk.confirmed_at.map(|t| self.at(t)),
            finished: bulk.finished_at.map(|t| self.at(t)),
            reason: bulk.reason.clone(),
            applied: bulk.applied,
            moved_on: bulk.moved_on,
            refused: bulk.refused,
            confirm_until: (mine && bulk.status == "previewed" && !lapsed)
                .then(|| self.at(valid_until)),
            lapsed,
            audit_entries: self.ledger.bulk_audit_count(bulk_id).await?,
            jobs: jobs
                .into_iter()
                .map(|j| BulkJobRow {
                    job_id: j.job_id,
                    state: j.state,
                    epoch: j.epoch,
                    outcome: match j.outcome.as_deref() {
                        None => "—".to_owned(),
                        Some("moved_on") => "moved on: left alone".to_owned(),
                        Some(other) => other.to_owned(),
                    },
                })
                .collect(),
        }))
    }
}
