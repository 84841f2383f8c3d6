//! `/jobs`: filter by state, tenant and creation time; find by job id or idempotency key;
//! keyset pages that stay fast over millions of jobs; counts per state as tabs.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

use super::console;
use crate::components::{or_dash, BadParameterPage, ErrorBox, StateBadge};
use crate::console::{JobsPage as JobsPageData, JobsQuery};

fn non_empty(v: Option<String>) -> Option<String> {
    v.map(|s| s.trim().to_owned()).filter(|s| !s.is_empty())
}

/// The jobs-list URL for `query` with `state` replaced.
fn href(query: &JobsQuery, state: Option<&str>, before: Option<&str>) -> String {
    let mut parts = Vec::new();
    if let Some(s) = state {
        parts.push(format!("state={s}"));
    }
    if let Some(t) = &query.tenant {
        parts.push(format!("tenant={}", urlencode(t)));
    }
    if let Some(c) = &query.created_after {
        parts.push(format!("created_after={}", urlencode(c)));
    }
    if let Some(b) = before {
        parts.push(format!("before={b}"));
    }
    if parts.is_empty() {
        "/jobs".to_owned()
    } else {
        format!("/jobs?{}", parts.join("&"))
    }
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[component]
pub fn JobsPage() -> impl IntoView {
    let query = use_query_map().with_untracked(|m| JobsQuery {
        state: non_empty(m.get("state")),
        tenant: non_empty(m.get("tenant")),
        q: non_empty(m.get("q")),
        before: non_empty(m.get("before")),
        created_after: non_empty(m.get("created_after")),
    });
    let console = console();
    let form_query = query.clone();
    view! {
        <Title text="Jobs · Fenceline"/>
        <h1>"Jobs"</h1>
        <form class="filters" method="get" action="/jobs" role="search">
            <label>"Job id or idempotency key"
                <input type="search" name="q" value=form_query.q.clone().unwrap_or_default()
                    placeholder="job_… or your key"/>
            </label>
            <label>"Tenant"
                <input type="text" name="tenant" value=form_query.tenant.clone().unwrap_or_default()/>
            </label>
            <label>"Created after"
                <input type="datetime-local" name="created_after"
                    value=form_query.created_after.clone().unwrap_or_default()/>
            </label>
            {form_query.state.clone().map(|s| view! { <input type="hidden" name="state" value=s/> })}
            <button type="submit">"Filter"</button>
            <a href="/jobs">"Clear"</a>
        </form>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {Suspend::new(async move {
                match console.jobs(query.clone()).await {
                    Err(message) => view! { <ErrorBox message/> }.into_any(),
                    Ok(JobsPageData { bad_parameter: Some(bad), .. }) => view! {
                        <BadParameterPage bad back="/jobs".to_owned()/>
                    }.into_any(),
                    Ok(page) => {
                        let total = page.total.clone();
                        let all_current = query.state.is_none().then_some("page");
                        view! {
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
                            <table class="jobs stack-narrow">
                                <thead><tr>
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
                            <nav class="pager" aria-label="Pages">
                                {query.before.is_some().then(|| view! {
                                    <a href=href(&query, query.state.as_deref(), None)>"Newest"</a>
                                })}
                                {page.next.map(|next| view! {
                                    <a rel="next" href=href(&query, query.state.as_deref(), Some(&next))>"Older →"</a>
                                })}
                            </nav>
                        }
                        .into_any()
                    }
                }
            })}
        </Suspense>
    }
}
