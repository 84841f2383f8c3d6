//! Operators who sign in through an OpenID Connect provider: made at their first sign-in,
//! their role and tenants set from their groups at each one, each sign-in audited with the
//! provider's subject.

use sqlx::Row;

use super::operators::Credentials;
use super::{AdminAudit, Ledger, LedgerError};
use crate::operators::Role;

/// What a sign-in through the provider came to.
#[derive(Debug)]
pub enum SsoSignIn {
    SignedIn(Credentials),
    /// The name is a local operator's, or another subject's.
    NameTaken,
    Disabled,
}

/// Never a password hash: a local password never signs this operator in.
pub const NO_PASSWORD: &str = "!sso";

impl Ledger {
    /// Signs in the operator `subject` names (`issuer|sub`), made as `name` at its first
    /// sign-in, with `role` and `tenants` from its groups (`granted` says which).
    pub async fn sso_operator(
        &self,
        subject: &str,
        name: &str,
        (role, tenants): (Role, Option<&[String]>),
        granted: &str,
    ) -> Result<SsoSignIn, LedgerError> {
        let now = self.now_us().await?;
        let tenants = tenants.map(|t| t.join(","));
        let mut tx = self.begin_write().await?;
        let known = sqlx::query("SELECT name, disabled_at FROM operators WHERE oidc_subject = $1")
            .bind(subject)
            .fetch_optional(&mut *tx)
            .await?;
        let name = match known {
            Some(row) => {
                let name: String = row.try_get("name")?;
                let disabled: Option<i64> = row.try_get("disabled_at")?;
                if disabled.is_some() {
                    tx.rollback().await?;
                    return Ok(SsoSignIn::Disabled);
                }
                sqlx::query(
                    "UPDATE operators SET role = $2, tenants = $3, updated_at = $4 \
                     WHERE oidc_subject = $1",
                )
                .bind(subject)
                .bind(role.as_str())
                .bind(&tenants)
                .bind(now)
                .execute(&mut *tx)
                .await?;
                name
            }
            None => {
                // The name asked for; if a local operator or another subject has it, the name
                // with the start of this subject's hash, so that neither is mistaken for the
                // other.
                let suffixed = format!(
                    "{name}-{}",
                    &hex::encode(<sha2::Sha256 as sha2::Digest>::digest(subject.as_bytes()))[..6]
                );
                let mut made = None;
                for candidate in [name.to_owned(), suffixed] {
                    if !crate::operators::valid_name(&candidate) {
                        continue;
                    }
                    let added = sqlx::query(
                        "INSERT INTO operators (name, password_hash, role, tenants, created_at, \
                         updated_at, password_set_at, oidc_subject) \
                         VALUES ($1, $2, $3, $4, $5, $5, $5, $6) ON CONFLICT (name) DO NOTHING",
                    )
                    .bind(&candidate)
                    .bind(NO_PASSWORD)
                    .bind(role.as_str())
                    .bind(&tenants)
                    .bind(now)
                    .bind(subject)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                    if added == 1 {
                        made = Some(candidate);
                        break;
                    }
                }
                let Some(made) = made else {
                    tx.rollback().await?;
                    return Ok(SsoSignIn::NameTaken);
                };
                made
            }
        };
        let actor = format!("operator:{name}");
        super::audit::insert_admin_audit(
            &mut tx,
            &AdminAudit {
                actor: &actor,
                action: "signed_in_oidc",
                subject: &format!("oidc:{subject}"),
                reason: granted,
                before: None,
                after: Some(&match &tenants {
                    Some(t) => format!("{} of {t}", role.as_str()),
                    None => format!("{} of every tenant", role.as_str()),
                }),
            },
            now,
        )
        .await?;
        tx.commit().await?;
        match self.credentials(&name).await? {
            Some(c) => Ok(SsoSignIn::SignedIn(c)),
            None => Err(LedgerError::Corrupt("a signed-in operator vanished".into())),
        }
    }

    /// Ends every session of the operator `subject` names (their groups no longer give them a
    /// role): their sessions were begun before the change the gate checks each request against.
    pub async fn end_sso_sessions(&self, subject: &str) -> Result<bool, LedgerError> {
        let now = self.now_us().await?;
        Ok(sqlx::query(
            "UPDATE operators SET password_set_at = $2, updated_at = $2 WHERE oidc_subject = $1",
        )
        .bind(subject)
        .bind(now)
        .execute(&self.writer)
        .await?
        .rows_affected()
            > 0)
    }

    /// The provider's subject of each operator who signs in through it, by name.
    pub async fn operator_subjects(
        &self,
    ) -> Result<std::collections::HashMap<String, String>, LedgerError> {
        let rows =
            sqlx::query("SELECT name, oidc_subject FROM operators WHERE oidc_subject IS NOT NULL")
                .fetch_all(&self.reader)
                .await?;
        rows.iter()
            .map(|row| Ok((row.try_get("name")?, row.try_get("oidc_subject")?)))
            .collect()
    }
}
