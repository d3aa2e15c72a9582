//! The agents' hook protocols, pure: each agent's pre-tool event becomes a
//! [`ToolCall`] of what its tool touches. A module per agent.

use serde_json::Value;

use crate::{HookError, ToolCall};

pub mod claude;
pub mod cline;
pub mod codex;
pub mod cursor;
pub mod gemini;
pub mod opencode;
#[cfg(test)]
pub(crate) mod support;

pub use claude::ClaudeEvent;

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
    /// Cline's `PreToolUse` hook file ([`cline`]).
    Cline,
    /// OpenCode, through the plugin `warden-hook install opencode` writes
    /// ([`opencode`]).
    OpenCode,
}

impl Protocol {
    /// The agent kind a request names unless `WARDEN_AGENT` says otherwise.
    pub fn default_agent(self) -> &'static str {
        match self {
            Protocol::ClaudeCode => "claude-code",
            Protocol::Codex => "codex",
            Protocol::Gemini => "gemini-cli",
            Protocol::Cursor => "cursor",
            Protocol::Cline => "cline",
            Protocol::OpenCode => "opencode",
        }
    }
}

/// Reads one event of `protocol`.
pub fn parse(protocol: Protocol, text: &str) -> Result<ToolCall, HookError> {
    match protocol {
        Protocol::ClaudeCode => {
            let event = ClaudeEvent::parse(text)?;
            let justification = format!("Claude Code's {} tool", event.tool_name);
            event.call(justification)
        }
        Protocol::Codex => codex::parse(text),
        Protocol::Gemini => gemini::parse(text),
        Protocol::Cursor => cursor::parse(text),
        Protocol::Cline => cline::parse(text),
        Protocol::OpenCode => opencode::parse(text),
    }
}

pub(crate) fn object(text: &str) -> Result<Value, HookError> {
    let value: Value = serde_json::from_str(text).map_err(|e| HookError::Event(e.to_string()))?;
    if value.is_object() { Ok(value) } else { Err(HookError::Event("not a JSON object".into())) }
}

pub(crate) fn text_field<'v>(value: &'v Value, names: &[&str]) -> Option<&'v str> {
    names.iter().find_map(|name| value.get(*name).and_then(Value::as_str).filter(|s| !s.is_empty()))
}

pub(crate) fn event_name(value: &Value, allowed: &[&str]) -> Result<String, HookError> {
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
