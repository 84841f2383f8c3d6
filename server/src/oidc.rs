//! Sign-in through an OpenID Connect provider: the authorization code flow with PKCE, its
//! `state` and `nonce` checked, and the ID token's signature verified against the provider's
//! published keys (JWKS) before its issuer, audience, expiry and nonce are. The provider's
//! metadata and keys are read when first needed and kept; keys are read again when a token
//! names one not seen yet. The groups claim maps to a Fenceline role and tenants.

use std::time::{Duration, Instant};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use tokio::sync::RwLock;

use crate::operators::Role;
use crate::settings::{GroupRule, OidcSettings};

/// How long the provider's metadata and keys are kept before they are read again.
const KEPT: Duration = Duration::from_secs(3600);
/// Clock skew allowed between the provider and this process.
const LEEWAY_SECS: u64 = 60;
/// Signature algorithms accepted: asymmetric only, never `none` or a shared secret.
const ALGORITHMS: [Algorithm; 8] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
];

/// Why a sign-in through the provider did not happen. Its text names no token or code.
#[derive(Debug, thiserror::Error)]
pub enum OidcError {
    #[error("the identity provider could not be reached or answered badly: {0}")]
    Unavailable(String),
    #[error("the identity provider refused: {0}")]
    Refused(String),
    #[error("the ID token was refused: {0}")]
    BadToken(String),
    #[error("no group of this identity maps to a role")]
    NoRole,
}

/// What the provider says where to go, from its discovery document.
#[derive(Debug, Clone, Deserialize)]
struct Metadata {
    issuer: String,
    authorization_endpoint: String,
    token_endpoint: String,
    jwks_uri: String,
    #[serde(default)]
    token_endpoint_auth_methods_supported: Vec<String>,
}

struct Known {
    metadata: Metadata,
    keys: JwkSet,
    read_at: Instant,
}

/// A sign-in begun: where to send the browser, and what its callback must match.
#[derive(Debug, Clone)]
pub struct Started {
    pub url: String,
    pub state: String,
    pub nonce: String,
    pub verifier: String,
}

/// Who the provider says signed in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// `issuer|sub`: stable across renames at the provider.
    pub subject: String,
    /// The name shown in the console: `preferred_username`, else `email`, else `sub`.
    pub name: String,
    pub groups: Vec<String>,
}

/// The claims of an ID token this client reads.
#[derive(Debug, Deserialize)]
struct Claims {
    sub: String,
    #[serde(default)]
    nonce: Option<String>,
    #[serde(default)]
    aud: Audience,
    #[serde(default)]
    azp: Option<String>,
    #[serde(default)]
    preferred_username: Option<String>,
    #[serde(default)]
    email: Option<String>,
    #[serde(flatten)]
    rest: serde_json::Map<String, serde_json::Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(untagged)]
enum Audience {
    Many(Vec<String>),
    One(serde::de::IgnoredAny),
    #[default]
    None,
}

impl Audience {
    fn len(&self) -> usize {
        match self {
            Audience::One(_) => 1,
            Audience::Many(v) => v.len(),
            Audience::None => 0,
        }
    }
}

#[derive(Deserialize)]
struct TokenAnswer {
    id_token: Option<String>,
}

#[derive(Deserialize)]
struct ErrorAnswer {
    error: String,
    #[serde(default)]
    error_description: Option<String>,
}

/// The relying party: this console at one provider.
pub struct OidcClient {
    settings: OidcSettings,
    redirect_uri: String,
    http: reqwest::Client,
    known: RwLock<Option<Known>>,
}

impl std::fmt::Debug for OidcClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OidcClient")
            .field("issuer", &self.settings.issuer)
            .finish_non_exhaustive()
    }
}

fn random_text() -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the operating system's random source");
    URL_SAFE_NO_PAD.encode(bytes)
}

impl OidcClient {
    /// A client for `settings`, called back at `public_url` + `/login/oidc/callback`.
    pub fn new(settings: OidcSettings, public_url: &str) -> Result<OidcClient, OidcError> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| OidcError::Unavailable(e.to_string()))?;
        Ok(OidcClient {
            redirect_uri: format!("{}/login/oidc/callback", public_url.trim_end_matches('/')),
            settings,
            http,
            known: RwLock::new(None),
        })
    }

    pub fn redirect_uri(&self) -> &str {
        &self.redirect_uri
    }

    pub fn issuer(&self) -> &str {
        &self.settings.issuer
    }

    async fn get_json<T: for<'de> Deserialize<'de>>(&self, url: &str) -> Result<T, OidcError> {
        let response = self
            .http
            .get(url)
            .send()
            .await
            .map_err(|e| OidcError::Unavailable(e.without_url().to_string()))?;
        if !response.status().is_success() {
            return Err(OidcError::Unavailable(format!(
                "{url} answered {}",
                response.status()
            )));
        }
        response
            .json()
            .await
            .map_err(|e| OidcError::Unavailable(format!("{url}: {}", e.without_url())))
    }

    /// The provider's metadata and keys, read again when older than [`KEPT`] or `stale`.
    async fn known(&self, stale: bool) -> Result<(Metadata, JwkSet), OidcError> {
        if !stale {
            if let Some(k) = self.known.read().await.as_ref() {
                if k.read_at.elapsed() < KEPT {
                    return Ok((k.metadata.clone(), k.keys.clone()));
                }
            }
        }
        let issuer = self.settings.issuer.trim_end_matches('/');
        let metadata: Metadata = self
            .get_json(&format!("{issuer}/.well-known/openid-configuration"))
            .await?;
        if metadata.issuer.trim_end_matches('/') != issuer {
            return Err(OidcError::Unavailable(format!(
                "the discovery document names issuer {} rather than {issuer}",
                metadata.issuer
            )));
        }
        let keys: JwkSet = self.get_json(&metadata.jwks_uri).await?;
        *self.known.write().await = Some(Known {
            metadata: metadata.clone(),
            keys: keys.clone(),
            read_at: Instant::now(),
        });
        Ok((metadata, keys))
    }

    /// Reads the provider's discovery document and keys now: how many signing keys it
    /// publishes.
    pub async fn check(&self) -> Result<usize, OidcError> {
        let (_, keys) = self.known(true).await?;
        Ok(keys.keys.len())
    }

    /// Begins a sign-in: fresh `state`, `nonce` and PKCE verifier, and the provider's
    /// authorization address asking for a code with the verifier's S256 challenge.
    pub async fn start(&self) -> Result<Started, OidcError> {
        let (metadata, _) = self.known(false).await?;
        let (state, nonce, verifier) = (random_text(), random_text(), random_text());
        let challenge = URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
        let mut url = reqwest::Url::parse(&metadata.authorization_endpoint)
            .map_err(|e| OidcError::Unavailable(format!("authorization_endpoint: {e}")))?;
        url.query_pairs_mut()
            .append_pair("response_type", "code")
            .append_pair("client_id", &self.settings.client_id)
            .append_pair("redirect_uri", &self.redirect_uri)
            .append_pair("scope", &self.settings.scopes)
            .append_pair("state", &state)
            .append_pair("nonce", &nonce)
            .append_pair("code_challenge", &challenge)
            .append_pair("code_challenge_method", "S256");
        Ok(Started {
            url: url.into(),
            state,
            nonce,
            verifier,
        })
    }

    /// Trades the callback's `code` for an ID token (with the PKCE `verifier`) and verifies
    /// it: signature, issuer, audience (and `azp` when there are several), expiry and `nonce`.
    pub async fn finish(
        &self,
        code: &str,
        verifier: &str,
        nonce: &str,
    ) -> Result<Identity, OidcError> {
        let (metadata, _) = self.known(false).await?;
        let form = [
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", self.redirect_uri.as_str()),
            ("code_verifier", verifier),
        ];
        let basic = metadata.token_endpoint_auth_methods_supported.is_empty()
            || metadata
                .token_endpoint_auth_methods_supported
                .iter()
                .any(|m| m == "client_secret_basic");
        let request = self.http.post(&metadata.token_endpoint);
        let request = if basic {
            // RFC 6749 §2.3.1: each part form-encoded before the Basic encoding.
            let encode = |s: &str| {
                serde_urlencoded::to_string([("", s)])
                    .map(|e| e[1..].to_owned())
                    .unwrap_or_default()
            };
            request
                .basic_auth(
                    encode(&self.settings.client_id),
                    Some(encode(self.settings.client_secret.expose())),
                )
                .form(&form)
        } else {
            let mut with_secret: Vec<(&str, &str)> = form.to_vec();
            with_secret.push(("client_id", &self.settings.client_id));
            with_secret.push(("client_secret", self.settings.client_secret.expose()));
            request.form(&with_secret)
        };
        let response = request
            .send()
            .await
            .map_err(|e| OidcError::Unavailable(e.without_url().to_string()))?;
        let status = response.status();
        let body = response
            .bytes()
            .await
            .map_err(|e| OidcError::Unavailable(e.without_url().to_string()))?;
        if !status.is_success() {
            let said = serde_json::from_slice::<ErrorAnswer>(&body)
                .map(|e| match e.error_description {
                    Some(d) => format!("{}: {d}", e.error),
                    None => e.error,
                })
                .unwrap_or_else(|_| format!("the token endpoint answered {status}"));
            return Err(OidcError::Refused(said));
        }
        let token = serde_json::from_slice::<TokenAnswer>(&body)
            .ok()
            .and_then(|t| t.id_token)
            .ok_or_else(|| OidcError::Refused("the token answer holds no id_token".into()))?;
        self.verify(&token, nonce).await
    }

    /// Verifies an ID token against the provider's keys and this client.
    pub async fn verify(&self, token: &str, nonce: &str) -> Result<Identity, OidcError> {
        let header = jsonwebtoken::decode_header(token)
            .map_err(|e| OidcError::BadToken(format!("unreadable header: {e}")))?;
        if !ALGORITHMS.contains(&header.alg) {
            return Err(OidcError::BadToken(format!(
                "signed with {:?}, which is not accepted",
                header.alg
            )));
        }
        let (metadata, mut keys) = self.known(false).await?;
        let find = |keys: &JwkSet| match &header.kid {
            Some(kid) => keys.find(kid).cloned(),
            None if keys.keys.len() == 1 => keys.keys.first().cloned(),
            None => None,
        };
        let jwk = match find(&keys) {
            Some(jwk) => jwk,
            None => {
                // The provider may have rotated its keys since they were read.
                keys = self.known(true).await?.1;
                find(&keys).ok_or_else(|| {
                    OidcError::BadToken("signed with a key the provider does not publish".into())
                })?
            }
        };
        let key = DecodingKey::from_jwk(&jwk)
            .map_err(|e| OidcError::BadToken(format!("the provider's key: {e}")))?;
        let mut validation = Validation::new(header.alg);
        validation.leeway = LEEWAY_SECS;
        // As the provider writes it (some end it with `/`), once discovery matched it.
        validation.set_issuer(&[metadata.issuer.as_str()]);
        validation.set_audience(&[&self.settings.client_id]);
        validation.set_required_spec_claims(&["exp", "iat", "iss", "aud", "sub"]);
        let claims = jsonwebtoken::decode::<Claims>(token, &key, &validation)
            .map_err(|e| OidcError::BadToken(e.to_string()))?
            .claims;
        if claims.aud.len() > 1 && claims.azp.as_deref() != Some(&self.settings.client_id) {
            return Err(OidcError::BadToken(
                "several audiences, and this client is not the authorized party".into(),
            ));
        }
        let Some(said) = claims.nonce.as_deref() else {
            return Err(OidcError::BadToken("no nonce".into()));
        };
        if !bool::from(subtle::ConstantTimeEq::ct_eq(
            said.as_bytes(),
            nonce.as_bytes(),
        )) {
            return Err(OidcError::BadToken(
                "its nonce is not this sign-in's (stale or replayed)".into(),
            ));
        }
        let groups = match claims.rest.get(&self.settings.groups_claim) {
            Some(serde_json::Value::Array(items)) => items
                .iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect(),
            Some(serde_json::Value::String(one)) => vec![one.clone()],
            _ => Vec::new(),
        };
        // An address counts only once the provider has verified it.
        let verified = matches!(
            claims.rest.get("email_verified"),
            Some(serde_json::Value::Bool(true))
        ) || matches!(claims.rest.get("email_verified"), Some(serde_json::Value::String(s)) if s == "true");
        let name = operator_name(
            &claims
                .preferred_username
                .or(claims.email.filter(|_| verified))
                .unwrap_or_else(|| claims.sub.clone()),
        );
        Ok(Identity {
            subject: format!(
                "{}|{}",
                self.settings.issuer.trim_end_matches('/'),
                claims.sub
            ),
            name,
            groups,
        })
    }

    /// The role and tenants `groups` give: the highest role any rule grants, with the
    /// tenants of the rules granting it (every tenant if one of them names none).
    pub fn access(&self, groups: &[String]) -> Result<(Role, Option<Vec<String>>), OidcError> {
        access(&self.settings.groups, groups)
    }
}

/// A name the console can show and address for `raw` (a provider's user name): the characters
/// an operator name allows, others as `-`, at most 56 of them (room for a suffix that tells two
/// apart).
pub fn operator_name(raw: &str) -> String {
    let name: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@') {
                c
            } else {
                '-'
            }
        })
        .take(56)
        .collect();
    if name.chars().all(|c| c == '.' || c == '-') {
        "sso".to_owned()
    } else {
        name
    }
}

/// [`OidcClient::access`] over `rules`.
pub fn access(
    rules: &[GroupRule],
    groups: &[String],
) -> Result<(Role, Option<Vec<String>>), OidcError> {
    let matching: Vec<&GroupRule> = rules.iter().filter(|r| groups.contains(&r.group)).collect();
    let role = matching
        .iter()
        .map(|r| r.role)
        .max_by_key(|r| Role::ALL.iter().position(|x| x == r))
        .ok_or(OidcError::NoRole)?;
    let granting: Vec<&&GroupRule> = matching.iter().filter(|r| r.role == role).collect();
    let tenants = if granting.iter().any(|r| r.tenants.is_none()) {
        None
    } else {
        let mut all: Vec<String> = granting
            .iter()
            .flat_map(|r| r.tenants.clone().unwrap_or_default())
            .collect();
        all.sort();
        all.dedup();
        Some(all)
    };
    Ok((role, tenants))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(group: &str, role: Role, tenants: Option<&[&str]>) -> GroupRule {
        GroupRule {
            group: group.into(),
            role,
            tenants: tenants.map(|t| t.iter().map(|s| (*s).to_owned()).collect()),
        }
    }

    #[test]
    fn a_providers_user_name_becomes_a_valid_operator_name() {
        for (raw, name) in [
            ("ada", "ada"),
            (
                "ada.lovelace+ops@example.com",
                "ada.lovelace-ops@example.com",
            ),
            ("Ada Lovelace", "Ada-Lovelace"),
            ("..", "sso"),
            ("Ærøskøbing", "-r-sk-bing"),
        ] {
            assert_eq!(operator_name(raw), name);
            assert!(crate::operators::valid_name(&operator_name(raw)), "{raw}");
        }
        assert_eq!(operator_name(&"x".repeat(100)).len(), 56);
    }

    #[test]
    fn the_highest_role_wins_with_the_tenants_of_the_rules_that_grant_it() {
        let rules = [
            rule("ops", Role::Operator, Some(&["acme"])),
            rule("ops-globex", Role::Operator, Some(&["globex"])),
            rule("readers", Role::Viewer, None),
            rule("admins", Role::Admin, None),
        ];
        let groups = |g: &[&str]| g.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            access(&rules, &groups(&["ops", "ops-globex", "readers"])).unwrap(),
            (
                Role::Operator,
                Some(vec!["acme".to_owned(), "globex".to_owned()])
            )
        );
        assert_eq!(
            access(&rules, &groups(&["readers", "admins"])).unwrap(),
            (Role::Admin, None)
        );
        assert!(matches!(
            access(&rules, &groups(&["strangers"])),
            Err(OidcError::NoRole)
        ));
    }
}
