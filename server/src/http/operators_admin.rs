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
use crate::ledger::{token_id, AdminAudit, AdminChange, LedgerError};
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

/// What every form here checks before its change: it came from this session; its sender
/// manages operators (an admin of every tenant: one limited to tenants could grant itself the
/// others); it does not change the sender's own account (`target`); it names a reason. `Err`
/// is the answer to send: a refusal, or the page again with why nothing was changed.
async fn admitted(
    session: &Session,
    operator: &Operator,
    csrf: &str,
    (target, reason, what): (Option<&str>, &str, &str),
) -> Result<Reason, Response> {
    check_form_token(session, csrf).await?;
    if !(operator.role.allows(Role::Admin) && operator.tenants.is_none()) {
        return Err(forbidden(
            "only an admin of every tenant manages operators and tokens",
        ));
    }
    let refusal = if target == Some(operator.name.as_str()) {
        format!("{what}: another admin changes your own account. Nothing was changed.")
    } else {
        match Reason::parse(reason) {
            Ok(reason) => return Ok(reason),
            Err(no) => format!("{what} needs {no}. Nothing was changed."),
        }
    };
    flash(session, false, refusal).await;
    Err(back())
}

fn back() -> Response {
    Redirect::to("/operators").into_response()
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

/// What one change is and says: its audit action, what it acts on, what that was and becomes,
/// and what the page says once it is made.
struct Applied<'a> {
    action: &'a str,
    subject: String,
    before: Option<String>,
    after: Option<String>,
    said: String,
}

/// Makes `change` with its audit entry in one transaction, says how it went, and goes back to
/// the page.
async fn apply(
    state: &AppState,
    session: &Session,
    (operator, reason): (&Operator, &Reason),
    change: Result<(AdminChange<'_>, Applied<'_>), String>,
) -> Response {
    let outcome = match change {
        Ok((change, applied)) => {
            let actor = Actor::Operator(operator.name.clone()).to_string();
            let audit = AdminAudit {
                actor: &actor,
                action: applied.action,
                subject: &applied.subject,
                reason: reason.as_str(),
                before: applied.before.as_deref(),
                after: applied.after.as_deref(),
            };
            match state.ledger.change_operators(&change, Some(&audit)).await {
                Ok(()) => {
                    tracing::info!(operator = %operator.name, action = applied.action, subject = %applied.subject, "operators changed");
                    Ok(applied.said)
                }
                Err(e) => Err(said(e)),
            }
        }
        Err(refused) => Err(refused),
    };
    match outcome {
        Ok(done) => flash(session, true, done).await,
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

/// What the ledger said of a refused change, for the page.
fn said(e: LedgerError) -> String {
    match e {
        LedgerError::Invalid(message) => message,
        other => {
            tracing::error!(error = %other, "an operator change failed");
            "the ledger did not answer".to_owned()
        }
    }
}

/// `viewer · acme, globex`, as the audit shows a role and its tenants.
fn standing(role: Role, tenants: Option<&[String]>) -> String {
    format!(
        "{role} · {}",
        tenants.map_or("every tenant".to_owned(), |t| t.join(", "))
    )
}

/// `POST /operators`: a new operator.
pub(super) async fn add(
    State(state): State<AppState>,
    Extension(SignedIn(operator)): Extension<SignedIn>,
    session: Session,
    Form(form): Form<AddForm>,
) -> Response {
    let name = form.name.trim().to_owned();
    let what = "Adding an operator";
    let reason = match admitted(&session, &operator, &form.csrf, (None, &form.reason, what)).await {
        Ok(reason) => reason,
        Err(refused) => return refused,
    };
    let role = role_of(&form.role);
    let tenants = tenants_of(&form.tenants);
    let hash = match &role {
        Ok(_) => hashed(form.password).await,
        Err(_) => Err(String::new()),
    };
    let change = match (&role, &hash) {
        (Err(refused), _) | (_, Err(refused)) => Err(refused.clone()),
        (&Ok(role), Ok(hash)) => Ok((
            AdminChange::Add {
                name: &name,
                role,
                tenants: tenants.as_deref(),
                password_hash: hash,
            },
            Applied {
                action: "operator_added",
                subject: format!("operator {name}"),
                before: None,
                after: Some(standing(role, tenants.as_deref())),
                said: format!("Added {name} ({role})."),
            },
        )),
    };
    apply(&state, &session, (&operator, &reason), change).await
}

/// `POST /operators/{name}/role`: its role, and its tenants (blank: every tenant).
pub(super) async fn set_role(
    State(state): State<AppState>,
    Extension(SignedIn(operator)): Extension<SignedIn>,
    session: Session,
    Path(name): Path<String>,
    Form(form): Form<RoleForm>,
) -> Response {
    let what = "Changing a role";
    let reason = match admitted(
        &session,
        &operator,
        &form.csrf,
        (Some(&name), &form.reason, what),
    )
    .await
    {
        Ok(reason) => reason,
        Err(refused) => return refused,
    };
    let before = match state.ledger.operator(&name).await {
        Ok(Some(o)) => Some(standing(o.role, o.tenants.as_deref())),
        Ok(None) => None,
        Err(e) => return apply(&state, &session, (&operator, &reason), Err(said(e))).await,
    };
    let tenants = tenants_of(&form.tenants);
    let change = role_of(&form.role).map(|role| {
        let after = standing(role, tenants.as_deref());
        (
            AdminChange::Role {
                name: &name,
                role,
                tenants: Some(tenants.as_deref()),
            },
            Applied {
                action: "operator_role_changed",
                subject: format!("operator {name}"),
                before,
                said: format!("{name} is now {after}."),
                after: Some(after),
            },
        )
    });
    apply(&state, &session, (&operator, &reason), change).await
}

/// `POST /operators/{name}/password`: a new password; its sessions stop working.
pub(super) async fn reset_password(
    State(state): State<AppState>,
    Extension(SignedIn(operator)): Extension<SignedIn>,
    session: Session,
    Path(name): Path<String>,
    Form(form): Form<PasswordForm>,
) -> Response {
    let what = "Resetting a password";
    let reason = match admitted(
        &session,
        &operator,
        &form.csrf,
        (Some(&name), &form.reason, what),
    )
    .await
    {
        Ok(reason) => reason,
        Err(refused) => return refused,
    };
    let hash = hashed(form.password).await;
    let change = hash.as_ref().map_err(Clone::clone).map(|hash| {
        (
            AdminChange::Password {
                name: &name,
                password_hash: hash,
            },
            Applied {
                action: "operator_password_reset",
                subject: format!("operator {name}"),
                before: None,
                after: None,
                said: format!("{name}'s password is reset; their sessions have ended."),
            },
        )
    });
    apply(&state, &session, (&operator, &reason), change).await
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
    let what = if disabled {
        "Disabling an operator"
    } else {
        "Enabling an operator"
    };
    let reason = match admitted(
        &session,
        &operator,
        &form.csrf,
        (Some(&name), &form.reason, what),
    )
    .await
    {
        Ok(reason) => reason,
        Err(refused) => return refused,
    };
    let (was, is) = if disabled {
        ("enabled", "disabled")
    } else {
        ("disabled", "enabled")
    };
    let change = Ok((
        AdminChange::Disabled {
            name: &name,
            disabled,
        },
        Applied {
            action: if disabled {
                "operator_disabled"
            } else {
                "operator_enabled"
            },
            subject: format!("operator {name}"),
            before: Some(was.to_owned()),
            after: Some(is.to_owned()),
            said: if disabled {
                format!("{name} is disabled: signed out, and may not sign in.")
            } else {
                format!("{name} may sign in again.")
            },
        },
    ));
    apply(&state, &session, (&operator, &reason), change).await
}

/// `POST /tokens/{id}/revoke`: an API token stops working.
pub(super) async fn revoke_token(
    State(state): State<AppState>,
    Extension(SignedIn(operator)): Extension<SignedIn>,
    session: Session,
    Path(id): Path<String>,
    Form(form): Form<ReasonForm>,
) -> Response {
    let what = "Revoking a token";
    let reason = match admitted(&session, &operator, &form.csrf, (None, &form.reason, what)).await {
        Ok(reason) => reason,
        Err(refused) => return refused,
    };
    // The token as the ledger names it, not as the address spelled it.
    let id = token_id(&id).map_err(said);
    let change = id.as_ref().map_err(Clone::clone).map(|id| {
        (
            AdminChange::RevokeToken { id },
            Applied {
                action: "token_revoked",
                subject: format!("token {id}"),
                before: Some("live".to_owned()),
                after: Some("revoked".to_owned()),
                said: format!("Token {id} is revoked."),
            },
        )
    });
    apply(&state, &session, (&operator, &reason), change).await
}
