//! Alerts: rules over the ledger judged every few seconds by `serve`, each firing for a subject
//! as an episode (`alerts`) that notifies a webhook once when it opens and once when it clears
//! (`alert_notifications`, kept until sent), and is listed on `/alerts`.
//!
//! | rule | fires while |
//! | --- | --- |
//! | `unknown_waiting` | jobs have waited in `unknown` longer than `unknown_after` |
//! | `silent_worker` | a worker that stopped reporting still owns running jobs (one per worker) |
//! | `dead_letters` | the dead-letter queue holds more than `dead_letters_above` messages |
//! | `ready_waiting` | the oldest `ready` job has waited longer than `ready_after` |
//! | `provider_refusing` | a provider and model have refused calls in every minute for longer than `refused_after` (one per pair) |
//! | `drill_failed` | a drill run failed, until a later run passes (one per failed run) |

use std::time::Duration;

use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::ledger::{AlertChange, AlertFiring, Ledger, LedgerError, UnknownWaiting};
pub use crate::settings::AlertSettings;

/// The rules, as stored and shown.
pub const RULES: [(&str, &str); 6] = [
    ("unknown_waiting", "Jobs wait in unknown"),
    ("silent_worker", "A silent worker owns running jobs"),
    ("dead_letters", "Dead letters"),
    ("ready_waiting", "Ready jobs wait"),
    ("provider_refusing", "A provider refuses calls"),
    ("drill_failed", "A drill failed"),
];

/// The title of a rule.
pub fn title(rule: &str) -> &str {
    RULES
        .iter()
        .find(|(name, _)| *name == rule)
        .map_or(rule, |(_, title)| title)
}

/// What the rules look at, read once a round. A part that could not be read is `None`, and its
/// rule is not judged that round (its episodes neither open nor clear).
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Database clock, µs.
    pub now: i64,
    pub unknown: Option<Option<UnknownWaiting>>,
    /// Silent workers with the running jobs each owns.
    pub silent: Option<Vec<(String, i64)>>,
    pub dead_letters: Option<i64>,
    /// The oldest `ready` job and how long it has waited (µs).
    pub oldest_ready: Option<Option<(String, i64)>>,
    /// Provider, model and since when each has refused in every minute (µs).
    pub refusing: Option<Vec<(String, String, i64)>>,
    /// Failed drill runs no later run has passed since.
    pub failed_drills: Option<Vec<String>>,
}

fn us(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

fn human(us: i64) -> String {
    crate::time::human_duration(us.max(0))
}

/// The rules judged on `snapshot`: the ones it could judge, and those that fire. `base` is the
/// console's address, for links.
pub fn judge(
    settings: &AlertSettings,
    snapshot: &Snapshot,
    base: &str,
) -> (Vec<&'static str>, Vec<AlertFiring>) {
    let mut judged = Vec::new();
    let mut firing = Vec::new();
    let mut fire = |rule: &str, subject: String, summary: String, path: String| {
        firing.push(AlertFiring {
            rule: rule.to_owned(),
            subject,
            summary,
            link: format!("{base}{path}"),
        })
    };
    if let Some(unknown) = &snapshot.unknown {
        judged.push("unknown_waiting");
        if let Some(w) = unknown {
            fire(
                "unknown_waiting",
                "unknown".into(),
                format!(
                    "{} waited in unknown longer than {} for a decision; the oldest, {}, for {}",
                    match w.count {
                        1 => "1 job has".to_owned(),
                        n => format!("{n} jobs have"),
                    },
                    human(us(settings.unknown_after)),
                    w.oldest_job,
                    human(snapshot.now - w.oldest_since),
                ),
                "/unknown".into(),
            );
        }
    }
    if let Some(silent) = &snapshot.silent {
        judged.push("silent_worker");
        for (worker, held) in silent.iter().filter(|(_, held)| *held > 0) {
            fire(
                "silent_worker",
                worker.clone(),
                format!(
                    "worker {worker} stopped reporting and still owns {held} running job{}; \
                     the reaper takes them back once their leases lapse",
                    if *held == 1 { "" } else { "s" }
                ),
                "/workers".into(),
            );
        }
    }
    if let Some(n) = snapshot.dead_letters {
        judged.push("dead_letters");
        if n > settings.dead_letters_above {
            fire(
                "dead_letters",
                "dlq".into(),
                format!(
                    "the dead-letter queue holds {n} message{} (alerting above {})",
                    if n == 1 { "" } else { "s" },
                    settings.dead_letters_above
                ),
                "/dlq".into(),
            );
        }
    }
    if let Some(oldest) = &snapshot.oldest_ready {
        judged.push("ready_waiting");
        if let Some((job, waited)) = oldest
            .as_ref()
            .filter(|(_, w)| *w > us(settings.ready_after))
        {
            fire(
                "ready_waiting",
                "ready".into(),
                format!(
                    "the oldest ready job, {job}, has waited {} for a worker (alerting after {})",
                    human(*waited),
                    human(us(settings.ready_after))
                ),
                "/jobs?state=ready".into(),
            );
        }
    }
    if let Some(refusing) = &snapshot.refusing {
        judged.push("provider_refusing");
        for (provider, model, since) in refusing {
            if snapshot.now - since >= us(settings.refused_after) {
                fire(
                    "provider_refusing",
                    format!("{provider} · {model}"),
                    format!(
                        "{provider} has refused calls to {model} in every minute for {}",
                        human(snapshot.now - since)
                    ),
                    "/workers".into(),
                );
            }
        }
    }
    if let Some(failed) = &snapshot.failed_drills {
        judged.push("drill_failed");
        for run in failed {
            fire(
                "drill_failed",
                run.clone(),
                format!("drill run {run} failed: its report names the checks that did not hold"),
                format!("/drills/{run}"),
            );
        }
    }
    (judged, firing)
}

/// Since when each provider and model has refused in every minute up to the last one, from
/// minutes (newest first per pair) that had refusals. A pair whose newest minute is older than
/// the minute before `now`'s has stopped refusing.
pub fn refusing_since(now: i64, minutes: &[(String, String, i64)]) -> Vec<(String, String, i64)> {
    const MINUTE: i64 = 60_000_000;
    let current = now - now.rem_euclid(MINUTE);
    let mut out: Vec<(String, String, i64)> = Vec::new();
    let mut i = 0;
    while i < minutes.len() {
        let (provider, model, newest) = &minutes[i];
        let mut since = *newest;
        let mut j = i + 1;
        while j < minutes.len() && minutes[j].0 == *provider && minutes[j].1 == *model {
            if minutes[j].2 == since - MINUTE {
                since = minutes[j].2;
            } else if minutes[j].2 < since - MINUTE {
                // A gap: the run ends here; skip the pair's older minutes.
                while j < minutes.len() && minutes[j].0 == *provider && minutes[j].1 == *model {
                    j += 1;
                }
                break;
            }
            j += 1;
        }
        if *newest >= current - MINUTE {
            out.push((provider.clone(), model.clone(), since));
        }
        i = j;
    }
    out
}

/// The webhook body of a change: a `text` line for Slack-compatible receivers, and the fields
/// for generic ones.
pub fn body(change: &AlertChange, at: &str) -> String {
    let status = change.status;
    let text = match status {
        "firing" => format!(
            "[FIRING] {}: {} — {}",
            title(&change.rule),
            change.summary,
            change.link
        ),
        _ => format!(
            "[CLEARED] {}: {} — {}",
            title(&change.rule),
            change.subject,
            change.link
        ),
    };
    json!({
        "text": text,
        "status": status,
        "alert": change.rule,
        "title": title(&change.rule),
        "subject": change.subject,
        "summary": change.summary,
        "link": change.link,
        "episode": change.alert_id,
        "at": at,
    })
    .to_string()
}

/// Notifications claimed at once, and for how long: longer than sending them all can take
/// (each request is bounded to 10 s), so that no other process sends one of them meanwhile.
const CLAIMED: u32 = 10;
const CLAIMED_FOR: Duration = Duration::from_secs(10 * 10 + 60);

/// Most tries of a notification before it is given up.
const MOST_TRIES: i64 = 8;

/// The wait before try `tries + 1`: 10 s, doubling, at most 10 minutes.
fn backoff(tries: i64) -> Duration {
    Duration::from_secs((10u64 << tries.clamp(0, 6) as u64).min(600))
}

/// Judges the rules and sends what is due, a round every `settings.interval`.
pub struct Alerts {
    ledger: Ledger,
    settings: AlertSettings,
    /// The console's address, for links.
    base: String,
    /// Where the dead letters are counted.
    dead_letters: DeadLetters,
    http: reqwest::Client,
}

/// Where the dead-letter queue is counted.
pub enum DeadLetters {
    /// The embedded queue's, by name.
    Embedded(String),
    /// SQS's, by its approximate depth.
    Queue(crate::queue::AnyQueue),
    /// Not counted.
    None,
}

impl Alerts {
    pub fn new(
        ledger: Ledger,
        settings: AlertSettings,
        base: String,
        dead_letters: DeadLetters,
    ) -> Alerts {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("an HTTP client");
        Alerts {
            ledger,
            settings,
            base,
            dead_letters,
            http,
        }
    }

    /// Reads what the rules look at.
    pub async fn snapshot(&self) -> Result<Snapshot, LedgerError> {
        use crate::worker::presence::{listed_since, quiet_since};
        let ledger = &self.ledger;
        let now = ledger.now_us().await?;
        let unknown = ledger
            .unknown_waiting(now - us(self.settings.unknown_after))
            .await
            .ok();
        let silent = ledger
            .workers_seen(listed_since(now), now, None)
            .await
            .ok()
            .map(|seen| {
                seen.into_iter()
                    .filter(|w| {
                        w.reported
                            .as_ref()
                            .is_some_and(|r| r.stopped_at.is_none() && r.seen_at < quiet_since(now))
                    })
                    .map(|w| (w.worker_id, w.held))
                    .collect()
            });
        let dead_letters = match &self.dead_letters {
            DeadLetters::Embedded(name) => ledger
                .queue_depth(name)
                .await
                .ok()
                .map(|d| d.visible + d.in_flight + d.delayed),
            DeadLetters::Queue(queue) => {
                use crate::queue::Queue;
                queue
                    .depth()
                    .await
                    .ok()
                    .map(|d| d.visible + d.in_flight + d.delayed)
            }
            DeadLetters::None => None,
        };
        let oldest_ready = ledger.oldest_ready(None).await.ok();
        let window = us(self.settings.refused_after) + 3 * 60_000_000;
        let refusing = ledger
            .refusal_minutes(now - window)
            .await
            .ok()
            .map(|minutes| refusing_since(now, &minutes));
        let failed_drills = ledger.drill_runs(50).await.ok().map(|runs| {
            // Newest first: failures before the newest pass.
            let mut failed = Vec::new();
            for run in runs {
                match run.status.as_str() {
                    "passed" => break,
                    "failed" => failed.push(run.run_id),
                    _ => {}
                }
            }
            failed
        });
        Ok(Snapshot {
            now,
            unknown,
            silent,
            dead_letters,
            oldest_ready,
            refusing,
            failed_drills,
        })
    }

    /// One round: judge, record the episodes, send what is due.
    pub async fn round(&self) -> Result<Vec<AlertChange>, LedgerError> {
        let snapshot = self.snapshot().await?;
        let (judged, firing) = judge(&self.settings, &snapshot, &self.base);
        let at = crate::time::rfc3339_us(snapshot.now);
        let changes = self
            .ledger
            .sync_alerts(
                &judged,
                &firing,
                self.settings.cooldown,
                self.settings.webhook.is_some(),
                |change| body(change, &at),
            )
            .await?;
        for change in &changes {
            tracing::info!(
                rule = change.rule,
                subject = change.subject,
                status = change.status,
                notify = change.notify,
                "alert"
            );
        }
        self.send_due().await?;
        Ok(changes)
    }

    /// Sends the notifications due, oldest first; a failed one is tried again later.
    pub async fn send_due(&self) -> Result<(), LedgerError> {
        let Some(webhook) = &self.settings.webhook else {
            return Ok(());
        };
        let due = self
            .ledger
            .claim_alert_notifications(CLAIMED, CLAIMED_FOR)
            .await?;
        for n in due {
            let sent = self
                .http
                .post(webhook.expose())
                .header("content-type", "application/json")
                .body(n.body.clone())
                .send()
                .await;
            let failed = match sent {
                Ok(answer) if answer.status().is_success() => None,
                Ok(answer) => Some(format!("HTTP {}", answer.status().as_u16())),
                // The URL is a secret: the error names the kind of failure only.
                Err(e) if e.is_timeout() => Some("timed out".to_owned()),
                Err(e) if e.is_connect() => Some("could not connect".to_owned()),
                Err(_) => Some("the request failed".to_owned()),
            };
            match failed {
                None => {
                    self.ledger
                        .alert_notification_sent(n.notification_id)
                        .await?
                }
                Some(error) => {
                    let retry = (n.tries + 1 < MOST_TRIES).then(|| backoff(n.tries));
                    tracing::warn!(
                        notification = n.notification_id,
                        error,
                        tries = n.tries + 1,
                        "an alert notification was not taken"
                    );
                    self.ledger
                        .alert_notification_failed(n.notification_id, &error, retry)
                        .await?;
                }
            }
        }
        Ok(())
    }

    /// Rounds until `stop`.
    pub async fn run(self, stop: CancellationToken) {
        loop {
            if let Err(error) = self.round().await {
                tracing::warn!(%error, "an alerts round failed");
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(self.settings.interval) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: i64 = 60_000_000;

    #[test]
    fn a_rule_fires_past_its_threshold_and_is_judged_only_when_read() {
        let settings = AlertSettings {
            unknown_after: Duration::from_secs(60),
            ready_after: Duration::from_secs(60),
            ..AlertSettings::default()
        };
        let now = 100 * MIN;
        let snapshot = Snapshot {
            now,
            unknown: Some(Some(UnknownWaiting {
                count: 2,
                oldest_job: "job_a".into(),
                oldest_since: now - 5 * MIN,
            })),
            silent: Some(vec![("w1".into(), 3), ("w2".into(), 0)]),
            dead_letters: Some(0),
            oldest_ready: Some(Some(("job_r".into(), 30_000_000))),
            refusing: None,
            failed_drills: Some(vec!["run_1".into()]),
        };
        let (judged, firing) = judge(&settings, &snapshot, "https://fl.example");
        assert!(
            !judged.contains(&"provider_refusing"),
            "not read, not judged"
        );
        let fired: Vec<(&str, &str)> = firing
            .iter()
            .map(|f| (f.rule.as_str(), f.subject.as_str()))
            .collect();
        assert_eq!(
            fired,
            [
                ("unknown_waiting", "unknown"),
                ("silent_worker", "w1"),
                ("drill_failed", "run_1")
            ]
        );
        assert_eq!(firing[0].link, "https://fl.example/unknown");
        assert!(
            firing[0].summary.contains("2 jobs have waited"),
            "{}",
            firing[0].summary
        );
    }

    #[test]
    fn a_provider_refuses_for_as_long_as_its_minutes_run_unbroken() {
        let now = 100 * MIN + 20_000_000;
        let m = |p: &str, minute: i64| (p.to_owned(), "m".to_owned(), minute * MIN);
        let minutes = vec![
            // Every minute from 93 to 100: since 93.
            m("a", 100),
            m("a", 99),
            m("a", 98),
            m("a", 97),
            m("a", 96),
            m("a", 95),
            m("a", 94),
            m("a", 93),
            // A gap before 97: since 97.
            m("b", 99),
            m("b", 98),
            m("b", 97),
            m("b", 95),
            // Stopped refusing at 96.
            m("c", 96),
            m("c", 95),
        ];
        assert_eq!(refusing_since(now, &minutes), vec![m("a", 93), m("b", 97)]);
    }
}
