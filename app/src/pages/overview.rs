//! `/`: jobs by state now, and charts over a chosen window.

use crate::svg::SvgChart;
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

use super::console;
use crate::components::{
    count, BadParameter, BadParameterPage, ErrorBox, LiveRefresh, StateBadge, TenantFlowTable,
};
use crate::console::{Window, WorkerPresence};

/// Where a state's tile leads: the jobs list, which counts as the tile does (drill jobs left
/// out).
fn tile_href(state: &str) -> String {
    format!("/jobs?state={state}")
}

/// Under the tiles: whether any worker runs the jobs, and what the silent ones own.
#[component]
fn WorkersLine(workers: WorkerPresence) -> impl IntoView {
    let w = workers;
    let link = view! { <a href="/workers">"Workers"</a> };
    if w.silent > 0 {
        let owning = if w.silent_jobs > 0 {
            format!(
                ", owning {}{}. A worker silent while it runs was killed, paused or cut off from \
                 the database: the reaper takes each of its jobs back once the lease lapses, and \
                 a later write by the old owner is refused by its epoch. ",
                count(w.silent_jobs, "running job", "running jobs"),
                match w.silent_lapsed {
                    0 => String::new(),
                    n if n == w.silent_jobs => " (every lease lapsed)".to_owned(),
                    n => format!(" ({} lapsed)", count(n, "lease", "leases")),
                },
            )
        } else {
            ", owning no running job. ".to_owned()
        };
        view! {
            <p class="notice workers-line">
                {format!("Workers: {} alive, {} silent{owning}", w.alive, w.silent)}
                {link}
            </p>
        }
        .into_any()
    } else if w.alive == 0 {
        let reported = if w.stopped > 0 {
            format!(
                "{} in the last {}",
                count(w.stopped, "worker stopped", "workers stopped"),
                w.listed_for
            )
        } else {
            format!("none has reported in the last {}", w.listed_for)
        };
        view! {
            <p class="notice workers-line">
                {format!("No worker is running ({reported}): jobs wait in ready until one starts (")}
                <code>"fenceline serve"</code>" or "<code>"fenceline worker"</code>"). "
                {link}
            </p>
        }
        .into_any()
    } else {
        let stopped = if w.stopped > 0 {
            format!(", {} stopped", w.stopped)
        } else {
            String::new()
        };
        view! {
            <p class="muted workers-line">
                {format!("Workers: {} alive{stopped}. ", w.alive)}
                {link}
            </p>
        }
        .into_any()
    }
}

#[component]
pub fn OverviewPage() -> impl IntoView {
    let asked = use_query_map().with_untracked(|q| q.get("window"));
    let window = Window::parse(&asked.clone().unwrap_or_default());
    // A window the overview does not know is a bad address, not silently replaced.
    let unknown_window = asked.filter(|a| !a.is_empty() && a.as_str() != window.as_str());
    if let Some(w) = unknown_window {
        let bad = BadParameter::new("window", &w, "hour, day or week");
        return view! {
            <Title text="Bad address · Fenceline"/>
            <BadParameterPage bad back="/".to_owned()/>
        }
        .into_any();
    }
    let console = console();
    view! {
        <Title text="Overview · Fenceline"/>
        <h1>"Overview"</h1>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {Suspend::new(async move {
                match console.overview(window).await {
                    Err(message) => view! { <ErrorBox message/> }.into_any(),
                    Ok(o) => {
                        let live = o.in_flight > 0;
                        view! {
                            <LiveRefresh live seconds=5/>
                            <section aria-labelledby="now">
                                <h2 id="now">"Jobs by state now"</h2>
                                <ul class="state-tiles">
                                    {o.counts.into_iter().map(|(state, n)| view! {
                                        <li>
                                            <a href=tile_href(&state)>
                                                <span class="tile-count">{n}</span>
                                                <StateBadge state=state.clone()/>
                                            </a>
                                        </li>
                                    }).collect_view()}
                                </ul>
                                <WorkersLine workers=o.workers/>
                                {o.oldest_ready.map(|w| view! {
                                    <p class="muted oldest-ready">
                                        {format!("The oldest ready job has waited {} for a worker: ", w.waited)}
                                        <a href=format!("/jobs/{}", w.job_id)><code>{w.job_id.clone()}</code></a>
                                    </p>
                                })}
                                <p class="muted">
                                    {format!("Queue: {}. ", o.queue)}
                                    {o.retention}
                                </p>
                                {(o.drill_jobs > 0).then(|| view! {
                                    <p class="muted">
                                        {format!(
                                            "The {} drill {} (tenant drill) {} left out of these counts and the charts below: \
                                             a drill makes its jobs fail, get rejected or end unknown on purpose. ",
                                            o.drill_jobs,
                                            if o.drill_jobs == 1 { "job" } else { "jobs" },
                                            if o.drill_jobs == 1 { "is" } else { "are" },
                                        )}
                                        <a href="/drills">"Drill runs"</a>" · "
                                        <a href="/jobs?tenant=drill">"their jobs"</a>
                                    </p>
                                })}
                            </section>
                            <section aria-labelledby="tenants">
                                <h2 id="tenants">"Tenants"</h2>
                                <p class="muted">
                                    "Jobs wait in the ledger for their tenant's turn and are sent as workers have room, \
                                     so one tenant's backlog never holds another's jobs."
                                </p>
                                <TenantFlowTable rows=o.tenants/>
                            </section>
                            <section aria-labelledby="charts">
                                <h2 id="charts">"Activity"</h2>
                                <nav class="tabs" aria-label="Chart window">
                                    {[Window::Hour, Window::Day, Window::Week].into_iter().map(|w| {
                                        let current = (w == o.window).then_some("page");
                                        view! {
                                            <a href=format!("/?window={}", w.as_str()) aria-current=current>
                                                {format!("last {}", w.as_str())}
                                            </a>
                                        }
                                    }).collect_view()}
                                </nav>
                                {o.spend.map(|line| view! { <p class="spend-line">{line}</p> })}
                                {o.charts.is_empty().then(|| view! {
                                    <p class="notice">"The activity charts count every tenant's jobs, so they are shown only to operators without a tenant limit."</p>
                                })}
                                <div class="charts">
                                    {o.charts.into_iter().map(|chart| view! {
                                        <figure class="chart">
                                            <figcaption>{chart.title}</figcaption>
                                            <div class="svg">
                                                <div class="wide"><SvgChart chart=chart.svg/></div>
                                                <div class="narrow"><SvgChart chart=chart.narrow/></div>
                                            </div>
                                            <dl class="figures">
                                                {chart.figures.into_iter().map(|f| view! {
                                                    <div>
                                                        <dt>
                                                            {f.class.map(|c| view! { <svg class="swatch" viewBox="0 0 16 10" aria-hidden="true"><line class=c x1="0" y1="5" x2="16" y2="5"/></svg> })}
                                                            {f.label}
                                                        </dt>
                                                        <dd>{f.value}</dd>
                                                    </div>
                                                }).collect_view()}
                                            </dl>
                                        </figure>
                                    }).collect_view()}
                                </div>
                            </section>
                        }
                        .into_any()
                    }
                }
            })}
        </Suspense>
    }
    .into_any()
}
