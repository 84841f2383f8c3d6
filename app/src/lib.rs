//! The Fenceline operator console: server-rendered Leptos views.
//!
//! Owns what an operator sees. Rendered on the server only (`SsrMode::Async`, no WASM, no
//! hydration), so every page works with JavaScript disabled. Must not know about SQL, queues
//! or AWS: data will come through the `Console` port the server crate implements.
//!
//! # Layout
//!
//! - [`shell`]: the HTML document around every page.
//! - [`App`]: the router and the page frame.

use leptos::prelude::*;
use leptos_meta::{provide_meta_context, MetaTags, Stylesheet, Title};
use leptos_router::components::{Route, Router, Routes, A};
use leptos_router::{path, SsrMode};

/// The HTML document around every page.
pub fn shell(options: LeptosOptions) -> impl IntoView {
    let _ = options;
    view! {
        <!DOCTYPE html>
        <html lang="en">
            <head>
                <meta charset="utf-8"/>
                <meta name="viewport" content="width=device-width, initial-scale=1"/>
                <meta name="color-scheme" content="light dark"/>
                <MetaTags/>
            </head>
            <body>
                <App/>
            </body>
        </html>
    }
}

/// The router and the frame every page shares.
#[component]
pub fn App() -> impl IntoView {
    provide_meta_context();
    view! {
        <Stylesheet id="fenceline" href="/style/fenceline.css"/>
        <Title text="Fenceline"/>
        <Router>
            <header class="topbar">
                <A href="/" attr:class="brand">"Fenceline"</A>
                <nav aria-label="Main">
                    <a href="/api/v1/openapi.json">"API"</a>
                    <a href="/readyz">"Readiness"</a>
                </nav>
            </header>
            <main id="main">
                <Routes fallback=|| view! { <NotFound/> }>
                    <Route path=path!("/") view=Home ssr=SsrMode::Async/>
                </Routes>
            </main>
        </Router>
    }
}

/// The landing page: what this service is and where its interfaces are.
#[component]
fn Home() -> impl IntoView {
    view! {
        <Title text="Fenceline"/>
        <h1>"Fenceline"</h1>
        <p class="lead">
            "A fenced job ledger for long LLM jobs behind SQS-style queues: every write is a "
            "compare-and-set on the owner epoch, and every step lands on the job's timeline."
        </p>
        <section aria-labelledby="interfaces">
            <h2 id="interfaces">"Interfaces"</h2>
            <dl class="facts">
                <dt>"Job API"</dt>
                <dd><code>"POST /api/v1/jobs"</code>", "<code>"GET /api/v1/jobs/{job_id}"</code>
                    ", "<code>"GET /api/v1/jobs/{job_id}/events"</code>", "<code>"GET /api/v1/jobs?state=…"</code></dd>
                <dt>"OpenAPI"</dt>
                <dd><a href="/api/v1/openapi.json">"/api/v1/openapi.json"</a></dd>
                <dt>"Health"</dt>
                <dd><a href="/healthz">"/healthz"</a>" and "<a href="/readyz">"/readyz"</a></dd>
                <dt>"Tokens"</dt>
                <dd><code>"fenceline token add <tenant>"</code></dd>
            </dl>
        </section>
    }
}

#[component]
fn NotFound() -> impl IntoView {
    view! {
        <Title text="Not found · Fenceline"/>
        <h1>"Not found"</h1>
        <p>"There is no page at this address. "<a href="/">"Back to the start"</a></p>
    }
}
