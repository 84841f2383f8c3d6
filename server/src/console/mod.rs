//! The console port implemented over the ledger: view models for the pages, formatted for
//! operators (UTC times, durations, short fingerprints), never carrying inputs, answers or
//! receipt handles. One file per page, like `app/src/pages/`.
//!
//! # Layout
//!
//! - `overview`, `jobs`, `job` (with its timeline), `unknown`, `dead_letters`, `workers`,
//!   `audit`, `drills`: one page each.
//! - `swimlane` and [`charts`]: the job's swimlane marks and the SVG they are drawn as;
//!   [`plot`]: the overview's time series, laid out by plotters.
//! - `format`: times, durations and rows as operators read them.
//!
//! Must not write to the ledger, and must not put SQL here: the ledger's read API serves it.

mod alerts;
mod audit;
mod bulk;
pub use bulk::filter_text;
pub(crate) mod drills;
pub(crate) use drills as drill_view;
pub mod charts;
mod dead_letters;
mod format;
pub use format::{cell, code};
mod incident;
pub use incident::BundleContext;
mod job;
mod jobs;
mod operators;
mod overview;
pub mod plot;
mod swimlane;
mod unknown;
mod workers;

use fenceline_app::console::{
    AuditPage, AuditQuery, Console, DeadLetters, JobDetail, JobsPage, JobsQuery, Overview, Pending,
    Timeline, TimelineQuery, UnknownPage, Window,
};

use crate::ledger::{Drills, Ledger, LedgerError};

/// Runs of at least this many same-kind events fold into one row.
const FOLD_MIN: i64 = 4;
/// Rows (events or folded runs) per timeline page.
const PAGE_RUNS: u32 = 200;
/// Jobs per list page.
const PAGE_JOBS: u32 = 50;

/// What the console knows of this deployment: where it finds dead letters, where drills may
/// run, and what the model's tokens cost.
#[derive(Debug, Clone)]
pub struct QueueInfo {
    /// As shown to operators, e.g. `embedded:jobs`.
    pub description: String,
    /// The embedded dead-letter queue's name, when the queue is embedded.
    pub embedded_dead_letters: Option<String>,
    /// Whether drills may start here (never in production), and on which queues.
    pub drills: DrillAccess,
    /// The price table, for what an attempt whose usage is unknown may have cost.
    pub prices: std::sync::Arc<crate::provider::prices::Prices>,
    /// The model a job goes to when its parameters name none.
    pub default_model: String,
    /// A trace viewer's page for one trace (`{trace_id}`, `{span_id}`), for the job page's
    /// links.
    pub trace_url: Option<String>,
    /// The alert rules' thresholds, and whether a webhook is set.
    pub alerts: crate::alerts::AlertSettings,
    /// Most jobs one action by filter may take.
    pub bulk_cap: usize,
    /// How long an incident's jobs are kept from retention after it closes.
    pub incident_keep: std::time::Duration,
}

/// Where drills can run from this deployment.
#[derive(Debug, Clone)]
pub struct DrillAccess {
    pub environment: crate::settings::Environment,
    /// The deployment talks to SQS, so a drill can run on an SQS queue of its own.
    pub sqs: bool,
    /// The deployment's own model provider, when it is a real one a drill may call.
    pub provider: Option<crate::settings::ProviderSettings>,
}

impl Default for DrillAccess {
    fn default() -> Self {
        DrillAccess {
            environment: crate::settings::Environment::Development,
            sqs: false,
            provider: None,
        }
    }
}

impl Default for QueueInfo {
    fn default() -> Self {
        QueueInfo {
            description: "embedded:jobs".into(),
            embedded_dead_letters: Some("jobs-dlq".into()),
            drills: DrillAccess::default(),
            prices: std::sync::Arc::new(
                crate::provider::prices::Prices::parse(&[crate::provider::prices::STUB_PRICE])
                    .expect("the stub's price reads"),
            ),
            default_model: "stub".into(),
            trace_url: None,
            alerts: crate::alerts::AlertSettings::default(),
            bulk_cap: crate::bulk::DEFAULT_CAP,
            incident_keep: std::time::Duration::from_secs(365 * 86_400),
        }
    }
}

pub struct LedgerConsole {
    ledger: Ledger,
    queue: QueueInfo,
    /// The tenants whose jobs this console shows; `None` for every tenant.
    tenants: Option<Vec<String>>,
    /// The zone times are shown in.
    zone: crate::time::Tz,
    /// The signed-in operator's name, for what only they may do (confirm their preview).
    visitor: Option<String>,
}

impl LedgerConsole {
    /// A console over every tenant's jobs.
    pub fn new(ledger: Ledger, queue: QueueInfo) -> Self {
        LedgerConsole {
            ledger,
            queue,
            tenants: None,
            zone: chrono_tz::UTC,
            visitor: None,
        }
    }

    /// The console as `name` sees it.
    pub fn for_operator(mut self, name: &str) -> Self {
        self.visitor = Some(name.to_owned());
        self
    }

    /// Shows times in `zone`.
    pub fn in_zone(mut self, zone: crate::time::Tz) -> Self {
        self.zone = zone;
        self
    }

    /// An instant as operators read it here: date, time and zone.
    fn at(&self, us: i64) -> String {
        crate::time::date_time(us, self.zone)
    }

    /// Limits this console to `tenants`' jobs (`None`: every tenant).
    pub fn for_tenants(mut self, tenants: Option<Vec<String>>) -> Self {
        self.tenants = tenants;
        self
    }

    /// Whether this console may show `tenant`'s jobs.
    fn covers(&self, tenant: &str) -> bool {
        self.tenants
            .as_ref()
            .is_none_or(|list| list.iter().any(|t| t == tenant))
    }

    /// The tenants a page may show when it asked for `wanted` (or for all): `None` for every
    /// tenant; an empty list when none of them is this console's.
    fn tenants_for(&self, wanted: Option<&str>) -> Option<Vec<String>> {
        match (wanted, &self.tenants) {
            (Some(t), _) if self.covers(t) => Some(vec![t.to_owned()]),
            (Some(_), _) => Some(Vec::new()),
            (None, None) => None,
            (None, Some(list)) => Some(list.clone()),
        }
    }

    /// Jobs per state of `tenants` (`None`: every tenant), exact up to `cap` per tenant.
    async fn counts_in(
        &self,
        tenants: Option<&[String]>,
        cap: i64,
        drills: Drills,
    ) -> Result<Vec<(crate::job::JobState, i64, bool)>, LedgerError> {
        let Some(tenants) = tenants else {
            return self.ledger.count_by_state_capped(None, cap, drills).await;
        };
        let mut sums: Vec<(crate::job::JobState, i64, bool)> = crate::job::JobState::ALL
            .into_iter()
            .map(|s| (s, 0, false))
            .collect();
        for tenant in tenants {
            for (state, n, over) in self
                .ledger
                .count_by_state_capped(Some(tenant), cap, drills)
                .await?
            {
                if let Some(sum) = sums.iter_mut().find(|(s, _, _)| *s == state) {
                    sum.1 += n;
                    sum.2 |= over;
                }
            }
        }
        Ok(sums)
    }
}

fn shown(e: LedgerError) -> String {
    if e.is_unavailable() {
        "the ledger database is unavailable; this page will work again once it answers".into()
    } else {
        tracing::error!(error = %e, "console query failed");
        "an internal error occurred (logged on the server)".into()
    }
}

impl Console for LedgerConsole {
    fn overview(&self, window: Window) -> Pending<'_, Overview> {
        Box::pin(async move { self.build_overview(window).await.map_err(shown) })
    }

    fn jobs(&self, query: JobsQuery) -> Pending<'_, JobsPage> {
        Box::pin(async move { self.build_jobs(query).await.map_err(shown) })
    }

    fn job(
        &self,
        job_id: String,
        zoom: Option<fenceline_app::console::Zoom>,
    ) -> Pending<'_, Option<JobDetail>> {
        Box::pin(async move { self.build_job(job_id, zoom).await.map_err(shown) })
    }

    fn timeline(&self, job_id: String, query: TimelineQuery) -> Pending<'_, Timeline> {
        Box::pin(async move { self.build_timeline(job_id, query).await.map_err(shown) })
    }

    fn unknown(&self, after: Option<String>) -> Pending<'_, UnknownPage> {
        Box::pin(async move { self.build_unknown(after).await.map_err(shown) })
    }

    fn dead_letters(&self) -> Pending<'_, DeadLetters> {
        Box::pin(async move { self.build_dead_letters().await.map_err(shown) })
    }

    fn audit(&self, query: AuditQuery) -> Pending<'_, AuditPage> {
        Box::pin(async move { self.build_audit(query).await.map_err(shown) })
    }

    fn workers(&self) -> Pending<'_, fenceline_app::console::WorkersPage> {
        Box::pin(async move { self.build_workers().await.map_err(shown) })
    }

    fn drills(&self) -> Pending<'_, fenceline_app::console::DrillsPage> {
        Box::pin(async move { self.build_drills().await.map_err(shown) })
    }

    fn drill_run(&self, run_id: String) -> Pending<'_, Option<fenceline_app::console::DrillRun>> {
        Box::pin(async move { self.build_drill_run(run_id).await.map_err(shown) })
    }

    fn operators(&self) -> Pending<'_, fenceline_app::console::OperatorsPage> {
        Box::pin(async move { self.build_operators().await.map_err(shown) })
    }

    fn alerts(&self) -> Pending<'_, fenceline_app::console::AlertsPage> {
        Box::pin(async move { self.build_alerts().await.map_err(shown) })
    }

    fn bulk_list(&self) -> Pending<'_, Vec<fenceline_app::console::BulkRow>> {
        Box::pin(async move { self.build_bulk_list().await.map_err(shown) })
    }

    fn incidents(&self) -> Pending<'_, Vec<fenceline_app::console::IncidentRow>> {
        Box::pin(async move { self.build_incidents().await.map_err(shown) })
    }

    fn incident(
        &self,
        incident_id: String,
    ) -> Pending<'_, Option<fenceline_app::console::IncidentPage>> {
        Box::pin(async move { self.build_incident(incident_id).await.map_err(shown) })
    }

    fn bulk(&self, bulk_id: String) -> Pending<'_, Option<fenceline_app::console::BulkPage>> {
        Box::pin(async move {
            self.build_bulk(bulk_id, self.visitor.as_deref())
                .await
                .map_err(shown)
        })
    }
}
