//! Locating the real Claude Code CLI (and the npm MCP servers next to it) and running it against a
//! [`ScriptedModel`] in a fresh `HOME`, with no network.
//!
//! The npm packages live in `<target>/npm/node_modules` (`npm install --prefix target/npm
//! @anthropic-ai/claude-code@2.1.328 @modelcontextprotocol/server-everything`). A test that needs them calls
//! [`found_or_skip`]: when they are missing it prints `skipped: <reason>` and the test returns early, unless
//! `WARDEN_REQUIRE_NPM=1`, in which case the test fails.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::io::{AsyncRead, AsyncReadExt as _};
use tokio::process::Command;

use crate::model_server::ScriptedModel;

/// How long a run may take before it is killed.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// The environment variables a run inherits; everything else is cleared so the host's Claude Code setup
/// (`ANTHROPIC_AUTH_TOKEN`, `CLAUDE_CONFIG_DIR`, Bedrock/Vertex switches, proxies) cannot leak in.
const INHERITED_ENV: &[&str] = &["PATH", "SHELL", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "TZ", "USER", "LOGNAME"];

/// The workspace's target folder: `CARGO_TARGET_DIR` (relative to the workspace root) if set, else
/// `<workspace>/target`.
pub fn target_dir() -> PathBuf {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    match std::env::var_os("CARGO_TARGET_DIR").filter(|dir| !dir.is_empty()) {
        Some(dir) => workspace.join(dir),
        None => workspace.join("target"),
    }
}

/// `<target>/npm/node_modules/.bin/<name>`, if it is there.
pub fn npm_bin(name: &str) -> Option<PathBuf> {
    Some(target_dir().join("npm/node_modules/.bin").join(name)).filter(|path| path.is_file())
}

/// The `claude` binary: `WARDEN_CLAUDE` if set (used as given, so a wrong path fails rather than skips), else
/// the npm install under the target folder.
pub fn claude_binary() -> Option<PathBuf> {
    match std::env::var_os("WARDEN_CLAUDE").filter(|path| !path.is_empty()) {
        Some(path) => Some(PathBuf::from(path)),
        None => npm_bin("claude"),
    }
}

/// The first `name` on `PATH` that is a file.
pub fn find_in_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(name)).find(|candidate| candidate.is_file())
}

/// Whether missing npm tools fail the tests that need them (`WARDEN_REQUIRE_NPM=1`) instead of skipping them.
pub fn npm_required() -> bool {
    std::env::var_os("WARDEN_REQUIRE_NPM").is_some_and(|value| value == "1")
}

/// `Ok(Some(found))`; when `found` is `None`: an error if [`npm_required`], else `Ok(None)` after printing
/// `skipped: <what> not found` to stderr.
///
/// ```ignore
/// let Some(claude) = found_or_skip("claude (npm @anthropic-ai/claude-code)", claude_binary())? else {
///     return Ok(());
/// };
/// ```
pub fn found_or_skip<T>(what: &str, found: Option<T>) -> anyhow::Result<Option<T>> {
    match found {
        Some(found) => Ok(Some(found)),
        None if npm_required() => bail!("{what} not found, and WARDEN_REQUIRE_NPM=1"),
        None => {
            eprintln!("skipped: {what} not found");
            Ok(None)
        }
    }
}

/// [`claude_binary`] through [`found_or_skip`].
pub fn claude_or_skip() -> anyhow::Result<Option<PathBuf>> {
    found_or_skip(
        &format!("claude (npm @anthropic-ai/claude-code under {})", target_dir().join("npm").display()),
        claude_binary(),
    )
}

/// Another coding agent's CLI installed by `scripts/test-deps` (`bin` of npm `package`, e.g. `codex` of
/// `@openai/codex`) through [`found_or_skip`].
pub fn npm_or_skip(bin: &str, package: &str) -> anyhow::Result<Option<PathBuf>> {
    found_or_skip(&format!("{bin} (npm {package} under {})", target_dir().join("npm").display()), npm_bin(bin))
}

/// An MCP server entry that Claude Code starts and speaks to over stdio.
pub fn stdio_mcp_server<S: AsRef<OsStr>>(command: impl AsRef<Path>, args: &[S], env: &[(&str, &str)]) -> Value {
    let args: Vec<String> = args.iter().map(|arg| arg.as_ref().to_string_lossy().into_owned()).collect();
    let env: serde_json::Map<String, Value> =
        env.iter().map(|(name, value)| ((*name).to_owned(), Value::from(*value))).collect();
    json!({ "command": command.as_ref().to_string_lossy(), "args": args, "env": env })
}

/// An MCP server entry that Claude Code reaches over streamable HTTP.
pub fn http_mcp_server(url: &str) -> Value {
    json!({ "type": "http", "url": url })
}

/// A `--mcp-config` document: `{"mcpServers": {NAME: entry, ...}}`.
pub fn mcp_config<'a>(servers: impl IntoIterator<Item = (&'a str, Value)>) -> Value {
    let servers: serde_json::Map<String, Value> =
        servers.into_iter().map(|(name, entry)| (name.to_owned(), entry)).collect();
    json!({ "mcpServers": servers })
}

/// The stdio entry for `@modelcontextprotocol/server-everything` (run by `node`), if both are installed.
pub fn server_everything() -> Option<Value> {
    let node = find_in_path("node")?;
    let script = target_dir().join("npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    script.is_file().then(|| stdio_mcp_server(node, &[script.as_os_str(), OsStr::new("stdio")], &[]))
}

/// One `claude -p PROMPT --output-format json` run against a [`ScriptedModel`].
///
/// `HOME` is a fresh temporary folder, the environment is cleared but for `PATH`, `SHELL`, the locale, `TMPDIR`,
/// `TZ`, `USER` and `LOGNAME`, and the model server is the only API Claude Code knows. As root, `--dangerously-skip-permissions` is refused: pre-approve
/// tools with [`allowed_tools`](Self::allowed_tools) instead.
#[derive(Debug, Clone)]
pub struct ClaudeRun {
    binary: PathBuf,
    prompt: String,
    current_dir: Option<PathBuf>,
    allowed_tools: Vec<String>,
    mcp_config: Option<Value>,
    strict_mcp_config: bool,
    tool_search: bool,
    settings: Option<Value>,
    env: Vec<(OsString, OsString)>,
    args: Vec<OsString>,
    timeout: Duration,
}

impl ClaudeRun {
    /// A run of `binary` (see [`claude_binary`]) with this prompt, in a fresh temporary working folder, with no
    /// pre-approved tools, no MCP servers, and a [`DEFAULT_TIMEOUT`].
    pub fn new(binary: impl Into<PathBuf>, prompt: impl Into<String>) -> Self {
        ClaudeRun {
            binary: binary.into(),
            prompt: prompt.into(),
            current_dir: None,
            allowed_tools: Vec::new(),
            mcp_config: None,
            strict_mcp_config: true,
            tool_search: false,
            settings: None,
            env: Vec::new(),
            args: Vec::new(),
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// The working folder (default: an empty temporary folder, [`ClaudeOutput::work_dir`]).
    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.current_dir = Some(dir.into());
        self
    }

    /// `--allowedTools`: tools (or rules such as `Bash(git *)`, `mcp__server__tool`) that run without asking.
    pub fn allowed_tools<S: Into<String>>(mut self, tools: impl IntoIterator<Item = S>) -> Self {
        self.allowed_tools.extend(tools.into_iter().map(Into::into));
        self
    }

    /// `--mcp-config`: a document such as [`mcp_config`] builds.
    pub fn mcp_config(mut self, config: Value) -> Self {
        self.mcp_config = Some(config);
        self
    }

    /// Whether to pass `--strict-mcp-config` (default yes: only the servers of [`mcp_config`](Self::mcp_config),
    /// none from a `.mcp.json` in the working folder).
    pub fn strict_mcp_config(mut self, strict: bool) -> Self {
        self.strict_mcp_config = strict;
        self
    }

    /// Whether Claude Code may defer tools behind `ToolSearch` (default no: `ENABLE_TOOL_SEARCH=false`, so every
    /// tool, MCP tools included, is in the request's `tools` with its schema, and
    /// [`ScriptedModel::tool_names`] sees them all). With it on, Claude Code's default, MCP tools are named in a
    /// system text ([`ScriptedModel::deferred_tool_names`]) for the model to load with `ToolSearch`.
    pub fn tool_search(mut self, on: bool) -> Self {
        self.tool_search = on;
        self
    }

    /// `--settings`: a settings document (hooks, permissions, ...).
    pub fn settings(mut self, settings: Value) -> Self {
        self.settings = Some(settings);
        self
    }

    /// One more environment variable (set after the defaults, so it can override them).
    pub fn env(mut self, name: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((name.into(), value.into()));
        self
    }

    /// One more command-line argument, before the prompt.
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// How long the run may take before it is killed (default [`DEFAULT_TIMEOUT`]).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The arguments after the binary's name. The prompt comes last, after `--`: `--allowedTools` and
    /// `--mcp-config` take several values and would swallow it otherwise.
    fn command_args(&self) -> anyhow::Result<Vec<OsString>> {
        let mut args: Vec<OsString> = ["-p", "--output-format", "json"].map(OsString::from).to_vec();
        if !self.allowed_tools.is_empty() {
            args.push("--allowedTools".into());
            args.extend(self.allowed_tools.iter().map(OsString::from));
        }
        if let Some(config) = &self.mcp_config {
            args.push("--mcp-config".into());
            args.push(serde_json::to_string(config).context("cannot serialize the MCP configuration")?.into());
        }
        if self.strict_mcp_config {
            args.push("--strict-mcp-config".into());
        }
        if let Some(settings) = &self.settings {
            args.push("--settings".into());
            args.push(serde_json::to_string(settings).context("cannot serialize the settings")?.into());
        }
        args.extend(self.args.iter().cloned());
        args.push("--".into());
        args.push(self.prompt.clone().into());
        Ok(args)
    }

    /// Runs Claude Code to the end (or kills it, with its process group, at the timeout) and parses its JSON.
    ///
    /// An error if it cannot start, times out, or prints something other than JSON; a JSON answer with a
    /// failed exit status or `is_error` is returned as is, for the test to judge.
    pub async fn run(self, model: &ScriptedModel) -> anyhow::Result<ClaudeOutput> {
        let root = tempfile::Builder::new().prefix("warden-claude-").tempdir().context("cannot create a temp dir")?;
        let home = root.path().join("home");
        std::fs::create_dir(&home).with_context(|| format!("cannot create {}", home.display()))?;
        let work_dir = match &self.current_dir {
            Some(dir) => dir.clone(),
            None => {
                let dir = root.path().join("work");
                std::fs::create_dir(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
                dir
            }
        };

        let mut command = Command::new(&self.binary);
        command.args(self.command_args()?).current_dir(&work_dir).env_clear();
        for name in INHERITED_ENV {
            if let Some(value) = std::env::var_os(name) {
                command.env(name, value);
            }
        }
        command
            .env("HOME", &home)
            .env("ANTHROPIC_BASE_URL", model.base_url())
            .env("ANTHROPIC_API_KEY", "sk-ant-warden-test")
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1");
        if !self.tool_search {
            command.env("ENABLE_TOOL_SEARCH", "false");
        }
        command
            .envs(self.env.iter().map(|(name, value)| (name, value)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own process group, so a timeout can kill what it started (MCP servers, shells) too.
            .process_group(0)
            .kill_on_drop(true);

        let started = Instant::now();
        let mut child = command.spawn().with_context(|| format!("cannot start {}", self.binary.display()))?;
        let pid = child.id();
        let stdout = tokio::spawn(read_all(child.stdout.take()));
        let stderr = tokio::spawn(read_all(child.stderr.take()));
        let waited = tokio::time::timeout(self.timeout, child.wait()).await;
        let elapsed = started.elapsed();
        if waited.is_err() {
            if let Some(pid) = pid {
                kill_process_group(pid).await;
            }
            let _ = child.kill().await;
        }
        // A grandchild that outlived Claude Code and kept a pipe open must not hold the test up.
        let collect = |task: tokio::task::JoinHandle<String>| async move {
            tokio::time::timeout(Duration::from_secs(5), task).await.ok().and_then(Result::ok).unwrap_or_default()
        };
        let (stdout, stderr) = (collect(stdout).await, collect(stderr).await);
        let status = match waited {
            Ok(status) => status.context("cannot wait for claude")?,
            Err(_) => bail!(
                "claude did not finish within {:?} and was killed; stdout: {}; stderr: {}",
                self.timeout,
                tail(&stdout),
                tail(&stderr)
            ),
        };
        let json = serde_json::from_str(stdout.trim()).with_context(|| {
            format!("claude ({status}) printed no JSON; stdout: {}; stderr: {}", tail(&stdout), tail(&stderr))
        })?;
        Ok(ClaudeOutput { json, stdout, stderr, status, elapsed, work_dir, root })
    }
}

async fn read_all(pipe: Option<impl AsyncRead + Unpin>) -> String {
    let mut bytes = Vec::new();
    if let Some(mut pipe) = pipe {
        let _ = pipe.read_to_end(&mut bytes).await;
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// `kill -KILL -- -PGID`: the group was made with `process_group(0)`, so its id is the child's pid.
async fn kill_process_group(pid: u32) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{pid}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await;
}

/// The last 2000 characters of a text.
fn tail(text: &str) -> &str {
    let start = text.char_indices().rev().nth(1999).map_or(0, |(index, _)| index);
    text.get(start..).unwrap_or(text)
}

/// What a [`ClaudeRun`] gave.
#[derive(Debug)]
pub struct ClaudeOutput {
    /// Standard output parsed: the `--output-format json` result (`result`, `is_error`, `num_turns`,
    /// `permission_denials`, `session_id`, ...).
    pub json: Value,
    /// Standard output as printed.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
    /// The exit status.
    pub status: ExitStatus,
    /// From start to exit.
    pub elapsed: Duration,
    /// The working folder the run had.
    pub work_dir: PathBuf,
    /// Holds `home/` (Claude Code's `HOME`, with `.claude/` transcripts) and `work/` until dropped.
    root: TempDir,
}

impl ClaudeOutput {
    /// The final answer (`result`).
    pub fn result(&self) -> Option<&str> {
        self.json.get("result").and_then(Value::as_str)
    }

    /// Whether Claude Code reported an error (`is_error`), or exited with a failure status.
    pub fn is_error(&self) -> bool {
        !self.status.success() || self.json.get("is_error").and_then(Value::as_bool).unwrap_or(false)
    }

    /// `permission_denials`: the tool calls a permission rule or hook refused.
    pub fn permission_denials(&self) -> &[Value] {
        self.json.get("permission_denials").and_then(Value::as_array).map_or(&[], Vec::as_slice)
    }

    /// The `HOME` the run had.
    pub fn home(&self) -> PathBuf {
        self.root.path().join("home")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model_server::Step;

    #[tokio::test]
    async fn claude_code_runs_a_bash_tool_call_and_sends_the_result_back() -> anyhow::Result<()> {
        let Some(claude) = claude_or_skip()? else {
            return Ok(());
        };
        let model = ScriptedModel::start(vec![
            Step::tool_use("Bash", json!({ "command": "echo hi > out.txt", "description": "Write out.txt" })),
            Step::text("wrote out.txt"),
        ])
        .await?;
        let work = tempfile::tempdir()?;
        let output = ClaudeRun::new(claude, "write hi to out.txt")
            .current_dir(work.path())
            .allowed_tools(["Bash"])
            .run(&model)
            .await?;
        eprintln!("bash run: {:?}, {} requests in all", output.elapsed, model.all_requests().len());

        assert!(!output.is_error(), "{}\n{}", output.stdout, output.stderr);
        assert_eq!(output.result(), Some("wrote out.txt"));
        assert_eq!(std::fs::read_to_string(work.path().join("out.txt"))?, "hi\n");
        assert!(model.tool_names().iter().any(|name| name == "Bash"), "{:?}", model.tool_names());
        let results = model.tool_results();
        assert_eq!(results.len(), 1, "{results:?}");
        assert_eq!(results[0].tool_use_id, "toolu_scripted_1");
        assert!(!results[0].is_error, "{results:?}");
        assert_eq!(model.remaining_steps(), 0);
        Ok(())
    }

    #[tokio::test]
    async fn claude_code_calls_an_mcp_tool_over_stdio_and_sends_its_text_back() -> anyhow::Result<()> {
        let Some(claude) = claude_or_skip()? else {
            return Ok(());
        };
        let Some(everything) =
            found_or_skip("node with npm @modelcontextprotocol/server-everything", server_everything())?
        else {
            return Ok(());
        };
        let model = ScriptedModel::start(vec![
            Step::tool_use("mcp__everything__echo", json!({ "message": "hello" })),
            Step::text("echoed"),
        ])
        .await?;
        let output = ClaudeRun::new(claude, "echo hello")
            .mcp_config(mcp_config([("everything", everything)]))
            .allowed_tools(["mcp__everything__echo"])
            .run(&model)
            .await?;
        eprintln!("mcp run: {:?}, {} requests in all", output.elapsed, model.all_requests().len());

        assert!(!output.is_error(), "{}\n{}", output.stdout, output.stderr);
        assert_eq!(output.result(), Some("echoed"));
        assert!(model.tool_names().iter().any(|name| name == "mcp__everything__echo"), "{:?}", model.tool_names());
        assert!(model.deferred_tool_names().is_empty(), "{:?}", model.deferred_tool_names());
        let results = model.tool_results();
        assert_eq!(results.len(), 1, "{results:?}");
        assert!(!results[0].is_error, "{results:?}");
        assert_eq!(results[0].content, "Echo: hello");
        assert!(output.permission_denials().is_empty(), "{}", output.stdout);
        Ok(())
    }

    #[tokio::test]
    async fn with_tool_search_mcp_tools_are_deferred_until_loaded_and_a_server_rule_allows_them() -> anyhow::Result<()>
    {
        let Some(claude) = claude_or_skip()? else {
            return Ok(());
        };
        let Some(everything) =
            found_or_skip("node with npm @modelcontextprotocol/server-everything", server_everything())?
        else {
            return Ok(());
        };
        let model = ScriptedModel::start(vec![
            Step::tool_use("ToolSearch", json!({ "query": "select:mcp__everything__echo", "max_results": 5 })),
            Step::tool_use("mcp__everything__echo", json!({ "message": "hello" })),
            Step::text("echoed"),
        ])
        .await?;
        let output = ClaudeRun::new(claude, "echo hello")
            .mcp_config(mcp_config([("everything", everything)]))
            .tool_search(true)
            // The server's name alone allows each of its tools.
            .allowed_tools(["mcp__everything"])
            .run(&model)
            .await?;
        eprintln!("mcp run with tool search: {:?}", output.elapsed);

        assert!(!output.is_error(), "{}\n{}", output.stdout, output.stderr);
        let first = model.requests().first().cloned().unwrap_or_default();
        let offered: Vec<&str> =
            first["tools"].as_array().into_iter().flatten().filter_map(|tool| tool["name"].as_str()).collect();
        assert!(!offered.contains(&"mcp__everything__echo"), "{offered:?}");
        assert!(offered.contains(&"ToolSearch"), "{offered:?}");
        assert!(model.deferred_tool_names().iter().any(|name| name == "mcp__everything__echo"));
        // Once loaded, the tool is offered with its schema.
        assert!(model.tool_names().iter().any(|name| name == "mcp__everything__echo"), "{:?}", model.tool_names());
        let results = model.tool_results();
        assert_eq!(results.len(), 2, "{results:?}");
        assert_eq!(results[0].content, "[tool_reference mcp__everything__echo]");
        assert_eq!((results[1].content.as_str(), results[1].is_error), ("Echo: hello", false));
        Ok(())
    }
}
