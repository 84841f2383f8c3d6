//! Alert episodes and their webhook notifications (`alerts`, `alert_notifications`), and the
//! reads the alert rules look at. An episode opens when its rule fires for a subject and clears
//! when it no longer does; its notifications wait here until sent, so several processes can
//! judge the same rules and a restart neither loses nor repeats one.

use std::time::Duration;

use sqlx::Row;

use super::{Ledger, LedgerError};

/// A rule firing for one subject this round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlertFiring {
    pub rule: String,
    /// What it fires for: `unknown`, a worker's id, a provider and model, a drill run.
    pub subject: String,
    /// One line for people.
    pub summary: String,
    /// The console page that shows it (absolute).
    pub link: String,
}

/// An episode that opened or cleared in a round, as its notification tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlertChange {
    pub alert_id: i64,
    /// `firing` or `cleared`.
    pub status: &'static str,
    pub rule: String,
    pub subject: String,
    pub summary: String,
    pub link: String,
    pub opened_at: i64,
    pub cleared_at: Option<i64>,
    /// Whether it notifies (not within the cooldown after a notified one).
    pub notify: bool,
}

/// An episode as the alerts page lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlertEpisode {
    pub alert_id: i64,
    pub rule: String,
    pub subject: String,
    pub summary: String,
    pub link: String,
    pub opened_at: i64,
    pub seen_at: i64,
    pub cleared_at: Option<i64>,
    pub notify: bool,
    pub notifications: Vec<AlertNotification>,
}

/// One webhook notification and what came of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlertNotification {
    pub notification_id: i64,
    /// `firing` or `cleared`.
    pub status: String,
    pub created_at: i64,
    pub tries: i64,
    pub sent_at: Option<i64>,
    pub gave_up_at: Option<i64>,
    pub last_error: Option<String>,
}

/// A notification due to be sent, claimed for a while by the process that took it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueNotification {
    pub notification_id: i64,
    pub body: String,
    pub tries: i64,
}

/// `unknown` jobs that have waited past a threshold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownWaiting {
    pub count: i64,
    pub oldest_job: String,
    /// Since when the oldest has waited (database clock, µs).
    pub oldest_since: i64,
}

impl Ledger {
    /// Records a round of alert rules: episodes open for rules that fire and are not open yet
    /// (notifying unless an episode of the same rule and subject that notified cleared within
    /// `cooldown`), stay open for those still firing, and clear for the rules `judged` this
    /// round that no longer fire for their subject. With `notifying`, each episode that opens or
    /// clears and notifies gets its notification, its body made by `body`, in the same
    /// transaction. Returns what changed.
    pub async fn sync_alerts(
        &self,
        judged: &[&str],
        firing: &[AlertFiring],
        cooldown: Duration,
        notifying: bool,
        body: impl Fn(&AlertChange) -> String,
    ) -> Result<Vec<AlertChange>, LedgerError> {
        let now = self.now_us().await?;
        let cooldown_us = i64::try_from(cooldown.as_micros()).unwrap_or(i64::MAX);
        let mut tx = self.begin_write().await?;
        let open = sqlx::query(
            "SELECT alert_id, rule, subject, summary, link, opened_at, notify FROM alerts \
             WHERE cleared_at IS NULL",
        )
        .fetch_all(&mut *tx)
        .await?;
        let mut changes = Vec::new();
        let mut still_open = std::collections::HashSet::new();
        for f in firing {
            let known = open.iter().any(|row| {
                row.try_get::<String, _>("rule").ok().as_deref() == Some(f.rule.as_str())
                    && row.try_get::<String, _>("subject").ok().as_deref()
                        == Some(f.subject.as_str())
            });
            still_open.insert((f.rule.as_str(), f.subject.as_str()));
            if known {
                // Opened within the cooldown and firing still once it has passed: it is no
                // flap, and notifies now.
                let promoted: Option<i64> = sqlx::query_scalar(
                    "UPDATE alerts SET notify = 1 WHERE rule = $1 AND subject = $2 \
                     AND cleared_at IS NULL AND notify = 0 AND opened_at <= $3 \
                     RETURNING alert_id",
                )
                .bind(&f.rule)
                .bind(&f.subject)
                .bind(now - cooldown_us)
                .fetch_optional(&mut *tx)
                .await?;
                if let Some(alert_id) = promoted {
                    let opened_at: i64 =
                        sqlx::query_scalar("SELECT opened_at FROM alerts WHERE alert_id = $1")
                            .bind(alert_id)
                            .fetch_one(&mut *tx)
                            .await?;
                    changes.push(AlertChange {
                        alert_id,
                        status: "firing",
                        rule: f.rule.clone(),
                        subject: f.subject.clone(),
                        summary: f.summary.clone(),
                        link: f.link.clone(),
                        opened_at,
                        cleared_at: None,
                        notify: true,
                    });
                }
                sqlx::query(
                    "UPDATE alerts SET summary = $1, link = $2, seen_at = $3 \
                     WHERE rule = $4 AND subject = $5 AND cleared_at IS NULL",
                )
                .bind(&f.summary)
                .bind(&f.link)
                .bind(now)
                .bind(&f.rule)
                .bind(&f.subject)
                .execute(&mut *tx)
                .await?;
                continue;
            }
            let last_cleared: Option<i64> = sqlx::query_scalar(
                "SELECT MAX(cleared_at) FROM alerts WHERE rule = $1 AND subject = $2 \
                 AND notify = 1",
            )
            .bind(&f.rule)
            .bind(&f.subject)
            .fetch_one(&mut *tx)
            .await?;
            let notify = last_cleared.is_none_or(|at| now - at >= cooldown_us);
            let opened: Option<i64> = sqlx::query_scalar(
                "INSERT INTO alerts (rule, subject, summary, link, opened_at, seen_at, notify) \
                 VALUES ($1, $2, $3, $4, $5, $5, $6) ON CONFLICT DO NOTHING RETURNING alert_id",
            )
            .bind(&f.rule)
            .bind(&f.subject)
            .bind(&f.summary)
            .bind(&f.link)
            .bind(now)
            .bind(i64::from(notify))
            .fetch_optional(&mut *tx)
            .await?;
            if let Some(alert_id) = opened {
                changes.push(AlertChange {
                    alert_id,
                    status: "firing",
                    rule: f.rule.clone(),
                    subject: f.subject.clone(),
                    summary: f.summary.clone(),
                    link: f.link.clone(),
                    opened_at: now,
                    cleared_at: None,
                    notify,
                });
            }
        }
        for row in &open {
            let rule: String = row.try_get("rule")?;
            let subject: String = row.try_get("subject")?;
            if !judged.contains(&rule.as_str())
                || still_open.contains(&(rule.as_str(), subject.as_str()))
            {
                continue;
            }
            let alert_id: i64 = row.try_get("alert_id")?;
            let cleared = sqlx::query(
                "UPDATE alerts SET cleared_at = $1 WHERE alert_id = $2 AND cleared_at IS NULL",
            )
            .bind(now)
            .bind(alert_id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if cleared == 1 {
                changes.push(AlertChange {
                    alert_id,
                    status: "cleared",
                    rule,
                    subject,
                    summary: row.try_get("summary")?,
                    link: row.try_get("link")?,
                    opened_at: row.try_get("opened_at")?,
                    cleared_at: Some(now),
                    notify: row.try_get::<i64, _>("notify")? == 1,
                });
            }
        }
        if notifying {
            for change in changes.iter().filter(|c| c.notify) {
                sqlx::query(
                    "INSERT INTO alert_notifications (alert_id, status, body, created_at, \
                     next_try_at) VALUES ($1, $2, $3, $4, $4)",
                )
                .bind(change.alert_id)
                .bind(change.status)
                .bind(body(change))
                .bind(now)
                .execute(&mut *tx)
                .await?;
            }
        }
        tx.commit().await?;
        Ok(changes)
    }

    /// Up to `limit` notifications due now, claimed for `hold` (another process takes one only
    /// once that has passed without it being sent); an alert's notifications in the order
    /// made: its "cleared" never before its "firing".
    pub async fn claim_alert_notifications(
        &self,
        limit: u32,
        hold: Duration,
    ) -> Result<Vec<DueNotification>, LedgerError> {
        let now = self.now_us().await?;
        let until = now + i64::try_from(hold.as_micros()).unwrap_or(i64::MAX / 2);
        let rows = sqlx::query(
            "UPDATE alert_notifications SET next_try_at = $2 \
             WHERE notification_id IN (SELECT n.notification_id FROM alert_notifications n \
               WHERE n.sent_at IS NULL AND n.gave_up_at IS NULL AND n.next_try_at <= $1 \
               AND NOT EXISTS (SELECT 1 FROM alert_notifications o \
                 WHERE o.alert_id = n.alert_id AND o.notification_id < n.notification_id \
                 AND o.sent_at IS NULL AND o.gave_up_at IS NULL) \
               ORDER BY n.notification_id LIMIT $3) \
             AND sent_at IS NULL AND gave_up_at IS NULL AND next_try_at <= $1 \
             RETURNING notification_id, body, tries",
        )
        .bind(now)
        .bind(until)
        .bind(i64::from(limit))
        .fetch_all(&self.writer)
        .await?;
        let mut due: Vec<DueNotification> = rows
            .iter()
            .map(|row| {
                Ok(DueNotification {
                    notification_id: row.try_get("notification_id")?,
                    body: row.try_get("body")?,
                    tries: row.try_get("tries")?,
                })
            })
            .collect::<Result<_, LedgerError>>()?;
        due.sort_by_key(|d| d.notification_id);
        Ok(due)
    }

    /// Records a notification the receiver took.
    pub async fn alert_notification_sent(&self, notification_id: i64) -> Result<(), LedgerError> {
        let now = self.now_us().await?;
        sqlx::query(
            "UPDATE alert_notifications SET sent_at = $1, tries = tries + 1, last_error = NULL \
             WHERE notification_id = $2",
        )
        .bind(now)
        .bind(notification_id)
        .execute(&self.writer)
        .await?;
        Ok(())
    }

    /// Records a failed try: tried again after `retry` (`None`: given up).
    pub async fn alert_notification_failed(
        &self,
        notification_id: i64,
        error: &str,
        retry: Option<Duration>,
    ) -> Result<(), LedgerError> {
        let now = self.now_us().await?;
        let next = retry.map(|r| now + i64::try_from(r.as_micros()).unwrap_or(i64::MAX / 2));
        sqlx::query(
            "UPDATE alert_notifications SET tries = tries + 1, last_error = $1, \
             next_try_at = COALESCE($2, next_try_at), \
             gave_up_at = CASE WHEN $2 IS NULL THEN $3 ELSE NULL END \
             WHERE notification_id = $4",
        )
        .bind(error)
        .bind(next)
        .bind(now)
        .bind(notification_id)
        .execute(&self.writer)
        .await?;
        Ok(())
    }

    /// The latest `limit` episodes, open ones first, each with its notifications.
    pub async fn alert_episodes(&self, limit: u32) -> Result<Vec<AlertEpisode>, LedgerError> {
        let rows = sqlx::query(
            "SELECT alert_id, rule, subject, summary, link, opened_at, seen_at, cleared_at, \
             notify FROM alerts ORDER BY (CASE WHEN cleared_at IS NULL THEN 0 ELSE 1 END), \
             opened_at DESC, alert_id DESC LIMIT $1",
        )
        .bind(i64::from(limit))
        .fetch_all(&self.reader)
        .await?;
        let mut episodes: Vec<AlertEpisode> = rows
            .iter()
            .map(|row| {
                Ok(AlertEpisode {
                    alert_id: row.try_get("alert_id")?,
                    rule: row.try_get("rule")?,
                    subject: row.try_get("subject")?,
                    summary: row.try_get("summary")?,
                    link: row.try_get("link")?,
                    opened_at: row.try_get("opened_at")?,
                    seen_at: row.try_get("seen_at")?,
                    cleared_at: row.try_get("cleared_at")?,
                    notify: row.try_get::<i64, _>("notify")? == 1,
                    notifications: Vec::new(),
                })
            })
            .collect::<Result<_, LedgerError>>()?;
        let Some(oldest) = episodes.iter().map(|e| e.alert_id).min() else {
            return Ok(episodes);
        };
        let rows = sqlx::query(
            "SELECT notification_id, alert_id, status, created_at, tries, sent_at, gave_up_at, \
             last_error FROM alert_notifications WHERE alert_id >= $1 ORDER BY notification_id",
        )
        .bind(oldest)
        .fetch_all(&self.reader)
        .await?;
        for row in &rows {
            let alert_id: i64 = row.try_get("alert_id")?;
            if let Some(episode) = episodes.iter_mut().find(|e| e.alert_id == alert_id) {
                episode.notifications.push(AlertNotification {
                    notification_id: row.try_get("notification_id")?,
                    status: row.try_get("status")?,
                    created_at: row.try_get("created_at")?,
                    tries: row.try_get("tries")?,
                    sent_at: row.try_get("sent_at")?,
                    gave_up_at: row.try_get("gave_up_at")?,
                    last_error: row.try_get("last_error")?,
                });
            }
        }
        Ok(episodes)
    }

    /// `unknown` jobs (drills' left out) that entered it before `before`: how many, and the
    /// oldest.
    pub async fn unknown_waiting(
        &self,
        before: i64,
    ) -> Result<Option<UnknownWaiting>, LedgerError> {
        let count: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM jobs WHERE state = 'unknown' AND drill_run IS NULL \
             AND updated_at <= $1",
        )
        .bind(before)
        .fetch_one(&self.reader)
        .await?;
        if count == 0 {
            return Ok(None);
        }
        let row = sqlx::query(
            "SELECT job_id, updated_at FROM jobs WHERE state = 'unknown' AND drill_run IS NULL \
             AND updated_at <= $1 ORDER BY updated_at, job_id LIMIT 1",
        )
        .bind(before)
        .fetch_one(&self.reader)
        .await?;
        Ok(Some(UnknownWaiting {
            count,
            oldest_job: row.try_get("job_id")?,
            oldest_since: row.try_get("updated_at")?,
        }))
    }

    /// Per provider and model with refusals in the last `window`, the minutes (start, µs)
    /// that had any, newest first.
    pub async fn refusal_minutes(
        &self,
        since: i64,
    ) -> Result<Vec<(String, String, i64)>, LedgerError> {
        let rows = sqlx::query(
            "SELECT provider, model, minute FROM provider_refusals WHERE minute >= $1 AND n > 0 \
             ORDER BY provider, model, minute DESC",
        )
        .bind(since)
        .fetch_all(&self.reader)
        .await?;
        rows.iter()
            .map(|row| {
                Ok((
                    row.try_get("provider")?,
                    row.try_get("model")?,
                    row.try_get("minute")?,
                ))
            })
            .collect()
    }
}
