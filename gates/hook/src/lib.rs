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

pub mod decide;
pub mod install;
pub mod links;
pub mod patch;
pub mod plan;
pub mod touch;
pub mod urls;

use serde_json::{Value, json};
use touch::{Access, Touch, join};
use warden_sdk::ActionRequest;

/// The largest event read from stdin.
pub const MAX_EVENT_BYTES: usize = 1024 * 1024;

/// Why an event cannot be asked about.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HookError {
    /// Not the JSON the agent sends.
    #[error("the hook event is not valid: {0}")]
    Event(String),
    /// A call Warden's hook will not ask about (too many paths or URLs, a
    /// path whose links do not end).
    #[error("{0}")]
    Refused(String),
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

    fn call(self, justification: String) -> Result<ToolCall, HookError> {
        let touches = vec![self.touch()?];
        Ok(ToolCall { session: self.session_id, tool: self.tool_name, cwd: self.cwd, touches, justification })
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
    /// Where the agent runs: relative paths are in it.
    pub cwd: String,
    /// What the tool touches, in the order asked; every one must be
    /// allowed.
    pub touches: Vec<Touch>,
    /// Why, as approvers read it (`Claude Code's Read tool`).
    pub justification: String,
}

/// Reads one event of `protocol`.
pub fn parse(protocol: Protocol, text: &str) -> Result<ToolCall, HookError> {
    match protocol {
        Protocol::ClaudeCode => {
            let event = ClaudeEvent::parse(text)?;
            let justification = format!("Claude Code's {} tool", event.tool_name);
            event.call(justification)
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
                return Ok(ToolCall {
                    touches: vec![Touch::Request(ActionRequest::exec(argv).cwd(&event.cwd))],
                    session: event.session_id,
                    tool: event.tool_name,
                    cwd: event.cwd,
                    justification: "Codex's shell tool".into(),
                });
            }
            if matches!(event.tool_name.as_str(), "shell" | "local_shell" | "exec_command") {
                event.tool_name = "Bash".into();
            }
            // An edit: `apply_patch` run through the shell tool, which Codex
            // carries out itself.
            if event.tool_name == "Bash"
                && let Some(changes) = event.input("command").and_then(patch::changes)
            {
                let changes = changes.map_err(HookError::Refused)?;
                return Ok(ToolCall {
                    touches: patch::touches(changes),
                    session: event.session_id,
                    tool: "apply_patch".into(),
                    cwd: event.cwd,
                    justification: "Codex's apply_patch".into(),
                });
            }
            let justification = format!("Codex's {} tool", event.tool_name);
            event.call(justification)
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

/// The most paths one `read_many_files` call may name.
pub const MAX_PATHS: usize = 20;

/// Gemini CLI's `BeforeTool`, its built-in tools by their names in
/// 0.61.0 (`packages/core/src/tools/definitions/base-declarations.ts`) and
/// earlier (`search_file_content`, `include`).
fn gemini(text: &str) -> Result<ToolCall, HookError> {
    let value = object(text)?;
    event_name(&value, &["BeforeTool"])?;
    let session =
        text_field(&value, &["session_id"]).ok_or_else(|| HookError::Event("`session_id` is missing".into()))?;
    let cwd = text_field(&value, &["cwd"]).ok_or_else(|| HookError::Event("`cwd` is missing".into()))?;
    let tool = text_field(&value, &["tool_name"]).ok_or_else(|| HookError::Event("`tool_name` is missing".into()))?;
    let input = value.get("tool_input").cloned().unwrap_or_else(|| json!({}));
    let missing = |what: &str| HookError::Event(format!("`{tool}` without `tool_input.{what}`"));
    let folder = || text_field(&input, &["dir_path", "path", "directory"]).unwrap_or(cwd).to_owned();
    let touches = match tool {
        "run_shell_command" => {
            let command = text_field(&input, &["command"]).ok_or_else(|| missing("command"))?;
            let dir = text_field(&input, &["dir_path", "directory"]).map_or_else(|| cwd.to_owned(), |d| join(cwd, d));
            vec![Touch::Request(ActionRequest::exec(["bash", "-c", command]).cwd(dir))]
        }
        "read_file" => {
            let path =
                text_field(&input, &["file_path", "absolute_path", "path"]).ok_or_else(|| missing("file_path"))?;
            vec![Touch::File { access: Access::Read, path: path.to_owned() }]
        }
        // A listing reads the folder's names.
        "list_directory" => vec![Touch::File { access: Access::Read, path: folder() }],
        // Its `include_pattern` is a glob at any depth below the folder
        // (ripgrep's `--glob`, `git grep`'s pathspec, grep's `--include`).
        "grep_search" | "search_file_content" | "grep" => {
            let include = text_field(&input, &["include_pattern", "include"]);
            vec![Touch::Search { root: folder(), names: touch::rg_globs(include) }]
        }
        // The `glob` package in the folder: the pattern as written.
        "glob" => {
            let pattern = text_field(&input, &["pattern"]).ok_or_else(|| missing("pattern"))?;
            vec![Touch::Pattern(join(&folder(), pattern))]
        }
        // Paths or patterns in the working folder; a folder is everything
        // below it.
        "read_many_files" => {
            let entries = ["include", "paths"]
                .iter()
                .find_map(|name| input.get(*name).and_then(Value::as_array))
                .ok_or_else(|| missing("include"))?;
            if entries.len() > MAX_PATHS {
                return Err(HookError::Refused(format!(
                    "`{tool}` names {} paths, more than the {MAX_PATHS} Warden's hook asks about",
                    entries.len()
                )));
            }
            let mut touches = Vec::with_capacity(entries.len());
            for entry in entries {
                let entry = entry.as_str().filter(|e| !e.is_empty()).ok_or_else(|| missing("include"))?;
                touches.push(if touch::is_pattern(entry) {
                    Touch::Pattern(entry.to_owned())
                } else {
                    Touch::Search { root: entry.to_owned(), names: vec!["**/*".to_owned()] }
                });
            }
            if touches.is_empty() {
                return Err(missing("include"));
            }
            touches
        }
        "write_file" | "replace" | "edit" => {
            let path =
                text_field(&input, &["file_path", "absolute_path", "path"]).ok_or_else(|| missing("file_path"))?;
            vec![Touch::File { access: Access::Write, path: path.to_owned() }]
        }
        // Every URL of the prompt is fetched (and the experimental direct
        // `url`): each is asked about.
        "web_fetch" => {
            let (prompt, direct) = (text_field(&input, &["prompt"]), text_field(&input, &["url"]));
            if prompt.is_none() && direct.is_none() {
                return Err(missing("prompt"));
            }
            let mut found: Vec<String> = direct.map(str::to_owned).into_iter().collect();
            for url in urls::urls_in(prompt.unwrap_or_default()) {
                if !found.contains(&url) {
                    found.push(url);
                }
            }
            if found.len() > urls::MAX_URLS {
                return Err(HookError::Refused(format!(
                    "`{tool}`'s prompt names {} URLs, more than the {} Gemini CLI fetches and Warden's hook asks about",
                    found.len(),
                    urls::MAX_URLS
                )));
            }
            if found.is_empty() {
                vec![Touch::Request(ActionRequest::call_tool("gemini-cli", tool, input.to_string()))]
            } else {
                found.into_iter().map(Touch::Url).collect()
            }
        }
        name => vec![Touch::Request(match name.strip_prefix("mcp__").and_then(|rest| rest.split_once("__")) {
            Some((server, mcp_tool)) if !server.is_empty() && !mcp_tool.is_empty() => {
                ActionRequest::call_tool(server, mcp_tool, input.to_string())
            }
            _ => ActionRequest::call_tool("gemini-cli", name, input.to_string()),
        })],
    };
    Ok(ToolCall {
        session: session.to_owned(),
        tool: tool.to_owned(),
        cwd: cwd.to_owned(),
        touches,
        justification: format!("Gemini CLI's {tool} tool"),
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
    let (tool, touch) = match event.as_str() {
        "beforeShellExecution" => {
            let command = text_field(&value, &["command"]).ok_or_else(|| missing("command"))?;
            ("shell".to_owned(), Touch::Request(ActionRequest::exec(["bash", "-c", command]).cwd(&cwd)))
        }
        "beforeReadFile" => {
            let path = text_field(&value, &["file_path"]).ok_or_else(|| missing("file_path"))?;
            ("read".to_owned(), Touch::File { access: Access::Read, path: path.to_owned() })
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
            (name.to_owned(), Touch::Request(ActionRequest::call_tool("cursor", name, arguments)))
        }
    };
    Ok(ToolCall {
        session: session.to_owned(),
        justification: format!("Cursor's {tool}"),
        tool,
        cwd,
        touches: vec![touch],
    })
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

    /// Every question one call is asked as: action, resource.
    fn questions(protocol: Protocol, event: Value) -> Vec<(String, Resource)> {
        let call = parse(protocol, &event.to_string()).unwrap();
        call.asks()
            .unwrap()
            .into_iter()
            .map(|ask| {
                let request = ask.request.into_proto_request();
                (request.action, request.resource.unwrap())
            })
            .collect()
    }

    fn asked(tool: &str, input: Value) -> (String, Resource) {
        let event = json!({"session_id": "abc", "cwd": "/home/alice/project", "hook_event_name": "PreToolUse",
            "tool_name": tool, "tool_input": input});
        let mut asked = questions(Protocol::ClaudeCode, event);
        assert_eq!(asked.len(), 1, "{asked:?}");
        asked.remove(0)
    }

    /// The patterns a call reads.
    fn patterns(protocol: Protocol, event: Value) -> Vec<String> {
        questions(protocol, event)
            .into_iter()
            .map(|(action, resource)| match resource {
                Resource::File(f) if action == "fs.read" && f.pattern => f.path,
                other => panic!("{action} {other:?}"),
            })
            .collect()
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
    fn gemini_s_searches_read_every_file_they_can_match() {
        let gemini = |tool: &str, input: Value| {
            json!({"session_id": "g1", "cwd": "/w", "hook_event_name": "BeforeTool", "tool_name": tool,
                "tool_input": input})
        };
        let p = |tool: &str, input: Value| patterns(Protocol::Gemini, gemini(tool, input));
        assert_eq!(p("grep_search", json!({"pattern": "x"})), ["/w/**/*"]);
        assert_eq!(
            p("grep_search", json!({"pattern": "x", "include_pattern": "*.ts", "dir_path": "src"})),
            ["/w/src/**/*.ts"]
        );
        assert_eq!(p("search_file_content", json!({"pattern": "x", "include": ".env"})), ["/w/**/.env"]);
        // The glob package: the pattern in the folder, as written.
        assert_eq!(p("glob", json!({"pattern": "*.rs", "dir_path": "/srv"})), ["/srv/*.rs"]);
        assert_eq!(p("glob", json!({"pattern": "**/{.env,*.key}"})), ["/w/**/.env", "/w/**/*.key"]);
        assert_eq!(p("read_many_files", json!({"include": ["docs/*.md", "/etc/x*"]})), ["/w/docs/*.md", "/etc/x*"]);
        // A named file is read as itself; a folder is everything below it.
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("docs")).unwrap();
        std::fs::write(dir.path().join("README.md"), "x").unwrap();
        let mut event = gemini("read_many_files", json!({"include": ["README.md", "docs"]}));
        event["cwd"] = json!(dir.path());
        let asked = questions(Protocol::Gemini, event);
        let (readme, docs) = (dir.path().join("README.md"), dir.path().join("docs/**/*"));
        assert!(
            matches!(&asked[..], [(_, Resource::File(a)), (_, Resource::File(b))]
                if !a.pattern && a.path == readme.to_str().unwrap() && b.pattern && b.path == docs.to_str().unwrap()),
            "{asked:?}"
        );
        let many: Vec<String> = (0..=MAX_PATHS).map(|i| format!("f{i}")).collect();
        let call = parse(Protocol::Gemini, &gemini("read_many_files", json!({"include": many})).to_string());
        assert!(matches!(call, Err(HookError::Refused(_))), "{call:?}");
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
        let mut asks = call.asks().unwrap();
        assert_eq!(asks.len(), 1, "{asks:?}");
        let request = asks.remove(0).request.into_proto_request();
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
        // The URL as Gemini CLI 0.61.0 reads it: the whole piece.
        assert!(matches!(request.resource, Some(Resource::Http(h)) if h.url == "https://x.dev/post,"));
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
