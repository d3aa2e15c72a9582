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
    /// tool (`WebSearch`, `Agent`, `TaskCreate`, `Skill` …) is a `tool.call`
    /// on server `claude-code`, which the bundled `claude-code.cedar`
    /// decides.
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

/// The agents whose hook protocol `warden-hook` speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// Claude Code's `PreToolUse` hook (see the module's documentation).
    ClaudeCode,
    /// Codex CLI's `PreToolUse` hook (`hooks.json`, the `codex_hooks`
    /// feature; Codex's hooks documentation): the event has Claude Code's
    /// shape (`session_id`, `cwd`, `tool_name` `Bash`, `tool_input.command`,
    /// plus `turn_id`); a block is exit code 2 with the reason on stderr,
    /// and exit 0 with nothing on stdout lets the call go on.
    Codex,
    /// Gemini CLI's `BeforeTool` hook: `session_id`, `cwd`, `tool_name`
    /// (`run_shell_command`, `read_file`, `write_file`, `replace` …),
    /// `tool_input`; the answer is `{"decision": "allow" | "deny",
    /// "reason": …}` on stdout with exit 0, and a deny's reason goes to the
    /// agent as the tool's error (geminicli.com/docs/hooks/reference,
    /// "BeforeTool").
    Gemini,
    /// Cursor's `beforeShellExecution` (`command`, `cwd`),
    /// `beforeMCPExecution` (`tool_name`, `tool_input`) and `beforeReadFile`
    /// (`file_path`) hooks, all with `conversation_id` and
    /// `workspace_roots`; the answer is `{"permission": "allow" | "deny",
    /// "user_message": …, "agent_message": …}` (cursor.com/docs/agent/hooks).
    Cursor,
}

impl Protocol {
    /// The agent kind a request names unless `WARDEN_AGENT` says otherwise.
    pub fn default_agent(self) -> &'static str {
        match self {
            Protocol::ClaudeCode => "claude-code",
            Protocol::Codex => "codex",
            Protocol::Gemini => "gemini-cli",
            Protocol::Cursor => "cursor",
        }
    }
}

/// A tool call, whatever protocol brought it.
#[derive(Debug, Clone)]
pub struct ToolCall {
    /// The agent's session (Warden's session id).
    pub session: String,
    /// What to call the tool in a reason (`Bash`, `run_shell_command` …).
    pub tool: String,
    /// What Warden is asked.
    pub request: ActionRequest,
}

/// Reads one event of `protocol`.
pub fn parse(protocol: Protocol, text: &str) -> Result<ToolCall, HookError> {
    match protocol {
        Protocol::ClaudeCode => {
            let event = ClaudeEvent::parse(text)?;
            Ok(ToolCall { request: event.request()?, session: event.session_id, tool: event.tool_name })
        }
        Protocol::Codex => {
            let mut event = ClaudeEvent::parse(text)?;
            // Codex's shell tool may send argv instead of a script.
            if matches!(event.tool_name.as_str(), "Bash" | "shell" | "local_shell" | "exec_command")
                && let Some(argv) = event.tool_input.get("command").and_then(Value::as_array)
            {
                let argv: Vec<String> = argv.iter().filter_map(Value::as_str).map(str::to_owned).collect();
                if argv.is_empty() {
                    return Err(HookError::Event("an empty `tool_input.command`".into()));
                }
                let request = ActionRequest::exec(argv).cwd(&event.cwd).justification("Codex's shell tool");
                return Ok(ToolCall { request, session: event.session_id, tool: event.tool_name });
            }
            if matches!(event.tool_name.as_str(), "shell" | "local_shell" | "exec_command") {
                event.tool_name = "Bash".into();
            }
            Ok(ToolCall { request: event.request()?, session: event.session_id, tool: event.tool_name })
        }
        Protocol::Gemini => gemini(text),
        Protocol::Cursor => cursor(text),
    }
}

fn object(text: &str) -> Result<Value, HookError> {
    let value: Value = serde_json::from_str(text).map_err(|e| HookError::Event(e.to_string()))?;
    if value.is_object() { Ok(value) } else { Err(HookError::Event("not a JSON object".into())) }
}

fn text_field<'v>(value: &'v Value, names: &[&str]) -> Option<&'v str> {
    names.iter().find_map(|name| value.get(*name).and_then(Value::as_str).filter(|s| !s.is_empty()))
}

fn event_name(value: &Value, allowed: &[&str]) -> Result<String, HookError> {
    let name = text_field(value, &["hook_event_name"])
        .ok_or_else(|| HookError::Event("`hook_event_name` is missing".into()))?;
    if allowed.contains(&name) {
        Ok(name.to_owned())
    } else {
        Err(HookError::Event(format!("`{name}` is not a pre-tool event")))
    }
}

/// Gemini CLI's `BeforeTool`, its built-in tools by their documented names.
fn gemini(text: &str) -> Result<ToolCall, HookError> {
    let value = object(text)?;
    event_name(&value, &["BeforeTool"])?;
    let session =
        text_field(&value, &["session_id"]).ok_or_else(|| HookError::Event("`session_id` is missing".into()))?;
    let cwd = text_field(&value, &["cwd"]).ok_or_else(|| HookError::Event("`cwd` is missing".into()))?;
    let tool = text_field(&value, &["tool_name"]).ok_or_else(|| HookError::Event("`tool_name` is missing".into()))?;
    let input = value.get("tool_input").cloned().unwrap_or_else(|| json!({}));
    let missing = |what: &str| HookError::Event(format!("`{tool}` without `tool_input.{what}`"));
    let request = match tool {
        "run_shell_command" => {
            let command = text_field(&input, &["command"]).ok_or_else(|| missing("command"))?;
            let dir = text_field(&input, &["dir_path", "directory"]).map_or_else(|| cwd.to_owned(), |d| join(cwd, d));
            ActionRequest::exec(["bash", "-c", command]).cwd(dir)
        }
        "read_file" | "list_directory" | "glob" | "search_file_content" | "grep" => {
            let path = text_field(&input, &["file_path", "absolute_path", "path", "dir_path"]).unwrap_or(cwd);
            ActionRequest::read_file(path).cwd(cwd)
        }
        "write_file" | "replace" | "edit" => {
            let path =
                text_field(&input, &["file_path", "absolute_path", "path"]).ok_or_else(|| missing("file_path"))?;
            ActionRequest::write_file(path).cwd(cwd)
        }
        "web_fetch" => {
            // The tool fetches the URLs its prompt names; the first is asked.
            let prompt = text_field(&input, &["prompt", "url"]).ok_or_else(|| missing("prompt"))?;
            match prompt.split_whitespace().find(|w| w.starts_with("https://") || w.starts_with("http://")) {
                Some(url) => ActionRequest::http("GET", url.trim_end_matches([',', '.', ')', ']', '"', '\''])),
                None => ActionRequest::call_tool("gemini-cli", tool, input.to_string()),
            }
        }
        name => match name.strip_prefix("mcp__").and_then(|rest| rest.split_once("__")) {
            Some((server, mcp_tool)) if !server.is_empty() && !mcp_tool.is_empty() => {
                ActionRequest::call_tool(server, mcp_tool, input.to_string())
            }
            _ => ActionRequest::call_tool("gemini-cli", name, input.to_string()),
        },
    };
    Ok(ToolCall {
        session: session.to_owned(),
        tool: tool.to_owned(),
        request: request.justification(format!("Gemini CLI's {tool} tool")),
    })
}

/// Cursor's three pre-tool events.
fn cursor(text: &str) -> Result<ToolCall, HookError> {
    let value = object(text)?;
    let event = event_name(&value, &["beforeShellExecution", "beforeMCPExecution", "beforeReadFile"])?;
    let session = text_field(&value, &["conversation_id"])
        .ok_or_else(|| HookError::Event("`conversation_id` is missing".into()))?;
    let root = value.get("workspace_roots").and_then(Value::as_array).and_then(|r| r.first()).and_then(Value::as_str);
    let cwd = text_field(&value, &["cwd"]).or(root).unwrap_or_default().to_owned();
    let missing = |what: &str| HookError::Event(format!("`{event}` without `{what}`"));
    let (tool, request) = match event.as_str() {
        "beforeShellExecution" => {
            let command = text_field(&value, &["command"]).ok_or_else(|| missing("command"))?;
            ("shell".to_owned(), ActionRequest::exec(["bash", "-c", command]).cwd(&cwd))
        }
        "beforeReadFile" => {
            let path = text_field(&value, &["file_path"]).ok_or_else(|| missing("file_path"))?;
            ("read".to_owned(), ActionRequest::read_file(path).cwd(&cwd))
        }
        _ => {
            let name = text_field(&value, &["tool_name"]).ok_or_else(|| missing("tool_name"))?;
            // The arguments come as an object or as JSON text.
            let arguments = match value.get("tool_input") {
                Some(Value::String(text)) => text.clone(),
                Some(other) => other.to_string(),
                None => "{}".to_owned(),
            };
            // Cursor does not name the MCP server: its tools are Cursor's.
            (name.to_owned(), ActionRequest::call_tool("cursor", name, arguments))
        }
    };
    Ok(ToolCall { session: session.to_owned(), request: request.justification(format!("Cursor's {tool}")), tool })
}

fn join(cwd: &str, dir: &str) -> String {
    if dir.starts_with('/') { dir.to_owned() } else { format!("{}/{dir}", cwd.trim_end_matches('/')) }
}

/// What the hook process does with a verdict: its stdout, stderr and
/// exit code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// Written to stdout (JSON, or nothing).
    pub stdout: String,
    /// Written to stderr (Codex reads a block's reason there).
    pub stderr: String,
    /// The exit code.
    pub exit: u8,
}

impl Verdict {
    /// The verdict in `protocol`'s terms.
    pub fn answer(&self, protocol: Protocol) -> Answer {
        let (allowed, reason) = match self {
            Verdict::Allow(reason) => (true, reason.as_str()),
            Verdict::Deny(reason) => (false, reason.as_str()),
        };
        let out = |stdout: String| Answer { stdout, stderr: String::new(), exit: 0 };
        match protocol {
            Protocol::ClaudeCode => out(self.claude_code()),
            Protocol::Codex if allowed => out(String::new()),
            Protocol::Codex => Answer { stdout: String::new(), stderr: reason.to_owned(), exit: 2 },
            Protocol::Gemini if allowed => out(json!({"decision": "allow"}).to_string()),
            Protocol::Gemini => out(json!({"decision": "deny", "reason": reason}).to_string()),
            Protocol::Cursor => out(json!({
                "permission": if allowed { "allow" } else { "deny" },
                "user_message": reason,
                "agent_message": reason,
            })
            .to_string()),
        }
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

    fn proto(protocol: Protocol, event: Value) -> (ToolCall, warden_sdk::proto::AuthorizeRequest) {
        let call = parse(protocol, &event.to_string()).unwrap();
        let request = call.request.clone().into_proto_request();
        (call, request)
    }

    #[test]
    fn codex_events_and_answers() {
        // Codex's shell tool with a script, and with argv.
        let script = json!({"session_id": "c1", "turn_id": "t1", "cwd": "/w", "hook_event_name": "PreToolUse",
            "tool_name": "Bash", "tool_input": {"command": "cat .env"}, "tool_use_id": "x"});
        let (call, request) = proto(Protocol::Codex, script);
        assert_eq!((call.session.as_str(), request.action.as_str()), ("c1", "exec"));
        assert!(
            matches!(request.resource, Some(Resource::Command(c)) if c.argv == ["bash", "-c", "cat .env"] && c.cwd == "/w")
        );
        let argv = json!({"session_id": "c1", "turn_id": "t1", "cwd": "/w", "hook_event_name": "PreToolUse",
            "tool_name": "shell", "tool_input": {"command": ["ls", "-la"]}});
        let (_, request) = proto(Protocol::Codex, argv);
        assert!(matches!(request.resource, Some(Resource::Command(c)) if c.argv == ["ls", "-la"]));
        let denied = Verdict::Deny("no".into()).answer(Protocol::Codex);
        assert_eq!((denied.exit, denied.stderr.as_str(), denied.stdout.as_str()), (2, "no", ""));
        assert_eq!(Verdict::Allow("ok".into()).answer(Protocol::Codex).exit, 0);
    }

    #[test]
    fn gemini_events_and_answers() {
        let base = |tool: &str, input: Value| {
            json!({"session_id": "g1", "transcript_path": "/t", "cwd": "/w",
            "hook_event_name": "BeforeTool", "timestamp": "2026-12-01T00:00:00Z", "tool_name": tool, "tool_input": input})
        };
        let (call, request) =
            proto(Protocol::Gemini, base("run_shell_command", json!({"command": "ls", "dir_path": "src"})));
        assert_eq!((call.session.as_str(), call.tool.as_str()), ("g1", "run_shell_command"));
        assert!(
            matches!(request.resource, Some(Resource::Command(c)) if c.argv == ["bash", "-c", "ls"] && c.cwd == "/w/src")
        );
        let (_, request) = proto(Protocol::Gemini, base("read_file", json!({"file_path": "/w/.env"})));
        assert_eq!(request.action, "fs.read");
        let (_, request) = proto(Protocol::Gemini, base("write_file", json!({"file_path": "a.txt", "content": "x"})));
        assert!(
            request.action == "fs.write"
                && matches!(request.resource, Some(Resource::File(f)) if f.path == "a.txt" && f.cwd == "/w")
        );
        let (_, request) =
            proto(Protocol::Gemini, base("web_fetch", json!({"prompt": "summarize https://x.dev/post, please"})));
        assert!(matches!(request.resource, Some(Resource::Http(h)) if h.url == "https://x.dev/post"));
        let (_, request) = proto(Protocol::Gemini, base("mcp__github__create_issue", json!({"title": "t"})));
        assert!(
            matches!(request.resource, Some(Resource::Tool(t)) if t.server == "github" && t.name == "create_issue")
        );
        assert!(parse(Protocol::Gemini, &json!({"hook_event_name": "AfterTool"}).to_string()).is_err());
        let deny: Value = serde_json::from_str(&Verdict::Deny("no".into()).answer(Protocol::Gemini).stdout).unwrap();
        assert_eq!(deny, json!({"decision": "deny", "reason": "no"}));
    }

    #[test]
    fn cursor_events_and_answers() {
        let common = json!({"conversation_id": "k1", "generation_id": "g", "workspace_roots": ["/w"]});
        let with = |extra: Value| {
            let mut event = common.clone();
            event.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            event
        };
        let (call, request) = proto(
            Protocol::Cursor,
            with(json!({"hook_event_name": "beforeShellExecution", "command": "rm -rf /", "cwd": "/w/sub"})),
        );
        assert_eq!(call.session, "k1");
        assert!(
            matches!(request.resource, Some(Resource::Command(c)) if c.argv == ["bash", "-c", "rm -rf /"] && c.cwd == "/w/sub")
        );
        let (_, request) = proto(
            Protocol::Cursor,
            with(json!({"hook_event_name": "beforeReadFile", "file_path": "/w/secrets.env", "content": "X"})),
        );
        assert!(
            request.action == "fs.read"
                && matches!(request.resource, Some(Resource::File(f)) if f.path == "/w/secrets.env")
        );
        let (_, request) = proto(
            Protocol::Cursor,
            with(json!({"hook_event_name": "beforeMCPExecution", "tool_name": "query", "tool_input": "{\"q\": 1}"})),
        );
        assert!(
            matches!(request.resource, Some(Resource::Tool(t)) if t.server == "cursor" && t.name == "query" && t.arguments_json == "{\"q\": 1}")
        );
        let deny: Value = serde_json::from_str(&Verdict::Deny("no".into()).answer(Protocol::Cursor).stdout).unwrap();
        assert_eq!(deny["permission"], "deny");
        assert_eq!(deny["agent_message"], "no");
    }
}
