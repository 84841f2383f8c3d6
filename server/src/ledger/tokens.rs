//! API tokens: random, shown once, stored only as SHA-256. The tenant comes from the token.

use sha2::{Digest, Sha256};

use super::{Ledger, LedgerError};

const TOKEN_PREFIX: &str = "fl_";

fn token_hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// A tenant name: 1–64 characters of `[A-Za-z0-9._-]`.
pub fn valid_tenant(tenant: &str) -> bool {
    (1..=64).contains(&tenant.len())
        && tenant
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

impl Ledger {
    /// Creates a token for `tenant` and returns it; only its hash is stored.
    pub async fn add_token(&self, tenant: &str, name: &str) -> Result<String, LedgerError> {
        if !valid_tenant(tenant) {
            return Err(LedgerError::Invalid(
                "a tenant is 1 to 64 characters of letters, digits, '.', '_' or '-'".into(),
            ));
        }
        let mut secret = [0u8; 32];
        getrandom::fill(&mut secret)
            .map_err(|e| LedgerError::Invalid(format!("no randomness available: {e}")))?;
        let token = format!("{TOKEN_PREFIX}{}", hex::encode(secret));
        let sql = self.dialect.sql(
            "INSERT INTO api_tokens (token_hash, tenant, name, created_at) \
             VALUES ($1, $2, $3, {now})",
        );
        sqlx::query(&sql)
            .bind(token_hash(&token))
            .bind(tenant)
            .bind(name)
            .execute(&self.writer)
            .await?;
        Ok(token)
    }

    /// The tenant a presented token stands for, if it is known and not revoked.
    pub async fn tenant_for_token(&self, token: &str) -> Result<Option<String>, LedgerError> {
        if !token.starts_with(TOKEN_PREFIX) || token.len() > 128 {
            return Ok(None);
        }
        Ok(sqlx::query_scalar(
            "SELECT tenant FROM api_tokens WHERE token_hash = $1 AND revoked_at IS NULL",
        )
        .bind(token_hash(token))
        .fetch_optional(&self.reader)
        .await?)
    }
}
