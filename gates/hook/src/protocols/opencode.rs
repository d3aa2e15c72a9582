//! OpenCode (checked with 1.18.33) has no command hooks, only in-process
//! plugins: `warden-hook install opencode` writes one whose
//! `tool.execute.before` runs `warden-hook opencode` with `{"tool",
//! "sessionID", "callID", "args", "cwd"}` on stdin (`args`: the model's
//! arguments as sent, relative paths relative to `cwd`, the project's
//! folder) and throws, which stops the tool and tells the model why,
//! unless the answer is `{"decision": "allow"}`.
//!
//! Its tools: `bash` (`command`, `workdir`), `read` (`filePath`), `write`
//! and `edit` (`filePath`), `apply_patch` (`patchText`, for GPT models),
//! `glob` (`pattern` in `path`), `grep` (`include` below `path`),
//! `webfetch` (`url`); any other (`todowrite`, `task`, `skill`, the MCP
//! resource tools, and MCP servers' tools, which OpenCode names
//! `SERVER_TOOL` without saying where the server's name ends) is a
//! `tool.call` on server `opencode`.

use serde_json::json;
use warden_sdk::ActionRequest;

use super::{object, text_field};
use crate::touch::{self, Access, Touch, join};
use crate::{HookError, ToolCall, patch};

/// Reads one event the plugin sends.
pub(crate) fn parse(text: &str) -> Result<ToolCall, HookError> {
    let value = object(text)?;
    let tool = text_field(&value, &["tool"]).ok_or_else(|| HookError::Event("`tool` is missing".into()))?;
    let session =
        text_field(&value, &["sessionID"]).ok_or_else(|| HookError::Event("`sessionID` is missing".into()))?;
    let cwd = text_field(&value, &["cwd"]).unwrap_or_default().to_owned();
    let args = value.get("args").cloned().unwrap_or_else(|| json!({}));
    let missing = |what: &str| HookError::Event(format!("`{tool}` without `args.{what}`"));
    let field = |name: &str| text_field(&args, &[name]).ok_or_else(|| missing(name));
    let folder = || text_field(&args, &["path"]).map_or_else(|| cwd.clone(), |p| join(&cwd, p));
    let touches = match tool {
        "bash" => {
            let dir = text_field(&args, &["workdir"]).map_or_else(|| cwd.clone(), |d| join(&cwd, d));
            vec![Touch::Request(ActionRequest::exec(["bash", "-c", field("command")?]).cwd(dir))]
        }
        "read" => vec![Touch::File { access: Access::Read, path: field("filePath")?.to_owned() }],
        "write" | "edit" => vec![Touch::File { access: Access::Write, path: field("filePath")?.to_owned() }],
        "apply_patch" => patch::touches(patch::of_patch(field("patchText")?).map_err(HookError::Refused)?),
        "glob" => vec![Touch::Pattern(join(&folder(), field("pattern")?))],
        "grep" => vec![Touch::Search { root: folder(), names: touch::rg_globs(text_field(&args, &["include"])) }],
        "webfetch" => vec![Touch::Url(field("url")?.to_owned())],
        name => vec![Touch::Request(ActionRequest::call_tool("opencode", name, args.to_string()))],
    };
    Ok(ToolCall {
        session: session.to_owned(),
        tool: tool.to_owned(),
        cwd,
        touches,
        justification: format!("OpenCode's {tool} tool"),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};
    use warden_sdk::proto::authorize_request::Resource;

    use super::*;
    use crate::protocols::Protocol;
    use crate::protocols::support::*;

    fn event(tool: &str, args: Value) -> Value {
        json!({"tool": tool, "sessionID": "ses_1", "callID": "call_1", "args": args, "cwd": "/w"})
    }

    #[test]
    fn opencode_s_tools_are_asked_as_what_they_touch() {
        let (call, request) =
            proto(Protocol::OpenCode, event("bash", json!({"command": "ls", "workdir": "sub", "timeout": 1})));
        assert_eq!(call.session, "ses_1");
        assert!(
            matches!(request.resource, Some(Resource::Command(c)) if c.argv == ["bash", "-c", "ls"] && c.cwd == "/w/sub")
        );
        let (_, request) = proto(Protocol::OpenCode, event("read", json!({"filePath": "a.txt", "offset": 2})));
        assert!(
            request.action == "fs.read"
                && matches!(request.resource, Some(Resource::File(f)) if f.path == "a.txt" && f.cwd == "/w")
        );
        let (_, request) = proto(
            Protocol::OpenCode,
            event("edit", json!({"filePath": "/w/.npmrc", "oldString": "a", "newString": "b"})),
        );
        assert_eq!(request.action, "fs.write");
        assert_eq!(
            patterns(Protocol::OpenCode, event("glob", json!({"pattern": "**/*.txt", "path": "/srv"}))),
            ["/srv/**/*.txt"]
        );
        assert_eq!(
            patterns(Protocol::OpenCode, event("grep", json!({"pattern": "x", "include": "*.rs"}))),
            ["/w/**/*.rs"]
        );
        let (_, request) =
            proto(Protocol::OpenCode, event("webfetch", json!({"url": "https://x.dev/", "format": "text"})));
        assert!(matches!(request.resource, Some(Resource::Http(h)) if h.method == "GET" && h.url == "https://x.dev/"));
        let (_, request) = proto(Protocol::OpenCode, event("everything_echo", json!({"message": "hi"})));
        assert!(
            matches!(request.resource, Some(Resource::Tool(t)) if t.server == "opencode" && t.name == "everything_echo")
        );
        assert!(parse(&event("write", json!({})).to_string()).is_err());
        assert!(parse(&json!({"tool": "bash"}).to_string()).is_err());
    }
}
