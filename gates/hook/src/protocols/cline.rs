//! Cline's `PreToolUse` hook (checked with the Cline CLI 3.0.65): a file
//! named `PreToolUse` in a hooks folder, run before each tool call with one
//! JSON object on stdin: `taskId`, `sessionContext.rootSessionId`,
//! `workspaceRoots`, and `tool_call: {id, name, input}` with the model's
//! input as it was sent (relative paths relative to the workspace).
//!
//! Its tools: `run_commands` (`commands`, each a script), `read_files`
//! (`files[].path`), `editor` (`path`: a write), `apply_patch` (`input`,
//! for GPT models), `search_codebase` (`queries`: every file of the
//! workspace is read), `fetch_web_content` (`requests[].url`), MCP tools
//! as `SERVER__TOOL`; any other (`ask_question`, `spawn_agent`, `team_*`)
//! is a `tool.call` on server `cline`.
//!
//! **Answers.** Cline's only true block, `{"cancel": true, "errorMessage":
//! …}`, ends the whole run (the model is never told why). A refusal that
//! lets the run go on replaces the tool's input (`overrideInput`) with one
//! that cannot do anything, and tells the model why (`contextModification`):
//! the shell tool runs a command that prints the reason and fails, and
//! `read_files` and `editor` get an input they refuse. Any other tool's
//! input goes on unchecked (an MCP server might accept it), so refusing it
//! ends the run. Cline lets a tool run when its hook exits non-zero, prints
//! what is not JSON, or takes longer than 120 s, so `warden-hook cline`
//! always answers in JSON, within `--max-wait`, which it keeps under 120 s.

use serde_json::{Value, json};
use warden_sdk::ActionRequest;

use super::{MAX_PATHS, object, text_field};
use crate::touch::{Access, Touch};
use crate::{HookError, ToolCall, patch};

/// Cline kills a hook after this long and lets the tool run.
pub const HOOK_TIMEOUT_SECONDS: u64 = 120;

/// Reads one Cline event.
pub(crate) fn parse(text: &str) -> Result<ToolCall, HookError> {
    let value = object(text)?;
    let call = value.get("tool_call").ok_or_else(|| HookError::Event("`tool_call` is missing".into()))?;
    let tool = text_field(call, &["name"]).ok_or_else(|| HookError::Event("`tool_call.name` is missing".into()))?;
    let input = call.get("input").cloned().unwrap_or_else(|| json!({}));
    let session = value
        .pointer("/sessionContext/rootSessionId")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .or_else(|| text_field(&value, &["taskId"]))
        .ok_or_else(|| HookError::Event("neither `sessionContext.rootSessionId` nor `taskId`".into()))?;
    let cwd = value
        .pointer("/workspaceRoots/0")
        .and_then(Value::as_str)
        .or_else(|| value.pointer("/workspaceInfo/rootPath").and_then(Value::as_str))
        .unwrap_or_default()
        .to_owned();
    let missing = |what: &str| HookError::Event(format!("`{tool}` without `input.{what}`"));
    // Each of a list (commands, files, URLs), at most MAX_PATHS.
    let list = |name: &str| -> Result<Vec<Value>, HookError> {
        let items = input.get(name).and_then(Value::as_array).ok_or_else(|| missing(name))?;
        if items.is_empty() {
            return Err(missing(name));
        }
        if items.len() > MAX_PATHS {
            return Err(HookError::Refused(format!(
                "`{tool}` names {} items, more than the {MAX_PATHS} Warden's hook asks about",
                items.len()
            )));
        }
        Ok(items.clone())
    };
    let touches = match tool {
        "run_commands" => list("commands")?
            .iter()
            .map(|command| {
                let command = command.as_str().filter(|c| !c.is_empty()).ok_or_else(|| missing("commands"))?;
                Ok(Touch::Request(ActionRequest::exec(["bash", "-c", command]).cwd(&cwd)))
            })
            .collect::<Result<_, HookError>>()?,
        "read_files" => list("files")?
            .iter()
            .map(|file| {
                let path = file.get("path").and_then(Value::as_str).filter(|p| !p.is_empty());
                Ok(Touch::File { access: Access::Read, path: path.ok_or_else(|| missing("files[].path"))?.to_owned() })
            })
            .collect::<Result<_, HookError>>()?,
        "editor" => {
            let path = text_field(&input, &["path"]).ok_or_else(|| missing("path"))?;
            vec![Touch::File { access: Access::Write, path: path.to_owned() }]
        }
        "apply_patch" => {
            let text = text_field(&input, &["input"]).ok_or_else(|| missing("input"))?;
            patch::touches(patch::of_patch(text).map_err(HookError::Refused)?)
        }
        // Regular expressions over the workspace's files: all of them read.
        "search_codebase" => vec![Touch::Search { root: cwd.clone(), names: vec!["**/*".into()] }],
        "fetch_web_content" => list("requests")?
            .iter()
            .map(|request| {
                let url = request.get("url").and_then(Value::as_str).filter(|u| !u.is_empty());
                Ok(Touch::Url(url.ok_or_else(|| missing("requests[].url"))?.to_owned()))
            })
            .collect::<Result<_, HookError>>()?,
        name => vec![Touch::Request(match name.split_once("__") {
            Some((server, mcp_tool)) if !server.is_empty() && !mcp_tool.is_empty() => {
                ActionRequest::call_tool(server, mcp_tool, input.to_string())
            }
            _ => ActionRequest::call_tool("cline", name, input.to_string()),
        })],
    };
    Ok(ToolCall {
        session: session.to_owned(),
        tool: tool.to_owned(),
        cwd,
        touches,
        justification: format!("Cline's {tool} tool"),
    })
}

/// Cline's answer: nothing to say for an allow; for a deny of `tool`, an
/// input that cannot act and the reason for the model, or, for a tool whose
/// input Cline does not check, the end of the run.
pub(crate) fn answer(tool: Option<&str>, deny: Option<&str>) -> String {
    let Some(reason) = deny else { return json!({}).to_string() };
    let told = format!("Warden refused this {} call: {reason}", tool.unwrap_or("tool"));
    match tool {
        Some("run_commands") => {
            let quoted = crate::install::shell_word(&told).into_owned();
            json!({"overrideInput": {"commands": [format!("printf '%s\\n' {quoted} >&2; exit 1")]}, "contextModification": told})
        }
        Some("read_files" | "editor") => json!({"overrideInput": {"denied": true}, "contextModification": told}),
        _ => json!({"cancel": true, "errorMessage": told}),
    }
    .to_string()
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use warden_sdk::proto::authorize_request::Resource;

    use super::*;
    use crate::protocols::Protocol;
    use crate::protocols::support::*;

    fn event(tool: &str, input: Value) -> Value {
        json!({"clineVersion": "", "taskId": "conv_1", "sessionContext": {"rootSessionId": "root-1"},
            "workspaceRoots": ["/w"], "hookName": "tool_call", "iteration": 1,
            "tool_call": {"id": "call_1", "name": tool, "input": input},
            "preToolUse": {"toolName": tool, "parameters": {}}})
    }

    #[test]
    fn cline_s_tools_are_asked_as_what_they_touch() {
        let asked = questions(Protocol::Cline, event("run_commands", json!({"commands": ["ls -la", "cat .env"]})));
        assert!(
            matches!(&asked[..], [(_, Resource::Command(a)), (_, Resource::Command(b))]
                if a.argv == ["bash", "-c", "ls -la"] && b.argv == ["bash", "-c", "cat .env"] && a.cwd == "/w"),
            "{asked:?}"
        );
        let asked = questions(
            Protocol::Cline,
            event("read_files", json!({"files": [{"path": "/w/a.txt"}, {"path": "b.txt", "start_line": 2}]})),
        );
        assert!(
            matches!(&asked[..], [(r1, Resource::File(a)), (_, Resource::File(b))] if r1 == "fs.read" && a.path == "/w/a.txt" && b.path == "b.txt" && b.cwd == "/w"),
            "{asked:?}"
        );
        let (call, request) = proto(Protocol::Cline, event("editor", json!({"path": ".npmrc", "new_text": "x"})));
        assert_eq!((call.session.as_str(), request.action.as_str()), ("root-1", "fs.write"));
        let (_, request) = proto(Protocol::Cline, event("everything__echo", json!({"message": "hi"})));
        assert!(matches!(request.resource, Some(Resource::Tool(t)) if t.server == "everything" && t.name == "echo"));
        let (_, request) = proto(Protocol::Cline, event("ask_question", json!({"question": "?"})));
        assert!(matches!(request.resource, Some(Resource::Tool(t)) if t.server == "cline" && t.name == "ask_question"));
        let (_, request) = proto(
            Protocol::Cline,
            event("fetch_web_content", json!({"requests": [{"url": "https://x.dev/a", "prompt": "p"}]})),
        );
        assert!(matches!(request.resource, Some(Resource::Http(h)) if h.url == "https://x.dev/a"));
        let patch = "*** Begin Patch\n*** Add File: /w/p.txt\n+x\n*** End Patch";
        let (_, request) = proto(Protocol::Cline, event("apply_patch", json!({"input": patch})));
        assert!(matches!(request.resource, Some(Resource::File(f)) if f.path == "/w/p.txt"));
        assert!(parse(&event("run_commands", json!({"commands": []})).to_string()).is_err());
        assert!(parse(&json!({"taskId": "t"}).to_string()).is_err());
    }

    #[test]
    fn a_refusal_keeps_the_run_where_cline_checks_the_input_and_ends_it_elsewhere() {
        let shell: Value = serde_json::from_str(&answer(Some("run_commands"), Some("no by p"))).unwrap();
        let command = shell["overrideInput"]["commands"][0].as_str().unwrap();
        let out = std::process::Command::new("bash").args(["-c", command]).output().unwrap();
        assert_eq!(out.status.code(), Some(1));
        assert_eq!(String::from_utf8_lossy(&out.stderr), "Warden refused this run_commands call: no by p\n");
        assert!(shell["contextModification"].as_str().unwrap().contains("no by p"));
        let editor: Value = serde_json::from_str(&answer(Some("editor"), Some("no"))).unwrap();
        assert_eq!(editor["overrideInput"], json!({"denied": true}));
        for other in [Some("everything__echo"), Some("apply_patch"), None] {
            let ended: Value = serde_json::from_str(&answer(other, Some("no"))).unwrap();
            assert_eq!(ended["cancel"], true, "{other:?}");
        }
        assert_eq!(answer(Some("editor"), None), "{}");
    }
}
