//! `warden-hook`: Warden in front of a coding agent, through its pre-tool
//! hook. `warden-hook claude-code` reads one Claude Code `PreToolUse` event
//! on stdin, asks Warden (waiting through PENDING), and answers allow or
//! deny on stdout; it exits 0 and never answers without a decision: every
//! failure (Warden unreachable, a bad event, no approval in time) is a deny
//! that says why.

#![forbid(unsafe_code)]

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};
use warden_hook::decide::{self, unreachable_deny};
use warden_hook::{MAX_EVENT_BYTES, Protocol, ToolCall, Verdict, install, parse};
use warden_sdk::{Actor, Client};

/// Put Warden in front of a coding agent: run as the agent's pre-tool hook.
///
/// The monitor: WARDEN_ENDPOINT (default http://127.0.0.1:50051; several
/// replicas separated by commas) and WARDEN_TOKEN or WARDEN_TOKEN_FILE (a
/// harness token). Who acts:
/// WARDEN_USER (default: the OS user) and WARDEN_AGENT (default
/// `claude-code`); the session is the agent's own.
#[derive(Debug, Parser)]
#[command(name = "warden-hook", version = warden_version::VERSION)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Answer one Claude Code PreToolUse event (stdin -> stdout).
    ClaudeCode(Wait),
    /// Answer one Codex CLI PreToolUse event (a block is exit 2).
    Codex(Wait),
    /// Answer one Gemini CLI BeforeTool event.
    Gemini(Wait),
    /// Answer one Cursor beforeShellExecution, beforeMCPExecution or
    /// beforeReadFile event.
    Cursor(Wait),
    /// Answer one Cline PreToolUse event (its hook file; waits at most
    /// 100 s, under Cline's 120 s).
    Cline(Wait),
    /// Answer one tool call of OpenCode's Warden plugin.
    Opencode(Wait),
    /// Add the hook to an agent's settings (merged, never clobbered).
    ///
    /// claude-code: `.claude/settings.json` (project), `~/.claude/settings.json`
    /// (user) or `/etc/claude-code/managed-settings.json` (managed, with
    /// `allowManagedHooksOnly`, which an agent cannot undo). codex:
    /// `.codex/config.toml` (project; Codex reads it only in a trusted
    /// project) or `$CODEX_HOME/config.toml` (user, default `~/.codex`),
    /// with the hook's trust entry. gemini: `.gemini/settings.json`
    /// (project; Gemini CLI runs its hooks only in a trusted folder) or
    /// `~/.gemini/settings.json` (user; `$GEMINI_CLI_HOME/.gemini`). cline:
    /// a `PreToolUse` hook file in `.clinerules/hooks/` (project) or
    /// `$CLINE_DIR/hooks/` (user, default `~/.cline`), waiting at most
    /// 100 s. opencode: a plugin, `.opencode/plugin/warden.js` (project) or
    /// `$XDG_CONFIG_HOME/opencode/plugin/warden.js` (user).
    Install {
        /// The agent.
        #[arg(value_enum)]
        agent: Agent,
        /// Which settings (see above).
        #[arg(long, value_enum, default_value_t = Scope::Project)]
        scope: Scope,
        /// The same as `--scope managed` (Claude Code only).
        #[arg(long)]
        managed: bool,
        /// The project folder (for `--scope project`).
        #[arg(long, default_value = ".")]
        dir: PathBuf,
        /// Print the resulting settings instead of writing them.
        #[arg(long)]
        print: bool,
        /// The hook's `--max-wait`; the entry's timeout is 30 s more.
        #[arg(long, default_value_t = 900)]
        max_wait: u64,
        /// The monitor the hook asks (several replicas separated by commas),
        /// written into the entry [default: WARDEN_ENDPOINT, else
        /// http://127.0.0.1:50051]
        #[arg(long, value_name = "URL")]
        endpoint: Option<String>,
        /// The file holding the hook's harness token, written into the entry
        /// as an absolute path [default: WARDEN_TOKEN_FILE]. A token's value
        /// (WARDEN_TOKEN) is never written
        #[arg(long, value_name = "FILE")]
        token_file: Option<PathBuf>,
        /// For an https:// endpoint: the CA that signed the monitor's
        /// certificate, written into the entry [default: WARDEN_CA_CERT, else
        /// the system's CAs]
        #[arg(long, value_name = "FILE")]
        ca_cert: Option<PathBuf>,
    },
    /// Say whether an installed hook would run (Codex skips an untrusted
    /// hook without a word); exit 0 when it would.
    Doctor {
        /// The agent.
        #[arg(value_enum)]
        agent: DoctorAgent,
        /// Which settings, as for install.
        #[arg(long, value_enum, default_value_t = Scope::User)]
        scope: Scope,
        /// The project folder (for `--scope project`).
        #[arg(long, default_value = ".")]
        dir: PathBuf,
    },
}

#[derive(Debug, clap::Args)]
struct Wait {
    /// The longest the hook waits for an approval, in seconds; it then
    /// denies. Keep it below the agent's hook timeout.
    #[arg(long, default_value_t = 900)]
    max_wait: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Agent {
    ClaudeCode,
    Codex,
    Gemini,
    Cline,
    Opencode,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum DoctorAgent {
    Codex,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Scope {
    Project,
    User,
    Managed,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let (protocol, wait) = match cli.command {
        Command::ClaudeCode(wait) => (Protocol::ClaudeCode, wait),
        Command::Codex(wait) => (Protocol::Codex, wait),
        Command::Gemini(wait) => (Protocol::Gemini, wait),
        Command::Cursor(wait) => (Protocol::Cursor, wait),
        Command::Cline(wait) => (Protocol::Cline, wait),
        Command::Opencode(wait) => (Protocol::OpenCode, wait),
        Command::Doctor { agent: DoctorAgent::Codex, scope, dir } => {
            return match doctor_codex(scope, &dir) {
                Ok(true) => ExitCode::SUCCESS,
                Ok(false) => ExitCode::FAILURE,
                Err(e) => {
                    eprintln!("warden-hook: {e:#}");
                    ExitCode::FAILURE
                }
            };
        }
        Command::Install { agent, scope, managed, dir, print, max_wait, endpoint, token_file, ca_cert } => {
            let scope = if managed { Scope::Managed } else { scope };
            let flags = install::TargetFlags { endpoint, token_file, ca_cert };
            return match install(agent, scope, &dir, print, max_wait, flags) {
                Ok(()) => ExitCode::SUCCESS,
                // `--print | head`: the reader went away. 141 (128 + SIGPIPE)
                // as a shell reports it, like wardenctl: quiet, and not a
                // success, since the settings were cut off.
                Err(e) if reader_gone(&e) => ExitCode::from(141),
                Err(e) => {
                    eprintln!("warden-hook: {e:#}");
                    ExitCode::FAILURE
                }
            };
        }
    };
    let mut max_wait = Duration::from_secs(wait.max_wait);
    if protocol == Protocol::Cline {
        // Cline kills a hook at 120 s and then runs the tool: the hook
        // answers (a deny) well before.
        max_wait = max_wait.min(Duration::from_secs(CLINE_MAX_WAIT_SECONDS));
    }
    let (verdict, tool) = hook(protocol, max_wait);
    let answer = verdict.answer_for(protocol, tool.as_deref());
    // Nothing else is ever written to stdout: the agent reads it.
    let mut out = std::io::stdout().lock();
    if !answer.stdout.is_empty() && writeln!(out, "{}", answer.stdout).and_then(|()| out.flush()).is_err() {
        return ExitCode::FAILURE;
    }
    if !answer.stderr.is_empty() {
        eprintln!("{}", answer.stderr);
    }
    ExitCode::from(answer.exit)
}

/// The longest `warden-hook cline` waits: under Cline's 120 s.
const CLINE_MAX_WAIT_SECONDS: u64 = 100;

/// The whole answer to one event, and the tool it was for when it could be
/// read; every failure is a deny naming it.
fn hook(protocol: Protocol, max_wait: Duration) -> (Verdict, Option<String>) {
    let mut text = String::new();
    let read = std::io::stdin().lock().take(MAX_EVENT_BYTES as u64 + 1).read_to_string(&mut text);
    if let Err(e) = read {
        return (Verdict::Deny(format!("Warden's hook could not read the tool call ({e}): denied")), None);
    }
    if text.len() > MAX_EVENT_BYTES {
        return (Verdict::Deny("Warden's hook got a tool call over 1 MiB: denied".into()), None);
    }
    let call = match parse(protocol, &text) {
        Ok(call) => call,
        Err(e) => return (Verdict::Deny(format!("Warden's hook: {e}: denied")), None),
    };
    let tool = Some(call.tool.clone());
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => return (Verdict::Deny(format!("Warden's hook could not start ({e}): denied")), tool),
    };
    (runtime.block_on(decide(protocol, call, max_wait)), tool)
}

async fn decide(protocol: Protocol, call: ToolCall, max_wait: Duration) -> Verdict {
    let endpoint = std::env::var("WARDEN_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:50051".to_owned());
    // The filesystem as the agent sees it: what a search reads.
    let asks = match call.asks() {
        Ok(asks) => asks,
        Err(e) => return Verdict::Deny(format!("Warden's hook: {e}: denied")),
    };
    let Some(user) = user() else {
        return Verdict::Deny("Warden's hook does not know the user (set WARDEN_USER): denied".into());
    };
    let agent = std::env::var("WARDEN_AGENT").unwrap_or_else(|_| protocol.default_agent().to_owned());
    let actor = Actor::new(user, agent, call.session.clone());
    let client = match Client::from_env().await {
        Ok(client) => client,
        Err(e) => return unreachable_deny(&endpoint, &e),
    };
    decide::decide(&client, &actor, &call.tool, &asks, &decide::Limits { endpoint, max_wait }).await
}

/// `WARDEN_USER`, else the OS user: `USER`, `LOGNAME`, or what `id -un` says.
fn user() -> Option<String> {
    let from_env =
        ["WARDEN_USER", "USER", "LOGNAME"].iter().find_map(|name| std::env::var(name).ok().filter(|u| !u.is_empty()));
    from_env.or_else(|| {
        let output = std::process::Command::new("id").arg("-un").output().ok()?;
        Some(String::from_utf8_lossy(&output.stdout).trim().to_owned())
            .filter(|u| output.status.success() && !u.is_empty())
    })
}

/// `$NAME` as a path, when set and not empty.
fn env_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from)
}

fn home() -> anyhow::Result<PathBuf> {
    env_path("HOME").context("HOME is not set")
}

/// The settings file `agent`'s hook goes into for `scope`, absolute.
fn settings_path(agent: Agent, scope: Scope, dir: &Path) -> anyhow::Result<PathBuf> {
    let project = || -> anyhow::Result<PathBuf> {
        let dir = if dir.is_absolute() { dir.to_owned() } else { std::env::current_dir()?.join(dir) };
        Ok(dir)
    };
    Ok(match (agent, scope) {
        (Agent::ClaudeCode, Scope::Project) => project()?.join(".claude/settings.json"),
        (Agent::ClaudeCode, Scope::User) => home()?.join(".claude/settings.json"),
        (Agent::ClaudeCode, Scope::Managed) => PathBuf::from("/etc/claude-code/managed-settings.json"),
        (Agent::Codex, Scope::Project) => project()?.join(".codex/config.toml"),
        (Agent::Codex, Scope::User) => {
            env_path("CODEX_HOME").map_or_else(|| home().map(|h| h.join(".codex")), Ok)?.join("config.toml")
        }
        (Agent::Gemini, Scope::Project) => project()?.join(".gemini/settings.json"),
        (Agent::Gemini, Scope::User) => {
            env_path("GEMINI_CLI_HOME").map_or_else(home, Ok)?.join(".gemini/settings.json")
        }
        (Agent::Cline, Scope::Project) => install::cline::place(&project()?.join(".clinerules/hooks"))?,
        (Agent::Cline, Scope::User) => {
            let dir = env_path("CLINE_DIR").map_or_else(|| home().map(|h| h.join(".cline")), Ok)?;
            install::cline::place(&dir.join("hooks"))?
        }
        (Agent::Opencode, Scope::Project) => project()?.join(".opencode/plugin/warden.js"),
        (Agent::Opencode, Scope::User) => env_path("XDG_CONFIG_HOME")
            .map_or_else(|| home().map(|h| h.join(".config")), Ok)?
            .join("opencode/plugin/warden.js"),
        (_, Scope::Managed) => anyhow::bail!("--scope managed is for Claude Code only; use --scope user or project"),
    })
}

fn install(
    agent: Agent,
    scope: Scope,
    dir: &Path,
    print: bool,
    max_wait: u64,
    flags: install::TargetFlags,
) -> anyhow::Result<()> {
    let path = settings_path(agent, scope, dir)?;
    let cwd = std::env::current_dir().context("cannot tell the current folder")?;
    let target = install::Target::resolve(flags, |name| std::env::var(name).ok(), &cwd)?;
    let binary = std::env::current_exe().context("cannot tell where warden-hook is")?;
    let protocol = match agent {
        Agent::ClaudeCode => "claude-code",
        Agent::Codex => "codex",
        Agent::Gemini => "gemini",
        Agent::Cline => "cline",
        Agent::Opencode => "opencode",
    };
    // Cline kills its hook at 120 s, and then runs the tool.
    let max_wait = if agent == Agent::Cline { max_wait.min(CLINE_MAX_WAIT_SECONDS) } else { max_wait };
    let command = install::hook_command(&binary, protocol, max_wait, &target)?;
    let existing = match std::fs::read_to_string(&path) {
        Ok(text) => Some(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    // The agent's timeout: the hook's longest wait, and 30 s more.
    let timeout = max_wait + 30;
    let text = match agent {
        Agent::ClaudeCode => {
            let merged = install::merge(existing.as_deref(), &command, timeout, scope == Scope::Managed, &path)?;
            serde_json::to_string_pretty(&merged)? + "\n"
        }
        Agent::Codex => {
            // Trusted for the path Codex will read it at.
            let merged = install::codex::merge(existing.as_deref(), &command, timeout, &path)?;
            toml::to_string(&merged)?
        }
        Agent::Gemini => {
            let merged = install::gemini::merge(existing.as_deref(), &command, timeout * 1000, &path)?;
            serde_json::to_string_pretty(&merged)? + "\n"
        }
        Agent::Cline => install::cline::script(&command),
        Agent::Opencode => {
            install::opencode::replaceable(existing.as_deref(), &path)?;
            let binary = binary.to_str().context("warden-hook's path is not UTF-8")?.to_owned();
            let argv = [binary, "opencode".into(), "--max-wait".into(), max_wait.to_string()];
            install::opencode::plugin(&argv, &target.env()?, timeout * 1000)
        }
    };
    warn_about_the_token(target.token_file.as_deref());
    if print {
        let mut out = std::io::stdout().lock();
        out.write_all(text.as_bytes()).and_then(|()| out.flush()).context("writing the settings to stdout")?;
        return Ok(());
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    }
    // Written whole or not at all, through a file made new here: a link
    // planted at a fixed temporary name would have the write follow it.
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let temporary = path.with_extension(format!("warden-tmp-{}-{nanos}", std::process::id()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&temporary)
        .with_context(|| format!("creating {}", temporary.display()))?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .with_context(|| format!("writing {}", temporary.display()))?;
    drop(file);
    if agent == Agent::Cline {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&temporary, std::fs::Permissions::from_mode(0o755))
            .with_context(|| format!("making {} executable", temporary.display()))?;
    }
    std::fs::rename(&temporary, &path).with_context(|| format!("writing {}", path.display()))?;
    eprintln!("warden-hook: the hook is in {}", path.display());
    let token = match &target.token_file {
        Some(file) => format!("the token in {}", file.display()),
        None => "the token from the agent's environment".to_owned(),
    };
    eprintln!("warden-hook: it asks the monitor at {} with {token}", target.endpoint);
    match (agent, scope) {
        (Agent::Codex, Scope::Project) => eprintln!(
            "warden-hook: Codex reads a project's .codex/config.toml only when the project is trusted \
             (`warden-hook doctor codex --scope project` checks)"
        ),
        (Agent::Gemini, Scope::Project) => eprintln!(
            "warden-hook: Gemini CLI runs a project's hooks only in a trusted folder; --scope user runs them everywhere"
        ),
        _ => {}
    }
    Ok(())
}

/// `warden-hook doctor codex`: whether the installed hook would run.
fn doctor_codex(scope: Scope, dir: &Path) -> anyhow::Result<bool> {
    let path = settings_path(Agent::Codex, scope, dir)?;
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            println!("no: {} does not exist; run `warden-hook install codex`", path.display());
            return Ok(false);
        }
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let report = install::codex::check(&text, &path);
    for line in &report.lines {
        println!("{line}");
    }
    Ok(report.runs)
}

/// Whether `error` is a write to a pipe whose reader closed it.
fn reader_gone(error: &anyhow::Error) -> bool {
    error
        .chain()
        .any(|cause| cause.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe))
}

/// Says where the installed hook will find its token when the entry names
/// no file, or why the file named cannot be used now.
fn warn_about_the_token(token_file: Option<&Path>) {
    match token_file {
        None => eprintln!(
            "warden-hook: warning: no token file given (--token-file or WARDEN_TOKEN_FILE): the hook will read \
             WARDEN_TOKEN or WARDEN_TOKEN_FILE from the environment Claude Code runs in, and deny every tool call \
             without one"
        ),
        // Read as the hook will read it (the SDK refuses a file others may
        // read or write); the value goes no further.
        Some(file) => {
            if let Err(e) = warden_sdk::read_token_file(file) {
                eprintln!(
                    "warden-hook: warning: the token file cannot be used now ({e}); the hook denies every tool call \
                     until it can be, read as the user Claude Code runs as"
                );
            }
        }
    }
}
