//! The OpenAPI 3.1 document of API v1, served at `/api/v1/openapi.json`, generated from the
//! handlers' annotations and the types in [`super::contract`].

use axum::Json;
use serde_json::Value;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::contract::{
    ActionOutcome, AttemptView, BatchItem, BatchResponse, CancelRequest, CreateJobRequest,
    CreateJobsRequest, DecisionKind, DecisionRequest, Delivery, ErrorBody, ErrorDetail, EventPage,
    EventView, JobPage, JobResult, JobView, Links, ModelParameters, RerunRequest,
};
use super::{api, api_actions};
use crate::job::JobState;
use crate::ledger::ReplayPolicy;

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
        api_actions::rerun
    ),
    components(schemas(
        CreateJobRequest,
        CreateJobsRequest,
        BatchItem,
        BatchResponse,
        ModelParameters,
        JobView,
        AttemptView,
        EventView,
        Delivery,
        JobPage,
        EventPage,
        JobResult,
        ErrorBody,
        ErrorDetail,
        Links,
        JobState,
        ReplayPolicy,
        DecisionRequest,
        DecisionKind,
        CancelRequest,
        RerunRequest,
        ActionOutcome
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
