//! Fallback between providers: a job's *route*, the ordered provider/model pairs its attempts
//! may go to. The first pair is the worker's own provider with the job's model; the pairs
//! after it come from the job's `fallback` parameter, else its tenant's default route
//! (`--fallback tenant=provider:model,…`, `*` for every tenant).
//!
//! A job moves on to the next pair only on a refusal that proves the model did not run: a
//! throttled attempt whose pair has refused the job, the wait it still asks for counted, for
//! longer than [`Routes::after`], or a model that is not ready to serve. Never after an
//! uncertain attempt: that waits in `unknown` for a decision, on the pair it ran on. The move
//! keeps the job's id, its fixed deadline and its attempt budget.
//!
//! Pure: no I/O.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::Value;

/// The providers a route may name: the `--provider` kinds.
pub const PROVIDERS: &[&str] = &["stub", "openai", "openai-responses", "anthropic", "bedrock"];

/// Most pairs a route may name after its first.
pub const MAX_FALLBACKS: usize = 4;

/// One step of a route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pair {
    pub provider: String,
    pub model: String,
}

impl Pair {
    /// `provider:model` (the model may itself hold `:`, as Bedrock's ids do).
    pub fn parse(text: &str) -> Result<Pair, String> {
        let (provider, model) = text
            .trim()
            .split_once(':')
            .ok_or_else(|| format!("`{text}` is not `provider:model`"))?;
        Pair::new(provider.trim(), model.trim())
    }

    fn new(provider: &str, model: &str) -> Result<Pair, String> {
        if !PROVIDERS.contains(&provider) {
            return Err(format!(
                "provider `{provider}` is not one of {}",
                PROVIDERS.join(", ")
            ));
        }
        if model.is_empty() {
            return Err(format!("`{provider}:` names no model"));
        }
        Ok(Pair {
            provider: provider.to_owned(),
            model: model.to_owned(),
        })
    }

    /// One entry of a job's `fallback` parameter: `"provider:model"` or
    /// `{"provider": …, "model": …}`.
    pub fn of_value(value: &Value) -> Result<Pair, String> {
        match value {
            Value::String(text) => Pair::parse(text),
            Value::Object(o) => match (
                o.get("provider").and_then(Value::as_str),
                o.get("model").and_then(Value::as_str),
            ) {
                (Some(provider), Some(model)) => Pair::new(provider, model),
                _ => Err("a `fallback` entry names a `provider` and a `model`".into()),
            },
            _ => Err("a `fallback` entry is `\"provider:model\"` or an object".into()),
        }
    }
}

/// A job's own route after its first pair: the value of its `fallback` parameter.
pub fn own(fallback: &Value) -> Result<Vec<Pair>, String> {
    let list = fallback
        .as_array()
        .ok_or("`fallback` must be a list of `provider:model` pairs")?;
    if list.len() > MAX_FALLBACKS {
        return Err(format!(
            "`fallback` names {} pairs; at most {MAX_FALLBACKS}",
            list.len()
        ));
    }
    list.iter().map(Pair::of_value).collect()
}

/// The deployment's routes and when a refusal moves a job on.
#[derive(Debug, Clone, PartialEq)]
pub struct Routes {
    /// Each tenant's default pairs after the first; `*` for every tenant without its own.
    pub by_tenant: HashMap<String, Vec<Pair>>,
    /// A throttled job moves on once its pair has refused it for longer than this, the wait
    /// it still asks for counted.
    pub after: Duration,
}

impl Default for Routes {
    fn default() -> Self {
        Routes {
            by_tenant: HashMap::new(),
            after: Duration::from_secs(30),
        }
    }
}

/// Why a refusal moves a job on, or `None` when it waits for the same pair.
pub fn moves_on(
    error_code: &str,
    refused_for: Duration,
    wait: Duration,
    after: Duration,
) -> Option<&'static str> {
    if error_code == "ModelNotReadyException" {
        return Some("not_ready");
    }
    (refused_for + wait > after).then_some("waited_past")
}

impl Routes {
    /// Parses `tenant=provider:model,provider:model` entries (`--fallback`).
    pub fn parse(entries: &[String], after: Duration) -> Result<Routes, String> {
        let mut by_tenant = HashMap::new();
        for entry in entries.iter().map(|e| e.trim()).filter(|e| !e.is_empty()) {
            let (tenant, pairs) = entry
                .split_once('=')
                .ok_or_else(|| format!("`{entry}` is not `tenant=provider:model,…`"))?;
            let pairs: Vec<Pair> = pairs
                .split(',')
                .filter(|p| !p.trim().is_empty())
                .map(Pair::parse)
                .collect::<Result<_, _>>()?;
            if tenant.trim().is_empty() || pairs.is_empty() {
                return Err(format!("`{entry}` names no tenant or no pair"));
            }
            if pairs.len() > MAX_FALLBACKS {
                return Err(format!("`{entry}`: at most {MAX_FALLBACKS} pairs"));
            }
            by_tenant.insert(tenant.trim().to_owned(), pairs);
        }
        Ok(Routes { by_tenant, after })
    }

    /// The pairs after the first for a job of `tenant` whose `fallback` parameter is `own`:
    /// its own, else its tenant's, else every tenant's. A `fallback` that does not read (the
    /// API refuses it at submission) names none.
    pub fn of(&self, tenant: &str, own: Option<&Value>) -> Vec<Pair> {
        match own.map(self::own) {
            Some(Ok(own)) => own,
            Some(Err(_)) => Vec::new(),
            None => self
                .by_tenant
                .get(tenant)
                .or_else(|| self.by_tenant.get("*"))
                .cloned()
                .unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pairs_read_from_flags_and_parameters() {
        let routes = Routes::parse(
            &[
                "acme=anthropic:claude-haiku-4-5, bedrock:amazon.nova-lite-v1:0".into(),
                "*=openai:gpt-4o-mini".into(),
            ],
            Duration::from_secs(10),
        )
        .unwrap();
        let acme = routes.of("acme", None);
        assert_eq!(acme.len(), 2);
        assert_eq!(
            acme[1].model, "amazon.nova-lite-v1:0",
            "a model may hold `:`"
        );
        assert_eq!(routes.of("other", None)[0].provider, "openai");
        let own = routes.of(
            "acme",
            Some(&json!([{"provider": "bedrock", "model": "m"}, "stub:stub"])),
        );
        assert_eq!(own.len(), 2, "a job's own route replaces its tenant's");
        assert!(Routes::parse(&["acme=nowhere:m".into()], Duration::ZERO).is_err());
        assert!(self::own(&json!("openai:m")).is_err());
        assert!(self::own(&json!(["openai:"])).is_err());
    }

    #[test]
    fn only_a_long_refusal_or_a_model_not_ready_moves_on() {
        let after = Duration::from_secs(30);
        let s = Duration::from_secs;
        assert_eq!(moves_on("rate_limited", s(0), s(5), after), None);
        assert_eq!(
            moves_on("rate_limited", s(0), s(60), after),
            Some("waited_past")
        );
        assert_eq!(
            moves_on("rate_limited", s(28), s(5), after),
            Some("waited_past")
        );
        assert_eq!(
            moves_on("ModelNotReadyException", s(0), s(1), after),
            Some("not_ready")
        );
    }
}
