//! One file per page.

pub mod api;
pub mod audit;
pub mod dlq;
pub mod drills;
pub mod job;
pub mod jobs;
pub mod login;
pub mod overview;
pub mod unknown;
pub mod workers;

use crate::console::SharedConsole;

/// The console port from the request's context.
pub(crate) fn console() -> SharedConsole {
    leptos::prelude::expect_context::<SharedConsole>()
}

/// Who is looking, as the server's sign-in gate provided it.
pub(crate) fn visitor() -> crate::console::Visitor {
    leptos::prelude::use_context::<crate::console::Visitor>().unwrap_or_default()
}
