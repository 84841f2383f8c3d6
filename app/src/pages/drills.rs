//! `/drills`: the redelivery drill catalogue — what each scenario injects and what its verdict
//! proves — a form to run one or all, and the latest runs. `/drills/{run}`: a run's report to
//! paste into an incident review: the verdict, each check with links to the events that prove
//! it, and the capture list of every job. Refreshes itself while the run is going.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_params_map;

use super::console;
use crate::components::{ErrorBox, LiveRefresh, StateBadge};
use crate::console::{DrillRunSummary, DrillScenarioRun};

/// A verdict or scenario status, in words and colour.
#[component]
fn Verdict(status: String) -> impl IntoView {
    let label = match status.as_str() {
        "passed" => "PASS".to_owned(),
        "failed" => "FAIL".to_owned(),
        other => other.to_owned(),
    };
    view! { <span class=format!("badge verdict-{status}")>{label}</span> }
}

#[component]
fn RunRow(run: DrillRunSummary) -> impl IntoView {
    view! {
        <tr>
            <td data-label="Run"><a class="mono" href=format!("/drills/{}", run.run_id)>{run.run_id.clone()}</a></td>
            <td data-label="Started">{run.started}</td>
            <td data-label="Verdict"><Verdict status=run.status.clone()/></td>
            <td data-label="Passed" class="num">{format!("{} / {}", run.passed, run.total)}</td>
            <td data-label="Scenarios">{run.asked}</td>
            <td data-label="Queue · timings">{format!("{} · {}", run.queue, run.timings)}</td>
            <td data-label="By">{run.requested_by}</td>
            <td data-label="Took">{run.took.unwrap_or_else(|| "—".into())}</td>
        </tr>
    }
}

#[component]
pub fn DrillsPage() -> impl IntoView {
    let console = console();
    let visitor = super::visitor();
    let can_run = visitor.can_act()
        && visitor
            .operator
            .as_ref()
            .is_some_and(|o| o.tenants.is_none());
    let csrf = visitor.csrf.clone();
    view! {
        <Title text="Drills · Fenceline"/>
        <h1>"Redelivery drills"</h1>
        <p class="lead">
            "A drill runs real jobs through the real worker, ledger and queue code with faults injected "
            "on its own jobs only, on a queue of its own, and proves the invariants from the ledger's "
            "events. Drill jobs belong to the tenant "<code>"drill"</code>", and the overview's "
            "counts and charts and the metrics' job gauge leave them out; "
            "the CLI runs the same catalogue: "<code>"fenceline drill run all"</code>"."
        </p>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {Suspend::new(async move {
                let page = match console.drills().await {
                    Err(message) => return view! { <ErrorBox message/> }.into_any(),
                    Ok(page) => page,
                };
                let kinds: Vec<String> = page.catalogue.iter().map(|s| s.kind.clone()).collect();
                let form = match (&page.refused, can_run) {
                    (Some(why), _) => view! { <p class="notice">{why.clone()}</p> }.into_any(),
                    (None, false) => view! {
                        <p class="notice">"Running a drill needs the operator or admin role without a tenant limit."</p>
                    }.into_any(),
                    (None, true) => view! {
                        <form method="post" action="/drills" class="filters run-drill">
                            <input type="hidden" name="csrf" value=csrf.clone()/>
                            <label>"Scenario"
                                <select name="kind">
                                    <option value="all" selected=true>{format!("all {} scenarios", kinds.len())}</option>
                                    {kinds.iter().map(|k| view! { <option value=k.clone()>{k.clone()}</option> }).collect_view()}
                                </select>
                            </label>
                            <label>"Queue"
                                <select name="queue">
                                    {page.queues.iter().map(|q| view! { <option value=q.clone()>{q.clone()}</option> }).collect_view()}
                                </select>
                            </label>
                            {(page.models.len() > 1).then(|| view! {
                                <label>"Model"
                                    <select name="model">
                                        {page.models.iter().map(|(v, l)| view! { <option value=v.clone()>{l.clone()}</option> }).collect_view()}
                                    </select>
                                </label>
                            })}
                            <label>"Timings"
                                <select name="timings">
                                    <option value="compressed" selected=true>"compressed (about ten seconds)"</option>
                                    <option value="production">"production (minutes)"</option>
                                </select>
                            </label>
                            <button type="submit">"Run drill"</button>
                        </form>
                    }.into_any(),
                };
                view! {
                    {form}
                    <h2>"Latest runs"</h2>
                    {if let Some(why) = page.runs_withheld.clone() {
                        view! { <p class="notice">{why}</p> }.into_any()
                    } else if page.runs.is_empty() {
                        view! { <p class="empty">"No drill has run yet."</p> }.into_any()
                    } else {
                        view! {
                            <table class="stack-narrow">
                                <thead><tr>
                                    <th scope="col">"Run"</th><th scope="col">"Started"</th><th scope="col">"Verdict"</th>
                                    <th scope="col">"Passed"</th><th scope="col">"Scenarios"</th><th scope="col">"Queue · timings"</th>
                                    <th scope="col">"By"</th><th scope="col">"Took"</th>
                                </tr></thead>
                                <tbody>{page.runs.into_iter().map(|run| view! { <RunRow run/> }).collect_view()}</tbody>
                            </table>
                        }.into_any()
                    }}
                    <h2>"The catalogue"</h2>
                    <table class="catalogue stack-narrow">
                        <thead><tr>
                            <th scope="col">"Scenario"</th><th scope="col">"Setup and fault"</th>
                            <th scope="col">"The verdict proves"</th><th scope="col">"Fault points"</th>
                        </tr></thead>
                        <tbody>
                            {page.catalogue.into_iter().map(|s| { let anchor = s.kind.clone(); view! {
                                <tr id=anchor>
                                    <td data-label="Scenario" class="mono">{s.kind}</td>
                                    <td data-label="Setup and fault">{s.setup}</td>
                                    <td data-label="The verdict proves">{s.proves}</td>
                                    <td data-label="Fault points">{if s.faults.is_empty() {
                                        view! { <span class="muted">"none: the drill sends a copy"</span> }.into_any()
                                    } else {
                                        s.faults.into_iter().map(|f| view! { <code>{f}</code>" " }).collect_view().into_any()
                                    }}</td>
                                </tr>
                            }}).collect_view()}
                        </tbody>
                    </table>
                }.into_any()
            })}
        </Suspense>
    }
}

#[component]
fn ScenarioSection(scenario: DrillScenarioRun) -> impl IntoView {
    let s = scenario;
    let anchor = s.kind.clone();
    view! {
        <section class="drill-scenario" id=anchor>
            <h2><span class="mono">{s.kind.clone()}</span>" "<Verdict status=s.status.clone()/>
                {s.took.map(|t| view! { <span class="muted">{format!(" {t}")}</span> })}
            </h2>
            <p class="muted">{s.setup}" "<strong>"Proves: "</strong>{s.proves}</p>
            {s.notes.into_iter().map(|n| view! { <p class="notice">{n}</p> }).collect_view()}
            {(!s.checks.is_empty()).then(|| view! {
                <ul class="checks">
                    {s.checks.into_iter().map(|c| view! {
                        <li class=if c.passed { "check passed" } else { "check failed" }>
                            <span class="mark">{if c.passed { "✓ pass" } else { "✗ fail" }}</span>" "
                            <strong>{c.name}</strong>
                            <span class="muted">{format!(" — {}", c.detail)}</span>
                            {(!c.evidence.is_empty()).then(|| view! {
                                <span class="evidence">" Evidence: "
                                    {c.evidence.into_iter().map(|e| view! { <a href=e.href>{e.label}</a>" " }).collect_view()}
                                </span>
                            })}
                        </li>
                    }).collect_view()}
                </ul>
            })}
            {(!s.jobs.is_empty()).then(|| view! {
                <table class="captures stack-narrow">
                    <thead><tr>
                        <th scope="col">"Job"</th><th scope="col">"State"</th><th scope="col">"Deliveries"</th>
                        <th scope="col">"Epoch"</th><th scope="col">"Deadline left"</th><th scope="col">"Renewals"</th>
                        <th scope="col">"Attempts"</th><th scope="col">"Recovery"</th><th scope="col">"Result"</th>
                        <th scope="col">"Message"</th>
                    </tr></thead>
                    <tbody>
                        {s.jobs.into_iter().map(|j| view! {
                            <tr>
                                <td data-label="Job"><a class="mono" href=format!("/jobs/{}", j.job_id)>{j.job_id.clone()}</a>
                                    <div class="muted">{j.role}</div></td>
                                <td data-label="State"><StateBadge state=j.state/></td>
                                <td data-label="Deliveries" class="num">{j.delivery_count}</td>
                                <td data-label="Epoch" class="num">{j.owner_epoch}</td>
                                <td data-label="Deadline left">{j.deadline_left}</td>
                                <td data-label="Renewals">{j.renewals}</td>
                                <td data-label="Attempts" class="num">{j.attempt_count}</td>
                                <td data-label="Recovery">{j.recovery_reason.unwrap_or_else(|| "—".into())}</td>
                                <td data-label="Result">{j.result_transition}</td>
                                <td data-label="Message">{j.deletion}</td>
                            </tr>
                        }).collect_view()}
                    </tbody>
                </table>
            })}
            {(!s.faults_fired.is_empty()).then(|| view! {
                <details><summary>{format!("Faults injected ({})", s.faults_fired.len())}</summary>
                    <ul>{s.faults_fired.into_iter().map(|f| view! { <li class="mono">{f}</li> }).collect_view()}</ul>
                </details>
            })}
        </section>
    }
}

#[component]
pub fn DrillRunPage() -> impl IntoView {
    let run_id = use_params_map().with_untracked(|p| p.get("run_id").unwrap_or_default());
    let console = console();
    view! {
        <Title text=format!("Drill {run_id} · Fenceline")/>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {Suspend::new(async move {
                let run = match console.drill_run(run_id.clone()).await {
                    Err(message) => return view! { <ErrorBox message/> }.into_any(),
                    Ok(None) => return {
                        crate::console::HttpStatus::set(404);
                        view! {
                            <h1>"No such drill run"</h1>
                            <p>{format!("There is no drill run {run_id} in this ledger.")}</p>
                            <p><a href="/drills">"Back to the drills"</a></p>
                        }.into_any()
                    },
                    Ok(Some(run)) => run,
                };
                let r = run.summary;
                let live = run.live;
                let done = run.scenarios.iter().filter(|s| s.status == "passed" || s.status == "failed").count();
                view! {
                    <header class="job-header">
                        <h1>"Drill "<span class="mono">{r.run_id.clone()}</span>" "<Verdict status=r.status.clone()/></h1>
                        <p class="muted">
                            {format!("{} on the {} queue with {} timings and the {} model · started {} by {}", r.asked, r.queue, r.timings, run.provider, r.started, r.requested_by)}
                            {run.finished.map(|f| format!(" · finished {f}"))}
                            {r.took.map(|t| format!(" ({t})"))}
                        </p>
                        <LiveRefresh live seconds=2/>
                        <p>
                            <strong>{format!("{} of {} scenarios passed", r.passed, r.total)}</strong>
                            {live.then(|| format!(" · {done} of {} finished", r.total))}
                            {(r.status == "interrupted").then_some(" · the process running this drill stopped before it finished; its checks are incomplete")}
                        </p>
                        <p class="exports">
                            <a href=format!("/drills/{}/report.md", r.run_id)>"Markdown report"</a>" · "
                            <a href=format!("/drills/{}/report.json", r.run_id)>"JSON report"</a>" · "
                            <a href="/jobs?tenant=drill">"Every drill job"</a>" · "
                            <a href="/drills">"All drills"</a>
                        </p>
                    </header>
                    {run.scenarios.into_iter().map(|scenario| view! { <ScenarioSection scenario/> }).collect_view()}
                }.into_any()
            })}
        </Suspense>
    }
}
