//! The canonical request digest: SHA-256 of sorted-key, whitespace-free JSON of the input,
//! the contract version and the model parameters.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// Compact JSON with object keys sorted at every depth. Two requests that differ only in key
/// order or whitespace have the same canonical form; numbers keep their JSON spelling.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(item, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// The digest that binds an idempotency key to one request: hex SHA-256.
pub fn request_digest(input: &Value, contract_version: &str, model: &Value) -> String {
    let envelope = serde_json::json!({
        "contract_version": contract_version,
        "input": input,
        "model": model,
    });
    hex::encode(Sha256::digest(canonical_json(&envelope).as_bytes()))
}

/// A deterministic draw in `0.0..1.0` for call `n` about `key` (fault injection at a rate).
pub(crate) fn draw(key: &str, n: u64) -> f64 {
    let digest = Sha256::digest(format!("{key}:{n}").as_bytes());
    let x = u64::from_be_bytes(digest[..8].try_into().expect("8 bytes"));
    (x >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn key_order_and_whitespace_do_not_change_the_digest() {
        let a: Value = serde_json::from_str(r#"{"b": 1, "a": {"y": [1, 2], "x": "s"}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"a":{"x":"s","y":[1,2]},"b":1}"#).unwrap();
        assert_eq!(canonical_json(&a), r#"{"a":{"x":"s","y":[1,2]},"b":1}"#);
        assert_eq!(
            request_digest(&a, "v1", &json!({})),
            request_digest(&b, "v1", &json!({}))
        );
    }

    #[test]
    fn input_contract_and_model_each_change_the_digest() {
        let base = request_digest(&json!({"doc": "x"}), "v1", &json!({"temperature": 0}));
        assert_eq!(base.len(), 64);
        assert_ne!(
            base,
            request_digest(&json!({"doc": "y"}), "v1", &json!({"temperature": 0}))
        );
        assert_ne!(
            base,
            request_digest(&json!({"doc": "x"}), "v2", &json!({"temperature": 0}))
        );
        assert_ne!(
            base,
            request_digest(&json!({"doc": "x"}), "v1", &json!({"temperature": 1}))
        );
        // Array order is meaningful.
        assert_ne!(
            request_digest(&json!([1, 2]), "v1", &json!({})),
            request_digest(&json!([2, 1]), "v1", &json!({}))
        );
    }

    #[test]
    fn keys_that_need_escaping_are_canonical_too() {
        let v = json!({"a\"b": "\u{e9}", "\n": null});
        assert_eq!(canonical_json(&v), "{\"\\n\":null,\"a\\\"b\":\"é\"}");
    }
}
