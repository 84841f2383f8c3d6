//! Sign-in through the OpenID Connect provider. `GET /login/oidc` begins it: the browser keeps
//! the sign-in's `state`, `nonce` and PKCE verifier in a cookie this deployment's key seals
//! (`fenceline_oidc`, for `/login/oidc` only, ten minutes, `SameSite=Lax` so that the
//! provider's redirect back carries it), and is sent to the provider. `GET /login/oidc/callback`
//! ends it once: the cookie is cleared whatever comes, the `state` must be the cookie's, the
//! code is traded with the verifier, and the ID token must verify ([`crate::oidc`]). The
//! operator's role and tenants come from their groups; the session starts as a password's does.

use axum::extract::{Query, State};
use axum::http::header::SET_COOKIE;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Redirect, Response};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::Deserialize;
use tower_sessions::cookie::{Cookie, SameSite};
use tower_sessions::Session;

use super::sessions::token_matches;
use super::sign_in_form::{cookie_named, seconds_now, Said};
use super::AppState;
use crate::ledger::SsoSignIn;
use crate::oidc::OidcError;

const COOKIE_NAME: &str = "fenceline_oidc";
const PATH: &str = "/login/oidc";
/// How long a sign-in at the provider may take.
const VALID_SECS: i64 = 600;

/// The flow cookie, or the one that clears it.
fn flow_cookie(value: Option<String>, https: bool) -> HeaderValue {
    let cleared = value.is_none();
    let mut cookie = Cookie::build((COOKIE_NAME, value.unwrap_or_default()))
        .path(PATH)
        .http_only(true)
        .secure(https)
        .same_site(SameSite::Lax)
        .build();
    if cleared {
        cookie.make_removal();
    } else {
        cookie.set_max_age(tower_sessions::cookie::time::Duration::seconds(VALID_SECS));
    }
    HeaderValue::from_str(&cookie.to_string()).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// Back to the sign-in page, saying why, with the flow cookie cleared.
fn refused(state: &AppState, next: &str, said: Said) -> Response {
    let mut response = super::signin::back_to_login(next, said);
    response
        .headers_mut()
        .append(SET_COOKIE, flow_cookie(None, state.access.https));
    response
}

#[derive(Deserialize)]
pub(super) struct StartQuery {
    #[serde(default)]
    next: String,
}

/// `GET /login/oidc`: to the identity provider.
pub(super) async fn start(State(state): State<AppState>, Query(q): Query<StartQuery>) -> Response {
    let next = fenceline_app::pages::login::local_path(Some(q.next));
    let Some(client) = state.access.oidc.clone() else {
        return super::gate::plain(
            axum::http::StatusCode::NOT_FOUND,
            "sign-in through an identity provider is not configured here",
        );
    };
    let started = match client.start().await {
        Ok(started) => started,
        Err(error) => {
            tracing::warn!(%error, "a sign-in could not begin at the identity provider");
            return refused(&state, &next, Said::SsoUnavailable);
        }
    };
    let payload = [
        "oidc",
        &started.state,
        &started.nonce,
        &started.verifier,
        &URL_SAFE_NO_PAD.encode(next.as_bytes()),
    ]
    .join("~");
    let sealed = state
        .access
        .form_key
        .seal(&payload, seconds_now() + VALID_SECS);
    let mut response = Redirect::to(&started.url).into_response();
    response
        .headers_mut()
        .append(SET_COOKIE, flow_cookie(Some(sealed), state.access.https));
    response
}

#[derive(Deserialize)]
pub(super) struct Callback {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
}

/// The flow a sealed cookie carries: state, nonce, verifier, where to go after.
fn flow(state: &AppState, headers: &HeaderMap) -> Option<(String, String, String, String)> {
    let payload = state
        .access
        .form_key
        .unseal(&cookie_named(headers, COOKIE_NAME)?)?;
    let parts: Vec<&str> = payload.split('~').collect();
    let ["oidc", st, nonce, verifier, next] = parts.as_slice() else {
        return None;
    };
    let next = String::from_utf8(URL_SAFE_NO_PAD.decode(next).ok()?).ok()?;
    Some((
        (*st).to_owned(),
        (*nonce).to_owned(),
        (*verifier).to_owned(),
        fenceline_app::pages::login::local_path(Some(next)),
    ))
}

/// `GET /login/oidc/callback`: the provider's answer, checked, and the session begun.
pub(super) async fn callback(
    State(state): State<AppState>,
    headers: HeaderMap,
    session: Session,
    Query(answer): Query<Callback>,
) -> Response {
    let Some(client) = state.access.oidc.clone() else {
        return super::gate::plain(
            axum::http::StatusCode::NOT_FOUND,
            "sign-in through an identity provider is not configured here",
        );
    };
    let Some((expected, nonce, verifier, next)) = flow(&state, &headers) else {
        tracing::warn!("an identity provider's answer came without a sign-in begun here");
        return refused(&state, "/", Said::SsoFailed);
    };
    if !token_matches(Some(&expected), answer.state.as_deref().unwrap_or_default()) {
        tracing::warn!("an identity provider's answer named another sign-in's state");
        return refused(&state, &next, Said::SsoFailed);
    }
    if let Some(error) = answer.error {
        tracing::info!(error = %error.chars().take(80).collect::<String>(), "the identity provider declined a sign-in");
        return refused(&state, &next, Said::SsoDeclined);
    }
    let Some(code) = answer.code else {
        return refused(&state, &next, Said::SsoFailed);
    };
    let identity = match client.finish(&code, &verifier, &nonce).await {
        Ok(identity) => identity,
        Err(error @ OidcError::Unavailable(_)) => {
            tracing::warn!(%error, "a sign-in through the identity provider failed");
            return refused(&state, &next, Said::SsoUnavailable);
        }
        Err(error) => {
            tracing::warn!(%error, "a sign-in through the identity provider was refused");
            return refused(&state, &next, Said::SsoFailed);
        }
    };
    let (role, tenants) = match client.access(&identity.groups) {
        Ok(access) => access,
        Err(_) => {
            tracing::info!(subject = %identity.subject, "no group of this identity maps to a role");
            // Someone who signed in before has lost their role: their sessions end too.
            if let Err(error) = state.ledger.end_sso_sessions(&identity.subject).await {
                tracing::warn!(%error, "the sessions of an identity without a role could not be ended");
            }
            return refused(&state, &next, Said::SsoNoRole);
        }
    };
    let granted = format!("groups {}", identity.groups.join(", "));
    let signed = state
        .ledger
        .sso_operator(
            &identity.subject,
            &identity.name,
            (role, tenants.as_deref()),
            &granted,
        )
        .await;
    let credentials = match signed {
        Ok(SsoSignIn::SignedIn(c)) => c,
        Ok(SsoSignIn::NameTaken) => return refused(&state, &next, Said::SsoNameTaken),
        Ok(SsoSignIn::Disabled) => return refused(&state, &next, Said::SsoDisabled),
        Err(error) => {
            tracing::error!(%error, "a sign-in through the identity provider could not be recorded");
            return super::gate::plain(
                axum::http::StatusCode::SERVICE_UNAVAILABLE,
                "the ledger database is unavailable; try again once it answers",
            );
        }
    };
    if let Err(refused) = super::signin::begin_session(&session, &credentials).await {
        return refused;
    }
    tracing::info!(operator = %credentials.operator.name, role = role.as_str(), "signed in through the identity provider");
    // A page of this site moves on, not a redirect: the session's cookie is `SameSite=Strict`,
    // and a browser leaves it off every step of a redirect chain the provider started.
    let escaped = next
        .replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;");
    let page = format!(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"0;url={escaped}\"><title>Signed in · Fenceline</title>\
         </head><body><p>Signed in. <a href=\"{escaped}\">Continue</a></p></body></html>"
    );
    let mut response = (
        [(axum::http::header::CONTENT_TYPE, "text/html; charset=utf-8")],
        page,
    )
        .into_response();
    response
        .headers_mut()
        .append(SET_COOKIE, flow_cookie(None, state.access.https));
    response
}
