//! One file per page.

pub mod dlq;
pub mod job;
pub mod jobs;
pub mod overview;
pub mod unknown;

use crate::console::SharedConsole;

/// The console port from the request's context.
pub(crate) fn console() -> SharedConsole {
    leptos::prelude::expect_context::<SharedConsole>()
}
