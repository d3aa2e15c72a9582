//! `warden-hook`'s core, pure: a coding agent's pre-tool event becomes the
//! action Warden is asked about, and Warden's answer (or the reason there is
//! none) becomes the agent's hook answer. The binary (`main.rs`) does the
//! I/O: stdin, the SDK call, stdout.
//!
//! Claude Code's protocol (PreToolUse hooks): the event is one JSON object on
//! stdin with `session_id`, `cwd`, `hook_event_name`, `tool_name`,
//! `tool_input`; the answer is `{"hookSpecificOutput": {"hookEventName":
//! "PreToolUse", "permissionDecision": "allow" | "deny",
//! "permissionDecisionReason": "…"}}` on stdout with exit 0, and a deny's
//! reason reaches the model as the tool's result
//! (docs.anthropic.com/en/docs/claude-code/hooks, "PreToolUse Decision
//! Control"; checked against 2.1.328, see shared/notes/claude-code.md).

#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod install;

use serde_json::{Value, json};
use warden_sdk::ActionRequest;

/// The largest event read from stdin.
pub const MAX_EVENT_BYTES: usize = 1024 * 1024;

/// Why an event cannot be asked about.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HookError {
    /// Not the JSON the agent sends.
    #[error("the hook event is not valid: {0}")]
    Event(String),
}

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

    fn input(&self, name: &str) -> Option<&str> {
        self.tool_input.get(name).and_then(Value::as_str).filter(|s| !s.is_empty())
    }

    fn required(&self, name: &str) -> Result<&str, HookError> {
        self.input(name).ok_or_else(|| HookError::Event(format!("`{}` without `tool_input.{name}`", self.tool_name)))
    }

    /// The action Warden is asked about (DESIGN.md, "Gates"): `Bash` is an
    /// `exec` of `["bash", "-c", command]` (the monitor reads the script);
    /// `Read`, `Glob`, `Grep`, `NotebookRead` read the file or the folder
    /// searched; `Write`, `Edit`, `MultiEdit`, `NotebookEdit` write;
    /// `WebFetch` is a GET; `mcp__SERVER__TOOL` is that MCP tool; any other
    /// tool (`WebSearch`, `Task` …) is a `tool.call` on server `claude-code`.
    pub fn request(&self) -> Result<ActionRequest, HookError> {
        let request = match self.tool_name.as_str() {
            "Bash" => ActionRequest::exec(["bash", "-c", self.required("command")?]),
            "Read" => ActionRequest::read_file(self.required("file_path")?),
            "NotebookRead" => ActionRequest::read_file(self.required("notebook_path")?),
            // A search without a path searches the working folder.
            "Glob" | "Grep" => ActionRequest::read_file(self.input("path").unwrap_or(&self.cwd)),
            "Write" | "Edit" | "MultiEdit" => ActionRequest::write_file(self.required("file_path")?),
            "NotebookEdit" => ActionRequest::write_file(self.required("notebook_path")?),
            "WebFetch" => ActionRequest::http("GET", self.required("url")?),
            name => match name.strip_prefix("mcp__").and_then(|rest| rest.split_once("__")) {
                Some((server, tool)) if !server.is_empty() && !tool.is_empty() => {
                    ActionRequest::call_tool(server, tool, self.tool_input.to_string())
                }
                _ => ActionRequest::call_tool("claude-code", name, self.tool_input.to_string()),
            },
        };
        Ok(request.cwd(&self.cwd).justification(format!("Claude Code's {} tool", self.tool_name)))
    }
}

/// What the hook answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The tool runs.
    Allow(String),
    /// The tool does not run; the agent (and the model) reads why.
    Deny(String),
}

impl Verdict {
    /// The answer in Claude Code's hook JSON.
    pub fn claude_code(&self) -> String {
        let (decision, reason) = match self {
            Verdict::Allow(reason) => ("allow", reason),
            Verdict::Deny(reason) => ("deny", reason),
        };
        json!({
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": decision,
                "permissionDecisionReason": reason,
            }
        })
        .to_string()
    }
}

/// Warden's reasons as the agent reads them: which policy decided and why.
pub fn explain(what: &str, policy_ids: &[String], reasons: &[String]) -> String {
    let why = if reasons.is_empty() { "no reason given".to_owned() } else { reasons.join("; ") };
    if policy_ids.is_empty() { format!("{what}: {why}") } else { format!("{what} by {}: {why}", policy_ids.join(", ")) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use warden_sdk::proto::authorize_request::Resource;

    fn event(tool: &str, input: Value) -> ClaudeEvent {
        let text = json!({
            "session_id": "abc", "transcript_path": "/t", "cwd": "/home/alice/project", "prompt_id": "p",
            "permission_mode": "default", "effort": "medium", "hook_event_name": "PreToolUse",
            "tool_name": tool, "tool_input": input, "tool_use_id": "toolu_1"
        });
        ClaudeEvent::parse(&text.to_string()).unwrap()
    }

    fn asked(tool: &str, input: Value) -> (String, Resource) {
        let request = event(tool, input).request().unwrap().into_proto_request();
        (request.action, request.resource.unwrap())
    }

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
            ("Glob", json!({"pattern": "*.rs"}), "fs.read", "/home/alice/project"),
            ("Grep", json!({"pattern": "x", "path": "/srv"}), "fs.read", "/srv"),
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
    fn what_is_not_an_event_is_refused() {
        assert!(ClaudeEvent::parse("not json").is_err());
        assert!(
            ClaudeEvent::parse(r#"{"hook_event_name":"PostToolUse","session_id":"a","cwd":"/","tool_name":"Bash"}"#)
                .is_err()
        );
        assert!(event("Bash", json!({})).request().is_err());
        assert!(event("Read", json!({"file_path": ""})).request().is_err());
    }

    #[test]
    fn the_answer_is_claude_code_s_hook_json() {
        let deny: Value = serde_json::from_str(&Verdict::Deny("no".into()).claude_code()).unwrap();
        assert_eq!(deny["hookSpecificOutput"]["permissionDecision"], "deny");
        assert_eq!(deny["hookSpecificOutput"]["permissionDecisionReason"], "no");
        assert_eq!(deny["hookSpecificOutput"]["hookEventName"], "PreToolUse");
        assert_eq!(
            explain("Warden denied `Bash`", &["files.x".into()], &["why".into()]),
            "Warden denied `Bash` by files.x: why"
        );
    }
}
