//! API tokens: random, shown once, stored only as SHA-256. The tenant comes from the token.

use sha2::{Digest, Sha256};
use sqlx::Row;

use super::{Ledger, LedgerError};

const TOKEN_PREFIX: &str = "fl_";
/// Tokens that act as an operator (decisions, cancels) rather than submit as a tenant.
const OPERATOR_TOKEN_PREFIX: &str = "flo_";
/// How many leading hex characters of a token's hash name it in lists and revocations.
const TOKEN_ID_LEN: usize = 12;

/// What can be shown of an API token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenInfo {
    pub id: String,
    /// Whom requests with the token act as.
    pub acts_as: ActsAs,
    pub name: String,
    pub created_at: i64,
    pub revoked_at: Option<i64>,
}

/// Whom an API token acts as: a tenant submitting jobs, or an operator deciding and cancelling
/// under its role and tenants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActsAs {
    Tenant(String),
    Operator(String),
}

impl std::fmt::Display for ActsAs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ActsAs::Tenant(tenant) => write!(f, "tenant {tenant}"),
            ActsAs::Operator(operator) => write!(f, "operator {operator}"),
        }
    }
}

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

/// A token id as `fenceline token list` shows it, from what was typed.
pub fn token_id(typed: &str) -> Result<String, LedgerError> {
    let id = typed.trim().to_ascii_lowercase();
    if id.len() != TOKEN_ID_LEN || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(LedgerError::Invalid(format!(
            "a token id is the {TOKEN_ID_LEN} hex characters `fenceline token list` shows"
        )));
    }
    Ok(id)
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
        sqlx::query(&self.sql.add_token)
            .bind(token_hash(&token))
            .bind(tenant)
            .bind(name)
            .execute(&self.writer)
            .await?;
        Ok(token)
    }

    /// Every token's public face, tenants' and operators': its id (the start of its hash),
    /// whom it acts as, name, creation and revocation times. Never the token.
    pub async fn list_tokens(&self) -> Result<Vec<TokenInfo>, LedgerError> {
        let rows = sqlx::query(
            "SELECT token_hash, tenant, NULL AS operator, name, created_at, revoked_at \
             FROM api_tokens UNION ALL \
             SELECT token_hash, NULL AS tenant, operator, name, created_at, revoked_at \
             FROM operator_tokens ORDER BY created_at, token_hash",
        )
        .fetch_all(&self.reader)
        .await?;
        rows.iter()
            .map(|row| {
                let hash: String = row.try_get("token_hash")?;
                let tenant: Option<String> = row.try_get("tenant")?;
                let acts_as = match tenant {
                    Some(tenant) => ActsAs::Tenant(tenant),
                    None => ActsAs::Operator(row.try_get("operator")?),
                };
                Ok(TokenInfo {
                    id: hash[..TOKEN_ID_LEN].to_owned(),
                    acts_as,
                    name: row.try_get("name")?,
                    created_at: row.try_get("created_at")?,
                    revoked_at: row.try_get("revoked_at")?,
                })
            })
            .collect()
    }

    /// Revokes the one live token, a tenant's or an operator's, whose id is `id` (as `token
    /// list` shows it). Requests with it are refused from then on.
    pub async fn revoke_token(&self, id: &str) -> Result<TokenInfo, LedgerError> {
        let id = token_id(id)?;
        self.change_operators(&super::AdminChange::RevokeToken { id: &id }, None)
            .await?;
        self.list_tokens()
            .await?
            .into_iter()
            .find(|t| t.id == id)
            .ok_or_else(|| LedgerError::Corrupt("a revoked token vanished".into()))
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

impl Ledger {
    /// Creates a token that acts as `operator` (with its role and tenants, while it is
    /// enabled) and returns it; only its hash is stored.
    pub async fn add_operator_token(
        &self,
        operator: &str,
        name: &str,
    ) -> Result<String, LedgerError> {
        if self.operator(operator).await?.is_none() {
            return Err(LedgerError::Invalid(format!(
                "no operator named {operator}"
            )));
        }
        let mut secret = [0u8; 32];
        getrandom::fill(&mut secret)
            .map_err(|e| LedgerError::Invalid(format!("no randomness available: {e}")))?;
        let token = format!("{OPERATOR_TOKEN_PREFIX}{}", hex::encode(secret));
        sqlx::query(&self.sql.add_operator_token)
            .bind(token_hash(&token))
            .bind(operator)
            .bind(name)
            .execute(&self.writer)
            .await?;
        Ok(token)
    }

    /// The enabled operator a presented operator token acts as.
    pub async fn operator_for_token(
        &self,
        token: &str,
    ) -> Result<Option<crate::operators::Operator>, LedgerError> {
        if !token.starts_with(OPERATOR_TOKEN_PREFIX) || token.len() > 128 {
            return Ok(None);
        }
        let name: Option<String> = sqlx::query_scalar(
            "SELECT operator FROM operator_tokens WHERE token_hash = $1 AND revoked_at IS NULL",
        )
        .bind(token_hash(token))
        .fetch_optional(&self.reader)
        .await?;
        let Some(name) = name else {
            return Ok(None);
        };
        Ok(self.operator(&name).await?.filter(|o| !o.is_disabled()))
    }
}
