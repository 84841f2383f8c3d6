//! `/`: jobs by state now, and charts over a chosen window.

use crate::svg::SvgChart;
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

use super::console;
use crate::components::{BadParameter, BadParameterPage, ErrorBox, LiveRefresh, StateBadge};
use crate::console::Window;

/// Where a state's tile leads: the jobs list as the tile counts it, drill jobs left out when
/// the overview left some out.
fn tile_href(state: &str, drills_apart: bool) -> String {
    if drills_apart {
        format!("/jobs?state={state}&without_drills=1")
    } else {
        format!("/jobs?state={state}")
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
                        let drills_apart = o.drill_jobs > 0;
                        view! {
                            <LiveRefresh live seconds=5/>
                            <section aria-labelledby="now">
                                <h2 id="now">"Jobs by state now"</h2>
                                <ul class="state-tiles">
                                    {o.counts.into_iter().map(|(state, n)| view! {
                                        <li>
                                            <a href=tile_href(&state, drills_apart)>
                                                <span class="tile-count">{n}</span>
                                                <StateBadge state=state.clone()/>
                                            </a>
                                        </li>
                                    }).collect_view()}
                                </ul>
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
                                {o.charts.is_empty().then(|| view! {
                                    <p class="notice">"The activity charts count every tenant's jobs, so they are shown only to operators without a tenant limit."</p>
                                })}
                                <div class="charts">
                                    {o.charts.into_iter().map(|chart| view! {
                                        <figure class="chart">
                                            <figcaption>{chart.title}</figcaption>
                                            <div class="svg"><SvgChart chart=chart.svg/></div>
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
