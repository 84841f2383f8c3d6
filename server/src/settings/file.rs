//! The optional settings file (`--config path.toml`). Its keys are the long flag names, with
//! `-` or `_`; tables only group them (`[queue]`, `[provider]`…). A value from the file is used
//! only where neither a flag nor an environment variable gave one: it is added to the command
//! line as that flag, so clap checks it like any other. A key no command knows is an error; a
//! key another command knows (`bind` for `worker`) is ignored.
//!
//! ```toml
//! environment = "production"
//! database-url = "postgres://fenceline@db/fenceline"
//!
//! [http]
//! bind = "0.0.0.0:8080"
//! public-url = "https://fenceline.example.com"
//!
//! [queue]
//! queue = "sqs"
//! queue-name = "jobs"
//! ```

use std::collections::BTreeMap;

use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory};

use super::cli::Cli;
use super::SettingsError;

/// `argv` with the `--config` file's settings added where nothing else set them.
pub fn with_file_settings(argv: Vec<String>) -> Result<Vec<String>, SettingsError> {
    let mut command = Cli::command();
    command.build();
    let matches = command.clone().try_get_matches_from(&argv)?;
    let Some(path) = matches.get_one::<std::path::PathBuf>("config") else {
        return Ok(argv);
    };
    let file_error = |message: String| SettingsError::File {
        path: path.display().to_string(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|e| file_error(e.to_string()))?;
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| file_error(e.to_string()))?;
    let mut values = BTreeMap::new();
    flatten(&table, &mut values).map_err(file_error)?;

    // The running subcommand's own arguments, and its matches (global ones included).
    let (sub_name, sub_matches) = matches
        .subcommand()
        .ok_or_else(|| file_error("no command to apply it to".into()))?;
    let sub = command
        .find_subcommand(sub_name)
        .ok_or_else(|| file_error(format!("unknown command {sub_name}")))?;
    let mut argv = argv;
    for (key, value) in values {
        let long = key.replace('_', "-");
        if long == "config" {
            return Err(file_error("a settings file cannot name another".into()));
        }
        let in_command = sub
            .get_arguments()
            .chain(command.get_arguments())
            .find(|a| a.get_long() == Some(long.as_str()));
        let Some(arg) = in_command else {
            if knows(&command, &long) {
                continue;
            }
            return Err(file_error(format!("unknown setting {key:?}")));
        };
        if given(sub_matches, arg.get_id().as_str()) {
            continue;
        }
        let takes_value = arg.get_action().takes_values();
        match (takes_value, value) {
            (false, Value::Bool(true)) => argv.push(format!("--{long}")),
            (false, Value::Bool(false)) => {}
            (false, _) => return Err(file_error(format!("{key} is true or false"))),
            // Each item of a list is the flag given once more, so a list reads the same
            // whichever delimiter its environment variable uses.
            (true, Value::List(items)) => {
                argv.extend(items.iter().map(|item| format!("--{long}={item}")))
            }
            (true, value) => argv.push(format!("--{long}={}", value.as_arg())),
        }
    }
    Ok(argv)
}

/// Whether a flag or an environment variable set `id`.
fn given(matches: &ArgMatches, id: &str) -> bool {
    matches!(
        matches.value_source(id),
        Some(ValueSource::CommandLine | ValueSource::EnvVariable)
    )
}

/// Whether any command has a `--long` argument.
fn knows(command: &clap::Command, long: &str) -> bool {
    command.get_arguments().any(|a| a.get_long() == Some(long))
        || command.get_subcommands().any(|sub| knows(sub, long))
}

enum Value {
    Bool(bool),
    Text(String),
    List(Vec<String>),
}

impl Value {
    fn as_arg(&self) -> String {
        match self {
            Value::Bool(b) => b.to_string(),
            Value::Text(t) => t.clone(),
            Value::List(items) => items.join(","),
        }
    }
}

fn flatten(table: &toml::Table, out: &mut BTreeMap<String, Value>) -> Result<(), String> {
    for (key, value) in table {
        let value = match value {
            toml::Value::Table(inner) => {
                flatten(inner, out)?;
                continue;
            }
            toml::Value::Boolean(b) => Value::Bool(*b),
            toml::Value::String(s) => Value::Text(s.clone()),
            toml::Value::Integer(i) => Value::Text(i.to_string()),
            toml::Value::Float(f) => Value::Text(f.to_string()),
            toml::Value::Array(items) => Value::List(
                items
                    .iter()
                    .map(|item| match item {
                        toml::Value::String(s) => Ok(s.clone()),
                        toml::Value::Integer(i) => Ok(i.to_string()),
                        _ => Err(format!("{key}: a list holds strings or numbers")),
                    })
                    .collect::<Result<Vec<_>, _>>()?,
            ),
            toml::Value::Datetime(_) => return Err(format!("{key}: dates are not settings")),
        };
        if out.insert(key.clone(), value).is_some() {
            return Err(format!("{key} is set twice"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn argv(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| s.to_string()).collect()
    }

    fn file(text: &str) -> tempfile_path::Path {
        tempfile_path::Path::with(text)
    }

    /// A file that removes itself.
    mod tempfile_path {
        pub(super) struct Path(pub(super) std::path::PathBuf);
        impl Path {
            pub(super) fn with(text: &str) -> Path {
                let name = format!("fenceline-settings-{}.toml", uuid::Uuid::now_v7().simple());
                let path = std::env::temp_dir().join(name);
                std::fs::write(&path, text).unwrap();
                Path(path)
            }
        }
        impl Drop for Path {
            fn drop(&mut self) {
                let _ = std::fs::remove_file(&self.0);
            }
        }
    }

    /// Each item of a list is one more flag: lists whose variables split on `;` read right.
    #[test]
    fn a_list_in_the_file_is_the_flag_given_once_per_item() {
        let f = file(
            "[worker]\ntenant-weight = [\"reports=3\", \"batch-eval=1\"]\n\
             fallback = [\"acme=stub:stub\", \"*=openai:gpt-4o-mini\"]\n",
        );
        let path = f.0.display().to_string();
        let out = with_file_settings(argv(&["fenceline", "--config", &path, "worker"])).unwrap();
        let cli = Cli::try_parse_from(out).unwrap();
        let settings = crate::settings::Settings::from_cli(&cli).unwrap();
        assert_eq!(settings.worker.tenant_shares.len(), 2);
        assert_eq!(settings.provider.routes.by_tenant.len(), 2);
    }

    #[test]
    fn the_file_fills_what_flags_left_unset_and_flags_win() {
        let f = file(
            "environment = \"production\"\n[http]\nbind = \"0.0.0.0:9000\"\npublic-url = \"https://x.example\"\n\
             [queue]\nqueue_name = \"from-file\"\n[serve]\nno-worker = true\nallowed-models = [\"a\", \"b\"]\n",
        );
        let path = f.0.display().to_string();
        let out = with_file_settings(argv(&[
            "fenceline",
            "--config",
            &path,
            "serve",
            "--queue-name",
            "from-flag",
        ]))
        .unwrap();
        let cli = Cli::try_parse_from(out).unwrap();
        let settings = crate::settings::Settings::from_cli(&cli).unwrap();
        assert_eq!(
            settings.environment,
            crate::settings::Environment::Production
        );
        assert_eq!(settings.http.bind.port(), 9000);
        assert_eq!(
            settings.http.public_url.as_deref(),
            Some("https://x.example")
        );
        assert_eq!(settings.queue.name, "from-flag");
        assert!(!settings.http.run_worker);
        assert_eq!(settings.http.model_policy.models, ["a", "b"]);
    }

    #[test]
    fn unknown_keys_are_refused_and_other_commands_keys_ignored() {
        let f = file("bogus = 1\n");
        let path = f.0.display().to_string();
        let err = with_file_settings(argv(&["fenceline", "--config", &path, "worker"]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown setting \"bogus\""), "{err}");
        let f = file("bind = \"0.0.0.0:9000\"\nmax-in-flight = 3\n");
        let path = f.0.display().to_string();
        let out = with_file_settings(argv(&["fenceline", "--config", &path, "worker"])).unwrap();
        assert!(out.contains(&"--max-in-flight=3".to_string()), "{out:?}");
        assert!(!out.iter().any(|a| a.starts_with("--bind")), "{out:?}");
    }
}
