//! Incident-review exports of one job at stable URLs: `/jobs/{job_id}/export.json` and
//! `/jobs/{job_id}/export.md`. Frozen at the moment of export (the document says when), and
//! free of secrets: no input, no answer, no receipt handle — only the ledger's record. The
//! timeline is sent as it is read, a page of events at a time: however long it is, no export
//! holds it whole.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use serde_json::{json, Value};

use super::gate::SignedIn;
use super::{ApiError, AppState};
use crate::console::code;
use crate::job::JobId;
use crate::ledger::{
    detail_text, Attempt, DecisionRecord, Event, Job, JobSpend, Ledger, LedgerError,
};
use crate::operators::Operator;
use crate::provider::prices::Usd;
use crate::time::{human_duration, rfc3339_us, short_time};

/// Events read from the ledger at a time while an export is sent.
const PAGE: u32 = 500;

/// What an export shows before the timeline; the timeline is read as it is sent.
struct Record {
    job: Job,
    attempts: Vec<Attempt>,
    spend: JobSpend,
    decisions: Vec<DecisionRecord>,
    exported_at: i64,
}

/// The job, if the signed-in operator's tenants include it (else it does not exist for them).
pub(super) async fn covered_job(
    state: &AppState,
    operator: &Operator,
    raw: &str,
) -> Result<Job, ApiError> {
    let id = raw
        .parse::<JobId>()
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    state
        .ledger
        .job(id.as_str())
        .await?
        .filter(|job| operator.covers(&job.tenant))
        .ok_or_else(|| ApiError::NotFound(format!("no job {id}")))
}

/// The job's record, if the signed-in operator's tenants include it.
async fn record(state: &AppState, operator: &Operator, raw: &str) -> Result<Record, ApiError> {
    let job = covered_job(state, operator, raw).await?;
    let attempts = state.ledger.attempts(&job.job_id).await?;
    let q = &state.queue;
    let spend = state
        .ledger
        .job_spend(&job, &attempts, &q.prices, &q.default_model)
        .await?;
    Ok(Record {
        attempts,
        spend,
        decisions: state.ledger.decisions(&job.job_id).await?,
        exported_at: state.ledger.now_us().await?,
        job,
    })
}

/// How a timeline is written out, event by event, as its pages arrive.
trait TimelineText: Send + 'static {
    fn event(&mut self, event: &Event, out: &mut String);
    /// What closes the document once the last event is written.
    fn end(&mut self, out: &mut String);
}

/// A response body: `head`, then the job's timeline written by `text` as it is read, a page
/// of events at a time, up to the last event the job had when the export began (the record
/// at that moment, whatever is appended while it is sent).
fn streamed(ledger: Ledger, job: &Job, head: String, text: impl TimelineText) -> Body {
    struct Reading<T> {
        ledger: Ledger,
        job_id: String,
        after: i64,
        last: i64,
        head: Option<String>,
        text: T,
        done: bool,
    }
    let reading = Reading {
        ledger,
        job_id: job.job_id.clone(),
        after: 0,
        last: job.next_event_seq - 1,
        head: Some(head),
        text,
        done: false,
    };
    let pages = futures_util::stream::try_unfold(reading, |mut r| async move {
        if let Some(head) = r.head.take() {
            return Ok(Some((head, r)));
        }
        if r.done {
            return Ok(None);
        }
        let page = if r.after < r.last {
            r.ledger
                .events(&r.job_id, r.after, PAGE)
                .await
                .inspect_err(|error| {
                    tracing::warn!(%error, job = %r.job_id, "an export was cut short");
                })?
        } else {
            Vec::new()
        };
        let more = page.len() == PAGE as usize;
        let mut chunk = String::new();
        for event in page.iter().take_while(|e| e.seq <= r.last) {
            r.text.event(event, &mut chunk);
            r.after = event.seq;
        }
        if !more || r.after >= r.last {
            r.text.end(&mut chunk);
            r.done = true;
        }
        Ok::<_, LedgerError>(Some((chunk, r)))
    });
    Body::from_stream(pages)
}

/// The JSON export's events: the elements of its `events` array.
struct JsonTimeline {
    origin: String,
    first: bool,
}

impl TimelineText for JsonTimeline {
    fn event(&mut self, e: &Event, out: &mut String) {
        if !std::mem::take(&mut self.first) {
            out.push(',');
        }
        let value = json!({
            "seq": e.seq, "at": rfc3339_us(e.at), "kind": e.kind, "epoch": e.epoch,
            "actor": e.actor, "delivery": e.delivery, "attempt_no": e.attempt_no,
            "deadline_left_ms": e.deadline_left_ms, "detail": e.detail,
            "permalink": format!("{}/jobs/{}#e{}", self.origin, e.job_id, e.seq),
        });
        out.push_str(&value.to_string());
    }

    fn end(&mut self, out: &mut String) {
        out.push_str("]}");
    }
}

pub(super) async fn json_export(
    State(state): State<AppState>,
    Extension(SignedIn(operator)): Extension<SignedIn>,
    headers: axum::http::HeaderMap,
    Path(job_id): Path<String>,
) -> Result<Response, ApiError> {
    let r = record(&state, &operator, &job_id).await?;
    let j = &r.job;
    // Links that work once pasted into a document: from the public URL, else the address used.
    let origin = state.access.origin(&headers);
    let head = json!({
        "exported_at": rfc3339_us(r.exported_at),
        "permalink": format!("{origin}/jobs/{}", j.job_id),
        "job": {
            "job_id": j.job_id, "tenant": j.tenant, "idempotency_key": j.idempotency_key,
            "request_digest": j.request_digest, "contract_version": j.contract_version,
            "state": j.state.as_str(), "owner_epoch": j.owner_epoch, "owner_id": j.owner_id,
            "deadline_at": rfc3339_us(j.deadline_at), "attempt_count": j.attempt_count,
            "max_attempts": j.max_attempts, "budget_used": j.budget_used, "result_ref": j.result_ref, "error_code": j.error_code,
            "replay_policy": j.replay_policy.as_str(), "recovery_reason": j.recovery_reason,
            "created_at": rfc3339_us(j.created_at), "terminal_at": j.terminal_at.map(rfc3339_us),
        },
        "spend": {
            "tokens": r.spend.tokens, "spent_nanousd": r.spend.spent,
            "duplicate_nanousd": r.spend.duplicate, "duplicate_attempts": r.spend.duplicate_attempts,
            "at_risk_nanousd": r.spend.at_risk, "at_risk_attempts": r.spend.at_risk_attempts,
        },
        "attempts": r.attempts.iter().map(|a| json!({
            "attempt_no": a.attempt_no, "epoch": a.epoch, "worker_id": a.worker_id,
            "provider": a.provider, "provider_request_id": a.provider_request_id,
            "submitted_id": a.submitted_id,
            "usage": a.spend().map(|s| json!({"model": s.model, "input_tokens": s.usage.input,
                "output_tokens": s.usage.output, "cached_tokens": s.usage.cached,
                "reasoning_tokens": s.usage.reasoning})),
            "cost_nanousd": a.cost_nusd,
            "started_at": rfc3339_us(a.started_at), "finished_at": a.finished_at.map(rfc3339_us),
            "outcome": a.outcome.as_str(), "error_code": a.error_code,
        })).collect::<Vec<_>>(),
        "decisions": r.decisions.iter().map(|d| json!({
            "decided_at": rfc3339_us(d.decided_at), "actor": d.actor, "decision": d.decision,
            "seen_epoch": d.seen_epoch, "new_epoch": d.new_epoch, "from_state": d.from_state,
            "to_state": d.to_state, "reason": d.reason, "evidence": d.evidence,
        })).collect::<Vec<_>>(),
    })
    .to_string();
    // The object left open for its last member, the events, written as they are read.
    let head = format!("{},\"events\":[", head.strip_suffix('}').unwrap_or(&head));
    let timeline = JsonTimeline {
        origin,
        first: true,
    };
    Ok((
        [
            (header::CONTENT_TYPE, "application/json".to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!("inline; filename=\"{}.json\"", j.job_id),
            ),
        ],
        streamed(state.ledger.clone(), j, head, timeline),
    )
        .into_response())
}

/// [`code`], or a dash for nothing.
fn code_or_dash(s: Option<&str>) -> String {
    s.map_or_else(|| "—".to_owned(), code)
}

pub(super) async fn markdown_export(
    State(state): State<AppState>,
    Extension(SignedIn(operator)): Extension<SignedIn>,
    headers: axum::http::HeaderMap,
    Path(job_id): Path<String>,
) -> Result<Response, ApiError> {
    let r = record(&state, &operator, &job_id).await?;
    let j = &r.job;
    let origin = state.access.origin(&headers);
    let mut md = format!(
        "# Job {id}\n\nExported {at} (UTC) from the Fenceline ledger. Permalink: {origin}/jobs/{id}\n\n\
         | | |\n| --- | --- |\n| state | **{state}** |\n| tenant | {tenant} |\n| idempotency key | {key} |\n\
         | owner epoch | {epoch} |\n| attempts | {used} of {max}{refused} |\n| deadline | {deadline} |\n\
         | created | {created} |\n| terminal | {terminal} |\n| result | {result} |\n| last error | {error} |\n\
         | recovery reason | {recovery} |\n| replay policy | {policy} |\n| spend | {spend} |\n\n",
        id = j.job_id,
        at = short_time(r.exported_at),
        state = j.state,
        tenant = code(&j.tenant),
        key = code(&j.idempotency_key),
        epoch = j.owner_epoch,
        used = j.budget_used,
        max = j.max_attempts,
        refused = match j.attempt_count - j.budget_used {
            0 => String::new(),
            n => format!(" (and {n} refused by the provider, spending none)"),
        },
        deadline = short_time(j.deadline_at),
        created = short_time(j.created_at),
        terminal = j.terminal_at.map_or("—".into(), short_time),
        result = code_or_dash(j.result_ref.as_deref()),
        error = code_or_dash(j.error_code.as_deref()),
        recovery = code_or_dash(j.recovery_reason.as_deref()),
        spend = spend_line(&r.spend),
        policy = j.replay_policy.as_str(),
    );
    md.push_str("## Attempts\n\n| # | epoch | worker | provider request | provider id | started | took | tokens (in/out) | cost | outcome |\n| ---: | ---: | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    for a in &r.attempts {
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            a.attempt_no,
            a.epoch,
            code(&a.worker_id),
            code_or_dash(a.provider_request_id.as_deref()),
            code_or_dash(a.submitted_id.as_deref()),
            short_time(a.started_at),
            a.finished_at
                .map_or("—".into(), |f| human_duration(f - a.started_at)),
            a.spend().map_or("—".into(), |s| format!(
                "{}/{}",
                s.usage.input, s.usage.output
            )),
            a.cost_nusd.map_or("—".into(), |c| Usd(c).to_string()),
            a.outcome.as_str()
        ));
    }
    md.push_str("\n## Decisions\n\n");
    if r.decisions.is_empty() {
        md.push_str("None.\n");
    } else {
        md.push_str("| at | by | decision | saw epoch | to | reason | evidence |\n| --- | --- | --- | ---: | --- | --- | --- |\n");
        for d in &r.decisions {
            md.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} |\n",
                short_time(d.decided_at),
                code(&d.actor),
                d.decision,
                d.seen_epoch,
                d.to_state,
                code(&d.reason),
                d.evidence.as_deref().map_or_else(|| "—".to_owned(), code)
            ));
        }
    }
    md.push_str("\n## Timeline\n\nRuns of four or more events of one kind are summarised on one line.\n\n| # | time | + | kind | epoch | actor | delivery | detail |\n| ---: | --- | --- | --- | ---: | --- | --- | --- |\n");
    let timeline = MarkdownTimeline {
        origin,
        created_at: j.created_at,
        run: None,
    };
    Ok((
        [
            (
                header::CONTENT_TYPE,
                "text/markdown; charset=utf-8".to_owned(),
            ),
            (
                header::CONTENT_DISPOSITION,
                format!("inline; filename=\"{}.md\"", j.job_id),
            ),
        ],
        streamed(state.ledger.clone(), j, md, timeline),
    )
        .into_response())
}

/// Consecutive events of one kind, as the Markdown timeline folds them: the first and the
/// last, and every one of them while there are fewer than four.
struct Run {
    first: Event,
    last: Event,
    len: usize,
    held: Vec<Event>,
}

/// The Markdown export's timeline rows. A run of four or more events of one kind is one row;
/// a run is held until an event of another kind (or the end) shows where it stops, so a run
/// across two pages reads as one.
struct MarkdownTimeline {
    origin: String,
    created_at: i64,
    run: Option<Run>,
}

impl MarkdownTimeline {
    fn flush(&self, run: Run, out: &mut String) {
        if run.len >= 4 {
            out.push_str(&format!(
                "| {}–{} | {} → {} | +{} | {} × {} | | | | |\n",
                run.first.seq,
                run.last.seq,
                short_time(run.first.at),
                short_time(run.last.at),
                human_duration(run.first.at - self.created_at),
                run.len,
                run.first.kind
            ));
            return;
        }
        for e in &run.held {
            self.row(e, out);
        }
    }

    fn row(&self, e: &Event, out: &mut String) {
        out.push_str(&format!(
            "| [{seq}]({origin}/jobs/{id}#e{seq}) | {} | +{} | {} | {} | {} | {} | {} |\n",
            short_time(e.at),
            human_duration(e.at - self.created_at),
            e.kind,
            e.epoch,
            code(&e.actor),
            e.delivery.as_ref().map_or(String::new(), |d| code(&format!(
                "{} r{} #{}",
                d.message_id.chars().take(8).collect::<String>(),
                d.receive_count,
                d.handle_hash
            ))),
            code(&detail_text(&e.detail)),
            seq = e.seq,
            origin = self.origin,
            id = e.job_id,
        ));
    }
}

impl TimelineText for MarkdownTimeline {
    fn event(&mut self, e: &Event, out: &mut String) {
        if let Some(run) = self.run.as_mut().filter(|run| run.first.kind == e.kind) {
            run.len += 1;
            run.last = e.clone();
            if run.len < 4 {
                run.held.push(e.clone());
            } else {
                run.held.clear();
            }
            return;
        }
        if let Some(run) = self.run.take() {
            self.flush(run, out);
        }
        self.run = Some(Run {
            first: e.clone(),
            last: e.clone(),
            len: 1,
            held: vec![e.clone()],
        });
    }

    fn end(&mut self, out: &mut String) {
        if let Some(run) = self.run.take() {
            self.flush(run, out);
        }
    }
}

/// `/jobs/{job_id}/result`: the accepted result, for a signed-in operator whose tenants include
/// the job. Every read is written to the audit log; nothing of it is logged.
pub(super) async fn result_view(
    State(state): State<AppState>,
    Extension(SignedIn(operator)): Extension<SignedIn>,
    Path(job_id): Path<String>,
) -> Result<Response, ApiError> {
    let job = covered_job(&state, &operator, &job_id).await?;
    let body = super::accepted_result(&state, &job).await?;
    state
        .ledger
        .audit_result_viewed(
            &job.job_id,
            job.owner_epoch,
            &format!("operator:{}", operator.name),
        )
        .await?;
    let shown = match serde_json::from_str::<Value>(&body) {
        Ok(value) => serde_json::to_string_pretty(&value).unwrap_or(body),
        Err(_) => body,
    };
    Ok((
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        shown,
    )
        .into_response())
}

/// A job's spend in one line: what it spent, on answers not accepted, and at risk.
fn spend_line(s: &JobSpend) -> String {
    let mut line = format!("{} tokens, {}", s.tokens, Usd(s.spent));
    if s.duplicate_attempts > 0 {
        line.push_str(&format!(
            "; duplicate {} ({} answers not accepted)",
            Usd(s.duplicate),
            s.duplicate_attempts
        ));
    }
    if s.at_risk_attempts > 0 {
        match s.at_risk {
            Some(bound) => line.push_str(&format!(
                "; at risk at most {} ({} attempts of unknown outcome)",
                Usd(bound),
                s.at_risk_attempts
            )),
            None => line.push_str(&format!(
                "; at risk unbounded ({} attempts of unknown outcome)",
                s.at_risk_attempts
            )),
        }
    }
    line
}
