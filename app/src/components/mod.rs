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
