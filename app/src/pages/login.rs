//! `/login`: the only page a signed-out visitor sees. The form posts to `/login`, which checks
//! the password, starts a fresh session and goes back to `next` (the page that sent the
//! visitor here, with its `#e…` anchor when the browser kept it: `console.js` adds it).

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

use super::visitor;

/// `next` if it is a path on this site, else the overview.
pub fn local_path(next: Option<String>) -> String {
    next.filter(|n| n.starts_with('/') && !n.starts_with("//") && !n.contains('\\'))
        .unwrap_or_else(|| "/".to_owned())
}

#[component]
pub fn LoginPage() -> impl IntoView {
    let query = use_query_map();
    let next = local_path(query.with_untracked(|q| q.get("next")));
    let visitor = visitor();
    view! {
        <Title text="Sign in · Fenceline"/>
        <section class="signin" aria-labelledby="signin">
            <h1 id="signin">"Sign in"</h1>
            {match visitor.operator {
                Some(op) => view! {
                    <p>{format!("You are signed in as {} ({}).", op.name, op.role)}" "<a href=next>"Continue"</a></p>
                }.into_any(),
                None => view! {
                    <form method="post" action="/login" class="stack">
                        <input type="hidden" name="csrf" value=visitor.csrf/>
                        <input type="hidden" name="next" value=next/>
                        <label>"Name"<input name="name" autocomplete="username" required=true autofocus=true maxlength="64"/></label>
                        <label>"Password"<input name="password" type="password" autocomplete="current-password" required=true maxlength="256"/></label>
                        <button type="submit">"Sign in"</button>
                    </form>
                    <p class="muted">"Operators are added with "<code>"fenceline operator add"</code>"."</p>
                }.into_any(),
            }}
        </section>
    }
}
