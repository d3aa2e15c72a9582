//! `run.toml`: what a security team (or a user) adds to every run's box:
//! more paths not there at all, more workspace files shown empty, paths the
//! agent may write besides its workspace, variables passed in, secrets.
//!
//! ```toml
//! [box]
//! hide = ["~/.config/op", "/srv/keys"]           # not there at all
//! workspace_secrets = ["*.tfvars", "secrets.yaml"] # names shown empty in the workspace
//! writable = ["~/.cache/pip"]                    # read-write besides the workspace
//! env = ["ANTHROPIC_BASE_URL", "PIP_INDEX_URL=https://pypi.example/simple"]
//!
//! [secrets]
//! file = "~/.config/warden/run-secrets.toml"     # NAME = "value", mode 0600
//! env = { DEPLOY_TOKEN = "deploy-key" }          # the box gets warden-secret:deploy-key
//! ```
//!
//! `~/` is the home folder. Unknown keys are refused, naming them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The whole file.
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    /// What the box is.
    #[serde(default, rename = "box")]
    pub sandbox: BoxConfig,
    /// Secrets the proxy fills in.
    #[serde(default)]
    pub secrets: SecretsConfig,
}

/// `[box]`.
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BoxConfig {
    /// Paths not there at all.
    #[serde(default)]
    pub hide: Vec<String>,
    /// File name patterns (`*` for any run of characters) shown empty in
    /// the workspace, besides `.env*` and keys.
    #[serde(default)]
    pub workspace_secrets: Vec<String>,
    /// Paths bound read-write besides the workspace.
    #[serde(default)]
    pub writable: Vec<String>,
    /// Variables passed in: `NAME` (its value in warden-run's environment)
    /// or `NAME=VALUE`.
    #[serde(default)]
    pub env: Vec<String>,
}

/// `[secrets]`.
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretsConfig {
    /// A secrets file in warden-proxy's format.
    pub file: Option<String>,
    /// Variable → secret name: the box gets `warden-secret:NAME`.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

impl RunConfig {
    /// Reads `path`; errors name the file and what is wrong.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        toml::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {}", path.display(), e.message()))
    }
}

/// `path` with a leading `~/` read as `home`.
pub fn expand(path: &str, home: Option<&Path>) -> PathBuf {
    match (path.strip_prefix("~/"), home) {
        (Some(rest), Some(home)) => home.join(rest),
        _ => PathBuf::from(path),
    }
}

/// Whether `name` matches `pattern`, where `*` stands for any run of
/// characters (none included) and everything else for itself.
pub fn matches(pattern: &str, name: &str) -> bool {
    let mut parts = pattern.split('*');
    let Some(first) = parts.next() else { return false };
    let Some(mut rest) = name.strip_prefix(first) else { return false };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else { return rest.is_empty() };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_toml_is_read_and_a_wrong_key_is_named() {
        let config: RunConfig = toml::from_str(
            r#"
[box]
hide = ["~/.config/op"]
workspace_secrets = ["*.tfvars"]
writable = ["~/.cache/pip"]
env = ["A=1"]
[secrets]
file = "s.toml"
env = { DEPLOY_TOKEN = "deploy-key" }
"#,
        )
        .unwrap();
        assert_eq!(config.sandbox.hide, ["~/.config/op"]);
        assert_eq!(config.secrets.env["DEPLOY_TOKEN"], "deploy-key");
        let wrong = toml::from_str::<RunConfig>("[box]\nhidden = []\n").unwrap_err();
        assert!(wrong.message().contains("hidden"), "{}", wrong.message());
        assert_eq!(expand("~/.x", Some(Path::new("/home/a"))), Path::new("/home/a/.x"));
        assert_eq!(expand("/srv/k", Some(Path::new("/home/a"))), Path::new("/srv/k"));
    }

    #[test]
    fn patterns_match_whole_names() {
        assert!(matches("*.tfvars", "prod.tfvars"));
        assert!(!matches("*.tfvars", "prod.tfvars.bak"));
        assert!(matches("secrets.yaml", "secrets.yaml"));
        assert!(!matches("secrets.yaml", "my-secrets.yaml"));
        assert!(matches("*secret*", "my-secrets.yaml"));
        assert!(matches("a*b*c", "abc") && matches("a*b*c", "a-b-c") && !matches("a*b*c", "acb"));
        assert!(matches("*", "anything") && !matches("", "x"));
    }
}
