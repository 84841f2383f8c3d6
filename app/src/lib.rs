//! The Fenceline operator console: server-rendered Leptos views.
//!
//! Owns what an operator sees. Rendered on the server only (`SsrMode::Async`, no WASM, no
//! hydration), so every page works with JavaScript disabled; live pages refresh themselves
//! with a `<meta http-equiv="refresh">` while something is in flight. Must not know about SQL,
//! queues or AWS: data comes through the [`console::Console`] port the server implements.
//!
//! # Layout
//!
//! - [`action`]: operators' actions as both crates write and read them (reason, picked job).
//! - [`console`]: the port and its view models.
//! - [`pages`]: one file per page.
//! - [`components`]: reusable views; [`svg`]: charts as data, drawn as SVG.
//! - [`shell`] and [`App`]: the HTML document and the router.

pub mod action;
pub mod components;
pub mod console;
pub mod pages;
pub mod svg;

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
                <link rel="icon" href="/favicon.svg" type="image/svg+xml"/>
                <MetaTags/>
            </head>
            <body>
                <App/>
                <script src="/static/console.js" defer></script>
            </body>
        </html>
    }
}

/// The router and the frame every page shares.
#[component]
pub fn App() -> impl IntoView {
    provide_meta_context();
    let visitor = pages::visitor();
    let signed_in = visitor.operator.clone();
    let manages = visitor.manages_operators();
    let csrf = visitor.csrf.clone();
    let zone = visitor.zone.clone();
    let bad_zone = visitor.bad_zone.clone();
    let refusal = use_context::<console::FormRefusal>();
    view! {
        <Stylesheet id="fenceline" href="/style/fenceline.css"/>
        <Title text="Fenceline"/>
        <Router>
            <a class="skip" href="#main">"Skip to content"</a>
            <header class="topbar">
                <A href="/" attr:class="brand">"Fenceline"</A>
                {signed_in.map(|op| view! {
                    <nav aria-label="Main">
                        <A href="/" exact=true>"Overview"</A>
                        <A href="/jobs">"Jobs"</A>
                        <A href="/workers">"Workers"</A>
                        <A href="/unknown">"Unknown"</A>
                        <A href="/dlq">"Dead letters"</A>
                        <A href="/drills">"Drills"</A>
                        <A href="/incidents">"Incidents"</A>
                        <A href="/alerts">"Alerts"</A>
                        <A href="/audit">"Audit"</A>
                        <A href="/api">"API"</A>
                        {manages.then(|| view! { <A href="/operators">"Operators"</A> })}
                    </nav>
                    <components::ZonePicker zone=zone.clone() csrf=csrf.clone()/>
                    <form class="whoami" method="post" action="/logout">
                        <span title=op.tenants.map(|t| format!("tenants: {t}")).unwrap_or_else(|| "every tenant".into())>
                            {op.name}<span class="muted">{format!(" · {}", op.role)}</span>
                        </span>
                        <input type="hidden" name="csrf" value=csrf/>
                        <button type="submit" class="link">"Sign out"</button>
                    </form>
                })}
            </header>
            <main id="main">
                <components::FlashMessage flash=visitor.flash/>
                {match (refusal, bad_zone, components::unknown_parameter()) {
                    (Some(refusal), _, _) => view! {
                        <Title text="Form refused · Fenceline"/>
                        <components::FormRefusalPage refusal/>
                    }.into_any(),
                    (None, Some(tz), _) => view! {
                        <Title text="Bad address · Fenceline"/>
                        <components::BadParameterPage
                            bad=components::BadParameter::new("tz", &tz, "an IANA time zone name such as UTC, Europe/Paris or America/New_York")
                            back=components::without_param("tz")/>
                    }.into_any(),
                    (None, None, Some(bad)) => {
                        let back = components::without_param(&bad.name);
                        view! {
                            <Title text="Bad address · Fenceline"/>
                            <components::BadParameterPage bad back/>
                        }.into_any()
                    }
                    (None, None, None) => view! {
                <Routes fallback=|| view! { <NotFound/> }>
                    <Route path=path!("/") view=pages::overview::OverviewPage ssr=SsrMode::Async/>
                    <Route path=path!("/jobs") view=pages::jobs::JobsPage ssr=SsrMode::Async/>
                    <Route path=path!("/jobs/:job_id") view=pages::job::JobPage ssr=SsrMode::Async/>
                    <Route path=path!("/unknown") view=pages::unknown::UnknownPage ssr=SsrMode::Async/>
                    <Route path=path!("/workers") view=pages::workers::WorkersPage ssr=SsrMode::Async/>
                    <Route path=path!("/dlq") view=pages::dlq::DeadLettersPage ssr=SsrMode::Async/>
                    <Route path=path!("/audit") view=pages::audit::AuditPage ssr=SsrMode::Async/>
                    <Route path=path!("/alerts") view=pages::alerts::AlertsPage ssr=SsrMode::Async/>
                    <Route path=path!("/incidents") view=pages::incidents::IncidentsPage ssr=SsrMode::Async/>
                    <Route path=path!("/incidents/:incident_id") view=pages::incidents::IncidentPage ssr=SsrMode::Async/>
                    <Route path=path!("/bulk") view=pages::bulk::BulkListPage ssr=SsrMode::Async/>
                    <Route path=path!("/bulk/:bulk_id") view=pages::bulk::BulkPage ssr=SsrMode::Async/>
                    <Route path=path!("/drills") view=pages::drills::DrillsPage ssr=SsrMode::Async/>
                    <Route path=path!("/drills/:run_id") view=pages::drills::DrillRunPage ssr=SsrMode::Async/>
                    <Route path=path!("/login") view=pages::login::LoginPage ssr=SsrMode::Async/>
                    <Route path=path!("/api") view=pages::api::ApiPage ssr=SsrMode::Async/>
                    <Route path=path!("/operators") view=pages::operators::OperatorsPage ssr=SsrMode::Async/>
                </Routes>
                    }.into_any(),
                }}
            </main>
        </Router>
    }
}

/// An address no page answers, in the console's frame (with its menu, signed in).
#[component]
fn NotFound() -> impl IntoView {
    console::HttpStatus::set(404);
    let path = leptos_router::hooks::use_location()
        .pathname
        .get_untracked();
    view! {
        <Title text="Not found · Fenceline"/>
        <h1>"Not found"</h1>
        <p>"There is no page at "<code>{path}</code>". "</p>
        <p><a href="/">"Back to the overview"</a>" · "<a href="/jobs">"All jobs"</a></p>
    }
}
