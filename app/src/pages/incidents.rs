//! `/incidents`: the incidents, open ones first, and the form that opens one.
//! `/incidents/{id}`: one incident's jobs, their key events merged in time, the decisions taken,
//! and once closed its frozen bundle with the SHA-256 of each file.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_params_map;

use super::console;
use crate::action::REASON_MAXLENGTH;
use crate::components::{ErrorBox, StateBadge};
use crate::console::IncidentEventRow;

#[component]
pub fn IncidentsPage() -> impl IntoView {
    let console = console();
    let visitor = super::visitor();
    let acting = visitor.can_act();
    let csrf = visitor.csrf.clone();
    view! {
        <Title text="Incidents · Fenceline"/>
        <h1>"Incidents"</h1>
        <p class="lead">
            "An incident collects the jobs of one event under review. Its jobs, with their timelines, attempts, "
            "decisions and audit entries, are kept from retention while it is open and for a while after it closes. "
            "Closing it freezes its record: a bundle made once, whose SHA-256 goes to the audit."
        </p>
        {acting.then(|| view! {
            <details class="open-incident">
                <summary>"Open an incident…"</summary>
                <form method="post" action="/incidents" class="stack">
                    <input type="hidden" name="csrf" value=csrf/>
                    <label>"Title"<input type="text" name="title" required=true maxlength="200"/></label>
                    <label>"External id (a ticket number, optional)"<input type="text" name="external_id" maxlength="100"/></label>
                    <button type="submit">"Open"</button>
                </form>
            </details>
        })}
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {Suspend::new(async move {
                match console.incidents().await {
                    Err(message) => view! { <ErrorBox message/> }.into_any(),
                    Ok(rows) if rows.is_empty() => view! { <p class="muted">"No incident yet."</p> }.into_any(),
                    Ok(rows) => view! {
                        <table class="stack-narrow">
                            <thead><tr>
                                <th scope="col">"#"</th><th scope="col">"Title"</th><th scope="col">"External id"</th>
                                <th scope="col">"Status"</th><th scope="col" class="num">"Jobs"</th><th scope="col">"Opened"</th><th scope="col">"By"</th>
                            </tr></thead>
                            <tbody>
                                {rows.into_iter().map(|r| view! {
                                    <tr>
                                        <td data-label="#"><a href=format!("/incidents/{}", r.incident_id)>{r.incident_id}</a></td>
                                        <td data-label="Title"><a href=format!("/incidents/{}", r.incident_id)>{r.title}</a></td>
                                        <td data-label="External id">{r.external_id.unwrap_or_else(|| "—".into())}</td>
                                        <td data-label="Status">{if r.open { "open" } else { "closed" }}</td>
                                        <td data-label="Jobs" class="num">{r.jobs}</td>
                                        <td data-label="Opened">{r.opened}</td>
                                        <td data-label="By">{r.opened_by}</td>
                                    </tr>
                                }).collect_view()}
                            </tbody>
                        </table>
                    }.into_any(),
                }
            })}
        </Suspense>
    }
}

#[component]
fn Events(rows: Vec<IncidentEventRow>) -> impl IntoView {
    view! {
        <table class="stack-narrow incident-events">
            <thead><tr>
                <th scope="col">"Time"</th><th scope="col">"Job"</th><th scope="col">"Kind"</th>
                <th scope="col">"Actor"</th><th scope="col">"Detail"</th>
            </tr></thead>
            <tbody>
                {rows.into_iter().map(|e| {
                    let link = match e.seq {
                        Some(seq) => format!("/jobs/{}#e{seq}", e.job_id),
                        None => format!("/jobs/{}", e.job_id),
                    };
                    view! {
                        <tr>
                            <td data-label="Time">{e.at}</td>
                            <td data-label="Job" class="mono"><a href=link>{e.job_id}</a></td>
                            <td data-label="Kind">{e.kind}</td>
                            <td data-label="Actor">{e.actor}</td>
                            <td data-label="Detail" class="mono detail">{e.detail}</td>
                        </tr>
                    }
                }).collect_view()}
            </tbody>
        </table>
    }
}

#[component]
pub fn IncidentPage() -> impl IntoView {
    let incident_id = use_params_map().with_untracked(|p| p.get("incident_id").unwrap_or_default());
    let visitor = super::visitor();
    let acting = visitor.can_act();
    let csrf = visitor.csrf.clone();
    let console = console();
    view! {
        <Title text=format!("Incident {incident_id} · Fenceline")/>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {Suspend::new(async move {
                let page = match console.incident(incident_id.clone()).await {
                    Err(message) => return view! { <ErrorBox message/> }.into_any(),
                    Ok(None) => return {
                        crate::console::HttpStatus::set(404);
                        view! {
                            <h1>"No such incident"</h1>
                            <p>{format!("There is no incident {incident_id}.")}</p>
                            <p><a href="/incidents">"All incidents"</a></p>
                        }.into_any()
                    },
                    Ok(Some(page)) => page,
                };
                let id = page.incident_id;
                let open = page.closed.is_none();
                let hidden = page.total_jobs - page.jobs.len() as i64;
                view! {
                    <p class="muted"><a href="/incidents">"All incidents"</a></p>
                    <h1>{format!("Incident {id}: {}", page.title)}</h1>
                    <p class="muted">
                        {page.external_id.clone().map(|x| format!("{x} · "))}
                        {format!("opened {} by {}", page.opened, page.opened_by)}
                        {page.closed.clone().map(|(at, by, keep)| format!(" · closed {at} by {by}; its jobs are kept until {keep}"))}
                    </p>
                    {match (&page.digests, page.whole) {
                        (Some([md, json, html]), true) => view! {
                            <section aria-labelledby="bundle" class="bundle">
                                <h2 id="bundle">"Frozen bundle"</h2>
                                <p>"Made once, when the incident closed; every download serves these same bytes. Their SHA-256 is in the audit."</p>
                                <table class="digests">
                                    <thead><tr><th scope="col">"File"</th><th scope="col">"SHA-256"</th></tr></thead>
                                    <tbody>
                                        <tr><td><a href=format!("/incidents/{id}/bundle.md")>"Markdown"</a></td><td class="mono digest">{md.clone()}</td></tr>
                                        <tr><td><a href=format!("/incidents/{id}/bundle.json")>"JSON"</a></td><td class="mono digest">{json.clone()}</td></tr>
                                        <tr><td><a href=format!("/incidents/{id}/bundle.html")>"HTML (offline, swimlanes inline)"</a></td><td class="mono digest">{html.clone()}</td></tr>
                                    </tbody>
                                </table>
                            </section>
                        }.into_any(),
                        (Some(_), false) => view! {
                            <p class="notice">"The frozen bundle holds jobs of tenants you do not see: an operator of them all downloads it."</p>
                        }.into_any(),
                        (None, _) => ().into_any(),
                    }}
                    {(open && acting).then(|| view! {
                        <section aria-labelledby="pin" class="incident-forms">
                            <h2 id="pin">"Pin jobs"</h2>
                            <form method="post" action="/incidents/pin" class="stack">
                                <input type="hidden" name="csrf" value=csrf.clone()/>
                                <input type="hidden" name="incident" value=id.to_string()/>
                                <label>"Job ids (spaces, commas or lines between them)"<textarea name="job_ids" rows="2" required=true></textarea></label>
                                <button type="submit">"Pin"</button>
                            </form>
                            <p class="muted">"Or pin from a job's page, or every job a filter matches from the "<a href="/jobs">"jobs list"</a>"."</p>
                        </section>
                    })}
                    <section aria-labelledby="jobs">
                        <h2 id="jobs">{format!("Jobs ({})", page.total_jobs)}</h2>
                        {(hidden > 0).then(|| view! {
                            <p class="muted">{format!("{hidden} of them are not listed: jobs of tenants you do not see, or past the first 200.")}</p>
                        })}
                        {if page.jobs.is_empty() {
                            view! { <p class="muted">"No job pinned yet."</p> }.into_any()
                        } else {
                            view! {
                                <table class="stack-narrow">
                                    <thead><tr>
                                        <th scope="col">"Job"</th><th scope="col">"Tenant"</th><th scope="col">"State"</th>
                                        <th scope="col" class="num">"Epoch"</th><th scope="col">"Attempts"</th><th scope="col">"Created"</th>
                                    </tr></thead>
                                    <tbody>
                                        {page.jobs.into_iter().map(|j| view! {
                                            <tr>
                                                <td data-label="Job" class="mono"><a href=format!("/jobs/{}", j.job_id)>{j.job_id.clone()}</a></td>
                                                <td data-label="Tenant">{j.tenant}</td>
                                                <td data-label="State"><StateBadge state=j.state/></td>
                                                <td data-label="Epoch" class="num">{j.epoch}</td>
                                                <td data-label="Attempts">{j.attempts}</td>
                                                <td data-label="Created">{j.created}</td>
                                            </tr>
                                        }).collect_view()}
                                    </tbody>
                                </table>
                            }.into_any()
                        }}
                    </section>
                    <section aria-labelledby="decisions">
                        <h2 id="decisions">"Decisions"</h2>
                        {if page.decisions.is_empty() {
                            view! { <p class="muted">"No decision recorded on these jobs."</p> }.into_any()
                        } else {
                            view! { <Events rows=page.decisions/> }.into_any()
                        }}
                    </section>
                    <section aria-labelledby="timeline">
                        <h2 id="timeline">"Key events, merged"</h2>
                        <p class="muted">"Claims, recoveries, attempts' ends, results, state changes, decisions and pins of every job here, in time order (the first 300)."</p>
                        {if page.timeline.is_empty() {
                            view! { <p class="muted">"Nothing yet."</p> }.into_any()
                        } else {
                            view! { <Events rows=page.timeline/> }.into_any()
                        }}
                    </section>
                    {(open && acting && page.whole).then(|| view! {
                        <section aria-labelledby="close" class="incident-close">
                            <h2 id="close">"Close and freeze"</h2>
                            <p>"Closing makes the bundle (Markdown, JSON, an HTML page readable offline) from the ledger as it stands, stores its bytes and writes their SHA-256 to the audit. No job can be pinned after."</p>
                            <form method="post" action=format!("/incidents/{id}/close") class="stack">
                                <input type="hidden" name="csrf" value=csrf.clone()/>
                                <label>"Reason"<textarea name="reason" required=true maxlength=REASON_MAXLENGTH rows="2"></textarea></label>
                                <button type="submit" class="danger">"Close and freeze"</button>
                            </form>
                        </section>
                    })}
                }.into_any()
            })}
        </Suspense>
    }
}
