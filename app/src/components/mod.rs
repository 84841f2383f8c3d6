//! Reusable views: state badges, error boxes, definition rows.

use leptos::prelude::*;

/// A job state, coloured and always labelled in words (colour-blind safe).
#[component]
pub fn StateBadge(state: String) -> impl IntoView {
    let label = state.replace('_', " ");
    view! { <span class=format!("badge state-{state}")>{label}</span> }
}

/// A failure to load data, said plainly.
#[component]
pub fn ErrorBox(message: String) -> impl IntoView {
    view! {
        <div class="error-box" role="alert">
            <strong>"Could not load this page: "</strong>
            {message}
        </div>
    }
}

/// `n` and the noun, singular or plural.
pub fn count(n: i64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// `—` for a missing value.
pub fn or_dash(value: Option<String>) -> String {
    value.unwrap_or_else(|| "—".to_owned())
}

/// The outcome of the last action, once.
#[component]
pub fn FlashMessage(flash: Option<crate::console::Flash>) -> impl IntoView {
    flash.map(|f| {
        let (class, role) = if f.ok {
            ("flash flash-ok", "status")
        } else {
            ("flash flash-error", "alert")
        };
        view! { <div class=class role=role>{f.text}</div> }
    })
}

/// Whether the address asks live pages to hold still (`?refresh=off`).
pub fn refresh_paused() -> bool {
    leptos_router::hooks::use_query_map()
        .with_untracked(|q| q.get("refresh").as_deref() == Some("off"))
}

/// A live page's refresh, unless paused, with a visible control to pause or resume it. With
/// JavaScript, `console.js` updates the page in place every `seconds` (it fetches the page
/// and swaps its content, leaving a form being typed in alone); without it, a meta refresh
/// inside `<noscript>` reloads the page. Pause and Resume keep the rest of the address.
#[component]
pub fn LiveRefresh(live: bool, seconds: u32) -> impl IntoView {
    let paused = refresh_paused();
    let base = without_param("refresh");
    let joiner = if base.contains('?') { '&' } else { '?' };
    live.then(|| {
        if paused {
            view! {
                <p class="refresh muted">"Auto-refresh is paused. "<a href=base.clone()>"Resume"</a></p>
            }
            .into_any()
        } else {
            view! {
                <noscript><meta http-equiv="refresh" content=seconds.to_string()/></noscript>
                <p class="refresh muted" data-live-seconds=seconds.to_string()>
                    {format!("This page updates itself every {seconds} s while it is live. ")}
                    <a href=format!("{base}{joiner}refresh=off")>"Pause"</a>
                </p>
            }
            .into_any()
        }
    })
}

pub use crate::console::BadParameter;

/// The query parameters each page reads, besides `tz` and `refresh`, which every page takes
/// (`None`: no page answers the path, so it is a 404 whatever its parameters).
fn parameters_of(path: &str) -> Option<&'static [&'static str]> {
    Some(match path {
        "/" => &["window"],
        "/jobs" => &[
            "state",
            "tenant",
            "q",
            "before",
            "created_after",
            "created_before",
            "key_prefix",
            "worker",
            "error_code",
            "redelivered",
            "stale_rejected",
            "with_drills",
            "owner",
            "select",
        ],
        "/unknown" => &["after", "select"],
        "/audit" => &["operator", "action", "job", "within", "before", "drills"],
        "/login" => &["next", "said"],
        "/workers" | "/dlq" | "/drills" | "/api" => &[],
        p if p.starts_with("/jobs/") => &["after", "around", "open", "from", "to", "act"],
        p if p.starts_with("/drills/") => &[],
        _ => return None,
    })
}

/// The first parameter of this page's address that the page does not read: an address is
/// never silently half-understood, so `/jobs?limit=5` is a bad address, not all jobs.
pub fn unknown_parameter() -> Option<BadParameter> {
    let location = leptos_router::hooks::use_location();
    let path = location.pathname.get_untracked();
    let known = parameters_of(&path)?;
    let search = location.search.get_untracked();
    let pairs: Vec<(String, String)> =
        serde_urlencoded::from_str(search.trim_start_matches('?')).unwrap_or_default();
    pairs
        .into_iter()
        .find(|(name, _)| !known.contains(&name.as_str()) && name != "tz" && name != "refresh")
        .map(|(name, value)| {
            let takes = if known.is_empty() {
                "it takes only tz and refresh".to_owned()
            } else {
                format!("it takes {}, tz and refresh", known.join(", "))
            };
            BadParameter::unknown(&name, &value, &takes)
        })
}

/// The page of a refused form: what went wrong, what was typed (to copy), and the way back.
#[component]
pub fn FormRefusalPage(refusal: crate::console::FormRefusal) -> impl IntoView {
    crate::console::HttpStatus::set(refusal.status);
    let kept = !refusal.typed.is_empty();
    view! {
        <h1>{refusal.title}</h1>
        <p class="error-box" role="alert">{refusal.message}</p>
        {kept.then(|| view! {
            <section aria-labelledby="typed" class="typed">
                <h2 id="typed">"What you typed"</h2>
                <p class="muted">"Nothing was done. Copy your text into the form again from the page."</p>
                <dl class="facts">
                    {refusal.typed.into_iter().map(|(label, text)| view! {
                        <dt>{label}</dt>
                        <dd><textarea readonly rows="3" cols="60">{text}</textarea></dd>
                    }).collect_view()}
                </dl>
            </section>
        })}
        <p><a href=refusal.back>"Back to the page"</a></p>
    }
}

/// The 400 page for a bad parameter, with a way back to the page without it.
#[component]
pub fn BadParameterPage(bad: BadParameter, back: String) -> impl IntoView {
    crate::console::HttpStatus::set(400);
    view! {
        <h1>"This address has a bad parameter"</h1>
        <p class="error-box" role="alert">
            <code>{format!("{}={}", bad.name, bad.value)}</code>
            {if bad.unknown {
                format!(" cannot be used: this page has no parameter {} ({}).", bad.name, bad.expected)
            } else {
                format!(" cannot be used: {} must be {}.", bad.name, bad.expected)
            }}
        </p>
        <p><a href=back>"Open the page without it"</a></p>
    }
}

/// This page's path and query, with `name` set to `value` (or removed when `None`), and
/// without `refresh`: what a link to the same view needs.
pub fn this_page_with(name: &str, value: Option<&str>) -> String {
    let location = leptos_router::hooks::use_location();
    let path = location.pathname.get_untracked();
    let search = location.search.get_untracked();
    let mut pairs: Vec<(String, String)> =
        serde_urlencoded::from_str(search.trim_start_matches('?')).unwrap_or_default();
    pairs.retain(|(k, _)| k != name && k != "refresh");
    if let Some(value) = value {
        pairs.push((name.to_owned(), value.to_owned()));
    }
    match serde_urlencoded::to_string(&pairs) {
        Ok(query) if !query.is_empty() => format!("{path}?{query}"),
        _ => path,
    }
}

/// This page's address without the parameter `name`.
pub fn without_param(name: &str) -> String {
    this_page_with(name, None)
}

/// Zones offered first when choosing one; any IANA name is accepted.
const COMMON_ZONES: &[&str] = &[
    "UTC",
    "America/Los_Angeles",
    "America/Denver",
    "America/Chicago",
    "America/New_York",
    "America/Sao_Paulo",
    "Europe/London",
    "Europe/Dublin",
    "Europe/Lisbon",
    "Europe/Paris",
    "Europe/Berlin",
    "Europe/Madrid",
    "Europe/Amsterdam",
    "Europe/Stockholm",
    "Europe/Warsaw",
    "Europe/Helsinki",
    "Europe/Istanbul",
    "Africa/Johannesburg",
    "Asia/Dubai",
    "Asia/Kolkata",
    "Asia/Singapore",
    "Asia/Shanghai",
    "Asia/Tokyo",
    "Asia/Seoul",
    "Australia/Sydney",
    "Pacific/Auckland",
];

/// The zone every time on the page is shown in, and a form to choose another for the
/// session (a text field with suggestions; with JavaScript, a button for the browser's own).
#[component]
pub fn ZonePicker(zone: String, csrf: String) -> impl IntoView {
    let next = without_param("tz");
    view! {
        <details class="zone">
            <summary>"Times in "<strong>{zone.clone()}</strong></summary>
            <form method="post" action="/zone" class="zone-form">
                <input type="hidden" name="csrf" value=csrf/>
                <input type="hidden" name="next" value=next/>
                <label>"Time zone (IANA name)"
                    <input name="tz" list="zones" value=zone required=true size="20" autocomplete="off" spellcheck="false"/>
                </label>
                <datalist id="zones">
                    {COMMON_ZONES.iter().map(|z| view! { <option value=*z></option> }).collect_view()}
                </datalist>
                <button type="submit">"Show times in this zone"</button>
                <button type="button" class="zone-local" hidden=true>"Use this browser's zone"</button>
            </form>
        </details>
    }
}

/// The page's own address, absolute, ready to paste into an incident review: a read-only
/// field to select (no script needed) and, with JavaScript, a Copy button. It names the zone
/// the page is shown in, so it opens the same view elsewhere.
#[component]
pub fn ShareLink() -> impl IntoView {
    let visitor = crate::console::visitor();
    let href = format!(
        "{}{}",
        visitor.origin,
        this_page_with("tz", Some(&visitor.zone))
    );
    view! {
        <p class="share">
            <label>"Link to share "
                <input name="share" type="url" readonly=true value=href size="60"/>
            </label>
            " "
            <button type="button" class="copy-link" data-copy="share" hidden=true>"Copy"</button>
        </p>
    }
}

/// Per tenant, what waits in the ledger for its turn to be sent and what runs: the fair
/// queue's state, each tenant linked to its jobs.
#[component]
pub fn TenantFlowTable(rows: Vec<crate::console::TenantFlowRow>) -> impl IntoView {
    if rows.is_empty() {
        return view! {
            <p class="muted">"No tenant has jobs waiting to be sent or running."</p>
        }
        .into_any();
    }
    let weighted = rows.iter().any(|r| r.weight != 1 || r.cap.is_some());
    view! {
        <table class="tenant-flow stack-narrow">
            <thead><tr>
                <th scope="col">"Tenant"</th>
                <th scope="col" class="num">"Waiting to be sent"</th>
                <th scope="col" class="num">"Of which due"</th>
                <th scope="col" class="num">"Running"</th>
                {weighted.then(|| view! {
                    <th scope="col" class="num">"Weight"</th>
                    <th scope="col" class="num">"Cap"</th>
                })}
            </tr></thead>
            <tbody>
                {rows.into_iter().map(|r| {
                    let href = match serde_urlencoded::to_string([("tenant", r.tenant.as_str())]) {
                        Ok(query) => format!("/jobs?{query}"),
                        Err(_) => "/jobs".to_owned(),
                    };
                    view! {
                        <tr>
                            <td data-label="Tenant"><a href=href>{r.tenant.clone()}</a></td>
                            <td data-label="Waiting" class="num">{r.waiting}</td>
                            <td data-label="Due now" class="num">{r.due}</td>
                            <td data-label="Running" class="num">{r.running}</td>
                            {weighted.then(|| view! {
                                <td data-label="Weight" class="num">{r.weight}</td>
                                <td data-label="Cap" class="num">{or_dash(r.cap.map(|c| c.to_string()))}</td>
                            })}
                        </tr>
                    }
                }).collect_view()}
            </tbody>
        </table>
    }
    .into_any()
}
