//! The OpenAPI 3.1 document of API v1, served at `/api/v1/openapi.json`, generated from the
//! handlers' annotations and the types in [`super::contract`].

use axum::Json;
use fenceline_app::console::{ApiEndpoint, ApiField, ApiReference, ApiSchema};
use serde_json::Value;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::contract::{
    ActionOutcome, AttemptView, BatchItem, BatchResponse, BulkConfirm, BulkFilter, BulkJobView,
    BulkRequest, BulkView, CancelRequest, CreateJobRequest, CreateJobsRequest, DecisionKind,
    DecisionRequest, Delivery, ErrorBody, ErrorDetail, EventPage, EventView, JobPage, JobResult,
    JobView, Links, ModelParameters, RerunRequest, UsageView,
};
use super::{api, api_actions};
use crate::job::{EventKind, JobState};
use crate::ledger::{AttemptOutcome, ReplayPolicy};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Fenceline API",
        version = "1",
        description = "Submit LLM jobs to a fenced job ledger and follow them. The tenant comes \
            from the bearer token; one tenant never sees another's jobs."
    ),
    servers((url = "/api/v1")),
    security(("bearer" = [])),
    paths(
        api::create_job,
        api::create_jobs,
        api::list_jobs,
        api::read_job,
        api::read_events,
        api::read_result,
        api_actions::decide,
        api_actions::cancel,
        api_actions::rerun,
        api_actions::preview_bulk,
        api_actions::confirm_bulk,
        api_actions::read_bulk
    ),
    components(schemas(
        CreateJobRequest,
        CreateJobsRequest,
        BatchItem,
        BatchResponse,
        ModelParameters,
        JobView,
        AttemptView,
        UsageView,
        EventView,
        Delivery,
        JobPage,
        EventPage,
        JobResult,
        ErrorBody,
        ErrorDetail,
        Links,
        JobState,
        EventKind,
        AttemptOutcome,
        ReplayPolicy,
        DecisionRequest,
        DecisionKind,
        CancelRequest,
        RerunRequest,
        ActionOutcome,
        BulkRequest,
        BulkFilter,
        BulkConfirm,
        BulkView,
        BulkJobView
    )),
    modifiers(&BearerAuth)
)]
struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

pub(super) async fn document() -> Json<Value> {
    Json(spec())
}

/// The document itself; tests check that every route it lists answers.
pub fn spec() -> Value {
    serde_json::to_value(ApiDoc::openapi()).unwrap_or(Value::Null)
}

/// The reference the console's API page shows, read from the document: every endpoint with
/// its parameters, body and answers, and every schema with its fields.
pub fn reference() -> ApiReference {
    let spec = spec();
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let mut endpoints = Vec::new();
    if let Some(paths) = spec["paths"].as_object() {
        for (path, operations) in paths {
            let Some(operations) = operations.as_object() else {
                continue;
            };
            for (method, op) in operations {
                let parameters = op["parameters"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|p| ApiField {
                        name: text(&p["name"]),
                        place: text(&p["in"]),
                        kind: kind_of(&p["schema"]),
                        required: p["required"].as_bool().unwrap_or(false),
                        description: text(&p["description"]),
                    })
                    .collect();
                let mut responses: Vec<(String, String, Option<String>)> = op["responses"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(code, r)| {
                        let body = r["content"]["application/json"]["schema"]["$ref"]
                            .as_str()
                            .map(schema_name);
                        (code.clone(), text(&r["description"]), body)
                    })
                    .collect();
                responses.sort_by(|a, b| a.0.cmp(&b.0));
                endpoints.push(ApiEndpoint {
                    method: method.to_uppercase(),
                    path: path.clone(),
                    summary: text(&op["summary"]).replace('\n', " "),
                    parameters,
                    body: op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
                        .as_str()
                        .map(schema_name),
                    responses,
                });
            }
        }
    }
    // Creation first, then reads, then actions, each by path.
    endpoints.sort_by_key(|e| (e.method != "POST" || e.path.contains('{'), e.path.clone()));
    let schemas = spec["components"]["schemas"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(name, schema)| {
            let required: Vec<&str> = schema["required"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            ApiSchema {
                name: name.clone(),
                description: text(&schema["description"]).replace('\n', " "),
                fields: schema["properties"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(field, s)| ApiField {
                        name: field.clone(),
                        place: String::new(),
                        kind: kind_of(s),
                        required: required.contains(&field.as_str()),
                        description: text(&s["description"]).replace('\n', " "),
                    })
                    .collect(),
                values: enum_values(schema),
            }
        })
        .collect();
    ApiReference {
        title: text(&spec["info"]["title"]),
        version: text(&spec["info"]["version"]),
        description: text(&spec["info"]["description"]),
        base: text(&spec["servers"][0]["url"]),
        endpoints,
        schemas,
    }
}

/// `#/components/schemas/Job` → `Job`.
fn schema_name(reference: &str) -> String {
    reference.rsplit('/').next().unwrap_or(reference).to_owned()
}

/// The values of an enumeration: `enum`, or a `oneOf` of one-value enums.
fn enum_values(schema: &Value) -> Vec<String> {
    let direct = schema["enum"].as_array().into_iter().flatten();
    let listed = schema["oneOf"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|s| s["enum"].as_array().into_iter().flatten());
    direct
        .chain(listed)
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect()
}

/// A schema's type as a reader says it: `string`, `integer or null`, `array of Attempt`, `Job`.
fn kind_of(schema: &Value) -> String {
    if let Some(reference) = schema["$ref"].as_str() {
        return schema_name(reference);
    }
    for combined in ["oneOf", "anyOf", "allOf"] {
        if let Some(parts) = schema[combined].as_array() {
            let kinds: Vec<String> = parts.iter().map(kind_of).collect();
            return kinds.join(" or ");
        }
    }
    let types: Vec<&str> = match &schema["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    let kinds: Vec<String> = types
        .iter()
        .map(|t| match *t {
            "array" => format!("array of {}", kind_of(&schema["items"])),
            "string" => match schema["format"].as_str() {
                Some(format) => format!("string ({format})"),
                None => "string".into(),
            },
            other => other.to_owned(),
        })
        .collect();
    if kinds.is_empty() {
        "any JSON".into()
    } else {
        kinds.join(" or ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_names_every_endpoint_its_body_and_each_schemas_fields() {
        let reference = reference();
        assert_eq!(reference.base, "/api/v1");
        let create = reference
            .endpoints
            .iter()
            .find(|e| e.method == "POST" && e.path == "/jobs")
            .expect("job creation is documented");
        assert_eq!(create.body.as_deref(), Some("CreateJob"));
        assert!(create
            .responses
            .iter()
            .any(|(code, _, body)| code == "201" && body.as_deref() == Some("Job")));
        assert!(
            reference.endpoints.iter().all(|e| !e.summary.is_empty()),
            "{:?}",
            reference.endpoints
        );
        let job = reference.schemas.iter().find(|s| s.name == "Job").unwrap();
        let attempts = job.fields.iter().find(|f| f.name == "attempts").unwrap();
        assert_eq!(attempts.kind, "array of Attempt or null");
        let states = reference
            .schemas
            .iter()
            .find(|s| s.name == "JobState")
            .unwrap();
        assert!(states.values.contains(&"unknown".to_owned()), "{states:?}");
    }

    #[test]
    fn the_documented_model_parameters_are_the_ones_the_policy_allows() {
        let spec = spec();
        let documented: std::collections::BTreeSet<&str> = spec["components"]["schemas"]
            ["ModelParameters"]["properties"]
            .as_object()
            .expect("model parameters are documented")
            .keys()
            .map(String::as_str)
            .collect();
        let allowed: std::collections::BTreeSet<&str> = crate::provider::policy::ALLOWED_PARAMETERS
            .iter()
            .copied()
            .collect();
        assert_eq!(documented, allowed);
    }

    #[test]
    fn the_documented_states_are_the_ledger_s() {
        let spec = spec();
        let documented: Vec<&str> = spec["components"]["schemas"]["JobState"]["enum"]
            .as_array()
            .expect("states are an enum")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        let states: Vec<&str> = JobState::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(documented, states);
        assert_eq!(spec["openapi"], "3.1.0");
    }

    #[test]
    fn the_documented_event_kinds_and_outcomes_are_the_ledger_s() {
        let spec = spec();
        let values = |schema: &str| -> Vec<String> {
            spec["components"]["schemas"][schema]["enum"]
                .as_array()
                .unwrap_or_else(|| panic!("{schema} is an enum"))
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        };
        let kinds: Vec<String> = EventKind::ALL
            .iter()
            .map(|k| k.as_str().to_owned())
            .collect();
        assert_eq!(values("EventKind"), kinds);
        let outcomes = values("AttemptOutcome");
        for outcome in [
            "pending",
            "succeeded",
            "throttled",
            "lost",
            "stale_discarded",
        ] {
            assert!(outcomes.iter().any(|o| o == outcome), "{outcome} missing");
        }
        assert_eq!(
            spec["components"]["schemas"]["Event"]["properties"]["kind"]["$ref"],
            "#/components/schemas/EventKind"
        );
        assert_eq!(
            spec["components"]["schemas"]["Attempt"]["properties"]["outcome"]["$ref"],
            "#/components/schemas/AttemptOutcome"
        );
    }
}
