//! What the protocols' tests share: an event parsed, and what it asks.

use serde_json::{Value, json};
use warden_sdk::proto::authorize_request::Resource;

use super::{ClaudeEvent, Protocol, parse};
use crate::ToolCall;

pub(crate) fn event(tool: &str, input: Value) -> ClaudeEvent {
    let text = json!({
        "session_id": "abc", "transcript_path": "/t", "cwd": "/home/alice/project", "prompt_id": "p",
        "permission_mode": "default", "effort": "medium", "hook_event_name": "PreToolUse",
        "tool_name": tool, "tool_input": input, "tool_use_id": "toolu_1"
    });
    ClaudeEvent::parse(&text.to_string()).unwrap()
}

/// Every question one call is asked as: action, resource.
pub(crate) fn questions(protocol: Protocol, event: Value) -> Vec<(String, Resource)> {
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

pub(crate) fn asked(tool: &str, input: Value) -> (String, Resource) {
    let event = json!({"session_id": "abc", "cwd": "/home/alice/project", "hook_event_name": "PreToolUse",
        "tool_name": tool, "tool_input": input});
    let mut asked = questions(Protocol::ClaudeCode, event);
    assert_eq!(asked.len(), 1, "{asked:?}");
    asked.remove(0)
}

/// The patterns a call reads.
pub(crate) fn patterns(protocol: Protocol, event: Value) -> Vec<String> {
    questions(protocol, event)
        .into_iter()
        .map(|(action, resource)| match resource {
            Resource::File(f) if action == "fs.read" && f.pattern => f.path,
            other => panic!("{action} {other:?}"),
        })
        .collect()
}

pub(crate) fn proto(protocol: Protocol, event: Value) -> (ToolCall, warden_sdk::proto::AuthorizeRequest) {
    let call = parse(protocol, &event.to_string()).unwrap();
    let mut asks = call.asks().unwrap();
    assert_eq!(asks.len(), 1, "{asks:?}");
    let request = asks.remove(0).request.into_proto_request();
    (call, request)
}
