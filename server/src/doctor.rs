//! `fenceline doctor`: whether a deployment is wired right, read from the settings as `serve`
//! and `worker` read them. One finding per check, each ok, a warning or a failure with its
//! cause: the database and its migrations, the clock against the database's, an operator to
//! sign in, the transport timings, the queue (and, on SQS, its dead-letter queue and what this
//! identity may do, probed on a queue of doctor's own: never a message in the jobs queue),
//! each provider with one cheap request, and the public URL.
//!
//! Never prints a key, a password or a database URL's credentials.

use std::fmt;
use std::time::Duration;

use crate::ledger::Ledger;
use crate::settings::{ProviderKind, ProviderSettings, QueueKind, Settings};

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Ok,
    Warn,
    Fail,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            Verdict::Ok => "ok",
            Verdict::Warn => "warn",
            Verdict::Fail => "FAIL",
        })
    }
}

/// One check's finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub check: String,
    pub verdict: Verdict,
    pub detail: String,
}

fn finding(check: &str, verdict: Verdict, detail: impl Into<String>) -> Finding {
    Finding {
        check: check.to_owned(),
        verdict,
        detail: detail.into(),
    }
}

/// How long any one request of a check may take.
const BOUND: Duration = Duration::from_secs(10);

/// Every check, in order. Checks that need the database are skipped (and say so) when it
/// does not answer.
pub async fn examine(settings: &Settings) -> Vec<Finding> {
    let mut found = Vec::new();
    let ledger = database(settings, &mut found).await;
    if let Some(ledger) = &ledger {
        ledger_checks(ledger, &mut found).await;
    }
    found.push(timings(settings));
    queue(settings, &mut found).await;
    found.push(provider("provider", &settings.provider).await);
    for fallback in &settings.provider.fallbacks {
        let name = format!("fallback {}", fallback.kind_name());
        found.push(provider(&name, fallback).await);
    }
    found.push(public_url(settings.http.public_url.as_deref()));
    found.push(sign_in(settings).await);
    found.push(traces().await);
    if let Some(ledger) = ledger {
        ledger.close().await;
    }
    found
}

async fn database(settings: &Settings, found: &mut Vec<Finding>) -> Option<Ledger> {
    let backend = settings.ledger.backend.as_str();
    // Opening a SQLite file that is not there would make an empty one: say so instead.
    if let Some(path) = sqlite_path(&settings.ledger.url) {
        if !std::path::Path::new(&path).exists() {
            found.push(finding(
                "database",
                Verdict::Fail,
                format!(
                    "no SQLite ledger at {path} (`fenceline serve` or `fenceline migrate` \
                     makes it; or name the deployment's DATABASE_URL)"
                ),
            ));
            return None;
        }
    }
    let connected = tokio::time::timeout(
        BOUND,
        Ledger::connect(&settings.ledger.url, &settings.ledger.options),
    )
    .await;
    let ledger = match connected {
        Ok(Ok(ledger)) => ledger,
        Ok(Err(e)) => {
            found.push(finding(
                "database",
                Verdict::Fail,
                format!("cannot open the {backend} ledger: {e}"),
            ));
            return None;
        }
        Err(_) => {
            found.push(finding(
                "database",
                Verdict::Fail,
                format!("the {backend} database did not answer within {BOUND:?}"),
            ));
            return None;
        }
    };
    match tokio::time::timeout(BOUND, ledger.ping()).await {
        Ok(Ok(())) => {
            found.push(finding(
                "database",
                Verdict::Ok,
                format!("the {backend} ledger answers"),
            ));
            Some(ledger)
        }
        Ok(Err(e)) => {
            found.push(finding(
                "database",
                Verdict::Fail,
                format!("the {backend} database does not answer: {e}"),
            ));
            None
        }
        Err(_) => {
            found.push(finding(
                "database",
                Verdict::Fail,
                format!("the {backend} database did not answer within {BOUND:?}"),
            ));
            None
        }
    }
}

/// The file a `sqlite:` URL names (`None` for an in-memory database or another backend).
fn sqlite_path(url: &str) -> Option<String> {
    let rest = url.strip_prefix("sqlite:")?;
    let path = rest.trim_start_matches("//");
    let path = path.split('?').next().unwrap_or_default();
    (!path.is_empty() && path != ":memory:").then(|| path.to_owned())
}

async fn ledger_checks(ledger: &Ledger, found: &mut Vec<Finding>) {
    let pending = ledger.pending_migrations().await;
    let migrated = matches!(&pending, Ok(p) if p.is_empty());
    found.push(match pending {
        Ok(pending) if pending.is_empty() => {
            finding("migrations", Verdict::Ok, "every migration is applied")
        }
        Ok(pending) => finding(
            "migrations",
            Verdict::Fail,
            format!(
                "{} pending: {} (`fenceline migrate`, or start `serve`/`worker`, applies them)",
                pending.len(),
                pending.join(", ")
            ),
        ),
        Err(e) => finding(
            "migrations",
            Verdict::Fail,
            format!("cannot read them: {e}"),
        ),
    });
    // The clock and the operators are read through the schema the migrations make.
    if !migrated {
        return;
    }
    found.push(match ledger.now_us().await {
        Ok(db_us) => {
            let here_us = chrono::Utc::now().timestamp_micros();
            let skew = Duration::from_micros((here_us - db_us).unsigned_abs());
            let said = format!("{} ms between this host and the database", skew.as_millis());
            // Leases and deadlines count on the database's clock; the worker's own deadlines
            // on this host's, from the database's answers.
            if skew > Duration::from_secs(5) {
                finding("clock", Verdict::Fail, said)
            } else if skew > Duration::from_secs(1) {
                finding("clock", Verdict::Warn, said)
            } else {
                finding("clock", Verdict::Ok, said)
            }
        }
        Err(e) => finding(
            "clock",
            Verdict::Fail,
            format!("cannot read the database's: {e}"),
        ),
    });
    found.push(match ledger.list_operators().await {
        Ok(operators) => {
            let enabled = operators.iter().filter(|o| !o.is_disabled()).count();
            // Only an admin of every tenant manages operators.
            let admins = operators
                .iter()
                .filter(|o| {
                    !o.is_disabled()
                        && o.role == crate::operators::Role::Admin
                        && o.tenants.is_none()
                })
                .count();
            match (enabled, admins) {
                (0, _) => finding(
                    "operators",
                    Verdict::Fail,
                    "no operator can sign in: `fenceline operator add NAME --role admin`",
                ),
                (n, 0) => finding(
                    "operators",
                    Verdict::Warn,
                    format!("{n} can sign in, no admin of every tenant among them"),
                ),
                (n, a) => finding(
                    "operators",
                    Verdict::Ok,
                    format!("{n} can sign in, {a} of them admin of every tenant"),
                ),
            }
        }
        Err(e) => finding("operators", Verdict::Fail, format!("cannot list them: {e}")),
    });
}

/// The transport rules' clocks: a renewal, with its margin, comes before the visibility and
/// the lease it renews run out.
fn timings(settings: &Settings) -> Finding {
    let t = &settings.worker.timings;
    let renewed_by = t.heartbeat + t.margin;
    let said = format!(
        "visibility {:?}, lease {:?}, renewed every {:?} with {:?} of margin",
        t.visibility, t.lease, t.heartbeat, t.margin
    );
    if renewed_by >= t.visibility || renewed_by >= t.lease {
        finding(
            "timings",
            Verdict::Fail,
            format!("{said}: a renewal would come after what it renews runs out"),
        )
    } else {
        finding("timings", Verdict::Ok, said)
    }
}

async fn queue(settings: &Settings, found: &mut Vec<Finding>) {
    let q = &settings.queue;
    match q.kind {
        QueueKind::Embedded => found.push(finding(
            "queue",
            Verdict::Ok,
            format!(
                "the embedded queue `{}` in the ledger; a message goes to `{}-dlq` after {} \
                 receives",
                q.name, q.name, q.max_receive_count
            ),
        )),
        QueueKind::Sqs => sqs(settings, found).await,
    }
}

async fn sqs(settings: &Settings, found: &mut Vec<Finding>) {
    use aws_sdk_sqs::types::QueueAttributeName;
    let name = settings.queue.name.as_str();
    let client = crate::queue::sqs::SqsQueue::client_from_env().await;
    let url = if name.starts_with("http://") || name.starts_with("https://") {
        name.to_owned()
    } else {
        let asked = bounded(client.get_queue_url().queue_name(name).send()).await;
        match asked {
            Ok(answer) => answer.queue_url().unwrap_or_default().to_owned(),
            Err(e) => {
                let why = format!(
                    "the SQS queue `{name}` cannot be found ({e}): create it with \
                     `fenceline queue create {name}`, or name another with --queue-name"
                );
                found.push(finding("queue", Verdict::Fail, why));
                return;
            }
        }
    };
    let asked = client
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::All)
        .send();
    let attributes = match bounded(asked).await {
        Ok(answer) => answer.attributes().cloned().unwrap_or_default(),
        Err(e) => {
            let why = format!("cannot read the queue's attributes: {e}");
            found.push(finding("queue", Verdict::Fail, why));
            return;
        }
    };
    let visibility = attributes
        .get(&QueueAttributeName::VisibilityTimeout)
        .cloned()
        .unwrap_or_default();
    found.push(finding(
        "queue",
        Verdict::Ok,
        format!(
            "the SQS queue `{name}` exists (its default visibility {visibility} s; the worker \
             asks {:?} on each receive)",
            settings.worker.timings.visibility
        ),
    ));
    found.push(
        match attributes
            .get(&QueueAttributeName::RedrivePolicy)
            .and_then(|p| serde_json::from_str::<serde_json::Value>(p).ok())
        {
            Some(policy) => finding(
                "dead letters",
                Verdict::Ok,
                format!(
                    "after {} receives to {}",
                    policy["maxReceiveCount"],
                    policy["deadLetterTargetArn"]
                        .as_str()
                        .and_then(|arn| arn.rsplit(':').next())
                        .unwrap_or("?")
                ),
            ),
            None => finding(
                "dead letters",
                Verdict::Warn,
                "no redrive policy: a message that keeps failing is received forever \
                 (`fenceline queue create` sets one)",
            ),
        },
    );
    found.push(probe(&client, url.rsplit('/').next().unwrap_or(name)).await);
}

/// An SQS request within [`BOUND`]: its answer, or what SQS said (or that it said nothing).
async fn bounded<T, E, R>(
    request: impl std::future::Future<Output = Result<T, aws_sdk_sqs::error::SdkError<E, R>>>,
) -> Result<T, String>
where
    E: aws_sdk_sqs::error::ProvideErrorMetadata + std::error::Error + 'static,
    R: fmt::Debug,
{
    match tokio::time::timeout(BOUND, request).await {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(e)) => Err(said(&e)),
        Err(_) => Err(format!("no answer within {BOUND:?}")),
    }
}

/// What SQS said, in a line: its error code and message.
fn said<E, R>(e: &aws_sdk_sqs::error::SdkError<E, R>) -> String
where
    E: aws_sdk_sqs::error::ProvideErrorMetadata + std::error::Error + 'static,
    R: fmt::Debug,
{
    use aws_sdk_sqs::error::ProvideErrorMetadata;
    match (e.code(), e.message()) {
        (Some(code), Some(message)) => format!("{code}: {message}"),
        (Some(code), None) => code.to_owned(),
        _ => match e {
            aws_sdk_sqs::error::SdkError::DispatchFailure(f) => format!("no answer: {f:?}"),
            other => other.to_string(),
        },
    }
}

/// What this identity may do on a queue, tried on a queue of doctor's own: create, send,
/// receive, change visibility, delete the message, delete the queue.
async fn probe(client: &aws_sdk_sqs::Client, name: &str) -> Finding {
    // A standard queue of its own, named after the jobs queue (without a `.fifo` suffix).
    let base = name.trim_end_matches(".fifo");
    let base = &base[..base.len().min(60)];
    let probe_name = format!("{base}-doctor-{}", std::process::id());
    let step = |what: &str, e: &dyn fmt::Display| {
        finding(
            "queue rights",
            Verdict::Fail,
            format!("on a probe queue of doctor's own, {what} was refused: {e}"),
        )
    };
    let created =
        tokio::time::timeout(BOUND, client.create_queue().queue_name(&probe_name).send()).await;
    let url = match created {
        Ok(Ok(answer)) => answer.queue_url().unwrap_or_default().to_owned(),
        Err(_) => {
            return finding(
                "queue rights",
                Verdict::Fail,
                format!("SQS did not answer within {BOUND:?}"),
            )
        }
        Ok(Err(e)) => {
            return finding(
                "queue rights",
                Verdict::Warn,
                format!(
                    "not probed: this identity may not create a queue of doctor's own ({})",
                    said(&e)
                ),
            )
        }
    };
    let outcome = async {
        client
            .send_message()
            .queue_url(&url)
            .message_body("fenceline doctor")
            .send()
            .await
            .map_err(|e| step("SendMessage", &said(&e)))?;
        let received = client
            .receive_message()
            .queue_url(&url)
            .wait_time_seconds(2)
            .send()
            .await
            .map_err(|e| step("ReceiveMessage", &said(&e)))?;
        let Some(handle) = received
            .messages()
            .first()
            .and_then(|m| m.receipt_handle())
            .map(str::to_owned)
        else {
            return Err(step("ReceiveMessage", &"nothing came back"));
        };
        client
            .change_message_visibility()
            .queue_url(&url)
            .receipt_handle(&handle)
            .visibility_timeout(5)
            .send()
            .await
            .map_err(|e| step("ChangeMessageVisibility", &said(&e)))?;
        client
            .delete_message()
            .queue_url(&url)
            .receipt_handle(&handle)
            .send()
            .await
            .map_err(|e| step("DeleteMessage", &said(&e)))?;
        Ok(())
    };
    let outcome = tokio::time::timeout(BOUND * 2, outcome)
        .await
        .unwrap_or_else(|_| Err(step("the probe", &"no answer in time")));
    let _ = client.delete_queue().queue_url(&url).send().await;
    outcome.err().unwrap_or_else(|| {
        finding(
            "queue rights",
            Verdict::Ok,
            "send, receive, change visibility and delete work (on a probe queue of doctor's \
             own, deleted after)",
        )
    })
}

impl ProviderSettings {
    /// The provider's kind as `--provider` names it.
    pub fn kind_name(&self) -> String {
        clap::ValueEnum::to_possible_value(&self.kind)
            .map(|v| v.get_name().to_owned())
            .unwrap_or_default()
    }
}

/// One cheap request to the provider: its list of models, which runs none.
async fn provider(check: &str, settings: &ProviderSettings) -> Finding {
    let kind = settings.kind_name();
    let key = settings.api_key.as_ref().map(|k| k.expose().to_owned());
    let http = match reqwest::Client::builder().timeout(BOUND).build() {
        Ok(http) => http,
        Err(e) => return finding(check, Verdict::Fail, format!("no HTTP client: {e}")),
    };
    let url = format!("{}/models", settings.url.trim_end_matches('/'));
    let asked = match settings.kind {
        ProviderKind::Stub => {
            return finding(
                check,
                Verdict::Ok,
                "the stub model (trials and drills: no provider is called)",
            )
        }
        ProviderKind::Bedrock => return bedrock(check, settings).await,
        ProviderKind::Anthropic => {
            let mut request = http.get(&url).header(
                "anthropic-version",
                crate::provider::anthropic::ANTHROPIC_VERSION,
            );
            if let Some(key) = &key {
                request = request.header("x-api-key", key);
            }
            request
        }
        ProviderKind::Openai | ProviderKind::OpenaiResponses => {
            let mut request = http.get(&url);
            if let Some(key) = &key {
                request = request.bearer_auth(key);
            }
            request
        }
    };
    let answered = match asked.send().await {
        Ok(answer) => answer,
        Err(e) => {
            return finding(
                check,
                Verdict::Fail,
                format!("{kind} at {} does not answer: {e}", settings.url),
            )
        }
    };
    let status = answered.status().as_u16();
    let listed = match status {
        200..=299 => answered
            .json::<serde_json::Value>()
            .await
            .ok()
            .and_then(|b| b["data"].as_array().map(Vec::len)),
        _ => None,
    };
    let mut out = match status {
        200..=299 => finding(
            check,
            Verdict::Ok,
            format!(
                "{kind} at {} answers with the key ({} models listed)",
                settings.url,
                listed.map_or_else(|| "no".to_owned(), |n| n.to_string())
            ),
        ),
        401 | 403 => finding(
            check,
            Verdict::Fail,
            format!(
                "{kind} at {} refuses the key (HTTP {status}){}",
                settings.url,
                if key.is_none() {
                    ": none is set (FENCELINE_PROVIDER_API_KEY, OPENAI_API_KEY or \
                     ANTHROPIC_API_KEY, by kind)"
                } else {
                    ""
                }
            ),
        ),
        _ => finding(
            check,
            Verdict::Warn,
            format!(
                "{kind} at {} answered GET /models with HTTP {status}",
                settings.url
            ),
        ),
    };
    // Retrieval is asked once, for a request id no attempt has.
    if out.verdict == Verdict::Ok && settings.retrieval && settings.kind == ProviderKind::Openai {
        if let Ok(provider) = crate::startup::runtime::provider(settings) {
            use crate::provider::{Provider, Retrieval};
            let answer = tokio::time::timeout(BOUND, provider.retrieve("fenceline-doctor:0")).await;
            if let Ok(Retrieval::Found(_) | Retrieval::Inconclusive | Retrieval::NeverExecuted) =
                answer
            {
                out.detail
                    .push_str("; retrieval of stored completions answers");
            } else if let Ok(Retrieval::Unsupported) = answer {
                out = finding(
                    check,
                    Verdict::Fail,
                    format!(
                        "{}; but retrieval is on and the server keeps no stored completions \
                         (uncertain attempts would wait for a decision anyway)",
                        out.detail
                    ),
                );
            } else {
                out = finding(
                    check,
                    Verdict::Warn,
                    format!("{}; retrieval did not answer in time", out.detail),
                );
            }
        }
    }
    out
}

/// Bedrock: the credential chain and the region, resolved; Converse is not called (no
/// request of it is free).
async fn bedrock(check: &str, settings: &ProviderSettings) -> Finding {
    use aws_sdk_bedrockruntime::config::ProvideCredentials;
    let sdk = crate::aws::sdk_config().await;
    let Some(region) = sdk.region().map(ToString::to_string) else {
        return finding(
            check,
            Verdict::Fail,
            "bedrock: no region (AWS_REGION) is set",
        );
    };
    let Some(credentials) = sdk.credentials_provider() else {
        return finding(
            check,
            Verdict::Fail,
            "bedrock: no AWS credentials are configured",
        );
    };
    match tokio::time::timeout(BOUND, credentials.provide_credentials()).await {
        Ok(Ok(_)) => finding(
            check,
            Verdict::Ok,
            format!(
                "bedrock in {region}{}: credentials resolve (Converse is not called: no \
                 request of it is free)",
                if settings.url.is_empty() {
                    String::new()
                } else {
                    format!(" at {}", settings.url)
                }
            ),
        ),
        Ok(Err(e)) => finding(
            check,
            Verdict::Fail,
            format!("bedrock: the AWS credentials do not resolve: {e}"),
        ),
        Err(_) => finding(
            check,
            Verdict::Fail,
            "bedrock: the AWS credentials did not resolve in time",
        ),
    }
}

/// How operators sign in: local passwords, and the identity provider's discovery document and
/// keys when one is configured.
async fn sign_in(settings: &Settings) -> Finding {
    let passwords = if settings.http.password_sign_in {
        "local passwords on"
    } else {
        "local passwords off"
    };
    let (Some(oidc), Some(public)) = (&settings.http.oidc, settings.http.public_url.as_deref())
    else {
        return finding(
            "sign-in",
            Verdict::Ok,
            format!("{passwords}; no identity provider (--oidc-issuer)"),
        );
    };
    let client = match crate::oidc::OidcClient::new(oidc.clone(), public) {
        Ok(client) => client,
        Err(e) => return finding("sign-in", Verdict::Fail, e.to_string()),
    };
    match client.check().await {
        Ok(0) => finding(
            "sign-in",
            Verdict::Fail,
            format!(
                "the identity provider at {} publishes no signing key",
                client.issuer()
            ),
        ),
        Ok(keys) => finding(
            "sign-in",
            Verdict::Ok,
            format!(
                "the identity provider at {} answers with {keys} signing key(s); it calls back \
                 at {}; {passwords}",
                client.issuer(),
                client.redirect_uri()
            ),
        ),
        Err(e) => finding("sign-in", Verdict::Fail, e.to_string()),
    }
}

/// Whether the OTLP collector the environment names takes traces: an empty export (valid
/// protobuf, no span) sent as the exporter sends its batches.
async fn traces() -> Finding {
    let Some(endpoint) = crate::telemetry::traces_endpoint() else {
        return finding(
            "traces",
            Verdict::Ok,
            "off (set OTEL_EXPORTER_OTLP_ENDPOINT to send them)",
        );
    };
    let http = match reqwest::Client::builder().timeout(BOUND).build() {
        Ok(http) => http,
        Err(e) => return finding("traces", Verdict::Fail, format!("no HTTP client: {e}")),
    };
    let shown = crate::telemetry::shown_endpoint(&endpoint);
    let mut request = http
        .post(&endpoint)
        .header("content-type", "application/x-protobuf");
    for (name, value) in crate::telemetry::export_headers() {
        request = request.header(name, value);
    }
    match request.body(Vec::<u8>::new()).send().await {
        Ok(answer) if answer.status().is_success() => finding(
            "traces",
            Verdict::Ok,
            format!("the collector at {shown} takes OTLP/HTTP"),
        ),
        Ok(answer) => finding(
            "traces",
            Verdict::Fail,
            format!(
                "the collector at {shown} refuses an export (HTTP {})",
                answer.status().as_u16()
            ),
        ),
        Err(e) => finding(
            "traces",
            Verdict::Fail,
            format!("no collector answers at {shown}: {}", e.without_url()),
        ),
    }
}

fn public_url(url: Option<&str>) -> Finding {
    match url {
        None => finding(
            "public URL",
            Verdict::Warn,
            "not set (--public-url): exported links use the address each browser used",
        ),
        Some(url) if url.starts_with("https://") => finding("public URL", Verdict::Ok, url),
        Some(url) => {
            let local = ["http://127.0.0.1", "http://localhost", "http://[::1]"]
                .iter()
                .any(|l| url.starts_with(l));
            if local {
                finding(
                    "public URL",
                    Verdict::Ok,
                    format!("{url} (this machine only)"),
                )
            } else {
                finding(
                    "public URL",
                    Verdict::Warn,
                    format!("{url} is not HTTPS: sign-in cookies would cross the network in clear"),
                )
            }
        }
    }
}
