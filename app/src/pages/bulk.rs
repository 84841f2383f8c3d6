//! `/bulk/{id}`: an action on every job a filter matched. Previewed, it shows the exact count
//! and the first jobs, and the form that confirms it with a reason; confirmed, its progress in
//! the background, job by job.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_params_map;

use super::console;
use crate::action::REASON_MAXLENGTH;
use crate::components::{ErrorBox, LiveRefresh};

/// `/bulk`: the latest actions by filter.
#[component]
pub fn BulkListPage() -> impl IntoView {
    let console = console();
    view! {
        <Title text="Actions by filter · Fenceline"/>
        <h1>"Actions by filter"</h1>
        <p class="lead">"Actions on every job a filter matched, newest first. Start one from the "<a href="/jobs">"jobs list"</a>" (\u{201c}Act on every job this filter matches\u{201d})."</p>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {Suspend::new(async move {
                match console.bulk_list().await {
                    Err(message) => view! { <ErrorBox message/> }.into_any(),
                    Ok(rows) if rows.is_empty() => view! { <p class="muted">"None yet."</p> }.into_any(),
                    Ok(rows) => view! {
                        <table class="stack-narrow">
                            <thead><tr>
                                <th scope="col">"#"</th><th scope="col">"Action"</th><th scope="col">"Filter"</th>
                                <th scope="col">"By"</th><th scope="col">"Status"</th><th scope="col">"Progress"</th><th scope="col">"Previewed"</th>
                            </tr></thead>
                            <tbody>
                                {rows.into_iter().map(|r| view! {
                                    <tr>
                                        <td data-label="#"><a href=format!("/bulk/{}", r.bulk_id)>{r.bulk_id}</a></td>
                                        <td data-label="Action">{r.action}</td>
                                        <td data-label="Filter" class="mono">{r.filter}</td>
                                        <td data-label="By">{r.by}</td>
                                        <td data-label="Status">{r.status}</td>
                                        <td data-label="Progress">{r.progress}</td>
                                        <td data-label="Previewed">{r.created}</td>
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
pub fn BulkPage() -> impl IntoView {
    let bulk_id = use_params_map().with_untracked(|p| p.get("bulk_id").unwrap_or_default());
    let csrf = super::visitor().csrf.clone();
    let console = console();
    view! {
        <Title text=format!("Bulk action {bulk_id} · Fenceline")/>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {Suspend::new(async move {
                let page = match console.bulk(bulk_id.clone()).await {
                    Err(message) => return view! { <ErrorBox message/> }.into_any(),
                    Ok(None) => return {
                        crate::console::HttpStatus::set(404);
                        view! {
                            <h1>"No such bulk action"</h1>
                            <p>{format!("There is no bulk action {bulk_id} you can see.")}</p>
                            <p><a href="/jobs">"Back to the jobs"</a></p>
                        }.into_any()
                    },
                    Ok(Some(page)) => page,
                };
                let live = page.status == "running";
                let done = page.applied + page.moved_on + page.refused;
                let percent = if page.total > 0 { done * 100 / page.total } else { 100 };
                view! {
                    <LiveRefresh live seconds=2/>
                    <p class="muted"><a href="/bulk">"All actions by filter"</a></p>
                    <h1>{format!("Bulk action {}: {}", page.bulk_id, page.action)}</h1>
                    <p class="muted">
                        {format!("{} jobs matched ", page.total)}
                        <a href=page.filter_link.clone()>{page.filter.clone()}</a>
                        {format!(" when {} previewed it at {}.", page.by, page.created)}
                    </p>
                    {match page.status.as_str() {
                        "previewed" if page.lapsed => view! {
                            <p class="notice">"This preview was not confirmed in time; nothing was done. Preview again from the jobs list."</p>
                        }.into_any(),
                        "previewed" => match page.confirm_until.clone() {
                            Some(until) => view! {
                                <section aria-labelledby="confirm" class="bulk-confirm">
                                    <h2 id="confirm">{format!("Confirm for {} jobs: {}", page.total, page.action)}</h2>
                                    <p>
                                        "Each job is acted on in the background, fenced at the epoch and state shown for it below: "
                                        "a job that has moved on since is counted and left as it is. One audit entry records the action, and each job's entry names it."
                                    </p>
                                    <form method="post" action=format!("/bulk/{}/confirm", page.bulk_id) class="stack">
                                        <input type="hidden" name="csrf" value=csrf.clone()/>
                                        <label>"Reason"<textarea name="reason" required=true maxlength=REASON_MAXLENGTH rows="2"></textarea></label>
                                        <button type="submit" class="danger">{format!("Confirm for {} jobs", page.total)}</button>
                                        <p class="muted">{format!("This preview can be confirmed until {until}.")}</p>
                                    </form>
                                </section>
                            }.into_any(),
                            None => view! { <p class="notice">"Previewed; only the operator who previewed it confirms it."</p> }.into_any(),
                        },
                        _ => view! {
                            <section aria-labelledby="progress">
                                <h2 id="progress">{if live { "Running" } else { "Done" }}</h2>
                                <progress max=page.total value=done>{format!("{percent}%")}</progress>
                                <dl class="facts wide">
                                    <dt>"Acted on"</dt><dd class="num">{format!("{done} of {} ({percent}%)", page.total)}</dd>
                                    <dt>"Applied"</dt><dd class="num bulk-applied">{page.applied}</dd>
                                    <dt>"Moved on since (left alone)"</dt><dd class="num bulk-moved-on">{page.moved_on}</dd>
                                    <dt>"Refused"</dt><dd class="num bulk-refused">{page.refused}</dd>
                                    <dt>"Reason"</dt><dd>{page.reason.clone().unwrap_or_default()}</dd>
                                    <dt>"Confirmed"</dt><dd>{page.confirmed.clone().unwrap_or_default()}</dd>
                                    <dt>"Finished"</dt><dd>{page.finished.clone().unwrap_or_else(|| "—".into())}</dd>
                                    <dt>"Audit entries"</dt><dd class="num">{format!("{} (this action's and one for each job it changed)", page.audit_entries)}</dd>
                                </dl>
                            </section>
                        }.into_any(),
                    }}
                    <section aria-labelledby="jobs">
                        <h2 id="jobs">{if page.jobs.len() as i64 == page.total {
                            format!("Jobs ({})", page.total)
                        } else {
                            format!("The first {} of {} jobs", page.jobs.len(), page.total)
                        }}</h2>
                        <table class="stack-narrow">
                            <thead><tr>
                                <th scope="col">"Job"</th><th scope="col">"State then"</th>
                                <th scope="col" class="num">"Epoch then"</th><th scope="col">"Outcome"</th>
                            </tr></thead>
                            <tbody>
                                {page.jobs.into_iter().map(|j| view! {
                                    <tr>
                                        <td data-label="Job" class="mono"><a href=format!("/jobs/{}", j.job_id)>{j.job_id.clone()}</a></td>
                                        <td data-label="State then">{j.state.replace('_', " ")}</td>
                                        <td data-label="Epoch then" class="num">{j.epoch}</td>
                                        <td data-label="Outcome">{j.outcome}</td>
                                    </tr>
                                }).collect_view()}
                            </tbody>
                        </table>
                    </section>
                }.into_any()
            })}
        </Suspense>
    }
}
