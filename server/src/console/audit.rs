//! `/audit`: the audit log, newest first, limited to the operator's tenants.

use fenceline_app::console::{AuditPage, AuditQuery, AuditRow};

use crate::ledger::{AuditFilter, LedgerError};

use super::LedgerConsole;

const PAGE: u32 = 100;

/// The actions the audit log records, for the filter.
const ACTIONS: [&str; 22] = [
    "cancel",
    "dlq_dropped",
    "run_again",
    "dlq_redispatched",
    "dlq_dropped_terminal",
    "dlq_kept_awaiting_decision",
    "result_viewed",
    "resolve_succeeded",
    "resolve_failed",
    "authorize_retry",
    "replay_policy",
    "drill_started",
    "operator_added",
    "operator_role_changed",
    "operator_disabled",
    "operator_enabled",
    "operator_password_reset",
    "token_revoked",
    "signed_in_oidc",
    "incident_opened",
    "incident_pinned",
    "incident_closed",
];

impl LedgerConsole {
    pub(super) async fn build_audit(&self, query: AuditQuery) -> Result<AuditPage, LedgerError> {
        let window = match query.within.as_deref() {
            Some("hour") => Some(3_600_000_000),
            Some("day") => Some(86_400_000_000),
            Some("week") => Some(7 * 86_400_000_000),
            _ => None,
        };
        let since = match window {
            Some(w) => Some(self.ledger.now_us().await? - w),
            None => None,
        };
        // Drills' rows only when asked for, or when their start is the action chosen.
        let without_drills = !query.drills && query.action.as_deref() != Some("drill_started");
        let filter = AuditFilter {
            actor: query.operator.map(|name| format!("operator:{name}")),
            action: query.action,
            job_id: query.job,
            tenants: self.tenants.clone(),
            since,
            before_id: query.before,
            without_drills,
            limit: PAGE + 1,
        };
        let entries = self.ledger.audit_entries(&filter).await?;
        let next = (entries.len() > PAGE as usize).then(|| entries[PAGE as usize - 1].id);
        Ok(AuditPage {
            rows: entries
                .into_iter()
                .take(PAGE as usize)
                .map(|e| AuditRow {
                    at: self.at(e.at),
                    actor: e.actor,
                    action: e.action,
                    job_id: e.job_id,
                    tenant: e.tenant,
                    seen_epoch: e.seen_epoch,
                    new_epoch: e.new_epoch,
                    state_before: e.state_before,
                    state_after: e.state_after,
                    reason: e.reason,
                    evidence: e.evidence,
                    new_job_id: e.new_job_id,
                    subject: e.subject,
                })
                .collect(),
            next,
            actions: ACTIONS.iter().map(|a| (*a).to_owned()).collect(),
        })
    }
}
