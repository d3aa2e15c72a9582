//! `warden-hook install claude-code`: the hook entry merged into a Claude
//! Code settings file, without touching what else is there.
//!
//! The entry matches every tool (`"matcher": "*"`), runs `warden-hook
//! claude-code`, has a `timeout` longer than the longest wait for an
//! approval, and `"onFailure": "block"`: without it, Claude Code lets a tool
//! run when its hook fails, is missing or times out. In the managed settings
//! file (`/etc/claude-code/managed-settings.json`), `allowManagedHooksOnly`
//! keeps project and user settings from adding or removing hooks.

use std::path::Path;

use serde_json::{Map, Value, json};

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
    let mut settings: Map<String, Value> = match existing.map(str::trim).filter(|t| !t.is_empty()) {
        None => Map::new(),
        Some(text) => match serde_json::from_str(text) {
            Ok(Value::Object(object)) => object,
            Ok(_) => return Err(error("is not a JSON object".into())),
            Err(e) => return Err(error(format!("is not valid JSON: {e}"))),
        },
    };
    let hooks = settings.entry("hooks").or_insert_with(|| json!({}));
    let Value::Object(hooks) = hooks else { return Err(error("`hooks` is not an object".into())) };
    let pre = hooks.entry("PreToolUse").or_insert_with(|| json!([]));
    let Value::Array(pre) = pre else { return Err(error("`hooks.PreToolUse` is not a list".into())) };
    let ours = |entry: &Value| {
        entry.get("hooks").and_then(Value::as_array).is_some_and(|list| {
            list.iter().any(|h| {
                h.get("command")
                    .and_then(Value::as_str)
                    .is_some_and(|c| c.contains("warden-hook") && c.split_whitespace().any(|w| w == "claude-code"))
            })
        })
    };
    pre.retain(|entry| !ours(entry));
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
        let again =
            merge(Some(&merged.to_string()), "/usr/bin/warden-hook claude-code --max-wait 900", 930, true, path)
                .unwrap();
        assert_eq!(again["hooks"]["PreToolUse"].as_array().unwrap().len(), 2);
        assert_eq!(again["allowManagedHooksOnly"], true);
        assert!(merge(Some("[1]"), "x claude-code", 1, false, path).is_err());
        assert!(merge(Some("{\"hooks\": 3}"), "x claude-code", 1, false, path).is_err());
    }
}
