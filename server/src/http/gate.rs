//! The console's doors: requests must name this console's host (no DNS rebinding), state
//! changes must come from its own pages (no cross-site forms), and every page but `/login`
//! needs a signed-in operator whose session is still good. What the gate finds reaches the
//! pages as a [`Visitor`] and the handlers as a [`SignedIn`]. A signed-out visitor's form
//! token comes from [`sign_in_form`], not from a session.

use axum::extract::{Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use fenceline_app::console::{Flash, Visitor};
use tower_sessions::Session;

use super::sessions::{keys, new_token, SessionPolicy};
use super::sign_in_form;
use super::AppState;
use crate::operators::{Operator, Role};
use crate::settings::Secret;

/// Who may reach the console, and how.
#[derive(Debug, Clone, Default)]
pub struct Access {
    /// The host name operators use (from `--public-url`), lower case, without a port.
    pub public_host: Option<String>,
    /// The public URL itself (scheme and authority), for links that leave the console.
    pub public_url: Option<String>,
    /// Without a public URL, whether the server listens on loopback only (then only
    /// `localhost`, `127.0.0.1` and `[::1]` are accepted as hosts).
    pub loopback: bool,
    /// Whether the console is reached over https (cookies are then `Secure`).
    pub https: bool,
    /// The bearer token `/metrics` asks for; without one `/metrics` is not served.
    pub metrics_token: Option<Secret>,
    /// Proxies whose `X-Forwarded-For` names the client, for sign-in limits.
    pub trusted_proxies: crate::settings::proxies::TrustedProxies,
    pub sessions: SessionPolicy,
    /// Signs the sign-in form's cookie: the ledger's key, shared by every `serve` process.
    pub form_key: sign_in_form::FormKey,
    /// Sign-in through an OpenID Connect provider, when configured.
    pub oidc: Option<std::sync::Arc<crate::oidc::OidcClient>>,
    /// Whether local passwords sign operators in.
    pub password_sign_in: bool,
}

/// The signed-in operator, for handlers.
#[derive(Debug, Clone)]
pub(super) struct SignedIn(pub(super) Operator);

/// The host name of an authority (`Host` header or URL part), lower case, without a port.
pub fn hostname(authority: &str) -> String {
    let authority = authority.trim().to_ascii_lowercase();
    if let Some(rest) = authority.strip_prefix('[') {
        return rest.split(']').next().unwrap_or_default().to_owned();
    }
    authority
        .rsplit_once(':')
        .filter(|(_, port)| port.bytes().all(|b| b.is_ascii_digit()))
        .map_or(authority.clone(), |(host, _)| host.to_owned())
}

impl Access {
    /// Who may reach the console, from the public URL and the bound address.
    pub fn from_settings(settings: &crate::settings::Settings) -> Access {
        let public = settings.http.public_url.as_deref();
        Access {
            public_host: public.map(|url| {
                let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
                let authority = rest.split('/').next().unwrap_or_default();
                hostname(authority)
            }),
            public_url: public.map(str::to_owned),
            loopback: settings.http.bind.ip().is_loopback(),
            https: public.is_some_and(|url| url.starts_with("https://")),
            metrics_token: settings.http.metrics_token.clone(),
            trusted_proxies: settings.http.trusted_proxies.clone(),
            sessions: Default::default(),
            // The ledger's key replaces it once the ledger is open (`startup`).
            form_key: Default::default(),
            oidc: settings.http.oidc.clone().and_then(|oidc| {
                let public = settings.http.public_url.as_deref()?;
                crate::oidc::OidcClient::new(oidc, public)
                    .map(std::sync::Arc::new)
                    .inspect_err(|error| tracing::error!(%error, "OpenID Connect sign-in is off"))
                    .ok()
            }),
            password_sign_in: settings.http.password_sign_in,
        }
    }

    /// The console's address for absolute links: the public URL, else the scheme and `Host`
    /// the request came with (already checked by [`same_site`]).
    pub fn origin(&self, headers: &axum::http::HeaderMap) -> String {
        if let Some(url) = &self.public_url {
            return url.clone();
        }
        let host = headers
            .get(axum::http::header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("localhost");
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{host}")
    }

    /// Whether a request naming `host` may reach the console.
    pub fn host_allowed(&self, host: &str) -> bool {
        let name = hostname(host);
        match &self.public_host {
            Some(public) => name == *public,
            None if self.loopback => matches!(name.as_str(), "localhost" | "127.0.0.1" | "::1"),
            None => !name.is_empty(),
        }
    }
}

fn refuse(status: StatusCode, message: &str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        format!("{message}\n"),
    )
        .into_response()
}

/// Refuses requests for another host (DNS rebinding) and state changes that another site
/// started (`Origin` not this host, or `Sec-Fetch-Site: cross-site`).
pub(super) async fn same_site(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let headers = request.headers();
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| request.uri().authority().map(|a| a.as_str()))
        .unwrap_or_default()
        .to_owned();
    if !state.access.host_allowed(&host) {
        return refuse(
            StatusCode::MISDIRECTED_REQUEST,
            "this console does not answer for that host name; use its configured address",
        );
    }
    let safe = matches!(*request.method(), Method::GET | Method::HEAD);
    if !safe {
        let cross_site = headers
            .get("sec-fetch-site")
            .is_some_and(|v| v.as_bytes() == b"cross-site");
        let foreign_origin = headers
            .get(header::ORIGIN)
            .and_then(|o| o.to_str().ok())
            .is_some_and(|origin| {
                let authority = origin
                    .strip_prefix("https://")
                    .or_else(|| origin.strip_prefix("http://"))
                    .unwrap_or("");
                !authority.eq_ignore_ascii_case(&host)
            });
        if cross_site || foreign_origin {
            return refuse(
                StatusCode::FORBIDDEN,
                "refused: this request came from another site",
            );
        }
    }
    next.run(request).await
}

pub(super) fn now() -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(now.as_micros()).unwrap_or(i64::MAX)
}

fn micros(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

/// The session's operator if the session is still good; ends it (and says why) if not.
async fn session_operator(
    state: &AppState,
    session: &Session,
) -> Result<Option<Operator>, Response> {
    let unavailable = |_| {
        refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            "the ledger database is unavailable; sign-in works again once it answers",
        )
    };
    let Some(name) = session
        .get::<String>(keys::OPERATOR)
        .await
        .map_err(|_| refuse(StatusCode::SERVICE_UNAVAILABLE, "sessions are unavailable"))?
    else {
        return Ok(None);
    };
    let since = session.get::<i64>(keys::SINCE).await.ok().flatten();
    let seen = session.get::<i64>(keys::SEEN).await.ok().flatten();
    let password_set = session.get::<i64>(keys::PASSWORD_SET).await.ok().flatten();
    let now = now();
    let policy = state.access.sessions;
    let ended = match (since, seen) {
        (Some(since), Some(seen)) => {
            if now - since > micros(policy.absolute) {
                Some("Your session ended: sessions last at most 12 hours. Sign in again.")
            } else if now - seen > micros(policy.idle) {
                Some("Your session ended after a long time unused. Sign in again.")
            } else {
                None
            }
        }
        _ => Some("Sign in again."),
    };
    let credentials = state.ledger.credentials(&name).await.map_err(unavailable)?;
    let ended = ended.or(match &credentials {
        None => Some("Your account no longer exists."),
        Some(c) if c.operator.is_disabled() => Some("Your account was disabled."),
        Some(c) if Some(c.password_set_at) != password_set => {
            Some("Your password was changed. Sign in again.")
        }
        Some(_) => None,
    });
    if let Some(why) = ended {
        let _ = session.flush().await;
        let _ = session
            .insert(
                keys::FLASH,
                Flash {
                    ok: false,
                    text: why.to_owned(),
                },
            )
            .await;
        return Ok(None);
    }
    if seen.is_some_and(|seen| now - seen > 60_000_000) {
        let _ = session.insert(keys::SEEN, now).await;
    }
    Ok(credentials.map(|c| c.operator))
}

/// `/login?next=…` for this request's path and query.
fn to_login(request: &Request) -> Response {
    let next = request
        .uri()
        .path_and_query()
        .map(|pq| pq.as_str())
        .unwrap_or("/");
    let query = serde_urlencoded::to_string([("next", next)]).unwrap_or_default();
    Redirect::to(&format!("/login?{query}")).into_response()
}

/// Lets a signed-in operator through (and anyone to `/login`), with the [`Visitor`] the
/// pages render from; sends everyone else to sign in, coming back to the same address.
pub(super) async fn console_gate(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    let Some(session) = request.extensions().get::<Session>().cloned() else {
        return refuse(StatusCode::INTERNAL_SERVER_ERROR, "no session layer");
    };
    let operator = match session_operator(&state, &session).await {
        Ok(operator) => operator,
        Err(response) => return response,
    };
    let open = matches!(
        request.uri().path(),
        "/login" | "/login/oidc" | "/login/oidc/callback"
    );
    let safe = matches!(*request.method(), Method::GET | Method::HEAD);
    if operator.is_none() && !open {
        return if safe {
            to_login(&request)
        } else {
            refuse(
                StatusCode::FORBIDDEN,
                "sign in first: this action needs a signed-in operator",
            )
        };
    }
    // A signed-out visitor's only form is the sign-in form, whose token their browser keeps:
    // showing it stores no session.
    let (csrf, form_cookie) = match &operator {
        None if safe => sign_in_form::token_for(
            &state.access.form_key,
            request.headers(),
            state.access.https,
            state.access.sessions.idle,
        ),
        None => (String::new(), None),
        Some(_) => match session.get::<String>(keys::CSRF).await.ok().flatten() {
            Some(token) => (token, None),
            None if safe => {
                let token = new_token();
                let _ = session.insert(keys::CSRF, token.clone()).await;
                (token, None)
            }
            None => (String::new(), None),
        },
    };
    // A page shows the last action's outcome once; exports and the like leave it for the page.
    let path = request.uri().path();
    let flash = if safe && !path.contains('.') && !path.ends_with("/result") {
        session.remove::<Flash>(keys::FLASH).await.ok().flatten()
    } else {
        None
    };
    // The sign-in page says why it is shown again by its address, for visitors without a
    // session (`signin::Said`).
    let flash = flash.or_else(|| {
        let said = (operator.is_none() && open && safe)
            .then(|| request.uri().query())
            .flatten()
            .and_then(|query| {
                serde_urlencoded::from_str::<Vec<(String, String)>>(query)
                    .ok()?
                    .into_iter()
                    .find(|(name, _)| name == "said")
                    .and_then(|(_, code)| sign_in_form::Said::parse(&code))
            })?;
        Some(Flash {
            ok: said.ok(),
            text: said.text().to_owned(),
        })
    });
    let chosen = session.get::<String>(keys::ZONE).await.ok().flatten();
    let (zone, bad_zone) = page_zone(request.uri().query(), chosen);
    let visitor = Visitor {
        operator: operator.as_ref().map(|o| fenceline_app::console::SignedIn {
            name: o.name.clone(),
            role: o.role.as_str().to_owned(),
            can_act: o.role.allows(Role::Operator),
            tenants: o.tenants.as_ref().map(|t| t.join(", ")),
        }),
        csrf,
        flash,
        origin: state.access.origin(request.headers()),
        zone,
        bad_zone,
        sso: state.access.oidc.is_some(),
        password_off: !state.access.password_sign_in,
    };
    request.extensions_mut().insert(visitor);
    if let Some(operator) = operator {
        request.extensions_mut().insert(SignedIn(operator));
    }
    let mut response = next.run(request).await;
    if let Some(cookie) = form_cookie {
        response.headers_mut().append(header::SET_COOKIE, cookie);
    }
    response
}

/// Leaves `text` to be shown once on the next page.
pub(super) async fn flash(session: &Session, ok: bool, text: impl Into<String>) {
    let _ = session
        .insert(
            keys::FLASH,
            Flash {
                ok,
                text: text.into(),
            },
        )
        .await;
}

/// Checks a posted form's token against the session's; the refusal to send if it fails.
pub(super) async fn check_form_token(session: &Session, given: &str) -> Result<(), Response> {
    let expected = session.get::<String>(keys::CSRF).await.ok().flatten();
    if super::sessions::token_matches(expected.as_deref(), given) {
        Ok(())
    } else {
        Err(refused_form(
            StatusCode::FORBIDDEN,
            "this form has expired or did not come from this console; reload the page and try again",
        ))
    }
}

/// A refusal of an operator's form before anything was done, shown as a console page that
/// keeps what they typed.
pub(super) fn forbidden(message: &str) -> Response {
    refused_form(StatusCode::FORBIDDEN, message)
}

/// Marks a refusal of an operator's form as one to show as a console page (the console's
/// refusal pages render it).
#[derive(Clone, Copy)]
pub(super) struct RefusedForm;

fn refused_form(status: StatusCode, message: &str) -> Response {
    let mut response = refuse(status, message);
    response.extensions_mut().insert(RefusedForm);
    response
}

pub(super) fn plain(status: StatusCode, message: &str) -> Response {
    refuse(status, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_carries_the_settings_trusted_proxies() {
        let cli = crate::settings::Cli::parse_argv([
            "fenceline",
            "serve",
            "--trusted-proxy",
            "10.0.0.0/8",
        ])
        .unwrap();
        let settings = crate::settings::Settings::from_cli(&cli).unwrap();
        let access = Access::from_settings(&settings);
        assert_eq!(access.trusted_proxies, settings.http.trusted_proxies);
        assert_ne!(access.trusted_proxies, Default::default());
    }

    #[test]
    fn links_leave_the_console_from_its_public_url_else_from_the_address_used() {
        let mut headers = axum::http::HeaderMap::new();
        headers.insert(axum::http::header::HOST, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(Access::default().origin(&headers), "http://127.0.0.1:8080");
        let public = Access {
            public_host: Some("fl.example.com".into()),
            public_url: Some("https://fl.example.com".into()),
            https: true,
            ..Access::default()
        };
        assert_eq!(public.origin(&headers), "https://fl.example.com");
    }

    #[test]
    fn only_the_configured_host_reaches_the_console() {
        let public = Access {
            public_host: Some("fl.example.com".into()),
            ..Access::default()
        };
        assert!(public.host_allowed("fl.example.com"));
        assert!(public.host_allowed("FL.example.com:443"));
        assert!(!public.host_allowed("attacker.example"));
        assert!(!public.host_allowed("127.0.0.1:8080"));
        let local = Access {
            loopback: true,
            ..Access::default()
        };
        assert!(local.host_allowed("127.0.0.1:8080"));
        assert!(local.host_allowed("localhost:8080"));
        assert!(local.host_allowed("[::1]:8080"));
        assert!(!local.host_allowed("rebound.attacker.example:8080"));
        assert!(!local.host_allowed(""));
    }
}

/// The zone a page shows times in, and a `tz` parameter that names none: the address's
/// `?tz=` first (a shared link opens in the zone it was shared in), then the operator's
/// choice for the session, then UTC.
fn page_zone(query: Option<&str>, chosen: Option<String>) -> (String, Option<String>) {
    let fallback = chosen
        .and_then(|name| crate::time::zone(&name).ok())
        .map_or_else(|| "UTC".to_owned(), |tz| tz.name().to_owned());
    let asked = query
        .and_then(|q| serde_urlencoded::from_str::<Vec<(String, String)>>(q).ok())
        .and_then(|pairs| pairs.into_iter().find(|(k, _)| k == "tz").map(|(_, v)| v));
    match asked {
        None => (fallback, None),
        Some(name) => match crate::time::zone(&name) {
            Ok(tz) => (tz.name().to_owned(), None),
            Err(_) => (fallback, Some(name)),
        },
    }
}

#[cfg(test)]
mod zone_tests {
    use super::page_zone;

    #[test]
    fn the_address_zone_wins_then_the_sessions_then_utc() {
        assert_eq!(page_zone(None, None), ("UTC".into(), None));
        assert_eq!(
            page_zone(Some("window=day"), Some("Asia/Tokyo".into())),
            ("Asia/Tokyo".into(), None)
        );
        assert_eq!(
            page_zone(Some("tz=europe%2Fparis"), Some("Asia/Tokyo".into())),
            ("Europe/Paris".into(), None)
        );
        assert_eq!(
            page_zone(Some("tz=Mars%2FBase"), None),
            ("UTC".into(), Some("Mars/Base".into()))
        );
        assert_eq!(
            page_zone(None, Some("not a zone".into())),
            ("UTC".into(), None)
        );
    }
}
