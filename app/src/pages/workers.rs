//! `/workers`: the worker processes that reported lately — alive, silent or stopped — with the
//! running jobs each owns now and how their leases stand.

use leptos::prelude::*;
use leptos_meta::Title;

use super::console;
use crate::components::{or_dash, ErrorBox, LiveRefresh};
use crate::console::{ProviderLimitRow, WorkerRow, WorkerStatus};

/// A worker's status as words in a badge (never colour alone).
#[component]
fn StatusBadge(status: WorkerStatus) -> impl IntoView {
    let class = match status {
        WorkerStatus::Alive => "badge worker-alive",
        WorkerStatus::Silent => "badge worker-silent",
        WorkerStatus::Stopped => "badge worker-stopped",
        WorkerStatus::Unreported => "badge worker-unreported",
    };
    view! { <span class=class>{status.as_str()}</span> }
}

fn held_cell(row: &WorkerRow) -> AnyView {
    if row.held == 0 {
        return view! { "0" }.into_any();
    }
    let href = match serde_urlencoded::to_string([
        ("state", "running"),
        ("owner", row.worker_id.as_str()),
    ]) {
        Ok(query) => format!("/jobs?{query}"),
        Err(_) => "/jobs?state=running".to_owned(),
    };
    let lapsed = (row.lapsed > 0).then(|| {
        view! { <span class="lapsed">{format!(" ({} lease{} lapsed)", row.lapsed, if row.lapsed == 1 { "" } else { "s" })}</span> }
    });
    view! { <a href=href>{row.held}</a>{lapsed} }.into_any()
}

/// Each provider limit the fleet met: admitting or limited until when, by which limit, what
/// it admits.
#[component]
fn Providers(rows: Vec<ProviderLimitRow>) -> impl IntoView {
    view! {
        <section aria-labelledby="providers">
            <h2 id="providers">"Providers"</h2>
            {if rows.is_empty() {
                view! {
                    <p class="muted">
                        "No provider has limited a call yet. When one refuses a call (a rate limit, an overload), \
                         its limit shows here: workers stop calling it until the time it named, run as many calls \
                         at once as it admits, and the refused jobs wait with their attempt budget untouched."
                    </p>
                }.into_any()
            } else {
                view! {
                    <p class="muted">
                        "What the workers learned of each provider's limit from its answers, shared through the ledger: \
                         while it is limited no worker calls it, and each runs only as many calls at once as it admits. \
                         A refusal spends none of a job's attempt budget."
                    </p>
                    <table class="providers stack-narrow">
                        <thead><tr>
                            <th scope="col">"Provider"</th>
                            <th scope="col">"Model"</th>
                            <th scope="col">"State"</th>
                            <th scope="col">"By limit"</th>
                            <th scope="col" class="num">"Calls at once"</th>
                            <th scope="col" class="num">"Rate"</th>
                            <th scope="col" class="num">"Refusals, 5 min"</th>
                            <th scope="col" class="num">"Refusals"</th>
                            <th scope="col">"Time limited"</th>
                            <th scope="col">"Reported"</th>
                        </tr></thead>
                        <tbody>
                            {rows.into_iter().map(|r| {
                                let state = match &r.limited_until {
                                    Some(until) => view! { <span class="badge provider-limited">{format!("limited until {until}")}</span> }.into_any(),
                                    None => view! { <span class="badge provider-admitting">"admitting"</span> }.into_any(),
                                };
                                view! {
                                    <tr>
                                        <td data-label="Provider">{r.provider}</td>
                                        <td data-label="Model"><code>{r.model}</code></td>
                                        <td data-label="State">{state}</td>
                                        <td data-label="By limit">{or_dash(r.limit)}</td>
                                        <td data-label="Calls at once" class="num">{or_dash(r.concurrency.map(|n| n.to_string()))}</td>
                                        <td data-label="Rate" class="num">{or_dash(r.rate)}</td>
                                        <td data-label="Refusals, 5 min" class="num">{r.recent_refusals}</td>
                                        <td data-label="Refusals" class="num">{r.refusals}</td>
                                        <td data-label="Time limited">{r.limited_for}</td>
                                        <td data-label="Reported">{r.updated}</td>
                                    </tr>
                                }
                            }).collect_view()}
                        </tbody>
                    </table>
                }.into_any()
            }}
        </section>
    }
}

#[component]
pub fn WorkersPage() -> impl IntoView {
    let console = console();
    view! {
        <Title text="Workers · Fenceline"/>
        <h1>"Workers"</h1>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {Suspend::new(async move {
                match console.workers().await {
                    Err(message) => view! { <ErrorBox message/> }.into_any(),
                    Ok(page) => {
                        let live = page.rows.iter().any(|r| r.held > 0 || r.status == WorkerStatus::Alive);
                        let silent = page.rows.iter().filter(|r| r.status == WorkerStatus::Silent && r.held > 0).count();
                        let silent_jobs: i64 = page.rows.iter().filter(|r| r.status == WorkerStatus::Silent).map(|r| r.held).sum();
                        let providers = page.providers.clone();
                        view! {
                            <LiveRefresh live seconds=5/>
                            <p class="lead">
                                "Each worker process ("<code>"fenceline serve"</code>" with its worker, "<code>"fenceline worker"</code>
                                {format!(
                                    ") reports every {} while it runs, and once more when it has stopped cleanly; it stays \
                                     listed for {} after its last report. What a worker owns is read from the running jobs \
                                     themselves: a report is a sign of life, never ownership.",
                                    page.report_every, page.listed_for,
                                )}
                            </p>
                            {(silent > 0).then(|| view! {
                                <p class="notice">
                                    {format!(
                                        "{silent} silent worker{} still own{} {silent_jobs} running job{}. A worker silent while \
                                         it runs was killed, paused or cut off from the database; once a lease lapses the reaper \
                                         takes the job back, and a later write by the old owner is refused by its epoch.",
                                        if silent == 1 { "" } else { "s" },
                                        if silent == 1 { "s" } else { "" },
                                        if silent_jobs == 1 { "" } else { "s" },
                                    )}
                                </p>
                            })}
                            <Providers rows=providers/>
                            <h2>"Processes"</h2>
                            {if page.rows.is_empty() {
                                view! {
                                    <p class="empty">
                                        "No worker has reported in the last "{page.listed_for.clone()}
                                        ", and no job is running. Start one with "<code>"fenceline worker"</code>
                                        " or "<code>"fenceline serve"</code>"."
                                    </p>
                                }.into_any()
                            } else {
                                view! {
                                    <table class="workers stack-narrow">
                                        <thead><tr>
                                            <th scope="col">"Worker"</th>
                                            <th scope="col">"Status"</th>
                                            <th scope="col">"Last report"</th>
                                            <th scope="col">"Started"</th>
                                            <th scope="col">"Queue"</th>
                                            <th scope="col">"Provider"</th>
                                            <th scope="col" class="num">"Calls at once"</th>
                                            <th scope="col" class="num">"Jobs owned"</th>
                                            <th scope="col">"Latest lease"</th>
                                        </tr></thead>
                                        <tbody>
                                            {page.rows.into_iter().map(|row| {
                                                let held = held_cell(&row);
                                                view! {
                                                    <tr>
                                                        <td data-label="Worker"><code>{row.worker_id.clone()}</code></td>
                                                        <td data-label="Status"><StatusBadge status=row.status/></td>
                                                        <td data-label="Last report">{or_dash(row.last_report)}</td>
                                                        <td data-label="Started">{or_dash(row.started)}</td>
                                                        <td data-label="Queue">{or_dash(row.queue)}</td>
                                                        <td data-label="Provider">{or_dash(row.provider)}</td>
                                                        <td data-label="Calls at once" class="num">{or_dash(row.max_in_flight.map(|n| match row.capacity {
                                                            Some(c) if c < n => format!("{c} of {n}"),
                                                            _ => n.to_string(),
                                                        }))}</td>
                                                        <td data-label="Jobs owned" class="num">{held}</td>
                                                        <td data-label="Latest lease">{or_dash(row.lease)}</td>
                                                    </tr>
                                                }
                                            }).collect_view()}
                                        </tbody>
                                    </table>
                                }.into_any()
                            }}
                        }.into_any()
                    }
                }
            })}
        </Suspense>
    }
}
