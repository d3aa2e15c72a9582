//! What a run adds for the coding agents it knows, for this run only and
//! without touching the user's own files: Claude Code gets its settings with
//! `warden-hook` as its pre-tool hook (which asks through the run's door).
//! Any other command gets the box and the proxy only.

use std::path::Path;

/// The agent kind and what goes into its command line and environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setup {
    /// The agent kind, as policies name it.
    pub agent: &'static str,
    /// Arguments put right after the program.
    pub args: Vec<String>,
    /// Variables for the box.
    pub env: Vec<(String, String)>,
}

/// Where Claude Code keeps its state inside the box: in the box's own
/// `/tmp`, since the home folder is read-only there and the user's own
/// settings are not the run's.
pub const CLAUDE_CONFIG_DIR: &str = "/tmp/warden-run-claude";

/// The setup for `command`, when its program is an agent this knows;
/// `hook`: `warden-hook`'s path; `outer`: warden-run's environment.
pub fn setup(command: &[String], hook: &Path, outer: &[(String, String)]) -> Option<Setup> {
    let program = Path::new(command.first()?).file_name()?.to_str()?;
    match program {
        "claude" => {
            // The hook blocks the tool when it cannot run at all.
            let settings = serde_json::json!({"hooks": {"PreToolUse": [{"matcher": "*", "hooks": [{
                "type": "command",
                "command": format!("'{}' claude-code", hook.display().to_string().replace('\'', r"'\''")),
                // The hook's default --max-wait (900 s) and 30 s more, as
                // `warden-hook install` writes it.
                "timeout": 930,
                "onFailure": "block",
            }]}]}});
            let mut env = vec![
                ("CLAUDE_CONFIG_DIR".to_owned(), CLAUDE_CONFIG_DIR.to_owned()),
                // Its telemetry and update checks would only be refused.
                ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".to_owned(), "1".to_owned()),
            ];
            // A model gateway the user points Claude Code at, through the proxy too.
            env.extend(outer.iter().filter(|(name, _)| name == "ANTHROPIC_BASE_URL").cloned());
            Some(Setup { agent: "claude-code", args: vec!["--settings".into(), settings.to_string()], env })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claude_code_gets_the_hook_and_nothing_else_does() {
        let outer = vec![("ANTHROPIC_BASE_URL".to_owned(), "https://gw.example".to_owned())];
        let claude =
            setup(&["/usr/bin/claude".into(), "-p".into()], Path::new("/opt/it's/warden-hook"), &outer).unwrap();
        assert_eq!(claude.agent, "claude-code");
        assert_eq!(claude.args[0], "--settings");
        let settings: serde_json::Value = serde_json::from_str(&claude.args[1]).unwrap();
        let entry = &settings["hooks"]["PreToolUse"][0]["hooks"][0];
        assert_eq!(entry["command"], r"'/opt/it'\''s/warden-hook' claude-code");
        assert_eq!(entry["onFailure"], "block");
        assert!(claude.env.contains(&("ANTHROPIC_BASE_URL".into(), "https://gw.example".into())));
        assert_eq!(setup(&["sh".into()], Path::new("/h"), &outer), None);
        assert_eq!(setup(&[], Path::new("/h"), &outer), None);
    }
}
