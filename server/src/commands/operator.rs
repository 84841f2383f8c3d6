//! `fenceline operator …`: who may sign in to the console, their roles and tenants.

use anyhow::Context;

use fenceline::settings::{OperatorCommand, Settings};

/// `fenceline operator …`.
pub(super) async fn run(settings: &Settings, command: &OperatorCommand) -> anyhow::Result<()> {
    let ledger = &super::open_ledger(settings).await?;
    use fenceline::operators::{hash_password, Operator};
    let show = |o: &Operator| {
        println!(
            "{:<24}  {:<8}  {:<24}  {:<19}  {}",
            o.name,
            o.role,
            o.tenants.as_ref().map_or("(all)".into(), |t| t.join(",")),
            fenceline::time::short_time(o.created_at),
            o.disabled_at
                .map_or("-".into(), fenceline::time::short_time)
        );
    };
    match command {
        OperatorCommand::Add {
            name,
            role: role_name,
            tenants,
            password_stdin,
        } => {
            let role = role(role_name)?;
            let password = read_password(*password_stdin, &format!("Password for {name}: "))?;
            let hash = hash_password(&password)?;
            let tenants = (!tenants.is_empty()).then_some(tenants.as_slice());
            let added = ledger.add_operator(name, role, tenants, &hash).await?;
            println!("added {} ({})", added.name, added.role);
        }
        OperatorCommand::List => {
            println!(
                "{:<24}  {:<8}  {:<24}  {:<19}  disabled",
                "name", "role", "tenants", "created"
            );
            for o in ledger.list_operators().await? {
                show(&o);
            }
        }
        OperatorCommand::SetRole {
            name,
            role: role_name,
            tenants,
            all_tenants,
        } => {
            let role = role(role_name)?;
            let scope = if *all_tenants {
                Some(None)
            } else if tenants.is_empty() {
                None
            } else {
                Some(Some(tenants.as_slice()))
            };
            let changed = ledger.set_operator_role(name, role, scope).await?;
            show(&changed);
        }
        OperatorCommand::Disable { name } => {
            show(&ledger.set_operator_disabled(name, true).await?);
        }
        OperatorCommand::Enable { name } => {
            show(&ledger.set_operator_disabled(name, false).await?);
        }
        OperatorCommand::Token { name, label } => {
            let token = ledger.add_operator_token(name, label).await?;
            eprintln!("operator token for {name} (shown once; only its hash is stored):");
            println!("{token}");
        }
        OperatorCommand::Reset {
            name,
            password_stdin,
        } => {
            anyhow::ensure!(
                ledger.operator(name).await?.is_some(),
                "no operator named {name}"
            );
            let password = read_password(*password_stdin, &format!("New password for {name}: "))?;
            let hash = hash_password(&password)?;
            ledger.set_operator_password(name, &hash).await?;
            println!("set a new password for {name}; their earlier sessions have ended");
        }
    }
    Ok(())
}

/// A password from the first line of standard input, or typed at a prompt without echo.
fn read_password(from_stdin: bool, prompt: &str) -> anyhow::Result<String> {
    let password = if from_stdin {
        let mut line = String::new();
        std::io::stdin()
            .read_line(&mut line)
            .context("reading the password from standard input")?;
        line.trim_end_matches(['\r', '\n']).to_owned()
    } else {
        let first = rpassword::prompt_password(prompt).context("reading the password")?;
        let again = rpassword::prompt_password("Again: ").context("reading the password")?;
        anyhow::ensure!(first == again, "the two passwords differ");
        first
    };
    Ok(password)
}

fn role(name: &str) -> anyhow::Result<fenceline::operators::Role> {
    Ok(name.parse()?)
}
