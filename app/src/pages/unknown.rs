//! `/unknown`: the reconciliation queue — every job whose provider call may have happened
//! with no confirmed outcome, with its evidence, oldest first, in keyset pages.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

use super::console;
use crate::action::{JobPick, REASON_MAXLENGTH};
use crate::components::{or_dash, ErrorBox};

#[component]
pub fn UnknownPage() -> impl IntoView {
    let (after, select_all) = use_query_map()
        .with_untracked(|m| (m.get("after"), m.get("select").as_deref() == Some("all")));
    let console = console();
    let visitor = super::visitor();
    let acting = visitor.can_act();
    let csrf = visitor.csrf.clone();
    view! {
        <Title text="Unknown · Fenceline"/>
        <h1>"Needs a decision"</h1>
        <p class="lead">
            "These jobs sent a request that may have reached the model without a confirmed outcome. "
            "Nothing starts again until a decision is recorded: a provider retrieval, an operator, "
            "or a pre-approved replay policy."
        </p>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {Suspend::new(async move {
                match console.unknown(after.clone()).await {
                    Err(message) => view! { <ErrorBox message/> }.into_any(),
                    Ok(page) if page.rows.is_empty() && page.first => view! {
                        <p class="empty">"No job is waiting for a decision."</p>
                    }.into_any(),
                    Ok(page) => view! {
                        <p>{if page.total == "1" { "1 job waits, oldest first.".to_owned() } else { format!("{} jobs wait, oldest first.", page.total) }}</p>
                        {page.rows.iter().any(|r| r.retrieval.starts_with("not possible")).then(|| view! {
                            <p class="notice">
                                "The provider offers no retrieval of earlier requests (or it is switched off): "
                                "the jobs marked “not possible” can only be settled by a decision."
                            </p>
                        })}
                        {page.at_risk.clone().map(|risk| view! {
                            <p class="at-risk">{format!("What the lost attempts on this page may already have cost: {risk}. Authorizing their retries may spend as much again.")}</p>
                        })}
                        <form method="post" action="/unknown/decisions" id="bulk">
                        {acting.then(|| view! {
                            <input type="hidden" name="csrf" value=csrf.clone()/>
                            <p class="muted">
                                "Tick jobs to decide them together (at most 100; each is fenced at the epoch shown, and one that moved on is left as it is). "
                                <a href=format!("/unknown?select=all{}", after.as_ref().map(|a| format!("&after={a}")).unwrap_or_default())>"Select all on this page"</a>
                            </p>
                        })}
                        <table class="unknown stack-narrow">
                            <thead><tr>
                                {acting.then(|| view! { <th scope="col">"Pick"</th> })}
                                <th scope="col">"Job"</th>
                                <th scope="col">"Tenant"</th>
                                <th scope="col">"Epoch"</th>
                                <th scope="col">"Unknown since"</th>
                                <th scope="col">"Last attempt"</th>
                                <th scope="col">"Provider reference"</th>
                                <th scope="col">"Retrieval"</th>
                                <th scope="col" title="The most its lost attempts may have cost: what a retry may spend again">"At risk"</th>
                                <th scope="col">"Deadline left"</th>
                                <th scope="col">"Why"</th>
                                <th scope="col">"Replay policy"</th>
                            </tr></thead>
                            <tbody>
                                {page.rows.into_iter().map(|r| view! {
                                    <tr>
                                        {acting.then(|| view! {
                                            <td data-label="Pick"><input type="checkbox" name="job" checked=select_all
                                                value=JobPick { job_id: r.job_id.clone(), epoch: r.epoch, state: None, events: None }.to_string()
                                                aria-label=format!("Pick {}", r.job_id)/></td>
                                        })}
                                        <td data-label="Job"><a class="mono" href=format!("/jobs/{}", r.job_id)>{r.job_id.clone()}</a></td>
                                        <td data-label="Tenant">{r.tenant}</td>
                                        <td data-label="Epoch" class="num">{r.epoch}</td>
                                        <td data-label="Unknown since">{r.since}</td>
                                        <td data-label="Last attempt">{or_dash(r.last_attempt)}</td>
                                        <td data-label="Provider ref" class="mono">{or_dash(r.provider_request_id)}</td>
                                        <td data-label="Retrieval">{r.retrieval}</td>
                                        <td data-label="At risk" class="num">{or_dash(r.at_risk)}</td>
                                        <td data-label="Deadline left">{r.deadline_left}</td>
                                        <td data-label="Why">{or_dash(r.recovery_reason)}</td>
                                        <td data-label="Replay policy">{r.replay_policy}</td>
                                    </tr>
                                }).collect_view()}
                            </tbody>
                        </table>
                        {acting.then(|| view! {
                            <fieldset class="bulk">
                                <legend>"Decide the picked jobs"</legend>
                                <label>"Decision"
                                    <select name="decision">
                                        <option value="authorize_retry">"authorize a fenced retry"</option>
                                        <option value="resolve_failed">"resolve as failed"</option>
                                    </select>
                                </label>
                                <label>"Reason"<input name="reason" required=true maxlength=REASON_MAXLENGTH size="40"/></label>
                                <button type="submit">"Decide picked jobs"</button>
                            </fieldset>
                        })}
                        </form>
                        <nav class="pager" aria-label="Pages">
                            {(!page.first).then(|| view! { <a href="/unknown">"← Oldest"</a> })}
                            {page.next.map(|next| view! {
                                <a rel="next" href=format!("/unknown?after={next}")>"Newer →"</a>
                            })}
                        </nav>
                    }.into_any(),
                }
            })}
        </Suspense>
    }
}
