//! The sign-in form's anti-forgery token, for visitors who have no session: the browser keeps
//! it in a cookie the server signed (`fenceline_form`, sent to `/login` only), so that showing
//! the form stores nothing. The form echoes the token; a post whose cookie is not signed by
//! this deployment's key, has expired or vouches for another token is refused. The key is the
//! ledger's, the same on every `serve` process. Signed-in forms carry the session's token
//! instead: this module must not stand in for it.

use axum::http::header::{COOKIE, SET_COOKIE};
use axum::http::{HeaderMap, HeaderValue};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use tower_sessions::cookie::{Cookie, SameSite};

use super::sessions::{new_token, token_matches};

const NAME: &str = "fenceline_form";
const PATH: &str = "/login";

/// The key that signs the form's cookie. `Debug` shows nothing of it.
#[derive(Clone)]
pub struct FormKey([u8; 32]);

impl std::fmt::Debug for FormKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FormKey(…)")
    }
}

impl Default for FormKey {
    /// A key of this process alone: for an application built without a ledger's key (tests).
    fn default() -> Self {
        let mut key = [0u8; 32];
        getrandom::fill(&mut key).expect("the operating system's random source");
        FormKey(key)
    }
}

impl FormKey {
    /// A fresh key, hex, for the ledger to keep if it has none yet.
    pub fn candidate() -> String {
        hex::encode(FormKey::default().0)
    }

    /// The key the ledger kept (hex, 32 bytes); `None` if it is not one.
    pub fn from_hex(kept: &str) -> Option<FormKey> {
        hex::decode(kept).ok()?.try_into().ok().map(FormKey)
    }

    fn signature(&self, token: &str, expires: i64) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(format!("{token}.{expires}").as_bytes());
        mac
    }

    /// A new token, good until `expires` (seconds since the epoch), and the cookie value
    /// that vouches for it.
    fn issue(&self, expires: i64) -> (String, String) {
        let token = new_token();
        let signature = hex::encode(self.signature(&token, expires).finalize().into_bytes());
        let value = format!("{token}.{expires}.{signature}");
        (token, value)
    }

    /// `payload` (without dots) signed by this key, good until `expires` (seconds since the
    /// epoch): a cookie value that [`FormKey::unseal`] reads back.
    pub(super) fn seal(&self, payload: &str, expires: i64) -> String {
        let signature = hex::encode(self.signature(payload, expires).finalize().into_bytes());
        format!("{payload}.{expires}.{signature}")
    }

    /// The payload a [`FormKey::seal`]ed value carries, if this key sealed it and it has not
    /// expired.
    pub(super) fn unseal(&self, value: &str) -> Option<String> {
        self.vouched(value, seconds_now())
    }

    /// The token a cookie value vouches for, if this key signed it and it has not expired.
    fn vouched(&self, value: &str, now: i64) -> Option<String> {
        self.vouched_until(value, now).map(|(token, _)| token)
    }

    /// [`FormKey::vouched`], with when the token expires.
    fn vouched_until(&self, value: &str, now: i64) -> Option<(String, i64)> {
        let mut parts = value.splitn(3, '.');
        let (token, expires, signature) = (parts.next()?, parts.next()?, parts.next()?);
        let expires: i64 = expires.parse().ok()?;
        let signature = hex::decode(signature).ok()?;
        self.signature(token, expires)
            .verify_slice(&signature)
            .ok()
            .filter(|_| now < expires)
            .map(|_| (token.to_owned(), expires))
    }
}

pub(super) fn seconds_now() -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(now.as_secs()).unwrap_or(i64::MAX)
}

/// The form's cookie in a request, if any.
fn cookie_value(headers: &HeaderMap) -> Option<String> {
    cookie_named(headers, NAME)
}

/// The value of the cookie `name` in a request, if any.
pub(super) fn cookie_named(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|h| h.to_str().ok())
        .flat_map(Cookie::split_parse)
        .filter_map(Result::ok)
        .find(|c| c.name() == name)
        .map(|c| c.value().to_owned())
}

/// The token of the form shown to a signed-out visitor: the one their cookie vouches for,
/// else a new one and the `Set-Cookie` value that hands it over, good for `lifetime`.
pub(super) fn token_for(
    key: &FormKey,
    headers: &HeaderMap,
    secure: bool,
    lifetime: std::time::Duration,
) -> (String, Option<HeaderValue>) {
    let now = seconds_now();
    let lifetime = i64::try_from(lifetime.as_secs()).unwrap_or(i64::MAX);
    // A token past half its life is replaced: a form shown just before it expired would be
    // refused when posted.
    let fresh = cookie_value(headers)
        .and_then(|v| key.vouched_until(&v, now))
        .filter(|(_, expires)| expires - now > lifetime / 2);
    if let Some((token, _)) = fresh {
        return (token, None);
    }
    let (token, value) = key.issue(now.saturating_add(lifetime));
    let cookie = Cookie::build((NAME, value))
        .http_only(true)
        .same_site(SameSite::Strict)
        .secure(secure)
        .path(PATH)
        .max_age(time::Duration::seconds(lifetime))
        .build();
    (token, HeaderValue::from_str(&cookie.to_string()).ok())
}

/// Whether a posted sign-in form's token is the one its cookie vouches for.
pub(super) fn accepts(key: &FormKey, headers: &HeaderMap, given: &str) -> bool {
    let vouched = cookie_value(headers).and_then(|v| key.vouched(&v, seconds_now()));
    token_matches(vouched.as_deref(), given)
}

/// Adds to `response` the header that ends the form's cookie: signed in, it has served.
pub(super) fn forget(response: &mut axum::response::Response, secure: bool) {
    let cookie = Cookie::build((NAME, ""))
        .http_only(true)
        .same_site(SameSite::Strict)
        .secure(secure)
        .path(PATH)
        .max_age(time::Duration::ZERO)
        .build();
    if let Ok(value) = HeaderValue::from_str(&cookie.to_string()) {
        response.headers_mut().append(SET_COOKIE, value);
    }
}

/// What the sign-in page says after a sign-in that did not go through, or a sign-out: named
/// in its address (`said=`) rather than kept in a session, so that a visitor who has none is
/// given none, however many sign-ins they post.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Said {
    Wrong,
    Throttled,
    SignedOut,
    SsoUnavailable,
    SsoFailed,
    SsoDeclined,
    SsoNoRole,
    SsoNameTaken,
    SsoDisabled,
}

impl Said {
    pub(super) fn code(self) -> &'static str {
        match self {
            Said::Wrong => "wrong",
            Said::Throttled => "throttled",
            Said::SignedOut => "signed-out",
            Said::SsoUnavailable => "sso-unavailable",
            Said::SsoFailed => "sso-failed",
            Said::SsoDeclined => "sso-declined",
            Said::SsoNoRole => "sso-no-role",
            Said::SsoNameTaken => "sso-name-taken",
            Said::SsoDisabled => "sso-disabled",
        }
    }

    /// The message of a `said=` value; anything else says nothing.
    pub(super) fn parse(code: &str) -> Option<Said> {
        [
            Said::Wrong,
            Said::Throttled,
            Said::SignedOut,
            Said::SsoUnavailable,
            Said::SsoFailed,
            Said::SsoDeclined,
            Said::SsoNoRole,
            Said::SsoNameTaken,
            Said::SsoDisabled,
        ]
        .into_iter()
        .find(|said| said.code() == code)
    }

    pub(super) fn text(self) -> &'static str {
        match self {
            Said::Wrong => "Wrong name or password.",
            Said::Throttled => {
                "Too many failed sign-ins in the last minute. Wait a minute, then try again."
            }
            Said::SignedOut => "Signed out.",
            Said::SsoUnavailable => {
                "The identity provider could not be reached. Try again in a moment."
            }
            Said::SsoFailed => {
                "The identity provider's answer could not be verified, or belonged to another \
                 sign-in; nobody was signed in. Start again."
            }
            Said::SsoDeclined => "The identity provider did not sign you in.",
            Said::SsoNoRole => {
                "None of your groups at the identity provider gives a role in this console. \
                 Ask an admin."
            }
            Said::SsoNameTaken => {
                "Your name at the identity provider is a local operator's here. Ask an admin."
            }
            Said::SsoDisabled => "Your account was disabled. Ask an admin.",
        }
    }

    pub(super) fn ok(self) -> bool {
        self == Said::SignedOut
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cookie_vouches_for_its_own_token_under_its_key_until_it_expires() {
        let key = FormKey::default();
        let (token, value) = key.issue(1_000);
        assert_eq!(key.vouched(&value, 999).as_deref(), Some(token.as_str()));
        assert_eq!(key.vouched(&value, 1_000), None, "expired");
        assert_eq!(FormKey::default().vouched(&value, 999), None, "another key");
        let later = value.replacen(".1000.", ".2000.", 1);
        assert_eq!(key.vouched(&later, 999), None, "its expiry moved");
        let (other, _) = key.issue(1_000);
        let swapped = value.replacen(&token, &other, 1);
        assert_eq!(key.vouched(&swapped, 999), None, "another token");
        for junk in ["", ".", "a.b.c", "x.1000.zz"] {
            assert_eq!(key.vouched(junk, 0), None, "{junk:?}");
        }
    }

    #[test]
    fn a_form_shown_again_keeps_its_token_until_half_its_life_is_gone() {
        let key = FormKey::default();
        let lifetime = std::time::Duration::from_secs(8 * 3600);
        let with_cookie = |value: &str| {
            let mut headers = HeaderMap::new();
            let cookie = format!("{NAME}={value}");
            headers.insert(COOKIE, HeaderValue::from_str(&cookie).unwrap());
            headers
        };
        let (token, header) = token_for(&key, &HeaderMap::new(), false, lifetime);
        let header = header.expect("a new cookie").to_str().unwrap().to_owned();
        let value = header
            .strip_prefix(&format!("{NAME}="))
            .and_then(|rest| rest.split(';').next())
            .unwrap();
        let (again, none) = token_for(&key, &with_cookie(value), false, lifetime);
        assert_eq!((again.as_str(), none), (token.as_str(), None), "kept");
        // One with an hour left (of eight) is replaced by a fresh one.
        let (old, ending) = key.issue(seconds_now() + 3600);
        let (renewed, header) = token_for(&key, &with_cookie(&ending), false, lifetime);
        assert_ne!(renewed, old);
        assert!(header.is_some(), "a fresh cookie");
    }

    #[test]
    fn a_kept_key_reads_back_and_anything_else_is_no_key() {
        let hex = FormKey::candidate();
        assert!(FormKey::from_hex(&hex).is_some());
        assert!(FormKey::from_hex("abcd").is_none());
        assert!(FormKey::from_hex("not hex").is_none());
        assert_eq!(format!("{:?}", FormKey::default()), "FormKey(…)");
    }
}
