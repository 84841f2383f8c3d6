//! Fenceline's one integration-test binary.
//!
//! The ledger contract and the API run against both backends: SQLite in a temporary file and
//! PostgreSQL in a fresh database on the server named by `FENCELINE_TEST_PG_URL` (started by
//! `scripts/test.sh`). Without that variable the PostgreSQL half fails, unless
//! `FENCELINE_TEST_SKIP_PG=1` says to skip it on purpose.

mod alerts;
mod anthropic;
mod api;
mod background;
mod bedrock;
mod benches;
mod console_access;
mod doctor;
mod drills;
mod fallback;
mod flow_control;
mod helpers;
mod ledger_contract;
mod operators;
mod processes;
mod properties;
mod providers;
mod queue_contract;
mod secrets;
mod soak;
mod spend;
mod traces;
mod worker;
