//! The HTTP surface: REST API v1 (bearer tokens, tenant from the token), health and readiness,
//! the OpenAPI document, the stylesheet and the server-rendered console.
//!
//! Owns translating requests into ledger calls and ledger outcomes into status codes. Must not
//! put SQL here, must never answer bad input with a 5xx, and must never log request bodies,
//! tokens or answers.

mod actions;
mod api;
mod api_actions;
mod auth;
mod bulk_forms;
pub mod contract;
mod drills;
mod error;
mod export;
pub mod gate;
mod health;
mod incident_forms;
mod oidc;
pub use health::probes;
pub mod openapi;
mod operators_admin;
mod refusals;
pub mod sessions;
pub mod sign_in_form;
mod signin;

use axum::extract::DefaultBodyLimit;
use axum::http::header::Entry;
use axum::http::{header, HeaderValue, Request, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::Router;
use leptos::config::LeptosOptions;
use leptos_axum::LeptosRoutes;

pub use error::ApiError;

use crate::ledger::Ledger;

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    pub ledger: Ledger,
    /// Larger request bodies are refused with 413.
    pub max_body_bytes: usize,
    /// Where the console finds the queue's dead letters.
    pub queue: crate::console::QueueInfo,
    /// Which models and parameters a job may carry.
    pub model_policy: std::sync::Arc<crate::provider::policy::ModelPolicy>,
    /// This process's counters, shown at `/metrics`.
    pub metrics: crate::metrics::Metrics,
    /// Who may reach the console and `/metrics`, and how long sessions last.
    pub access: std::sync::Arc<gate::Access>,
    /// Tenants whose jobs pre-approve a replay of an uncertain attempt unless they say otherwise.
    pub tenant_replay:
        std::sync::Arc<std::collections::HashMap<String, crate::ledger::ReplayPolicy>>,
    /// Opens the queue, without fault injection, when an operator replays its dead letters.
    pub open_queue: QueueOpener,
    /// The deployment's own provider, built for a drill that calls it (`None`: the stub).
    pub drill_provider: Option<Result<crate::provider::AnyProvider, String>>,
}

/// Opens the configured queue (the process start-up provides it, so handlers need not know
/// how).
pub type QueueOpener = std::sync::Arc<
    dyn Fn() -> std::pin::Pin<
            Box<dyn std::future::Future<Output = Result<crate::queue::AnyQueue, String>> + Send>,
        > + Send
        + Sync,
>;

const STYLESHEET: &str = include_str!("../../../style/fenceline.css");
const CONSOLE_JS: &str = include_str!("../../../style/console.js");
const FAVICON: &str = include_str!("../../../style/favicon.svg");

/// The body of a job's accepted result; 404 while the job has none.
async fn accepted_result(state: &AppState, job: &crate::ledger::Job) -> Result<String, ApiError> {
    let Some(result_ref) = job
        .result_ref
        .as_deref()
        .filter(|_| job.state == crate::job::JobState::Succeeded)
    else {
        return Err(ApiError::NotFound(format!(
            "job {} has no accepted result; it is {}",
            job.job_id, job.state
        )));
    };
    state
        .ledger
        .result_body(result_ref)
        .await?
        .ok_or(ApiError::Internal)
}

/// Counts the queue send that a job's creation made in its own transaction, if it did.
fn count_send_at_creation(state: &AppState, created: &crate::ledger::Created) {
    if state.ledger.sent_at_creation(created) {
        state.metrics.dispatch(1, 0);
    }
}

/// The whole HTTP application.
pub fn router(state: AppState) -> Router {
    let max_body_bytes = state.max_body_bytes;
    let options = LeptosOptions::builder()
        .output_name("fenceline")
        // Nothing is served from disk: the stylesheet is compiled in. A dedicated, empty
        // folder keeps any future static handler away from the working directory.
        .site_root("target/site")
        .build();
    let routes = leptos_axum::generate_route_list(fenceline_app::App);
    let (ledger, queue) = (state.ledger.clone(), state.queue.clone());
    let context = move || page_context(&ledger, &queue);
    let shell = {
        let options = options.clone();
        move || fenceline_app::shell(options.clone())
    };
    // An address no page answers renders the app's own "not found" page, inside the console's
    // frame: a signed-in operator keeps the menu (a signed-out visitor signs in first, as for
    // any page).
    let unknown_address =
        leptos_axum::render_app_async_with_context(context.clone(), shell.clone());
    // A refused form's page, rendered the same way.
    let refusal_page = std::sync::Arc::new(std::sync::Mutex::new(
        leptos_axum::render_app_async_with_context(context.clone(), shell.clone()),
    ));
    let pages = Router::new()
        .leptos_routes_with_context(&options, routes, context, shell)
        .with_state(options);

    // Everything an operator's browser reaches with the session cookie.
    let console = Router::new()
        .route("/login", post(signin::login))
        .route("/logout", post(signin::logout))
        .route("/login/oidc", get(oidc::start))
        .route("/login/oidc/callback", get(oidc::callback))
        .route("/zone", post(signin::choose_zone))
        .route("/jobs/{job_id}/decisions", post(actions::decide))
        .route("/jobs/{job_id}/cancel", post(actions::cancel))
        .route("/jobs/cancel", post(actions::cancel_many))
        .route("/jobs/rerun", post(actions::rerun_many))
        .route("/dlq/replay", post(actions::replay_dead_letters))
        .route("/dlq/{message_id}/drop", post(actions::drop_dead_letter))
        .route(
            "/dlq/{message_id}/replay",
            post(actions::replay_dead_letter),
        )
        .route("/jobs/{job_id}/rerun", post(actions::rerun))
        .route("/unknown/decisions", post(actions::decide_many))
        .route("/bulk", post(bulk_forms::preview))
        .route("/bulk/{bulk_id}/confirm", post(bulk_forms::confirm))
        .route("/incidents", post(incident_forms::open))
        .route("/incidents/pin", post(incident_forms::pin))
        .route("/incidents/pin-filter", post(incident_forms::pin_filter))
        .route("/incidents/pin-picked", post(actions::pin_picked))
        .route(
            "/incidents/{incident_id}/close",
            post(incident_forms::close),
        )
        .route(
            "/incidents/{incident_id}/{file}",
            get(incident_forms::bundle),
        )
        .route("/operators", post(operators_admin::add))
        .route("/operators/{name}/role", post(operators_admin::set_role))
        .route(
            "/operators/{name}/password",
            post(operators_admin::reset_password),
        )
        .route("/operators/{name}/disable", post(operators_admin::disable))
        .route("/operators/{name}/enable", post(operators_admin::enable))
        .route("/tokens/{id}/revoke", post(operators_admin::revoke_token))
        .route("/drills", post(drills::start))
        .route("/drills/{run_id}/report.json", get(drills::report_json))
        .route("/drills/{run_id}/report.md", get(drills::report_markdown))
        .route("/jobs/{job_id}/export.json", get(export::json_export))
        .route("/jobs/{job_id}/export.md", get(export::markdown_export))
        .route("/jobs/{job_id}/result", get(export::result_view))
        .with_state(state.clone())
        .merge(pages)
        .fallback(unknown_address)
        .layer(middleware::from_fn(move |request, next| {
            let render = refusal_page
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone();
            refusals::as_pages(render, max_body_bytes, request, next)
        }))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            gate::console_gate,
        ))
        .layer(sessions::layer(
            state.ledger.clone(),
            state.access.https,
            state.access.sessions,
        ))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            gate::same_site,
        ))
        .layer(DefaultBodyLimit::max(max_body_bytes));

    let service = Router::new()
        .nest("/api/v1", api_routes())
        .route("/healthz", get(health::healthz))
        .route("/metrics", get(health::metrics))
        .route("/readyz", get(health::readyz))
        .route("/style/fenceline.css", get(stylesheet))
        .route("/static/console.js", get(console_js))
        .route("/favicon.svg", get(favicon))
        .route("/api/{*rest}", any(no_endpoint))
        .with_state(state)
        .layer(DefaultBodyLimit::max(max_body_bytes));

    service
        .merge(console)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn(security_headers))
}

/// API v1: jobs for services (a tenant's token), actions for automation (an operator's
/// token), and the OpenAPI document that describes both.
fn api_routes() -> Router<AppState> {
    Router::new()
        .route("/jobs", get(api::list_jobs).post(api::create_job))
        .route("/jobs/batch", post(api::create_jobs))
        .route("/jobs/{job_id}", get(api::read_job))
        .route("/jobs/{job_id}/events", get(api::read_events))
        .route("/jobs/{job_id}/result", get(api::read_result))
        .route("/jobs/{job_id}/decisions", post(api_actions::decide))
        .route("/jobs/{job_id}/cancel", post(api_actions::cancel))
        .route("/jobs/{job_id}/rerun", post(api_actions::rerun))
        .route("/bulk", post(api_actions::preview_bulk))
        .route("/bulk/{bulk_id}", get(api_actions::read_bulk))
        .route("/bulk/{bulk_id}/confirm", post(api_actions::confirm_bulk))
        .route("/openapi.json", get(openapi::document))
        .route_layer(middleware::from_fn(traced))
}

/// Each API request in a span of its own (when traces are on), continuing the caller's trace
/// when it sent a `traceparent`. Its attributes name the route and the answer, never a header's
/// value or the body.
async fn traced(request: Request<axum::body::Body>, next: Next) -> Response {
    use tracing::Instrument;
    let route = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or("", |p| p.as_str())
        .to_owned();
    let method = request.method().as_str().to_owned();
    let span = tracing::info_span!(
        target: crate::telemetry::TARGET,
        "api.request",
        otel.name = format!("{method} {route}"),
        otel.kind = "server",
        http.request.method = method,
        http.route = route,
        http.response.status_code = tracing::field::Empty,
        tenant = tracing::field::Empty,
        job_id = tracing::field::Empty,
        epoch = tracing::field::Empty,
    );
    let theirs = request
        .headers()
        .get("traceparent")
        .and_then(|v| v.to_str().ok());
    crate::telemetry::continue_from(&span, theirs);
    let response = next.run(request).instrument(span.clone()).await;
    span.record("http.response.status_code", response.status().as_u16());
    response
}

/// What a page renders with: the visitor the gate found, and the console port limited to the
/// signed-in operator's tenants.
fn page_context(ledger: &Ledger, queue: &crate::console::QueueInfo) {
    use leptos::prelude::{provide_context, use_context};
    let parts = use_context::<axum::http::request::Parts>();
    let extension = |parts: &axum::http::request::Parts| {
        (
            parts
                .extensions
                .get::<fenceline_app::console::Visitor>()
                .cloned(),
            parts
                .extensions
                .get::<gate::SignedIn>()
                .map(|s| s.0.tenants.clone()),
        )
    };
    let (visitor, tenants) = parts.as_ref().map(extension).unwrap_or_default();
    // The API page's reference, read once from the OpenAPI document and shared, not copied.
    static API_REFERENCE: std::sync::LazyLock<
        std::sync::Arc<fenceline_app::console::ApiReference>,
    > = std::sync::LazyLock::new(|| std::sync::Arc::new(openapi::reference()));
    provide_context(std::sync::Arc::clone(&API_REFERENCE));
    if let Some(refusal) = parts
        .as_ref()
        .and_then(|p| p.extensions.get::<fenceline_app::console::FormRefusal>())
    {
        provide_context(refusal.clone());
    }
    let visitor = visitor.unwrap_or_default();
    let zone = crate::time::zone(&visitor.zone).unwrap_or(chrono_tz::UTC);
    let name = visitor.operator.as_ref().map(|o| o.name.clone());
    provide_context(visitor);
    if let Some(response) = use_context::<leptos_axum::ResponseOptions>() {
        provide_context(fenceline_app::console::HttpStatus(std::sync::Arc::new(
            move |code| {
                if let Ok(status) = StatusCode::from_u16(code) {
                    response.set_status(status);
                }
            },
        )));
    }
    // A page's only inline scripts are the renderer's own, each carrying this response's
    // nonce; the policy allows those and nothing else inline.
    if let (Some(nonce), Some(response)) = (
        leptos::nonce::use_nonce(),
        use_context::<leptos_axum::ResponseOptions>(),
    ) {
        if let Ok(policy) =
            HeaderValue::from_str(&content_security_policy(&format!("'self' 'nonce-{nonce}'")))
        {
            response.insert_header(header::CONTENT_SECURITY_POLICY, policy);
        }
    }
    let mut console = crate::console::LedgerConsole::new(ledger.clone(), queue.clone())
        // Signed out (only `/login` renders then): no tenant at all.
        .for_tenants(tenants.unwrap_or(Some(Vec::new())))
        .in_zone(zone);
    if let Some(name) = &name {
        console = console.for_operator(name);
    }
    let port: fenceline_app::console::SharedConsole = std::sync::Arc::new(console);
    provide_context(port);
}

async fn stylesheet() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "public, max-age=300"),
        ],
        STYLESHEET,
    )
}

async fn favicon() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "image/svg+xml"),
            (header::CACHE_CONTROL, "public, max-age=86400"),
        ],
        FAVICON,
    )
}

async fn console_js() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "public, max-age=300"),
        ],
        CONSOLE_JS,
    )
}

/// An API address nothing answers: JSON, as every API error.
async fn no_endpoint(uri: axum::http::Uri) -> Response {
    ApiError::NotFound(format!("no endpoint at {}", uri.path())).into_response()
}

async fn method_not_allowed() -> Response {
    ApiError::MethodNotAllowed.into_response()
}

/// The content security policy, with the given `script-src` sources: never `'unsafe-inline'`.
fn content_security_policy(scripts: &str) -> String {
    format!(
        "default-src 'self'; script-src {scripts}; style-src 'self'; img-src 'self' data:; \
         frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    )
}

/// Headers every response carries. `Referrer-Policy` stays `same-origin`, never `no-referrer`:
/// console forms redirect back to their `Referer`.
async fn security_headers(request: Request<axum::body::Body>, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    // A rendered page has set its own, with its nonce; everything else runs no inline script.
    static NO_INLINE_SCRIPT: std::sync::LazyLock<HeaderValue> = std::sync::LazyLock::new(|| {
        HeaderValue::from_str(&content_security_policy("'self'")).expect("a header value")
    });
    if let Entry::Vacant(entry) = headers.entry(header::CONTENT_SECURITY_POLICY) {
        entry.insert(NO_INLINE_SCRIPT.clone());
    }
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    response
}
