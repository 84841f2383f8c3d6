//! Traces: OpenTelemetry spans sent over OTLP/HTTP (protobuf), on when the standard
//! `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set, off otherwise.
//!
//! The spans are `tracing` spans of the target [`TARGET`], turned into OpenTelemetry spans by
//! `tracing-opentelemetry`: one per API request, delivery examination, provider attempt,
//! lease renewal and fenced ledger transition. Their attributes are identifiers and counts
//! (`job_id`, `tenant`, `epoch`, `attempt`, the timeline's `event_seqs`), never an input, an
//! answer, a receipt handle or a token.
//!
//! A job keeps the trace context it was submitted in (`job_traces`, attempt 0): the submitting
//! service's own `traceparent` when tracing is off here, or this API request's span when it is
//! on. Every delivery of the job continues that trace, and each provider attempt keeps its own
//! span's context beside it (attempt `n`) for the job page's trace links.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The target of every span meant for traces; logs leave it out.
pub const TARGET: &str = "fenceline::trace";

/// The variables that switch traces on.
const ENDPOINT_VARS: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
];

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Whether this process sends traces: only then does a worker look up a job's trace context.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Whether the environment asks for traces (an OTLP endpoint set, the SDK not disabled).
pub fn asked() -> bool {
    let disabled = std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.eq_ignore_ascii_case("true"))
        || std::env::var("OTEL_TRACES_EXPORTER").is_ok_and(|v| v == "none");
    !disabled
        && ENDPOINT_VARS
            .iter()
            .any(|var| std::env::var(var).is_ok_and(|v| !v.trim().is_empty()))
}

/// Where spans go, as the exporter resolves it: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` as given,
/// else `OTEL_EXPORTER_OTLP_ENDPOINT` with `/v1/traces`; `None` while traces are off.
pub fn traces_endpoint() -> Option<String> {
    if !asked() {
        return None;
    }
    let set = |var: &str| std::env::var(var).ok().filter(|v| !v.trim().is_empty());
    set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").or_else(|| {
        set("OTEL_EXPORTER_OTLP_ENDPOINT")
            .map(|base| format!("{}/v1/traces", base.trim().trim_end_matches('/')))
    })
}

/// The headers every export carries (`OTEL_EXPORTER_OTLP_TRACES_HEADERS`, else
/// `OTEL_EXPORTER_OTLP_HEADERS`: `name=value` pairs, comma-separated).
pub fn export_headers() -> Vec<(String, String)> {
    let raw = std::env::var("OTEL_EXPORTER_OTLP_TRACES_HEADERS")
        .or_else(|_| std::env::var("OTEL_EXPORTER_OTLP_HEADERS"))
        .unwrap_or_default();
    raw.split(',')
        .filter_map(|pair| pair.split_once('='))
        .map(|(name, value)| (percent_decoded(name.trim()), percent_decoded(value.trim())))
        .filter(|(name, _)| !name.is_empty())
        .collect()
}

/// `%XX` escapes decoded, as the exporter reads `OTEL_EXPORTER_OTLP_HEADERS`.
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let pair = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
            if let Some(b) = pair.and_then(|p| u8::from_str_radix(p, 16).ok()) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// An endpoint as it may be printed: without credentials in it or a query.
pub fn shown_endpoint(endpoint: &str) -> String {
    let without_query = endpoint.split(['?', '#']).next().unwrap_or_default();
    match without_query.split_once("://") {
        Some((scheme, rest)) => {
            let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
            let host = host.rsplit('@').next().unwrap_or(host);
            format!("{scheme}://{host}{path}")
        }
        None => without_query.to_owned(),
    }
}

/// The tracer provider while traces are on: flushes what is left when the process stops.
pub struct Traces {
    provider: SdkTracerProvider,
}

impl Traces {
    /// Sends the spans still waiting, within a few seconds.
    pub fn shutdown(self) {
        if let Err(error) = self.provider.shutdown_with_timeout(Duration::from_secs(5)) {
            eprintln!("warning: the last traces were not sent: {error}");
        }
    }
}

/// The exporter and the provider, when the environment asks for traces; the `tracing` layer
/// that feeds it comes from [`layer`]. Must run inside the Tokio runtime: the exporter's
/// requests go out on it.
pub fn start() -> anyhow::Result<Option<Traces>> {
    use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
    if !asked() {
        return Ok(None);
    }
    let timeout = std::env::var("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT")
        .or_else(|_| std::env::var("OTEL_EXPORTER_OTLP_TIMEOUT"))
        .ok()
        .and_then(|ms| ms.trim().parse::<u64>().ok())
        .map_or(Duration::from_secs(10), Duration::from_millis);
    let client = Sender::new(timeout)?;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_timeout(timeout)
        .with_http_client(client)
        .build()
        .map_err(|e| anyhow::anyhow!("OTLP traces: {e}"))?;
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name(
            std::env::var("OTEL_SERVICE_NAME").unwrap_or_else(|_| "fenceline".to_owned()),
        )
        .build();
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build();
    ENABLED.store(true, Ordering::Relaxed);
    Ok(Some(Traces { provider }))
}

/// The `tracing` layer that turns [`TARGET`] spans into OpenTelemetry spans.
pub fn layer<S>(traces: &Traces) -> impl tracing_subscriber::Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    use tracing_subscriber::Layer;
    let tracer = traces.provider.tracer("fenceline");
    tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_filter(
            tracing_subscriber::filter::Targets::new().with_target(TARGET, tracing::Level::TRACE),
        )
}

/// The exporter's HTTP client: the service's own `reqwest`, its requests run on the Tokio
/// runtime (the batch exporter calls from a thread of its own).
#[derive(Debug)]
struct Sender {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

impl Sender {
    fn new(timeout: Duration) -> anyhow::Result<Sender> {
        Ok(Sender {
            client: reqwest::Client::builder().timeout(timeout).build()?,
            runtime: tokio::runtime::Handle::try_current()?,
        })
    }
}

#[async_trait::async_trait]
impl HttpClient for Sender {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        let sent = self.runtime.spawn(async move {
            let (parts, body) = request.into_parts();
            let answer = client
                .request(parts.method, parts.uri.to_string())
                .headers(parts.headers)
                .body(body)
                .send()
                .await?;
            let status = answer.status();
            let headers = answer.headers().clone();
            let body = answer.bytes().await?;
            Ok::<_, reqwest::Error>((status, headers, body))
        });
        let (status, headers, body) = sent.await??;
        let mut response = Response::builder().status(status);
        if let Some(h) = response.headers_mut() {
            *h = headers;
        }
        Ok(response.body(body)?)
    }
}

/// A `traceparent` header's value, if it is one (W3C Trace Context, version 00): anything else
/// is not kept.
pub fn valid_traceparent(value: &str) -> Option<&str> {
    let parts: Vec<&str> = value.trim().split('-').collect();
    // Lowercase only, as the W3C format asks (and the propagator reads).
    let hex = |s: &str, n: usize| {
        s.len() == n && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    };
    let zero = |s: &str| s.bytes().all(|b| b == b'0');
    match parts.as_slice() {
        [version, trace, span, flags]
            if hex(version, 2)
                && *version != "ff"
                && hex(trace, 32)
                && !zero(trace)
                && hex(span, 16)
                && !zero(span)
                && hex(flags, 2) =>
        {
            Some(value.trim())
        }
        _ => None,
    }
}

/// The trace id and span id of a `traceparent`.
pub fn ids(traceparent: &str) -> Option<(&str, &str)> {
    let valid = valid_traceparent(traceparent)?;
    let mut parts = valid.split('-').skip(1);
    Some((parts.next()?, parts.next()?))
}

struct One<'a>(Option<&'a str>);

impl Extractor for One<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        (key == "traceparent").then_some(self.0).flatten()
    }
    fn keys(&self) -> Vec<&str> {
        vec!["traceparent"]
    }
}

struct Out(Option<String>);

impl Injector for Out {
    fn set(&mut self, key: &str, value: String) {
        if key == "traceparent" {
            self.0 = Some(value);
        }
    }
}

/// Makes `span` a child of the span `traceparent` names (before it is first entered).
pub fn continue_from(span: &tracing::Span, traceparent: Option<&str>) {
    let Some(traceparent) = traceparent.and_then(valid_traceparent) else {
        return;
    };
    let parent = TraceContextPropagator::new().extract(&One(Some(traceparent)));
    if parent.span().span_context().is_valid() {
        let _ = span.set_parent(parent);
    }
}

/// The `traceparent` of `span`, when it is sent as part of a trace.
pub fn traceparent_of(span: &tracing::Span) -> Option<String> {
    if !enabled() {
        return None;
    }
    let cx = span.context();
    if !cx.span().span_context().is_valid() {
        return None;
    }
    let mut out = Out(None);
    TraceContextPropagator::new().inject_context(&cx, &mut out);
    out.0
}

/// Records the timeline's sequence numbers a fenced write put on `span`, when it is a
/// transition's span.
pub fn wrote(span: &tracing::Span, epoch: i64, seqs: impl Iterator<Item = i64>) {
    if span.is_disabled()
        || span
            .metadata()
            .is_none_or(|m| m.name() != "ledger.transition")
    {
        return;
    }
    let seqs: Vec<String> = seqs.map(|s| s.to_string()).collect();
    span.record("epoch", epoch);
    if !seqs.is_empty() {
        span.record("event_seqs", seqs.join(",").as_str());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_are_decoded_and_endpoints_printed_without_credentials() {
        assert_eq!(percent_decoded("Basic%20abc%3D"), "Basic abc=");
        assert_eq!(percent_decoded("100%"), "100%");
        assert_eq!(
            shown_endpoint("https://user:pw@otel.example:4318/v1/traces?key=secret"),
            "https://otel.example:4318/v1/traces"
        );
    }

    #[test]
    fn only_a_well_formed_traceparent_is_kept() {
        let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(valid_traceparent(good), Some(good));
        assert_eq!(
            ids(good),
            Some(("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"))
        );
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473z-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01<script>",
        ] {
            assert_eq!(valid_traceparent(bad), None, "{bad}");
        }
    }
}
