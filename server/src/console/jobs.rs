//! `/jobs`: the filtered, keyset-paged jobs list with counts per state.

use fenceline_app::components::BadParameter;
use fenceline_app::console::{JobsPage, JobsQuery};

use crate::job::{JobId, JobState};
use crate::ledger::{Drills, JobFilter, LedgerError};

use super::format::job_row;
use super::{LedgerConsole, PAGE_JOBS};
use crate::time::{parse_instant_in, unix_ms};

impl LedgerConsole {
    pub(super) async fn build_jobs(&self, query: JobsQuery) -> Result<JobsPage, LedgerError> {
        let now = self.ledger.now_us().await?;
        // Exact up to 10,000 per state: enough to act on, and fast over millions of jobs.
        const CAP: i64 = 10_000;
        let Scoped {
            known,
            tenants,
            drills_apart,
        } = self.scope(&query).await?;
        let drills = if drills_apart {
            Drills::Apart
        } else {
            Drills::Counted
        };
        let capped = self.counts_in(tenants.as_deref(), CAP, drills).await?;
        let shown = |n: i64, over: bool| {
            let digits = n.to_string();
            let mut grouped = String::new();
            for (i, c) in digits.chars().enumerate() {
                if i > 0 && (digits.len() - i).is_multiple_of(3) {
                    grouped.push(',');
                }
                grouped.push(c);
            }
            if over {
                grouped.push('+');
            }
            grouped
        };
        let total = shown(
            capped.iter().map(|(_, n, _)| n).sum(),
            capped.iter().any(|(_, _, over)| *over),
        );
        let counts: Vec<(String, String)> = capped
            .iter()
            .map(|(s, n, over)| (s.as_str().to_owned(), shown(*n, *over)))
            .collect();
        let flow = self.tenant_flow().await?;
        if let Some(needle) = &query.q {
            let mut found = self.ledger.find_jobs(needle).await?;
            found.retain(|j| self.covers(&j.tenant));
            let notice = found
                .is_empty()
                .then(|| format!("No job has the id or idempotency key “{needle}”."));
            return Ok(JobsPage {
                rows: found.iter().map(|j| job_row(now, j, self.zone)).collect(),
                next: None,
                counts,
                total,
                notice,
                bad_parameter: None,
                tenants: known,
                flow,
            });
        }
        let bad = |name: &str, value: &str, expected: &str| {
            Ok(JobsPage {
                rows: Vec::new(),
                next: None,
                counts: counts.clone(),
                total: total.clone(),
                notice: None,
                bad_parameter: Some(BadParameter::new(name, value, expected)),
                tenants: known.clone(),
                flow: Vec::new(),
            })
        };
        let filter = match self.job_filter(
            &query,
            &Scoped {
                known: Vec::new(),
                tenants,
                drills_apart,
            },
        ) {
            Ok(filter) => filter,
            Err(b) => return bad(&b.name, &b.value, &b.expected),
        };
        let page = self
            .ledger
            .list_jobs(&JobFilter {
                limit: PAGE_JOBS,
                ..filter
            })
            .await?;
        Ok(JobsPage {
            rows: page
                .jobs
                .iter()
                .map(|j| job_row(now, j, self.zone))
                .collect(),
            next: page.next,
            counts,
            total,
            notice: None,
            bad_parameter: None,
            tenants: known,
            flow,
        })
    }
}

/// Whose jobs a list may show: the tenants there are (within the operator's scope), the
/// tenants asked for, and whether drill jobs are left out.
pub(super) struct Scoped {
    pub(super) known: Vec<String>,
    pub(super) tenants: Option<Vec<String>>,
    pub(super) drills_apart: bool,
}

impl LedgerConsole {
    /// The tenants `query` may show. A typed tenant matches whatever its case.
    pub(super) async fn scope(&self, query: &JobsQuery) -> Result<Scoped, LedgerError> {
        let known: Vec<String> = self
            .ledger
            .job_tenants(500)
            .await?
            .into_iter()
            .filter(|t| self.covers(t))
            .collect();
        let tenant = query.tenant.as_deref().map(|wanted| {
            known
                .iter()
                .find(|t| t.eq_ignore_ascii_case(wanted))
                .cloned()
                .unwrap_or_else(|| wanted.to_owned())
        });
        let tenants = self.tenants_for(tenant.as_deref());
        Ok(Scoped {
            known,
            tenants,
            drills_apart: fenceline_app::pages::jobs::drills_apart(query),
        })
    }

    /// The ledger's filter for a jobs list `query` within `scoped`, or the parameter it cannot
    /// use. Its `limit` is left for the caller.
    pub(super) fn job_filter(
        &self,
        query: &JobsQuery,
        scoped: &Scoped,
    ) -> Result<JobFilter, BadParameter> {
        let state = match query.state.as_deref() {
            Some(text) => Some(text.parse::<JobState>().map_err(|_| {
                BadParameter::new(
                    "state",
                    text,
                    "a job state (ready, running, unknown, retry_authorized, succeeded, \
                     failed_terminal or expired)",
                )
            })?),
            None => None,
        };
        let mut bounds = [None, None];
        for (slot, name, text) in [
            (0, "created_after", &query.created_after),
            (1, "created_before", &query.created_before),
        ] {
            if let Some(text) = text.as_deref() {
                let at = parse_instant_in(text, self.zone).map_err(|_| {
                    BadParameter::new(
                        name,
                        text,
                        &format!(
                            "a date and time such as 2026-12-01T09:30 (read in {})",
                            self.zone.name()
                        ),
                    )
                })?;
                bounds[slot] = Some(JobId::lower_bound_at(unix_ms(at)));
            }
        }
        let [from_id, to_id] = bounds;
        if let (Some(from), Some(to)) = (&from_id, &to_id) {
            if to <= from {
                return Err(BadParameter::new(
                    "created_before",
                    query.created_before.as_deref().unwrap_or_default(),
                    "later than created_after",
                ));
            }
        }
        let before = match query.before.as_deref() {
            Some(text) => Some(
                text.parse::<JobId>()
                    .map_err(|_| {
                        BadParameter::new("before", text, "a job id from the list's next-page link")
                    })?
                    .to_string(),
            ),
            None => None,
        };
        Ok(JobFilter {
            tenant: None,
            tenants: scoped.tenants.clone(),
            state,
            before,
            from_id,
            to_id,
            key_prefix: query.key_prefix.clone(),
            worker: query.worker.clone(),
            error_code: query.error_code.clone(),
            redelivered: query.redelivered,
            stale_rejected: query.stale_rejected,
            without_drills: scoped.drills_apart,
            owner: query.owner.clone(),
            limit: PAGE_JOBS,
        })
    }
}
