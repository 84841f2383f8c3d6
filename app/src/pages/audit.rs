//! `/audit`: every action taken on jobs — by operators, replay policies or the system — with
//! who, when, the epoch they saw, the state before and after, and why. Filters by operator,
//! action, job and time, in the URL.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

use super::console;
use crate::components::{or_dash, BadParameter, BadParameterPage, ErrorBox, StateBadge};
use crate::console::AuditQuery;

fn filled(value: Option<String>) -> Option<String> {
    value.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty())
}

#[component]
pub fn AuditPage() -> impl IntoView {
    let query = use_query_map().with_untracked(|q| AuditQuery {
        operator: filled(q.get("operator")),
        action: filled(q.get("action")),
        job: filled(q.get("job")),
        within: filled(q.get("within")),
        before: q.get("before").and_then(|b| b.parse().ok()),
        drills: filled(q.get("drills")).is_some(),
    });
    let raw_before = use_query_map().with_untracked(|q| filled(q.get("before")));
    let bad = match (&raw_before, &query.within) {
        (Some(b), _) if b.parse::<i64>().is_err() => Some(BadParameter::new(
            "before",
            b,
            "an entry number from the log's next-page link",
        )),
        (_, Some(w)) if !["hour", "day", "week"].contains(&w.as_str()) => {
            Some(BadParameter::new("within", w, "hour, day or week"))
        }
        _ => None,
    };
    if let Some(bad) = bad {
        return view! {
            <Title text="Bad address · Fenceline"/>
            <BadParameterPage bad back="/audit".to_owned()/>
        }
        .into_any();
    }
    let console = console();
    let shown = query.clone();
    view! {
        <Title text="Audit log · Fenceline"/>
        <h1>"Audit log"</h1>
        <p class="lead">"Every decision and action on a job, and every change of operators and tokens: who, when, at which epoch, and why."</p>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {Suspend::new(async move {
                let page = match console.audit(query.clone()).await {
                    Err(message) => return view! { <ErrorBox message/> }.into_any(),
                    Ok(page) => page,
                };
                let selected = shown.action.clone().unwrap_or_default();
                let within = shown.within.clone().unwrap_or_default();
                let next_link = page.next.map(|before| {
                    let mut pairs = vec![("before".to_owned(), before.to_string())];
                    for (k, v) in [("operator", &shown.operator), ("action", &shown.action), ("job", &shown.job), ("within", &shown.within)] {
                        if let Some(v) = v {
                            pairs.push((k.to_owned(), v.clone()));
                        }
                    }
                    if shown.drills {
                        pairs.push(("drills".to_owned(), "1".to_owned()));
                    }
                    let query: Vec<String> = pairs.into_iter().map(|(k, v)| format!("{k}={}", encode(&v))).collect();
                    format!("/audit?{}", query.join("&"))
                });
                view! {
                    <form method="get" action="/audit" class="filters">
                        <label>"Operator"<input name="operator" value=shown.operator.clone().unwrap_or_default() size="14"/></label>
                        <label>"Action"
                            <select name="action">
                                <option value="" selected=selected.is_empty()>"any"</option>
                                {page.actions.iter().map(|a| view! {
                                    <option value=a.clone() selected=*a == selected>{a.replace('_', " ")}</option>
                                }).collect_view()}
                            </select>
                        </label>
                        <label>"Job"<input name="job" value=shown.job.clone().unwrap_or_default() size="28"/></label>
                        <label>"Within"
                            <select name="within">
                                {[("", "any time"), ("hour", "the last hour"), ("day", "the last day"), ("week", "the last week")].into_iter().map(|(v, l)| view! {
                                    <option value=v selected=within == v>{l}</option>
                                }).collect_view()}
                            </select>
                        </label>
                        <label class="inline"><input type="checkbox" name="drills" value="1" checked=shown.drills/>"Show drills' entries"</label>
                        <button type="submit">"Filter"</button>
                    </form>
                    {(!shown.drills && selected != "drill_started").then(|| {
                        let mut pairs: Vec<String> = [("operator", &shown.operator), ("action", &shown.action), ("job", &shown.job), ("within", &shown.within)]
                            .into_iter()
                            .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}={}", encode(v))))
                            .collect();
                        pairs.push("drills=1".to_owned());
                        let with_drills = format!("/audit?{}", pairs.join("&"));
                        view! {
                            <p class="muted drills-apart">"Drills' entries (their starts, and actions on jobs of the tenant drill) are left out. "
                                <a href=with_drills>"Show them"</a>
                            </p>
                        }
                    })}
                    {if page.rows.is_empty() {
                        view! { <p class="empty">"No entry matches."</p> }.into_any()
                    } else {
                        view! {
                            <table class="audit stack-narrow">
                                <thead><tr>
                                    <th scope="col">"At"</th><th scope="col">"By"</th><th scope="col">"Action"</th>
                                    <th scope="col">"On"</th><th scope="col">"Tenant"</th>
                                    <th scope="col">"Saw epoch"</th><th scope="col">"New epoch"</th>
                                    <th scope="col">"Before"</th><th scope="col">"After"</th><th scope="col">"Reason"</th>
                                </tr></thead>
                                <tbody>
                                    {page.rows.into_iter().map(|r| {
                                        // A job's states are badges; an operator's or a token's, text.
                                        let on_job = r.job_id.is_some();
                                        let shown = move |s: Option<String>| s.map(|s| if on_job {
                                            view! { <StateBadge state=s/> }.into_any()
                                        } else {
                                            view! { <span>{s}</span> }.into_any()
                                        });
                                        view! {
                                        <tr>
                                            <td data-label="At">{r.at}</td>
                                            <td data-label="By">{r.actor}</td>
                                            <td data-label="Action">{r.action.replace('_', " ")}</td>
                                            <td data-label="On">{match (r.job_id, r.subject) {
                                                (Some(id), bulk) => view! {
                                                    <a class="mono" href=format!("/jobs/{id}")>{id.clone()}</a>
                                                    {bulk.and_then(|b| b.strip_prefix("bulk:").map(str::to_owned)).map(|n| view! {
                                                        <br/><a class="subject" href=format!("/bulk/{n}")>{format!("in bulk action {n}")}</a>
                                                    })}
                                                }.into_any(),
                                                (None, Some(subject)) => match subject.strip_prefix("bulk:") {
                                                    Some(n) => view! { <a class="subject" href=format!("/bulk/{n}")>{format!("bulk action {n}")}</a> }.into_any(),
                                                    None => view! { <span class="subject">{subject}</span> }.into_any(),
                                                },
                                                (None, None) => view! { <span>"—"</span> }.into_any(),
                                            }}{r.new_job_id.map(|new| view! {
                                                <br/><span class="made">"made "<a class="mono" href=format!("/jobs/{new}")>{new.clone()}</a></span>
                                            })}</td>
                                            <td data-label="Tenant">{or_dash(r.tenant)}</td>
                                            <td data-label="Saw epoch" class="num">{r.seen_epoch.map(|e| e.to_string()).unwrap_or_default()}</td>
                                            <td data-label="New epoch" class="num">{r.new_epoch.map(|e| e.to_string()).unwrap_or_default()}</td>
                                            <td data-label="Before">{shown(r.state_before)}</td>
                                            <td data-label="After">{shown(r.state_after)}</td>
                                            <td data-label="Reason">{r.reason}{r.evidence.map(|e| view! {
                                                <br/><span class="evidence">"Evidence: "<code>{e}</code></span>
                                            })}</td>
                                        </tr>
                                    }}).collect_view()}
                                </tbody>
                            </table>
                        }.into_any()
                    }}
                    <nav class="pager" aria-label="Pages">
                        {shown.before.is_some().then(|| view! { <a href="/audit">"← Newest"</a> })}
                        {next_link.map(|href| view! { <a rel="next" href=href>"Older →"</a> })}
                    </nav>
                }.into_any()
            })}
        </Suspense>
    }
    .into_any()
}

/// Percent-encodes a query value.
fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
