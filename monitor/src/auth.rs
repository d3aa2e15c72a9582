//! Callers and their credentials: bearer tokens, of which only SHA-256
//! hashes are kept, each with a role and, for harnesses, the users it may act
//! for.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// What a credential may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Asks for decisions (`Authority`).
    Harness,
    /// Resolves pending approvals (`Approvals`).
    Approver,
    /// Grants, sessions, policy and audit (`Admin`).
    Admin,
}

impl Role {
    /// Every role, in the order tokens are created on first start.
    pub(crate) const ALL: [Role; 3] = [Role::Harness, Role::Approver, Role::Admin];

    /// `harness`, `approver` or `admin`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Role::Harness => "harness",
            Role::Approver => "approver",
            Role::Admin => "admin",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// A credential as written in configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CredentialConfig {
    /// Shown in logs and audit records as the caller.
    pub name: String,
    /// What it may do.
    pub role: Role,
    /// Hex SHA-256 of the token (or use `cert_sha256`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub token_sha256: String,
    /// Hex SHA-256 of a client certificate (DER) that identifies this caller
    /// on a mutual-TLS listener, instead of a token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_sha256: Option<String>,
    /// For harnesses: the users it may act for; `"*"` means every user and
    /// must be written explicitly.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub users: Vec<String>,
    /// For approvers: the approver groups (`@approvers("<group>")`) it
    /// belongs to; `"*"` means every group and must be written explicitly.
    /// Without groups it resolves only approvals that name no group.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    /// For harnesses: at most this many requests per second on average
    /// (off when not set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_per_second: Option<f64>,
    /// With `rate_per_second`: how many at once (default: one second's worth).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u32>,
}

impl CredentialConfig {
    /// A credential for `token`: a harness acting for `users` (`["*"]`:
    /// everyone), an approver of every group, or an admin.
    pub fn for_token(name: &str, role: Role, token: &str, users: &[&str]) -> Self {
        Self {
            name: name.to_owned(),
            role,
            token_sha256: hex::encode(hash_token(token)),
            cert_sha256: None,
            users: users.iter().map(|u| (*u).to_owned()).collect(),
            groups: if role == Role::Approver { vec!["*".to_owned()] } else { vec![] },
            rate_per_second: None,
            burst: None,
        }
    }
}

/// Which users a harness may act for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum UserScope {
    /// Every user (`users = ["*"]`).
    All,
    /// Only these.
    Only(HashSet<String>),
}

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Caller {
    /// The credential's name.
    pub(crate) name: String,
    /// Its role.
    pub(crate) role: Role,
    /// For harnesses, whom it may act for.
    pub(crate) users: UserScope,
    /// For approvers, the approver groups it belongs to.
    pub(crate) groups: UserScope,
    /// For harnesses, its rate limit.
    pub(crate) rate: Option<crate::ratelimit::Rate>,
}

impl Caller {
    /// Whether this caller may resolve an approval that names `approvers`
    /// (every group named must be one of the caller's: each policy in the
    /// way chose who may lift it). No group named: any approver.
    pub(crate) fn may_resolve(&self, approvers: &[String]) -> bool {
        self.role == Role::Approver
            && approvers.iter().all(|group| match &self.groups {
                UserScope::All => true,
                UserScope::Only(groups) => groups.contains(group),
            })
    }

    /// Whether this caller may ask on behalf of `user`.
    pub(crate) fn may_act_for(&self, user: &str) -> bool {
        match &self.users {
            UserScope::All => true,
            UserScope::Only(users) => users.contains(user),
        }
    }
}

/// A credential list that does not make sense.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("credential `{name}`: {message}")]
pub struct CredentialError {
    /// The credential at fault.
    pub(crate) name: String,
    /// What is wrong.
    pub(crate) message: String,
}

/// Every credential the monitor accepts, by token hash.
#[derive(Debug, Default)]
pub(crate) struct Credentials {
    by_hash: HashMap<[u8; 32], Arc<Caller>>,
    by_cert: HashMap<[u8; 32], Arc<Caller>>,
}

impl Credentials {
    /// Checks and indexes a credential list.
    pub(crate) fn new(configs: &[CredentialConfig]) -> Result<Self, CredentialError> {
        let mut by_hash = HashMap::new();
        let mut by_cert = HashMap::new();
        let mut names = HashSet::new();
        for config in configs {
            let error = |message: &str| CredentialError { name: config.name.clone(), message: message.to_owned() };
            if config.name.trim().is_empty() {
                return Err(error("name must not be empty"));
            }
            // Names are part of store keys (a session is its harness's and
            // user's, NUL-separated) and are shown to people.
            if config.name.chars().any(char::is_control) {
                return Err(error("name must not contain control characters"));
            }
            if !names.insert(config.name.clone()) {
                return Err(error("the name is used twice"));
            }
            let digest = |text: &str, what: &str| -> Result<[u8; 32], CredentialError> {
                hex::decode(text.trim())
                    .ok()
                    .and_then(|bytes| bytes.try_into().ok())
                    .ok_or_else(|| error(&format!("{what} must be 64 hex digits")))
            };
            let token = (!config.token_sha256.trim().is_empty())
                .then(|| digest(&config.token_sha256, "token_sha256"))
                .transpose()?;
            let cert = config.cert_sha256.as_deref().map(|c| digest(c, "cert_sha256")).transpose()?;
            if token.is_none() && cert.is_none() {
                return Err(error("give token_sha256 or cert_sha256"));
            }
            if config.role != Role::Harness && !config.users.is_empty() {
                return Err(error("only harness credentials have `users`"));
            }
            if config.role != Role::Approver && !config.groups.is_empty() {
                return Err(error("only approver credentials have `groups`"));
            }
            if config.role == Role::Harness && config.users.is_empty() {
                return Err(error("a harness credential needs `users`: the users it may act for, or [\"*\"]"));
            }
            let users = scope(&config.users).map_err(|m| error(&format!("users: {m}")))?;
            let groups = scope(&config.groups).map_err(|m| error(&format!("groups: {m}")))?;
            let rate = match config.rate_per_second {
                Some(per_second) => Some(
                    crate::ratelimit::Rate::from_config(per_second, config.burst)
                        .ok_or_else(|| error("rate_per_second must be a positive number"))?,
                ),
                None => None,
            };
            let caller = Arc::new(Caller { name: config.name.clone(), role: config.role, users, groups, rate });
            if let Some(hash) = token
                && by_hash.insert(hash, Arc::clone(&caller)).is_some()
            {
                return Err(error("the same token hash is used by another credential"));
            }
            if let Some(hash) = cert
                && by_cert.insert(hash, caller).is_some()
            {
                return Err(error("the same certificate is used by another credential"));
            }
        }
        Ok(Self { by_hash, by_cert })
    }

    /// The caller whose client certificate (DER) this is.
    pub(crate) fn authenticate_cert(&self, der: &[u8]) -> Option<Arc<Caller>> {
        self.by_cert.get(&<[u8; 32]>::from(Sha256::digest(der))).cloned()
    }

    /// The approver credential named `name`.
    pub(crate) fn approver(&self, name: &str) -> Option<Arc<Caller>> {
        self.by_hash.values().chain(self.by_cert.values()).find(|c| c.name == name && c.role == Role::Approver).cloned()
    }

    /// The groups of the approver credential named `name`, as listed.
    pub(crate) fn approver_groups(&self, name: &str) -> Option<Vec<String>> {
        self.approver(name).map(|caller| match &caller.groups {
            UserScope::All => vec!["*".to_owned()],
            UserScope::Only(groups) => {
                let mut groups: Vec<String> = groups.iter().cloned().collect();
                groups.sort();
                groups
            }
        })
    }

    /// The caller whose token this is.
    pub(crate) fn authenticate(&self, token: &str) -> Option<Arc<Caller>> {
        self.by_hash.get(&hash_token(token)).cloned()
    }
}

/// `["*"]` is everything; `*` with anything else is a mistake.
fn scope(names: &[String]) -> Result<UserScope, &'static str> {
    if names.iter().any(|n| n == "*") {
        if names.len() > 1 {
            return Err("`*` must be the only entry");
        }
        return Ok(UserScope::All);
    }
    Ok(UserScope::Only(names.iter().cloned().collect()))
}

/// Whether `scope` is exactly the groups `names` (as a credential lists them).
pub(crate) fn same_groups(scope: &UserScope, names: &[String]) -> bool {
    self::scope(names).is_ok_and(|listed| &listed == scope)
}

/// Hex SHA-256 of bytes, e.g. a DER certificate for `cert_sha256`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// SHA-256 of a token.
pub(crate) fn hash_token(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// A new random token: `wdn_` and 64 hex digits (256 bits from the OS).
pub(crate) fn generate_token() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    Ok(format!("wdn_{}", hex::encode(bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(name: &str, role: Role, token: &str, users: &[&str]) -> CredentialConfig {
        CredentialConfig { groups: vec![], ..CredentialConfig::for_token(name, role, token, users) }
    }

    #[test]
    fn tokens_authenticate_by_hash_only() {
        let creds = Credentials::new(&[
            config("ci", Role::Harness, "t1", &["alice"]),
            config("oncall", Role::Approver, "t2", &[]),
        ])
        .unwrap();
        let ci = creds.authenticate("t1").unwrap();
        assert_eq!(ci.role, Role::Harness);
        assert!(ci.may_act_for("alice") && !ci.may_act_for("bob"));
        assert_eq!(creds.authenticate("t2").unwrap().role, Role::Approver);
        assert!(creds.authenticate("t3").is_none());
    }

    #[test]
    fn wildcard_and_role_rules_are_enforced() {
        assert!(Credentials::new(&[config("h", Role::Harness, "t", &[])]).is_err());
        assert!(Credentials::new(&[config("h", Role::Harness, "t", &["*", "bob"])]).is_err());
        assert!(Credentials::new(&[config("a", Role::Admin, "t", &["bob"])]).is_err());
        assert!(
            Credentials::new(&[config("a", Role::Admin, "t", &[]), config("a", Role::Approver, "u", &[])]).is_err()
        );
        let all = Credentials::new(&[config("h", Role::Harness, "t", &["*"])]).unwrap();
        assert!(all.authenticate("t").unwrap().may_act_for("anyone"));
        let mut harness_with_groups = config("h", Role::Harness, "t", &["*"]);
        harness_with_groups.groups = vec!["g".into()];
        assert!(Credentials::new(&[harness_with_groups]).is_err());
    }

    #[test]
    fn approvers_resolve_only_for_their_groups() {
        let mut release = config("release", Role::Approver, "r", &[]);
        release.groups = vec!["release-managers".into()];
        let mut everyone = config("lead", Role::Approver, "l", &[]);
        everyone.groups = vec!["*".into()];
        let plain = config("plain", Role::Approver, "p", &[]);
        let creds = Credentials::new(&[release, everyone, plain]).unwrap();
        let rm = vec!["release-managers".to_owned()];
        let both = vec!["release-managers".to_owned(), "security".to_owned()];
        let release = creds.authenticate("r").unwrap();
        assert!(release.may_resolve(&[]) && release.may_resolve(&rm) && !release.may_resolve(&both));
        let lead = creds.authenticate("l").unwrap();
        assert!(lead.may_resolve(&both));
        let plain = creds.authenticate("p").unwrap();
        assert!(plain.may_resolve(&[]) && !plain.may_resolve(&rm));
    }

    #[test]
    fn generated_tokens_differ() {
        let a = generate_token().unwrap();
        assert!(a.starts_with("wdn_") && a.len() == 68);
        assert_ne!(a, generate_token().unwrap());
    }
}
