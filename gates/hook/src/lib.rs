//! `warden-hook`'s core, pure: a coding agent's pre-tool event becomes the
//! action Warden is asked about, and Warden's answer (or the reason there is
//! none) becomes the agent's hook answer. The binary (`main.rs`) does the
//! I/O: stdin, the SDK call, stdout.
//!
//! Each agent's protocol is a module of [`protocols`]; here are what they
//! share: the [`ToolCall`], the [`Verdict`] and its [`Answer`] in each
//! protocol's terms. Claude Code's protocol (PreToolUse hooks): the event is one JSON object on
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
pub mod protocols;
pub mod touch;
pub mod urls;

pub use protocols::{ClaudeEvent, MAX_PATHS, Protocol, parse};
use serde_json::json;
use touch::Touch;

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
        self.answer_for(protocol, None)
    }

    /// The verdict in `protocol`'s terms, for a call of `tool` (Cline
    /// refuses each tool its own way).
    pub fn answer_for(&self, protocol: Protocol, tool: Option<&str>) -> Answer {
        let (allowed, reason) = match self {
            Verdict::Allow(reason) => (true, reason.as_str()),
            Verdict::Deny(reason) => (false, reason.as_str()),
        };
        let out = |stdout: String| Answer { stdout, stderr: String::new(), exit: 0 };
        match protocol {
            Protocol::ClaudeCode => out(self.claude_code()),
            Protocol::Codex if allowed => out(String::new()),
            Protocol::Codex => Answer { stdout: String::new(), stderr: reason.to_owned(), exit: 2 },
            Protocol::Gemini | Protocol::OpenCode if allowed => out(json!({"decision": "allow"}).to_string()),
            Protocol::Gemini | Protocol::OpenCode => out(json!({"decision": "deny", "reason": reason}).to_string()),
            Protocol::Cursor => out(json!({
                "permission": if allowed { "allow" } else { "deny" },
                "user_message": reason,
                "agent_message": reason,
            })
            .to_string()),
            Protocol::Cline => out(protocols::cline::answer(tool, (!allowed).then_some(reason))),
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
    use serde_json::Value;

    use super::*;

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
