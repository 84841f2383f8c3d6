//! Operators' actions from the console: each a plain HTML form that posts here with the
//! session's form token and the epoch the operator saw, then goes back to the page with the
//! outcome as a flash message (POST → redirect → GET). Every action is a guarded ledger
//! transition: a stale view changes nothing.

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Extension, Form};
use serde::Deserialize;
use tower_sessions::Session;

use super::error::capitalized;
use super::gate::{check_form_token, flash, forbidden, plain, SignedIn};
use super::AppState;
use crate::job::{Actor, JobState};
use crate::ledger::Job;
use crate::ledger::{Created, Decision, DecisionKind, LedgerError, Refusal};
use crate::operators::{Operator, Role};
use fenceline_app::action::{JobPick, Reason};

#[derive(Deserialize)]
pub(super) struct DecisionForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    decision: String,
    /// The owner epoch the operator's page showed.
    #[serde(default)]
    epoch: String,
    #[serde(default)]
    reason: String,
    /// Resolving as succeeded: the provider's reference for the call…
    #[serde(default)]
    evidence: String,
    /// …and/or the result itself, pasted.
    #[serde(default)]
    result: String,
}

#[derive(Deserialize)]
pub(super) struct CancelForm {
    #[serde(default)]
    csrf: String,
    /// The owner epoch and state the operator's page showed.
    #[serde(default)]
    epoch: String,
    #[serde(default)]
    state: String,
    #[serde(default)]
    reason: String,
}

/// `POST /jobs/{job_id}/cancel`: a job that is not terminal fails for good, fenced.
pub(super) async fn cancel(
    State(state): State<AppState>,
    Extension(SignedIn(operator)): Extension<SignedIn>,
    session: Session,
    Path(job_id): Path<String>,
    Form(form): Form<CancelForm>,
) -> Response {
    if let Err(refused) = may_act(&session, &operator, &form.csrf).await {
        return refused;
    }
    let page = format!("/jobs/{job_id}");
    if let Err(refused) = covered_job(&state, &operator, &job_id).await {
        return refused;
    }
    let (Ok(seen_epoch), Ok(seen_state)) = (
        form.epoch.trim().parse::<i64>(),
        form.state.trim().parse::<JobState>(),
    ) else {
        flash(
            &session,
            false,
            "The form did not say what you saw; reload the page.",
        )
        .await;
        return Redirect::to(&page).into_response();
    };
    let actor = Actor::Operator(operator.name.clone());
    match state
        .ledger
        .cancel(&job_id, seen_epoch, seen_state, &actor, &form.reason)
        .await
    {
        Ok(()) => {
            tracing::info!(operator = %operator.name, %job_id, "job cancelled");
            flash(
                &session,
                true,
                format!(
                    "Job cancelled: it failed for good at epoch {}; an attempt still running \
                     can no longer commit.",
                    seen_epoch + 1
                ),
            )
            .await;
        }
        Err(LedgerError::Refused { .. }) => {
            let text = match state.ledger.job(&job_id).await.ok().flatten() {
                Some(now) => stale_message(now.state, now.owner_epoch),
                None => "The job no longer exists.".to_owned(),
            };
            flash(&session, false, text).await;
        }
        Err(error) => {
            flash_unchanged(
                &session,
                error,
                "a cancellation failed",
                "The job could not be cancelled (the ledger did not answer); nothing was changed.",
            )
            .await
        }
    }
    Redirect::to(&page).into_response()
}

/// Says why an action changed nothing, for the failures every action shares: bad input
/// (said as the ledger says it) or a ledger that did not answer (logged, and said plainly).
async fn flash_unchanged(session: &Session, error: LedgerError, log: &str, text: &str) {
    match error {
        LedgerError::Invalid(message) => {
            flash(
                session,
                false,
                format!("{}. Nothing was changed.", capitalized(&message)),
            )
            .await;
        }
        error => {
            tracing::error!(%error, "{log}");
            flash(session, false, text).await;
        }
    }
}

/// The checks every action starts with: the form came from this session, and the operator's
/// role may act. The refusal to send otherwise.
pub(super) async fn may_act(
    session: &Session,
    operator: &Operator,
    csrf: &str,
) -> Result<(), Response> {
    check_form_token(session, csrf).await?;
    if operator.role.allows(Role::Operator) {
        Ok(())
    } else {
        Err(forbidden(
            "your role (viewer) can read jobs but not act on them",
        ))
    }
}

/// The job, if it exists for this operator (their tenants); else the refusal to send.
async fn covered_job(state: &AppState, operator: &Operator, job_id: &str) -> Result<Job, Response> {
    match state.ledger.job(job_id).await {
        Ok(Some(job)) if operator.covers(&job.tenant) => Ok(job),
        Ok(_) => Err(plain(axum::http::StatusCode::NOT_FOUND, "no such job")),
        Err(_) => Err(unavailable()),
    }
}

fn unavailable() -> Response {
    plain(
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        "the ledger database is unavailable; nothing was changed",
    )
}

/// What the operator is told when the job moved on under them.
fn stale_message(state: JobState, epoch: i64) -> String {
    format!(
        "This job changed since you loaded it: it is now {} at epoch {epoch}. Nothing was \
         changed; review it and decide again.",
        state.as_str().replace('_', " ")
    )
}

/// `POST /jobs/{job_id}/decisions`: resolve an `unknown` job as succeeded (with evidence) or
/// failed, or authorize a fenced retry.
pub(super) async fn decide(
    State(state): State<AppState>,
    Extension(SignedIn(operator)): Extension<SignedIn>,
    session: Session,
    Path(job_id): Path<String>,
    Form(form): Form<DecisionForm>,
) -> Response {
    if let Err(refused) = may_act(&session, &operator, &form.csrf).await {
        return refused;
    }
    let page = format!("/jobs/{job_id}");
    let job = match covered_job(&state, &operator, &job_id).await {
        Ok(job) => job,
        Err(refused) => return refused,
    };
    let Ok(seen_epoch) = form.epoch.trim().parse::<i64>() else {
        flash(
            &session,
            false,
            "The form did not say which epoch you saw; reload the page.",
        )
        .await;
        return Redirect::to(&page).into_response();
    };
    let Ok(kind) = form.decision.parse::<DecisionKind>() else {
        return plain(
            axum::http::StatusCode::BAD_REQUEST,
            "decision must be resolve_succeeded, resolve_failed or authorize_retry",
        );
    };
    let Ok(decision) = Decision::by_operator(kind, &form.evidence, &form.result) else {
        flash(
            &session,
            false,
            "Resolving as succeeded needs evidence: the provider's reference for the call, or \
             its result pasted.",
        )
        .await;
        return Redirect::to(&page).into_response();
    };
    let actor = Actor::Operator(operator.name.clone());
    let outcome = state
        .ledger
        .decide(&job.job_id, seen_epoch, &decision, &actor, &form.reason)
        .await;
    match outcome {
        Ok(to) => {
            let text = match to {
                JobState::RetryAuthorized => format!(
                    "Retry authorized: the job moved to epoch {} and was sent back to the queue; \
                     an attempt still running at epoch {seen_epoch} can no longer commit.",
                    seen_epoch + 1
                ),
                other => format!(
                    "Decision recorded: the job is now {}.",
                    other.as_str().replace('_', " ")
                ),
            };
            tracing::info!(operator = %operator.name, job_id = %job.job_id, decision = decision.as_str(), "decision recorded");
            flash(&session, true, text).await;
        }
        Err(LedgerError::Refused { refusal, .. }) => {
            let now = state.ledger.job(&job.job_id).await.ok().flatten();
            let text = match (&refusal, now) {
                (Refusal::BudgetExhausted, _) => {
                    "A retry cannot be authorized: the job's attempt budget is spent. Resolve it \
                     as succeeded or failed instead."
                        .to_owned()
                }
                (Refusal::DeadlinePassed, _) => {
                    "A retry cannot be authorized: the job's deadline has passed.".to_owned()
                }
                (_, Some(now)) => stale_message(now.state, now.owner_epoch),
                (_, None) => "The job no longer exists.".to_owned(),
            };
            flash(&session, false, text).await;
        }
        Err(error) => flash_unchanged(
            &session,
            error,
            "a decision failed",
            "The decision could not be recorded (the ledger did not answer); nothing was changed.",
        )
        .await,
    }
    Redirect::to(&page).into_response()
}

#[derive(Deserialize)]
pub(super) struct ReplayForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    reason: String,
}

/// How many dead letters one replay from the console inspects.
const REPLAY_MAX: usize = 500;

/// `POST /dlq/replay`: every dead letter inspected against the ledger — terminal jobs' letters
/// dropped, `unknown` kept until a decision, workable jobs re-dispatched (same id, deadline and
/// budget) — each fate on its job's timeline and in the audit log.
pub(super) async fn replay_dead_letters(
    State(state): State<AppState>,
    Extension(SignedIn(operator)): Extension<SignedIn>,
    session: Session,
    Form(form): Form<ReplayForm>,
) -> Response {
    if let Err(refused) = may_act(&session, &operator, &form.csrf).await {
        return refused;
    }
    if operator.tenants.is_some() {
        return forbidden(
            "replaying the dead-letter queue touches every tenant's letters: it needs an \
             operator without a tenant limit",
        );
    }
    let Some(reason) = reason_or_say(&session, &form.reason, "A replay").await else {
        return Redirect::to("/dlq").into_response();
    };
    let reason = reason.as_str();
    let actor = Actor::Operator(operator.name.clone());
    let replayed = async {
        let queue = (state.open_queue)().await?;
        crate::worker::dlq::replay_inspected(&state.ledger, &queue, &actor, REPLAY_MAX)
            .await
            .map_err(|e| e.to_string())
    }
    .await;
    match replayed {
        Ok(replay) => {
            for job in &replay.jobs {
                let _ = state
                    .ledger
                    .audit_dlq(
                        &job.job_id,
                        job.epoch,
                        job.state.as_str(),
                        &actor.to_string(),
                        job.action,
                        reason,
                    )
                    .await;
            }
            tracing::info!(operator = %operator.name, redispatched = replay.redispatched, "dead letters replayed");
            flash(
                &session,
                true,
                format!(
                    "Dead letters replayed after inspection: {} re-dispatched, {} dropped (their \
                     job was already terminal), {} kept until a decision, {} not job messages \
                     (kept).",
                    replay.redispatched,
                    replay.dropped_terminal,
                    replay.awaiting_decision,
                    replay.not_job_messages
                ),
            )
            .await;
        }
        Err(error) => {
            tracing::error!(%error, "a dead-letter replay failed");
            flash(
                &session,
                false,
                "The replay could not finish (the queue or the ledger did not answer); what was \
                 done is on each job's timeline.",
            )
            .await;
        }
    }
    Redirect::to("/dlq").into_response()
}

#[derive(Deserialize)]
pub(super) struct RerunForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    reason: String,
    /// How many events of the job's timeline the page showed.
    #[serde(default)]
    seen: Option<i64>,
}

/// `POST /jobs/{job_id}/rerun`: a terminal job runs again as a new job; the new job's page
/// follows.
pub(super) async fn rerun(
    State(state): State<AppState>,
    Extension(SignedIn(operator)): Extension<SignedIn>,
    session: Session,
    Path(job_id): Path<String>,
    Form(form): Form<RerunForm>,
) -> Response {
    if let Err(refused) = may_act(&session, &operator, &form.csrf).await {
        return refused;
    }
    let page = format!("/jobs/{job_id}");
    if let Err(refused) = covered_job(&state, &operator, &job_id).await {
        return refused;
    }
    let actor = Actor::Operator(operator.name.clone());
    match state
        .ledger
        .run_again(&job_id, form.seen, &actor, &form.reason)
        .await
    {
        Ok(created) => {
            super::count_send_at_creation(&state, &created);
            let new = created.job();
            let text = if let Created::Existing(_) = created {
                format!(
                    "{job_id} was already run again from the page you sent this from, as this \
                     job; nothing new was made."
                )
            } else {
                tracing::info!(operator = %operator.name, %job_id, new_job_id = %new.job_id, "job run again");
                format!("Running {job_id} again as this new job.")
            };
            flash(&session, true, text).await;
            Redirect::to(&format!("/jobs/{}", new.job_id)).into_response()
        }
        Err(LedgerError::Refused { refusal, .. }) => {
            flash(
                &session,
                false,
                format!("Only a terminal job can run again ({refusal}); nothing was changed."),
            )
            .await;
            Redirect::to(&page).into_response()
        }
        Err(LedgerError::Invalid(message)) => {
            flash(
                &session,
                false,
                format!("{}. Nothing was changed.", capitalized(&message)),
            )
            .await;
            Redirect::to(&page).into_response()
        }
        Err(error) => {
            tracing::error!(%error, "running a job again failed");
            flash(
                &session,
                false,
                "The job could not run again (the ledger did not answer).",
            )
            .await;
            Redirect::to(&page).into_response()
        }
    }
}

/// Most jobs one bulk action covers.
const BULK_MAX: usize = 100;

/// A form whose fields may repeat (the picked `job`s), or the refusal when it cannot be read.
fn repeated_fields(body: &str) -> Result<Vec<(String, String)>, Box<Response>> {
    serde_urlencoded::from_str(body).map_err(|_| {
        Box::new(plain(
            axum::http::StatusCode::BAD_REQUEST,
            "the form could not be read",
        ))
    })
}

/// The first value of `name`, or empty.
fn field_of(pairs: &[(String, String)], name: &str) -> String {
    pairs
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
        .unwrap_or_default()
}

/// Whether the job exists and is one of this operator's tenants'.
async fn covers(state: &AppState, operator: &Operator, job_id: &str) -> bool {
    matches!(state.ledger.job(job_id).await, Ok(Some(job)) if operator.covers(&job.tenant))
}

/// The operator's reason, or `None` once the page is told that `action` needs one.
async fn reason_or_say(session: &Session, text: &str, action: &str) -> Option<Reason> {
    match Reason::parse(text) {
        Ok(reason) => Some(reason),
        Err(no) => {
            flash(
                session,
                false,
                format!("{action} needs {no}. Nothing was changed."),
            )
            .await;
            None
        }
    }
}

/// Why a bulk action must change nothing (no job picked, more than [`BULK_MAX`], no reason
/// for what `needs` one), said to the operator; `None` when it may go ahead.
fn bulk_refusal(picked: usize, reason: &str, needs: &str) -> Option<String> {
    if picked == 0 {
        Some("No job was picked; nothing was changed.".into())
    } else if picked > BULK_MAX {
        Some(format!(
            "At most {BULK_MAX} jobs at once; {picked} were picked. Nothing was changed."
        ))
    } else if let Err(no) = Reason::parse(reason) {
        Some(format!("{needs} needs {no}. Nothing was changed."))
    } else {
        None
    }
}

/// What a bulk action says it did: what was done, then only the counts that are not zero of
/// the jobs that had moved on and of those refused (`refused_why` follows their count).
fn bulk_outcome(done: String, moved_on: usize, refused: usize, refused_why: &str) -> String {
    let mut parts = vec![done];
    match moved_on {
        0 => {}
        1 => parts.push("1 had changed since the page was loaded and was left as it is".into()),
        n => parts.push(format!(
            "{n} had changed since the page was loaded and were left as they are"
        )),
    }
    if refused > 0 {
        parts.push(format!("{refused} {refused_why}"));
    }
    format!("{}.", parts.join("; "))
}

/// `POST /unknown/decisions`: one decision (a fenced retry or failed) over the picked jobs,
/// each at the epoch its row showed and each fenced on its own: a job that moved on is left as
/// it is and counted, never failing its neighbours.
pub(super) async fn decide_many(
    State(state): State<AppState>,
    Extension(SignedIn(operator)): Extension<SignedIn>,
    session: Session,
    body: String,
) -> Response {
    let back = Redirect::to("/unknown").into_response();
    let pairs = match repeated_fields(&body) {
        Ok(pairs) => pairs,
        Err(refused) => return *refused,
    };
    let field = |name: &str| field_of(&pairs, name);
    if let Err(refused) = may_act(&session, &operator, &field("csrf")).await {
        return refused;
    }
    let decision = match field("decision").parse::<DecisionKind>() {
        Ok(kind @ (DecisionKind::AuthorizeRetry | DecisionKind::ResolveFailed)) => {
            Decision::by_operator(kind, "", "").expect("needs no evidence")
        }
        _ => {
            return plain(
                axum::http::StatusCode::BAD_REQUEST,
                "decision must be authorize_retry or resolve_failed",
            )
        }
    };
    let picked: Vec<(String, i64)> = picks(&pairs)
        .map(|pick| (pick.job_id, pick.epoch))
        .collect();
    let reason = field("reason");
    if let Some(why) = bulk_refusal(picked.len(), &reason, "A decision") {
        flash(&session, false, why).await;
        return back;
    }
    let actor = Actor::Operator(operator.name.clone());
    let (mut applied, mut moved_on, mut refused) = (0usize, 0usize, 0usize);
    for (job_id, epoch) in &picked {
        if !covers(&state, &operator, job_id).await {
            refused += 1;
            continue;
        }
        match state
            .ledger
            .decide(job_id, *epoch, &decision, &actor, &reason)
            .await
        {
            Ok(_) => applied += 1,
            Err(LedgerError::Refused {
                refusal:
                    Refusal::StaleEpoch { .. } | Refusal::WrongState(_) | Refusal::AlreadyTerminal(_),
                ..
            }) => moved_on += 1,
            Err(_) => refused += 1,
        }
    }
    tracing::info!(operator = %operator.name, applied, moved_on, refused, decision = decision.as_str(), "bulk decision");
    let done = match (applied, &decision) {
        (0, _) => "No job was decided".to_owned(),
        (1, Decision::AuthorizeRetry) => "Retry authorized for 1 job".to_owned(),
        (n, Decision::AuthorizeRetry) => format!("Retry authorized for {n} jobs"),
        (1, _) => "1 job resolved as failed".to_owned(),
        (n, _) => format!("{n} jobs resolved as failed"),
    };
    flash(
        &session,
        applied > 0 && moved_on + refused == 0,
        bulk_outcome(
            done,
            moved_on,
            refused,
            "could not be decided (no budget or time left, or not yours)",
        ),
    )
    .await;
    back
}

/// `POST /jobs/cancel`: the picked jobs cancelled, each at the epoch and state its row showed
/// and each fenced on its own: a job that moved on is left as it is and counted, never failing
/// its neighbours. Back to the list the operator came from, filters kept.
pub(super) async fn cancel_many(
    State(state): State<AppState>,
    Extension(SignedIn(operator)): Extension<SignedIn>,
    session: Session,
    body: String,
) -> Response {
    let (picked, reason, back) = match list_form(&session, &operator, &body, "A cancellation").await
    {
        Ok(form) => form,
        Err(answer) => return answer,
    };
    let actor = Actor::Operator(operator.name.clone());
    let (mut cancelled, mut moved_on, mut refused) = (0usize, 0usize, 0usize);
    for pick in &picked {
        let job_id = &pick.job_id;
        if !pick.state.cancellable() || !covers(&state, &operator, job_id).await {
            refused += 1;
            continue;
        }
        match state
            .ledger
            .cancel(job_id, pick.epoch, pick.state, &actor, &reason)
            .await
        {
            Ok(()) => cancelled += 1,
            Err(LedgerError::Refused { .. }) => moved_on += 1,
            Err(LedgerError::Invalid(_)) => refused += 1,
            Err(error) => {
                tracing::error!(%error, %job_id, "a cancellation failed");
                refused += 1;
            }
        }
    }
    tracing::info!(operator = %operator.name, cancelled, moved_on, refused, "bulk cancel");
    let done = match cancelled {
        0 => "No job was cancelled".to_owned(),
        1 => "1 job cancelled: it failed for good at a new epoch, so an attempt still running \
              can no longer commit"
            .to_owned(),
        n => format!(
            "{n} jobs cancelled: each failed for good at a new epoch, so an attempt still \
             running can no longer commit"
        ),
    };
    flash(
        &session,
        cancelled > 0 && moved_on + refused == 0,
        bulk_outcome(
            done,
            moved_on,
            refused,
            "could not be cancelled (finished or not started, not yours, or the ledger did not \
             answer)",
        ),
    )
    .await;
    back
}

/// A job picked on the jobs list, as its row showed it.
struct ListPick {
    job_id: String,
    epoch: i64,
    state: JobState,
    /// The events its timeline had (a page from before the list named them: none).
    events: Option<i64>,
}

/// The jobs picked on a list (`job=ID:EPOCH[:STATE[:EVENTS]]`, as [`JobPick`] writes them);
/// a pick that cannot be read is left out.
fn picks(pairs: &[(String, String)]) -> impl Iterator<Item = JobPick> + '_ {
    pairs
        .iter()
        .filter(|(k, _)| k == "job")
        .filter_map(|(_, v)| v.parse().ok())
}

/// The jobs picked on the jobs list, each with the state its row showed.
fn list_picks(pairs: &[(String, String)]) -> Vec<ListPick> {
    picks(pairs)
        .filter_map(|pick| {
            Some(ListPick {
                state: pick.state?.parse().ok()?,
                job_id: pick.job_id,
                epoch: pick.epoch,
                events: pick.events,
            })
        })
        .collect()
}

/// A bulk action's form from the jobs list, read and checked: the picks, the reason and the
/// way back; or the answer when it must change nothing (`needs` names the action for the
/// reason's refusal).
async fn list_form(
    session: &Session,
    operator: &Operator,
    body: &str,
    needs: &str,
) -> Result<(Vec<ListPick>, String, Response), Response> {
    let pairs = repeated_fields(body).map_err(|refused| *refused)?;
    let field = |name: &str| field_of(&pairs, name);
    may_act(session, operator, &field("csrf")).await?;
    let back = list_back(&field("back"));
    let picked = list_picks(&pairs);
    let reason = field("reason");
    if let Some(why) = bulk_refusal(picked.len(), &reason, needs) {
        flash(session, false, why).await;
        return Err(back);
    }
    Ok((picked, reason, back))
}

/// `POST /incidents/pin-picked`: the jobs picked on the jobs list (those of the operator's
/// tenants) pinned to an incident; back to the list.
pub(super) async fn pin_picked(
    State(state): State<AppState>,
    Extension(SignedIn(operator)): Extension<SignedIn>,
    session: Session,
    body: String,
) -> Response {
    let pairs = match repeated_fields(&body) {
        Ok(pairs) => pairs,
        Err(refused) => return *refused,
    };
    let field = |name: &str| field_of(&pairs, name);
    if let Err(refused) = may_act(&session, &operator, &field("csrf")).await {
        return refused;
    }
    let back = list_back(&field("back"));
    let Ok(incident_id) = field("incident").trim().parse::<i64>() else {
        flash(
            &session,
            false,
            "Name the incident to pin to by its number. Nothing was pinned.",
        )
        .await;
        return back;
    };
    let mut ids = Vec::new();
    for pick in list_picks(&pairs) {
        if covers(&state, &operator, &pick.job_id).await {
            ids.push(pick.job_id);
        }
    }
    if ids.is_empty() {
        flash(
            &session,
            false,
            "Pick at least one job. Nothing was pinned.",
        )
        .await;
        return back;
    }
    super::incident_forms::pinned(&state, &session, &operator, incident_id, &ids).await;
    back
}

/// The way back after a bulk action from the jobs list: only to a jobs list of this console,
/// and only an address a header can carry.
fn list_back(back: &str) -> Response {
    let listed = back == "/jobs" || back.starts_with("/jobs?");
    let safe = listed && !back.contains("//") && back.chars().all(|c| c.is_ascii_graphic());
    Redirect::to(if safe { back } else { "/jobs" }).into_response()
}

/// `POST /jobs/rerun`: the picked finished jobs each run again as a new job, as their rows
/// showed them, so sending the same form twice finds the jobs the first made. A pick that has
/// not finished is refused and counted, never failing its neighbours.
pub(super) async fn rerun_many(
    State(state): State<AppState>,
    Extension(SignedIn(operator)): Extension<SignedIn>,
    session: Session,
    body: String,
) -> Response {
    let (picked, reason, back) =
        match list_form(&session, &operator, &body, "Running jobs again").await {
            Ok(form) => form,
            Err(answer) => return answer,
        };
    let actor = Actor::Operator(operator.name.clone());
    let (mut ran, mut already, mut refused) = (0usize, 0usize, 0usize);
    for pick in &picked {
        let job_id = &pick.job_id;
        if !pick.state.is_terminal() || !covers(&state, &operator, job_id).await {
            refused += 1;
            continue;
        }
        match state
            .ledger
            .run_again(job_id, pick.events, &actor, &reason)
            .await
        {
            Ok(created) => {
                super::count_send_at_creation(&state, &created);
                match created {
                    Created::New(new) => {
                        tracing::info!(operator = %operator.name, %job_id, new_job_id = %new.job_id, "job run again");
                        ran += 1;
                    }
                    Created::Existing(_) => already += 1,
                }
            }
            Err(LedgerError::Refused { .. } | LedgerError::Invalid(_)) => refused += 1,
            Err(error) => {
                tracing::error!(%error, %job_id, "running a job again failed");
                refused += 1;
            }
        }
    }
    tracing::info!(operator = %operator.name, ran, already, refused, "bulk run again");
    let mut done = match ran {
        0 => "No job was run again".to_owned(),
        1 => "1 job runs again as a new job; the finished one stays as it is".to_owned(),
        n => format!("{n} jobs run again as new jobs; the finished ones stay as they are"),
    };
    match already {
        0 => {}
        1 => done.push_str(
            "; 1 had already been run again from the page you sent this from, and nothing new \
             was made for it",
        ),
        n => done.push_str(&format!(
            "; {n} had already been run again from the page you sent this from, and nothing \
             new was made for them"
        )),
    }
    flash(
        &session,
        ran > 0 && already + refused == 0,
        bulk_outcome(
            done,
            0,
            refused,
            "could not run again (not finished, not yours, or the ledger did not answer)",
        ),
    )
    .await;
    back
}

#[derive(Deserialize)]
pub(super) struct DropForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    reason: String,
}

/// `POST /dlq/{message_id}/drop`: one dead letter of the embedded queue removed after
/// inspection, on its job's timeline and in the audit log. The job itself is untouched.
pub(super) async fn drop_dead_letter(
    State(state): State<AppState>,
    Extension(SignedIn(operator)): Extension<SignedIn>,
    session: Session,
    Path(message_id): Path<String>,
    Form(form): Form<DropForm>,
) -> Response {
    one_letter(state, operator, session, message_id, form, false).await
}

/// `POST /dlq/{message_id}/replay`: one dead letter replayed after inspecting its job — a
/// terminal job's letter dropped, an `unknown` job's kept until a decision, a workable job
/// re-dispatched (same id, deadline and budget) and its letter dropped.
pub(super) async fn replay_dead_letter(
    State(state): State<AppState>,
    Extension(SignedIn(operator)): Extension<SignedIn>,
    session: Session,
    Path(message_id): Path<String>,
    Form(form): Form<DropForm>,
) -> Response {
    one_letter(state, operator, session, message_id, form, true).await
}

async fn one_letter(
    state: AppState,
    operator: Operator,
    session: Session,
    message_id: String,
    form: DropForm,
    replay: bool,
) -> Response {
    if let Err(refused) = may_act(&session, &operator, &form.csrf).await {
        return refused;
    }
    let back = Redirect::to("/dlq").into_response();
    let Some(dlq) = state.queue.embedded_dead_letters.clone() else {
        return plain(
            axum::http::StatusCode::NOT_FOUND,
            "SQS dead letters are dropped with `fenceline dlq-replay` or the SQS console",
        );
    };
    let Some(reason) = reason_or_say(&session, &form.reason, "Dropping a letter").await else {
        return back;
    };
    let reason = reason.as_str();
    let Ok(body) = state.ledger.dead_letter_body(&dlq, &message_id).await else {
        return unavailable();
    };
    let Some(body) = body else {
        flash(
            &session,
            false,
            "That dead letter is no longer there (replayed or dropped since).",
        )
        .await;
        return back;
    };
    let job = match crate::job::message::parse(&body) {
        Ok(m) => match state.ledger.job(&m.job_id).await {
            Ok(job) => job,
            Err(_) => return unavailable(),
        },
        Err(_) => None,
    };
    // A letter of no known job is everyone's: only an operator without a tenant limit drops it.
    let allowed = match &job {
        Some(job) => operator.covers(&job.tenant),
        None => operator.tenants.is_none(),
    };
    if !allowed {
        return plain(axum::http::StatusCode::NOT_FOUND, "no such dead letter");
    }
    // What replay does is decided by the job, as inspected now.
    let action = match (&job, replay) {
        (_, false) => "dropped_by_operator",
        (None, true) => {
            flash(
                &session,
                false,
                "Not a job message: nothing to replay. Drop it, or keep it.",
            )
            .await;
            return back;
        }
        (Some(job), true) if job.state.is_terminal() => "dropped_terminal",
        (Some(job), true) if job.state == JobState::Unknown => {
            flash(
                &session,
                false,
                format!(
                    "Kept: job {} is unknown and needs a decision first; replaying it could \
                     call the model twice.",
                    job.job_id
                ),
            )
            .await;
            return back;
        }
        (Some(_), true) => "redispatched",
    };
    if action == "redispatched" {
        let job_id = job.as_ref().map(|j| j.job_id.clone()).unwrap_or_default();
        if state
            .ledger
            .redispatch(&job_id, "dlq_replay")
            .await
            .is_err()
        {
            return unavailable();
        }
    }
    match state.ledger.drop_dead_letter(&dlq, &message_id).await {
        Ok(Some(_)) => {}
        Ok(None) => {
            flash(
                &session,
                false,
                "That dead letter is no longer there (replayed or dropped since).",
            )
            .await;
            return back;
        }
        Err(_) => return unavailable(),
    }
    let actor = Actor::Operator(operator.name.clone());
    if let Some(job) = &job {
        let event = crate::ledger::NewEvent::new(crate::job::EventKind::Replayed, &actor).detail(
            crate::job::detail::Replayed {
                from: "dead_letter_queue".to_owned(),
                action: action.to_owned(),
                message_id: message_id.to_owned(),
                receive_count: None,
                state: job.state.as_str().to_owned(),
            },
        );
        let _ = state.ledger.record_event(&job.job_id, &event).await;
        let _ = state
            .ledger
            .audit_dlq(
                &job.job_id,
                job.owner_epoch,
                job.state.as_str(),
                &actor.to_string(),
                if replay { action } else { "dropped" },
                reason,
            )
            .await;
    }
    tracing::info!(operator = %operator.name, %message_id, action, "dead letter handled");
    let text = match action {
        "redispatched" => format!(
            "Dead letter {message_id} replayed: its job was sent again with the same id, \
             deadline and attempt budget."
        ),
        "dropped_terminal" => format!(
            "Dead letter {message_id} dropped: its job was already terminal, nothing to replay."
        ),
        _ => format!("Dead letter {message_id} dropped; its job is unchanged."),
    };
    flash(&session, true, text).await;
    back
}
