//! `/unknown`: the reconciliation queue — every job whose provider call may have happened
//! with no confirmed outcome, with its evidence.

use leptos::prelude::*;
use leptos_meta::Title;

use super::console;
use crate::components::{or_dash, ErrorBox};

#[component]
pub fn UnknownPage() -> impl IntoView {
    let console = console();
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
                match console.unknown().await {
                    Err(message) => view! { <ErrorBox message/> }.into_any(),
                    Ok(rows) if rows.is_empty() => view! {
                        <p class="empty">"No job is waiting for a decision."</p>
                    }.into_any(),
                    Ok(rows) => view! {
                        <table>
                            <thead><tr>
                                <th scope="col">"Job"</th>
                                <th scope="col">"Tenant"</th>
                                <th scope="col">"Epoch"</th>
                                <th scope="col">"Unknown since"</th>
                                <th scope="col">"Last attempt"</th>
                                <th scope="col">"Provider reference"</th>
                                <th scope="col">"Deadline left"</th>
                                <th scope="col">"Why"</th>
                                <th scope="col">"Replay policy"</th>
                            </tr></thead>
                            <tbody>
                                {rows.into_iter().map(|r| view! {
                                    <tr>
                                        <td><a class="mono" href=format!("/jobs/{}", r.job_id)>{r.job_id.clone()}</a></td>
                                        <td>{r.tenant}</td>
                                        <td class="num">{r.epoch}</td>
                                        <td>{r.since}</td>
                                        <td>{or_dash(r.last_attempt)}</td>
                                        <td class="mono">{or_dash(r.provider_request_id)}</td>
                                        <td>{r.deadline_left}</td>
                                        <td>{or_dash(r.recovery_reason)}</td>
                                        <td>{r.replay_policy}</td>
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
