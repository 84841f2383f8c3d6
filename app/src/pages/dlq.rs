//! `/dlq`: dead letters joined to their job's ledger state.

use leptos::prelude::*;
use leptos_meta::Title;

use super::console;
use crate::components::{or_dash, ErrorBox, StateBadge};

#[component]
pub fn DeadLettersPage() -> impl IntoView {
    let console = console();
    let visitor = super::visitor();
    let can_replay = visitor.can_act()
        && visitor
            .operator
            .as_ref()
            .is_some_and(|o| o.tenants.is_none());
    let csrf = visitor.csrf.clone();
    let acting = visitor.can_act();
    view! {
        <Title text="Dead letters · Fenceline"/>
        <h1>"Dead letters"</h1>
        <p class="lead">
            "A message's transport history says nothing about its job's outcome: each dead letter "
            "is shown with the ledger's view of its job. Replay inspects the ledger first "
            "("<code>"fenceline dlq-replay"</code>")."
        </p>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {Suspend::new(async move {
                match console.dead_letters().await {
                    Err(message) => view! { <ErrorBox message/> }.into_any(),
                    Ok(dl) => view! {
                        <p class="muted">{format!("Dead-letter queue: {}", dl.queue)}</p>
                        {dl.notice.map(|n| view! { <p class="notice">{n}</p> })}
                        {(can_replay && (!dl.rows.is_empty() || dl.queue.starts_with("sqs"))).then(|| view! {
                            <details class="replay">
                                <summary>"Replay the dead letters after inspection…"</summary>
                                <form method="post" action="/dlq/replay" class="stack">
                                    <p class="muted">
                                        "Each letter is checked against the ledger first, as the Note column shows: a job already "
                                        "terminal has its letter dropped; an unknown job's letter is kept until a decision; a "
                                        "workable job is sent again with the same id, deadline and attempt budget. Every fate "
                                        "lands on the job's timeline and in the audit log."
                                    </p>
                                    <input type="hidden" name="csrf" value=csrf.clone()/>
                                    <label>"Reason"<textarea name="reason" required=true maxlength="2000" rows="2"></textarea></label>
                                    <button type="submit">"Replay after inspection"</button>
                                </form>
                            </details>
                        })}
                        {if dl.rows.is_empty() {
                            view! { <p class="empty">"The dead-letter queue is empty."</p> }.into_any()
                        } else {
                            view! {
                                <table>
                                    <thead><tr>
                                        <th scope="col">"Message"</th>
                                        <th scope="col">"Job"</th>
                                        <th scope="col">"Tenant"</th>
                                        <th scope="col">"Ledger state"</th>
                                        <th scope="col">"Dead since"</th>
                                        <th scope="col">"What replay would do"</th>
                                        {acting.then(|| view! { <th scope="col">"Act"</th> })}
                                    </tr></thead>
                                    <tbody>
                                        {dl.rows.into_iter().map(|r| view! {
                                            <tr>
                                                <td class="mono">{r.message_id.clone()}</td>
                                                <td>{match r.job_id {
                                                    Some(id) => view! { <a class="mono" href=format!("/jobs/{id}")>{id.clone()}</a> }.into_any(),
                                                    None => view! { <span>"not a job message"</span> }.into_any(),
                                                }}</td>
                                                <td>{or_dash(r.tenant)}</td>
                                                <td>{match r.state {
                                                    Some(s) => view! { <StateBadge state=s/> }.into_any(),
                                                    None => view! { <span>"—"</span> }.into_any(),
                                                }}</td>
                                                <td>{r.dead_since}</td>
                                                <td>{r.note}</td>
                                                {acting.then(|| view! {
                                                    <td>
                                                        <form method="post" action=format!("/dlq/{}/replay", r.message_id) class="drop">
                                                            <input type="hidden" name="csrf" value=csrf.clone()/>
                                                            <input name="reason" required=true maxlength="2000" size="14" placeholder="reason" aria-label="Why"/>
                                                            <button type="submit">"Replay"</button>
                                                            <button type="submit" class="danger" formaction=format!("/dlq/{}/drop", r.message_id)>"Drop"</button>
                                                        </form>
                                                    </td>
                                                })}
                                            </tr>
                                        }).collect_view()}
                                    </tbody>
                                </table>
                            }.into_any()
                        }}
                    }.into_any(),
                }
            })}
        </Suspense>
    }
}
