//! Gemini CLI's hook (checked with 0.61.0, see `shared/notes`): in a
//! `settings.json` (the user's `~/.gemini/settings.json`, or
//! `$GEMINI_CLI_HOME/.gemini/settings.json`; a project's
//! `.gemini/settings.json` runs only in a trusted folder), a `BeforeTool`
//! group matching every tool (`".*"`) whose one hook runs `warden-hook
//! gemini`, with its `timeout` in milliseconds. User-level hooks run without
//! a trust step.
//!
//! Gemini CLI lets a tool run when its hook exits 1, times out, is killed
//! or prints what it cannot read; any other failing exit (127 for a
//! missing program) blocks. `warden-hook gemini` answers every failure of
//! its own with a deny.

use std::path::Path;

use serde_json::{Value, json};

use super::InstallError;

/// The settings `existing` with Warden's `BeforeTool` group: one that
/// already runs `warden-hook … gemini` is replaced, every other hook and
/// setting is kept.
pub fn merge(existing: Option<&str>, command: &str, timeout_ms: u64, path: &Path) -> Result<Value, InstallError> {
    let error = |message: &str| InstallError::Settings { path: path.display().to_string(), message: message.into() };
    let mut settings = super::json_object(existing, path)?;
    let hooks = settings.entry("hooks").or_insert_with(|| json!({}));
    let Value::Object(hooks) = hooks else { return Err(error("`hooks` is not an object")) };
    let before = hooks.entry("BeforeTool").or_insert_with(|| json!([]));
    let Value::Array(before) = before else { return Err(error("`hooks.BeforeTool` is not a list")) };
    before.retain(|group| !super::runs_warden_hook(group, "gemini"));
    before.push(json!({
        "matcher": ".*",
        "hooks": [{"name": "warden", "type": "command", "command": command, "timeout": timeout_ms}],
    }));
    Ok(Value::Object(settings))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_group_is_merged_and_replaced_never_duplicated() {
        let path = Path::new("settings.json");
        let existing = r#"{"security": {"auth": {"selectedType": "gemini-api-key"}},
            "hooks": {"BeforeTool": [{"matcher": "run_shell_command", "hooks": [{"type": "command", "command": "audit.sh"}]}],
                      "AfterTool": []}}"#;
        let merged = merge(Some(existing), "/usr/bin/warden-hook gemini", 930_000, path).unwrap();
        assert_eq!(merged["security"]["auth"]["selectedType"], "gemini-api-key");
        assert!(merged["hooks"]["AfterTool"].is_array());
        let before = merged["hooks"]["BeforeTool"].as_array().unwrap();
        assert_eq!(before.len(), 2);
        assert_eq!(before[1]["matcher"], ".*");
        assert_eq!(before[1]["hooks"][0]["timeout"], 930_000);
        let again = merge(Some(&merged.to_string()), "/opt/warden-hook gemini --max-wait 60", 90_000, path).unwrap();
        let before = again["hooks"]["BeforeTool"].as_array().unwrap();
        assert_eq!(before.len(), 2);
        assert_eq!(before[1]["hooks"][0]["command"], "/opt/warden-hook gemini --max-wait 60");
        assert!(merge(Some("{\"hooks\": {\"BeforeTool\": 1}}"), "x gemini", 1, path).is_err());
    }
}
