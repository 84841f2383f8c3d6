//! Sign-in through an OpenID Connect provider, against a provider written here whose ID tokens
//! the test shapes: a good one signs the operator in with the role their group maps to, and a
//! token with the wrong audience, another sign-in's nonce, another issuer, an expired one, one
//! signed by a key the provider does not publish or with a shared secret is refused, as is an
//! answer for a sign-in this browser did not begin, or one replayed. The browser tests sign in
//! through npm's oidc-provider, a certified implementation.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Redirect};
use axum::routing::{get, post};
use axum::{Form, Json, Router};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use fenceline::settings::{GroupRule, OidcSettings, Secret};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
use sha2::{Digest, Sha256};

use super::*;

const CLIENT_ID: &str = "fenceline-console";
const CLIENT_SECRET: &str = "a secret the provider and the console share";

/// How the provider shapes the next ID token.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Shape {
    Good,
    WrongAudience,
    OtherNonce,
    OtherIssuer,
    Expired,
    UnpublishedKey,
    SharedSecret,
}

#[derive(Default)]
struct Provider {
    base: String,
    /// code → (nonce, S256 challenge, redirect URI)
    codes: HashMap<String, (String, String, String)>,
    shape: Option<Shape>,
    groups: Vec<String>,
    user: String,
    /// Writes its issuer with a trailing `/`, as some providers do.
    slash: bool,
}

impl Provider {
    fn issuer(&self) -> String {
        if self.slash {
            format!("{}/", self.base)
        } else {
            self.base.clone()
        }
    }
}

struct Keys {
    published: EcdsaKeyPair,
    published_der: Vec<u8>,
    other_der: Vec<u8>,
}

type Shared = Arc<(Mutex<Provider>, Keys)>;

fn key_pair() -> (EcdsaKeyPair, Vec<u8>) {
    let rng = ring::rand::SystemRandom::new();
    let der = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
        .unwrap()
        .as_ref()
        .to_vec();
    let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &der, &rng).unwrap();
    (pair, der)
}

async fn discovery(State(p): State<Shared>) -> Json<serde_json::Value> {
    let (base, issuer) = {
        let p = p.0.lock().unwrap();
        (p.base.clone(), p.issuer())
    };
    Json(json!({
        "issuer": issuer,
        "authorization_endpoint": format!("{base}/authorize"),
        "token_endpoint": format!("{base}/token"),
        "jwks_uri": format!("{base}/jwks"),
        "token_endpoint_auth_methods_supported": ["client_secret_basic"],
    }))
}

async fn jwks(State(p): State<Shared>) -> Json<serde_json::Value> {
    let point = p.1.published.public_key().as_ref();
    Json(json!({"keys": [{
        "kty": "EC", "crv": "P-256", "kid": "k1", "alg": "ES256", "use": "sig",
        "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
        "y": URL_SAFE_NO_PAD.encode(&point[33..65]),
    }]}))
}

/// Signs the user in at once and sends the browser back with a code.
async fn authorize(
    State(p): State<Shared>,
    Query(q): Query<HashMap<String, String>>,
) -> impl IntoResponse {
    assert_eq!(q["response_type"], "code");
    assert_eq!(q["client_id"], CLIENT_ID);
    assert_eq!(q["code_challenge_method"], "S256");
    let code = format!(
        "code-{}",
        q["state"].len() + p.0.lock().unwrap().codes.len()
    );
    p.0.lock().unwrap().codes.insert(
        code.clone(),
        (
            q["nonce"].clone(),
            q["code_challenge"].clone(),
            q["redirect_uri"].clone(),
        ),
    );
    Redirect::to(&format!(
        "{}?code={code}&state={}",
        q["redirect_uri"], q["state"]
    ))
}

async fn token(
    State(p): State<Shared>,
    headers: axum::http::HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> axum::response::Response {
    let basic = base64::engine::general_purpose::STANDARD
        .encode(format!("{CLIENT_ID}:{}", CLIENT_SECRET.replace(' ', "+")));
    let authorized = headers
        .get("authorization")
        .and_then(|h| h.to_str().ok())
        .is_some_and(|h| h == format!("Basic {basic}"));
    let bad = |why: &str| {
        (
            axum::http::StatusCode::BAD_REQUEST,
            Json(json!({"error": "invalid_grant", "error_description": why})),
        )
            .into_response()
    };
    if !authorized {
        return bad("client authentication failed");
    }
    let mut provider = p.0.lock().unwrap();
    let Some((nonce, challenge, redirect)) = provider.codes.remove(&form["code"]) else {
        return bad("unknown or used code");
    };
    if URL_SAFE_NO_PAD.encode(Sha256::digest(form["code_verifier"].as_bytes())) != challenge {
        return bad("PKCE verification failed");
    }
    if form["redirect_uri"] != redirect {
        return bad("redirect_uri differs");
    }
    let shape = provider.shape.unwrap_or(Shape::Good);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let claims = json!({
        "iss": if shape == Shape::OtherIssuer { "https://elsewhere.example".to_owned() } else { provider.issuer() },
        "sub": format!("sub-{}", provider.user),
        "aud": if shape == Shape::WrongAudience { "another-app" } else { CLIENT_ID },
        "exp": if shape == Shape::Expired { now - 600 } else { now + 300 },
        "iat": now,
        "nonce": if shape == Shape::OtherNonce { "a nonce of another sign-in".to_owned() } else { nonce },
        "preferred_username": provider.user,
        "groups": provider.groups,
    });
    let mut header = Header::new(Algorithm::ES256);
    header.kid = Some("k1".into());
    let id_token = match shape {
        Shape::SharedSecret => {
            let mut header = Header::new(Algorithm::HS256);
            header.kid = Some("k1".into());
            jsonwebtoken::encode(
                &header,
                &claims,
                &EncodingKey::from_secret(CLIENT_SECRET.as_bytes()),
            )
        }
        Shape::UnpublishedKey => {
            jsonwebtoken::encode(&header, &claims, &EncodingKey::from_ec_der(&p.1.other_der))
        }
        _ => jsonwebtoken::encode(
            &header,
            &claims,
            &EncodingKey::from_ec_der(&p.1.published_der),
        ),
    }
    .unwrap();
    Json(json!({"access_token": "opaque", "token_type": "Bearer", "id_token": id_token}))
        .into_response()
}

async fn provider() -> Shared {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (published, published_der) = key_pair();
    let (_, other_der) = key_pair();
    let shared: Shared = Arc::new((
        Mutex::new(Provider {
            base,
            ..Provider::default()
        }),
        Keys {
            published,
            published_der,
            other_der,
        },
    ));
    let app = Router::new()
        .route("/.well-known/openid-configuration", get(discovery))
        .route("/jwks", get(jwks))
        .route("/authorize", get(authorize))
        .route("/token", post(token))
        .with_state(shared.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    shared
}

async fn console_with(idp: &Shared, password_sign_in: bool) -> TestApp {
    let issuer = idp.0.lock().unwrap().base.clone();
    spawn_app_configured(Db::Sqlite, move |s| {
        s.http.public_url = Some("http://127.0.0.1".into());
        s.http.password_sign_in = password_sign_in;
        s.http.oidc = Some(OidcSettings {
            issuer,
            client_id: CLIENT_ID.into(),
            client_secret: Secret::new(CLIENT_SECRET),
            groups_claim: "groups".into(),
            scopes: "openid profile groups".into(),
            groups: vec![
                "fenceline-admins=admin".parse::<GroupRule>().unwrap(),
                "acme-ops=operator:acme".parse::<GroupRule>().unwrap(),
            ],
        });
    })
    .await
}

/// Goes through the provider as a browser does: the console's address for the callback.
async fn through_provider(browser: &mut Browser, next: &str) -> String {
    let start = browser.get(&format!("/login/oidc?next={next}")).await;
    assert_eq!(start.status(), 303);
    let at_provider = location(&start);
    let back = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .get(&at_provider)
        .send()
        .await
        .unwrap();
    let callback = location(&back);
    callback
        .strip_prefix("http://127.0.0.1")
        .expect("the callback is the console's")
        .to_owned()
}

fn said(response: &reqwest::Response) -> String {
    location(response)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_signs_in_through_the_provider_with_the_role_their_group_maps_to() {
    let idp = provider().await;
    let app = console_with(&idp, true).await;
    {
        let mut p = idp.0.lock().unwrap();
        p.user = "olga".into();
        p.groups = vec!["acme-ops".into(), "unrelated".into()];
    }
    let mut browser = Browser::new(&app.base);
    let page = browser.page("/login").await;
    assert!(page.contains("Sign in with your company account"), "{page}");
    let callback = through_provider(&mut browser, "/jobs").await;
    let landed = browser.get(&callback).await;
    assert_eq!(landed.status(), 200);
    let text = landed.text().await.unwrap();
    assert!(
        text.contains("url=/jobs"),
        "moves on to where she was going: {text}"
    );
    let jobs = browser.page("/jobs").await;
    assert!(jobs.contains("olga"), "signed in");
    let olga = app.ledger.operator("olga").await.unwrap().unwrap();
    assert_eq!(olga.role, Role::Operator);
    assert_eq!(olga.tenants, Some(vec!["acme".to_owned()]));
    // The audit names the provider's subject.
    let audit = app
        .ledger
        .audit_entries(&fenceline::ledger::AuditFilter {
            action: Some("signed_in_oidc".into()),
            limit: 5,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(audit.len(), 1);
    let issuer = idp.0.lock().unwrap().base.clone();
    assert_eq!(
        audit[0].subject.as_deref(),
        Some(format!("oidc:{issuer}|sub-olga").as_str())
    );
    assert_eq!(audit[0].actor, "operator:olga");
    // The same answer again is refused: the sign-in it belonged to is over.
    let mut again = Browser::new(&app.base);
    let replayed = again.get(&callback).await;
    assert_eq!(said(&replayed), "/login?next=%2F&said=sso-failed");

    // Her group moves her up at the next sign-in; the same operator, not a new one.
    idp.0.lock().unwrap().groups = vec!["fenceline-admins".into()];
    let mut browser = Browser::new(&app.base);
    let callback = through_provider(&mut browser, "/").await;
    assert_eq!(browser.get(&callback).await.status(), 200);
    let olga = app.ledger.operator("olga").await.unwrap().unwrap();
    assert_eq!((olga.role, olga.tenants), (Role::Admin, None));
    // A local password never signs her in.
    let mut browser = Browser::new(&app.base);
    let tried = browser.sign_in("olga", "!sso").await;
    assert!(
        location(&tried).contains("said=wrong"),
        "{}",
        location(&tried)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_that_writes_its_issuer_with_a_trailing_slash_signs_in() {
    let idp = provider().await;
    let app = console_with(&idp, true).await;
    {
        let mut p = idp.0.lock().unwrap();
        p.slash = true;
        p.user = "sam".into();
        p.groups = vec!["acme-ops".into()];
    }
    let mut browser = Browser::new(&app.base);
    let callback = through_provider(&mut browser, "/").await;
    assert_eq!(browser.get(&callback).await.status(), 200);
    assert!(app.ledger.operator("sam").await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_the_console_did_not_ask_for_are_refused() {
    let idp = provider().await;
    let app = console_with(&idp, true).await;
    {
        let mut p = idp.0.lock().unwrap();
        p.user = "mallory".into();
        p.groups = vec!["fenceline-admins".into()];
    }
    for shape in [
        Shape::WrongAudience,
        Shape::OtherNonce,
        Shape::OtherIssuer,
        Shape::Expired,
        Shape::UnpublishedKey,
        Shape::SharedSecret,
    ] {
        idp.0.lock().unwrap().shape = Some(shape);
        let mut browser = Browser::new(&app.base);
        let callback = through_provider(&mut browser, "/").await;
        let refused = browser.get(&callback).await;
        assert_eq!(
            said(&refused),
            "/login?next=%2F&said=sso-failed",
            "{shape:?} is refused"
        );
        assert!(
            !browser.page("/login").await.contains("You are signed in"),
            "{shape:?}"
        );
    }
    assert!(app.ledger.operator("mallory").await.unwrap().is_none());

    // An answer for a sign-in another browser began.
    idp.0.lock().unwrap().shape = Some(Shape::Good);
    let mut victim = Browser::new(&app.base);
    let mut attacker = Browser::new(&app.base);
    let attackers_callback = through_provider(&mut attacker, "/").await;
    victim.get("/login/oidc?next=/").await;
    let planted = victim.get(&attackers_callback).await;
    assert_eq!(said(&planted), "/login?next=%2F&said=sso-failed");

    // A group that maps to nothing gives no role.
    idp.0.lock().unwrap().groups = vec!["strangers".into()];
    let mut browser = Browser::new(&app.base);
    let callback = through_provider(&mut browser, "/").await;
    let no_role = browser.get(&callback).await;
    assert_eq!(said(&no_role), "/login?next=%2F&said=sso-no-role");
    assert!(app.ledger.operator("mallory").await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_taken_here_is_told_apart_and_a_lost_role_ends_the_sessions() {
    let idp = provider().await;
    let app = console_with(&idp, true).await;
    add_operator(&app.ledger, "olga", Role::Viewer, None).await;
    {
        let mut p = idp.0.lock().unwrap();
        p.user = "olga".into();
        p.groups = vec!["fenceline-admins".into()];
    }
    let mut browser = Browser::new(&app.base);
    let callback = through_provider(&mut browser, "/").await;
    assert_eq!(browser.get(&callback).await.status(), 200);
    let page = browser.page("/").await;
    let name = page
        .split("olga-")
        .nth(1)
        .map(|rest| format!("olga-{}", &rest[..6]))
        .expect("signed in under a name of her own");
    let her = app.ledger.operator(&name).await.unwrap().unwrap();
    assert_eq!(her.role, Role::Admin);
    let local = app.ledger.operator("olga").await.unwrap().unwrap();
    assert_eq!(local.role, Role::Viewer, "the local olga is untouched");
    // No local password for her, from the console or anywhere.
    let reset = app
        .ledger
        .change_operators(
            &fenceline::ledger::AdminChange::Password {
                name: &name,
                password_hash: &hash_password(PASSWORD).unwrap(),
            },
            None,
        )
        .await;
    assert!(reset.is_err(), "{reset:?}");

    // Out of every mapped group: refused, and her open session ends.
    idp.0.lock().unwrap().groups = vec!["strangers".into()];
    let mut again = Browser::new(&app.base);
    let callback = through_provider(&mut again, "/").await;
    assert!(location(&again.get(&callback).await).ends_with("said=sso-no-role"));
    let ended = browser.get("/jobs").await;
    assert_eq!(ended.status(), 303, "her earlier session is over");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_local_passwords_off_only_the_provider_signs_in() {
    let idp = provider().await;
    let app = console_with(&idp, false).await;
    add_operator(&app.ledger, "ana", Role::Admin, None).await;
    let mut browser = Browser::new(&app.base);
    let page = browser.page("/login").await;
    assert!(page.contains("Sign in with your company account"));
    assert!(!page.contains("type=\"password\""), "no password form");
    let refused = browser
        .post("/login", &[("name", "ana"), ("password", PASSWORD)])
        .await;
    assert_eq!(refused.status(), 403);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_reads_the_providers_keys_and_names_a_provider_that_does_not_answer() {
    let idp = provider().await;
    let issuer = idp.0.lock().unwrap().base.clone();
    let db = crate::helpers::fresh_db(Db::Sqlite).await;
    let mut settings = Settings::for_database(&db.url).unwrap();
    settings.http.public_url = Some("https://fenceline.example.com".into());
    let oidc = |issuer: String| OidcSettings {
        issuer,
        client_id: CLIENT_ID.into(),
        client_secret: Secret::new(CLIENT_SECRET),
        groups_claim: "groups".into(),
        scopes: "openid".into(),
        groups: vec!["g=viewer".parse().unwrap()],
    };
    settings.http.oidc = Some(oidc(issuer.clone()));
    let found = fenceline::doctor::examine(&settings).await;
    let sign_in = found.iter().find(|f| f.check == "sign-in").unwrap();
    assert_eq!(
        sign_in.verdict,
        fenceline::doctor::Verdict::Ok,
        "{sign_in:?}"
    );
    assert!(
        sign_in.detail.contains("1 signing key")
            && sign_in
                .detail
                .contains("https://fenceline.example.com/login/oidc/callback"),
        "{sign_in:?}"
    );
    assert!(!sign_in.detail.contains(CLIENT_SECRET));
    settings.http.oidc = Some(oidc(format!(
        "http://127.0.0.1:{}",
        crate::helpers::free_port()
    )));
    let found = fenceline::doctor::examine(&settings).await;
    let sign_in = found.iter().find(|f| f.check == "sign-in").unwrap();
    assert_eq!(
        sign_in.verdict,
        fenceline::doctor::Verdict::Fail,
        "{sign_in:?}"
    );
}
