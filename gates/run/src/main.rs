//! `warden-run [--user U] [--session ID] [--workspace DIR] -- COMMAND…`: the
//! command in a box (bubblewrap) whose only way out is the run's
//! `warden-proxy`, asking Warden as one session; see the crate's docs.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use clap::Parser;
use warden_proxy::ca::Authority;
use warden_proxy::clients::{Clients, DEFAULT_MAX_CONNECTIONS};
use warden_proxy::proxy::{self, Listener, Settings};
use warden_proxy::secrets::Secrets;
use warden_run::config::{RunConfig, expand};
use warden_run::rundir::{RunDir, valid_session};
use warden_run::{agents, inside, pin, sandbox, summary, terminal};
use warden_sdk::Actor;

/// The hidden first argument of `warden-run` run again inside the box.
const INSIDE: &str = "__inside";

/// Runs an agent in a box whose only way out is Warden's egress proxy, as
/// one Warden session, with no Warden token inside.
#[derive(Parser, Debug)]
#[command(name = "warden-run", version = warden_version::VERSION)]
struct Flags {
    /// The user the agent acts for [default: WARDEN_USER, else the OS user]
    #[arg(long)]
    user: Option<String>,
    /// The agent kind, as policies name it [default: the command's name]
    #[arg(long)]
    agent: Option<String>,
    /// The run's session id [default: a new one, printed at start]
    #[arg(long)]
    session: Option<String>,
    /// The folder the agent works in, read-write [default: the current folder]
    #[arg(long, value_name = "DIR")]
    workspace: Option<PathBuf>,
    /// What every run's box adds (run.toml: [box] hide, workspace_secrets,
    /// writable, env; [secrets] file, env) [default:
    /// $XDG_CONFIG_HOME/warden/run.toml, when there]
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// A folder or file the agent must not see at all (repeatable; the
    /// user's credential folders, the token file's folder and the
    /// workspace's `.env*` and key files are hidden anyway)
    #[arg(long, value_name = "PATH")]
    hide: Vec<PathBuf>,
    /// Secrets the proxy puts into requests in place of `warden-secret:NAME`
    /// (after `secret.use` for that destination): a TOML file of
    /// `NAME = "value"` lines, mode 0600, as warden-proxy's --secrets
    #[arg(long, value_name = "FILE")]
    secrets: Option<PathBuf>,
    /// A variable the box gets as `warden-secret:NAME`, for a secret of
    /// --secrets (repeatable). ANTHROPIC_API_KEY, OPENAI_API_KEY and
    /// GEMINI_API_KEY found in warden-run's environment become such
    /// placeholders by themselves
    #[arg(long, value_name = "VAR=NAME")]
    secret_env: Vec<String>,
    /// A variable to pass into the box: `NAME` (its value here) or
    /// `NAME=VALUE` (repeatable). Nothing else of warden-run's environment
    /// goes in but PATH, HOME, USER, LANG, LC_*, TERM and a few like them
    #[arg(long = "env", value_name = "NAME[=VALUE]")]
    pass_env: Vec<String>,
    /// PEM certificates the proxy trusts for upstream servers, besides the
    /// system's
    #[arg(long, value_name = "FILE")]
    upstream_ca: Option<PathBuf>,
    /// Run the command unconfined: it can read the user's credentials and
    /// reach the network around the proxy (a warning says so at every start)
    #[arg(long)]
    no_sandbox: bool,
    /// `warden-hook`, which a coding agent run in the box (Claude Code) gets
    /// as its pre-tool hook [default: next to warden-run]
    #[arg(long, value_name = "PATH")]
    hook: Option<PathBuf>,
    /// Print the run's summary at the end as one JSON object (on standard
    /// error, as the text summary is)
    #[arg(long)]
    json: bool,
    /// `warden-mcp`, in front of each of Claude Code's MCP servers in the
    /// box [default: next to warden-run]
    #[arg(long, value_name = "PATH")]
    gateway: Option<PathBuf>,
    /// bubblewrap's program
    #[arg(long, env = "WARDEN_BWRAP", value_name = "PATH", default_value = "bwrap")]
    bwrap: PathBuf,
    /// The command and its arguments
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "COMMAND")]
    command: Vec<String>,
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(INSIDE) {
        return run_inside(args.get(2..).unwrap_or_default());
    }
    let flags = Flags::parse();
    match run(flags) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("warden-run: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// In the box: `ADDRESS SOCKET -- COMMAND…`.
fn run_inside(args: &[String]) -> ExitCode {
    let [address, socket, dashes, command @ ..] = args else {
        eprintln!("warden-run: {INSIDE} takes ADDRESS SOCKET -- COMMAND…");
        return ExitCode::FAILURE;
    };
    if dashes != "--" {
        eprintln!("warden-run: {INSIDE} takes ADDRESS SOCKET -- COMMAND…");
        return ExitCode::FAILURE;
    }
    if let Err(e) = inside::relay(address, Path::new(socket)) {
        eprintln!("warden-run: cannot relay {address} to the proxy: {e}");
        return ExitCode::FAILURE;
    }
    // An interactive run: the run's terminal is the session's, and its
    // interrupt key is the agent's to handle.
    let _outlive = match terminal::control() {
        Ok(true) => match inside::Outlive::interrupts() {
            Ok(outlive) => Some(outlive),
            Err(e) => {
                eprintln!("warden-run: cannot keep the run through the interrupt key: {e}");
                return ExitCode::FAILURE;
            }
        },
        Ok(false) => None,
        Err(e) => {
            eprintln!("warden-run: cannot take the run's terminal: {e}");
            return ExitCode::FAILURE;
        }
    };
    match inside::run(command) {
        Ok(status) => ExitCode::from(inside::code(status)),
        Err(e) => {
            eprintln!("warden-run: cannot run `{}`: {e}", command.first().map_or("", String::as_str));
            ExitCode::from(127)
        }
    }
}

/// `--config`, else `$XDG_CONFIG_HOME/warden/run.toml` (or
/// `~/.config/warden/run.toml`) when it exists, else nothing.
fn run_config(flag: Option<&Path>, home: Option<&Path>) -> anyhow::Result<RunConfig> {
    if let Some(path) = flag {
        return RunConfig::load(path).context("--config");
    }
    let config_home = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| home.map(|h| h.join(".config")));
    match config_home.map(|dir| dir.join("warden/run.toml")) {
        Some(path) if path.is_file() => RunConfig::load(&path),
        _ => Ok(RunConfig::default()),
    }
}

/// Where `program` is: itself when it names a path, else the first of PATH.
fn which(program: &Path) -> Option<PathBuf> {
    if program.components().count() > 1 {
        return Some(program.to_owned());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(program)).find(|p| p.is_file())
}

/// The program a command runs, for messages.
fn command_name(command: &[String]) -> &str {
    command.first().map_or("", String::as_str)
}

/// `WARDEN_USER`, else the OS user.
fn os_user() -> Option<String> {
    ["WARDEN_USER", "USER", "LOGNAME"].iter().find_map(|name| std::env::var(name).ok().filter(|u| !u.is_empty()))
}

fn token() -> anyhow::Result<(String, Option<PathBuf>)> {
    match (std::env::var("WARDEN_TOKEN"), std::env::var("WARDEN_TOKEN_FILE")) {
        (Ok(token), _) if !token.is_empty() => Ok((token, None)),
        (_, Ok(path)) => {
            let token = warden_sdk::read_token_file(&path).context("WARDEN_TOKEN_FILE")?;
            Ok((token, Some(PathBuf::from(path))))
        }
        _ => bail!("no harness token: set WARDEN_TOKEN_FILE (or WARDEN_TOKEN); the agent never sees it"),
    }
}

/// Whether bubblewrap can make the box here; why not, when it cannot.
fn check_sandbox(bwrap: &Path) -> anyhow::Result<()> {
    let probe = std::process::Command::new(bwrap)
        .args(["--unshare-user", "--unshare-pid", "--unshare-net", "--disable-userns", "--die-with-parent"])
        .args(["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--", "true"])
        .env_clear()
        .stdin(std::process::Stdio::null())
        .output();
    let cannot = "cannot confine the agent";
    let unconfined = "(or run it unconfined, knowingly, with --no-sandbox)";
    match probe {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
            "{cannot}: bubblewrap (`{}`) is not installed: `apt-get install bubblewrap` {unconfined}",
            bwrap.display()
        ),
        Err(e) => bail!("{cannot}: `{}` does not run: {e} {unconfined}", bwrap.display()),
        Ok(out) if !out.status.success() => bail!(
            "{cannot}: bubblewrap cannot make the namespaces here: {}; unprivileged user namespaces must be allowed \
             (/proc/sys/user/max_user_namespaces above 0, kernel.unprivileged_userns_clone=1, Ubuntu's \
             kernel.apparmor_restrict_unprivileged_userns=0, a container's seccomp profile), and bubblewrap 0.8 or \
             later {unconfined}",
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        Ok(_) => Ok(()),
    }
}

/// The proxy's secrets (`file`, and the model API keys of warden-run's
/// environment), and the box's variables that hold their placeholders
/// (those and `secret_env`'s, `VAR=NAME`).
fn secrets(file: Option<&Path>, secret_env: &[String], store: &mut Secrets) -> anyhow::Result<Vec<(String, String)>> {
    if let Some(path) = file {
        *store = Secrets::load(path)?;
    }
    let mut placeholders = Vec::new();
    for (variable, name) in sandbox::MODEL_KEYS {
        let Ok(value) = std::env::var(variable) else { continue };
        if value.is_empty() || value.starts_with("warden-secret:") {
            continue;
        }
        store.insert((*name).to_owned(), value).map_err(|e| anyhow::anyhow!("{variable}: {e}"))?;
        placeholders.push(((*variable).to_owned(), sandbox::placeholder(name)));
    }
    for pair in secret_env {
        let Some((variable, name)) = pair.split_once('=') else {
            bail!("--secret-env `{pair}`: VAR=NAME");
        };
        if store.get(name).is_none() {
            bail!("--secret-env `{pair}`: no secret `{name}` in --secrets");
        }
        placeholders.push((variable.to_owned(), sandbox::placeholder(name)));
    }
    Ok(placeholders)
}

fn run(flags: Flags) -> anyhow::Result<u8> {
    let Some(user) = flags.user.clone().or_else(os_user) else {
        bail!("no user to act for: give --user or set WARDEN_USER");
    };
    let outer: Vec<(String, String)> = std::env::vars().collect();
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let config = run_config(flags.config.as_deref(), home.as_deref())?;
    let workspace = match &flags.workspace {
        Some(dir) => dir.clone(),
        None => std::env::current_dir().context("the current folder")?,
    };
    let workspace = workspace
        .canonicalize()
        .ok()
        .filter(|w| w.is_dir())
        .with_context(|| format!("--workspace {}: not a folder", workspace.display()))?;
    let here = std::env::current_exe().context("warden-run's own path")?;
    let hook = flags.hook.clone().unwrap_or_else(|| here.with_file_name("warden-hook"));
    let gateway = flags.gateway.clone().unwrap_or_else(|| here.with_file_name("warden-mcp"));
    // A coding agent this knows gets its hook for the run.
    let kind = agents::kind(&flags.command);
    if kind.is_some() && !hook.is_file() {
        bail!(
            "`{}` runs with warden-hook as its hook, which is not at {}: give --hook PATH",
            command_name(&flags.command),
            hook.display()
        );
    }
    let program = flags.command.first().map(|c| Path::new(c).file_name().map(|n| n.to_string_lossy().into_owned()));
    let agent = match (&flags.agent, kind) {
        (Some(agent), _) => agent.clone(),
        (None, Some(kind)) => kind.to_owned(),
        (None, None) => program.flatten().unwrap_or_else(|| "agent".into()),
    };
    let session = flags.session.clone().unwrap_or_else(|| format!("run-{}", uuid::Uuid::new_v4()));
    if !valid_session(&session) {
        bail!("--session `{session}`: 1 to 128 of A-Z a-z 0-9 . _ -, not starting with a dot");
    }
    let (token, token_file) = token()?;
    if flags.no_sandbox {
        eprintln!(
            "warden-run: WARNING: --no-sandbox: `{}` runs unconfined: it can read your credentials and the Warden \
             token file, and reach the network around the proxy",
            flags.command.join(" ")
        );
    } else {
        check_sandbox(&flags.bwrap)?;
    }
    let endpoint = std::env::var("WARDEN_ENDPOINT").unwrap_or_else(|_| warden_sdk::DEFAULT_ENDPOINT.to_owned());
    let run_dir = RunDir::create(&session).context("the run's folder")?;
    // The agent's folder: in the box's /run, or the run's folder unconfined.
    let agent_outside = run_dir.path().join("agent");
    let agent_dir = if flags.no_sandbox { agent_outside.clone() } else { PathBuf::from(agents::AGENT_HOME) };
    let known = match kind {
        Some(kind) => Some(agents::setup(
            kind,
            &agents::Inputs { hook: &hook, outer: &outer, home: home.as_deref(), agent_dir: &agent_dir },
        )?),
        None => None,
    };
    let mut command = flags.command.clone();
    let mut agent_files = Vec::new();
    if let Some(known) = &known {
        command.splice(1..1, known.args.iter().cloned());
        for (relative, text) in &known.files {
            let outside = agent_outside.join(relative);
            if let Some(parent) = outside.parent() {
                std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
            }
            std::fs::write(&outside, text).with_context(|| format!("writing {}", outside.display()))?;
            agent_files.push((outside, agent_dir.join(relative)));
        }
    }
    if kind == Some("claude-code") {
        // Its MCP servers, each behind warden-mcp in the box, and no other.
        let servers = agents::claude_mcp_servers(&workspace, home.as_deref());
        if !servers.is_empty() && !gateway.is_file() {
            bail!(
                "Claude Code's MCP servers run behind warden-mcp, which is not at {}: give --gateway PATH",
                gateway.display()
            );
        }
        let (mcp, left_out) = agents::behind_gateway(&servers, &gateway);
        for server in left_out {
            eprintln!("warden-run: MCP server {server} is left out of the run");
        }
        command.splice(1..1, ["--mcp-config".to_owned(), mcp.to_string(), "--strict-mcp-config".to_owned()]);
    }
    let ca = Authority::load_or_create(&run_dir.proxy_data())?;
    let bundle = run_dir.write_ca_bundle(ca.cert_pem()).context("the CA bundle")?;
    let mut settings = Settings::new(Clients::fixed(
        Actor::new(user.clone(), agent.clone(), session.clone()),
        DEFAULT_MAX_CONNECTIONS,
    ));
    let secrets_file =
        flags.secrets.clone().or_else(|| config.secrets.file.as_deref().map(|f| expand(f, home.as_deref())));
    let secret_env: Vec<String> = flags
        .secret_env
        .iter()
        .cloned()
        .chain(config.secrets.env.iter().map(|(variable, name)| format!("{variable}={name}")))
        .collect();
    let mut placeholders = secrets(secrets_file.as_deref(), &secret_env, &mut settings.secrets)?;
    for pass in flags.pass_env.iter().chain(&config.sandbox.env) {
        let (name, value) = match pass.split_once('=') {
            Some((name, value)) => (name.to_owned(), value.to_owned()),
            None => (pass.clone(), std::env::var(pass).with_context(|| format!("--env {pass}: not set"))?),
        };
        if name.is_empty() || name.starts_with("WARDEN_") {
            bail!("--env `{pass}`: not a variable the box may be given");
        }
        // A secret's placeholder is not to be replaced by its value.
        if placeholders.iter().any(|(held, _)| *held == name) {
            bail!("--env `{pass}`: {name} holds a secret's placeholder in the box; the proxy puts the value in");
        }
        placeholders.push((name, value));
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    for cert in rustls_native_certs::load_native_certs().certs {
        let _ = settings.upstream_roots.add(cert);
    }
    if let Some(path) = &flags.upstream_ca {
        let pem = std::fs::read(path).with_context(|| format!("--upstream-ca {}", path.display()))?;
        for cert in rustls::pki_types::pem::PemObject::pem_slice_iter(&pem) {
            let cert: rustls::pki_types::CertificateDer<'static> =
                cert.with_context(|| format!("--upstream-ca {}: not PEM certificates", path.display()))?;
            settings.upstream_roots.add(cert).with_context(|| format!("--upstream-ca {}", path.display()))?;
        }
    }
    if let Some(known) = known {
        placeholders.extend(known.env);
    }
    // What the box cannot make read-only because it is not there yet.
    let absent = if flags.no_sandbox { vec![] } else { sandbox::absent_read_only(&workspace) };
    let mut hidden = flags.hide.clone();
    // The run's secrets, wherever the file is.
    hidden.extend(secrets_file.iter().cloned());
    hidden.extend(config.sandbox.hide.iter().map(|p| expand(p, home.as_deref())));
    // The token's folder (a monitor's data folder holds every role's).
    if let Some(folder) = token_file.as_deref().and_then(Path::parent) {
        hidden.push(folder.to_owned());
    }

    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    // The box is spawned from this (the main) thread, which lives until the
    // run ends: bubblewrap's --die-with-parent follows the thread that
    // spawned it.
    runtime.block_on(async move {
        let socket = run_dir.proxy_socket();
        let listener = Listener::bind(&format!("unix:{}", socket.display()))
            .await
            .with_context(|| format!("the proxy's socket {}", socket.display()))?;
        let warden = warden_sdk::Client::connect_lazy(endpoint, &token).await?;
        // Every gate asks through a door of the run, which holds the token,
        // asks as the run's actor and keeps the tally: the proxy's outside
        // the box, the hook's inside it.
        let actor = Actor::new(user.clone(), agent.clone(), session.clone());
        let tally = std::sync::Arc::new(std::sync::Mutex::new(summary::Tally::default()));
        let doors = [("proxy", run_dir.path().join("proxy-door.sock")), ("hook", run_dir.monitor_socket())];
        for (gate, path) in &doors {
            let door =
                tokio::net::UnixListener::bind(path).with_context(|| format!("the run's socket {}", path.display()))?;
            let pin = pin::Pin::new(warden.clone(), actor.clone(), gate, std::sync::Arc::clone(&tally));
            tokio::spawn(pin::serve(door, pin));
        }
        let proxy_door = format!("unix:{}", doors[0].1.display());
        let proxy_client = warden_sdk::Client::connect(proxy_door, pin::MARKER_TOKEN).await?;
        tokio::spawn(proxy::serve(listener, proxy_client, ca, settings));
        eprintln!("warden-run: session {session} ({user}, {agent}); workspace {}", workspace.display());
        let run = sandbox::RunEnv {
            user: user.clone(),
            agent: agent.clone(),
            session: session.clone(),
            proxy: sandbox::PROXY_ADDRESS.into(),
            bundle: sandbox::CA_BUNDLE.into(),
            monitor: format!("unix:{}", sandbox::MONITOR_SOCKET),
            placeholders,
        };
        // An interactive run gets a terminal of its own (the no-sandbox
        // run keeps the user's: it is not confined anyway).
        let pty = if !flags.no_sandbox && terminal::interactive() {
            Some(terminal::Pty::new().context("the run's terminal")?)
        } else {
            None
        };
        let mut child = if flags.no_sandbox {
            let relayed = inside::relay("127.0.0.1:0", &socket).context("the relay to the proxy")?;
            let run = sandbox::RunEnv {
                proxy: relayed.to_string(),
                bundle: bundle.to_string_lossy().into_owned(),
                monitor: format!("unix:{}", run_dir.monitor_socket().display()),
                ..run
            };
            let env = sandbox::box_env(&outer, &run);
            let (program, args) = command.split_first().context("no command")?;
            std::process::Command::new(program)
                .args(args)
                .env_clear()
                .envs(env)
                .current_dir(&workspace)
                .spawn()
                .with_context(|| format!("cannot run `{program}`"))?
        } else {
            let exe = std::env::current_exe().context("warden-run's own path")?;
            let mut inside_argv = vec![exe.into_os_string(), INSIDE.into()];
            inside_argv.extend([sandbox::PROXY_ADDRESS.into(), sandbox::PROXY_SOCKET.into(), "--".into()]);
            inside_argv.extend(command.iter().map(Into::into));
            let spec = sandbox::BoxSpec {
                run_dir: run_dir.path().to_owned(),
                workspace: workspace.clone(),
                home: home.clone(),
                hidden,
                secret_patterns: config.sandbox.workspace_secrets.clone(),
                writable: config.sandbox.writable.iter().map(|p| expand(p, home.as_deref())).collect(),
                // What runs (or configures) the next run, outside the box:
                // never rewritten from inside, wherever it sits.
                read_only: [
                    Some(here.clone()),
                    Some(hook.clone()),
                    Some(gateway.clone()),
                    flags.config.clone(),
                    which(&flags.bwrap),
                ]
                .into_iter()
                .flatten()
                .collect(),
                files: agent_files,
                env: sandbox::box_env(&outer, &run),
                inside: inside_argv,
            };
            let mut bwrap = std::process::Command::new(&flags.bwrap);
            bwrap.args(sandbox::bwrap_args(&spec, &run_dir.empty())).env_clear();
            if let Some(pty) = &pty {
                bwrap.stdin(pty.slave()?).stdout(pty.slave()?).stderr(pty.slave()?);
            } else {
                // Not interactive: none of the user's terminals goes into
                // the box; what it writes there is copied by warden-run.
                let [input, output, error] = terminal::terminals();
                if input {
                    bwrap.stdin(std::process::Stdio::null());
                }
                if output {
                    bwrap.stdout(std::process::Stdio::piped());
                }
                if error {
                    bwrap.stderr(std::process::Stdio::piped());
                }
            }
            bwrap.spawn().with_context(|| format!("cannot start `{}`", flags.bwrap.display()))?
        };
        let mut copies = Vec::new();
        if let Some(out) = child.stdout.take() {
            copies.push(terminal::copy_out(out, std::io::stdout()));
        }
        if let Some(err) = child.stderr.take() {
            copies.push(terminal::copy_out(err, std::io::stderr()));
        }
        // The user's keys to the box and its screen back, the user's terminal
        // raw meanwhile; its size follows the user's.
        let screen = match pty {
            Some(pty) => {
                let master = pty.into_master();
                let follower = master.try_clone()?;
                let mut resized = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change())?;
                tokio::spawn(async move {
                    while resized.recv().await.is_some() {
                        terminal::follow_size(&follower);
                    }
                });
                let raw = terminal::Raw::enter().context("the terminal's raw mode")?;
                Some((raw, terminal::relay(master)?))
            }
            None => None,
        };
        let status = tokio::task::spawn_blocking(move || child.wait()).await??;
        for copy in copies {
            let _ = tokio::task::spawn_blocking(move || copy.join()).await;
        }
        if let Some((raw, shown)) = screen {
            // What the box wrote last, then the user's terminal as it was.
            let _ = tokio::task::spawn_blocking(move || shown.join()).await;
            drop(raw);
        }
        drop(run_dir);
        for (made, aside) in sandbox::set_aside(&absent, &session) {
            eprintln!(
                "warden-run: WARNING: the run made {}, which would run or configure code outside the box: set aside \
                 as {}",
                made.display(),
                aside.display()
            );
        }
        let code = inside::code(status);
        let tally = tally.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if flags.json {
            eprintln!("{}", tally.json(&session, code));
        } else {
            eprint!("{}", tally.text(&session, code));
        }
        Ok(code)
    })
}
