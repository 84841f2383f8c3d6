//! `/alerts`: the rules with their thresholds, the episodes firing now and the latest cleared,
//! each with what its notifications came to.

use fenceline_app::console::{AlertRow, AlertsPage};

use super::LedgerConsole;
use crate::ledger::{AlertEpisode, LedgerError};
use crate::time::human_duration;

/// Episodes shown.
const SHOWN: u32 = 200;

impl LedgerConsole {
    pub(super) async fn build_alerts(&self) -> Result<AlertsPage, LedgerError> {
        let settings = &self.queue.alerts;
        let secs = |d: std::time::Duration| human_duration(d.as_micros() as i64);
        let mut page = AlertsPage {
            restricted: self.tenants.is_some(),
            webhook: settings.webhook.is_some(),
            interval: secs(settings.interval),
            rules: vec![
                (
                    crate::alerts::title("unknown_waiting").to_owned(),
                    format!(
                        "jobs have waited in unknown longer than {} for a decision",
                        secs(settings.unknown_after)
                    ),
                ),
                (
                    crate::alerts::title("silent_worker").to_owned(),
                    "a worker stopped reporting while it still owns running jobs (one alert a worker)"
                        .to_owned(),
                ),
                (
                    crate::alerts::title("dead_letters").to_owned(),
                    format!(
                        "the dead-letter queue holds more than {} message(s)",
                        settings.dead_letters_above
                    ),
                ),
                (
                    crate::alerts::title("ready_waiting").to_owned(),
                    format!(
                        "the oldest ready job has waited longer than {} for a worker",
                        secs(settings.ready_after)
                    ),
                ),
                (
                    crate::alerts::title("provider_refusing").to_owned(),
                    format!(
                        "a provider has refused calls to a model in every minute for longer than {} \
                         (one alert a provider and model)",
                        secs(settings.refused_after)
                    ),
                ),
                (
                    crate::alerts::title("drill_failed").to_owned(),
                    "a drill run failed, until a later run passes (one alert a run)".to_owned(),
                ),
            ],
            open: Vec::new(),
            closed: Vec::new(),
        };
        if page.restricted {
            return Ok(page);
        }
        let now = self.ledger.now_us().await?;
        for episode in self.ledger.alert_episodes(SHOWN).await? {
            let open = episode.cleared_at.is_none();
            let row = self.alert_row(episode, now);
            if open {
                page.open.push(row);
            } else {
                page.closed.push(row);
            }
        }
        Ok(page)
    }

    fn alert_row(&self, e: AlertEpisode, now: i64) -> AlertRow {
        let notified = if !e.notify {
            vec!["within the cooldown: not notified".to_owned()]
        } else if self.queue.alerts.webhook.is_none() && e.notifications.is_empty() {
            vec!["no webhook set".to_owned()]
        } else {
            e.notifications
                .iter()
                .map(|n| match (n.sent_at, n.gave_up_at, &n.last_error) {
                    (Some(at), _, _) => format!("{} sent {}", n.status, self.at(at)),
                    (None, Some(_), error) => format!(
                        "{} given up after {} tries ({})",
                        n.status,
                        n.tries,
                        error.as_deref().unwrap_or("no answer")
                    ),
                    (None, None, Some(error)) => {
                        format!("{} not taken yet: {error}, {} tries", n.status, n.tries)
                    }
                    (None, None, None) => format!("{} waiting to be sent", n.status),
                })
                .collect()
        };
        // The link is stored absolute (for webhooks); the page links its path.
        let path = e
            .link
            .split_once("://")
            .and_then(|(_, rest)| rest.find('/').map(|i| rest[i..].to_owned()))
            .unwrap_or_else(|| "/".to_owned());
        AlertRow {
            title: crate::alerts::title(&e.rule).to_owned(),
            subject: e.subject,
            summary: e.summary,
            path,
            opened: self.at(e.opened_at),
            cleared: e.cleared_at.map(|at| self.at(at)),
            lasted: human_duration(e.cleared_at.unwrap_or(now) - e.opened_at),
            notified,
        }
    }
}
