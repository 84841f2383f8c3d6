//! Console forms refused before anything was done, shown as console pages: a form whose token
//! does not match the session (or whose operator may not act), or one too large to read, gets
//! the console's frame with what went wrong, the text the operator typed (to copy back into a
//! fresh form) and a way back, never a bare text response.

use std::future::Future;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use fenceline_app::console::FormRefusal;

use super::error::capitalized;
use super::gate::RefusedForm;

/// The free-text fields of the console's forms, as the refusal page labels them. A pasted
/// result is an answer and is never shown back; tokens and passwords are not text one types.
const TYPED: [(&str, &str); 2] = [("reason", "Reason"), ("evidence", "Provider reference")];

/// Runs a console request; a form refused as [`RefusedForm`] (by the gate's checks), or too large to read, is
/// answered with the console's page for it, rendered by `render`.
pub(super) async fn as_pages<R, F>(
    render: R,
    max_bytes: usize,
    request: Request,
    next: Next,
) -> Response
where
    R: FnOnce(Request) -> F,
    F: Future<Output = Response>,
{
    if matches!(*request.method(), Method::GET | Method::HEAD) {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let back = back_from(parts.uri.path());
    let bytes = match axum::body::to_bytes(body, max_bytes).await {
        Ok(bytes) => bytes,
        Err(_) => {
            let refusal = FormRefusal {
                status: StatusCode::PAYLOAD_TOO_LARGE.as_u16(),
                title: "This form is too large".into(),
                message: format!(
                    "The console reads forms of at most {} KiB and this one was larger, so \
                     nothing was done. Shorten the text and send the form again.",
                    max_bytes / 1024
                ),
                typed: Vec::new(),
                back,
            };
            return page(render, parts, refusal, None).await;
        }
    };
    let typed = typed_text(&bytes);
    let response = next
        .run(Request::from_parts(parts.clone(), Body::from(bytes)))
        .await;
    if response.extensions().get::<RefusedForm>().is_none() {
        return response;
    }
    let status = response.status();
    let cookies: Vec<_> = response
        .headers()
        .get_all(header::SET_COOKIE)
        .iter()
        .cloned()
        .collect();
    let message = axum::body::to_bytes(response.into_body(), 64 * 1024)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_owned())
        .unwrap_or_default();
    let refusal = FormRefusal {
        status: status.as_u16(),
        title: "This form was refused".into(),
        message: capitalized(&message),
        typed,
        back,
    };
    page(render, parts, refusal, Some(cookies)).await
}

async fn page<R, F>(
    render: R,
    mut parts: axum::http::request::Parts,
    refusal: FormRefusal,
    cookies: Option<Vec<axum::http::HeaderValue>>,
) -> Response
where
    R: FnOnce(Request) -> F,
    F: Future<Output = Response>,
{
    let status = StatusCode::from_u16(refusal.status).unwrap_or(StatusCode::BAD_REQUEST);
    parts.method = Method::GET;
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.remove(header::CONTENT_TYPE);
    parts.extensions.insert(refusal);
    let mut response = render(Request::from_parts(parts, Body::empty())).await;
    *response.status_mut() = status;
    for cookie in cookies.into_iter().flatten() {
        response.headers_mut().append(header::SET_COOKIE, cookie);
    }
    response
}

/// The labelled free text a form carried, as typed.
fn typed_text(body: &[u8]) -> Vec<(String, String)> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_bytes(body).unwrap_or_default();
    TYPED
        .iter()
        .filter_map(|(name, label)| {
            let text = pairs.iter().find(|(k, _)| k == name)?.1.trim();
            (!text.is_empty()).then(|| ((*label).to_owned(), text.to_owned()))
        })
        .collect()
}

/// The page a form was sent from, as its action's address says.
fn back_from(path: &str) -> String {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    match segments.as_slice() {
        ["jobs", "cancel" | "rerun"] => "/jobs".into(),
        ["jobs", job, _] => format!("/jobs/{job}"),
        ["unknown", ..] => "/unknown".into(),
        ["dlq", ..] => "/dlq".into(),
        ["drills", ..] => "/drills".into(),
        _ => "/".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_form_leads_back_to_the_page_it_came_from() {
        assert_eq!(back_from("/jobs/job_1/decisions"), "/jobs/job_1");
        assert_eq!(back_from("/jobs/job_1/cancel"), "/jobs/job_1");
        assert_eq!(back_from("/jobs/cancel"), "/jobs");
        assert_eq!(back_from("/unknown/decisions"), "/unknown");
        assert_eq!(back_from("/dlq/m1/drop"), "/dlq");
        assert_eq!(back_from("/zone"), "/");
    }

    #[test]
    fn only_free_text_is_kept_never_a_pasted_result_or_a_token() {
        let typed = typed_text(b"csrf=abc&reason=seen+in+the+log&result=%7B%7D&evidence=req-1");
        assert_eq!(
            typed,
            vec![
                ("Reason".to_owned(), "seen in the log".to_owned()),
                ("Provider reference".to_owned(), "req-1".to_owned())
            ]
        );
    }
}
