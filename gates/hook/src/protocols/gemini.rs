//! Gemini CLI's `BeforeTool` hook (geminicli.com/docs/hooks/reference;
//! checked with 0.61.0).

use serde_json::{Value, json};
use warden_sdk::ActionRequest;

use super::{MAX_PATHS, event_name, object, text_field};
use crate::touch::{self, Access, Touch, join};
use crate::{HookError, ToolCall, urls};

/// Gemini CLI's `BeforeTool`, its built-in tools by their names in
/// 0.61.0 (`packages/core/src/tools/definitions/base-declarations.ts`) and
/// earlier (`search_file_content`, `include`).
pub(crate) fn parse(text: &str) -> Result<ToolCall, HookError> {
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
        // An MCP server's tool (`mcp_SERVER_TOOL`): 0.61.0 names the server
        // and the tool apart in `mcp_context`.
        name => {
            let context = value.get("mcp_context");
            let named =
                |field: &str| context.and_then(|c| c.get(field)).and_then(Value::as_str).filter(|s| !s.is_empty());
            let request = match (named("server_name"), named("tool_name")) {
                (Some(server), Some(mcp_tool)) => ActionRequest::call_tool(server, mcp_tool, input.to_string()),
                _ => match name.strip_prefix("mcp__").and_then(|rest| rest.split_once("__")) {
                    Some((server, mcp_tool)) if !server.is_empty() && !mcp_tool.is_empty() => {
                        ActionRequest::call_tool(server, mcp_tool, input.to_string())
                    }
                    _ => ActionRequest::call_tool("gemini-cli", name, input.to_string()),
                },
            };
            vec![Touch::Request(request)]
        }
    };
    Ok(ToolCall {
        session: session.to_owned(),
        tool: tool.to_owned(),
        cwd: cwd.to_owned(),
        touches,
        justification: format!("Gemini CLI's {tool} tool"),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use warden_sdk::proto::authorize_request::Resource;

    use super::*;
    use crate::Verdict;
    use crate::protocols::support::*;
    use crate::protocols::{Protocol, parse};

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
        let mut mcp = base("mcp_everything_get-sum", json!({"a": 1}));
        mcp["mcp_context"] = json!({"server_name": "everything", "tool_name": "get-sum", "command": "x"});
        let (_, request) = proto(Protocol::Gemini, mcp);
        assert!(matches!(request.resource, Some(Resource::Tool(t)) if t.server == "everything" && t.name == "get-sum"));
        assert!(parse(Protocol::Gemini, &json!({"hook_event_name": "AfterTool"}).to_string()).is_err());
        let deny: Value = serde_json::from_str(&Verdict::Deny("no".into()).answer(Protocol::Gemini).stdout).unwrap();
        assert_eq!(deny, json!({"decision": "deny", "reason": "no"}));
    }
}
