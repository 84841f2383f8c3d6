//! What a job's attempts spent, from what each answer reported: all of it, the part spent on
//! answers that were not accepted (*duplicate spend*), and the most the attempts whose outcome
//! is unknown may have cost (*at risk*).

use serde_json::Value;

use super::model::{Attempt, AttemptOutcome, Job};
use super::{Ledger, LedgerError};
use crate::provider::prices::Prices;

/// An answer that is not its job's accepted result (the SQL condition, over `attempts a` and
/// `jobs j`).
macro_rules! not_accepted {
    () => {
        "(j.result_ref IS NULL OR a.result_ref <> j.result_ref)"
    };
}

/// What the answers recorded in a window cost (drill jobs left out), in nano-dollars.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WindowSpend {
    pub answers: i64,
    pub spent: i64,
    pub duplicate_answers: i64,
    pub duplicate: i64,
}

/// What one model's answers of a window used and cost, accepted or not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelSpend {
    pub model: String,
    /// Whether the answers are not their jobs' accepted results.
    pub duplicate: bool,
    pub tokens: i64,
    /// Nano-dollars; answers without a price count nothing.
    pub cost: i64,
}

impl Ledger {
    /// What the answers recorded since `since` (µs) used and cost, by model and by whether
    /// they were accepted (drill jobs left out).
    pub async fn spend_by_model_since(&self, since: i64) -> Result<Vec<ModelSpend>, LedgerError> {
        #[derive(sqlx::FromRow)]
        struct Row {
            model: Option<String>,
            dup: i64,
            tokens: Option<i64>,
            cost: Option<i64>,
        }
        let rows: Vec<Row> = sqlx::query_as(concat!(
            "SELECT a.usage_model AS model, CASE WHEN ",
            not_accepted!(),
            " THEN 1 ELSE 0 END AS dup, \
             CAST(SUM(a.tokens) AS BIGINT) AS tokens, CAST(SUM(a.cost_nusd) AS BIGINT) AS cost \
             FROM attempts a JOIN jobs j ON j.job_id = a.job_id \
             WHERE a.tokens IS NOT NULL AND a.finished_at >= $1 \
             AND a.outcome IN ('succeeded', 'stale_discarded') AND j.drill_run IS NULL \
             GROUP BY a.usage_model, dup"
        ))
        .bind(since)
        .fetch_all(&self.reader)
        .await?;
        Ok(rows
            .into_iter()
            .map(|r| ModelSpend {
                model: r.model.unwrap_or_default(),
                duplicate: r.dup == 1,
                tokens: r.tokens.unwrap_or(0),
                cost: r.cost.unwrap_or(0),
            })
            .collect())
    }

    /// What the answers recorded in each of `n` buckets of `width` µs from `start` cost (drill
    /// jobs left out): all of it, and the part on answers that are not their job's accepted
    /// result.
    pub async fn spend_buckets(
        &self,
        start: i64,
        width: i64,
        n: usize,
    ) -> Result<Vec<WindowSpend>, LedgerError> {
        #[derive(sqlx::FromRow)]
        struct Row {
            b: i64,
            answers: i64,
            spent: Option<i64>,
            duplicate_answers: Option<i64>,
            duplicate: Option<i64>,
        }
        let rows: Vec<Row> = sqlx::query_as(concat!(
            "SELECT CAST((a.finished_at - $1) / $2 AS BIGINT) AS b, COUNT(*) AS answers, \
             CAST(SUM(a.cost_nusd) AS BIGINT) AS spent, \
             CAST(SUM(CASE WHEN ",
            not_accepted!(),
            " THEN 1 ELSE 0 END) AS BIGINT) AS duplicate_answers, \
             CAST(SUM(CASE WHEN ",
            not_accepted!(),
            " THEN a.cost_nusd ELSE 0 END) AS BIGINT) AS duplicate \
             FROM attempts a JOIN jobs j ON j.job_id = a.job_id \
             WHERE a.tokens IS NOT NULL AND a.finished_at >= $1 \
             AND a.outcome IN ('succeeded', 'stale_discarded') AND j.drill_run IS NULL \
             GROUP BY b"
        ))
        .bind(start)
        .bind(width.max(1))
        .fetch_all(&self.reader)
        .await?;
        let mut buckets = vec![WindowSpend::default(); n];
        for row in rows {
            if let Some(bucket) = usize::try_from(row.b).ok().and_then(|b| buckets.get_mut(b)) {
                *bucket = WindowSpend {
                    answers: row.answers,
                    spent: row.spent.unwrap_or(0),
                    duplicate_answers: row.duplicate_answers.unwrap_or(0),
                    duplicate: row.duplicate.unwrap_or(0),
                };
            }
        }
        Ok(buckets)
    }

    /// What `job`'s `attempts` spent, with the most its attempts of unknown outcome may have
    /// cost at `prices` (its model: the one its parameters name, else `default_model`).
    pub async fn job_spend(
        &self,
        job: &Job,
        attempts: &[Attempt],
        prices: &Prices,
        default_model: &str,
    ) -> Result<JobSpend, LedgerError> {
        let lost = attempts
            .iter()
            .any(|a| a.outcome == AttemptOutcome::Lost && a.usage.is_none());
        let bound = match lost {
            true => self
                .job_input(&job.job_id)
                .await?
                .and_then(|(input, params)| {
                    let model = params["model"].as_str().unwrap_or(default_model);
                    call_bound(prices, model, &params, &input, attempts)
                }),
            false => None,
        };
        Ok(JobSpend::of(job, attempts, bound))
    }
}

/// A job's spend. Amounts in nano-dollars; an attempt whose model has no price counts in
/// tokens only.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobSpend {
    /// Tokens every answer reported (input and output).
    pub tokens: u64,
    /// The known cost of every attempt.
    pub spent: i64,
    /// Attempts that reported tokens for a model without a price.
    pub unpriced: usize,
    /// The known cost of the attempts that ran the model and whose answer is not the job's
    /// accepted result: an answer kept as stale evidence, one the job never used.
    pub duplicate: i64,
    pub duplicate_attempts: usize,
    /// The most the attempts that may have run with no usage seen (`lost`) may have cost;
    /// `None` when one of them has no bound (its model has no price, or no output limit).
    pub at_risk: Option<i64>,
    pub at_risk_attempts: usize,
}

impl JobSpend {
    /// The spend of `job` over its `attempts`; `bound` is the most one attempt whose usage
    /// is unknown may have cost.
    pub fn of(job: &Job, attempts: &[Attempt], bound: Option<i64>) -> JobSpend {
        let mut out = JobSpend {
            at_risk: Some(0),
            ..JobSpend::default()
        };
        for a in attempts {
            match a.spend() {
                Some(spend) => {
                    out.tokens = out.tokens.saturating_add(spend.usage.total());
                    match spend.cost {
                        Some(cost) => out.spent = out.spent.saturating_add(cost),
                        None => out.unpriced += 1,
                    }
                    let answered = matches!(
                        a.outcome,
                        AttemptOutcome::Succeeded | AttemptOutcome::StaleDiscarded
                    );
                    if answered && a.result_ref != job.result_ref {
                        out.duplicate = out.duplicate.saturating_add(spend.cost.unwrap_or(0));
                        out.duplicate_attempts += 1;
                    }
                }
                None if a.outcome == AttemptOutcome::Lost => {
                    out.at_risk_attempts += 1;
                    out.at_risk = out.at_risk.zip(bound).map(|(sum, b)| sum.saturating_add(b));
                }
                None => {}
            }
        }
        out
    }
}

/// The most one call of a job may cost on `model`: its input tokens (as another attempt of
/// the job reported them, else its input's length in bytes, which no count of tokens
/// exceeds) and its output limit (`max_tokens`, `max_output_tokens` or
/// `max_completion_tokens` in its model parameters). `None` without a price or a limit.
pub fn call_bound(
    prices: &Prices,
    model: &str,
    params: &Value,
    input: &Value,
    attempts: &[Attempt],
) -> Option<i64> {
    let known = attempts
        .iter()
        .filter_map(Attempt::spend)
        .map(|s| s.usage.input)
        .max();
    let input_tokens = known.unwrap_or_else(|| input.to_string().len() as u64);
    let max_output = ["max_tokens", "max_output_tokens", "max_completion_tokens"]
        .iter()
        .find_map(|k| params[k].as_u64());
    prices.bound(model, input_tokens, max_output)
}
