//! Operators, their console sessions and failed sign-ins. Password hashing and roles are
//! `crate::operators`'s; sessions' meaning is `http`'s. Here they are rows.

use sqlx::FromRow;

use super::{Backend, Ledger, LedgerError};
use crate::operators::{Operator, Role};

#[derive(FromRow)]
struct OperatorRow {
    name: String,
    #[sqlx(try_from = "String")]
    role: Role,
    tenants: Option<String>,
    created_at: i64,
    disabled_at: Option<i64>,
}

impl From<OperatorRow> for Operator {
    fn from(row: OperatorRow) -> Operator {
        Operator {
            name: row.name,
            role: row.role,
            tenants: row
                .tenants
                .map(|t| t.split(',').map(str::to_owned).collect()),
            created_at: row.created_at,
            disabled_at: row.disabled_at,
        }
    }
}

/// What sign-in needs: the operator, the hash to check and when the password was last set.
#[derive(Debug, Clone)]
pub struct Credentials {
    pub operator: Operator,
    pub password_hash: String,
    pub password_set_at: i64,
}

/// Where sign-in failures are counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureScope {
    Account,
    Address,
}

impl FailureScope {
    fn as_str(self) -> &'static str {
        match self {
            FailureScope::Account => "account",
            FailureScope::Address => "address",
        }
    }
}

const OPERATOR_COLUMNS: &str = "name, role, tenants, created_at, disabled_at";

fn tenant_list(tenants: Option<&[String]>) -> Result<Option<String>, LedgerError> {
    let Some(list) = tenants else {
        return Ok(None);
    };
    if list.is_empty() || list.iter().any(|t| !super::valid_tenant(t)) {
        return Err(LedgerError::Invalid(
            "tenants are 1 to 64 characters of letters, digits, '.', '_' or '-'".into(),
        ));
    }
    Ok(Some(list.join(",")))
}

/// A change of who may sign in, or of a token, as an admin (or the command line) makes it.
#[derive(Debug, Clone, Copy)]
pub enum AdminChange<'a> {
    Add {
        name: &'a str,
        role: Role,
        tenants: Option<&'a [String]>,
        password_hash: &'a str,
    },
    /// A role, and when given its tenants (`Some(None)`: every tenant).
    Role {
        name: &'a str,
        role: Role,
        tenants: Option<Option<&'a [String]>>,
    },
    Password {
        name: &'a str,
        password_hash: &'a str,
    },
    Disabled {
        name: &'a str,
        disabled: bool,
    },
    /// The live token whose id (as `token list` shows it, lower case) this is.
    RevokeToken {
        id: &'a str,
    },
}

/// The audit entry of an admin's change: who, what, on what, why, and what it was and became
/// (`viewer · acme` → `operator · acme, globex`).
#[derive(Debug, Clone, Copy)]
pub struct AdminAudit<'a> {
    pub actor: &'a str,
    pub action: &'a str,
    pub subject: &'a str,
    pub reason: &'a str,
    pub before: Option<&'a str>,
    pub after: Option<&'a str>,
}

impl Ledger {
    /// Adds an operator with an already hashed password. Refused if the name is taken.
    pub async fn add_operator(
        &self,
        name: &str,
        role: Role,
        tenants: Option<&[String]>,
        password_hash: &str,
    ) -> Result<Operator, LedgerError> {
        let change = AdminChange::Add {
            name,
            role,
            tenants,
            password_hash,
        };
        self.change_operators(&change, None).await?;
        self.operator(name)
            .await?
            .ok_or_else(|| LedgerError::Corrupt("an added operator vanished".into()))
    }

    /// Makes `change`, and with it, in the same transaction, the audit entry that records it
    /// (none from the command line). Refused, with nothing changed, when its operator or token
    /// does not exist or the new name is taken.
    pub async fn change_operators(
        &self,
        change: &AdminChange<'_>,
        audit: Option<&AdminAudit<'_>>,
    ) -> Result<(), LedgerError> {
        // The database's clock, as every audit entry's.
        let at = match audit {
            Some(_) => self.now_us().await?,
            None => 0,
        };
        let mut tx = self.begin_write().await?;
        let changed = match *change {
            AdminChange::Add {
                name,
                role,
                tenants,
                password_hash,
            } => {
                if !crate::operators::valid_name(name) {
                    return Err(LedgerError::Invalid(
                        "an operator name is 1 to 64 letters, digits, '.', '_', '-' or '@', \
                         not dots alone"
                            .into(),
                    ));
                }
                let added = sqlx::query(&self.sql.add_operator)
                    .bind(name)
                    .bind(password_hash)
                    .bind(role.as_str())
                    .bind(tenant_list(tenants)?)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                if added == 0 {
                    return Err(LedgerError::Invalid(format!(
                        "there is already an operator named {name}"
                    )));
                }
                added
            }
            AdminChange::Role {
                name,
                role,
                tenants: None,
            } => sqlx::query(&self.sql.set_operator_role)
                .bind(name)
                .bind(role.as_str())
                .execute(&mut *tx)
                .await?
                .rows_affected(),
            AdminChange::Role {
                name,
                role,
                tenants: Some(tenants),
            } => sqlx::query(&self.sql.set_operator_role_and_tenants)
                .bind(name)
                .bind(role.as_str())
                .bind(tenant_list(tenants)?)
                .execute(&mut *tx)
                .await?
                .rows_affected(),
            AdminChange::Password {
                name,
                password_hash,
            } => {
                // An operator of the identity provider gets no password here: it would outlive
                // their removal there.
                let sso: Option<Option<String>> =
                    sqlx::query_scalar("SELECT oidc_subject FROM operators WHERE name = $1")
                        .bind(name)
                        .fetch_optional(&mut *tx)
                        .await?;
                if matches!(sso, Some(Some(_))) {
                    return Err(LedgerError::Invalid(format!(
                        "{name} signs in through the identity provider and has no password here"
                    )));
                }
                sqlx::query(&self.sql.set_operator_password)
                    .bind(name)
                    .bind(password_hash)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected()
            }
            AdminChange::Disabled { name, disabled } => {
                sqlx::query(&self.sql.set_operator_disabled)
                    .bind(name)
                    .bind(i64::from(disabled))
                    .execute(&mut *tx)
                    .await?
                    .rows_affected()
            }
            AdminChange::RevokeToken { id } => {
                let mut revoked = 0;
                for sql in [&self.sql.revoke_token, &self.sql.revoke_operator_token] {
                    revoked += sqlx::query(sql)
                        .bind(id)
                        .execute(&mut *tx)
                        .await?
                        .rows_affected();
                }
                if revoked == 0 {
                    return Err(LedgerError::Invalid(format!("no live token with id {id}")));
                }
                revoked
            }
        };
        if changed == 0 {
            let name = match change {
                AdminChange::Role { name, .. }
                | AdminChange::Password { name, .. }
                | AdminChange::Disabled { name, .. } => name,
                _ => "",
            };
            return Err(LedgerError::Invalid(format!("no operator named {name}")));
        }
        if let Some(audit) = audit {
            super::audit::insert_admin_audit(&mut tx, audit, at).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Every operator, by name.
    pub async fn list_operators(&self) -> Result<Vec<Operator>, LedgerError> {
        let sql = format!("SELECT {OPERATOR_COLUMNS} FROM operators ORDER BY name");
        let rows: Vec<OperatorRow> = sqlx::query_as(&sql).fetch_all(&self.reader).await?;
        Ok(rows.into_iter().map(Operator::from).collect())
    }

    /// How many operators can sign in.
    pub async fn active_operator_count(&self) -> Result<i64, LedgerError> {
        Ok(
            sqlx::query_scalar("SELECT COUNT(*) FROM operators WHERE disabled_at IS NULL")
                .fetch_one(&self.reader)
                .await?,
        )
    }

    pub async fn operator(&self, name: &str) -> Result<Option<Operator>, LedgerError> {
        let sql = format!("SELECT {OPERATOR_COLUMNS} FROM operators WHERE name = $1");
        let row: Option<OperatorRow> = sqlx::query_as(&sql)
            .bind(name)
            .fetch_optional(&self.reader)
            .await?;
        Ok(row.map(Operator::from))
    }

    /// The operator and password hash for a sign-in attempt.
    pub async fn credentials(&self, name: &str) -> Result<Option<Credentials>, LedgerError> {
        let sql = format!(
            "SELECT {OPERATOR_COLUMNS}, password_hash, password_set_at FROM operators \
             WHERE name = $1"
        );
        let Some(row) = sqlx::query(&sql)
            .bind(name)
            .fetch_optional(&self.reader)
            .await?
        else {
            return Ok(None);
        };
        use sqlx::Row;
        Ok(Some(Credentials {
            password_hash: row.try_get("password_hash")?,
            password_set_at: row.try_get("password_set_at")?,
            operator: OperatorRow::from_row(&row)?.into(),
        }))
    }

    /// Changes an operator's role and, when given, its tenants (`Some(None)`: every tenant).
    pub async fn set_operator_role(
        &self,
        name: &str,
        role: Role,
        tenants: Option<Option<&[String]>>,
    ) -> Result<Operator, LedgerError> {
        let change = AdminChange::Role {
            name,
            role,
            tenants,
        };
        self.change_operators(&change, None).await?;
        self.changed_operator(name).await
    }

    /// Sets a new password hash; sessions begun before it stop working.
    pub async fn set_operator_password(
        &self,
        name: &str,
        password_hash: &str,
    ) -> Result<Operator, LedgerError> {
        let change = AdminChange::Password {
            name,
            password_hash,
        };
        self.change_operators(&change, None).await?;
        self.changed_operator(name).await
    }

    /// Disables (or, with `false`, enables again) an operator: no sign-in, no session.
    pub async fn set_operator_disabled(
        &self,
        name: &str,
        disabled: bool,
    ) -> Result<Operator, LedgerError> {
        let change = AdminChange::Disabled { name, disabled };
        self.change_operators(&change, None).await?;
        self.changed_operator(name).await
    }

    async fn changed_operator(&self, name: &str) -> Result<Operator, LedgerError> {
        self.operator(name)
            .await?
            .ok_or_else(|| LedgerError::Corrupt("a changed operator vanished".into()))
    }

    /// A session record's data and expiry (microseconds), if it exists and has not expired.
    pub async fn session(&self, id: &str) -> Result<Option<(String, i64)>, LedgerError> {
        Ok(sqlx::query_as(&self.sql.live_session)
            .bind(id)
            .fetch_optional(&self.reader)
            .await?)
    }

    /// Writes a session record (insert or replace).
    pub async fn save_session(
        &self,
        id: &str,
        data: &str,
        expires_at: i64,
    ) -> Result<(), LedgerError> {
        sqlx::query(
            "INSERT INTO sessions (id, data, expires_at) VALUES ($1, $2, $3) \
             ON CONFLICT (id) DO UPDATE SET data = excluded.data, expires_at = excluded.expires_at",
        )
        .bind(id)
        .bind(data)
        .bind(expires_at)
        .execute(&self.writer)
        .await?;
        Ok(())
    }

    /// Writes a new session record; `false` if the id is taken (the caller draws another).
    pub async fn create_session(
        &self,
        id: &str,
        data: &str,
        expires_at: i64,
    ) -> Result<bool, LedgerError> {
        let created = sqlx::query(
            "INSERT INTO sessions (id, data, expires_at) VALUES ($1, $2, $3) \
             ON CONFLICT (id) DO NOTHING",
        )
        .bind(id)
        .bind(data)
        .bind(expires_at)
        .execute(&self.writer)
        .await?
        .rows_affected();
        Ok(created == 1)
    }

    pub async fn delete_session(&self, id: &str) -> Result<(), LedgerError> {
        sqlx::query("DELETE FROM sessions WHERE id = $1")
            .bind(id)
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    /// The key that signs the sign-in form's cookie, the same for every process on this
    /// ledger: `candidate` if none was kept yet, else the one kept.
    pub async fn form_key(&self, candidate: &str) -> Result<String, LedgerError> {
        sqlx::query(
            "INSERT INTO deployment_keys (name, value) VALUES ('form', $1) \
             ON CONFLICT (name) DO NOTHING",
        )
        .bind(candidate)
        .execute(&self.writer)
        .await?;
        let (kept,): (String,) =
            sqlx::query_as("SELECT value FROM deployment_keys WHERE name = 'form'")
                .fetch_one(&self.writer)
                .await?;
        Ok(kept)
    }

    /// Deletes expired sessions and sign-in failures older than an hour; returns how many
    /// sessions went.
    pub async fn prune_sessions(&self) -> Result<u64, LedgerError> {
        let sessions = sqlx::query(&self.sql.prune_sessions)
            .execute(&self.writer)
            .await?
            .rows_affected();
        sqlx::query(&self.sql.prune_sign_in_failures)
            .execute(&self.writer)
            .await?;
        Ok(sessions)
    }

    /// Records a failed sign-in for `key` (an account name or an address).
    pub async fn record_sign_in_failure(
        &self,
        scope: FailureScope,
        key: &str,
    ) -> Result<(), LedgerError> {
        sqlx::query(&self.sql.record_sign_in_failure)
            .bind(scope.as_str())
            .bind(key)
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    /// Takes a sign-in's place in the throttle before its password is checked: when `account`
    /// has fewer than `limits.0` and `address` fewer than `limits.1` failures in the last
    /// `window_us` microseconds, the attempt is recorded as a failure of both at once and their
    /// rows' ids are given back (for [`Ledger::clear_sign_in_slot`] once the password proves
    /// right); `None` when either is at its limit, recording nothing. One attempt at a time
    /// counts and records, so attempts made together cannot all read the same count.
    pub async fn take_sign_in_slot(
        &self,
        account: &str,
        address: &str,
        limits: (i64, i64),
        window_us: i64,
    ) -> Result<Option<Vec<i64>>, LedgerError> {
        // An attempt already over a limit is refused on a read, holding no writer.
        for (scope, key, limit) in [
            (FailureScope::Account, account, limits.0),
            (FailureScope::Address, address, limits.1),
        ] {
            if self.recent_sign_in_failures(scope, key, window_us).await? >= limit {
                return Ok(None);
            }
        }
        let mut tx = self.begin_write().await?;
        if self.backend == Backend::Postgres {
            // SQLite's write transactions run one at a time already.
            sqlx::query("LOCK TABLE sign_in_failures IN SHARE ROW EXCLUSIVE MODE")
                .execute(&mut *tx)
                .await?;
        }
        let scopes = [
            (FailureScope::Account, account, limits.0),
            (FailureScope::Address, address, limits.1),
        ];
        for (scope, key, limit) in scopes {
            let recent: i64 = sqlx::query_scalar(&self.sql.recent_sign_in_failures)
                .bind(scope.as_str())
                .bind(key)
                .bind(window_us)
                .fetch_one(&mut *tx)
                .await?;
            if recent >= limit {
                tx.commit().await?;
                return Ok(None);
            }
        }
        let mut ids = Vec::with_capacity(scopes.len());
        for (scope, key, _) in scopes {
            let id: i64 = sqlx::query_scalar(&self.sql.take_sign_in_failure)
                .bind(scope.as_str())
                .bind(key)
                .fetch_one(&mut *tx)
                .await?;
            ids.push(id);
        }
        tx.commit().await?;
        Ok(Some(ids))
    }

    /// A sign-in whose password proved right (or that was never checked): the failures its
    /// slot recorded are taken back, together.
    pub async fn clear_sign_in_slot(&self, ids: &[i64]) -> Result<(), LedgerError> {
        let mut tx = self.begin_write().await?;
        for id in ids {
            sqlx::query("DELETE FROM sign_in_failures WHERE id = $1")
                .bind(id)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Failed sign-ins for `key` in the last `window_us` microseconds.
    pub async fn recent_sign_in_failures(
        &self,
        scope: FailureScope,
        key: &str,
        window_us: i64,
    ) -> Result<i64, LedgerError> {
        Ok(sqlx::query_scalar(&self.sql.recent_sign_in_failures)
            .bind(scope.as_str())
            .bind(key)
            .bind(window_us)
            .fetch_one(&self.reader)
            .await?)
    }
}
