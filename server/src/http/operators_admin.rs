//! The `/operators` page's forms: an admin of every tenant adds operators, changes their role
//! and tenants, resets their password, disables and enables them, and revokes API tokens. Each
//! form names a reason; each change is written to the audit log with what it acted on.

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Extension, Form};
use serde::Deserialize;
use tower_sessions::Session;

use super::error::capitalized;
use super::gate::{check_form_token, flash, forbidden, SignedIn};
use super::AppState;
use crate::job::Actor;
use crate::ledger::LedgerError;
use crate::operators::{hash_password, Operator, Role};
use fenceline_app::action::Reason;

#[derive(Deserialize)]
pub(super) struct AddForm {
    csrf: String,
    name: String,
    role: String,
    #[serde(default)]
    tenants: String,
    password: String,
    #[serde(default)]
    reason: String,
}

#[derive(Deserialize)]
pub(super) struct RoleForm {
    csrf: String,
    role: String,
    #[serde(default)]
    tenants: String,
    #[serde(default)]
    reason: String,
}

#[derive(Deserialize)]
pub(super) struct PasswordForm {
    csrf: String,
    password: String,
    #[serde(default)]
    reason: String,
}

#[derive(Deserialize)]
pub(super) struct ReasonForm {
    csrf: String,
    #[serde(default)]
    reason: String,
}

/// The form came from this session and its sender manages operators: an admin of every
/// tenant (one limited to tenants could grant itself the others).
async fn may_manage(session: &Session, operator: &Operator, csrf: &str) -> Result<(), Response> {
    check_form_token(session, csrf).await?;
    if operator.role.allows(Role::Admin) && operator.tenants.is_none() {
        Ok(())
    } else {
        Err(forbidden(
            "only an admin of every tenant manages operators and tokens",
        ))
    }
}

fn back() -> Response {
    Redirect::to("/operators").into_response()
}

/// What the change needs before it is made; `Err` is the refusal already said on the page.
async fn checked(
    session: &Session,
    operator: &Operator,
    target: Option<&str>,
    reason: &str,
    what: &str,
) -> Result<Reason, Response> {
    if target == Some(operator.name.as_str()) {
        flash(
            session,
            false,
            format!("{what}: another admin changes your own account. Nothing was changed."),
        )
        .await;
        return Err(back());
    }
    match Reason::parse(reason) {
        Ok(reason) => Ok(reason),
        Err(no) => {
            flash(
                session,
                false,
                format!("{what} needs {no}. Nothing was changed."),
            )
            .await;
            Err(back())
        }
    }
}

/// `acme, globex` as a list; blank for every tenant.
fn tenants_of(text: &str) -> Option<Vec<String>> {
    let list: Vec<String> = text
        .split(',')
        .map(|t| t.trim().to_owned())
        .filter(|t| !t.is_empty())
        .collect();
    (!list.is_empty()).then_some(list)
}

fn role_of(text: &str) -> Result<Role, String> {
    text.parse::<Role>()
        .map_err(|_| format!("{text:?} is not a role (viewer, operator or admin)"))
}

/// Hashes off the request threads: argon2id takes a core for a moment.
async fn hashed(password: String) -> Result<String, String> {
    tokio::task::spawn_blocking(move || hash_password(&password))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())
}

/// Says how the change went, audits it when it was made, and goes back to the page.
async fn done(
    state: &AppState,
    session: &Session,
    (operator, action, subject, reason): (&Operator, &str, &str, &Reason),
    outcome: Result<String, String>,
) -> Response {
    match outcome {
        Ok(said) => {
            let actor = Actor::Operator(operator.name.clone()).to_string();
            if let Err(error) = state
                .ledger
                .audit_admin(&actor, action, subject, reason.as_str())
                .await
            {
                tracing::error!(%error, action, "could not write the audit entry");
            }
            tracing::info!(operator = %operator.name, action, subject, "operators changed");
            flash(session, true, said).await;
        }
        Err(refused) => {
            flash(
                session,
                false,
                format!("{}. Nothing was changed.", capitalized(&refused)),
            )
            .await;
        }
    }
    back()
}

fn said(e: LedgerError) -> String {
    match e {
        LedgerError::Invalid(message) => message,
        other => {
            tracing::error!(error = %other, "an operator change failed");
            "the ledger did not answer".to_owned()
        }
    }
}

/// `POST /operators`: a new operator.
pub(super) async fn add(
    State(state): State<AppState>,
    Extension(SignedIn(operator)): Extension<SignedIn>,
    session: Session,
    Form(form): Form<AddForm>,
) -> Response {
    if let Err(refused) = may_manage(&session, &operator, &form.csrf).await {
        return refused;
    }
    let name = form.name.trim().to_owned();
    let reason = match checked(
        &session,
        &operator,
        None,
        &form.reason,
        "Adding an operator",
    )
    .await
    {
        Ok(reason) => reason,
        Err(back) => return back,
    };
    let outcome = async {
        if !crate::operators::valid_name(&name) {
            return Err("a name is 1 to 64 letters, digits, '.', '_', '-' or '@'".to_owned());
        }
        let role = role_of(&form.role)?;
        let hash = hashed(form.password).await?;
        let tenants = tenants_of(&form.tenants);
        let added = state
            .ledger
            .add_operator(&name, role, tenants.as_deref(), &hash)
            .await
            .map_err(said)?;
        Ok(format!("Added {} ({}).", added.name, added.role))
    }
    .await;
    done(
        &state,
        &session,
        (
            &operator,
            "operator_added",
            &format!("operator {name}"),
            &reason,
        ),
        outcome,
    )
    .await
}

/// `POST /operators/{name}/role`: its role, and its tenants (blank: every tenant).
pub(super) async fn set_role(
    State(state): State<AppState>,
    Extension(SignedIn(operator)): Extension<SignedIn>,
    session: Session,
    Path(name): Path<String>,
    Form(form): Form<RoleForm>,
) -> Response {
    if let Err(refused) = may_manage(&session, &operator, &form.csrf).await {
        return refused;
    }
    let what = "Changing a role";
    let reason = match checked(&session, &operator, Some(&name), &form.reason, what).await {
        Ok(reason) => reason,
        Err(back) => return back,
    };
    let outcome = async {
        let role = role_of(&form.role)?;
        let tenants = tenants_of(&form.tenants);
        let changed = state
            .ledger
            .set_operator_role(&name, role, Some(tenants.as_deref()))
            .await
            .map_err(said)?;
        Ok(format!(
            "{} is now {}, for {}.",
            changed.name,
            changed.role,
            changed
                .tenants
                .map_or("every tenant".to_owned(), |t| t.join(", "))
        ))
    }
    .await;
    let action = "operator_role_changed";
    done(
        &state,
        &session,
        (&operator, action, &format!("operator {name}"), &reason),
        outcome,
    )
    .await
}

/// `POST /operators/{name}/password`: a new password; its sessions stop working.
pub(super) async fn reset_password(
    State(state): State<AppState>,
    Extension(SignedIn(operator)): Extension<SignedIn>,
    session: Session,
    Path(name): Path<String>,
    Form(form): Form<PasswordForm>,
) -> Response {
    if let Err(refused) = may_manage(&session, &operator, &form.csrf).await {
        return refused;
    }
    let what = "Resetting a password";
    let reason = match checked(&session, &operator, Some(&name), &form.reason, what).await {
        Ok(reason) => reason,
        Err(back) => return back,
    };
    let outcome = async {
        let hash = hashed(form.password).await?;
        let changed = state
            .ledger
            .set_operator_password(&name, &hash)
            .await
            .map_err(said)?;
        Ok(format!(
            "{}'s password is reset; their sessions have ended.",
            changed.name
        ))
    }
    .await;
    let action = "operator_password_reset";
    done(
        &state,
        &session,
        (&operator, action, &format!("operator {name}"), &reason),
        outcome,
    )
    .await
}

/// `POST /operators/{name}/disable`: no sign-in, and its sessions and tokens stop working.
pub(super) async fn disable(
    state: State<AppState>,
    signed_in: Extension<SignedIn>,
    session: Session,
    name: Path<String>,
    form: Form<ReasonForm>,
) -> Response {
    switch(state, signed_in, session, name, form, true).await
}

/// `POST /operators/{name}/enable`: may sign in again.
pub(super) async fn enable(
    state: State<AppState>,
    signed_in: Extension<SignedIn>,
    session: Session,
    name: Path<String>,
    form: Form<ReasonForm>,
) -> Response {
    switch(state, signed_in, session, name, form, false).await
}

async fn switch(
    State(state): State<AppState>,
    Extension(SignedIn(operator)): Extension<SignedIn>,
    session: Session,
    Path(name): Path<String>,
    Form(form): Form<ReasonForm>,
    disabled: bool,
) -> Response {
    if let Err(refused) = may_manage(&session, &operator, &form.csrf).await {
        return refused;
    }
    let what = if disabled {
        "Disabling an operator"
    } else {
        "Enabling an operator"
    };
    let reason = match checked(&session, &operator, Some(&name), &form.reason, what).await {
        Ok(reason) => reason,
        Err(back) => return back,
    };
    let outcome = state
        .ledger
        .set_operator_disabled(&name, disabled)
        .await
        .map(|o| {
            if disabled {
                format!("{} is disabled: signed out, and may not sign in.", o.name)
            } else {
                format!("{} may sign in again.", o.name)
            }
        })
        .map_err(said);
    let action = if disabled {
        "operator_disabled"
    } else {
        "operator_enabled"
    };
    done(
        &state,
        &session,
        (&operator, action, &format!("operator {name}"), &reason),
        outcome,
    )
    .await
}

/// `POST /tokens/{id}/revoke`: an API token stops working.
pub(super) async fn revoke_token(
    State(state): State<AppState>,
    Extension(SignedIn(operator)): Extension<SignedIn>,
    session: Session,
    Path(id): Path<String>,
    Form(form): Form<ReasonForm>,
) -> Response {
    if let Err(refused) = may_manage(&session, &operator, &form.csrf).await {
        return refused;
    }
    let reason = match checked(&session, &operator, None, &form.reason, "Revoking a token").await {
        Ok(reason) => reason,
        Err(back) => return back,
    };
    let outcome = state
        .ledger
        .revoke_token(&id)
        .await
        .map(|t| format!("Token {} ({}) is revoked.", t.id, t.name))
        .map_err(said);
    let subject = format!("token {id}");
    done(
        &state,
        &session,
        (&operator, "token_revoked", &subject, &reason),
        outcome,
    )
    .await
}
