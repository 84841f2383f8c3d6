//! `/workers`: the worker processes that reported lately — alive, silent or stopped — with the
//! running jobs each owns now and how their leases stand.

use leptos::prelude::*;
use leptos_meta::Title;

use super::console;
use crate::components::{or_dash, ErrorBox, LiveRefresh};
use crate::console::{WorkerRow, WorkerStatus};

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
                                                        <td data-label="Calls at once" class="num">{or_dash(row.max_in_flight.map(|n| n.to_string()))}</td>
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
