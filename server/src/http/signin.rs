//! Signing in and out of the console. `/login` (the page) is the app's; the form posts here,
//! with the token its signed cookie vouches for ([`sign_in_form`]): no session exists before
//! a form is posted. A good password starts a fresh session (a new id: a cookie from before
//! sign-in is useless after it); failures are counted per account and per address, each
//! attempt counted before its password is checked, and the sixth in a minute is refused
//! unchecked. The address is the client's, as [`crate::settings::proxies`] reads it. Two passwords are
//! checked at a time.

use std::net::SocketAddr;
use std::sync::OnceLock;

use axum::extract::{ConnectInfo, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Extension, Form};
use serde::Deserialize;
use tower_sessions::Session;

use super::gate::{check_form_token, flash, forbidden, now, plain};
use super::sessions::{keys, new_token};
use super::sign_in_form::{self, Said};
use super::AppState;
use crate::ledger::NO_PASSWORD;
use crate::operators::{hash_password, verify_password};

/// Failed sign-ins allowed per account in [`WINDOW_US`]; the next is refused.
const PER_ACCOUNT: i64 = 5;
/// Failed sign-ins allowed per address in [`WINDOW_US`] (an office shares one address).
const PER_ADDRESS: i64 = 20;
const WINDOW_US: i64 = 60_000_000;

#[derive(Deserialize)]
pub(super) struct LoginForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    password: String,
    #[serde(default)]
    next: String,
}

/// `next` if it is a path on this site, else the overview.
fn local_path(next: &str) -> String {
    fenceline_app::pages::login::local_path(Some(next.to_owned()))
}

pub(super) fn back_to_login(next: &str, said: Said) -> Response {
    let query =
        serde_urlencoded::to_string([("next", local_path(next).as_str()), ("said", said.code())])
            .unwrap_or_default();
    Redirect::to(&format!("/login?{query}")).into_response()
}

/// Passwords checked at once: each check takes a core and about 19 MiB for a moment (argon2id
/// at OWASP's parameters), so a burst of sign-ins waits its turn rather than taking the memory.
const CHECKS_AT_ONCE: usize = 2;
/// How long a sign-in waits for its turn before it is told to try again.
const CHECK_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

fn checks() -> &'static tokio::sync::Semaphore {
    static CHECKS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(CHECKS_AT_ONCE);
    &CHECKS
}

fn unavailable() -> Response {
    plain(
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        "the ledger database is unavailable; try again once it answers",
    )
}

/// A hash to check unknown names against, so that they take as long as known ones.
fn decoy_hash() -> &'static str {
    static DECOY: OnceLock<String> = OnceLock::new();
    DECOY.get_or_init(|| hash_password("decoy password, never valid").unwrap_or_default())
}

pub(super) async fn login(
    State(state): State<AppState>,
    connect: Option<Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
    session: Session,
    Form(form): Form<LoginForm>,
) -> Response {
    if !state.access.password_sign_in {
        return forbidden(
            "sign-in with a password is off on this console: sign in through the identity provider",
        );
    }
    if !sign_in_form::accepts(&state.access.form_key, &headers, &form.csrf) {
        return forbidden(
            "this form has expired or did not come from this console; reload the page and try again",
        );
    }
    let ledger = &state.ledger;
    let name = form.name.trim().to_owned();
    // Behind a trusted proxy, the operator's own address: one office's failures do not lock
    // out everyone who shares the proxy.
    let address = connect.map_or_else(
        || "unknown".to_owned(),
        |c| {
            let peer = c.0 .0.ip();
            state
                .access
                .trusted_proxies
                .client(peer, &headers)
                .to_string()
        },
    );
    // The attempt takes its place in the throttle before its password is checked, counted as
    // a failure until the password proves right: guesses posted together are counted together.
    let slot = match ledger
        .take_sign_in_slot(&name, &address, (PER_ACCOUNT, PER_ADDRESS), WINDOW_US)
        .await
    {
        Ok(Some(slot)) => slot,
        Ok(None) => {
            tracing::warn!(%address, "sign-in throttled");
            return back_to_login(&form.next, Said::Throttled);
        }
        Err(_) => return unavailable(),
    };
    let credentials = match ledger.credentials(&name).await {
        // An operator of the identity provider has no password: checked as an unknown name.
        Ok(c) => c.filter(|c| !c.operator.is_disabled() && c.password_hash != NO_PASSWORD),
        Err(_) => {
            // Not checked: not a failure either.
            let _ = ledger.clear_sign_in_slot(&slot).await;
            return unavailable();
        }
    };
    let hash = credentials
        .as_ref()
        .map_or_else(|| decoy_hash().to_owned(), |c| c.password_hash.clone());
    let Ok(Ok(turn)) = tokio::time::timeout(CHECK_WAIT, checks().acquire()).await else {
        // Not checked: not a failure either.
        let _ = ledger.clear_sign_in_slot(&slot).await;
        let mut busy = plain(
            axum::http::StatusCode::TOO_MANY_REQUESTS,
            "too many sign-ins are being checked at once; try again in a moment",
        );
        busy.headers_mut().insert(
            axum::http::header::RETRY_AFTER,
            axum::http::HeaderValue::from_static("1"),
        );
        return busy;
    };
    let password = form.password;
    // The turn ends with the check itself, even when the visitor has gone before it does.
    let good = tokio::task::spawn_blocking(move || {
        let _turn = turn;
        verify_password(&password, &hash)
    })
    .await
    .unwrap_or(false);
    let Some(credentials) = credentials.filter(|_| good) else {
        tracing::info!(%address, "a sign-in failed");
        return back_to_login(&form.next, Said::Wrong);
    };
    if let Err(error) = ledger.clear_sign_in_slot(&slot).await {
        // Left counted as a failure: the sign-in is refused rather than half done.
        tracing::warn!(%error, "a right password's sign-in could not be recorded");
        return unavailable();
    }
    if let Err(refused) = begin_session(&session, &credentials).await {
        return refused;
    }
    tracing::info!(operator = %credentials.operator.name, "signed in");
    let mut response = Redirect::to(&local_path(&form.next)).into_response();
    sign_in_form::forget(&mut response, state.access.https);
    response
}

/// Starts the signed-in session of `credentials`' operator under a fresh id: whatever id the
/// visitor had before signing in is deleted.
pub(super) async fn begin_session(
    session: &Session,
    credentials: &crate::ledger::Credentials,
) -> Result<(), Response> {
    let unavailable = || {
        plain(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "sessions are unavailable; try again",
        )
    };
    session.cycle_id().await.map_err(|_| unavailable())?;
    let at = now();
    let stored = async {
        session
            .insert(keys::OPERATOR, &credentials.operator.name)
            .await?;
        session.insert(keys::SINCE, at).await?;
        session.insert(keys::SEEN, at).await?;
        session
            .insert(keys::PASSWORD_SET, credentials.password_set_at)
            .await?;
        session.insert(keys::CSRF, new_token()).await
    };
    stored.await.map_err(|_| unavailable())
}

#[derive(Deserialize)]
pub(super) struct LogoutForm {
    #[serde(default)]
    csrf: String,
}

pub(super) async fn logout(session: Session, Form(form): Form<LogoutForm>) -> Response {
    if let Err(refused) = check_form_token(&session, &form.csrf).await {
        return refused;
    }
    let _ = session.flush().await;
    Redirect::to(&format!("/login?said={}", Said::SignedOut.code())).into_response()
}

#[derive(Deserialize)]
pub(super) struct ZoneForm {
    csrf: String,
    tz: String,
    #[serde(default)]
    next: String,
}

/// The time zone this operator reads times in, for the rest of the session; back to the page
/// they were on.
pub(super) async fn choose_zone(session: Session, Form(form): Form<ZoneForm>) -> Response {
    if let Err(refused) = check_form_token(&session, &form.csrf).await {
        return refused;
    }
    let next = local_path(&form.next);
    match crate::time::zone(&form.tz) {
        Ok(tz) => {
            let _ = session.insert(keys::ZONE, tz.name()).await;
            flash(
                &session,
                true,
                &format!("Times are now shown in {}.", tz.name()),
            )
            .await;
        }
        Err(bad) => flash(&session, false, &bad.to_string()).await,
    }
    Redirect::to(&next).into_response()
}
