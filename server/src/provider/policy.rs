//! The model policy: which models a job may name and which parameters it may pass, per
//! deployment and, where configured, per tenant. Checked at submission, so a tenant cannot
//! pick an unapproved (expensive) model, fan out `n` completions, ask for unbounded output, or
//! stream — a streamed answer cut off mid-way makes every attempt uncertain.
//!
//! Pure: no I/O. Must not know about HTTP; the API turns a refusal into a 400.

use std::collections::HashMap;

use serde_json::{Map, Value};

/// The parameters a job may pass through to the model, each with its bound.
pub const ALLOWED_PARAMETERS: &[&str] = &[
    "model",
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "seed",
    "stop",
    "response_format",
    "presence_penalty",
    "frequency_penalty",
    "reasoning_effort",
    "n",
    "stream",
    "fallback",
];

/// What a deployment allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelPolicy {
    /// Models any tenant may name; `*` allows any. A job that names none gets the provider's
    /// configured model.
    pub models: Vec<String>,
    /// Tenants with their own list (replacing `models` for them).
    pub tenant_models: HashMap<String, Vec<String>>,
    /// Upper bound of `max_tokens` / `max_completion_tokens`.
    pub max_output_tokens: u64,
}

impl Default for ModelPolicy {
    /// Any model, the parameter bounds still enforced.
    fn default() -> Self {
        ModelPolicy {
            models: vec!["*".into()],
            tenant_models: HashMap::new(),
            max_output_tokens: 16_384,
        }
    }
}

impl ModelPolicy {
    /// Parses `tenant=model,model` entries (as `--tenant-models` takes them).
    pub fn parse_tenant_models(entries: &[String]) -> Result<HashMap<String, Vec<String>>, String> {
        let mut out = HashMap::new();
        for entry in entries.iter().map(|e| e.trim()).filter(|e| !e.is_empty()) {
            let (tenant, models) = entry
                .split_once('=')
                .ok_or_else(|| format!("`{entry}` is not `tenant=model,model`"))?;
            let models: Vec<String> = models
                .split(',')
                .map(|m| m.trim().to_owned())
                .filter(|m| !m.is_empty())
                .collect();
            if tenant.trim().is_empty() || models.is_empty() {
                return Err(format!("`{entry}` names no tenant or no model"));
            }
            out.insert(tenant.trim().to_owned(), models);
        }
        Ok(out)
    }

    fn models_for(&self, tenant: &str) -> &[String] {
        self.tenant_models
            .get(tenant)
            .map_or(self.models.as_slice(), Vec::as_slice)
    }

    /// Checks one job's model parameters for `tenant`; the message says what to change.
    pub fn check(&self, tenant: &str, params: &Map<String, Value>) -> Result<(), String> {
        for (key, value) in params {
            if !ALLOWED_PARAMETERS.contains(&key.as_str()) {
                return Err(format!(
                    "model parameter `{key}` is not allowed; allowed: {}",
                    ALLOWED_PARAMETERS.join(", ")
                ));
            }
            self.check_one(tenant, key, value)?;
        }
        Ok(())
    }

    fn check_one(&self, tenant: &str, key: &str, value: &Value) -> Result<(), String> {
        let number_in = |lo: f64, hi: f64| match value.as_f64() {
            Some(v) if (lo..=hi).contains(&v) => Ok(()),
            _ => Err(format!("`{key}` must be a number from {lo} to {hi}")),
        };
        match key {
            "model" => {
                let allowed = self.models_for(tenant);
                let Some(model) = value.as_str() else {
                    return Err("`model` must be a string".into());
                };
                if allowed.iter().any(|m| m == "*" || m == model) {
                    Ok(())
                } else {
                    Err(format!(
                        "model `{model}` is not allowed here; allowed: {}",
                        allowed.join(", ")
                    ))
                }
            }
            // The job's own route: each pair's model is held to the same list.
            "fallback" => {
                for pair in super::route::own(value)? {
                    self.check_one(tenant, "model", &Value::String(pair.model))?;
                }
                Ok(())
            }
            "temperature" => number_in(0.0, 2.0),
            "top_p" => number_in(0.0, 1.0),
            "presence_penalty" | "frequency_penalty" => number_in(-2.0, 2.0),
            "max_tokens" | "max_completion_tokens" => match value.as_u64() {
                Some(n) if (1..=self.max_output_tokens).contains(&n) => Ok(()),
                _ => Err(format!(
                    "`{key}` must be a whole number from 1 to {}",
                    self.max_output_tokens
                )),
            },
            "seed" => match value.as_i64() {
                Some(_) => Ok(()),
                None => Err("`seed` must be a whole number".into()),
            },
            "n" => match value.as_u64() {
                Some(1) => Ok(()),
                _ => Err("`n` must be 1: a job has exactly one answer".into()),
            },
            "stream" => match value.as_bool() {
                Some(false) => Ok(()),
                _ => Err(
                    "`stream` must be false: a stream cut off mid-way leaves every attempt \
                     uncertain"
                        .into(),
                ),
            },
            "stop" => match value {
                Value::String(s) if s.len() <= 256 => Ok(()),
                Value::Array(items)
                    if items.len() <= 4
                        && items
                            .iter()
                            .all(|i| i.as_str().is_some_and(|s| s.len() <= 256)) =>
                {
                    Ok(())
                }
                _ => Err("`stop` must be a string or up to 4 strings".into()),
            },
            "response_format" => match value {
                Value::Object(_) => Ok(()),
                _ => Err("`response_format` must be an object".into()),
            },
            "reasoning_effort" => match value.as_str() {
                Some("minimal" | "low" | "medium" | "high") => Ok(()),
                _ => Err("`reasoning_effort` must be minimal, low, medium or high".into()),
            },
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn policy() -> ModelPolicy {
        ModelPolicy {
            models: vec!["small".into()],
            tenant_models: ModelPolicy::parse_tenant_models(&["vip=small, large".into()]).unwrap(),
            max_output_tokens: 1000,
        }
    }

    fn check(tenant: &str, params: Value) -> Result<(), String> {
        policy().check(tenant, params.as_object().unwrap())
    }

    #[test]
    fn models_are_allowed_per_deployment_and_per_tenant() {
        assert!(check("acme", json!({})).is_ok());
        assert!(check("acme", json!({"model": "small"})).is_ok());
        let refused = check("acme", json!({"model": "large"})).unwrap_err();
        assert!(refused.contains("allowed: small"), "{refused}");
        assert!(check("vip", json!({"model": "large"})).is_ok());
        assert!(ModelPolicy::default()
            .check("x", json!({"model": "any"}).as_object().unwrap())
            .is_ok());
    }

    #[test]
    fn parameters_outside_their_bounds_are_refused_with_the_reason() {
        for (params, says) in [
            (json!({"stream": true}), "stream"),
            (json!({"n": 2}), "`n` must be 1"),
            (json!({"max_tokens": 1001}), "1 to 1000"),
            (json!({"max_completion_tokens": 0}), "1 to 1000"),
            (json!({"temperature": 3}), "temperature"),
            (json!({"top_p": -0.1}), "top_p"),
            (json!({"stop": ["a", "b", "c", "d", "e"]}), "stop"),
            (json!({"logprobs": true}), "not allowed"),
            (json!({"model": 7}), "string"),
            (
                json!({"fallback": ["anthropic:large"]}),
                "model `large` is not allowed",
            ),
            (json!({"fallback": ["nowhere:small"]}), "provider `nowhere`"),
            (json!({"fallback": "bedrock:small"}), "list"),
        ] {
            let refused = check("acme", params.clone()).unwrap_err();
            assert!(refused.contains(says), "{params}: {refused}");
        }
        assert!(check(
            "acme",
            json!({"temperature": 0.2, "max_tokens": 1000, "n": 1, "stream": false, "seed": 7,
                   "stop": ["\n"], "response_format": {"type": "json_object"},
                   "fallback": ["bedrock:small", {"provider": "anthropic", "model": "small"}]})
        )
        .is_ok());
    }

    #[test]
    fn tenant_model_lists_must_name_a_tenant_and_a_model() {
        assert!(ModelPolicy::parse_tenant_models(&["acme".into()]).is_err());
        assert!(ModelPolicy::parse_tenant_models(&["=m".into()]).is_err());
        assert!(ModelPolicy::parse_tenant_models(&["acme=".into()]).is_err());
    }
}
