//! The gateway's configuration: upstream servers, who acts, how to reach
//! Warden; from a TOML file, or from the command line for one stdio server.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file cannot be read.
    #[error("cannot read `{path}`: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML for this configuration.
    #[error("`{path}`: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong, with the line.
        message: String,
    },
    /// A value that is not allowed.
    #[error("{0}")]
    Invalid(String),
}

/// How to reach one upstream MCP server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// A program spawned by the gateway, spoken to over its stdin and stdout.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Extra environment variables.
        env: BTreeMap<String, String>,
        /// Its working directory (the gateway's when absent).
        cwd: Option<PathBuf>,
    },
    /// A streamable-HTTP MCP endpoint.
    Http {
        /// The endpoint, e.g. `http://127.0.0.1:3001/mcp`.
        url: String,
        /// Headers sent with every request (e.g. the upstream's own credentials).
        headers: BTreeMap<String, String>,
    },
}

/// One upstream server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    /// Its name: the `McpServer` entity and the tool-name prefix.
    pub name: String,
    /// How to reach it.
    pub transport: Transport,
}

/// Who a bearer token on the HTTP face acts for.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpClient {
    /// Hex SHA-256 of the client's bearer token.
    pub token_sha256: String,
    /// The user the client acts for.
    pub user: String,
    /// The kind of agent (default: the gateway's agent).
    #[serde(default)]
    pub agent: Option<String>,
    /// A fixed session (default: one per client connection).
    #[serde(default)]
    pub session: Option<String>,
}

/// Everything the gateway needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The servers, in order; names are unique.
    pub servers: Vec<Server>,
    /// The user every connection acts for (HTTP clients listed in `clients`
    /// act for their own).
    pub user: String,
    /// The kind of agent.
    pub agent: String,
    /// A fixed session id; `None`: one per client connection.
    pub session: Option<String>,
    /// An HTTP header whose value, on a client's first request, names its
    /// session (e.g. a harness that keeps its own session ids).
    pub session_header: Option<String>,
    /// HTTP clients by token; when not empty, the HTTP face refuses any
    /// request without one of these tokens.
    pub clients: Vec<HttpClient>,
    /// The longest a tool call waits for a person's approval.
    pub max_wait: Duration,
    /// How often the filtered tool list is checked again for clients that
    /// take `notifications/tools/list_changed` (zero: only when a decision
    /// shows a new policy version, or an upstream says its list changed).
    pub list_refresh: Duration,
    /// Where Warden is, when set in the file.
    pub endpoint: Option<String>,
    /// A file holding the harness token, when set in the file.
    pub token_file: Option<PathBuf>,
}

/// Defaults taken from the environment, as DESIGN.md says for every gate.
#[derive(Debug, Clone, Default)]
pub struct Defaults {
    /// `WARDEN_USER`, else the OS user.
    pub user: String,
    /// `WARDEN_AGENT`, else `mcp-client`.
    pub agent: String,
    /// `WARDEN_SESSION`, else none (one per connection).
    pub session: Option<String>,
}

impl Defaults {
    /// From `WARDEN_USER` (else the OS user, as `warden-hook` finds it),
    /// `WARDEN_AGENT`, `WARDEN_SESSION`.
    pub fn from_env() -> Self {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        Self {
            user: user_from(var, os_user).unwrap_or_default(),
            agent: var("WARDEN_AGENT").unwrap_or_else(|| DEFAULT_AGENT.to_owned()),
            session: var("WARDEN_SESSION"),
        }
    }
}

/// The user to act for: `WARDEN_USER`, else the OS user: `USER`, `LOGNAME`,
/// else what `os_user` finds (a process started without a login
/// environment, by a service manager or an MCP client that passes few
/// variables, has neither). `var` gives a variable's value, `None` when it
/// is unset or blank.
pub fn user_from(var: impl Fn(&str) -> Option<String>, os_user: impl FnOnce() -> Option<String>) -> Option<String> {
    ["WARDEN_USER", "USER", "LOGNAME"].into_iter().find_map(var).or_else(os_user)
}

/// The name of the user this process runs as, by `id -un` (which asks the
/// system's user database, as `warden-hook` does); `None` when it cannot
/// tell.
pub fn os_user() -> Option<String> {
    let output = std::process::Command::new("id").arg("-un").stdin(std::process::Stdio::null()).output().ok()?;
    let name = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    (output.status.success() && !name.is_empty()).then_some(name)
}

/// The agent kind when none is configured.
pub const DEFAULT_AGENT: &str = "mcp-client";
/// The longest wait for an approval when none is configured.
pub const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(600);
/// How often the tool list is checked again, when not configured.
pub const DEFAULT_LIST_REFRESH: Duration = Duration::from_secs(30);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    endpoint: Option<String>,
    token_file: Option<PathBuf>,
    user: Option<String>,
    agent: Option<String>,
    session: Option<String>,
    session_header: Option<String>,
    max_wait_seconds: Option<u64>,
    list_refresh_seconds: Option<u64>,
    #[serde(default)]
    servers: Vec<FileServer>,
    #[serde(default)]
    clients: Vec<HttpClient>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileServer {
    name: String,
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    cwd: Option<PathBuf>,
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
}

impl Config {
    /// One stdio server named `name`, spawned as `command` (program first).
    pub fn single(name: &str, command: &[String], defaults: Defaults) -> Result<Self, ConfigError> {
        let (program, args) =
            command.split_first().ok_or_else(|| ConfigError::Invalid("give the server's command after `--`".into()))?;
        let server = Server {
            name: name.to_owned(),
            transport: Transport::Stdio {
                command: program.clone(),
                args: args.to_vec(),
                env: BTreeMap::new(),
                cwd: None,
            },
        };
        Self::checked(Self {
            servers: vec![server],
            user: defaults.user,
            agent: defaults.agent,
            session: defaults.session,
            session_header: None,
            clients: vec![],
            max_wait: DEFAULT_MAX_WAIT,
            list_refresh: DEFAULT_LIST_REFRESH,
            endpoint: None,
            token_file: None,
        })
    }

    /// Reads a TOML file; what it leaves out comes from `defaults`.
    pub fn load(path: &Path, defaults: Defaults) -> Result<Self, ConfigError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_owned(), source })?;
        Self::parse(&text, path, defaults)
    }

    /// Parses the text of a TOML file named `path`.
    pub fn parse(text: &str, path: &Path, defaults: Defaults) -> Result<Self, ConfigError> {
        let file: FileConfig =
            toml::from_str(text).map_err(|e| ConfigError::Parse { path: path.to_owned(), message: e.to_string() })?;
        let servers = file
            .servers
            .into_iter()
            .map(|s| {
                let transport = match (s.command, s.url) {
                    (Some(command), None) => Transport::Stdio { command, args: s.args, env: s.env, cwd: s.cwd },
                    (None, Some(url)) => Transport::Http { url, headers: s.headers },
                    _ => {
                        return Err(ConfigError::Invalid(format!(
                            "server `{}`: give either `command` (stdio) or `url` (streamable HTTP)",
                            s.name
                        )));
                    }
                };
                Ok(Server { name: s.name, transport })
            })
            .collect::<Result<_, _>>()?;
        Self::checked(Self {
            servers,
            user: file.user.unwrap_or(defaults.user),
            agent: file.agent.unwrap_or(defaults.agent),
            session: file.session.or(defaults.session),
            session_header: file.session_header,
            clients: file.clients,
            max_wait: file.max_wait_seconds.map_or(DEFAULT_MAX_WAIT, Duration::from_secs),
            list_refresh: file.list_refresh_seconds.map_or(DEFAULT_LIST_REFRESH, Duration::from_secs),
            endpoint: file.endpoint,
            token_file: file.token_file,
        })
    }

    fn checked(self) -> Result<Self, ConfigError> {
        if self.servers.is_empty() {
            return Err(ConfigError::Invalid("no servers: add at least one `[[servers]]`".into()));
        }
        let mut names = std::collections::BTreeSet::new();
        for server in &self.servers {
            let name = &server.name;
            // The name is an entity id (`McpServer::"<name>"`, `Tool::"<name>/<tool>"`)
            // and a prefix (`<name>__<tool>`): keep it plain.
            let plain = !name.is_empty()
                && name.len() <= 64
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
                && !name.contains("__")
                && !name.starts_with('_')
                && !name.ends_with('_');
            if !plain {
                return Err(ConfigError::Invalid(format!(
                    "server name `{}`: use 1 to 64 letters, digits, `-`, `_` or `.`, without `__` and not starting or ending with `_`",
                    name.escape_debug()
                )));
            }
            if !names.insert(name.as_str()) {
                return Err(ConfigError::Invalid(format!("server name `{name}` is used twice")));
            }
        }
        if self.user.trim().is_empty() {
            return Err(ConfigError::Invalid(
                "no user to act for: set WARDEN_USER (or `user` in the configuration); neither USER, LOGNAME nor `id -un` named this process's user".into(),
            ));
        }
        for client in &self.clients {
            let hex_ok = client.token_sha256.len() == 64 && client.token_sha256.chars().all(|c| c.is_ascii_hexdigit());
            if !hex_ok {
                return Err(ConfigError::Invalid(format!(
                    "client of user `{}`: `token_sha256` must be 64 hex digits",
                    client.user
                )));
            }
        }
        Ok(self)
    }

    /// Whether tool names carry their server's name (`server__tool`): when
    /// more than one server is configured, as the MCP specification advises
    /// for aggregating proxies.
    pub fn prefixed(&self) -> bool {
        self.servers.len() > 1
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use super::*;

    fn defaults() -> Defaults {
        Defaults { user: "alice".into(), agent: DEFAULT_AGENT.into(), session: None }
    }

    #[test]
    fn a_file_with_stdio_and_http_servers() {
        let text = r#"
            agent = "cursor"
            max_wait_seconds = 60
            [[servers]]
            name = "everything"
            command = "npx"
            args = ["-y", "@modelcontextprotocol/server-everything"]
            env = { DEBUG = "1" }
            [[servers]]
            name = "remote"
            url = "http://127.0.0.1:3001/mcp"
            [[clients]]
            token_sha256 = "0000000000000000000000000000000000000000000000000000000000000000"
            user = "bob"
        "#;
        let config = Config::parse(text, Path::new("g.toml"), defaults()).unwrap();
        assert_eq!(config.servers.len(), 2);
        assert_eq!(config.user, "alice");
        assert_eq!(config.agent, "cursor");
        assert_eq!(config.max_wait, Duration::from_secs(60));
        assert!(config.prefixed());
        assert!(matches!(&config.servers[1].transport, Transport::Http { url, .. } if url.ends_with("/mcp")));
        assert_eq!(config.clients[0].user, "bob");
    }

    #[test]
    fn bad_files_are_refused_with_the_reason() {
        let cases = [
            ("[[servers]]\nname = \"a\"\n", "either `command`"),
            ("[[servers]]\nname = \"a\"\ncommand = \"x\"\nurl = \"http://h/\"\n", "either `command`"),
            ("[[servers]]\nname = \"a__b\"\ncommand = \"x\"\n", "without `__`"),
            ("[[servers]]\nname = \"a/b\"\ncommand = \"x\"\n", "server name"),
            ("[[servers]]\nname = \"a_\"\ncommand = \"x\"\n", "ending with `_`"),
            ("[[servers]]\nname = \"a\"\ncommand = \"x\"\n[[servers]]\nname = \"a\"\ncommand = \"y\"\n", "twice"),
            ("", "no servers"),
            ("[[servers]]\nname = \"a\"\ncommand = \"x\"\ncolour = 1\n", "unknown field"),
            (
                "[[servers]]\nname = \"a\"\ncommand = \"x\"\n[[clients]]\ntoken_sha256 = \"xyz\"\nuser = \"bob\"\n",
                "64 hex",
            ),
        ];
        for (text, expected) in cases {
            let error = Config::parse(text, Path::new("g.toml"), defaults()).unwrap_err().to_string();
            assert!(error.contains(expected), "{text:?}: {error}");
        }
    }

    #[test]
    fn one_server_from_the_command_line_is_not_prefixed() {
        let command = vec!["node".to_owned(), "server.js".to_owned()];
        let config = Config::single("everything", &command, defaults()).unwrap();
        assert!(!config.prefixed());
        assert!(Config::single("everything", &[], defaults()).is_err());
        let nobody = Defaults { user: String::new(), ..defaults() };
        assert!(Config::single("everything", &command, nobody).unwrap_err().to_string().contains("WARDEN_USER"));
    }

    #[test]
    fn the_user_is_warden_user_else_the_os_user() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| (*v).to_owned())
        };
        let os = || Some("from-id".to_owned());
        let all = env(&[("WARDEN_USER", "wu"), ("USER", "u"), ("LOGNAME", "l")]);
        assert_eq!(user_from(all, os).as_deref(), Some("wu"));
        assert_eq!(user_from(env(&[("USER", "u"), ("LOGNAME", "l")]), os).as_deref(), Some("u"));
        assert_eq!(user_from(env(&[("LOGNAME", "l")]), os).as_deref(), Some("l"));
        assert_eq!(user_from(env(&[]), os).as_deref(), Some("from-id"));
        assert_eq!(user_from(env(&[]), || None), None);
    }

    #[test]
    fn the_os_user_is_who_this_process_runs_as() {
        // Told apart another way: the owner of this process, by its uid,
        // in the password file (when the user is there, not only in LDAP
        // and the like).
        use std::os::unix::fs::MetadataExt as _;
        let uid = std::fs::metadata("/proc/self").unwrap().uid().to_string();
        let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
        let listed = passwd.lines().map(|l| l.split(':').collect::<Vec<_>>()).find(|f| f.get(2) == Some(&uid.as_str()));
        let found = os_user().expect("`id -un` names this process's user");
        if let Some(fields) = listed {
            assert_eq!(found, fields[0]);
        }
    }
}
