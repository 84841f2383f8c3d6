//! Operators: the people who sign in to the console and act on jobs. Their roles, the tenants
//! they may see, and their passwords (argon2id at OWASP's parameters; only the hash is kept).
//! Storage is the ledger's (`ledger::operators`); sessions and sign-in are `http`'s.

use std::fmt;
use std::str::FromStr;

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::{Algorithm, Argon2, Params, Version};

/// What an operator may do. Each role includes the ones before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// Reads every page of its tenants.
    Viewer,
    /// Also decides `unknown` jobs, authorizes retries, cancels, replays dead letters, runs
    /// drills.
    Operator,
    /// Also manages operators.
    Admin,
}

impl Role {
    pub const ALL: [Role; 3] = [Role::Viewer, Role::Operator, Role::Admin];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }

    /// Whether this role includes `needed`.
    pub fn allows(self, needed: Role) -> bool {
        self >= needed
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Not a role name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a role: use viewer, operator or admin")]
pub struct ParseRoleError(pub String);

impl FromStr for Role {
    type Err = ParseRoleError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Role::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| ParseRoleError(s.to_owned()))
    }
}

impl TryFrom<String> for Role {
    type Error = ParseRoleError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

/// An operator as the console and the CLI see it: never the password or its hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operator {
    pub name: String,
    pub role: Role,
    /// The tenants this operator may see and act on; `None` for every tenant.
    pub tenants: Option<Vec<String>>,
    /// Microseconds, database clock.
    pub created_at: i64,
    pub disabled_at: Option<i64>,
}

impl Operator {
    /// Whether this operator may see and act on `tenant`'s jobs.
    pub fn covers(&self, tenant: &str) -> bool {
        self.tenants
            .as_ref()
            .is_none_or(|list| list.iter().any(|t| t == tenant))
    }

    /// Whether this operator may run drills and read their runs: drills are the deployment's,
    /// not a tenant's (their reports name other runs' jobs, operators and timings), so only
    /// an operator without a tenant limit may.
    pub fn sees_drills(&self) -> bool {
        self.tenants.is_none()
    }

    pub fn is_disabled(&self) -> bool {
        self.disabled_at.is_some()
    }
}

/// An operator name: 1 to 64 letters, digits, `.`, `_`, `-` or `@`, not dots alone.
pub fn valid_name(name: &str) -> bool {
    // Not `.` or `..`: a name is a segment of the console's addresses.
    (1..=64).contains(&name.len())
        && name.bytes().any(|b| b != b'.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'@'))
}

/// Why a password was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PasswordError {
    #[error("a password has at least 12 characters")]
    TooShort,
    #[error("a password has at most 256 characters")]
    TooLong,
    #[error("the password could not be hashed: {0}")]
    Hash(String),
}

/// OWASP's argon2id recommendation: 19 MiB of memory, 2 iterations, 1 lane.
fn argon2() -> Argon2<'static> {
    let params = Params::new(19 * 1024, 2, 1, None).expect("static argon2 parameters");
    Argon2::new(Algorithm::Argon2id, Version::V0x13, params)
}

/// The argon2id hash of `password` with a fresh salt, in PHC string form.
pub fn hash_password(password: &str) -> Result<String, PasswordError> {
    let length = password.chars().count();
    if length < 12 {
        return Err(PasswordError::TooShort);
    }
    if length > 256 {
        return Err(PasswordError::TooLong);
    }
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| PasswordError::Hash(e.to_string()))?;
    let salt = SaltString::encode_b64(&bytes).map_err(|e| PasswordError::Hash(e.to_string()))?;
    argon2()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| PasswordError::Hash(e.to_string()))
}

/// Whether `password` matches `hash`. A malformed hash matches nothing.
pub fn verify_password(password: &str, hash: &str) -> bool {
    let Ok(parsed) = PasswordHash::new(hash) else {
        return false;
    };
    argon2()
        .verify_password(password.as_bytes(), &parsed)
        .is_ok()
}

/// A password nobody typed, 20 characters of an alphabet without look-alikes: for the first
/// administrator of an embedded trial.
pub fn generate_password() -> Result<String, PasswordError> {
    const ALPHABET: &[u8] = b"abcdefghijkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789";
    // Bytes at or above the last whole multiple of the alphabet are skipped: no bias.
    let limit = 256 - 256 % ALPHABET.len();
    let mut out = String::with_capacity(20);
    while out.len() < 20 {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).map_err(|e| PasswordError::Hash(e.to_string()))?;
        for b in bytes.into_iter().map(usize::from).filter(|b| *b < limit) {
            if out.len() < 20 {
                out.push(char::from(ALPHABET[b % ALPHABET.len()]));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_include_the_ones_below_them() {
        assert!(Role::Admin.allows(Role::Operator));
        assert!(Role::Operator.allows(Role::Viewer));
        assert!(!Role::Viewer.allows(Role::Operator));
        assert!(!Role::Operator.allows(Role::Admin));
        assert_eq!("operator".parse(), Ok(Role::Operator));
        assert!("root".parse::<Role>().is_err());
    }

    #[test]
    fn passwords_are_hashed_with_argon2id_at_owasp_parameters_and_verified() {
        let hash = hash_password("correct horse battery").unwrap();
        assert!(
            hash.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"),
            "{hash}"
        );
        assert!(!hash.contains("correct horse"));
        assert!(verify_password("correct horse battery", &hash));
        assert!(!verify_password("correct horse battery!", &hash));
        assert!(!verify_password("correct horse battery", "not a hash"));
        let again = hash_password("correct horse battery").unwrap();
        assert_ne!(hash, again, "every hash has its own salt");
        assert_eq!(hash_password("short"), Err(PasswordError::TooShort));
    }

    #[test]
    fn tenant_scopes_limit_what_an_operator_covers() {
        let mut op = Operator {
            name: "ana".into(),
            role: Role::Operator,
            tenants: None,
            created_at: 0,
            disabled_at: None,
        };
        assert!(op.covers("acme"));
        op.tenants = Some(vec!["acme".into()]);
        assert!(op.covers("acme"));
        assert!(!op.covers("globex"));
    }

    #[test]
    fn names_are_short_and_plain_and_generated_passwords_are_long() {
        assert!(valid_name("ana.lopez@example"));
        assert!(!valid_name(""));
        assert!(!valid_name("ana lopez"));
        assert!(!valid_name(&"a".repeat(65)));
        let p = generate_password().unwrap();
        assert_eq!(p.chars().count(), 20);
        assert!(hash_password(&p).is_ok());
        assert_ne!(p, generate_password().unwrap());
    }
}
