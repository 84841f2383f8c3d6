//! Prometheus metrics (OpenMetrics text, through `prometheus-client`): the process's counters
//! and the ledger's gauges, read at scrape time. One [`Metrics`] value per process, held by the
//! application state and the worker — no global. Every label is typed from a bounded enum
//! (states, outcomes, results) or a bounded code (refusal reasons): never a job id, tenant,
//! message id or handle.

use std::fmt::Write as _;
use std::sync::Arc;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::job::JobState;

macro_rules! label_values {
    ($(#[$doc:meta])* $name:ident { $($variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($variant),+ }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }

        impl EncodeLabelValue for $name {
            fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
                encoder.write_str(self.as_str())
            }
        }
    };
}

label_values! {
    /// How the worker handled one queue delivery.
    DeliveryOutcome {
        Rejected => "rejected",
        AckedTerminal => "acked_terminal",
        DuplicateSuppressed => "duplicate_suppressed",
        Deferred => "deferred",
        HandedToLedger => "handed_to_ledger",
        Succeeded => "succeeded",
        Failed => "failed",
        Throttled => "throttled",
        Fenced => "fenced",
        Stopped => "stopped",
        LedgerUnavailable => "ledger_unavailable",
    }
}

label_values! {
    /// Which renewal.
    RenewalKind { Visibility => "visibility", Lease => "lease" }
}

label_values! {
    /// How a request went: `uncertain` when it timed out and may have taken effect,
    /// `refused` when the ledger refused it (the owner was fenced out or its lease ran out).
    Outcome { Ok => "ok", Failed => "failed", Uncertain => "uncertain", Refused => "refused" }
}

label_values! {
    /// What became of an outbox row.
    Dispatch { Sent => "sent", Failed => "failed" }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct StateLabel(JobState);

impl EncodeLabelValue for StateLabel {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        encoder.write_str(self.0.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct DeliveryLabels {
    outcome: DeliveryOutcome,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RenewalLabels {
    kind: RenewalKind,
    result: Outcome,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ResultLabels {
    result: Outcome,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct DispatchLabels {
    result: Dispatch,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct StateLabels {
    state: StateLabel,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ReasonLabels {
    reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct StatusLabels {
    status: &'static str,
}

struct Inner {
    registry: Registry,
    deliveries: Family<DeliveryLabels, Counter>,
    renewals: Family<RenewalLabels, Counter>,
    deletes: Family<ResultLabels, Counter>,
    dispatches: Family<DispatchLabels, Counter>,
    ledger_up: Gauge,
    jobs: Family<StateLabels, Gauge>,
    outbox_pending: Gauge,
    oldest_ready: Gauge<f64, std::sync::atomic::AtomicU64>,
    rejected_messages: Family<ReasonLabels, Gauge>,
    workers: Family<StatusLabels, Gauge>,
    provider_refusals: Family<LimitLabels, Gauge>,
    provider_limited: Family<LimitLabels, Gauge>,
    provider_limited_seconds: Family<LimitLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    provider_concurrency: Family<LimitLabels, Gauge>,
    model_tokens: Family<SpendLabels, Gauge>,
    model_spend: Family<SpendLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
}

/// A model's answers, accepted or not (models are bounded by the model policy).
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct SpendLabels {
    model: String,
    /// `accepted`, or `duplicate`: an answer that is not its job's accepted result.
    fate: &'static str,
}

/// One provider limit: a provider and a model (models are bounded by the model policy).
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct LimitLabels {
    provider: String,
    model: String,
}

/// What the ledger says at scrape time (`None`: it did not answer).
#[derive(Debug, Clone, Default)]
pub struct LedgerGauges {
    pub jobs_by_state: Vec<(JobState, i64)>,
    pub outbox_pending: Option<i64>,
    /// How long the oldest `ready` job (drills left out) has waited for a worker, in seconds;
    /// 0 without one, `None` when the ledger did not say.
    pub oldest_ready_seconds: Option<f64>,
    pub rejected_by_reason: Vec<(String, i64)>,
    /// Worker processes that reported in the last day, as `(alive, silent, stopped)` (see
    /// `/workers`); `None` when the ledger did not say.
    pub workers: Option<(i64, i64, i64)>,
    /// What the fleet learned of each provider limit.
    pub provider_limits: Vec<crate::ledger::ProviderLimit>,
    /// What the last hour's answers used and cost, by model and by whether they were
    /// accepted.
    pub spend_last_hour: Vec<crate::ledger::ModelSpend>,
}

/// This process's metrics. Cheap to clone: clones count into the same series.
#[derive(Clone)]
pub struct Metrics(Arc<Inner>);

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let inner = Inner {
            deliveries: Family::default(),
            renewals: Family::default(),
            deletes: Family::default(),
            dispatches: Family::default(),
            ledger_up: Gauge::default(),
            jobs: Family::default(),
            outbox_pending: Gauge::default(),
            oldest_ready: Gauge::default(),
            rejected_messages: Family::default(),
            workers: Family::default(),
            provider_refusals: Family::default(),
            provider_limited: Family::default(),
            provider_limited_seconds: Family::default(),
            provider_concurrency: Family::default(),
            model_tokens: Family::default(),
            model_spend: Family::default(),
            registry: Registry::default(),
        };
        registry.register(
            "fenceline_deliveries",
            "Queue deliveries handled, by outcome",
            inner.deliveries.clone(),
        );
        registry.register(
            "fenceline_renewals",
            "Visibility and lease renewals, by result",
            inner.renewals.clone(),
        );
        registry.register(
            "fenceline_deletes",
            "Message deletes after an outcome, by result",
            inner.deletes.clone(),
        );
        registry.register(
            "fenceline_dispatched",
            "Outbox rows sent to the queue, by result",
            inner.dispatches.clone(),
        );
        registry.register(
            "fenceline_ledger_up",
            "Whether the ledger database answered this scrape",
            inner.ledger_up.clone(),
        );
        registry.register(
            "fenceline_jobs",
            "Jobs in the ledger, by state",
            inner.jobs.clone(),
        );
        registry.register(
            "fenceline_outbox_pending",
            "Outbox rows not yet sent to the queue",
            inner.outbox_pending.clone(),
        );
        registry.register_with_unit(
            "fenceline_oldest_ready_age",
            "How long the oldest ready job (drills left out) has waited for a worker's claim: \
             the queue's latency, 0 when none waits",
            prometheus_client::registry::Unit::Seconds,
            inner.oldest_ready.clone(),
        );
        registry.register(
            "fenceline_rejected_messages",
            "Queue messages refused, by reason",
            inner.rejected_messages.clone(),
        );
        registry.register(
            "fenceline_workers",
            "Worker processes that reported in the last day, by status (silent: running by \
             its last report, quiet for three reports)",
            inner.workers.clone(),
        );
        registry.register(
            "fenceline_provider_refusals",
            "Calls a provider refused before running them (rate limit, overload), summed over \
             the fleet since the limit was first met; none spent an attempt of a job's budget",
            inner.provider_refusals.clone(),
        );
        registry.register(
            "fenceline_provider_limited",
            "1 while the fleet holds calls to a provider until the reset it named, else 0",
            inner.provider_limited.clone(),
        );
        registry.register_with_unit(
            "fenceline_provider_limited",
            "Time the fleet's workers held calls to a provider for its limit, summed",
            prometheus_client::registry::Unit::Seconds,
            inner.provider_limited_seconds.clone(),
        );
        registry.register(
            "fenceline_model_tokens_last_hour",
            "Tokens the last hour's answers reported (input and output), by model and fate \
             (accepted, or duplicate: an answer that is not its job's accepted result), from \
             the ledger, so every worker process counts",
            inner.model_tokens.clone(),
        );
        registry.register(
            "fenceline_model_spend_last_hour_usd",
            "What the last hour's answers cost in US dollars at the configured prices, by \
             model and fate (accepted, or duplicate)",
            inner.model_spend.clone(),
        );
        registry.register(
            "fenceline_provider_concurrency",
            "Calls at once a worker learned the provider admits (the latest report)",
            inner.provider_concurrency.clone(),
        );
        // Every delivery outcome is there from the first scrape, at 0.
        for outcome in DeliveryOutcome::ALL {
            inner
                .deliveries
                .get_or_create(&DeliveryLabels { outcome: *outcome })
                .inc_by(0);
        }
        Metrics(Arc::new(Inner { registry, ..inner }))
    }
}

impl Metrics {
    pub fn delivery(&self, outcome: DeliveryOutcome) {
        self.0
            .deliveries
            .get_or_create(&DeliveryLabels { outcome })
            .inc();
    }

    /// The deliveries this process handled with `outcome` so far.
    pub fn deliveries(&self, outcome: DeliveryOutcome) -> u64 {
        self.0
            .deliveries
            .get_or_create(&DeliveryLabels { outcome })
            .get()
    }

    pub fn renewal(&self, kind: RenewalKind, result: Outcome, n: u64) {
        self.0
            .renewals
            .get_or_create(&RenewalLabels { kind, result })
            .inc_by(n);
    }

    pub fn delete(&self, ok: bool) {
        let result = if ok { Outcome::Ok } else { Outcome::Failed };
        self.0.deletes.get_or_create(&ResultLabels { result }).inc();
    }

    pub fn dispatch(&self, sent: u64, failed: u64) {
        for (result, n) in [(Dispatch::Sent, sent), (Dispatch::Failed, failed)] {
            self.0
                .dispatches
                .get_or_create(&DispatchLabels { result })
                .inc_by(n);
        }
    }

    /// The counters and `ledger`'s gauges in the OpenMetrics text format.
    pub fn render(&self, ledger: Option<&LedgerGauges>) -> String {
        let inner = &self.0;
        inner.ledger_up.set(i64::from(ledger.is_some()));
        if let Some(gauges) = ledger {
            for state in JobState::ALL {
                let n = gauges
                    .jobs_by_state
                    .iter()
                    .find(|(s, _)| *s == state)
                    .map_or(0, |(_, n)| *n);
                inner
                    .jobs
                    .get_or_create(&StateLabels {
                        state: StateLabel(state),
                    })
                    .set(n);
            }
            if let Some(pending) = gauges.outbox_pending {
                inner.outbox_pending.set(pending);
            }
            if let Some(seconds) = gauges.oldest_ready_seconds {
                inner.oldest_ready.set(seconds);
            }
            if let Some((alive, silent, stopped)) = gauges.workers {
                for (status, n) in [("alive", alive), ("silent", silent), ("stopped", stopped)] {
                    inner.workers.get_or_create(&StatusLabels { status }).set(n);
                }
            }
            for spend in &gauges.spend_last_hour {
                let labels = SpendLabels {
                    model: spend.model.clone(),
                    fate: if spend.duplicate {
                        "duplicate"
                    } else {
                        "accepted"
                    },
                };
                inner.model_tokens.get_or_create(&labels).set(spend.tokens);
                inner
                    .model_spend
                    .get_or_create(&labels)
                    .set(spend.cost as f64 / 1e9);
            }
            for limit in &gauges.provider_limits {
                let labels = LimitLabels {
                    provider: limit.provider.clone(),
                    model: limit.model.clone(),
                };
                inner
                    .provider_refusals
                    .get_or_create(&labels)
                    .set(limit.refusals);
                inner
                    .provider_limited
                    .get_or_create(&labels)
                    .set(i64::from(limit.limited_until.is_some()));
                inner
                    .provider_limited_seconds
                    .get_or_create(&labels)
                    .set(limit.limited_us as f64 / 1e6);
                if let Some(n) = limit.concurrency {
                    inner.provider_concurrency.get_or_create(&labels).set(n);
                }
            }
            for (reason, n) in &gauges.rejected_by_reason {
                inner
                    .rejected_messages
                    .get_or_create(&ReasonLabels {
                        reason: reason.clone(),
                    })
                    .set(*n);
            }
        }
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &inner.registry).is_err() {
            let _ = writeln!(out, "# metrics could not be encoded");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deliveries_are_counted_by_outcome() {
        let metrics = Metrics::default();
        let clone = metrics.clone();
        metrics.delivery(DeliveryOutcome::Succeeded);
        clone.delivery(DeliveryOutcome::Succeeded);
        metrics.delivery(DeliveryOutcome::Fenced);
        assert_eq!(metrics.deliveries(DeliveryOutcome::Succeeded), 2);
        assert_eq!(clone.deliveries(DeliveryOutcome::Fenced), 1);
        assert_eq!(metrics.deliveries(DeliveryOutcome::Stopped), 0);
    }

    #[test]
    fn counters_render_with_bounded_labels_only() {
        let metrics = Metrics::default();
        metrics.delivery(DeliveryOutcome::Succeeded);
        metrics.renewal(RenewalKind::Lease, Outcome::Refused, 2);
        let gauges = LedgerGauges {
            jobs_by_state: vec![(JobState::Succeeded, 1)],
            outbox_pending: Some(3),
            oldest_ready_seconds: Some(2.5),
            rejected_by_reason: vec![("not_json".into(), 4)],
            workers: Some((2, 1, 0)),
            provider_limits: vec![crate::ledger::ProviderLimit {
                provider: "openai".into(),
                model: "gpt-4o-mini".into(),
                limited_until: Some(1),
                limit_name: Some("requests".into()),
                concurrency: Some(6),
                rate_per_s: Some(20.0),
                refusals: 44,
                limited_us: 1_500_000,
                recent_refusals: 3,
                updated_at: 1,
                updated_by: "w1".into(),
            }],
            spend_last_hour: vec![crate::ledger::ModelSpend {
                model: "gpt-4o-mini".into(),
                duplicate: true,
                tokens: 1200,
                cost: 450_000,
            }],
        };
        let text = metrics.render(Some(&gauges));
        let limit = "{provider=\"openai\",model=\"gpt-4o-mini\"}";
        for line in [
            format!("fenceline_provider_refusals{limit} 44"),
            format!("fenceline_provider_limited{limit} 1"),
            format!("fenceline_provider_limited_seconds{limit} 1.5"),
            format!("fenceline_provider_concurrency{limit} 6"),
            "fenceline_model_tokens_last_hour{model=\"gpt-4o-mini\",fate=\"duplicate\"} 1200"
                .to_owned(),
            "fenceline_model_spend_last_hour_usd{model=\"gpt-4o-mini\",fate=\"duplicate\"} 0.00045"
                .to_owned(),
        ] {
            assert!(text.contains(&line), "{line} in {text}");
        }
        assert!(
            text.contains("fenceline_deliveries_total{outcome=\"succeeded\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("fenceline_deliveries_total{outcome=\"fenced\"} 0"),
            "{text}"
        );
        assert!(text.contains("fenceline_renewals_total{kind=\"lease\",result=\"refused\"} 2"));
        assert!(
            text.contains("fenceline_jobs{state=\"succeeded\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("fenceline_jobs{state=\"unknown\"} 0"),
            "{text}"
        );
        assert!(text.contains("fenceline_ledger_up 1"));
        assert!(text.contains("fenceline_outbox_pending 3"));
        assert!(
            text.contains("fenceline_oldest_ready_age_seconds 2.5"),
            "{text}"
        );
        assert!(text.contains("fenceline_rejected_messages{reason=\"not_json\"} 4"));
        assert!(
            text.contains("fenceline_workers{status=\"alive\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("fenceline_workers{status=\"silent\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("fenceline_workers{status=\"stopped\"} 0"),
            "{text}"
        );
        assert!(text.trim_end().ends_with("# EOF"));
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let value = line.rsplit(' ').next().unwrap();
            let value = value.parse::<f64>();
            assert!(value.is_ok_and(|v| v.is_finite() && v >= 0.0), "{line}");
        }
        assert!(metrics.render(None).contains("fenceline_ledger_up 0"));
    }

    #[test]
    fn two_processes_do_not_share_counters() {
        let (a, b) = (Metrics::default(), Metrics::default());
        a.delivery(DeliveryOutcome::Failed);
        assert!(b
            .render(None)
            .contains("fenceline_deliveries_total{outcome=\"failed\"} 0"));
    }
}
