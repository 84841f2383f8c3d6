//! Prometheus metrics: process counters kept in atomics (bounded label values only — never a
//! job id, tenant, message id or handle) plus ledger gauges read at scrape time.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

/// Delivery outcomes, as label values.
pub const DELIVERY_OUTCOMES: [&str; 10] = [
    "rejected",
    "acked_terminal",
    "duplicate_suppressed",
    "deferred",
    "handed_to_ledger",
    "succeeded",
    "failed",
    "fenced",
    "stopped",
    "ledger_unavailable",
];

/// Counters of this process.
pub struct Metrics {
    deliveries: [AtomicU64; 10],
    /// visibility ok/failed/uncertain, lease ok/refused/failed
    renewals: [AtomicU64; 6],
    deletes_ok: AtomicU64,
    deletes_failed: AtomicU64,
    dispatched: AtomicU64,
    dispatch_failed: AtomicU64,
}

#[allow(clippy::declare_interior_mutable_const)]
const ZERO: AtomicU64 = AtomicU64::new(0);

/// The process's metrics.
pub static METRICS: Metrics = Metrics {
    deliveries: [ZERO; 10],
    renewals: [ZERO; 6],
    deletes_ok: ZERO,
    deletes_failed: ZERO,
    dispatched: ZERO,
    dispatch_failed: ZERO,
};

/// Which renewal, and how it went.
#[derive(Debug, Clone, Copy)]
pub enum Renewal {
    VisibilityOk,
    VisibilityFailed,
    VisibilityUncertain,
    LeaseOk,
    LeaseRefused,
    LeaseFailed,
}

impl Metrics {
    pub fn delivery(&self, outcome: &str) {
        if let Some(i) = DELIVERY_OUTCOMES.iter().position(|o| *o == outcome) {
            self.deliveries[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn renewal(&self, kind: Renewal, n: u64) {
        self.renewals[kind as usize].fetch_add(n, Ordering::Relaxed);
    }

    pub fn delete(&self, ok: bool) {
        let counter = if ok {
            &self.deletes_ok
        } else {
            &self.deletes_failed
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn dispatch(&self, sent: u64, failed: u64) {
        self.dispatched.fetch_add(sent, Ordering::Relaxed);
        self.dispatch_failed.fetch_add(failed, Ordering::Relaxed);
    }

    /// The counters in the Prometheus text format.
    pub fn render(&self, out: &mut String) {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        out.push_str("# HELP fenceline_deliveries_total Queue deliveries handled, by outcome.\n");
        out.push_str("# TYPE fenceline_deliveries_total counter\n");
        for (i, outcome) in DELIVERY_OUTCOMES.iter().enumerate() {
            let _ = writeln!(
                out,
                "fenceline_deliveries_total{{outcome=\"{outcome}\"}} {}",
                get(&self.deliveries[i])
            );
        }
        out.push_str("# HELP fenceline_renewals_total Visibility and lease renewals, by result.\n");
        out.push_str("# TYPE fenceline_renewals_total counter\n");
        for (i, (kind, result)) in [
            ("visibility", "ok"),
            ("visibility", "failed"),
            ("visibility", "uncertain"),
            ("lease", "ok"),
            ("lease", "refused"),
            ("lease", "failed"),
        ]
        .iter()
        .enumerate()
        {
            let _ = writeln!(
                out,
                "fenceline_renewals_total{{kind=\"{kind}\",result=\"{result}\"}} {}",
                get(&self.renewals[i])
            );
        }
        out.push_str(
            "# HELP fenceline_deletes_total Message deletes after an outcome, by result.\n",
        );
        out.push_str("# TYPE fenceline_deletes_total counter\n");
        let _ = writeln!(
            out,
            "fenceline_deletes_total{{result=\"ok\"}} {}",
            get(&self.deletes_ok)
        );
        let _ = writeln!(
            out,
            "fenceline_deletes_total{{result=\"failed\"}} {}",
            get(&self.deletes_failed)
        );
        out.push_str(
            "# HELP fenceline_dispatched_total Outbox rows sent to the queue, by result.\n",
        );
        out.push_str("# TYPE fenceline_dispatched_total counter\n");
        let _ = writeln!(
            out,
            "fenceline_dispatched_total{{result=\"sent\"}} {}",
            get(&self.dispatched)
        );
        let _ = writeln!(
            out,
            "fenceline_dispatched_total{{result=\"failed\"}} {}",
            get(&self.dispatch_failed)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_render_with_bounded_labels_only() {
        METRICS.delivery("succeeded");
        METRICS.delivery("not-an-outcome");
        METRICS.renewal(Renewal::LeaseRefused, 2);
        let mut text = String::new();
        METRICS.render(&mut text);
        assert!(text.contains("fenceline_deliveries_total{outcome=\"succeeded\"}"));
        assert!(!text.contains("not-an-outcome"));
        assert!(text.contains("fenceline_renewals_total{kind=\"lease\",result=\"refused\"}"));
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let value = line.rsplit(' ').next().unwrap();
            assert!(value.parse::<u64>().is_ok(), "{line}");
        }
    }
}
