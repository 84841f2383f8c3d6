//! `/operators`: who may sign in and every API token, for an admin of every tenant.

use fenceline_app::console::{OperatorRow, OperatorsPage, TokenRow};

use crate::ledger::{ActsAs, LedgerError};

use super::LedgerConsole;

impl LedgerConsole {
    pub(super) async fn build_operators(&self) -> Result<OperatorsPage, LedgerError> {
        // The page asks only for an admin of every tenant; a console limited to tenants
        // never lists the deployment's operators.
        if self.tenants.is_some() {
            return Err(LedgerError::Invalid(
                "only an admin of every tenant manages operators".into(),
            ));
        }
        let (operators, tokens, subjects) = tokio::join!(
            self.ledger.list_operators(),
            self.ledger.list_tokens(),
            self.ledger.operator_subjects()
        );
        let subjects = subjects?;
        Ok(OperatorsPage {
            operators: operators?
                .into_iter()
                .map(|o| OperatorRow {
                    sso: subjects.get(&o.name).cloned(),
                    tenants: o.tenants.as_ref().map(|t| t.join(", ")),
                    name: o.name,
                    role: o.role.to_string(),
                    created: self.at(o.created_at),
                    disabled: o.disabled_at.map(|t| self.at(t)),
                })
                .collect(),
            tokens: tokens?
                .into_iter()
                .map(|t| TokenRow {
                    acts_as: match t.acts_as {
                        ActsAs::Tenant(tenant) => format!("tenant {tenant}"),
                        ActsAs::Operator(name) => format!("operator {name}"),
                    },
                    id: t.id,
                    name: t.name,
                    created: self.at(t.created_at),
                    revoked: t.revoked_at.map(|r| self.at(r)),
                })
                .collect(),
        })
    }
}
