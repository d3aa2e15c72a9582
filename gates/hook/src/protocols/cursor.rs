//! Cursor's hooks (cursor.com/docs/agent/hooks), from its documentation
//! only: no Cursor CLI is on npm, so this protocol is not driven here.

use serde_json::Value;
use warden_sdk::ActionRequest;

use super::{event_name, object, text_field};
use crate::touch::{Access, Touch};
use crate::{HookError, ToolCall};

/// Cursor's three pre-tool events.
pub(crate) fn parse(text: &str) -> Result<ToolCall, HookError> {
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

#[cfg(test)]
mod tests {
    use serde_json::json;
    use warden_sdk::proto::authorize_request::Resource;

    use super::*;
    use crate::Verdict;
    use crate::protocols::Protocol;
    use crate::protocols::support::*;

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
