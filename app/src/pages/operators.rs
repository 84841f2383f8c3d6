//! `/operators`: who may sign in, with their roles and tenants, and every API token; an admin
//! of every tenant adds, changes, disables, enables and resets operators and revokes tokens
//! here, each with a reason, each audited.

use leptos::prelude::*;
use leptos_meta::Title;

use super::console;
use crate::action::REASON_MAXLENGTH;
use crate::components::{or_dash, ErrorBox};
use crate::console::HttpStatus;

const ROLES: [&str; 3] = ["viewer", "operator", "admin"];

#[component]
fn RoleSelect(selected: String) -> impl IntoView {
    view! {
        <select name="role" aria-label="Role">
            {ROLES.iter().map(|r| {
                let chosen = selected == *r;
                view! { <option value=*r selected=chosen>{*r}</option> }
            }).collect_view()}
        </select>
    }
}

#[component]
pub fn OperatorsPage() -> impl IntoView {
    let visitor = super::visitor();
    if !visitor.manages_operators() {
        HttpStatus::set(403);
        return view! {
            <Title text="Operators · Fenceline"/>
            <h1>"Operators"</h1>
            <p class="notice">"Only an admin of every tenant manages operators and tokens."</p>
        }
        .into_any();
    }
    let you = visitor
        .operator
        .as_ref()
        .map(|o| o.name.clone())
        .unwrap_or_default();
    let csrf = visitor.csrf.clone();
    let console = console();
    view! {
        <Title text="Operators · Fenceline"/>
        <h1>"Operators"</h1>
        <p class="lead">
            "Who may sign in to the console, with their roles ("<b>"viewer"</b>" reads, "
            <b>"operator"</b>" also decides, replays and runs drills, "<b>"admin"</b>
            " also manages operators) and tenants, and the API tokens of tenants and operators. "
            "Every change names a reason and goes to the "<a href="/audit">"audit log"</a>"."
        </p>
        <details class="add-operator">
            <summary>"Add an operator…"</summary>
            <form method="post" action="/operators" class="stack">
                <input type="hidden" name="csrf" value=csrf.clone()/>
                <label>"Name"<input name="name" required=true maxlength="64" pattern="[A-Za-z0-9._@-]+" autocomplete="off"/></label>
                <label>"Role"<RoleSelect selected="viewer".to_owned()/></label>
                <label>"Tenants (comma-separated; empty for every tenant)"<input name="tenants" autocomplete="off"/></label>
                <label>"Password (at least 12 characters)"<input type="password" name="password" required=true minlength="12" maxlength="256" autocomplete="new-password"/></label>
                <label>"Reason"<input name="reason" required=true maxlength=REASON_MAXLENGTH/></label>
                <button type="submit">"Add"</button>
            </form>
        </details>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {Suspend::new(async move {
                match console.operators().await {
                    Err(message) => view! { <ErrorBox message/> }.into_any(),
                    Ok(page) => view! {
                        <h2>"Operators"</h2>
                        <table class="operators stack-narrow">
                            <thead><tr>
                                <th scope="col">"Name"</th><th scope="col">"Role"</th>
                                <th scope="col">"Tenants"</th><th scope="col">"Added"</th>
                                <th scope="col">"Disabled"</th><th scope="col">"Change"</th>
                            </tr></thead>
                            <tbody>
                                {page.operators.into_iter().map(|o| {
                                    let csrf = csrf.clone();
                                    let yours = o.name == you;
                                    let path = format!("/operators/{}", o.name);
                                    view! {
                                        <tr class:disabled=o.disabled.is_some()>
                                            <td data-label="Name" class="mono">{o.name.clone()}{yours.then(|| view! { <span class="muted">" (you)"</span> })}
                                                {o.sso.clone().map(|subject| view! { <br/><span class="muted sso-subject" title=subject>"company sign-in: role and tenants follow their groups"</span> })}</td>
                                            <td data-label="Role">{o.role.clone()}</td>
                                            <td data-label="Tenants">{o.tenants.clone().unwrap_or_else(|| "every tenant".into())}</td>
                                            <td data-label="Added">{o.created.clone()}</td>
                                            <td data-label="Disabled">{or_dash(o.disabled.clone())}</td>
                                            <td data-label="Change">
                                                {if yours {
                                                    view! { <span class="muted">"Another admin changes your own account."</span> }.into_any()
                                                } else {
                                                    view! {
                                                        <details class="change">
                                                            <summary>"Change…"</summary>
                                                            <form method="post" action=format!("{path}/role") class="stack">
                                                                <input type="hidden" name="csrf" value=csrf.clone()/>
                                                                <label>"Role"<RoleSelect selected=o.role.clone()/></label>
                                                                <label>"Tenants (empty: every tenant)"<input name="tenants" value=o.tenants.clone().unwrap_or_default() autocomplete="off"/></label>
                                                                <label>"Reason"<input name="reason" required=true maxlength=REASON_MAXLENGTH/></label>
                                                                <button type="submit">"Change role and tenants"</button>
                                                            </form>
                                                            <form method="post" action=format!("{path}/password") class="stack">
                                                                <input type="hidden" name="csrf" value=csrf.clone()/>
                                                                <label>"New password"<input type="password" name="password" required=true minlength="12" maxlength="256" autocomplete="new-password"/></label>
                                                                <label>"Reason"<input name="reason" required=true maxlength=REASON_MAXLENGTH/></label>
                                                                <button type="submit">"Reset the password"</button>
                                                            </form>
                                                            <form method="post" action=format!("{path}/{}", if o.disabled.is_some() { "enable" } else { "disable" }) class="stack">
                                                                <input type="hidden" name="csrf" value=csrf.clone()/>
                                                                <label>"Reason"<input name="reason" required=true maxlength=REASON_MAXLENGTH/></label>
                                                                {if o.disabled.is_some() {
                                                                    view! { <button type="submit">"Enable"</button> }.into_any()
                                                                } else {
                                                                    view! { <button type="submit" class="danger">"Disable (signs them out)"</button> }.into_any()
                                                                }}
                                                            </form>
                                                        </details>
                                                    }.into_any()
                                                }}
                                            </td>
                                        </tr>
                                    }
                                }).collect_view()}
                            </tbody>
                        </table>
                        <h2>"API tokens"</h2>
                        <p class="muted">
                            "A token is shown once, when it is made ("<code>"fenceline token add TENANT"</code>", "
                            <code>"fenceline operator token NAME"</code>"); only its hash is kept. Its id is the start of that hash."
                        </p>
                        {if page.tokens.is_empty() {
                            view! { <p class="empty">"No API token has been made."</p> }.into_any()
                        } else {
                            view! {
                                <table class="tokens stack-narrow">
                                    <thead><tr>
                                        <th scope="col">"Id"</th><th scope="col">"Acts as"</th><th scope="col">"Name"</th>
                                        <th scope="col">"Made"</th><th scope="col">"Revoked"</th><th scope="col">"Revoke"</th>
                                    </tr></thead>
                                    <tbody>
                                        {page.tokens.into_iter().map(|t| {
                                            let csrf = csrf.clone();
                                            view! {
                                                <tr class:disabled=t.revoked.is_some()>
                                                    <td data-label="Id" class="mono">{t.id.clone()}</td>
                                                    <td data-label="Acts as">{t.acts_as}</td>
                                                    <td data-label="Name">{t.name}</td>
                                                    <td data-label="Made">{t.created}</td>
                                                    <td data-label="Revoked">{or_dash(t.revoked.clone())}</td>
                                                    <td data-label="Revoke">{t.revoked.is_none().then(|| view! {
                                                        <form method="post" action=format!("/tokens/{}/revoke", t.id) class="drop">
                                                            <input type="hidden" name="csrf" value=csrf.clone()/>
                                                            <input name="reason" required=true maxlength=REASON_MAXLENGTH size="14" placeholder="reason" aria-label="Why"/>
                                                            <button type="submit" class="danger">"Revoke"</button>
                                                        </form>
                                                    })}</td>
                                                </tr>
                                            }
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
    .into_any()
}
