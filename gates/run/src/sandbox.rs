//! The box, pure: what bubblewrap is told (namespaces, what is visible and
//! writable, the environment) for a run, from what exists on disk now.
//!
//! The agent sees the system read-only, its workspace read-write, a private
//! `/tmp` and `/run`, and nothing of the user's credentials, the monitor's
//! data or the run's own folder; its network is a loopback of its own, where
//! the relay (`warden-run __inside`) forwards the proxy port to the run's
//! `warden-proxy` outside.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Where the run's folder appears inside the box.
pub const INSIDE: &str = "/run/warden";
/// The proxy's socket inside the box.
pub const PROXY_SOCKET: &str = "/run/warden/sock/proxy.sock";
/// The run's door to the monitor inside the box (`pin`).
pub const MONITOR_SOCKET: &str = "/run/warden/sock/monitor.sock";
/// The CA bundle inside the box: the system's roots and the proxy's CA.
pub const CA_BUNDLE: &str = "/run/warden/ca-bundle.pem";
/// Where the relay listens inside the box.
pub const PROXY_ADDRESS: &str = "127.0.0.1:3128";

/// The user's credential folders and files, relative to the home folder:
/// not there at all inside the box.
pub const HOME_CREDENTIALS: &[&str] = &[
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".config/gh",
    ".config/hub",
    ".docker/config.json",
    ".kube",
    ".netrc",
    ".git-credentials",
    ".npmrc",
    ".pypirc",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".password-store",
    ".vault-token",
    ".pgpass",
    ".terraform.d/credentials.tfrc.json",
    // Coding agents' own logins and settings (their MCP servers' tokens).
    ".claude.json",
    ".claude/.credentials.json",
    ".codex",
    ".gemini",
    // Warden's own: run.toml and the run's secrets file.
    ".config/warden",
    // Shells' startup files (an `export API_KEY=…`) and histories.
    ".bashrc",
    ".bash_profile",
    ".profile",
    ".zshrc",
    ".zprofile",
    ".zshenv",
    ".bash_history",
    ".zsh_history",
    ".histfile",
    ".local/share/fish/fish_history",
    ".python_history",
    ".node_repl_history",
    ".psql_history",
    ".mysql_history",
    // Browsers' profiles (cookies, saved passwords).
    ".mozilla",
    ".config/google-chrome",
    ".config/chromium",
];

/// Files in the workspace that hold credentials, by name: shown empty.
pub fn is_workspace_secret(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    let env = lower == ".env"
        || (lower.starts_with(".env.") && !matches!(lower.as_str(), ".env.example" | ".env.sample" | ".env.template"));
    // `.token`: a Warden data folder's role tokens (`harness.token` …).
    let key = [".pem", ".key", ".p12", ".pfx", ".jks", ".keystore", ".token"].iter().any(|end| lower.ends_with(end));
    // An editor's backup of one (`.env~`) is one too.
    let backup = lower.strip_suffix('~').is_some_and(is_workspace_secret);
    env || key
        || backup
        || matches!(
            lower.as_str(),
            "id_rsa" | "id_ecdsa" | "id_ed25519" | "id_dsa" | ".netrc" | ".npmrc" | ".pypirc" | ".envrc"
        )
}

/// Folders of the workspace that are not searched for secrets (generated or
/// vendored trees; the agent reads them like any other file).
const NOT_SEARCHED: &[&str] = &[".git", "node_modules", "target", ".venv", "venv", "__pycache__"];
/// How deep, and how many entries at most, the workspace is searched.
const SEARCH_DEPTH: usize = 8;
const SEARCH_ENTRIES: usize = 100_000;

/// The agent's own settings, and what git, editors and direnv run later
/// outside the box: read-only inside the workspace. `.git` whole: its
/// config, hooks, `commondir` and submodules' all run code outside, and a
/// renamed copy would carry no mount (the agent does not commit in the box).
pub const WORKSPACE_READ_ONLY: &[&str] = &[
    ".claude",
    ".mcp.json",
    ".codex",
    ".gemini",
    ".clinerules",
    ".cline",
    ".opencode",
    "opencode.json",
    "opencode.jsonc",
    ".cursor",
    ".git",
    ".envrc",
    ".vscode",
];

/// The read-only names of `workspace` that are not there now: the box
/// cannot make them read-only, so what the agent makes there is set aside
/// after the run ([`set_aside`]).
pub fn absent_read_only(workspace: &Path) -> Vec<PathBuf> {
    WORKSPACE_READ_ONLY
        .iter()
        .map(|relative| workspace.join(relative))
        .filter(|path| std::fs::symlink_metadata(path).is_err())
        .collect()
}

/// Renames each of `paths` that exists now to `NAME.from-warden-run-SESSION`
/// (an agent's settings, git folder or direnv file made in the box would
/// otherwise run outside it later); returns what was set aside, and where.
pub fn set_aside(paths: &[PathBuf], session: &str) -> Vec<(PathBuf, PathBuf)> {
    let mut moved = Vec::new();
    for path in paths {
        if std::fs::symlink_metadata(path).is_err() {
            continue;
        }
        let mut aside = path.clone().into_os_string();
        aside.push(format!(".from-warden-run-{session}"));
        let aside = PathBuf::from(aside);
        if std::fs::rename(path, &aside).is_ok() {
            moved.push((path.clone(), aside));
        }
    }
    moved
}

/// The environment variables passed into the box as they are; every other
/// one (tokens, keys, agent sockets) stays outside.
pub const PASSED_ENV: &[&str] =
    &["PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "TERM", "TZ", "COLORTERM", "NO_COLOR"];

/// What a box is made of.
#[derive(Debug, Clone)]
pub struct BoxSpec {
    /// The run's folder outside: `sock/` and `ca-bundle.pem` are shown
    /// inside at [`INSIDE`]; the rest (the proxy's CA key) is not.
    pub run_dir: PathBuf,
    /// The workspace, read-write.
    pub workspace: PathBuf,
    /// The user's home folder, whose credentials are hidden.
    pub home: Option<PathBuf>,
    /// More folders or files not to be there at all (the monitor's data
    /// folder, token files).
    pub hidden: Vec<PathBuf>,
    /// More file name patterns shown empty in the workspace (`run.toml`).
    pub secret_patterns: Vec<String>,
    /// Paths read-write besides the workspace (`run.toml`).
    pub writable: Vec<PathBuf>,
    /// Paths read-only whatever is around them (warden-run's own binaries,
    /// its config and secrets files, when they sit in the workspace).
    pub read_only: Vec<PathBuf>,
    /// Files shown read-only in the box: (outside, inside). The agent's
    /// settings with its hook, in its folder in the box's `/run`.
    pub files: Vec<(PathBuf, PathBuf)>,
    /// The environment inside, in order.
    pub env: Vec<(String, String)>,
    /// The program that runs inside (`warden-run` itself, as the relay).
    pub inside: Vec<OsString>,
}

/// A path that exists now, with its links followed (a mask is mounted where
/// the path leads); `None` for one that does not (nothing to hide, and
/// bubblewrap cannot mount over nothing).
fn existing(path: &Path) -> Option<(PathBuf, bool)> {
    let real = std::fs::canonicalize(path).ok()?;
    let dir = std::fs::metadata(&real).ok()?.is_dir();
    Some((real, dir))
}

/// The workspace's secret files, found now (bounded): the known ones and
/// those matching `patterns` (`*` for any run of characters).
pub fn workspace_secrets(workspace: &Path, patterns: &[String]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut seen = 0usize;
    let mut stack = vec![(workspace.to_owned(), 0usize)];
    while let Some((dir, depth)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            seen += 1;
            if seen > SEARCH_ENTRIES {
                eprintln!(
                    "warden-run: WARNING: the workspace has more than {SEARCH_ENTRIES} entries; files past them are \
                     not searched for credentials (list them in run.toml's workspace_secrets, or hide their folder)"
                );
                return found;
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            let Ok(kind) = entry.file_type() else { continue };
            // A link to a file is masked where it leads: its name is what
            // says it holds a credential.
            let kind = if kind.is_symlink() {
                match std::fs::metadata(entry.path()) {
                    Ok(meta) if meta.is_file() => meta.file_type(),
                    _ => continue,
                }
            } else {
                kind
            };
            if kind.is_dir() {
                if depth < SEARCH_DEPTH && !NOT_SEARCHED.contains(&name.as_str()) {
                    stack.push((entry.path(), depth + 1));
                }
            } else if kind.is_file()
                && (is_workspace_secret(&name) || patterns.iter().any(|p| crate::config::matches(p, &name)))
            {
                found.push(entry.path());
            }
        }
    }
    found.sort();
    found
}

/// Folders outside `/run` and `/tmp` where services keep their unix
/// sockets (container engines, Nix's daemon): any socket below them is
/// masked, as the home folder's are.
pub const SOCKET_PLACES: &[&str] = &["/var/lib", "/var/snap", "/nix/var", "/var/run/docker.sock"];
/// How deep and how many entries at most a place is searched for sockets.
const SOCKET_DEPTH: usize = 5;
const SOCKET_ENTRIES: usize = 200_000;

/// The unix sockets below `roots`, found now (bounded): a socket reaches a
/// process outside the box (a container engine, an agent, a daemon) from
/// any network namespace.
pub fn sockets(roots: &[PathBuf]) -> Vec<PathBuf> {
    use std::os::unix::fs::FileTypeExt as _;
    let mut found = Vec::new();
    let mut seen = 0usize;
    let mut stack: Vec<(PathBuf, usize)> = roots.iter().map(|r| (r.clone(), 0)).collect();
    while let Some((dir, depth)) = stack.pop() {
        if let Ok(meta) = std::fs::symlink_metadata(&dir)
            && meta.file_type().is_socket()
        {
            found.push(dir);
            continue;
        }
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            seen += 1;
            if seen > SOCKET_ENTRIES {
                return found;
            }
            let Ok(kind) = entry.file_type() else { continue };
            if kind.is_socket() {
                found.push(entry.path());
            } else if kind.is_dir() && depth < SOCKET_DEPTH {
                stack.push((entry.path(), depth + 1));
            }
        }
    }
    found
}

/// bubblewrap's arguments for `spec`, masks for what exists now included;
/// `empty`: a 0-byte read-only file that masks files.
pub fn bwrap_args(spec: &BoxSpec, empty: &Path) -> Vec<OsString> {
    let mut args: Vec<OsString> = Vec::new();
    let mut push = |items: &[&std::ffi::OsStr]| args.extend(items.iter().map(|s| s.to_os_string()));
    // New user, mount, PID, network, IPC and UTS namespaces; no more user
    // namespaces inside; the box dies with warden-run; a new session, so
    // the agent cannot push input into the terminal (TIOCSTI).
    for flag in [
        "--unshare-user",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--disable-userns",
        "--die-with-parent",
        "--new-session",
        "--hostname",
        "warden-run",
    ] {
        push(&[flag.as_ref()]);
    }
    // The system read-only; devices, /proc and a private /tmp and /run
    // (no host sockets: agents, D-Bus, docker, the resolver, wardend's).
    push(&["--ro-bind".as_ref(), "/".as_ref(), "/".as_ref()]);
    push(&["--dev".as_ref(), "/dev".as_ref(), "--proc".as_ref(), "/proc".as_ref()]);
    for tmp in ["/tmp", "/var/tmp", "/run", "/dev/shm"] {
        push(&["--tmpfs".as_ref(), tmp.as_ref()]);
    }
    let sock = spec.run_dir.join("sock");
    let bundle = spec.run_dir.join("ca-bundle.pem");
    push(&["--ro-bind".as_ref(), sock.as_os_str(), Path::new(INSIDE).join("sock").as_os_str()]);
    push(&["--ro-bind".as_ref(), bundle.as_os_str(), CA_BUNDLE.as_ref()]);
    for (outside, inside) in &spec.files {
        push(&["--ro-bind".as_ref(), outside.as_os_str(), inside.as_os_str()]);
    }
    // The workspace read-write, with its secrets empty and the agent's
    // settings read-only.
    push(&["--bind".as_ref(), spec.workspace.as_os_str(), spec.workspace.as_os_str()]);
    for (path, _) in spec.writable.iter().filter_map(|p| existing(p)) {
        push(&["--bind".as_ref(), path.as_os_str(), path.as_os_str()]);
    }
    let mut masks: Vec<(PathBuf, bool)> = Vec::new();
    if let Some(home) = &spec.home {
        masks.extend(HOME_CREDENTIALS.iter().filter_map(|p| existing(&home.join(p))));
    }
    masks.extend(spec.hidden.iter().filter_map(|p| existing(p)));
    let mut places: Vec<PathBuf> = SOCKET_PLACES.iter().map(PathBuf::from).collect();
    places.extend(spec.home.iter().cloned());
    masks.extend(sockets(&places).iter().filter_map(|p| Some((std::fs::canonicalize(p).ok()?, false))));
    masks.extend(workspace_secrets(&spec.workspace, &spec.secret_patterns).iter().filter_map(|p| existing(p)));
    for (path, dir) in &masks {
        if *dir {
            push(&["--tmpfs".as_ref(), path.as_os_str()]);
        } else {
            push(&["--ro-bind".as_ref(), empty.as_os_str(), path.as_os_str()]);
        }
    }
    for relative in WORKSPACE_READ_ONLY {
        if let Some((path, _)) = existing(&spec.workspace.join(relative))
            && path.starts_with(&spec.workspace)
        {
            push(&["--ro-bind".as_ref(), path.as_os_str(), path.as_os_str()]);
        }
    }
    // Last, so that no writable bind is over them.
    for (path, _) in spec.read_only.iter().filter_map(|p| existing(p)) {
        push(&["--ro-bind".as_ref(), path.as_os_str(), path.as_os_str()]);
    }
    push(&["--chdir".as_ref(), spec.workspace.as_os_str(), "--clearenv".as_ref()]);
    for (name, value) in &spec.env {
        push(&["--setenv".as_ref(), name.as_ref(), value.as_ref()]);
    }
    args.push("--".into());
    args.extend(spec.inside.iter().cloned());
    args
}

/// What the environment inside the box says of the run.
#[derive(Debug, Clone)]
pub struct RunEnv {
    /// Who the run acts for.
    pub user: String,
    /// The agent kind.
    pub agent: String,
    /// The run's session.
    pub session: String,
    /// The proxy's address as the box reaches it.
    pub proxy: String,
    /// The CA bundle's path as the box sees it.
    pub bundle: String,
    /// The run's door to the monitor, as an endpoint (`unix:/…`).
    pub monitor: String,
    /// Variables that hold a secret's placeholder (`warden-secret:NAME`),
    /// which the proxy fills in on the way out.
    pub placeholders: Vec<(String, String)>,
}

/// The placeholder the proxy fills in with secret `name`.
pub fn placeholder(name: &str) -> String {
    format!("warden-secret:{name}")
}

/// The model API keys a run takes from its own environment: the variable,
/// and the secret (bound to its provider's API by the bundled
/// `models.cedar`) that the box gets a placeholder of instead.
pub const MODEL_KEYS: &[(&str, &str)] = &[
    ("ANTHROPIC_API_KEY", "anthropic-api-key"),
    ("OPENAI_API_KEY", "openai-api-key"),
    ("GEMINI_API_KEY", "gemini-api-key"),
];

/// The environment inside the box: the passed variables (and `LC_*`) of
/// `outer`, the proxy and CA trust variables, who the run is for, the door
/// for gates inside, and the secrets' placeholders.
pub fn box_env(outer: &[(String, String)], run: &RunEnv) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = outer
        .iter()
        .filter(|(name, _)| PASSED_ENV.contains(&name.as_str()) || name.starts_with("LC_"))
        .cloned()
        .collect();
    let proxy = format!("http://{}", run.proxy);
    for name in ["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"] {
        env.push((name.into(), proxy.clone()));
    }
    for name in ["NO_PROXY", "no_proxy"] {
        env.push((name.into(), "localhost,127.0.0.1,::1".into()));
    }
    for name in [
        "SSL_CERT_FILE",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "GIT_SSL_CAINFO",
        "NODE_EXTRA_CA_CERTS",
        "CARGO_HTTP_CAINFO",
    ] {
        env.push((name.into(), run.bundle.clone()));
    }
    env.push(("WARDEN_USER".into(), run.user.clone()));
    env.push(("WARDEN_AGENT".into(), run.agent.clone()));
    env.push(("WARDEN_SESSION".into(), run.session.clone()));
    // The gates inside (the agent's hook) ask through the run's door,
    // which holds the token: theirs is a marker, not a credential.
    env.push(("WARDEN_ENDPOINT".into(), run.monitor.clone()));
    env.push(("WARDEN_TOKEN".into(), crate::pin::MARKER_TOKEN.into()));
    env.extend(run.placeholders.iter().cloned());
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_files_are_told_from_their_examples() {
        for name in
            [".env", ".env.local", ".ENV.production", "server.key", "tls.pem", "id_ed25519", "store.p12", "admin.token"]
        {
            assert!(is_workspace_secret(name), "{name}");
        }
        for name in [".env~", ".envrc", "cert.pem~"] {
            assert!(is_workspace_secret(name), "{name}");
        }
        for name in [".env.example", ".env.sample", "main.rs", "keys.rs", "README.md", "notes~"] {
            assert!(!is_workspace_secret(name), "{name}");
        }
    }

    #[test]
    fn what_exists_is_masked_and_nothing_else() {
        let root = tempfile::tempdir().unwrap();
        let home = root.path().join("home");
        let workspace = root.path().join("work");
        std::fs::create_dir_all(home.join(".ssh")).unwrap();
        std::fs::write(home.join(".netrc"), "machine x").unwrap();
        std::fs::create_dir_all(workspace.join("app/node_modules/x")).unwrap();
        std::fs::write(workspace.join("app/.env"), "KEY=1").unwrap();
        std::fs::write(workspace.join("app/node_modules/x/.env"), "vendored").unwrap();
        std::fs::write(workspace.join("prod.tfvars"), "key = 1").unwrap();
        std::fs::create_dir_all(home.join(".cache")).unwrap();
        std::fs::create_dir_all(workspace.join("bin")).unwrap();
        std::fs::write(workspace.join("bin/warden-run"), "binary").unwrap();
        let socket = home.join(".docker-desktop.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        std::fs::create_dir_all(workspace.join(".claude")).unwrap();
        let spec = BoxSpec {
            run_dir: root.path().join("run"),
            workspace: workspace.canonicalize().unwrap(),
            home: Some(home.clone()),
            hidden: vec![root.path().join("no-such-data")],
            secret_patterns: vec!["*.tfvars".into()],
            writable: vec![home.join(".cache"), root.path().join("not-there")],
            read_only: vec![workspace.join("bin/warden-run")],
            files: vec![(
                root.path().join("run/agent/codex/config.toml"),
                "/run/warden-agent/codex/config.toml".into(),
            )],
            env: vec![("A".into(), "1".into())],
            inside: vec!["/bin/true".into()],
        };
        let empty = root.path().join("empty");
        std::fs::write(&empty, b"").unwrap();
        let args: Vec<String> = bwrap_args(&spec, &empty).into_iter().map(|a| a.into_string().unwrap()).collect();
        let after = |flag: &str, value: &Path| {
            let value = value.canonicalize().unwrap().display().to_string();
            args.windows(2).any(|w| w[0] == flag && w[1] == value)
        };
        assert!(after("--tmpfs", &home.join(".ssh")), "{args:?}");
        assert!(after("--ro-bind", &empty) && args.iter().any(|a| a.ends_with("/.netrc")), "{args:?}");
        assert!(args.iter().any(|a| a.ends_with("/app/.env")), "{args:?}");
        assert!(!args.iter().any(|a| a.contains("node_modules")), "vendored trees are not searched: {args:?}");
        assert!(!args.iter().any(|a| a.contains("no-such-data") || a.contains(".aws")), "{args:?}");
        assert!(after("--ro-bind", &workspace.join(".claude")), "{args:?}");
        assert!(args.iter().any(|a| a.ends_with("/prod.tfvars")), "run.toml's patterns: {args:?}");
        assert!(after("--bind", &home.join(".cache")), "{args:?}");
        assert!(!args.iter().any(|a| a.contains("not-there")), "{args:?}");
        assert!(after("--ro-bind", &workspace.join("bin/warden-run")), "{args:?}");
        assert!(
            args.windows(3).any(|w| w[0] == "--ro-bind"
                && w[1].ends_with("/run/agent/codex/config.toml")
                && w[2] == "/run/warden-agent/codex/config.toml"),
            "{args:?}"
        );
        assert!(args.iter().any(|a| a.ends_with("/.docker-desktop.sock")), "a socket in the home folder: {args:?}");
        // The workspace is bound before its masks, which would otherwise be
        // mounted over by it.
        let bind = args.iter().position(|a| a == "--bind").unwrap();
        let env_mask = args.iter().position(|a| a.ends_with("/app/.env")).unwrap();
        assert!(bind < env_mask);
        assert_eq!(args.iter().rev().take(2).collect::<Vec<_>>(), ["/bin/true", "--"]);
    }

    #[test]
    fn the_environment_inside_holds_no_token() {
        let outer: Vec<(String, String)> = [
            ("PATH", "/usr/bin"),
            ("LC_ALL", "C.UTF-8"),
            ("WARDEN_TOKEN", "secret"),
            ("ANTHROPIC_API_KEY", "secret"),
            ("SSH_AUTH_SOCK", "secret"),
        ]
        .map(|(n, v)| (n.to_owned(), v.to_owned()))
        .into();
        let run = RunEnv {
            user: "alice".into(),
            agent: "sh".into(),
            session: "run-1".into(),
            proxy: PROXY_ADDRESS.into(),
            bundle: CA_BUNDLE.into(),
            monitor: format!("unix:{MONITOR_SOCKET}"),
            placeholders: vec![("ANTHROPIC_API_KEY".into(), placeholder("anthropic-api-key"))],
        };
        let env = box_env(&outer, &run);
        assert!(env.contains(&("LC_ALL".into(), "C.UTF-8".into())));
        assert!(env.iter().all(|(_, value)| value != "secret"), "{env:?}");
        assert!(env.contains(&("ANTHROPIC_API_KEY".into(), "warden-secret:anthropic-api-key".into())));
        assert!(env.contains(&("PATH".into(), "/usr/bin".into())));
        assert!(env.contains(&("HTTPS_PROXY".into(), "http://127.0.0.1:3128".into())));
        assert!(env.contains(&("WARDEN_SESSION".into(), "run-1".into())));
        assert!(env.contains(&("WARDEN_TOKEN".into(), crate::pin::MARKER_TOKEN.into())));
    }
}
