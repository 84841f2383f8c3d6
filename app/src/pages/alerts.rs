//! `/alerts`: the alert rules and their thresholds, the episodes firing now, and those that
//! cleared, each with its link to the page that shows it and what its notifications came to.

use leptos::prelude::*;
use leptos_meta::Title;

use super::console;
use crate::components::{ErrorBox, LiveRefresh};
use crate::console::AlertRow;

#[component]
fn Episodes(rows: Vec<AlertRow>, open: bool) -> impl IntoView {
    view! {
        <table class="alerts stack-narrow">
            <thead><tr>
                <th scope="col">"Alert"</th>
                <th scope="col">"Subject"</th>
                <th scope="col">"What"</th>
                <th scope="col">"Opened"</th>
                <th scope="col">{if open { "Firing for" } else { "Cleared" }}</th>
                <th scope="col">"Notified"</th>
            </tr></thead>
            <tbody>
                {rows.into_iter().map(|r| view! {
                    <tr class:firing=open>
                        <td data-label="Alert"><a href=r.path.clone()>{r.title}</a></td>
                        <td data-label="Subject" class="mono">{r.subject}</td>
                        <td data-label="What">{r.summary}</td>
                        <td data-label="Opened">{r.opened}</td>
                        <td data-label=if open { "Firing for" } else { "Cleared" }>{match r.cleared {
                            Some(at) => format!("{at} (after {})", r.lasted),
                            None => r.lasted,
                        }}</td>
                        <td data-label="Notified">{if r.notified.is_empty() {
                            view! { <span class="muted">"—"</span> }.into_any()
                        } else {
                            r.notified.into_iter().map(|n| view! { <span class="notified">{n}</span><br/> }).collect_view().into_any()
                        }}</td>
                    </tr>
                }).collect_view()}
            </tbody>
        </table>
    }
}

#[component]
pub fn AlertsPage() -> impl IntoView {
    let console = console();
    view! {
        <Title text="Alerts · Fenceline"/>
        <h1>"Alerts"</h1>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {Suspend::new(async move {
                match console.alerts().await {
                    Err(message) => view! { <ErrorBox message/> }.into_any(),
                    Ok(page) if page.restricted => view! {
                        <p class="notice">"Alerts speak of every tenant's jobs: only operators of every tenant see them."</p>
                    }.into_any(),
                    Ok(page) => {
                        let live = !page.open.is_empty();
                        view! {
                            <LiveRefresh live seconds=15/>
                            <p class="lead">
                                {format!("The rules below are judged every {} by the console's process. ", page.interval)}
                                {if page.webhook {
                                    "Each alert notifies the webhook once when it fires and once when it clears; \
                                     an alert that fires again soon after clearing is listed without notifying."
                                } else {
                                    "No webhook is set (FENCELINE_ALERT_WEBHOOK_URL): alerts are listed here only."
                                }}
                            </p>
                            <section aria-labelledby="firing">
                                <h2 id="firing">{format!("Firing now ({})", page.open.len())}</h2>
                                {if page.open.is_empty() {
                                    view! { <p class="muted">"Nothing fires now."</p> }.into_any()
                                } else {
                                    view! { <Episodes rows=page.open open=true/> }.into_any()
                                }}
                            </section>
                            <section aria-labelledby="history">
                                <h2 id="history">"Cleared"</h2>
                                {if page.closed.is_empty() {
                                    view! { <p class="muted">"No alert has cleared yet."</p> }.into_any()
                                } else {
                                    view! { <Episodes rows=page.closed open=false/> }.into_any()
                                }}
                            </section>
                            <section aria-labelledby="rules">
                                <h2 id="rules">"Rules"</h2>
                                <ul class="rules">
                                    {page.rules.into_iter().map(|(title, when)| view! { <li><b>{title}</b>": "{when}</li> }).collect_view()}
                                </ul>
                            </section>
                        }.into_any()
                    }
                }
            })}
        </Suspense>
    }
}
