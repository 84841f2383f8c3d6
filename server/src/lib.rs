//! Fenceline: a durable, fenced job ledger for long LLM jobs behind SQS-style queues, with the
//! HTTP API and operator console that show and act on it.
//!
//! # Layout
//!
//! - [`job`]: the pure domain — states, transition table, event kinds, ids, request digest.
//! - [`ledger`]: the durable ledger on PostgreSQL or SQLite; every write a fenced
//!   compare-and-set that appends its events in the same transaction.
//! - [`http`]: the REST API v1 (bearer tokens), health, OpenAPI document, console routes.
//! - [`config`]: settings from flags and environment, resolved once.
//! - [`startup`]: building the application and running it until stopped.
//! - [`bench`]: the ledger benchmark behind `fenceline bench ledger`.

pub mod bench;
pub mod config;
pub mod http;
pub mod job;
pub mod ledger;
pub mod metrics;
pub mod provider;
pub mod queue;
pub mod startup;
pub mod worker;
