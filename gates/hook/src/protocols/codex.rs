//! Codex CLI's `PreToolUse` hook (checked with 0.171.0): Claude Code's
//! event shape, with Codex's own tools: its shell tool (a script, or argv),
//! `apply_patch` (the tool, or run through the shell: the writes it makes),
//! `view_image` (a read), MCP tools (`mcp__SERVER__TOOL`); any other is a
//! `tool.call` on server `codex`.

use serde_json::Value;
use warden_sdk::ActionRequest;

use super::ClaudeEvent;
use crate::patch;
use crate::touch::{Access, Touch};
use crate::{HookError, ToolCall};

/// Reads one Codex event.
pub(crate) fn parse(text: &str) -> Result<ToolCall, HookError> {
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
    // Showing the model an image reads the file.
    if event.tool_name == "view_image"
        && let Some(path) = event.input("path")
    {
        return Ok(ToolCall {
            touches: vec![Touch::File { access: Access::Read, path: path.to_owned() }],
            session: event.session_id.clone(),
            tool: event.tool_name.clone(),
            cwd: event.cwd.clone(),
            justification: "Codex's view_image".into(),
        });
    }
    // An edit: the `apply_patch` tool, or apply_patch run through the
    // shell tool, which Codex carries out itself.
    let edit = match event.tool_name.as_str() {
        "apply_patch" => Some(patch::of_patch(event.input("command").unwrap_or_default())),
        "Bash" => event.input("command").and_then(patch::changes),
        _ => None,
    };
    if let Some(changes) = edit {
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

#[cfg(test)]
mod tests {
    use serde_json::json;
    use warden_sdk::proto::authorize_request::Resource;

    use crate::Verdict;
    use crate::protocols::Protocol;
    use crate::protocols::support::*;

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
        // The apply_patch tool, and apply_patch through the shell: the writes.
        let patch = "*** Begin Patch\n*** Update File: .npmrc\n@@\n-a\n+b\n*** Delete File: old.txt\n*** End Patch\n";
        for (tool, command) in
            [("apply_patch", patch.to_owned()), ("Bash", format!("apply_patch <<'EOF'\n{patch}EOF\n"))]
        {
            let event = json!({"session_id": "c1", "cwd": "/w", "hook_event_name": "PreToolUse", "tool_name": tool,
                "tool_input": {"command": command}});
            let asked = questions(Protocol::Codex, event);
            assert!(
                matches!(&asked[..], [(write, Resource::File(a)), (delete, Resource::File(b))]
                    if write == "fs.write" && a.path == ".npmrc" && a.cwd == "/w" && delete == "fs.delete" && b.path == "old.txt"),
                "{tool}: {asked:?}"
            );
        }
        let image = json!({"session_id": "c1", "cwd": "/w", "hook_event_name": "PreToolUse", "tool_name": "view_image",
            "tool_input": {"path": "shot.png"}});
        let (_, request) = proto(Protocol::Codex, image);
        assert_eq!(request.action, "fs.read");
        let denied = Verdict::Deny("no".into()).answer(Protocol::Codex);
        assert_eq!((denied.exit, denied.stderr.as_str(), denied.stdout.as_str()), (2, "no", ""));
        assert_eq!(Verdict::Allow("ok".into()).answer(Protocol::Codex).exit, 0);
    }
}
