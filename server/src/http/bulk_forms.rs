//! The console's forms for actions by filter: `POST /bulk` previews an action over every job a
//! jobs-list filter matches (the exact set is recorded, nothing changes), and
//! `POST /bulk/{id}/confirm` confirms that preview with a reason; the background runner acts.

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Extension, Form};
use serde::Deserialize;
use tower_sessions::Session;

use super::gate::{check_form_token, flash, forbidden, SignedIn};
use super::AppState;
use crate::bulk::{BulkError, BulkKind};
use crate::operators::Role;
use fenceline_app::action::Reason;
use fenceline_app::console::JobsQuery;

/// The jobs list's filter and the action.
#[derive(Debug, Default, Deserialize)]
pub(super) struct PreviewForm {
    csrf: String,
    action: String,
    #[serde(flatten)]
    filter: FilterFields,
}

/// The jobs list's filter as a form repeats it in hidden fields.
#[derive(Debug, Default, Deserialize)]
pub(super) struct FilterFields {
    state: Option<String>,
    tenant: Option<String>,
    key_prefix: Option<String>,
    created_after: Option<String>,
    created_before: Option<String>,
    worker: Option<String>,
    error_code: Option<String>,
    owner: Option<String>,
    with_drills: Option<String>,
    redelivered: Option<String>,
    stale_rejected: Option<String>,
    tz: Option<String>,
}

impl FilterFields {
    pub(super) fn query(&self) -> JobsQuery {
        fn set(v: &Option<String>) -> Option<&str> {
            v.as_deref().map(str::trim).filter(|v| !v.is_empty())
        }
        let owned = |v: &Option<String>| set(v).map(str::to_owned);
        JobsQuery {
            state: owned(&self.state),
            tenant: owned(&self.tenant),
            key_prefix: owned(&self.key_prefix),
            created_after: owned(&self.created_after),
            created_before: owned(&self.created_before),
            worker: owned(&self.worker),
            error_code: owned(&self.error_code),
            owner: owned(&self.owner),
            with_drills: set(&self.with_drills).is_some(),
            redelivered: set(&self.redelivered).is_some(),
            stale_rejected: set(&self.stale_rejected).is_some(),
            ..JobsQuery::default()
        }
    }
}

/// `POST /bulk`: records the preview and shows it (`/bulk/{id}`); back to the list, told why,
/// when it cannot be made.
pub(super) async fn preview(
    State(state): State<AppState>,
    Extension(SignedIn(operator)): Extension<SignedIn>,
    session: Session,
    Form(form): Form<PreviewForm>,
) -> Response {
    if let Err(refused) = check_form_token(&session, &form.csrf).await {
        return refused;
    }
    if !operator.role.allows(Role::Operator) {
        return forbidden("your role (viewer) can read jobs but not act on them");
    }
    let query = form.filter.query();
    let filter_text = crate::console::filter_text(&query);
    let back = Redirect::to(&format!("/jobs?{filter_text}")).into_response();
    let kind = match form.action.parse::<BulkKind>() {
        Ok(kind) => kind,
        Err(why) => {
            flash(&session, false, format!("{why}. Nothing was changed.")).await;
            return back;
        }
    };
    let zone = form
        .filter
        .tz
        .as_deref()
        .and_then(|tz| crate::time::zone(tz).ok())
        .unwrap_or(chrono_tz::UTC);
    let console = crate::console::LedgerConsole::new(state.ledger.clone(), state.queue.clone())
        .for_tenants(operator.tenants.clone())
        .in_zone(zone);
    let filter = match console.bulk_filter(&query).await {
        Ok(Ok(filter)) => filter,
        Ok(Err(bad)) => {
            flash(
                &session,
                false,
                format!(
                    "{} must be {}. Nothing was changed.",
                    bad.name, bad.expected
                ),
            )
            .await;
            return back;
        }
        Err(_) => {
            flash(
                &session,
                false,
                "The ledger database is unavailable; nothing was changed.",
            )
            .await;
            return back;
        }
    };
    match crate::bulk::preview(
        &state.ledger,
        &operator,
        kind,
        &filter,
        &filter_text,
        state.queue.bulk_cap,
    )
    .await
    {
        Ok(bulk_id) => Redirect::to(&format!("/bulk/{bulk_id}")).into_response(),
        Err(BulkError::NotAllowed) => {
            forbidden("your role (viewer) can read jobs but not act on them")
        }
        Err(
            error @ (BulkError::TooMany { .. } | BulkError::WrongState { .. } | BulkError::Nothing),
        ) => {
            flash(
                &session,
                false,
                format!(
                    "{}. Nothing was changed.",
                    super::error::capitalized(&error.to_string())
                ),
            )
            .await;
            back
        }
        Err(BulkError::Ledger(error)) => {
            tracing::error!(%error, "a bulk preview failed");
            flash(
                &session,
                false,
                "The preview could not be made; nothing was changed.",
            )
            .await;
            back
        }
    }
}

#[derive(Debug, Deserialize)]
pub(super) struct ConfirmForm {
    csrf: String,
    reason: String,
}

/// `POST /bulk/{id}/confirm`: starts the previewed action, by the operator who previewed it,
/// within the preview's time.
pub(super) async fn confirm(
    State(state): State<AppState>,
    Extension(SignedIn(operator)): Extension<SignedIn>,
    session: Session,
    Path(bulk_id): Path<i64>,
    Form(form): Form<ConfirmForm>,
) -> Response {
    if let Err(refused) = check_form_token(&session, &form.csrf).await {
        return refused;
    }
    if !operator.role.allows(Role::Operator) {
        return forbidden("your role (viewer) can read jobs but not act on them");
    }
    let back = Redirect::to(&format!("/bulk/{bulk_id}")).into_response();
    let reason = match Reason::parse(&form.reason) {
        Ok(reason) => reason,
        Err(no) => {
            flash(
                &session,
                false,
                format!("A bulk action needs {no}. Nothing was changed."),
            )
            .await;
            return back;
        }
    };
    let actor = crate::job::Actor::Operator(operator.name.clone()).to_string();
    match state
        .ledger
        .confirm_bulk(bulk_id, &actor, reason.as_str())
        .await
    {
        Ok(true) => {
            flash(
                &session,
                true,
                "Confirmed: the jobs are acted on in the background.",
            )
            .await
        }
        Ok(false) => {
            flash(
                &session,
                false,
                "This preview cannot be confirmed: it is another operator's, confirmed already, \
                 or older than 15 minutes. Nothing was changed.",
            )
            .await
        }
        Err(error) => {
            tracing::error!(%error, "a bulk confirmation failed");
            flash(
                &session,
                false,
                "The ledger database is unavailable; nothing was changed.",
            )
            .await;
        }
    }
    back
}
