//! `/login`: the only page a signed-out visitor sees. The form posts to `/login`, which checks
//! the password, starts a fresh session and goes back to `next` (the page that sent the
//! visitor here, with its `#e…` anchor when the browser kept it: `console.js` adds it).

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

use super::visitor;

/// `next` if it is a path on this site, else the overview.
pub fn local_path(next: Option<String>) -> String {
    next.as_deref()
        .and_then(on_this_site)
        .unwrap_or_else(|| "/".to_owned())
}

/// `next` read as a browser reads an address relative to this site's: the path, query and
/// fragment it lands on, if that is this site. Only a path qualifies, and none with a control
/// character (a browser drops tabs and line breaks first, which makes `//` of `/\t/`, and a
/// line break cannot go in a header) or a backslash (read as `/`). What is given back is the
/// address as the browser would send it, never beginning `//`.
fn on_this_site(next: &str) -> Option<String> {
    if !next.starts_with('/') || next.chars().any(|c| c.is_control() || c == '\\') {
        return None;
    }
    let site = url::Url::parse("http://console.invalid/").ok()?;
    let landed = site.join(next).ok()?;
    if landed.origin() != site.origin() {
        return None;
    }
    let path = &landed[url::Position::BeforePath..];
    (path.starts_with('/') && !path.starts_with("//")).then(|| path.to_owned())
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
                None => {
                    let sso_href = format!(
                        "/login/oidc?next={}",
                        next.replace('%', "%25").replace('&', "%26").replace('#', "%23").replace('+', "%2B")
                    );
                    view! {
                        {visitor.sso.then(|| view! {
                            <p><a class="button sso" href=sso_href.clone()>"Sign in with your company account"</a></p>
                        })}
                        {(!visitor.password_off).then(|| view! {
                            {visitor.sso.then(|| view! { <p class="muted">"Or with a local password:"</p> })}
                            <form method="post" action="/login" class="stack">
                                <input type="hidden" name="csrf" value=visitor.csrf.clone()/>
                                <input type="hidden" name="next" value=next.clone()/>
                                <label>"Name"<input name="name" autocomplete="username" required=true autofocus=true maxlength="64"/></label>
                                <label>"Password"<input name="password" type="password" autocomplete="current-password" required=true maxlength="256"/></label>
                                <button type="submit">"Sign in"</button>
                            </form>
                            <p class="muted">"Operators are added with "<code>"fenceline operator add"</code>"."</p>
                        })}
                    }.into_any()
                }
            }}
        </section>
    }
}

#[cfg(test)]
mod tests {
    use super::local_path;

    fn to(next: &str) -> String {
        local_path(Some(next.to_owned()))
    }

    #[test]
    fn a_path_of_this_site_is_kept_as_a_browser_sends_it() {
        assert_eq!(to("/jobs/job_1?after=2#e3"), "/jobs/job_1?after=2#e3");
        assert_eq!(to("/jobs?q=a b"), "/jobs?q=a%20b");
        assert_eq!(to("/a/../jobs"), "/jobs");
        assert_eq!(local_path(None), "/");
    }

    #[test]
    fn anything_a_browser_would_read_as_another_site_leads_to_the_overview() {
        for next in [
            "/\t/evil.example/x",
            "/\n/evil.example/x",
            "//evil.example/x",
            "/\\evil.example/x",
            "/.//evil.example/x",
            "/a/..//evil.example/x",
            "https://evil.example/",
            "evil.example",
            "",
        ] {
            assert_eq!(to(next), "/", "{next:?}");
        }
    }
}
