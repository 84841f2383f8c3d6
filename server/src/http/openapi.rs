//! The OpenAPI 3.1 document of API v1, served at `/api/v1/openapi.json`.

use axum::Json;
use serde_json::{json, Value};

pub(super) async fn document() -> Json<Value> {
    Json(spec())
}

fn error_response(description: &str) -> Value {
    json!({
        "description": description,
        "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } }
    })
}

/// The document itself; tests check that every route it lists answers.
pub fn spec() -> Value {
    let job_id_param = json!({
        "name": "job_id", "in": "path", "required": true,
        "schema": { "type": "string", "pattern": "^job_[0-9a-f-]{36}$" }
    });
    let states = json!([
        "ready",
        "running",
        "unknown",
        "retry_authorized",
        "succeeded",
        "failed_terminal",
        "expired"
    ]);
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "Fenceline API",
            "version": "1",
            "description": "Submit LLM jobs to a fenced job ledger and follow them. The tenant \
                comes from the bearer token; one tenant never sees another's jobs."
        },
        "servers": [{ "url": "/api/v1" }],
        "security": [{ "bearer": [] }],
        "paths": {
            "/jobs": {
                "post": {
                    "operationId": "createJob",
                    "summary": "Create a job, idempotently per tenant and idempotency key",
                    "requestBody": {
                        "required": true,
                        "content": { "application/json": {
                            "schema": { "$ref": "#/components/schemas/CreateJob" } } }
                    },
                    "responses": {
                        "201": { "description": "Created", "content": { "application/json": {
                            "schema": { "$ref": "#/components/schemas/Job" } } } },
                        "200": { "description": "The same key and request made this job before",
                            "content": { "application/json": {
                            "schema": { "$ref": "#/components/schemas/Job" } } } },
                        "400": error_response("Invalid request"),
                        "401": error_response("Missing or invalid token"),
                        "409": error_response("Key already used for a different request"),
                        "413": error_response("Body too large"),
                        "415": error_response("Body is not application/json"),
                        "503": error_response("Ledger database unavailable")
                    }
                },
                "get": {
                    "operationId": "listJobs",
                    "summary": "List the tenant's jobs, newest first, one keyset page at a time",
                    "parameters": [
                        { "name": "state", "in": "query", "schema": { "type": "string", "enum": states } },
                        { "name": "before", "in": "query", "description": "`next` of the previous page",
                          "schema": { "type": "string" } },
                        { "name": "limit", "in": "query",
                          "schema": { "type": "integer", "minimum": 1, "maximum": 500, "default": 50 } }
                    ],
                    "responses": {
                        "200": { "description": "A page", "content": { "application/json": {
                            "schema": { "$ref": "#/components/schemas/JobPage" } } } },
                        "400": error_response("Invalid query"),
                        "401": error_response("Missing or invalid token")
                    }
                }
            },
            "/jobs/{job_id}": {
                "get": {
                    "operationId": "readJob",
                    "summary": "A job with its attempts",
                    "parameters": [job_id_param],
                    "responses": {
                        "200": { "description": "The job", "content": { "application/json": {
                            "schema": { "$ref": "#/components/schemas/Job" } } } },
                        "400": error_response("Not a job id"),
                        "401": error_response("Missing or invalid token"),
                        "404": error_response("No such job for this tenant")
                    }
                }
            },
            "/jobs/{job_id}/events": {
                "get": {
                    "operationId": "readJobEvents",
                    "summary": "A page of the job's timeline, oldest first",
                    "parameters": [
                        job_id_param,
                        { "name": "after", "in": "query", "schema": { "type": "integer", "minimum": 0 } },
                        { "name": "limit", "in": "query",
                          "schema": { "type": "integer", "minimum": 1, "maximum": 1000, "default": 100 } }
                    ],
                    "responses": {
                        "200": { "description": "Events", "content": { "application/json": {
                            "schema": { "$ref": "#/components/schemas/EventPage" } } } },
                        "400": error_response("Invalid query"),
                        "401": error_response("Missing or invalid token"),
                        "404": error_response("No such job for this tenant")
                    }
                }
            },
            "/jobs/{job_id}/result": {
                "get": {
                    "operationId": "readJobResult",
                    "summary": "The job's one accepted result",
                    "parameters": [job_id_param],
                    "responses": {
                        "200": { "description": "The accepted result", "content": { "application/json": {
                            "schema": { "type": "object", "required": ["job_id", "result_ref", "result"] } } } },
                        "400": error_response("Not a job id"),
                        "401": error_response("Missing or invalid token"),
                        "404": error_response("No such job, or no accepted result yet")
                    }
                }
            }
        },
        "components": {
            "securitySchemes": { "bearer": { "type": "http", "scheme": "bearer" } },
            "schemas": {
                "Error": {
                    "type": "object", "required": ["error"],
                    "properties": { "error": { "type": "object", "required": ["code", "message"],
                        "properties": { "code": { "type": "string" }, "message": { "type": "string" },
                                        "job_id": { "type": "string" } } } }
                },
                "CreateJob": {
                    "type": "object", "additionalProperties": false,
                    "required": ["idempotency_key", "input"],
                    "properties": {
                        "idempotency_key": { "type": "string", "minLength": 1, "maxLength": 200 },
                        "input": { "description": "The workload input (any JSON but null)", "not": { "type": "null" } },
                        "contract_version": { "type": "string", "minLength": 1, "maxLength": 64, "default": "v1" },
                        "model": {
                            "type": "object", "default": {}, "additionalProperties": false,
                            "description": "Model parameters, checked against the deployment's model policy (allowed models, per tenant where configured; max_tokens cap): a refused one is a 400 saying why",
                            "properties": {
                                "model": { "type": "string" },
                                "temperature": { "type": "number", "minimum": 0, "maximum": 2 },
                                "top_p": { "type": "number", "minimum": 0, "maximum": 1 },
                                "max_tokens": { "type": "integer", "minimum": 1 },
                                "max_completion_tokens": { "type": "integer", "minimum": 1 },
                                "seed": { "type": "integer" },
                                "stop": { "oneOf": [ { "type": "string" }, { "type": "array", "items": { "type": "string" }, "maxItems": 4 } ] },
                                "response_format": { "type": "object" },
                                "presence_penalty": { "type": "number", "minimum": -2, "maximum": 2 },
                                "frequency_penalty": { "type": "number", "minimum": -2, "maximum": 2 },
                                "reasoning_effort": { "type": "string", "enum": ["minimal", "low", "medium", "high"] },
                                "n": { "type": "integer", "const": 1 },
                                "stream": { "type": "boolean", "const": false }
                            }
                        },
                        "deadline_seconds": { "type": "integer", "minimum": 1, "maximum": 43200, "default": 3600 },
                        "max_attempts": { "type": "integer", "minimum": 1, "maximum": 20, "default": 3 },
                        "replay_policy": { "type": "string", "enum": ["manual", "replay_on_unknown"], "default": "manual" }
                    }
                },
                "Job": {
                    "type": "object",
                    "required": ["job_id", "state", "owner_epoch", "deadline_at", "attempt_count", "max_attempts"],
                    "properties": {
                        "job_id": { "type": "string" },
                        "state": { "type": "string", "enum": states },
                        "terminal": { "type": "boolean" },
                        "idempotency_key": { "type": "string" },
                        "request_digest": { "type": "string" },
                        "contract_version": { "type": "string" },
                        "owner_epoch": { "type": "integer" },
                        "owner_id": { "type": ["string", "null"] },
                        "owner_until": { "type": ["string", "null"], "format": "date-time" },
                        "deadline_at": { "type": "string", "format": "date-time" },
                        "attempt_count": { "type": "integer" },
                        "max_attempts": { "type": "integer" },
                        "retry_at": { "type": ["string", "null"], "format": "date-time" },
                        "result_ref": { "type": ["string", "null"] },
                        "error_code": { "type": ["string", "null"] },
                        "replay_policy": { "type": "string" },
                        "recovery_reason": { "type": ["string", "null"] },
                        "created_at": { "type": "string", "format": "date-time" },
                        "updated_at": { "type": "string", "format": "date-time" },
                        "terminal_at": { "type": ["string", "null"], "format": "date-time" },
                        "attempts": { "type": "array", "items": { "type": "object" } },
                        "links": { "type": "object" }
                    }
                },
                "JobPage": {
                    "type": "object", "required": ["jobs", "next"],
                    "properties": {
                        "jobs": { "type": "array", "items": { "$ref": "#/components/schemas/Job" } },
                        "next": { "type": ["string", "null"] }
                    }
                },
                "EventPage": {
                    "type": "object", "required": ["job_id", "events", "next_after"],
                    "properties": {
                        "job_id": { "type": "string" },
                        "events": { "type": "array", "items": { "type": "object",
                            "required": ["seq", "at", "kind", "epoch", "actor"] } },
                        "next_after": { "type": ["integer", "null"] }
                    }
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_model_parameters_are_the_ones_the_policy_allows() {
        let spec = spec();
        let documented: std::collections::BTreeSet<&str> = spec["components"]["schemas"]
            ["CreateJob"]["properties"]["model"]["properties"]
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
}
