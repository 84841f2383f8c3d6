//! `fenceline token …`: API tokens, tenants' and operators'.

use fenceline::settings::{Settings, TokenCommand};

pub(super) async fn run(settings: &Settings, command: &TokenCommand) -> anyhow::Result<()> {
    match command {
        TokenCommand::Add { tenant, name } => {
            let ledger = super::open_ledger(settings).await?;
            let token = ledger.add_token(tenant, name).await?;
            eprintln!("API token for tenant {tenant:?} (shown once; only its hash is stored):");
            println!("{token}");
            Ok(())
        }
        TokenCommand::List => {
            let ledger = super::open_ledger(settings).await?;
            println!(
                "{:<12}  {:<30}  {:<16}  {:<27}  revoked",
                "id", "acts as", "name", "created"
            );
            for t in ledger.list_tokens().await? {
                println!(
                    "{:<12}  {:<30}  {:<16}  {:<27}  {}",
                    t.id,
                    t.acts_as.to_string(),
                    t.name,
                    fenceline::time::rfc3339_us(t.created_at),
                    t.revoked_at.map_or("-".into(), fenceline::time::rfc3339_us)
                );
            }
            Ok(())
        }
        TokenCommand::Revoke { id } => {
            let ledger = super::open_ledger(settings).await?;
            let t = ledger.revoke_token(id).await?;
            println!(
                "revoked token {} ({}, acting as {})",
                t.id, t.name, t.acts_as
            );
            Ok(())
        }
    }
}
