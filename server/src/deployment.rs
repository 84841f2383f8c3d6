//! Where this deployment runs, as the settings resolve it and as the rooms that must refuse
//! something in production (drills, fault injection, a first operator) read it.

use clap::ValueEnum;

/// Where this deployment runs. Production is explicit: it refuses fault injection and drills,
/// and it never creates operators on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum Environment {
    #[default]
    Development,
    Production,
}
