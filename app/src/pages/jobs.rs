//! `/jobs`: filter by state, tenant, key prefix, creation time, worker, error code and what
//! went wrong on the way; find by job id or idempotency key;
//! keyset pages that stay fast over millions of jobs; counts per state as tabs.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

use super::console;
use crate::action::{JobPick, REASON_MAXLENGTH};
use crate::components::{
    or_dash, this_page_with, BadParameterPage, ErrorBox, StateBadge, TenantFlowTable,
};
use crate::console::{JobsPage as JobsPageData, JobsQuery};

fn non_empty(v: Option<String>) -> Option<String> {
    v.map(|s| s.trim().to_owned()).filter(|s| !s.is_empty())
}

/// The jobs-list URL for `query` with `state` and `before` replaced: every filter kept, so a
/// tab, a page link or a pasted address reopens the same view.
pub fn href(query: &JobsQuery, state: Option<&str>, before: Option<&str>) -> String {
    let mut pairs: Vec<(&str, String)> = Vec::new();
    let mut put = |name: &'static str, value: Option<&str>| {
        if let Some(v) = value {
            pairs.push((name, v.to_owned()));
        }
    };
    put("state", state);
    put("tenant", query.tenant.as_deref());
    put("key_prefix", query.key_prefix.as_deref());
    put("created_after", query.created_after.as_deref());
    put("created_before", query.created_before.as_deref());
    put("worker", query.worker.as_deref());
    put("error_code", query.error_code.as_deref());
    put("redelivered", query.redelivered.then_some("1"));
    put("stale_rejected", query.stale_rejected.then_some("1"));
    put("with_drills", query.with_drills.then_some("1"));
    put("owner", query.owner.as_deref());
    put("before", before);
    match serde_urlencoded::to_string(&pairs) {
        Ok(q) if !q.is_empty() => format!("/jobs?{q}"),
        _ => "/jobs".to_owned(),
    }
}

/// Whether drill jobs are left out: unless asked for, or the drill tenant is the one chosen.
pub fn drills_apart(query: &JobsQuery) -> bool {
    !query.with_drills
        && !query
            .tenant
            .as_deref()
            .is_some_and(|t| t.eq_ignore_ascii_case("drill"))
}

/// Whether any filter beyond the state tab is set.
fn filtered(query: &JobsQuery) -> bool {
    query.tenant.is_some()
        || query.key_prefix.is_some()
        || query.created_after.is_some()
        || query.created_before.is_some()
        || query.worker.is_some()
        || query.error_code.is_some()
        || query.redelivered
        || query.stale_rejected
        || query.with_drills
        || query.owner.is_some()
}

/// The filter form: every field a parameter of the address (a GET form, no script).
#[component]
fn Filters(query: JobsQuery, tenants: Vec<String>, zone: String) -> impl IntoView {
    let text = |v: &Option<String>| v.clone().unwrap_or_default();
    let chosen = query.tenant.clone().unwrap_or_default();
    view! {
        <form class="filters" method="get" action="/jobs" role="search">
            <label>"Job id or idempotency key"
                <input type="search" name="q" value=text(&query.q) placeholder="job_… or your key"/>
            </label>
            <label>"Key starts with"
                <input type="text" name="key_prefix" value=text(&query.key_prefix) placeholder="invoice-2026-"/>
            </label>
            <label>"Tenant"
                <select name="tenant">
                    <option value="" selected=chosen.is_empty()>"every tenant"</option>
                    {tenants.into_iter().map(|t| {
                        let selected = t.eq_ignore_ascii_case(&chosen);
                        view! { <option value=t.clone() selected=selected>{t.clone()}</option> }
                    }).collect_view()}
                </select>
            </label>
            <label>{format!("Created from ({zone})")}
                <input type="datetime-local" name="created_after" step="1" value=text(&query.created_after)/>
            </label>
            <label>{format!("Created before ({zone})")}
                <input type="datetime-local" name="created_before" step="1" value=text(&query.created_before)/>
            </label>
            <label>"Worker"
                <input type="text" name="worker" size="12" value=text(&query.worker)/>
            </label>
            <label>"Error code"
                <input type="text" name="error_code" size="14" value=text(&query.error_code)/>
            </label>
            <fieldset class="checks">
                <legend>"Had"</legend>
                <label class="inline"><input type="checkbox" name="redelivered" value="1" checked=query.redelivered/>"redeliveries"</label>
                <label class="inline"><input type="checkbox" name="stale_rejected" value="1" checked=query.stale_rejected/>"stale results rejected"</label>
            </fieldset>
            <label class="inline"><input type="checkbox" name="with_drills" value="1" checked=query.with_drills/>"Show drill jobs"</label>
            {query.state.clone().map(|s| view! { <input type="hidden" name="state" value=s/> })}
            {query.owner.clone().map(|o| view! { <input type="hidden" name="owner" value=o/> })}
            <button type="submit">"Filter"</button>
            <a href="/jobs">"Clear"</a>
        </form>
    }
}

/// The form that previews an action on every job this list's filter matches, not only those
/// on the page: it repeats the filter, and the preview shows the exact count first.
#[component]
fn ByFilter(query: JobsQuery, csrf: String, zone: String) -> impl IntoView {
    let hidden = [
        ("state", query.state.clone()),
        ("tenant", query.tenant.clone()),
        ("key_prefix", query.key_prefix.clone()),
        ("created_after", query.created_after.clone()),
        ("created_before", query.created_before.clone()),
        ("worker", query.worker.clone()),
        ("error_code", query.error_code.clone()),
        ("owner", query.owner.clone()),
        ("with_drills", query.with_drills.then(|| "1".to_owned())),
        ("redelivered", query.redelivered.then(|| "1".to_owned())),
        (
            "stale_rejected",
            query.stale_rejected.then(|| "1".to_owned()),
        ),
    ];
    let (csrf_pin, zone_pin, hidden_pin) = (csrf.clone(), zone.clone(), hidden.clone());
    view! {
        <details class="by-filter">
            <summary>"Act on every job this filter matches, or pin them to an incident…"</summary>
            <form method="post" action="/bulk" class="inline">
                <input type="hidden" name="csrf" value=csrf/>
                <input type="hidden" name="tz" value=zone/>
                {hidden.into_iter().filter_map(|(name, value)| value.map(|v| view! {
                    <input type="hidden" name=name value=v/>
                })).collect_view()}
                <label>"Action"
                    <select name="action">
                        <option value="authorize_retry">"Authorize a fenced retry (unknown jobs)"</option>
                        <option value="resolve_failed">"Resolve as failed (unknown jobs)"</option>
                        <option value="cancel">"Cancel (running, unknown, retry authorized)"</option>
                        <option value="rerun">"Run again as new jobs (finished jobs)"</option>
                    </select>
                </label>
                <button type="submit">"Preview"</button>
            </form>
            <p class="muted">"The preview changes nothing: it shows how many jobs match now and the first of them, and asks for a reason to go ahead. "
                <a href="/bulk">"Earlier actions by filter"</a></p>
            <form method="post" action="/incidents/pin-filter" class="inline">
                <input type="hidden" name="csrf" value=csrf_pin/>
                <input type="hidden" name="tz" value=zone_pin/>
                {hidden_pin.into_iter().filter_map(|(name, value)| value.map(|v| view! {
                    <input type="hidden" name=name value=v/>
                })).collect_view()}
                <label>"Pin every match to incident #"
                    <input type="number" name="incident" min="1" required=true class="short"/>
                </label>
                <button type="submit">"Pin"</button>
            </form>
            <p class="muted">"Pinned jobs are kept from retention while the incident is open and for a while after. "
                <a href="/incidents">"Incidents"</a></p>
        </details>
    }
}

#[component]
pub fn JobsPage() -> impl IntoView {
    let query = use_query_map().with_untracked(|m| JobsQuery {
        state: non_empty(m.get("state")),
        tenant: non_empty(m.get("tenant")),
        q: non_empty(m.get("q")),
        before: non_empty(m.get("before")),
        created_after: non_empty(m.get("created_after")),
        created_before: non_empty(m.get("created_before")),
        key_prefix: non_empty(m.get("key_prefix")),
        worker: non_empty(m.get("worker")),
        error_code: non_empty(m.get("error_code")),
        redelivered: non_empty(m.get("redelivered")).is_some(),
        stale_rejected: non_empty(m.get("stale_rejected")).is_some(),
        with_drills: non_empty(m.get("with_drills")).is_some(),
        owner: non_empty(m.get("owner")),
    });
    let select_all = use_query_map().with_untracked(|m| m.get("select").as_deref() == Some("all"));
    let console = console();
    let visitor = super::visitor();
    let zone = visitor.zone.clone();
    let acting = visitor.can_act();
    let csrf = visitor.csrf.clone();
    view! {
        <Title text="Jobs · Fenceline"/>
        <h1>"Jobs"</h1>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {Suspend::new(async move {
                match console.jobs(query.clone()).await {
                    Err(message) => view! { <ErrorBox message/> }.into_any(),
                    Ok(JobsPageData { bad_parameter: Some(bad), .. }) => view! {
                        <BadParameterPage bad back="/jobs".to_owned()/>
                    }.into_any(),
                    Ok(page) => {
                        let total = page.total.clone();
                        let filters = view! {
                            <Filters query=query.clone() tenants=page.tenants.clone() zone=zone.clone()/>
                        };
                        let all_current = query.state.is_none().then_some("page");
                        let narrowed = filtered(&query);
                        let drills_apart = drills_apart(&query);
                        let with_drills = href(&JobsQuery { with_drills: true, ..query.clone() }, query.state.as_deref(), None);
                        let owner = query.owner.clone();
                        // Pick boxes and the bulk form only where some job here can be
                        // cancelled or run again, and each action only for the jobs it suits.
                        let cancelling = acting && page.rows.iter().any(|r| r.cancellable);
                        let rerunning = acting && page.rows.iter().any(|r| r.terminal);
                        let picking = cancelling || rerunning;
                        view! {
                            {filters}
                            {narrowed.then(|| view! {
                                <p class="muted">{if drills_apart {
                                    "The counts on the tabs are per state for the chosen tenant, drill jobs left out; the list below also applies the other filters."
                                } else {
                                    "The counts on the tabs are per state for the chosen tenant; the list below also applies the other filters."
                                }}</p>
                            })}
                            {drills_apart.then(|| view! {
                                <p class="muted drills-apart">"Drill jobs (tenant drill) are left out of the list and its counts, as the overview leaves them out. "
                                    <a href=with_drills>"Show drill jobs"</a>
                                </p>
                            })}
                            {owner.map(|worker| {
                                let every = href(&JobsQuery { owner: None, ..query.clone() }, query.state.as_deref(), None);
                                view! {
                                    <p class="notice">"Jobs worker "<code>{worker}</code>" owns now. "
                                        <a href=every>"Every worker's"</a>" · "<a href="/workers">"Workers"</a>
                                    </p>
                                }
                            })}
                            <nav class="tabs" aria-label="States">
                                <a href=href(&query, None, None) aria-current=all_current>
                                    {format!("all {total}")}
                                </a>
                                {page.counts.iter().map(|(state, n)| {
                                    let current = (query.state.as_deref() == Some(state.as_str())).then_some("page");
                                    view! {
                                        <a href=href(&query, Some(state), None) aria-current=current>
                                            {format!("{} {n}", state.replace('_', " "))}
                                        </a>
                                    }
                                }).collect_view()}
                            </nav>
                            {page.notice.map(|n| view! { <p class="notice">{n}</p> })}
                            {(acting && query.q.is_none()).then(|| view! {
                                <ByFilter query=query.clone() csrf=csrf.clone() zone=zone.clone()/>
                            })}
                            {picking.then(|| view! {
                                <p class="muted">
                                    "Tick jobs to act on them together (at most 100). "
                                    {cancelling.then_some("Running, unknown or retry-authorized jobs can be cancelled, each fenced at the epoch and state shown; one that moved on is left as it is. ")}
                                    {rerunning.then_some("Finished jobs can run again as new jobs. ")}
                                    <a href=this_page_with("select", Some("all"))>"Select all on this page"</a>
                                </p>
                            })}
                            <form method="post" action="/jobs/cancel" id="bulk">
                            <table class="jobs stack-narrow">
                                <thead><tr>
                                    {picking.then(|| view! { <th scope="col">"Pick"</th> })}
                                    <th scope="col">"Job"</th>
                                    <th scope="col">"Key"</th>
                                    <th scope="col">"State"</th>
                                    <th scope="col">"Tenant"</th>
                                    <th scope="col">"Epoch"</th>
                                    <th scope="col">"Attempts"</th>
                                    <th scope="col">"Created"</th>
                                    <th scope="col">"Updated"</th>
                                    <th scope="col">"Deadline"</th>
                                    <th scope="col">"Error"</th>
                                </tr></thead>
                                <tbody>
                                    {page.rows.into_iter().map(|r| view! {
                                        <tr>
                                            {picking.then(|| view! {
                                                <td data-label="Pick">{(r.cancellable || r.terminal).then(|| view! {
                                                    <input type="checkbox" name="job" checked=select_all
                                                        value=JobPick { job_id: r.job_id.clone(), epoch: r.epoch, state: Some(r.state.clone()), events: Some(r.events) }.to_string()
                                                        aria-label=format!("Pick {}", r.job_id)/>
                                                })}</td>
                                            })}
                                            <td data-label="Job"><a class="mono" href=format!("/jobs/{}", r.job_id)>{r.job_id.clone()}</a></td>
                                            <td data-label="Key" class="key">{r.idempotency_key}</td>
                                            <td data-label="State"><StateBadge state=r.state/></td>
                                            <td data-label="Tenant">{r.tenant}</td>
                                            <td data-label="Epoch" class="num">{r.epoch}</td>
                                            <td data-label="Attempts" class="num">{r.attempts}</td>
                                            <td data-label="Created">{r.created}</td>
                                            <td data-label="Updated" class="narrow-hide">{r.updated}</td>
                                            <td data-label="Deadline">{r.deadline}</td>
                                            <td data-label="Error">{or_dash(r.error_code)}</td>
                                        </tr>
                                    }).collect_view()}
                                </tbody>
                            </table>
                            {picking.then(|| view! {
                                <input type="hidden" name="csrf" value=csrf.clone()/>
                                <input type="hidden" name="back" value=this_page_with("select", None)/>
                                <fieldset class="bulk">
                                    <legend>{match (rerunning, cancelling) {
                                        (true, true) => "Run again or cancel the picked jobs",
                                        (true, false) => "Run the picked jobs again",
                                        _ => "Cancel the picked jobs",
                                    }}</legend>
                                    {rerunning.then(|| view! {
                                        <p class="muted">"Run again: each finished job stays as it is and a new job gets its input, model, attempt budget and deadline length, a key derived from its own and a link to it. It calls the model again. Sending the same form twice makes no second set."</p>
                                    })}
                                    {cancelling.then(|| view! {
                                        <p class="muted">"Cancel: each fails for good (error “cancelled”) at a new epoch, so an attempt still running can never commit. This cannot be undone."</p>
                                    })}
                                    <label>"Reason"<input name="reason" required=true maxlength=REASON_MAXLENGTH size="40"/></label>
                                    // Enter in the reason does nothing: each action takes its own button.
                                    <button type="submit" disabled=true hidden=true aria-hidden="true" tabindex="-1">"Choose an action"</button>
                                    <span class="actions">
                                        {rerunning.then(|| view! {
                                            <button type="submit" formaction="/jobs/rerun">"Run picked jobs again"</button>
                                        })}
                                        {cancelling.then(|| view! {
                                            <button type="submit" class="danger">"Cancel picked jobs"</button>
                                        })}
                                    </span>
                                </fieldset>
                                <fieldset class="bulk pin-picked">
                                    <legend>"Pin the picked jobs to an incident"</legend>
                                    <label>"Incident #"<input type="number" name="incident" min="1" class="short"/></label>
                                    " "
                                    <button type="submit" formaction="/incidents/pin-picked" formnovalidate=true>"Pin picked jobs"</button>
                                </fieldset>
                            })}
                            </form>
                            <nav class="pager" aria-label="Pages">
                                {query.before.is_some().then(|| view! {
                                    <a href=href(&query, query.state.as_deref(), None)>"Newest"</a>
                                })}
                                {page.next.map(|next| view! {
                                    <a rel="next" href=href(&query, query.state.as_deref(), Some(&next))>"Older →"</a>
                                })}
                            </nav>
                            <section aria-labelledby="turns">
                                <h2 id="turns">"Waiting to be sent and running, per tenant"</h2>
                                <p class="muted">
                                    "New jobs wait in the ledger until their tenant's turn and room in the queue; \
                                     a job refused by its provider or backing off waits for its time."
                                </p>
                                <TenantFlowTable rows=page.flow/>
                            </section>
                        }
                        .into_any()
                    }
                }
            })}
        </Suspense>
    }
}
