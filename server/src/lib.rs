//! Fenceline: a durable, fenced job ledger for long LLM jobs behind SQS-style queues, with the
//! HTTP API and operator console that show and act on it.
//!
//! # Layout
//!
//! - [`job`]: the pure domain — states, transition table, event kinds, ids, request digest.
//! - [`ledger`]: the durable ledger on PostgreSQL or SQLite; every write a fenced
//!   compare-and-set that appends its events in the same transaction; retention.
//! - [`queue`]: the `Queue` trait with Amazon SQS and the embedded queue (SQS semantics, in the
//!   ledger database), and the fault-injection wrapper.
//! - [`provider`]: model providers (stub, OpenAI-compatible, Responses, Anthropic, Bedrock),
//!   failure classification, prices, and the model policy jobs are checked against.
//! - [`worker`]: the delivery step, heartbeat, outbox dispatcher, reaper, retention task and
//!   inspected dead-letter replay.
//! - [`http`]: the REST API v1 (bearer tokens) with its typed contract (`http::contract`, from
//!   which the OpenAPI document is generated), health, console routes.
//! - [`drill`]: the redelivery drills — catalogue, rig, scenarios, runner and verdict.
//! - [`soak`]: the chaos soak's check of a finished run.
//! - [`console`]: the console port over the ledger, one file per page, and its SVG charts.
//! - [`operators`]: who may sign in, their roles and tenant scopes, password hashing.
//! - [`metrics`]: the Prometheus counters and gauges (bounded labels only).
//! - [`doctor`]: `fenceline doctor`, whether a deployment is wired right.
//! - [`deployment`]: where this deployment runs (production refuses drills and faults).
//! - [`faults`]: the named fault points drills arm on their own jobs, and the safeguards a test
//!   may switch off.
//! - [`settings`]: flags, environment and the `--config` file, resolved once into `Settings`.
//! - [`time`]: instants and durations as text for people and programs, and operators' input
//!   read back (on `chrono`).
//! - [`startup`]: building the application and running it, stopping in order.
//! - [`telemetry`]: OpenTelemetry traces over OTLP/HTTP, and the trace context a job keeps.
//! - [`alerts`]: alert rules judged over the ledger, their episodes and webhook notifications.
//! - [`aws`]: the AWS configuration the SQS and Bedrock clients share.
//! - [`bulk`]: actions by filter: the previewed set of jobs, confirmed, run in chunks.
//! - [`bench`]: the benchmarks behind `fenceline bench …`, each beside its reference.

pub mod alerts;
pub mod aws;
pub mod bench;
pub mod bulk;
pub mod console;
pub mod deployment;
pub mod doctor;
pub mod drill;
pub mod faults;
pub mod http;
pub mod job;
pub mod ledger;
pub mod metrics;
pub mod oidc;
pub mod operators;
pub mod provider;
pub mod queue;
pub mod settings;
pub mod soak;
pub mod startup;
pub mod telemetry;
pub mod time;
pub mod worker;
