//! One file per page.

pub mod alerts;
pub mod api;
pub mod audit;
pub mod bulk;
pub mod dlq;
pub mod drills;
pub mod incidents;
pub mod job;
pub mod jobs;
pub mod login;
pub mod operators;
pub mod overview;
pub mod unknown;
pub mod workers;

pub(crate) use crate::console::{console, visitor};
