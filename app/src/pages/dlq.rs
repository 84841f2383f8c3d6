//! `/dlq`: dead letters grouped by job, each with why it was dead-lettered, its receive count
//! and when it was first sent and moved, beside its job's ledger state.

use leptos::prelude::*;
use leptos_meta::Title;

use super::console;
use crate::action::REASON_MAXLENGTH;
use crate::components::{count, or_dash, ErrorBox, StateBadge};

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
                        {(can_replay && (!dl.groups.is_empty() || dl.queue.starts_with("sqs"))).then(|| view! {
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
                                    <label>"Reason"<textarea name="reason" required=true maxlength=REASON_MAXLENGTH rows="2"></textarea></label>
                                    <button type="submit">"Replay after inspection"</button>
                                </form>
                            </details>
                        })}
                        {if dl.groups.is_empty() {
                            view! { <p class="empty">"The dead-letter queue is empty."</p> }.into_any()
                        } else {
                            let letters: usize = dl.groups.iter().map(|g| g.letters.len()).sum();
                            view! {
                                <p class="muted">{format!("{} of {}.", count(letters as i64, "letter", "letters"), count(dl.groups.len() as i64, "job or message", "jobs or messages"))}</p>
                                <table class="dlq stack-narrow">
                                    <thead><tr>
                                        <th scope="col">"Message"</th>
                                        <th scope="col">"Why it was dead-lettered"</th>
                                        <th scope="col" class="num">"Receives"</th>
                                        <th scope="col">"First sent"</th>
                                        <th scope="col">"Dead-lettered"</th>
                                        {acting.then(|| view! { <th scope="col">"Act"</th> })}
                                    </tr></thead>
                                    {dl.groups.into_iter().map(|g| {
                                        let csrf = csrf.clone();
                                        let count = g.letters.len();
                                        view! {
                                            <tbody class="letter-group">
                                                <tr class="group">
                                                    <th scope="rowgroup" colspan=if acting { "6" } else { "5" }>
                                                        {match g.job_id {
                                                            Some(id) => view! { <a class="mono" href=format!("/jobs/{id}")>{id.clone()}</a> }.into_any(),
                                                            None => view! { <span>"A message that names no job"</span> }.into_any(),
                                                        }}
                                                        " "
                                                        {g.state.map(|s| view! { <StateBadge state=s/> })}
                                                        <span class="muted">
                                                            {format!(" · tenant {} · {} · replay: {}",
                                                                or_dash(g.tenant),
                                                                if count == 1 { "1 letter".to_owned() } else { format!("{count} letters") },
                                                                g.note)}
                                                        </span>
                                                    </th>
                                                </tr>
                                                {g.letters.into_iter().map(|r| view! {
                                                    <tr>
                                                        <td data-label="Message" class="mono">{r.message_id.clone()}</td>
                                                        <td data-label="Why">{r.reason}</td>
                                                        <td data-label="Receives" class="num">{r.receive_count}</td>
                                                        <td data-label="First sent">{r.first_seen}</td>
                                                        <td data-label="Dead-lettered">{r.last_seen}</td>
                                                        {acting.then(|| view! {
                                                            <td data-label="Act">
                                                                <form method="post" action=format!("/dlq/{}/replay", r.message_id) class="drop">
                                                                    <input type="hidden" name="csrf" value=csrf.clone()/>
                                                                    <input name="reason" required=true maxlength=REASON_MAXLENGTH size="14" placeholder="reason" aria-label="Why"/>
                                                                    <button type="submit">"Replay"</button>
                                                                    <button type="submit" class="danger" formaction=format!("/dlq/{}/drop", r.message_id)>"Drop"</button>
                                                                </form>
                                                            </td>
                                                        })}
                                                    </tr>
                                                }).collect_view()}
                                            </tbody>
                                        }
                                    }).collect_view()}
                                </table>
                            }.into_any()
                        }}
                    }.into_any(),
                }
            })}
        </Suspense>
    }
}
