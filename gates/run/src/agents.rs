//! What a run adds for the coding agents it knows, for this run only and
//! without touching the user's own files: Claude Code gets its settings with
//! `warden-hook` as its pre-tool hook (which asks through the run's door),
//! and its MCP servers (the workspace's `.mcp.json`, the user's and the
//! project's in `~/.claude.json`) each behind `warden-mcp` in the box, and
//! no other (`--strict-mcp-config`). Codex CLI and Gemini CLI get a home
//! folder of the run's whose settings are the user's with the hook
//! (`warden-hook install`'s own merge). Any other command gets the box and
//! the proxy only.

use std::path::{Path, PathBuf};

use anyhow::Context as _;

/// The agent kind and what goes into its command line, environment and
/// folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setup {
    /// The agent kind, as policies name it.
    pub agent: &'static str,
    /// Arguments put right after the program.
    pub args: Vec<String>,
    /// Variables for the box.
    pub env: Vec<(String, String)>,
    /// Files the run writes for the agent, by their path in the agent's
    /// folder ([`AGENT_HOME`] in the box): its settings with the hook, which
    /// the box shows read-only (the folder around them is the agent's to
    /// write).
    pub files: Vec<(PathBuf, String)>,
}

/// The agent's own folder in the box (its state, its run's settings): in
/// the box's private `/run`, since the home folder is read-only there and
/// the user's own settings are not the run's. Codex CLI refuses to put its
/// helpers under `/tmp`.
pub const AGENT_HOME: &str = "/run/warden-agent";

/// The program names of the coding agents a run knows, and their kinds.
pub const KNOWN: &[(&str, &str)] = &[("claude", "claude-code"), ("codex", "codex"), ("gemini", "gemini-cli")];

/// The agent kind of `command`, when its program is an agent this knows.
pub fn kind(command: &[String]) -> Option<&'static str> {
    let program = Path::new(command.first()?).file_name()?.to_str()?;
    KNOWN.iter().find(|(name, _)| *name == program).map(|(_, kind)| *kind)
}

/// What a setup is made from.
#[derive(Debug, Clone, Copy)]
pub struct Inputs<'a> {
    /// `warden-hook`'s path (the same inside the box).
    pub hook: &'a Path,
    /// warden-run's environment.
    pub outer: &'a [(String, String)],
    /// The user's home folder outside, whose agent settings are the start.
    pub home: Option<&'a Path>,
    /// The agent's folder as the agent sees it ([`AGENT_HOME`] in the box).
    pub agent_dir: &'a Path,
}

impl Inputs<'_> {
    fn var(&self, name: &str) -> Option<&str> {
        self.outer.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str()).filter(|v| !v.is_empty())
    }

    /// `NAME` of warden-run's environment, passed in as it is (a model
    /// gateway's address the user points the agent at).
    fn passed(&self, names: &[&str]) -> Vec<(String, String)> {
        names.iter().filter_map(|name| Some(((*name).to_owned(), self.var(name)?.to_owned()))).collect()
    }

    /// The hook's command for `protocol`, quoted for `sh`.
    fn hook_command(&self, protocol: &str) -> String {
        format!("{} {protocol}", warden_hook::install::shell_word(&self.hook.to_string_lossy()))
    }
}

/// The longest the hook waits for a person (its default `--max-wait`), and
/// the agent's timeout for it: 30 s more, as `warden-hook install` writes.
const HOOK_TIMEOUT_SECONDS: u64 = 930;

/// The user's settings file at `path`, when there.
fn read_settings(path: Option<PathBuf>) -> anyhow::Result<(Option<String>, Option<PathBuf>)> {
    let Some(path) = path else { return Ok((None, None)) };
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok((Some(text), Some(path))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok((None, None)),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

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

/// The setup of agent `kind` (from [`kind`]) for this run.
pub fn setup(kind: &str, from: &Inputs<'_>) -> anyhow::Result<Setup> {
    match kind {
        "claude-code" => Ok(claude_code(from)),
        "codex" => codex(from),
        "gemini-cli" => gemini(from),
        other => anyhow::bail!("no setup for agent `{other}`"),
    }
}

/// Claude Code: a `--settings` with the hook, which blocks the tool when it
/// cannot run at all, and a config folder of the run's.
fn claude_code(from: &Inputs<'_>) -> Setup {
    // The hook is not asked about MCP tools: the run's only MCP servers are
    // behind warden-mcp (--strict-mcp-config), which asks about each call
    // (asked twice, a call waiting for a person would be two approvals).
    // WebFetch's own preflight (sending each domain to Anthropic) is
    // skipped: what may be fetched is Warden's to decide, on the hook and
    // again at the proxy.
    let settings = serde_json::json!({"skipWebFetchPreflight": true, "hooks": {"PreToolUse": [{"matcher": NOT_MCP, "hooks": [{
        "type": "command",
        "command": from.hook_command("claude-code"),
        "timeout": HOOK_TIMEOUT_SECONDS,
        "onFailure": "block",
    }]}]}});
    let mut env = vec![
        ("CLAUDE_CONFIG_DIR".to_owned(), from.agent_dir.join("claude").to_string_lossy().into_owned()),
        // Its telemetry and update checks would only be refused.
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".to_owned(), "1".to_owned()),
    ];
    env.extend(from.passed(&["ANTHROPIC_BASE_URL"]));
    Setup { agent: "claude-code", args: vec!["--settings".into(), settings.to_string()], env, files: vec![] }
}

/// Codex CLI: a `CODEX_HOME` of the run's whose `config.toml` is the user's
/// with the hook and its trust entry (an untrusted hook is skipped without
/// a word), and `sandbox_mode = "danger-full-access"`: the box is the
/// sandbox, and Codex's own (bubblewrap again) cannot be made inside it, so
/// every command would fail. Its MCP servers run in the box, asked about by
/// the hook.
fn codex(from: &Inputs<'_>) -> anyhow::Result<Setup> {
    let user_home = from.var("CODEX_HOME").map(PathBuf::from).or_else(|| from.home.map(|h| h.join(".codex")));
    let (existing, read_from) = read_settings(user_home.map(|dir| dir.join("config.toml")))?;
    let home = from.agent_dir.join("codex");
    let config_path = home.join("config.toml");
    let mut config = warden_hook::install::codex::merge(
        existing.as_deref(),
        &from.hook_command("codex"),
        HOOK_TIMEOUT_SECONDS,
        &config_path,
    )
    .with_context(|| format!("Codex's config {}", read_from.map(|p| p.display().to_string()).unwrap_or_default()))?;
    config.insert("sandbox_mode".into(), "danger-full-access".into());
    let mut env = vec![("CODEX_HOME".to_owned(), home.to_string_lossy().into_owned())];
    env.extend(from.passed(&["OPENAI_BASE_URL"]));
    let text = toml::to_string(&config).context("Codex's config")?;
    Ok(Setup { agent: "codex", args: vec![], env, files: vec![("codex/config.toml".into(), text)] })
}

/// Gemini CLI: a `GEMINI_CLI_HOME` of the run's whose settings are the
/// user's with the `BeforeTool` hook (the API key's sign-in chosen when the
/// user chose none and gave `GEMINI_API_KEY`). Its MCP servers run in the
/// box, asked about by the hook.
fn gemini(from: &Inputs<'_>) -> anyhow::Result<Setup> {
    let user_home = from.var("GEMINI_CLI_HOME").map(PathBuf::from).or_else(|| from.home.map(Path::to_owned));
    let (existing, read_from) = read_settings(user_home.map(|dir| dir.join(".gemini/settings.json")))?;
    let home = from.agent_dir.join("gemini");
    let path = home.join(".gemini/settings.json");
    let mut settings = warden_hook::install::gemini::merge(
        existing.as_deref(),
        &from.hook_command("gemini"),
        HOOK_TIMEOUT_SECONDS * 1000,
        &path,
    )
    .with_context(|| {
        format!("Gemini CLI's settings {}", read_from.map(|p| p.display().to_string()).unwrap_or_default())
    })?;
    if settings.pointer("/security/auth/selectedType").is_none()
        && from.var("GEMINI_API_KEY").is_some()
        && let Some(object) = settings.as_object_mut()
    {
        let security = object.entry("security").or_insert_with(|| serde_json::json!({}));
        if let Some(security) = security.as_object_mut() {
            let auth = security.entry("auth").or_insert_with(|| serde_json::json!({}));
            if let Some(auth) = auth.as_object_mut() {
                auth.insert("selectedType".into(), "gemini-api-key".into());
            }
        }
    }
    let mut env = vec![("GEMINI_CLI_HOME".to_owned(), home.to_string_lossy().into_owned())];
    env.extend(from.passed(&["GOOGLE_GEMINI_BASE_URL"]));
    let text = serde_json::to_string_pretty(&settings)? + "\n";
    Ok(Setup { agent: "gemini-cli", args: vec![], env, files: vec![("gemini/.gemini/settings.json".into(), text)] })
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

    fn inputs<'a>(outer: &'a [(String, String)], home: Option<&'a Path>, hook: &'a Path) -> Inputs<'a> {
        Inputs { hook, outer, home, agent_dir: Path::new(AGENT_HOME) }
    }

    #[test]
    fn claude_code_gets_the_hook_and_nothing_else_does() {
        let outer = vec![("ANTHROPIC_BASE_URL".to_owned(), "https://gw.example".to_owned())];
        assert_eq!(kind(&["/usr/bin/claude".into(), "-p".into()]), Some("claude-code"));
        let claude = setup("claude-code", &inputs(&outer, None, Path::new("/opt/it's/warden-hook"))).unwrap();
        assert_eq!(claude.agent, "claude-code");
        assert_eq!(claude.args[0], "--settings");
        let settings: serde_json::Value = serde_json::from_str(&claude.args[1]).unwrap();
        let entry = &settings["hooks"]["PreToolUse"][0]["hooks"][0];
        assert_eq!(entry["command"], r"'/opt/it'\''s/warden-hook' claude-code");
        assert_eq!(entry["onFailure"], "block");
        assert_eq!(settings["hooks"]["PreToolUse"][0]["matcher"], NOT_MCP);
        assert_eq!(settings["skipWebFetchPreflight"], true);
        assert!(claude.env.contains(&("ANTHROPIC_BASE_URL".into(), "https://gw.example".into())));
        assert!(claude.env.contains(&("CLAUDE_CONFIG_DIR".into(), "/run/warden-agent/claude".into())));
        assert_eq!(kind(&["sh".into()]), None);
        assert_eq!(kind(&[]), None);
    }

    #[test]
    fn codex_gets_the_user_s_config_with_the_hook_trusted_for_the_run_s_path() {
        let home = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(home.path().join(".codex")).unwrap();
        std::fs::write(
            home.path().join(".codex/config.toml"),
            "model = \"gpt-5\"\nsandbox_mode = \"workspace-write\"\n[mcp_servers.db]\ncommand = \"db-mcp\"\n",
        )
        .unwrap();
        let outer = vec![("OPENAI_BASE_URL".to_owned(), "https://llm.example/v1".to_owned())];
        let codex = setup("codex", &inputs(&outer, Some(home.path()), Path::new("/opt/bin/warden-hook"))).unwrap();
        assert_eq!(kind(&["codex".into(), "exec".into()]), Some("codex"));
        assert_eq!(codex.agent, "codex");
        assert!(codex.env.contains(&("CODEX_HOME".into(), "/run/warden-agent/codex".into())));
        assert!(codex.env.contains(&("OPENAI_BASE_URL".into(), "https://llm.example/v1".into())));
        let [(path, text)] = &codex.files[..] else { panic!("{:?}", codex.files) };
        assert_eq!(path, Path::new("codex/config.toml"));
        let config: toml::Table = text.parse().unwrap();
        assert_eq!(config["model"].as_str(), Some("gpt-5"));
        assert_eq!(config["sandbox_mode"].as_str(), Some("danger-full-access"));
        assert_eq!(config["mcp_servers"]["db"]["command"].as_str(), Some("db-mcp"));
        let command = "/opt/bin/warden-hook codex";
        assert_eq!(config["hooks"]["PreToolUse"][0]["hooks"][0]["command"].as_str(), Some(command));
        let key = warden_hook::install::codex::trust_key(Path::new("/run/warden-agent/codex/config.toml"), 0);
        assert_eq!(
            config["hooks"]["state"][&key]["trusted_hash"].as_str(),
            Some(warden_hook::install::codex::trusted_hash(command, HOOK_TIMEOUT_SECONDS).as_str())
        );
        // A config Codex could not read is not silently replaced.
        std::fs::write(home.path().join(".codex/config.toml"), "model = ").unwrap();
        let error = setup("codex", &inputs(&outer, Some(home.path()), Path::new("/h"))).unwrap_err();
        assert!(format!("{error:#}").contains("config.toml"), "{error:#}");
    }

    #[test]
    fn gemini_gets_the_user_s_settings_with_the_hook() {
        let home = tempfile::tempdir().unwrap();
        let outer = vec![("GEMINI_API_KEY".to_owned(), "k".to_owned())];
        let gemini =
            setup("gemini-cli", &inputs(&outer, Some(home.path()), Path::new("/opt/bin/warden-hook"))).unwrap();
        assert_eq!(kind(&["/usr/local/bin/gemini".into()]), Some("gemini-cli"));
        assert!(gemini.env.contains(&("GEMINI_CLI_HOME".into(), "/run/warden-agent/gemini".into())));
        let [(path, text)] = &gemini.files[..] else { panic!("{:?}", gemini.files) };
        assert_eq!(path, Path::new("gemini/.gemini/settings.json"));
        let settings: serde_json::Value = serde_json::from_str(text).unwrap();
        let group = &settings["hooks"]["BeforeTool"][0];
        assert_eq!(group["matcher"], ".*");
        assert_eq!(group["hooks"][0]["command"], "/opt/bin/warden-hook gemini");
        assert_eq!(group["hooks"][0]["timeout"], 930_000);
        assert_eq!(settings["security"]["auth"]["selectedType"], "gemini-api-key");
        // The user's own choice stands.
        std::fs::create_dir_all(home.path().join(".gemini")).unwrap();
        std::fs::write(
            home.path().join(".gemini/settings.json"),
            r#"{"security": {"auth": {"selectedType": "vertex-ai"}}, "ui": {"theme": "x"}}"#,
        )
        .unwrap();
        let gemini = setup("gemini-cli", &inputs(&outer, Some(home.path()), Path::new("/h"))).unwrap();
        let settings: serde_json::Value = serde_json::from_str(&gemini.files[0].1).unwrap();
        assert_eq!(settings["security"]["auth"]["selectedType"], "vertex-ai");
        assert_eq!(settings["ui"]["theme"], "x");
    }
}
