//! Incidents (`incidents`, `incident_jobs`): jobs pinned to one, kept from retention while it
//! is open and until its keep time after it closed, and its frozen bundle, made once and
//! stored with its SHA-256 digests.

use sqlx::Row;

use super::read::{event_from_row, job_from_row, JOB_COLUMNS};
use super::write::{guarded_in, Reserved};
use super::{AdminAudit, AuditEntry, Event, Job, Ledger, LedgerError, NewEvent};
use crate::job::{detail, Actor, EventKind};

/// Most jobs one incident holds.
pub const MAX_PINNED: i64 = 1_000;

/// An incident as stored (without its bundle's bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Incident {
    pub incident_id: i64,
    pub title: String,
    /// A ticket number or the like.
    pub external_id: Option<String>,
    pub opened_by: String,
    pub opened_at: i64,
    pub closed_by: Option<String>,
    pub closed_at: Option<i64>,
    /// Until when its jobs are kept after it closed.
    pub keep_until: Option<i64>,
    /// The SHA-256 of each file of its frozen bundle (Markdown, JSON, HTML), once made.
    pub sha256: Option<[String; 3]>,
    pub jobs: i64,
}

/// A frozen bundle: its three files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bundle {
    pub markdown: String,
    pub json: String,
    pub html: String,
}

impl Bundle {
    /// The SHA-256 of each file, hex.
    pub fn digests(&self) -> [String; 3] {
        use sha2::{Digest, Sha256};
        [&self.markdown, &self.json, &self.html].map(|b| hex::encode(Sha256::digest(b.as_bytes())))
    }
}

const COLUMNS: &str = "i.incident_id, i.title, i.external_id, i.opened_by, i.opened_at, \
     i.closed_by, i.closed_at, i.keep_until, i.sha256_md, i.sha256_json, i.sha256_html, \
     (SELECT COUNT(*) FROM incident_jobs p WHERE p.incident_id = i.incident_id) AS pinned";

fn incident_from_row(row: &sqlx::any::AnyRow) -> Result<Incident, LedgerError> {
    let md: Option<String> = row.try_get("sha256_md")?;
    let json: Option<String> = row.try_get("sha256_json")?;
    let html: Option<String> = row.try_get("sha256_html")?;
    Ok(Incident {
        incident_id: row.try_get("incident_id")?,
        title: row.try_get("title")?,
        external_id: row.try_get("external_id")?,
        opened_by: row.try_get("opened_by")?,
        opened_at: row.try_get("opened_at")?,
        closed_by: row.try_get("closed_by")?,
        closed_at: row.try_get("closed_at")?,
        keep_until: row.try_get("keep_until")?,
        sha256: match (md, json, html) {
            (Some(a), Some(b), Some(c)) => Some([a, b, c]),
            _ => None,
        },
        jobs: row.try_get("pinned")?,
    })
}

impl Ledger {
    /// Opens an incident, audited. Returns its id.
    pub async fn open_incident(
        &self,
        title: &str,
        external_id: Option<&str>,
        actor: &Actor,
    ) -> Result<i64, LedgerError> {
        let actor = &actor.to_string();
        let now = self.now_us().await?;
        let mut tx = self.begin_write().await?;
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO incidents (title, external_id, opened_by, opened_at) \
             VALUES ($1, $2, $3, $4) RETURNING incident_id",
        )
        .bind(title)
        .bind(external_id)
        .bind(actor)
        .bind(now)
        .fetch_one(&mut *tx)
        .await?;
        super::audit::insert_admin_audit(
            &mut tx,
            &AdminAudit {
                actor,
                action: "incident_opened",
                subject: &format!("incident:{id}"),
                reason: title,
                before: None,
                after: external_id,
            },
            now,
        )
        .await?;
        tx.commit().await?;
        Ok(id)
    }

    /// Pins jobs to an open incident, each in a transaction of its own with an
    /// `incident_pinned` event on its timeline, and audits the pinning once. Returns how many
    /// were pinned anew: jobs that do not exist, or were pinned already, are skipped. At most
    /// [`MAX_PINNED`] jobs per incident.
    pub async fn pin_jobs(
        &self,
        incident_id: i64,
        job_ids: &[String],
        actor: &Actor,
    ) -> Result<usize, LedgerError> {
        let Some(incident) = self.incident(incident_id).await? else {
            return Err(LedgerError::Invalid(format!(
                "there is no incident {incident_id}"
            )));
        };
        if incident.closed_at.is_some() {
            return Err(LedgerError::Invalid(format!(
                "incident {incident_id} is closed: its record is frozen"
            )));
        }
        if incident.jobs + job_ids.len() as i64 > MAX_PINNED {
            return Err(LedgerError::Invalid(format!(
                "an incident holds at most {MAX_PINNED} jobs; incident {incident_id} has {} \
                 and {} more were asked",
                incident.jobs,
                job_ids.len()
            )));
        }
        let who = actor.to_string();
        let mut pinned = Vec::new();
        for job_id in job_ids {
            let mut tx = self.begin_write().await?;
            let now = self.now_us().await?;
            let added = sqlx::query(
                "INSERT INTO incident_jobs (incident_id, job_id, tenant, pinned_by, pinned_at) \
                 SELECT i.incident_id, j.job_id, j.tenant, $2, $3 FROM incidents i, jobs j \
                 WHERE i.incident_id = $1 AND i.closed_at IS NULL AND j.job_id = $4 \
                 ON CONFLICT DO NOTHING",
            )
            .bind(incident_id)
            .bind(&who)
            .bind(now)
            .bind(job_id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if added == 0 {
                tx.rollback().await?;
                continue;
            }
            let statement = sqlx::query_as::<_, Reserved>(&self.sql.reserve_events)
                .bind(job_id)
                .bind(1_i64);
            let Some(fenced) = guarded_in(&self.sql, tx, job_id, statement).await? else {
                continue;
            };
            fenced
                .commit(&[NewEvent::new(EventKind::IncidentPinned, actor).detail(
                    detail::IncidentPinned {
                        incident_id,
                        title: incident.title.clone(),
                    },
                )])
                .await?;
            pinned.push(job_id.as_str());
        }
        if !pinned.is_empty() {
            let mut tx = self.begin_write().await?;
            let now = self.now_us().await?;
            let mut listed: String = pinned.join(", ").chars().take(2000).collect();
            if listed.len() < pinned.join(", ").len() {
                listed.push('…');
            }
            super::audit::insert_admin_audit(
                &mut tx,
                &AdminAudit {
                    actor: &who,
                    action: "incident_pinned",
                    subject: &format!("incident:{incident_id}"),
                    reason: &format!(
                        "{} pinned to \u{201c}{}\u{201d}",
                        if pinned.len() == 1 {
                            "1 job".to_owned()
                        } else {
                            format!("{} jobs", pinned.len())
                        },
                        incident.title
                    ),
                    before: None,
                    after: Some(&listed),
                },
                now,
            )
            .await?;
            tx.commit().await?;
        }
        Ok(pinned.len())
    }

    pub async fn incident(&self, incident_id: i64) -> Result<Option<Incident>, LedgerError> {
        let row = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM incidents i WHERE i.incident_id = $1"
        ))
        .bind(incident_id)
        .fetch_optional(&self.reader)
        .await?;
        row.as_ref().map(incident_from_row).transpose()
    }

    /// The latest incidents, open ones first.
    pub async fn incidents(&self, limit: u32) -> Result<Vec<Incident>, LedgerError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM incidents i \
             ORDER BY (CASE WHEN i.closed_at IS NULL THEN 0 ELSE 1 END), i.incident_id DESC \
             LIMIT $1"
        ))
        .bind(i64::from(limit))
        .fetch_all(&self.reader)
        .await?;
        rows.iter().map(incident_from_row).collect()
    }

    /// The incidents a job is pinned to.
    pub async fn incidents_of_job(&self, job_id: &str) -> Result<Vec<Incident>, LedgerError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM incidents i JOIN incident_jobs j \
             ON j.incident_id = i.incident_id WHERE j.job_id = $1 ORDER BY i.incident_id"
        ))
        .bind(job_id)
        .fetch_all(&self.reader)
        .await?;
        rows.iter().map(incident_from_row).collect()
    }

    /// Closes an open incident with its frozen bundle, made once: the bytes and their digests
    /// are stored, and the audit entry names the digests. Its jobs are kept until `keep_until`.
    /// `false` when it was closed already (its first bundle stays), or no longer holds the
    /// `pinned` jobs the bundle was made from.
    pub async fn close_incident(
        &self,
        incident_id: i64,
        actor: &Actor,
        (reason, pinned): (&str, i64),
        bundle: &Bundle,
        keep_until: i64,
    ) -> Result<bool, LedgerError> {
        let actor = &actor.to_string();
        let now = self.now_us().await?;
        let [md, json, html] = bundle.digests();
        let mut tx = self.begin_write().await?;
        let closed = sqlx::query(
            "UPDATE incidents SET closed_by = $1, closed_at = $2, keep_until = $3, \
             bundle_md = $4, bundle_json = $5, bundle_html = $6, sha256_md = $7, \
             sha256_json = $8, sha256_html = $9 WHERE incident_id = $10 AND closed_at IS NULL \
             AND (SELECT COUNT(*) FROM incident_jobs p WHERE p.incident_id = $10) = $11",
        )
        .bind(actor)
        .bind(now)
        .bind(keep_until)
        .bind(&bundle.markdown)
        .bind(&bundle.json)
        .bind(&bundle.html)
        .bind(&md)
        .bind(&json)
        .bind(&html)
        .bind(incident_id)
        .bind(pinned)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if closed != 1 {
            tx.rollback().await?;
            return Ok(false);
        }
        super::audit::insert_admin_audit(
            &mut tx,
            &AdminAudit {
                actor,
                action: "incident_closed",
                subject: &format!("incident:{incident_id}"),
                reason,
                before: None,
                after: Some(&format!(
                    "bundle frozen: md sha256:{md} · json sha256:{json} · html sha256:{html}"
                )),
            },
            now,
        )
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    /// A closed incident's bundle, as stored.
    pub async fn incident_bundle(&self, incident_id: i64) -> Result<Option<Bundle>, LedgerError> {
        let row = sqlx::query(
            "SELECT bundle_md, bundle_json, bundle_html FROM incidents WHERE incident_id = $1 \
             AND bundle_md IS NOT NULL",
        )
        .bind(incident_id)
        .fetch_optional(&self.reader)
        .await?;
        row.map(|row| {
            Ok(Bundle {
                markdown: row.try_get("bundle_md")?,
                json: row.try_get("bundle_json")?,
                html: row.try_get("bundle_html")?,
            })
        })
        .transpose()
    }
    /// The jobs pinned to an incident, in the order pinned, at most `limit`.
    pub async fn incident_jobs(
        &self,
        incident_id: i64,
        limit: u32,
    ) -> Result<Vec<Job>, LedgerError> {
        let columns = JOB_COLUMNS
            .split(", ")
            .map(|c| format!("j.{}", c.trim()))
            .collect::<Vec<_>>()
            .join(", ");
        let rows = sqlx::query(&format!(
            "SELECT {columns} FROM incident_jobs p JOIN jobs j ON j.job_id = p.job_id \
             WHERE p.incident_id = $1 ORDER BY p.pinned_at, p.job_id LIMIT $2"
        ))
        .bind(incident_id)
        .bind(i64::from(limit))
        .fetch_all(&self.reader)
        .await?;
        rows.iter().map(job_from_row).collect()
    }

    /// The events of an incident's jobs of the `kinds` given, in time order, at most `limit`.
    pub async fn incident_events(
        &self,
        incident_id: i64,
        kinds: &[EventKind],
        limit: u32,
    ) -> Result<Vec<Event>, LedgerError> {
        let names: Vec<String> = kinds.iter().map(|k| format!("'{}'", k.as_str())).collect();
        let rows = sqlx::query(&format!(
            "SELECT e.job_id, e.seq, e.at, e.kind, e.epoch, e.actor, e.message_id, \
             e.receive_count, e.handle_hash, e.attempt_no, e.deadline_left_ms, e.detail \
             FROM incident_jobs p JOIN events e ON e.job_id = p.job_id \
             WHERE p.incident_id = $1 AND e.kind IN ({}) ORDER BY e.at, e.job_id, e.seq LIMIT $2",
            names.join(", ")
        ))
        .bind(incident_id)
        .bind(i64::from(limit))
        .fetch_all(&self.reader)
        .await?;
        rows.iter().map(event_from_row).collect()
    }

    /// The audit entries of an incident: its own, and every entry on one of its jobs, oldest
    /// first, at most `limit`.
    pub async fn incident_audit(
        &self,
        incident_id: i64,
        limit: u32,
    ) -> Result<Vec<AuditEntry>, LedgerError> {
        Ok(sqlx::query_as(
            "SELECT id, at, actor, action, job_id, tenant, seen_epoch, new_epoch, state_before, \
             state_after, reason, evidence, new_job_id, subject FROM audit_log \
             WHERE subject = $1 OR job_id IN (SELECT job_id FROM incident_jobs \
             WHERE incident_id = $2) ORDER BY id LIMIT $3",
        )
        .bind(format!("incident:{incident_id}"))
        .bind(incident_id)
        .bind(i64::from(limit))
        .fetch_all(&self.reader)
        .await?)
    }

    /// Each job pinned to an incident with its tenant as pinned.
    pub async fn incident_pins(
        &self,
        incident_id: i64,
    ) -> Result<Vec<(String, String)>, LedgerError> {
        let rows = sqlx::query("SELECT job_id, tenant FROM incident_jobs WHERE incident_id = $1")
            .bind(incident_id)
            .fetch_all(&self.reader)
            .await?;
        rows.iter()
            .map(|row| Ok((row.try_get("job_id")?, row.try_get("tenant")?)))
            .collect()
    }

    /// The tenants of an incident's jobs, as they were pinned (retention may have pruned the
    /// jobs since).
    pub async fn incident_tenants(&self, incident_id: i64) -> Result<Vec<String>, LedgerError> {
        Ok(sqlx::query_scalar(
            "SELECT DISTINCT tenant FROM incident_jobs WHERE incident_id = $1 ORDER BY tenant",
        )
        .bind(incident_id)
        .fetch_all(&self.reader)
        .await?)
    }
}
