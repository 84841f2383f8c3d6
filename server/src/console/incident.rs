//! `/incidents` and `/incidents/{id}`: the jobs of an incident, their key events merged on one
//! time line, and the decisions taken; and the frozen bundle an incident closes with
//! (Markdown, JSON and a self-contained HTML page with each job's swimlane inline).

use fenceline_app::console::{
    IncidentEventRow, IncidentJobRow, IncidentLink, IncidentPage, IncidentRow,
};
use serde_json::{json, Value};

use super::format::{cell, code};
use super::job::Lane;
use super::LedgerConsole;
use crate::job::EventKind;
use crate::ledger::{
    detail_text, Attempt, AuditEntry, Bundle, DecisionRecord, Event, Incident, Job, LedgerError,
    MAX_PINNED,
};
use crate::time::{human_duration, rfc3339_us, short_time};

/// The events an incident's merged time line shows: transitions, not transport or renewals.
const KEY_KINDS: &[EventKind] = &[
    EventKind::JobCreated,
    EventKind::Claimed,
    EventKind::RecoveryClaimed,
    EventKind::AttemptFinished,
    EventKind::LeaseLost,
    EventKind::ResultAccepted,
    EventKind::ResultRejected,
    EventKind::StateChanged,
    EventKind::DecisionRecorded,
    EventKind::MovedToDlq,
    EventKind::Replayed,
    EventKind::DeadlineExpired,
    EventKind::BudgetExhausted,
    EventKind::Rerun,
    EventKind::ProviderFallback,
    EventKind::UpstreamCancelled,
    EventKind::IncidentPinned,
];

/// Jobs listed on the page, and merged events shown.
const LISTED_JOBS: u32 = 200;
const MERGED_SHOWN: u32 = 300;
/// The bundle's merged time line, each job's events, its audit entries, and how many jobs get
/// a swimlane in the HTML page.
const MERGED_KEPT: u32 = 5_000;
const EVENTS_PER_JOB: usize = 5_000;
const AUDIT_KEPT: u32 = 10_000;
const SWIMLANES: usize = 100;

/// What the bundle says of its making: the console's address for permalinks, who froze it and
/// why, and the stylesheet it carries inline.
pub struct BundleContext {
    pub origin: String,
    pub closed_by: String,
    pub reason: String,
    pub stylesheet: &'static str,
}

fn who(actor: &str) -> String {
    actor.strip_prefix("operator:").unwrap_or(actor).to_owned()
}

impl LedgerConsole {
    /// Whether this console shows `incident`, whose jobs are of `tenants`: to an operator of
    /// every tenant, any; to one of some tenants, those they opened or that hold a job of theirs.
    fn sees<'t>(&self, incident: &Incident, mut tenants: impl Iterator<Item = &'t str>) -> bool {
        self.tenants.is_none()
            || self
                .visitor
                .as_ref()
                .is_some_and(|name| incident.opened_by == format!("operator:{name}"))
            || tenants.any(|t| self.covers(t))
    }

    /// The latest incidents this console shows.
    async fn shown_incidents(&self, limit: u32) -> Result<Vec<Incident>, LedgerError> {
        let mut shown = Vec::new();
        for incident in self.ledger.incidents(limit).await? {
            // Their tenants are read only for an operator of some tenants.
            let tenants = match self.tenants {
                Some(_) => self.ledger.incident_tenants(incident.incident_id).await?,
                None => Vec::new(),
            };
            if self.sees(&incident, tenants.iter().map(String::as_str)) {
                shown.push(incident);
            }
        }
        Ok(shown)
    }

    pub(super) async fn build_incidents(&self) -> Result<Vec<IncidentRow>, LedgerError> {
        Ok(self
            .shown_incidents(200)
            .await?
            .into_iter()
            .map(|i| IncidentRow {
                incident_id: i.incident_id,
                open: i.closed_at.is_none(),
                title: i.title,
                external_id: i.external_id,
                opened: self.at(i.opened_at),
                opened_by: who(&i.opened_by),
                jobs: i.jobs,
            })
            .collect())
    }

    /// Whether this console covers every tenant of the incident's jobs.
    pub async fn covers_incident(&self, incident_id: i64) -> Result<bool, LedgerError> {
        Ok(self
            .ledger
            .incident_tenants(incident_id)
            .await?
            .iter()
            .all(|t| self.covers(t)))
    }

    pub(super) async fn build_incident(
        &self,
        raw: String,
    ) -> Result<Option<IncidentPage>, LedgerError> {
        let Ok(incident_id) = raw.parse::<i64>() else {
            return Ok(None);
        };
        let Some(incident) = self.ledger.incident(incident_id).await? else {
            return Ok(None);
        };
        // Every pin's tenant, read once: whether the page shows, whether the visitor sees the
        // whole incident, and which of its events they see.
        let pins = self.ledger.incident_pins(incident_id).await?;
        if !self.sees(&incident, pins.iter().map(|(_, t)| t.as_str())) {
            return Ok(None);
        }
        let whole = pins.iter().all(|(_, t)| self.covers(t));
        let tenants: std::collections::HashMap<&str, &str> = pins
            .iter()
            .map(|(job, tenant)| (job.as_str(), tenant.as_str()))
            .collect();
        let seen = |job_id: &str| {
            tenants
                .get(job_id)
                .is_some_and(|tenant| self.covers(tenant))
        };
        let (jobs, merged) = tokio::join!(
            self.ledger.incident_jobs(incident_id, LISTED_JOBS),
            self.ledger
                .incident_events(incident_id, KEY_KINDS, MERGED_SHOWN * 2),
        );
        let (jobs, merged) = (jobs?, merged?);
        let visible: Vec<&Event> = merged.iter().filter(|e| seen(&e.job_id)).collect();
        let row = |e: &Event| IncidentEventRow {
            at: self.at(e.at),
            job_id: e.job_id.clone(),
            seq: Some(e.seq),
            kind: e.kind.to_string(),
            actor: e.actor.clone(),
            detail: detail_text(&e.detail),
        };
        Ok(Some(IncidentPage {
            incident_id,
            title: incident.title.clone(),
            external_id: incident.external_id.clone(),
            opened: self.at(incident.opened_at),
            opened_by: who(&incident.opened_by),
            closed: incident.closed_at.map(|at| {
                (
                    self.at(at),
                    who(incident.closed_by.as_deref().unwrap_or_default()),
                    incident.keep_until.map(|k| self.at(k)).unwrap_or_default(),
                )
            }),
            digests: incident.sha256.clone(),
            whole,
            total_jobs: incident.jobs,
            jobs: jobs
                .iter()
                .filter(|j| self.covers(&j.tenant))
                .map(|j| IncidentJobRow {
                    job_id: j.job_id.clone(),
                    tenant: j.tenant.clone(),
                    state: j.state.as_str().to_owned(),
                    epoch: j.owner_epoch,
                    attempts: format!("{}/{}", j.budget_used, j.max_attempts),
                    created: self.at(j.created_at),
                })
                .collect(),
            decisions: visible
                .iter()
                .filter(|e| e.kind == EventKind::DecisionRecorded)
                .map(|e| row(e))
                .collect(),
            timeline: visible
                .iter()
                .take(MERGED_SHOWN as usize)
                .map(|e| row(e))
                .collect(),
        }))
    }

    /// The incidents a job is pinned to, and the open ones it could be pinned to.
    pub(super) async fn incident_links(
        &self,
        job_id: &str,
    ) -> Result<(Vec<IncidentLink>, Vec<IncidentLink>), LedgerError> {
        let (pinned, latest) = tokio::join!(
            self.ledger.incidents_of_job(job_id),
            self.shown_incidents(50)
        );
        let link = |i: &Incident| IncidentLink {
            incident_id: i.incident_id,
            title: i.title.clone(),
            open: i.closed_at.is_none(),
        };
        let pinned: Vec<IncidentLink> = pinned?.iter().map(link).collect();
        let pin_to = latest?
            .iter()
            .filter(|i| i.closed_at.is_none() && i.jobs < MAX_PINNED)
            .filter(|i| !pinned.iter().any(|p| p.incident_id == i.incident_id))
            .map(link)
            .collect();
        Ok((pinned, pin_to))
    }

    /// The incident's bundle as of now: every pinned job with its attempts, decisions and
    /// timeline, the merged time line of their key events, and the audit entries of the
    /// incident and its jobs. Made once, when the incident closes; its bytes are then stored.
    pub async fn incident_bundle(
        &self,
        incident: &Incident,
        ctx: &BundleContext,
    ) -> Result<Bundle, LedgerError> {
        let id = incident.incident_id;
        let now = self.ledger.now_us().await?;
        let jobs = self.ledger.incident_jobs(id, MAX_PINNED as u32).await?;
        let merged = self
            .ledger
            .incident_events(id, KEY_KINDS, MERGED_KEPT)
            .await?;
        let audit = self.ledger.incident_audit(id, AUDIT_KEPT).await?;
        let mut records = Vec::with_capacity(jobs.len());
        for (n, job) in jobs.into_iter().enumerate() {
            let attempts = self.ledger.attempts(&job.job_id).await?;
            let decisions = self.ledger.decisions(&job.job_id).await?;
            let mut events = Vec::new();
            let mut after = 0;
            while events.len() < EVENTS_PER_JOB {
                let page = self.ledger.events(&job.job_id, after, 1000).await?;
                let Some(last) = page.last() else { break };
                after = last.seq;
                let more = page.len() == 1000;
                events.extend(page);
                if !more {
                    break;
                }
            }
            events.truncate(EVENTS_PER_JOB);
            let lane = if n < SWIMLANES {
                Some(self.swimlane(&job, &attempts, now, None).await?)
            } else {
                None
            };
            records.push(JobRecord {
                job,
                attempts,
                decisions,
                events,
                lane,
            });
        }
        let made = Made {
            incident,
            ctx,
            frozen_at: now,
            records: &records,
            merged: &merged,
            audit: &audit,
        };
        Ok(Bundle {
            markdown: made.markdown(),
            json: made.json(),
            html: made.html(),
        })
    }
}

/// One pinned job as the bundle keeps it.
struct JobRecord {
    job: Job,
    attempts: Vec<Attempt>,
    decisions: Vec<DecisionRecord>,
    events: Vec<Event>,
    lane: Option<Lane>,
}

impl JobRecord {
    /// How many events the job had, and so how many the bundle left out.
    fn left_out(&self) -> i64 {
        (self.job.next_event_seq - 1 - self.events.len() as i64).max(0)
    }
}

/// A bundle in the making: what it is made of.
struct Made<'a> {
    incident: &'a Incident,
    ctx: &'a BundleContext,
    frozen_at: i64,
    records: &'a [JobRecord],
    merged: &'a [Event],
    audit: &'a [AuditEntry],
}

/// A timeline row or a run of four or more events of one kind folded into one.
enum Folded<'a> {
    One(&'a Event),
    Run(&'a Event, &'a Event, usize),
}

fn folded(events: &[Event]) -> Vec<Folded<'_>> {
    let mut out = Vec::new();
    for run in events.chunk_by(|a, b| a.kind == b.kind) {
        match run {
            [first, .., last] if run.len() >= 4 => out.push(Folded::Run(first, last, run.len())),
            _ => out.extend(run.iter().map(Folded::One)),
        }
    }
    out
}

fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

impl Made<'_> {
    fn permalink(&self, job_id: &str, seq: Option<i64>) -> String {
        match seq {
            Some(seq) => format!("{}/jobs/{job_id}#e{seq}", self.ctx.origin),
            None => format!("{}/jobs/{job_id}", self.ctx.origin),
        }
    }

    /// The incident's name: one line, whatever its title holds.
    fn heading(&self) -> String {
        let i = self.incident;
        match &i.external_id {
            Some(ext) => format!(
                "Incident {}: {} ({})",
                i.incident_id,
                cell(&i.title),
                cell(ext)
            ),
            None => format!("Incident {}: {}", i.incident_id, cell(&i.title)),
        }
    }

    fn json(&self) -> String {
        let i = self.incident;
        let event = |e: &Event| {
            json!({
                "job_id": e.job_id, "seq": e.seq, "at": rfc3339_us(e.at), "kind": e.kind,
                "epoch": e.epoch, "actor": e.actor, "delivery": e.delivery,
                "attempt_no": e.attempt_no, "deadline_left_ms": e.deadline_left_ms,
                "detail": e.detail,
            })
        };
        let jobs: Vec<Value> = self
            .records
            .iter()
            .map(|r| {
                let j = &r.job;
                json!({
                    "job_id": j.job_id, "tenant": j.tenant, "idempotency_key": j.idempotency_key,
                    "request_digest": j.request_digest, "state": j.state.as_str(),
                    "owner_epoch": j.owner_epoch, "owner_id": j.owner_id,
                    "attempt_count": j.attempt_count, "budget_used": j.budget_used,
                    "max_attempts": j.max_attempts, "result_ref": j.result_ref,
                    "error_code": j.error_code, "recovery_reason": j.recovery_reason,
                    "replay_policy": j.replay_policy.as_str(),
                    "created_at": rfc3339_us(j.created_at),
                    "deadline_at": rfc3339_us(j.deadline_at),
                    "terminal_at": j.terminal_at.map(rfc3339_us),
                    "permalink": self.permalink(&j.job_id, None),
                    "attempts": r.attempts.iter().map(|a| json!({
                        "attempt_no": a.attempt_no, "epoch": a.epoch, "worker_id": a.worker_id,
                        "provider": a.provider, "provider_request_id": a.provider_request_id,
                        "submitted_id": a.submitted_id, "cost_nanousd": a.cost_nusd,
                        "started_at": rfc3339_us(a.started_at),
                        "finished_at": a.finished_at.map(rfc3339_us),
                        "outcome": a.outcome.as_str(), "error_code": a.error_code,
                    })).collect::<Vec<_>>(),
                    "decisions": r.decisions.iter().map(|d| json!({
                        "decided_at": rfc3339_us(d.decided_at), "actor": d.actor,
                        "decision": d.decision, "seen_epoch": d.seen_epoch,
                        "new_epoch": d.new_epoch, "from_state": d.from_state,
                        "to_state": d.to_state, "reason": d.reason, "evidence": d.evidence,
                    })).collect::<Vec<_>>(),
                    "events": r.events.iter().map(event).collect::<Vec<_>>(),
                    "events_left_out": r.left_out(),
                })
            })
            .collect();
        let value = json!({
            "format": "fenceline-incident-bundle/1",
            "incident": {
                "incident_id": i.incident_id, "title": i.title, "external_id": i.external_id,
                "opened_by": i.opened_by, "opened_at": rfc3339_us(i.opened_at),
                "closed_by": self.ctx.closed_by, "frozen_at": rfc3339_us(self.frozen_at),
                "reason": self.ctx.reason,
                "permalink": format!("{}/incidents/{}", self.ctx.origin, i.incident_id),
            },
            "jobs": jobs,
            "merged_timeline": self.merged.iter().map(event).collect::<Vec<_>>(),
            "audit": self.audit.iter().map(|a| json!({
                "id": a.id, "at": rfc3339_us(a.at), "actor": a.actor, "action": a.action,
                "job_id": a.job_id, "tenant": a.tenant, "seen_epoch": a.seen_epoch,
                "new_epoch": a.new_epoch, "state_before": a.state_before,
                "state_after": a.state_after, "reason": a.reason, "evidence": a.evidence,
                "subject": a.subject,
            })).collect::<Vec<_>>(),
        });
        serde_json::to_string_pretty(&value).unwrap_or_default()
    }

    fn markdown(&self) -> String {
        let i = self.incident;
        let mut md = format!(
            "# {}\n\nFrozen {} (UTC) by {} when the incident closed: {}\n\n\
             Opened {} by {}. Permalink: {}/incidents/{}\n\n",
            self.heading(),
            short_time(self.frozen_at),
            code(&self.ctx.closed_by),
            code(&self.ctx.reason),
            short_time(i.opened_at),
            code(&i.opened_by),
            self.ctx.origin,
            i.incident_id,
        );
        md.push_str(&format!(
            "## Jobs ({})\n\n| job | tenant | state | epoch | attempts | created | last error |\n\
             | --- | --- | --- | ---: | --- | --- | --- |\n",
            self.records.len()
        ));
        for r in self.records {
            let j = &r.job;
            md.push_str(&format!(
                "| [{id}]({link}) | {} | **{}** | {} | {} of {} | {} | {} |\n",
                code(&j.tenant),
                j.state,
                j.owner_epoch,
                j.budget_used,
                j.max_attempts,
                short_time(j.created_at),
                j.error_code.as_deref().map_or("—".to_owned(), code),
                id = j.job_id,
                link = self.permalink(&j.job_id, None),
            ));
        }
        md.push_str(
            "\n## Key events, merged\n\n| time | job | # | kind | actor | detail |\n\
             | --- | --- | ---: | --- | --- | --- |\n",
        );
        for e in self.merged {
            md.push_str(&format!(
                "| {} | {} | [{seq}]({}) | {} | {} | {} |\n",
                short_time(e.at),
                e.job_id,
                self.permalink(&e.job_id, Some(e.seq)),
                e.kind,
                code(&e.actor),
                code(&detail_text(&e.detail)),
                seq = e.seq,
            ));
        }
        md.push_str("\n## Audit\n\n| at | by | action | job or subject | reason |\n| --- | --- | --- | --- | --- |\n");
        for a in self.audit {
            md.push_str(&format!(
                "| {} | {} | {} | {} | {} |\n",
                short_time(a.at),
                code(&a.actor),
                a.action,
                code(a.job_id.as_deref().or(a.subject.as_deref()).unwrap_or("—")),
                code(&a.reason),
            ));
        }
        for r in self.records {
            let j = &r.job;
            md.push_str(&format!(
                "\n## Job {}\n\n**{}**, epoch {}, {} of {} attempts. Tenant {}, key {}.\n\n",
                j.job_id,
                j.state,
                j.owner_epoch,
                j.budget_used,
                j.max_attempts,
                code(&j.tenant),
                code(&j.idempotency_key),
            ));
            md.push_str("| # | epoch | worker | provider | provider id | started | took | outcome |\n| ---: | ---: | --- | --- | --- | --- | --- | --- |\n");
            for a in &r.attempts {
                md.push_str(&format!(
                    "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
                    a.attempt_no,
                    a.epoch,
                    code(&a.worker_id),
                    code(&a.provider),
                    a.submitted_id.as_deref().map_or("—".to_owned(), code),
                    short_time(a.started_at),
                    a.finished_at
                        .map_or("—".into(), |f| human_duration(f - a.started_at)),
                    a.outcome.as_str(),
                ));
            }
            md.push_str("\n| # | time | + | kind | epoch | actor | detail |\n| ---: | --- | --- | --- | ---: | --- | --- |\n");
            for f in folded(&r.events) {
                match f {
                    Folded::One(e) => md.push_str(&format!(
                        "| {} | {} | +{} | {} | {} | {} | {} |\n",
                        e.seq,
                        short_time(e.at),
                        human_duration(e.at - j.created_at),
                        e.kind,
                        e.epoch,
                        code(&e.actor),
                        code(&detail_text(&e.detail)),
                    )),
                    Folded::Run(first, last, n) => md.push_str(&format!(
                        "| {}–{} | {} → {} | +{} | {n} × {} | | | |\n",
                        first.seq,
                        last.seq,
                        short_time(first.at),
                        short_time(last.at),
                        human_duration(first.at - j.created_at),
                        first.kind,
                    )),
                }
            }
            if r.left_out() > 0 {
                md.push_str(&format!(
                    "\n{} later events are not in this bundle.\n",
                    r.left_out()
                ));
            }
        }
        md
    }

    fn html(&self) -> String {
        use leptos::prelude::RenderHtml;
        let e = html_escape;
        let i = self.incident;
        let mut h = format!(
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
             <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
             <title>{title} · Fenceline</title><style>{css}\n\
             body {{ max-width: 1200px; margin: 0 auto; padding: 1rem; }}\n</style></head><body>\
             <main><h1>{title}</h1><p class=\"lead\">Frozen {frozen} (UTC) by {by} when the \
             incident closed: {reason}</p><p class=\"muted\">Opened {opened} by {opener}. \
             This page is the incident's record as it stood then; it needs no network. \
             <a href=\"{origin}/incidents/{id}\">The incident in the console</a></p>",
            title = e(&self.heading()),
            css = self.ctx.stylesheet.replace("</", "<\\/"),
            frozen = short_time(self.frozen_at),
            by = e(&self.ctx.closed_by),
            reason = e(&self.ctx.reason),
            opened = short_time(i.opened_at),
            opener = e(&i.opened_by),
            origin = e(&self.ctx.origin),
            id = i.incident_id,
        );
        h.push_str(&format!(
            "<section><h2>Jobs ({})</h2><table><thead><tr><th>Job</th><th>Tenant</th>\
             <th>State</th><th class=\"num\">Epoch</th><th>Attempts</th><th>Created</th>\
             </tr></thead><tbody>",
            self.records.len()
        ));
        for r in self.records {
            let j = &r.job;
            h.push_str(&format!(
                "<tr><td class=\"mono\"><a href=\"#{id}\">{id}</a></td><td>{}</td>\
                 <td><span class=\"badge state-{state}\">{state}</span></td>\
                 <td class=\"num\">{}</td><td>{} of {}</td><td>{}</td></tr>",
                e(&j.tenant),
                j.owner_epoch,
                j.budget_used,
                j.max_attempts,
                short_time(j.created_at),
                id = e(&j.job_id),
                state = j.state.as_str(),
            ));
        }
        h.push_str("</tbody></table></section><section><h2>Key events, merged</h2><table><thead><tr><th>Time</th><th>Job</th><th>Kind</th><th>Actor</th><th>Detail</th></tr></thead><tbody>");
        for ev in self.merged {
            h.push_str(&format!(
                "<tr><td>{}</td><td class=\"mono\"><a href=\"#{id}\">{id}</a> #{}</td><td>{}</td><td>{}</td><td class=\"mono\">{}</td></tr>",
                short_time(ev.at),
                ev.seq,
                ev.kind,
                e(&ev.actor),
                e(&detail_text(&ev.detail)),
                id = e(&ev.job_id),
            ));
        }
        h.push_str("</tbody></table></section><section><h2>Audit</h2><table><thead><tr><th>At</th><th>By</th><th>Action</th><th>Job or subject</th><th>Reason</th></tr></thead><tbody>");
        for a in self.audit {
            h.push_str(&format!(
                "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"mono\">{}</td><td>{}</td></tr>",
                short_time(a.at),
                e(&a.actor),
                e(&a.action),
                e(a.job_id.as_deref().or(a.subject.as_deref()).unwrap_or("—")),
                e(&a.reason),
            ));
        }
        h.push_str("</tbody></table></section>");
        for r in self.records {
            let j = &r.job;
            h.push_str(&format!(
                "<section id=\"{id}\"><h2>Job <span class=\"mono\">{id}</span></h2>\
                 <p><span class=\"badge state-{state}\">{state}</span> epoch {}, {} of {} \
                 attempts · tenant {} · key <span class=\"mono\">{}</span> · \
                 <a href=\"{}\">in the console</a></p>",
                j.owner_epoch,
                j.budget_used,
                j.max_attempts,
                e(&j.tenant),
                e(&j.idempotency_key),
                e(&self.permalink(&j.job_id, None)),
                id = e(&j.job_id),
                state = j.state.as_str(),
            ));
            if let Some(lane) = &r.lane {
                let chart = leptos::prelude::view! {
                    <fenceline_app::svg::SvgChart chart=lane.svg.clone()/>
                }
                .to_html();
                h.push_str(&format!("<div class=\"swimlane\">{chart}</div>"));
            }
            h.push_str("<table><thead><tr><th class=\"num\">#</th><th>Time</th><th>+</th><th>Kind</th><th class=\"num\">Epoch</th><th>Actor</th><th>Detail</th></tr></thead><tbody>");
            for f in folded(&r.events) {
                match f {
                    Folded::One(ev) => h.push_str(&format!(
                        "<tr><td class=\"num\">{}</td><td>{}</td><td>+{}</td><td>{}</td><td class=\"num\">{}</td><td>{}</td><td class=\"mono\">{}</td></tr>",
                        ev.seq,
                        short_time(ev.at),
                        human_duration(ev.at - j.created_at),
                        ev.kind,
                        ev.epoch,
                        e(&ev.actor),
                        e(&detail_text(&ev.detail)),
                    )),
                    Folded::Run(first, last, n) => h.push_str(&format!(
                        "<tr class=\"folded\"><td class=\"num\">{}–{}</td><td>{} → {}</td><td>+{}</td><td colspan=\"4\">{n} × {}</td></tr>",
                        first.seq,
                        last.seq,
                        short_time(first.at),
                        short_time(last.at),
                        human_duration(first.at - j.created_at),
                        first.kind,
                    )),
                }
            }
            h.push_str("</tbody></table>");
            if r.left_out() > 0 {
                h.push_str(&format!(
                    "<p class=\"muted\">{} later events are not in this bundle.</p>",
                    r.left_out()
                ));
            }
            h.push_str("</section>");
        }
        h.push_str("</main></body></html>\n");
        h
    }
}
