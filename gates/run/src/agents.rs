//! What a run adds for the coding agents it knows, for this run only and
//! without touching the user's own files: Claude Code gets its settings with
//! `warden-hook` as its pre-tool hook (which asks through the run's door),
//! and its MCP servers (the workspace's `.mcp.json`, the user's and the
//! project's in `~/.claude.json`) each behind `warden-mcp` in the box, and
//! no other (`--strict-mcp-config`). Any other command gets the box and the
//! proxy only.

use std::path::Path;

/// The agent kind and what goes into its command line and environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setup {
    /// The agent kind, as policies name it.
    pub agent: &'static str,
    /// Arguments put right after the program.
    pub args: Vec<String>,
    /// Variables for the box.
    pub env: Vec<(String, String)>,
}

/// Where Claude Code keeps its state inside the box: in the box's own
/// `/tmp`, since the home folder is read-only there and the user's own
/// settings are not the run's.
pub const CLAUDE_CONFIG_DIR: &str = "/tmp/warden-run-claude";

/// The MCP servers Claude Code would start in `workspace`: the
/// workspace's `.mcp.json`, then the user's and this project's in
/// `~/.claude.json` (a later one of a name wins), as `mcpServers` entries.
pub fn claude_mcp_servers(workspace: &Path, home: Option<&Path>) -> serde_json::Map<String, serde_json::Value> {
    let read =
        |path: &Path| -> Option<serde_json::Value> { serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok() };
    let mut servers = serde_json::Map::new();
    let mut add = |found: Option<&serde_json::Value>| {
        if let Some(found) = found.and_then(serde_json::Value::as_object) {
            servers.extend(found.iter().map(|(name, entry)| (name.clone(), entry.clone())));
        }
    };
    add(read(&workspace.join(".mcp.json")).as_ref().and_then(|v| v.get("mcpServers")));
    if let Some(user) = home.and_then(|home| read(&home.join(".claude.json"))) {
        add(user.get("mcpServers"));
        let project = workspace.to_string_lossy();
        add(user.get("projects").and_then(|p| p.get(project.as_ref())).and_then(|p| p.get("mcpServers")));
    }
    servers
}

/// `servers` each behind `warden-mcp` (`gateway`), for `--mcp-config`; the
/// names of those left out (not stdio: the gateway fronts a command) with
/// why.
pub fn behind_gateway(
    servers: &serde_json::Map<String, serde_json::Value>,
    gateway: &Path,
) -> (serde_json::Value, Vec<String>) {
    let mut wrapped = serde_json::Map::new();
    let mut left_out = Vec::new();
    for (name, entry) in servers {
        let stdio = entry.get("type").and_then(serde_json::Value::as_str).is_none_or(|t| t == "stdio");
        let Some(command) = entry.get("command").and_then(serde_json::Value::as_str).filter(|_| stdio) else {
            left_out.push(format!("`{name}` (not a command: warden-mcp fronts stdio servers here)"));
            continue;
        };
        let mut args = vec!["--name".to_owned(), name.clone(), "--".to_owned(), command.to_owned()];
        if let Some(more) = entry.get("args").and_then(serde_json::Value::as_array) {
            args.extend(more.iter().filter_map(|a| a.as_str().map(str::to_owned)));
        }
        let mut server = serde_json::Map::new();
        server.insert("type".into(), "stdio".into());
        server.insert("command".into(), gateway.to_string_lossy().into_owned().into());
        server.insert("args".into(), args.into());
        if let Some(env) = entry.get("env") {
            server.insert("env".into(), env.clone());
        }
        wrapped.insert(name.clone(), server.into());
    }
    (serde_json::json!({"mcpServers": wrapped}), left_out)
}

/// Claude Code's hook matcher (a regular expression over tool names) for
/// every tool but MCP servers' (`mcp__SERVER__TOOL`).
pub const NOT_MCP: &str = "^(?!mcp__).*";

/// The setup for `command`, when its program is an agent this knows;
/// `hook`: `warden-hook`'s path; `outer`: warden-run's environment.
pub fn setup(command: &[String], hook: &Path, outer: &[(String, String)]) -> Option<Setup> {
    let program = Path::new(command.first()?).file_name()?.to_str()?;
    match program {
        "claude" => {
            // The hook blocks the tool when it cannot run at all. It is not
            // asked about MCP tools: the run's only MCP servers are behind
            // warden-mcp (--strict-mcp-config), which asks about each call
            // (asked twice, a call waiting for a person would be two
            // approvals).
            // WebFetch's own preflight (sending each domain to Anthropic) is
            // skipped: what may be fetched is Warden's to decide, on the
            // hook and again at the proxy.
            let settings = serde_json::json!({"skipWebFetchPreflight": true, "hooks": {"PreToolUse": [{"matcher": NOT_MCP, "hooks": [{
                "type": "command",
                "command": format!("'{}' claude-code", hook.display().to_string().replace('\'', r"'\''")),
                // The hook's default --max-wait (900 s) and 30 s more, as
                // `warden-hook install` writes it.
                "timeout": 930,
                "onFailure": "block",
            }]}]}});
            let mut env = vec![
                ("CLAUDE_CONFIG_DIR".to_owned(), CLAUDE_CONFIG_DIR.to_owned()),
                // Its telemetry and update checks would only be refused.
                ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".to_owned(), "1".to_owned()),
            ];
            // A model gateway the user points Claude Code at, through the proxy too.
            env.extend(outer.iter().filter(|(name, _)| name == "ANTHROPIC_BASE_URL").cloned());
            Some(Setup { agent: "claude-code", args: vec!["--settings".into(), settings.to_string()], env })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mcp_servers_are_found_and_put_behind_the_gateway() {
        let root = tempfile::tempdir().unwrap();
        let (workspace, home) = (root.path().join("w"), root.path().join("h"));
        std::fs::create_dir_all(&workspace).unwrap();
        std::fs::create_dir_all(&home).unwrap();
        let project = serde_json::json!({"mcpServers": {"files": {"command": "node", "args": ["fs.js", "/w"], "env": {"A": "1"}}}});
        std::fs::write(workspace.join(".mcp.json"), project.to_string()).unwrap();
        let user = serde_json::json!({
            "mcpServers": {"web": {"type": "http", "url": "https://mcp.example/mcp"}},
            "projects": {workspace.to_string_lossy(): {"mcpServers": {"db": {"command": "db-mcp"}}}},
        });
        std::fs::write(home.join(".claude.json"), user.to_string()).unwrap();
        let servers = claude_mcp_servers(&workspace, Some(&home));
        let mut names: Vec<_> = servers.keys().collect();
        names.sort();
        assert_eq!(names, ["db", "files", "web"]);
        let (config, left_out) = behind_gateway(&servers, Path::new("/opt/warden-mcp"));
        let files = &config["mcpServers"]["files"];
        assert_eq!(files["command"], "/opt/warden-mcp");
        assert_eq!(files["args"], serde_json::json!(["--name", "files", "--", "node", "fs.js", "/w"]));
        assert_eq!(files["env"]["A"], "1");
        assert_eq!(config["mcpServers"]["db"]["args"], serde_json::json!(["--name", "db", "--", "db-mcp"]));
        assert!(config["mcpServers"].get("web").is_none());
        assert_eq!(left_out.len(), 1);
        assert!(left_out[0].starts_with("`web`"), "{left_out:?}");
    }

    #[test]
    fn claude_code_gets_the_hook_and_nothing_else_does() {
        let outer = vec![("ANTHROPIC_BASE_URL".to_owned(), "https://gw.example".to_owned())];
        let claude =
            setup(&["/usr/bin/claude".into(), "-p".into()], Path::new("/opt/it's/warden-hook"), &outer).unwrap();
        assert_eq!(claude.agent, "claude-code");
        assert_eq!(claude.args[0], "--settings");
        let settings: serde_json::Value = serde_json::from_str(&claude.args[1]).unwrap();
        let entry = &settings["hooks"]["PreToolUse"][0]["hooks"][0];
        assert_eq!(entry["command"], r"'/opt/it'\''s/warden-hook' claude-code");
        assert_eq!(entry["onFailure"], "block");
        assert_eq!(settings["hooks"]["PreToolUse"][0]["matcher"], NOT_MCP);
        assert_eq!(settings["skipWebFetchPreflight"], true);
        assert!(claude.env.contains(&("ANTHROPIC_BASE_URL".into(), "https://gw.example".into())));
        assert_eq!(setup(&["sh".into()], Path::new("/h"), &outer), None);
        assert_eq!(setup(&[], Path::new("/h"), &outer), None);
    }
}
