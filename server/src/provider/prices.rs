//! What an attempt cost: the tokens each answer says it used ([`Usage`]) and a price table per
//! model ([`Prices`], US dollars per million tokens, from the settings). Amounts are whole
//! nano-dollars (10⁻⁹ USD), so sums are exact. A model without a price has tokens and no
//! amount: nothing is ever guessed.

use std::collections::HashMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The tokens an answer says it used, as each provider names them: `input` (prompt) tokens,
/// of which `cached` were read from the provider's cache; `output` (completion) tokens, of
/// which `reasoning`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input: u64,
    pub output: u64,
    #[serde(default)]
    pub cached: u64,
    #[serde(default)]
    pub reasoning: u64,
}

impl Usage {
    /// An answer's `usage` object: chat completions' `prompt_tokens`/`completion_tokens` (with
    /// their `…_details`), or the Responses API's and Anthropic's `input_tokens`/
    /// `output_tokens` (Anthropic counts cache reads apart from `input_tokens`). `None` when it
    /// names neither.
    pub fn read(usage: &Value) -> Option<Usage> {
        let n = |v: &Value| v.as_u64();
        if let (Some(input), Some(output)) =
            (n(&usage["prompt_tokens"]), n(&usage["completion_tokens"]))
        {
            return Some(Usage {
                input,
                output,
                cached: n(&usage["prompt_tokens_details"]["cached_tokens"]).unwrap_or(0),
                reasoning: n(&usage["completion_tokens_details"]["reasoning_tokens"]).unwrap_or(0),
            });
        }
        let (input, output) = (n(&usage["input_tokens"])?, n(&usage["output_tokens"])?);
        // Anthropic: cache reads and writes are not part of `input_tokens`.
        let mut read = Usage::with_cache(
            (input, output),
            n(&usage["cache_read_input_tokens"]).unwrap_or(0),
            n(&usage["cache_creation_input_tokens"]).unwrap_or(0),
        );
        read.cached = read
            .cached
            .saturating_add(n(&usage["input_tokens_details"]["cached_tokens"]).unwrap_or(0));
        read.reasoning = n(&usage["output_tokens_details"]["reasoning_tokens"]).unwrap_or(0);
        Some(read)
    }

    /// Usage as Anthropic and Bedrock count it: cache reads and writes apart from `input`;
    /// both are input the model read, and the reads are its cached part.
    pub fn with_cache((input, output): (u64, u64), cache_read: u64, cache_write: u64) -> Usage {
        Usage {
            input: input.saturating_add(cache_read).saturating_add(cache_write),
            output,
            cached: cache_read,
            reasoning: 0,
        }
    }

    pub fn total(&self) -> u64 {
        self.input.saturating_add(self.output)
    }
}

/// The stub model's price, so that trials, drills and soaks show costs: a small model's
/// prices (dollars per million input and output tokens).
pub const STUB_PRICE: &str = "stub=0.15/0.60";

/// One model's prices, US dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Price {
    pub input: f64,
    pub output: f64,
    /// Cached input tokens; the input price when not given.
    pub cached: Option<f64>,
}

/// Nano-dollars for `tokens` at `per_million` dollars per million.
fn nano(tokens: u64, per_million: f64) -> i64 {
    (tokens as f64 * per_million * 1_000.0).round() as i64
}

impl Price {
    /// What `usage` cost.
    pub fn cost(&self, usage: &Usage) -> i64 {
        let cached = usage.cached.min(usage.input);
        nano(usage.input - cached, self.input)
            .saturating_add(nano(cached, self.cached.unwrap_or(self.input)))
            .saturating_add(nano(usage.output, self.output))
    }
}

/// The price table: `model=input/output[/cached]` entries, dollars per million tokens.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Prices(HashMap<String, Price>);

/// A price entry that does not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("price {0:?}: write MODEL=INPUT/OUTPUT[/CACHED], US dollars per million tokens (e.g. gpt-4o-mini=0.15/0.60/0.075)")]
pub struct BadPrice(pub String);

impl Prices {
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> Result<Prices, BadPrice> {
        let mut table = HashMap::new();
        for entry in entries {
            let entry = entry.as_ref().trim();
            if entry.is_empty() {
                continue;
            }
            let bad = || BadPrice(entry.to_owned());
            let (model, amounts) = entry.split_once('=').ok_or_else(bad)?;
            let amounts: Vec<f64> = amounts
                .split('/')
                .map(|a| a.trim().parse::<f64>())
                .collect::<Result<_, _>>()
                .map_err(|_| bad())?;
            if model.trim().is_empty()
                || !(2..=3).contains(&amounts.len())
                || amounts.iter().any(|a| !a.is_finite() || *a < 0.0)
            {
                return Err(bad());
            }
            table.insert(
                model.trim().to_owned(),
                Price {
                    input: amounts[0],
                    output: amounts[1],
                    cached: amounts.get(2).copied(),
                },
            );
        }
        Ok(Prices(table))
    }

    pub fn get(&self, model: &str) -> Option<&Price> {
        self.0.get(model)
    }

    /// What `usage` cost on `model`: `None` without a price for it.
    pub fn cost(&self, model: &str, usage: &Usage) -> Option<i64> {
        self.get(model).map(|p| p.cost(usage))
    }

    /// The most a call of `input_tokens` that may answer up to `max_output` tokens costs on
    /// `model` (no cache discount): `None` without a price, or without a bound on the output.
    pub fn bound(&self, model: &str, input_tokens: u64, max_output: Option<u64>) -> Option<i64> {
        let price = self.get(model)?;
        Some(nano(input_tokens, price.input).saturating_add(nano(max_output?, price.output)))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// An amount in nano-dollars, shown as dollars: four significant decimals below a cent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Usd(pub i64);

impl fmt::Display for Usd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dollars = self.0 as f64 / 1e9;
        if self.0 == 0 {
            f.write_str("$0")
        } else if dollars.abs() >= 0.01 {
            write!(f, "${dollars:.2}")
        } else {
            // Small amounts keep two significant digits: $0.00042.
            let digits = (-dollars.abs().log10()).ceil() as usize + 1;
            write!(f, "${dollars:.digits$}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn usage_reads_as_each_provider_names_it() {
        let chat = json!({"prompt_tokens": 100, "completion_tokens": 20,
            "prompt_tokens_details": {"cached_tokens": 60},
            "completion_tokens_details": {"reasoning_tokens": 5}});
        assert_eq!(
            Usage::read(&chat),
            Some(Usage {
                input: 100,
                output: 20,
                cached: 60,
                reasoning: 5
            })
        );
        let responses = json!({"input_tokens": 10, "output_tokens": 4,
            "input_tokens_details": {"cached_tokens": 2},
            "output_tokens_details": {"reasoning_tokens": 1}});
        assert_eq!(
            Usage::read(&responses),
            Some(Usage {
                input: 10,
                output: 4,
                cached: 2,
                reasoning: 1
            })
        );
        let anthropic = json!({"input_tokens": 10, "output_tokens": 4,
            "cache_read_input_tokens": 30, "cache_creation_input_tokens": 5});
        assert_eq!(
            Usage::read(&anthropic),
            Some(Usage {
                input: 45,
                output: 4,
                cached: 30,
                reasoning: 0
            })
        );
        assert_eq!(Usage::read(&json!(null)), None);
        assert_eq!(Usage::read(&json!({"total_tokens": 3})), None);
    }

    #[test]
    fn a_cost_is_exact_and_a_missing_price_is_no_amount() {
        let prices = Prices::parse(&["gpt-4o-mini=0.15/0.60/0.075", " m = 1/2 "]).unwrap();
        let usage = Usage {
            input: 1_000,
            output: 500,
            cached: 400,
            reasoning: 0,
        };
        // 600 × 0.15 + 400 × 0.075 + 500 × 0.60 dollars per million = 0.00042 dollars.
        assert_eq!(prices.cost("gpt-4o-mini", &usage), Some(420_000));
        // Without a cached price, cached tokens cost as input.
        assert_eq!(prices.cost("m", &usage), Some(2_000_000));
        assert_eq!(prices.cost("unpriced", &usage), None);
        assert_eq!(prices.bound("m", 1_000, Some(100)), Some(1_200_000));
        assert_eq!(prices.bound("m", 1_000, None), None);
        for bad in ["gpt", "gpt=1", "gpt=1/x", "=1/2", "gpt=1/2/3/4", "gpt=-1/2"] {
            assert!(Prices::parse(&[bad]).is_err(), "{bad}");
        }
    }

    #[test]
    fn amounts_show_as_dollars() {
        assert_eq!(Usd(0).to_string(), "$0");
        assert_eq!(Usd(420_000).to_string(), "$0.00042");
        assert_eq!(Usd(12_345_678_900).to_string(), "$12.35");
        assert_eq!(Usd(50_000_000).to_string(), "$0.05");
    }
}
