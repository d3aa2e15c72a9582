//! `warden-hook install AGENT`: the hook entry merged into the agent's
//! settings, without touching what else is there. Claude Code's is here;
//! each other agent's is a module of its own ([`codex`], [`gemini`]),
//! which `warden-run` also uses for a run's own settings.
//!
//! The entry matches every tool (`"matcher": "*"`), runs `warden-hook
//! claude-code` with the monitor it asks written in front of it
//! (`WARDEN_ENDPOINT=… WARDEN_TOKEN_FILE=… /abs/warden-hook claude-code`:
//! Claude Code runs a hook's `command` with the shell, so each value is
//! quoted for `sh`), has a `timeout` longer than the longest wait for an
//! approval, and `"onFailure": "block"`: without it, Claude Code lets a tool
//! run when its hook fails, is missing or times out. In the managed settings
//! file (`/etc/claude-code/managed-settings.json`), `allowManagedHooksOnly`
//! keeps project and user settings from adding or removing hooks.
//!
//! A token's value is never written: settings files are read by the agent
//! and committed with projects. The entry names the file that holds it.

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

pub mod cline;
pub mod codex;
pub mod gemini;
pub mod opencode;

/// Why the settings cannot be changed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// The file holds something other than a JSON object.
    #[error("{path}: {message}")]
    Settings {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// Only a token's value is known (`WARDEN_TOKEN`), which is never
    /// written into an agent's settings.
    #[error(
        "WARDEN_TOKEN is set, but a token's value is never written into an agent's settings file (the agent can \
         read that file, and projects commit it); put the harness token in a file only you can read and give it \
         with --token-file FILE"
    )]
    TokenValue,
    /// A path that cannot be written into the settings (JSON text).
    #[error("{what} `{path}` is not UTF-8: it cannot be written into the settings")]
    NotUtf8 {
        /// Which path.
        what: &'static str,
        /// The path, lossily.
        path: String,
    },
    /// A value that cannot be used.
    #[error("{0}")]
    Invalid(String),
}

/// What `install` was given on its command line; each missing value is
/// taken from the installer's environment.
#[derive(Debug, Clone, Default)]
pub struct TargetFlags {
    /// `--endpoint`, else `WARDEN_ENDPOINT`, else [`warden_sdk::DEFAULT_ENDPOINT`].
    pub endpoint: Option<String>,
    /// `--token-file`, else `WARDEN_TOKEN_FILE`.
    pub token_file: Option<PathBuf>,
    /// `--ca-cert`, else `WARDEN_CA_CERT` (https:// endpoints only).
    pub ca_cert: Option<PathBuf>,
}

/// The monitor the installed hook asks, as written into its command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// `WARDEN_ENDPOINT`.
    pub endpoint: String,
    /// `WARDEN_TOKEN_FILE`, absolute; none: the hook reads `WARDEN_TOKEN` or
    /// `WARDEN_TOKEN_FILE` from Claude Code's environment.
    pub token_file: Option<PathBuf>,
    /// `WARDEN_CA_CERT`, absolute.
    pub ca_cert: Option<PathBuf>,
}

impl Target {
    /// The target from `flags`, with what they leave out read from `env`
    /// (the installer's environment), relative paths made absolute against
    /// `cwd`. `WARDEN_TOKEN` without `--token-file` is refused
    /// ([`InstallError::TokenValue`]), even beside `WARDEN_TOKEN_FILE`: it is
    /// the token this environment's clients use, not the file.
    pub fn resolve(flags: TargetFlags, env: impl Fn(&str) -> Option<String>, cwd: &Path) -> Result<Self, InstallError> {
        let env = |name: &str| env(name).filter(|value| !value.trim().is_empty());
        let endpoint = flags
            .endpoint
            .or_else(|| env("WARDEN_ENDPOINT"))
            .unwrap_or_else(|| warden_sdk::DEFAULT_ENDPOINT.to_owned());
        let endpoint = endpoint.trim().to_owned();
        if endpoint.is_empty() {
            return Err(InstallError::Invalid("the endpoint is empty".into()));
        }
        // Several replicas separated by commas: an empty entry is refused
        // now, as the hook would refuse it at every call.
        let endpoints = warden_sdk::EndpointList::parse(&endpoint).map_err(|e| match e {
            warden_sdk::Error::Config(message) => InstallError::Invalid(message),
            other => InstallError::Invalid(other.to_string()),
        })?;
        let token_file = match flags.token_file {
            Some(path) => Some(path),
            None if env("WARDEN_TOKEN").is_some() => return Err(InstallError::TokenValue),
            None => env("WARDEN_TOKEN_FILE").map(PathBuf::from),
        };
        let ca_cert = flags.ca_cert.or_else(|| env("WARDEN_CA_CERT").map(PathBuf::from));
        // The SDK refuses a CA for a plaintext endpoint at every call; say
        // so now rather than install a hook that denies everything.
        if let Some(plain) = endpoints.iter().find(|entry| !entry.starts_with("https://"))
            && ca_cert.is_some()
        {
            return Err(InstallError::Invalid(format!(
                "a CA (--ca-cert or WARDEN_CA_CERT) is for TLS, and the endpoint `{plain}` is not https://"
            )));
        }
        let absolute = |path: PathBuf| if path.is_absolute() { path } else { cwd.join(path) };
        Ok(Self { endpoint, token_file: token_file.map(absolute), ca_cert: ca_cert.map(absolute) })
    }
}

/// The hook entry's `command`: the target as environment assignments, then
/// `binary PROTOCOL --max-wait N` (`protocol`: `claude-code`, `codex` …),
/// each word quoted for `sh`.
pub fn hook_command(binary: &Path, protocol: &str, max_wait: u64, target: &Target) -> Result<String, InstallError> {
    let mut words: Vec<String> =
        target.env()?.into_iter().map(|(name, value)| format!("{name}={}", shell_word(&value))).collect();
    words.push(shell_word(&utf8("warden-hook's path", binary)?).into_owned());
    words.push(format!("{protocol} --max-wait {max_wait}"));
    Ok(words.join(" "))
}

fn utf8(what: &'static str, path: &Path) -> Result<String, InstallError> {
    path.to_str()
        .map(str::to_owned)
        .ok_or_else(|| InstallError::NotUtf8 { what, path: path.to_string_lossy().into_owned() })
}

impl Target {
    /// The hook's environment that names the monitor: `WARDEN_ENDPOINT`,
    /// and `WARDEN_TOKEN_FILE` and `WARDEN_CA_CERT` when given.
    pub fn env(&self) -> Result<Vec<(&'static str, String)>, InstallError> {
        let mut env = vec![("WARDEN_ENDPOINT", self.endpoint.clone())];
        if let Some(path) = &self.token_file {
            env.push(("WARDEN_TOKEN_FILE", utf8("the token file", path)?));
        }
        if let Some(path) = &self.ca_cert {
            env.push(("WARDEN_CA_CERT", utf8("the CA file", path)?));
        }
        Ok(env)
    }
}

/// `word` as one word for `sh`: as it is when it holds only characters
/// that no shell treats specially, else in single quotes (a `'` inside
/// written as `'\''`).
pub fn shell_word(word: &str) -> Cow<'_, str> {
    let plain = |c: char| c.is_ascii_alphanumeric() || "@%+:,./_-".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        Cow::Borrowed(word)
    } else {
        Cow::Owned(format!("'{}'", word.replace('\'', r"'\''")))
    }
}

/// The settings document `existing` with Warden's `PreToolUse` entry: an
/// entry that already runs `warden-hook … claude-code` is replaced, every
/// other hook and setting is kept.
pub fn merge(
    existing: Option<&str>,
    command: &str,
    timeout_seconds: u64,
    managed: bool,
    path: &Path,
) -> Result<Value, InstallError> {
    let error = |message: String| InstallError::Settings { path: path.display().to_string(), message };
    let mut settings = json_object(existing, path)?;
    let hooks = settings.entry("hooks").or_insert_with(|| json!({}));
    let Value::Object(hooks) = hooks else { return Err(error("`hooks` is not an object".into())) };
    let pre = hooks.entry("PreToolUse").or_insert_with(|| json!([]));
    let Value::Array(pre) = pre else { return Err(error("`hooks.PreToolUse` is not a list".into())) };
    pre.retain(|entry| !runs_warden_hook(entry, "claude-code"));
    pre.push(json!({
        "matcher": "*",
        "hooks": [{
            "type": "command",
            "command": command,
            "timeout": timeout_seconds,
            "onFailure": "block",
        }]
    }));
    if managed {
        settings.insert("allowManagedHooksOnly".into(), Value::Bool(true));
    }
    Ok(Value::Object(settings))
}

/// Whether a hook group (`{"hooks": [{"command": …}]}`) runs `warden-hook
/// PROTOCOL`: the one an install replaces.
pub fn runs_warden_hook(group: &Value, protocol: &str) -> bool {
    group.get("hooks").and_then(Value::as_array).is_some_and(|list| {
        list.iter().any(|hook| {
            hook.get("command")
                .and_then(Value::as_str)
                .is_some_and(|c| c.contains("warden-hook") && c.split_whitespace().any(|w| w == protocol))
        })
    })
}

/// A settings document's text as a JSON object (none or blank: empty).
pub fn json_object(existing: Option<&str>, path: &Path) -> Result<Map<String, Value>, InstallError> {
    let error = |message: String| InstallError::Settings { path: path.display().to_string(), message };
    match existing.map(str::trim).filter(|t| !t.is_empty()) {
        None => Ok(Map::new()),
        Some(text) => match serde_json::from_str(text) {
            Ok(Value::Object(object)) => Ok(object),
            Ok(_) => Err(error("is not a JSON object".into())),
            Err(e) => Err(error(format!("is not valid JSON: {e}"))),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_entry_is_merged_and_replaced_never_duplicated() {
        let path = Path::new("settings.json");
        let existing = r#"{"model": "opus", "hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "audit.sh"}]},
            {"matcher": "*", "hooks": [{"type": "command", "command": "/old/warden-hook claude-code --max-wait 60"}]}], "Stop": []}}"#;
        let merged = merge(Some(existing), "/usr/bin/warden-hook claude-code", 930, false, path).unwrap();
        assert_eq!(merged["model"], "opus");
        assert!(merged["hooks"]["Stop"].is_array());
        let pre = merged["hooks"]["PreToolUse"].as_array().unwrap();
        assert_eq!(pre.len(), 2, "{pre:?}");
        assert_eq!(pre[0]["hooks"][0]["command"], "audit.sh");
        assert_eq!(pre[1]["matcher"], "*");
        assert_eq!(pre[1]["hooks"][0]["onFailure"], "block");
        assert_eq!(pre[1]["hooks"][0]["timeout"], 930);
        assert!(merged.get("allowManagedHooksOnly").is_none());
        // An entry with the monitor written in front replaces the old one.
        let command = "WARDEN_ENDPOINT=http://10.0.0.2:50051 WARDEN_TOKEN_FILE='/srv/a b/t' /usr/bin/warden-hook \
                       claude-code --max-wait 900";
        let again = merge(Some(&merged.to_string()), command, 930, true, path).unwrap();
        let pre = again["hooks"]["PreToolUse"].as_array().unwrap();
        assert_eq!(pre.len(), 2, "{pre:?}");
        assert_eq!(pre[1]["hooks"][0]["command"], command);
        assert_eq!(again["allowManagedHooksOnly"], true);
        // And is replaced in turn.
        let third = merge(Some(&again.to_string()), "/usr/bin/warden-hook claude-code", 930, true, path).unwrap();
        assert_eq!(third["hooks"]["PreToolUse"].as_array().unwrap().len(), 2);
        assert!(merge(Some("[1]"), "x claude-code", 1, false, path).is_err());
        assert!(merge(Some("{\"hooks\": 3}"), "x claude-code", 1, false, path).is_err());
    }

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| vars.iter().find(|(n, _)| *n == name).map(|(_, v)| (*v).to_owned())
    }

    #[test]
    fn flags_win_over_the_environment_and_paths_become_absolute() {
        let cwd = Path::new("/home/alice/project");
        let vars =
            [("WARDEN_ENDPOINT", "https://warden.example:50051"), ("WARDEN_TOKEN_FILE", ".warden/harness.token")];
        let from_env = Target::resolve(TargetFlags::default(), env(&vars), cwd).unwrap();
        assert_eq!(
            from_env,
            Target {
                endpoint: "https://warden.example:50051".into(),
                token_file: Some("/home/alice/project/.warden/harness.token".into()),
                ca_cert: None,
            }
        );
        let flags = TargetFlags {
            endpoint: Some("unix:/run/warden/wardend.sock".into()),
            token_file: Some("/etc/warden/hook.token".into()),
            ca_cert: None,
        };
        let from_flags = Target::resolve(flags, env(&vars), cwd).unwrap();
        assert_eq!(from_flags.endpoint, "unix:/run/warden/wardend.sock");
        assert_eq!(from_flags.token_file, Some("/etc/warden/hook.token".into()));
        let ca = Target::resolve(
            TargetFlags::default(),
            env(&[("WARDEN_ENDPOINT", "https://w:1"), ("WARDEN_CA_CERT", "ca.pem")]),
            cwd,
        )
        .unwrap();
        assert_eq!(ca.ca_cert, Some("/home/alice/project/ca.pem".into()));
        // Nothing known: the SDK's default endpoint, no token file.
        let bare = Target::resolve(TargetFlags::default(), env(&[]), cwd).unwrap();
        assert_eq!((bare.endpoint.as_str(), bare.token_file), (warden_sdk::DEFAULT_ENDPOINT, None));
    }

    #[test]
    fn a_token_s_value_is_refused_and_a_ca_needs_https() {
        let cwd = Path::new("/");
        for vars in
            [&[("WARDEN_TOKEN", "wdn_secret")][..], &[("WARDEN_TOKEN", "wdn_secret"), ("WARDEN_TOKEN_FILE", "/t")]]
        {
            let error = Target::resolve(TargetFlags::default(), env(vars), cwd).unwrap_err();
            assert!(matches!(error, InstallError::TokenValue), "{error:?}");
            let message = error.to_string();
            assert!(message.contains("never written into an agent's settings") && message.contains("--token-file"));
            assert!(!message.contains("wdn_secret"), "{message}");
        }
        // A token file given on the command line is what is written.
        let flags = TargetFlags { token_file: Some("/t".into()), ..TargetFlags::default() };
        let target = Target::resolve(flags, env(&[("WARDEN_TOKEN", "wdn_secret")]), cwd).unwrap();
        assert_eq!(target.token_file, Some("/t".into()));
        let flags = TargetFlags { ca_cert: Some("/ca.pem".into()), ..TargetFlags::default() };
        assert!(matches!(Target::resolve(flags, env(&[]), cwd), Err(InstallError::Invalid(_))));
    }

    #[test]
    fn a_list_of_replicas_is_checked_entry_by_entry() {
        let cwd = Path::new("/");
        let resolve = |endpoint: &str, ca: Option<&str>| {
            let flags = TargetFlags {
                endpoint: Some(endpoint.into()),
                token_file: Some("/t".into()),
                ca_cert: ca.map(Into::into),
            };
            Target::resolve(flags, env(&[]), cwd)
        };
        let both = resolve("https://a:1, https://b:1", Some("/ca.pem")).unwrap();
        assert_eq!(both.endpoint, "https://a:1, https://b:1");
        let error = resolve("https://a:1,,https://b:1", None).unwrap_err().to_string();
        assert!(error.contains("entry 2 of 3 is empty"), "{error}");
        let error = resolve("https://a:1,http://b:1", Some("/ca.pem")).unwrap_err().to_string();
        assert!(error.contains("`http://b:1` is not https://"), "{error}");
    }

    #[test]
    fn the_command_quotes_what_the_shell_would_read() {
        let target = Target {
            endpoint: "http://127.0.0.1:50051".into(),
            token_file: Some("/home/alice/my tokens/alice's.token".into()),
            ca_cert: None,
        };
        assert_eq!(
            hook_command(Path::new("/usr/local/bin/warden-hook"), "claude-code", 900, &target).unwrap(),
            "WARDEN_ENDPOINT=http://127.0.0.1:50051 WARDEN_TOKEN_FILE='/home/alice/my tokens/alice'\\''s.token' \
             /usr/local/bin/warden-hook claude-code --max-wait 900"
        );
        let bare = Target { token_file: None, ..target };
        assert_eq!(
            hook_command(Path::new("/opt/warden $x/warden-hook"), "claude-code", 60, &bare).unwrap(),
            "WARDEN_ENDPOINT=http://127.0.0.1:50051 '/opt/warden $x/warden-hook' claude-code --max-wait 60"
        );
        for (word, quoted) in
            [("", "''"), ("a=b", "'a=b'"), ("~/t", "'~/t'"), ("a;b", "'a;b'"), ("unix:/r/w.sock", "unix:/r/w.sock")]
        {
            assert_eq!(shell_word(word), quoted);
        }
    }
}
