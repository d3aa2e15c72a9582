//! Claude Code's `PreToolUse` hook (docs.anthropic.com/en/docs/claude-code/hooks;
//! checked against 2.1.328): the event's tools, as Warden asks about them.
//! Codex CLI's event has the same shape.

use serde_json::{Value, json};
use warden_sdk::ActionRequest;

use crate::touch::{self, Access, Touch};
use crate::{HookError, ToolCall};

/// One Claude Code `PreToolUse` event, as far as Warden needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaudeEvent {
    /// The Claude Code session, which is Warden's session.
    pub session_id: String,
    /// Where Claude Code runs: relative paths are resolved against it.
    pub cwd: String,
    /// `Bash`, `Read`, `mcp__slack__post_message` …
    pub tool_name: String,
    /// The tool's input.
    pub tool_input: Value,
}

impl ClaudeEvent {
    /// Reads the event; anything else (another hook event, a missing
    /// field) is an error, which the binary answers with a deny.
    pub fn parse(text: &str) -> Result<Self, HookError> {
        let value: Value = serde_json::from_str(text).map_err(|e| HookError::Event(e.to_string()))?;
        let field = |name: &str| {
            value
                .get(name)
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| HookError::Event(format!("`{name}` is missing or not text")))
        };
        let event = field("hook_event_name")?;
        if event != "PreToolUse" {
            return Err(HookError::Event(format!("`{event}` is not a PreToolUse event")));
        }
        Ok(Self {
            session_id: field("session_id")?,
            cwd: field("cwd")?,
            tool_name: field("tool_name")?,
            tool_input: value.get("tool_input").cloned().unwrap_or_else(|| json!({})),
        })
    }

    pub(crate) fn input(&self, name: &str) -> Option<&str> {
        self.tool_input.get(name).and_then(Value::as_str).filter(|s| !s.is_empty())
    }

    fn required(&self, name: &str) -> Result<&str, HookError> {
        self.input(name).ok_or_else(|| HookError::Event(format!("`{}` without `tool_input.{name}`", self.tool_name)))
    }

    /// What the tool touches (DESIGN.md, "Gates"): `Bash` is an `exec` of
    /// `["bash", "-c", command]` (the monitor reads the script); `Read`
    /// and `NotebookRead` read the file; `Grep` reads every file below the
    /// folder it searches that its `glob` filter lets through (a `path`
    /// naming one file: that file), `Glob` every file its `pattern` can
    /// match below its `path`; `Write`, `Edit`, `MultiEdit`,
    /// `NotebookEdit` write; `WebFetch` is a GET; `mcp__SERVER__TOOL` is
    /// that MCP tool; any other tool (`WebSearch`, `Agent`, `TaskCreate`,
    /// `Skill` …) is a `tool.call` on server `claude-code`, which the
    /// bundled `claude-code.cedar` decides.
    pub fn touch(&self) -> Result<Touch, HookError> {
        let file = |access, field| Ok(Touch::File { access, path: self.required(field)?.to_owned() });
        // A search without a path searches the working folder.
        let searched = || self.input("path").unwrap_or(&self.cwd).to_owned();
        Ok(match self.tool_name.as_str() {
            "Bash" => Touch::Request(ActionRequest::exec(["bash", "-c", self.required("command")?]).cwd(&self.cwd)),
            "Read" => file(Access::Read, "file_path")?,
            "NotebookRead" => file(Access::Read, "notebook_path")?,
            "Write" | "Edit" | "MultiEdit" => file(Access::Write, "file_path")?,
            "NotebookEdit" => file(Access::Write, "notebook_path")?,
            // ripgrep's `--type` is not narrowed here (its table of types
            // is ripgrep's): every file below the folder, wider.
            "Grep" => {
                let globs = self.input("glob").map(touch::claude_code_globs).unwrap_or_default();
                Touch::Search { root: searched(), names: touch::rg_globs(globs.iter().map(String::as_str)) }
            }
            "Glob" => touch::claude_code_glob(self.required("pattern")?, &searched()),
            "WebFetch" => Touch::Request(ActionRequest::http("GET", self.required("url")?)),
            name => Touch::Request(match name.strip_prefix("mcp__").and_then(|rest| rest.split_once("__")) {
                Some((server, tool)) if !server.is_empty() && !tool.is_empty() => {
                    ActionRequest::call_tool(server, tool, self.tool_input.to_string())
                }
                _ => ActionRequest::call_tool("claude-code", name, self.tool_input.to_string()),
            }),
        })
    }

    pub(crate) fn call(self, justification: String) -> Result<ToolCall, HookError> {
        let touches = vec![self.touch()?];
        Ok(ToolCall { session: self.session_id, tool: self.tool_name, cwd: self.cwd, touches, justification })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use warden_sdk::proto::authorize_request::Resource;

    use super::*;
    use crate::protocols::Protocol;
    use crate::protocols::support::*;

    #[test]
    fn tools_map_to_the_actions_design_names() {
        let (action, resource) = asked("Bash", json!({"command": "ls -la", "description": "list"}));
        assert_eq!(action, "exec");
        let Resource::Command(command) = resource else { panic!("{resource:?}") };
        assert_eq!(
            (command.argv, command.cwd.as_str()),
            (vec!["bash".into(), "-c".into(), "ls -la".into()], "/home/alice/project")
        );
        for (tool, input, want_action, want) in [
            ("Read", json!({"file_path": "src/main.rs"}), "fs.read", "src/main.rs"),
            ("Write", json!({"file_path": ".env", "content": "x"}), "fs.write", ".env"),
            ("Edit", json!({"file_path": "/a", "old_string": "x", "new_string": "y"}), "fs.write", "/a"),
            ("NotebookEdit", json!({"notebook_path": "/n.ipynb"}), "fs.write", "/n.ipynb"),
        ] {
            let (action, resource) = asked(tool, input);
            let Resource::File(file) = resource else { panic!("{tool}: {resource:?}") };
            assert_eq!(
                (action.as_str(), file.path.as_str(), file.cwd.as_str()),
                (want_action, want, "/home/alice/project")
            );
        }
        let (action, resource) = asked("WebFetch", json!({"url": "https://x.dev/a", "prompt": "p"}));
        assert_eq!(action, "http.request");
        assert!(matches!(resource, Resource::Http(h) if h.method == "GET" && h.url == "https://x.dev/a"));
        let (action, resource) = asked("mcp__slack__post_message", json!({"text": "hi"}));
        assert_eq!(action, "tool.call");
        assert!(
            matches!(&resource, Resource::Tool(t) if t.server == "slack" && t.name == "post_message" && t.arguments_json == r#"{"text":"hi"}"#)
        );
        let (_, resource) = asked("WebSearch", json!({"query": "q"}));
        assert!(matches!(&resource, Resource::Tool(t) if t.server == "claude-code" && t.name == "WebSearch"));
    }

    #[test]
    fn claude_code_s_searches_read_every_file_below_their_folder() {
        let claude = |tool: &str, input: Value| {
            json!({"session_id": "abc", "cwd": "/home/alice/project", "hook_event_name": "PreToolUse",
                "tool_name": tool, "tool_input": input})
        };
        let p = |tool: &str, input: Value| patterns(Protocol::ClaudeCode, claude(tool, input));
        assert_eq!(p("Grep", json!({"pattern": "x"})), ["/home/alice/project/**/*"]);
        assert_eq!(p("Grep", json!({"pattern": "x", "path": "/srv"})), ["/srv/**/*"]);
        assert_eq!(
            p("Grep", json!({"pattern": "x", "path": "src", "glob": ".env"})),
            ["/home/alice/project/src/**/.env"]
        );
        // A piece with braces is one glob, its commas inside them (as
        // Claude Code passes it to ripgrep); `type` does not narrow.
        assert_eq!(
            p("Grep", json!({"pattern": "x", "glob": "*.{ts,tsx},.env", "type": "rust"})),
            ["/home/alice/project/**/*.ts,.env", "/home/alice/project/**/*.tsx,.env"]
        );
        assert_eq!(
            p("Grep", json!({"pattern": "x", "glob": "*.rs .env"})),
            ["/home/alice/project/**/*.rs", "/home/alice/project/**/.env"]
        );
        assert_eq!(p("Grep", json!({"pattern": "x", "glob": "!*.lock"})), ["/home/alice/project/**/*"]);
        assert_eq!(p("Glob", json!({"pattern": ".env"})), ["/home/alice/project/**/.env"]);
        assert_eq!(p("Glob", json!({"pattern": "**/*.rs", "path": "/srv/app"})), ["/srv/app/**/*.rs"]);
        assert_eq!(p("Glob", json!({"pattern": "/etc/**/*.conf"})), ["/etc/**/*.conf"]);
        assert_eq!(p("Glob", json!({"pattern": "**/.warden/*"})), ["/home/alice/project/**/.warden/*"]);
    }

    #[test]
    fn what_is_not_an_event_is_refused() {
        assert!(ClaudeEvent::parse("not json").is_err());
        assert!(
            ClaudeEvent::parse(r#"{"hook_event_name":"PostToolUse","session_id":"a","cwd":"/","tool_name":"Bash"}"#)
                .is_err()
        );
        assert!(event("Bash", json!({})).touch().is_err());
        assert!(event("Read", json!({"file_path": ""})).touch().is_err());
        assert!(event("Glob", json!({})).touch().is_err());
    }
}
