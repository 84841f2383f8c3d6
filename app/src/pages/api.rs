//! `/api`: the HTTP API's reference, read from its OpenAPI document, beside the document.

use leptos::prelude::*;
use leptos_meta::Title;

use crate::console::{ApiField, ApiReference};

/// A table of parameters or fields; labelled rows on a phone.
#[component]
fn Fields(fields: Vec<ApiField>, places: bool) -> impl IntoView {
    view! {
        <table class="api-fields stack-narrow">
            <thead><tr>
                <th scope="col">"Name"</th>
                {places.then(|| view! { <th scope="col">"In"</th> })}
                <th scope="col">"Type"</th>
                <th scope="col">"Required"</th>
                <th scope="col">"Description"</th>
            </tr></thead>
            <tbody>
                {fields.into_iter().map(|f| view! {
                    <tr>
                        <td data-label="Name"><code>{f.name}</code></td>
                        {places.then(|| view! { <td data-label="In">{f.place.clone()}</td> })}
                        <td data-label="Type">{type_link(&f.kind)}</td>
                        <td data-label="Required">{if f.required { "yes" } else { "no" }}</td>
                        <td data-label="Description">{prose(&f.description)}</td>
                    </tr>
                }).collect_view()}
            </tbody>
        </table>
    }
}

/// Documentation text, its `code` spans as code.
fn prose(text: &str) -> impl IntoView {
    text.split('`')
        .enumerate()
        .filter(|(_, part)| !part.is_empty())
        .map(|(i, part)| {
            if i % 2 == 1 {
                view! { <code>{part.to_owned()}</code> }.into_any()
            } else {
                view! { <span>{part.to_owned()}</span> }.into_any()
            }
        })
        .collect_view()
}

/// A type, its schema names linked to their sections.
fn type_link(kind: &str) -> impl IntoView {
    kind.split(' ')
        .map(|word| {
            if word.chars().next().is_some_and(char::is_uppercase) {
                view! { <a href=format!("#schema-{word}")>{word.to_owned()}</a>" " }.into_any()
            } else {
                view! { <span>{format!("{word} ")}</span> }.into_any()
            }
        })
        .collect_view()
}

#[component]
pub fn ApiPage() -> impl IntoView {
    let reference = use_context::<std::sync::Arc<ApiReference>>()
        .map(|shared| ApiReference::clone(&shared))
        .unwrap_or_default();
    let base = reference.base.clone();
    view! {
        <Title text="API reference · Fenceline"/>
        <h1>{format!("{} {} reference", reference.title, reference.version)}</h1>
        <p>{reference.description}</p>
        <p>
            "Every path below starts with "<code>{base.clone()}</code>". Send "
            <code>"Authorization: Bearer <token>"</code>
            ": a tenant's token ("<code>"fenceline token add <tenant>"</code>") submits and reads that tenant's jobs; an operator token ("
            <code>"fenceline operator token <name>"</code>") reads the operator's tenants and acts as the operator's role allows. Bodies are JSON; an error is "
            <a href="#schema-Error">"Error"</a>" with a code and a message. "
            "The machine-readable document: "<a href=format!("{base}/openapi.json")>"OpenAPI 3.1 (JSON)"</a>"."
        </p>
        <nav aria-label="Endpoints" class="api-index">
            <ul>
                {reference.endpoints.iter().map(|e| view! {
                    <li><a href=format!("#{}", anchor(&e.method, &e.path))><code>{format!("{} {}", e.method, e.path)}</code></a>" — "{prose(&e.summary)}</li>
                }).collect_view()}
            </ul>
        </nav>
        <h2>"Endpoints"</h2>
        {reference.endpoints.into_iter().map(|e| {
            let id = anchor(&e.method, &e.path);
            let label = id.clone();
            view! {
                <section class="api-endpoint" aria-labelledby=label>
                    <h3 id=id><code>{format!("{} {}{}", e.method, base, e.path)}</code></h3>
                    <p>{prose(&e.summary)}</p>
                    {(!e.parameters.is_empty()).then(|| view! {
                        <h4>"Parameters"</h4>
                        <Fields fields=e.parameters places=true/>
                    })}
                    {e.body.map(|body| view! {
                        <p>"Request body: "<a href=format!("#schema-{body}")>{body.clone()}</a></p>
                    })}
                    <h4>"Answers"</h4>
                    <table class="api-responses stack-narrow">
                        <thead><tr><th scope="col">"Status"</th><th scope="col">"Meaning"</th><th scope="col">"Body"</th></tr></thead>
                        <tbody>
                            {e.responses.into_iter().map(|(code, meaning, body)| view! {
                                <tr>
                                    <td data-label="Status" class="status">{code}</td>
                                    <td data-label="Meaning">{prose(&meaning)}</td>
                                    <td data-label="Body">{body.map(|b| view! { <a href=format!("#schema-{b}")>{b.clone()}</a> })}</td>
                                </tr>
                            }).collect_view()}
                        </tbody>
                    </table>
                </section>
            }
        }).collect_view()}
        <h2>"Schemas"</h2>
        {reference.schemas.into_iter().map(|s| {
            let id = format!("schema-{}", s.name);
            let label = id.clone();
            view! {
                <section class="api-schema" aria-labelledby=label>
                    <h3 id=id>{s.name}</h3>
                    {(!s.description.is_empty()).then(|| view! { <p>{prose(&s.description)}</p> })}
                    {(!s.values.is_empty()).then(|| view! {
                        <p>"One of: "{s.values.iter().map(|v| view! { <code>{v.clone()}</code>" " }).collect_view()}</p>
                    })}
                    {(!s.fields.is_empty()).then(|| view! { <Fields fields=s.fields places=false/> })}
                </section>
            }
        }).collect_view()}
    }
}

/// An endpoint's anchor: `post-jobs-job_id-cancel`.
fn anchor(method: &str, path: &str) -> String {
    let path: String = path
        .chars()
        .filter(|c| !matches!(c, '{' | '}'))
        .map(|c| if c == '/' { '-' } else { c })
        .collect();
    format!("{}{}", method.to_lowercase(), path)
}
