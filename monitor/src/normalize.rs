//! Pure normalization of what a harness asks about: paths, argv, URLs, secrets
//! and tools become canonical resources with their ancestor chains.
//!
//! Nothing here knows proto, Cedar, sled or tokio. Anything that cannot be
//! normalized is an [`InvalidInput`] naming the offending field, never a guess.

use std::collections::BTreeSet;

/// Upper bounds on the size of what a harness may send.
pub mod limits {
    /// User, agent, session, request and approval ids; secret, server and tool names.
    pub(crate) const ID_BYTES: usize = 256;
    /// Action names.
    pub(crate) const ACTION_BYTES: usize = 128;
    /// A file path or a cwd.
    pub const PATH_BYTES: usize = 4096;
    /// Number of argv entries.
    pub const ARGV_ENTRIES: usize = 1024;
    /// All argv entries together.
    pub const ARGV_BYTES: usize = 64 * 1024;
    /// A URL.
    pub(crate) const URL_BYTES: usize = 8192;
    /// An HTTP method.
    pub(crate) const METHOD_BYTES: usize = 32;
    /// The justification shown to approvers.
    pub const JUSTIFICATION_BYTES: usize = 4096;
    /// `context_json` and a tool's `arguments_json`.
    pub const JSON_BYTES: usize = 64 * 1024;
    /// Nesting of `context_json` (objects and arrays).
    pub(crate) const CONTEXT_DEPTH: usize = 8;
    /// Nesting of a tool's `arguments_json`.
    pub(crate) const ARGUMENTS_DEPTH: usize = 32;
}

/// Input that cannot be normalized; `field` is the request field at fault,
/// in the proto's dotted form (`resource.file.path`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct InvalidInput {
    /// The field at fault.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl InvalidInput {
    /// An error about `field`.
    pub(crate) fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self { field: field.into(), message: message.into() }
    }
}

/// Who is acting.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Actor {
    /// The human user, as named in the policy entities.
    pub user: String,
    /// The kind of agent, e.g. `claude-code`.
    pub agent: String,
    /// The agent's session id.
    pub session: String,
}

/// A resource as the harness describes it, before normalization.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ResourceInput {
    /// A file path, relative paths resolved against `cwd`.
    File {
        /// The path, absolute or relative to `cwd`.
        path: String,
        /// The folder a relative path is in (empty: none).
        cwd: String,
        /// The path is a pattern of names (`/w/**/*.rs`): `File.pattern`.
        #[serde(default)]
        pattern: bool,
    },
    /// A command line.
    Command {
        /// The command and its arguments.
        argv: Vec<String>,
        /// The folder it runs in (empty: not given).
        cwd: String,
    },
    /// An HTTP request.
    Http {
        /// The method, e.g. `GET`.
        method: String,
        /// The URL as sent.
        url: String,
    },
    /// A named secret.
    Secret {
        /// The secret's name.
        name: String,
    },
    /// An MCP tool call.
    Tool {
        /// The MCP server.
        server: String,
        /// The tool.
        name: String,
        /// The call's arguments, a JSON object (empty: none).
        arguments_json: String,
    },
}

/// One `Authorize` request as the harness sent it, proto-free.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RequestInput {
    /// The harness's idempotency key; may be empty.
    pub request_id: String,
    /// Who is acting.
    pub actor: Actor,
    /// The Cedar action id, e.g. `fs.read`.
    pub action: String,
    /// What the action is on.
    pub resource: ResourceInput,
    /// Why, in the agent's words.
    pub justification: String,
    /// Extra schema-declared context, a JSON object (empty: none).
    pub context_json: String,
}

/// A normalized resource with everything Cedar needs to know about it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Resource {
    /// `File::"<path>"` in each `Dir` above it.
    File {
        /// Absolute, lexically cleaned path.
        path: String,
        /// Last component (empty for `/`).
        name: String,
        /// Extension without the dot, empty when none.
        extension: String,
        /// The directories above, nearest first, ending with `/`.
        dirs: Vec<String>,
        /// The path is a pattern of file names as written (a glob, the
        /// files `find` finds), not one file (`File.pattern`).
        #[serde(default)]
        pattern: bool,
    },
    /// `Command::"<argv, each element quoted where needed>"` in
    /// `Program::"<basename of argv[0]>"`.
    Command {
        /// Basename of argv[0].
        program: String,
        /// The whole command line, argv joined by spaces (what policies
        /// match text against).
        argv: String,
        /// The entity id: argv with each element quoted as a POSIX shell
        /// would need it ([`quote_argv`]), so that two different argvs never
        /// share an id (`["a b"]` and `["a", "b"]` do share `argv`). Empty in
        /// records written before it existed: `argv` is the id then.
        #[serde(default)]
        line: String,
        /// argv without argv[0].
        args: BTreeSet<String>,
        /// Absolute, cleaned working directory, empty when not given.
        cwd: String,
        /// argv as sent, one element each.
        #[serde(default)]
        words: Vec<String>,
        /// argv[0] made absolute and cleaned when it is a path (`./ls`,
        /// `/usr/bin/git`); empty when the program is run by name. With the
        /// system program directories of `programs.toml` it gives the
        /// program's identity (`programs::Programs::identity`).
        #[serde(default)]
        path: String,
        /// A part of a command the monitor cannot see into
        /// (`Command.opaque`); a request as sent is never opaque.
        #[serde(default)]
        opaque: bool,
    },
    /// `Url::"<normalized url>"` in each `Domain` of its host.
    Url {
        /// The normalized URL (no fragment, default port elided, one spelling of the path).
        url: String,
        /// `http` or `https`.
        scheme: String,
        /// Lower-cased, IDNA-encoded host without a trailing dot.
        host: String,
        /// The port, the scheme's default filled in.
        port: u16,
        /// The URL path.
        path: String,
        /// The upper-cased HTTP method.
        method: String,
        /// The host and its parent domains, nearest first (just the host for an IP).
        domains: Vec<String>,
    },
    /// `Secret::"<name>"`.
    Secret {
        /// The secret's name.
        name: String,
    },
    /// `Tool::"<server>/<name>"` in `McpServer::"<server>"`.
    Tool {
        /// The MCP server.
        server: String,
        /// The tool's name.
        name: String,
        /// The call's arguments as JSON text.
        arguments: String,
    },
}

impl Resource {
    /// The Cedar entity type of the resource.
    pub(crate) fn entity_type(&self) -> &'static str {
        match self {
            Resource::File { .. } => "File",
            Resource::Command { .. } => "Command",
            Resource::Url { .. } => "Url",
            Resource::Secret { .. } => "Secret",
            Resource::Tool { .. } => "Tool",
        }
    }

    /// The Cedar entity id of the resource.
    pub(crate) fn entity_id(&self) -> String {
        match self {
            Resource::File { path, .. } => path.clone(),
            Resource::Command { argv, line, .. } => {
                if line.is_empty() {
                    argv.clone()
                } else {
                    line.clone()
                }
            }
            Resource::Url { url, .. } => url.clone(),
            Resource::Secret { name } => name.clone(),
            Resource::Tool { server, name, .. } => format!("{server}/{name}"),
        }
    }

    /// The field name of this kind in the request's `resource` oneof.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Resource::File { .. } => "file",
            Resource::Command { .. } => "command",
            Resource::Url { .. } => "http",
            Resource::Secret { .. } => "secret",
            Resource::Tool { .. } => "tool",
        }
    }

    /// `Type::"id"`, the way Cedar prints an entity uid, exactly: for the
    /// audit record and approvers.
    pub(crate) fn uid(&self) -> String {
        format!("{}::{:?}", self.entity_type(), self.entity_id())
    }

    /// `Type::"id"` without the credentials a command line or a URL may
    /// carry: for what the harness is told and for logs.
    pub(crate) fn display_uid(&self) -> String {
        let id = match self {
            // What people read: without the credentials a command line or
            // a URL may carry (`--token=…`, `?access_token=…`).
            Resource::Command { .. } | Resource::Url { .. } => crate::redact::text(&self.entity_id()),
            _ => self.entity_id(),
        };
        format!("{}::{:?}", self.entity_type(), id)
    }
}

/// A request that passed normalization.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NormalizedRequest {
    /// Who is acting.
    pub actor: Actor,
    /// The Cedar action id.
    pub(crate) action: String,
    /// The normalized resource.
    pub(crate) resource: Resource,
    /// Why, in the agent's words.
    pub(crate) justification: String,
    /// Extra context fields (a JSON object's members), empty when none.
    pub(crate) context: serde_json::Map<String, serde_json::Value>,
}

impl RequestInput {
    /// What in the request looks like a credential, as the agent wrote it
    /// (`api_key=…`, `Authorization: Bearer …`, `--token …`): approvers
    /// are shown the request exactly, and these named beside it, so that
    /// they see what would leave instead of a `REDACTED` in its place.
    pub(crate) fn credentials(&self) -> Vec<String> {
        let mut found = match &self.resource {
            ResourceInput::Command { argv, .. } => crate::redact::credentials(&argv.join(" ")),
            ResourceInput::Http { url, .. } => crate::redact::credentials(url),
            ResourceInput::Tool { arguments_json, .. } => crate::redact::json_credentials(arguments_json),
            _ => Vec::new(),
        };
        found.extend(crate::redact::credentials(&self.justification));
        if !self.context_json.is_empty() {
            found.extend(crate::redact::json_credentials(&self.context_json));
        }
        let mut seen = std::collections::HashSet::new();
        found.retain(|written| seen.insert(written.clone()));
        found
    }
}

/// Checks an actor's ids (`actor.user`, `actor.agent`, `actor.session`).
pub(crate) fn normalize_actor(actor: &Actor) -> Result<Actor, InvalidInput> {
    Ok(Actor {
        user: id_field("actor.user", &actor.user)?,
        agent: id_field("actor.agent", &actor.agent)?,
        session: id_field("actor.session", &actor.session)?,
    })
}

/// Checks and normalizes one request.
pub fn normalize(input: &RequestInput) -> Result<NormalizedRequest, InvalidInput> {
    if input.request_id.len() > limits::ID_BYTES {
        return Err(too_long("request_id", limits::ID_BYTES));
    }
    check_text("request_id", &input.request_id)?;
    let actor = normalize_actor(&input.actor)?;
    let action = input.action.trim();
    if action.is_empty() {
        return Err(InvalidInput::new("action", "must not be empty"));
    }
    if action.len() > limits::ACTION_BYTES {
        return Err(too_long("action", limits::ACTION_BYTES));
    }
    check_text("action", action)?;
    let resource = normalize_resource(&input.resource)?;
    if input.justification.len() > limits::JUSTIFICATION_BYTES {
        return Err(too_long("justification", limits::JUSTIFICATION_BYTES));
    }
    // Shown on approvers' terminals and desktops: lines and tabs, but no
    // escape sequences.
    if input.justification.chars().any(|c| c.is_control() && c != '\n' && c != '\t') {
        return Err(InvalidInput::new(
            "justification",
            "must not contain control characters other than newline and tab",
        ));
    }
    let context = parse_context(&input.context_json)?;
    Ok(NormalizedRequest {
        actor,
        action: action.to_owned(),
        resource,
        justification: input.justification.clone(),
        context,
    })
}

/// Normalizes one resource.
pub fn normalize_resource(input: &ResourceInput) -> Result<Resource, InvalidInput> {
    match input {
        ResourceInput::File { path, cwd, pattern } => normalize_file(path, cwd, *pattern),
        ResourceInput::Command { argv, cwd } => normalize_command(argv, cwd),
        ResourceInput::Http { method, url } => normalize_http(method, url),
        ResourceInput::Secret { name } => Ok(Resource::Secret { name: id_field("resource.secret.name", name)? }),
        ResourceInput::Tool { server, name, arguments_json } => normalize_tool(server, name, arguments_json),
    }
}

fn normalize_file(path: &str, cwd: &str, pattern: bool) -> Result<Resource, InvalidInput> {
    let path = absolute_path("resource.file.path", path, "resource.file.cwd", cwd)?;
    let (name, dirs) = split_path(&path);
    let extension = file_extension(&name).to_owned();
    Ok(Resource::File { path, name, extension, dirs, pattern })
}

fn normalize_command(argv: &[String], cwd: &str) -> Result<Resource, InvalidInput> {
    let Some(argv0) = argv.first() else {
        return Err(InvalidInput::new("resource.command.argv", "must not be empty"));
    };
    if argv.len() > limits::ARGV_ENTRIES {
        return Err(InvalidInput::new(
            "resource.command.argv",
            format!("has more than {} entries", limits::ARGV_ENTRIES),
        ));
    }
    let total: usize = argv.iter().map(String::len).sum();
    if total > limits::ARGV_BYTES {
        return Err(too_long("resource.command.argv", limits::ARGV_BYTES));
    }
    // Scripts have lines (a here-document, a commit message): newline and
    // tab are text; no other control character is (people read argv, and
    // wardenctl shows what it cannot print escaped).
    if argv.iter().any(|arg| arg.chars().any(|c| c.is_control() && c != '\n' && c != '\t')) {
        return Err(InvalidInput::new(
            "resource.command.argv",
            "must not contain control characters other than newline and tab",
        ));
    }
    let program = argv0.rsplit('/').next().unwrap_or_default();
    if program.is_empty() || program == "." || program == ".." {
        return Err(InvalidInput::new("resource.command.argv", format!("argv[0] `{argv0}` does not name a program")));
    }
    let cwd = if cwd.is_empty() {
        String::new()
    } else {
        if !cwd.starts_with('/') {
            return Err(InvalidInput::new("resource.command.cwd", "must be an absolute path"));
        }
        bounded_path("resource.command.cwd", cwd)?;
        clean_path(cwd)
    };
    let path = if !argv0.contains('/') {
        String::new()
    } else if argv0.starts_with('/') {
        bounded_path("resource.command.argv", argv0)?;
        clean_path(argv0)
    } else if cwd.is_empty() {
        return Err(InvalidInput::new(
            "resource.command.cwd",
            format!("is needed to know which program `{argv0}` is (a relative path)"),
        ));
    } else {
        bounded_path("resource.command.argv", argv0)?;
        clean_path(&format!("{cwd}/{argv0}"))
    };
    Ok(Resource::Command {
        program: program.to_owned(),
        argv: argv.join(" "),
        line: quote_argv(argv),
        args: argv.iter().skip(1).cloned().collect(),
        cwd,
        words: argv.to_vec(),
        path,
        opaque: false,
    })
}

/// argv as one line a POSIX shell reads back as the same argv: an element
/// of only safe characters stays as it is (so ids stay readable), any other
/// is single-quoted, with `'` written `'\''`; an empty one is `''`.
pub fn quote_argv(argv: &[String]) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "@%+=:,./_-".contains(c);
    let quoted: Vec<String> = argv
        .iter()
        .map(|arg| {
            if !arg.is_empty() && arg.chars().all(safe) {
                arg.clone()
            } else {
                format!("'{}'", arg.replace('\'', "'\\''"))
            }
        })
        .collect();
    quoted.join(" ")
}

fn normalize_http(method: &str, raw_url: &str) -> Result<Resource, InvalidInput> {
    const FIELD: &str = "resource.http.url";
    if method.is_empty() {
        return Err(InvalidInput::new("resource.http.method", "must not be empty"));
    }
    if method.len() > limits::METHOD_BYTES {
        return Err(too_long("resource.http.method", limits::METHOD_BYTES));
    }
    // RFC 9110 method names are tokens.
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if !method.chars().all(token) {
        return Err(InvalidInput::new("resource.http.method", format!("`{method}` is not an HTTP method")));
    }
    if raw_url.is_empty() {
        return Err(InvalidInput::new(FIELD, "must not be empty"));
    }
    if raw_url.len() > limits::URL_BYTES {
        return Err(too_long(FIELD, limits::URL_BYTES));
    }
    // The URL parser quietly drops tabs and newlines and reads `\` as `/`;
    // other parsers do not, so such a URL could name another host for the
    // harness than for the policies. Refuse it instead of guessing.
    if raw_url.chars().any(|c| c.is_whitespace() || c.is_control() || c == '\\') {
        return Err(InvalidInput::new(FIELD, "must not contain white space, control characters or `\\`"));
    }
    let mut url = url::Url::parse(raw_url)
        .map_err(|e| InvalidInput::new(FIELD, format!("`{raw_url}` is not a valid URL: {e}")))?;
    // Credentials in a URL would end up in policies' view and the audit log.
    if !url.username().is_empty() || url.password().is_some() {
        return Err(InvalidInput::new(FIELD, "must not carry credentials (user:password@): use secret.use"));
    }
    let scheme = url.scheme().to_owned();
    if scheme != "http" && scheme != "https" {
        return Err(InvalidInput::new(FIELD, format!("scheme `{scheme}` is not http or https")));
    }
    let (host, domains) = match url.host() {
        Some(url::Host::Domain(domain)) => {
            // The URL parser lower-cases and IDNA-encodes; one trailing dot
            // names the same host and must not dodge a policy. More than one
            // is no host name (and would hide an IPv4 address from the
            // parser's number check).
            let host = domain.strip_suffix('.').unwrap_or(domain).to_owned();
            if host.is_empty() || host.split('.').any(str::is_empty) {
                return Err(InvalidInput::new(FIELD, format!("host `{domain}` is not a valid name")));
            }
            if !matches!(url::Host::parse(&host), Ok(url::Host::Domain(_))) {
                return Err(InvalidInput::new(FIELD, format!("host `{domain}` is not a valid name")));
            }
            let domains = domain_chain(&host);
            (host, domains)
        }
        Some(url::Host::Ipv4(ip)) => (ip.to_string(), vec![ip.to_string()]),
        // An IPv4 address written as IPv6 is that IPv4 address.
        Some(url::Host::Ipv6(ip)) => match ip.to_ipv4_mapped() {
            Some(v4) => {
                url.set_host(Some(&v4.to_string()))
                    .map_err(|e| InvalidInput::new(FIELD, format!("host `{v4}` is not valid: {e}")))?;
                (v4.to_string(), vec![v4.to_string()])
            }
            None => (format!("[{ip}]"), vec![format!("[{ip}]")]),
        },
        None => return Err(InvalidInput::new(FIELD, "has no host")),
    };
    if url.host_str() != Some(host.as_str()) {
        url.set_host(Some(&host)).map_err(|e| InvalidInput::new(FIELD, format!("host `{host}` is not valid: {e}")))?;
    }
    let Some(port) = url.port_or_known_default() else {
        return Err(InvalidInput::new(FIELD, "has no port"));
    };
    url.set_fragment(None);
    let path = normalize_percent_encoding(url.path());
    if path != url.path() {
        url.set_path(&path);
    }
    Ok(Resource::Url {
        url: url.to_string(),
        scheme,
        host,
        port,
        path: url.path().to_owned(),
        method: method.to_ascii_uppercase(),
        domains,
    })
}

fn normalize_tool(server: &str, name: &str, arguments_json: &str) -> Result<Resource, InvalidInput> {
    let server = id_field("resource.tool.server", server)?;
    if server.contains('/') {
        return Err(InvalidInput::new("resource.tool.server", "must not contain `/`"));
    }
    let name = id_field("resource.tool.name", name)?;
    if arguments_json.len() > limits::JSON_BYTES {
        return Err(too_long("resource.tool.arguments_json", limits::JSON_BYTES));
    }
    let arguments = if arguments_json.trim().is_empty() {
        String::new()
    } else {
        let value: serde_json::Value = serde_json::from_str(arguments_json)
            .map_err(|e| InvalidInput::new("resource.tool.arguments_json", format!("is not valid JSON: {e}")))?;
        if depth(&value) > limits::ARGUMENTS_DEPTH {
            return Err(InvalidInput::new(
                "resource.tool.arguments_json",
                format!("nests deeper than {} levels", limits::ARGUMENTS_DEPTH),
            ));
        }
        canonical_json(value).to_string()
    };
    Ok(Resource::Tool { server, name, arguments })
}

/// How deep objects and arrays nest (a scalar is 0).
fn depth(value: &serde_json::Value) -> usize {
    match value {
        serde_json::Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
        serde_json::Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// The same JSON with every object's keys in sorted order, so that policies
/// see one text for one value.
fn canonical_json(value: serde_json::Value) -> serde_json::Value {
    match value {
        serde_json::Value::Object(map) => {
            let mut entries: Vec<_> = map.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            serde_json::Value::Object(entries.into_iter().map(|(k, v)| (k, canonical_json(v))).collect())
        }
        serde_json::Value::Array(items) => serde_json::Value::Array(items.into_iter().map(canonical_json).collect()),
        other => other,
    }
}

/// Decodes percent-escapes of unreserved characters (`%61` is `a`) and
/// upper-cases the others, so that one path has one spelling (RFC 3986
/// 6.2.2). A `%` that does not start an escape is written `%25`, so that no
/// later decoding can join it with what follows.
fn normalize_percent_encoding(path: &str) -> String {
    let bytes = path.as_bytes();
    let mut out = String::with_capacity(path.len());
    let mut at = 0;
    while let Some(&byte) = bytes.get(at) {
        if byte != b'%' {
            // Multi-byte UTF-8 is copied byte by byte below, as a str slice.
            let next = path.get(at..).and_then(|rest| rest.chars().next()).unwrap_or('\u{fffd}');
            out.push(next);
            at += next.len_utf8();
            continue;
        }
        let hex = |i: usize| bytes.get(i).and_then(|b| char::from(*b).to_digit(16));
        match (hex(at + 1), hex(at + 2)) {
            (Some(high), Some(low)) => {
                let decoded = u8::try_from(high * 16 + low).unwrap_or(0);
                if decoded.is_ascii_alphanumeric() || b"-._~".contains(&decoded) {
                    out.push(char::from(decoded));
                } else {
                    out.push_str(&format!("%{decoded:02X}"));
                }
                at += 3;
            }
            _ => {
                out.push_str("%25");
                at += 1;
            }
        }
    }
    out
}

fn parse_context(text: &str) -> Result<serde_json::Map<String, serde_json::Value>, InvalidInput> {
    if text.trim().is_empty() {
        return Ok(serde_json::Map::new());
    }
    if text.len() > limits::JSON_BYTES {
        return Err(too_long("context_json", limits::JSON_BYTES));
    }
    match serde_json::from_str(text) {
        Ok(serde_json::Value::Object(map)) => {
            if map.values().map(depth).max().unwrap_or(0) + 1 > limits::CONTEXT_DEPTH {
                return Err(InvalidInput::new(
                    "context_json",
                    format!("nests deeper than {} levels", limits::CONTEXT_DEPTH),
                ));
            }
            Ok(map)
        }
        Ok(_) => Err(InvalidInput::new("context_json", "must be a JSON object")),
        Err(e) => Err(InvalidInput::new("context_json", format!("is not valid JSON: {e}"))),
    }
}

/// Makes `path` absolute against `cwd` and cleans it.
fn absolute_path(field: &str, path: &str, cwd_field: &str, cwd: &str) -> Result<String, InvalidInput> {
    if path.is_empty() {
        return Err(InvalidInput::new(field, "must not be empty"));
    }
    bounded_path(field, path)?;
    if path.starts_with('/') {
        return Ok(clean_path(path));
    }
    if cwd.is_empty() {
        return Err(InvalidInput::new(field, format!("`{path}` is relative and no {cwd_field} was given")));
    }
    if !cwd.starts_with('/') {
        return Err(InvalidInput::new(cwd_field, "must be an absolute path"));
    }
    bounded_path(cwd_field, cwd)?;
    let joined = clean_path(&format!("{cwd}/{path}"));
    // The limit holds for the file named, not only for its two parts.
    if joined.len() > limits::PATH_BYTES {
        return Err(too_long(field, limits::PATH_BYTES));
    }
    Ok(joined)
}

fn bounded_path(field: &str, path: &str) -> Result<(), InvalidInput> {
    if path.len() > limits::PATH_BYTES {
        return Err(too_long(field, limits::PATH_BYTES));
    }
    if path.chars().any(char::is_control) {
        return Err(InvalidInput::new(field, "must not contain control characters"));
    }
    Ok(())
}

/// Cleans an absolute path lexically: `.` and empty components go, `..` drops
/// the previous component and never climbs above `/`.
pub(crate) fn clean_path(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            other => parts.push(other),
        }
    }
    let mut out = String::with_capacity(path.len());
    for part in &parts {
        out.push('/');
        out.push_str(part);
    }
    if out.is_empty() {
        out.push('/');
    }
    out
}

/// The last component of a clean absolute path and the directories above it,
/// nearest first, ending with `/` (none for `/` itself).
fn split_path(path: &str) -> (String, Vec<String>) {
    if path == "/" {
        return (String::new(), Vec::new());
    }
    let name = path.rsplit('/').next().unwrap_or_default().to_owned();
    let mut dirs = Vec::new();
    let mut rest = path;
    while let Some((parent, _)) = rest.rsplit_once('/') {
        rest = parent;
        dirs.push(if rest.is_empty() { "/".to_owned() } else { rest.to_owned() });
    }
    (name, dirs)
}

/// The extension of a file name without the dot: empty for `Makefile`,
/// `.bashrc` and `notes.`.
fn file_extension(name: &str) -> &str {
    match name.rsplit_once('.') {
        Some((stem, extension)) if !stem.is_empty() => extension,
        _ => "",
    }
}

/// `api.github.com` -> `api.github.com`, `github.com`, `com`.
fn domain_chain(host: &str) -> Vec<String> {
    let mut chain = vec![host.to_owned()];
    let mut rest = host;
    while let Some((_, parent)) = rest.split_once('.') {
        rest = parent;
        chain.push(rest.to_owned());
    }
    chain
}

fn id_field(field: &str, value: &str) -> Result<String, InvalidInput> {
    if value.trim().is_empty() {
        return Err(InvalidInput::new(field, "must not be empty"));
    }
    if value.len() > limits::ID_BYTES {
        return Err(too_long(field, limits::ID_BYTES));
    }
    check_text(field, value)?;
    Ok(value.to_owned())
}

/// Ids end up in logs and on approvers' screens: no control characters.
fn check_text(field: &str, value: &str) -> Result<(), InvalidInput> {
    if value.chars().any(char::is_control) {
        return Err(InvalidInput::new(field, "must not contain control characters"));
    }
    Ok(())
}

fn too_long(field: &str, limit: usize) -> InvalidInput {
    InvalidInput::new(field, format!("is longer than {limit} bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, cwd: &str) -> Result<Resource, InvalidInput> {
        normalize_resource(&ResourceInput::File { path: path.into(), cwd: cwd.into(), pattern: false })
    }

    fn http(method: &str, url: &str) -> Result<Resource, InvalidInput> {
        normalize_resource(&ResourceInput::Http { method: method.into(), url: url.into() })
    }

    #[test]
    fn paths_are_cleaned_and_never_climb_above_root() {
        let cases = [
            ("/a/b/c.txt", "", "/a/b/c.txt"),
            ("/a//b/./c.txt", "", "/a/b/c.txt"),
            ("/a/b/../../../../etc/passwd", "", "/etc/passwd"),
            ("src/main.rs", "/home/alice/project", "/home/alice/project/src/main.rs"),
            ("../bob/.ssh/id_rsa", "/home/alice", "/home/bob/.ssh/id_rsa"),
            ("/a/b/", "", "/a/b"),
            ("/..", "", "/"),
        ];
        for (path, cwd, want) in cases {
            let Ok(Resource::File { path: got, .. }) = file(path, cwd) else {
                panic!("{path} did not normalize to a file");
            };
            assert_eq!(got, want, "{path} in {cwd}");
        }
    }

    #[test]
    fn a_file_is_in_every_directory_above_it() {
        let Ok(Resource::File { name, extension, dirs, .. }) = file("/home/alice/archive.tar.gz", "") else {
            panic!("did not normalize");
        };
        assert_eq!(name, "archive.tar.gz");
        assert_eq!(extension, "gz");
        assert_eq!(dirs, ["/home/alice", "/home", "/"]);
        let Ok(Resource::File { extension, .. }) = file("/home/alice/.env", "") else {
            panic!("did not normalize");
        };
        assert_eq!(extension, "");
    }

    #[test]
    fn relative_path_without_cwd_is_invalid() {
        let err = file("src/main.rs", "").err();
        assert_eq!(err.map(|e| e.field), Some("resource.file.path".to_owned()));
        let err = file("src/main.rs", "relative").err();
        assert_eq!(err.map(|e| e.field), Some("resource.file.cwd".to_owned()));
    }

    #[test]
    fn urls_are_normalized() {
        let Ok(Resource::Url { url, host, port, domains, method, path, .. }) =
            http("get", "HTTPS://API.GitHub.com.:443/repos/x?q=1#frag")
        else {
            panic!("did not normalize");
        };
        assert_eq!(url, "https://api.github.com/repos/x?q=1");
        assert_eq!(host, "api.github.com");
        assert_eq!(port, 443);
        assert_eq!(method, "GET");
        assert_eq!(path, "/repos/x");
        assert_eq!(domains, ["api.github.com", "github.com", "com"]);

        let Ok(Resource::Url { host, url, .. }) = http("GET", "https://bücher.example/") else {
            panic!("did not normalize");
        };
        assert_eq!(host, "xn--bcher-kva.example");
        assert_eq!(url, "https://xn--bcher-kva.example/");

        let Ok(Resource::Url { url, path, .. }) = http("GET", "https://example.com:8443/%61dmin/%2f%7e") else {
            panic!("did not normalize");
        };
        assert_eq!(url, "https://example.com:8443/admin/%2F~");
        assert_eq!(path, "/admin/%2F~");

        let Ok(Resource::Url { host, domains, .. }) = http("GET", "http://[::ffff:169.254.169.254]/latest") else {
            panic!("did not normalize");
        };
        assert_eq!(host, "169.254.169.254");
        assert_eq!(domains, ["169.254.169.254"]);
    }

    #[test]
    fn bad_urls_are_invalid() {
        for (method, url, field) in [
            ("GET", "not a url", "resource.http.url"),
            ("GET", "ftp://example.com/", "resource.http.url"),
            ("GET", "", "resource.http.url"),
            ("", "https://example.com/", "resource.http.method"),
            ("GE T", "https://example.com/", "resource.http.method"),
            ("GET", "https://user:hunter2@example.com/", "resource.http.url"),
            ("GET", "https://TOKEN@github.com/", "resource.http.url"),
            ("GET", "https://github.com\\@evil.example/", "resource.http.url"),
            ("GET", "https://git\thub.com/", "resource.http.url"),
        ] {
            assert_eq!(http(method, url).err().map(|e| e.field), Some(field.to_owned()), "{method} {url}");
        }
    }

    #[test]
    fn commands_take_the_program_from_argv0() {
        let argv = ["/usr/bin/git", "push", "origin", "main"].map(String::from).to_vec();
        let Ok(Resource::Command { program, argv, args, cwd, .. }) =
            normalize_resource(&ResourceInput::Command { argv, cwd: "/tmp/./x".into() })
        else {
            panic!("did not normalize");
        };
        assert_eq!(program, "git");
        assert_eq!(argv, "/usr/bin/git push origin main");
        assert!(args.contains("push") && args.contains("main") && args.len() == 3);
        assert_eq!(cwd, "/tmp/x");
    }

    #[test]
    fn empty_argv_and_ids_are_invalid() {
        let err = normalize_resource(&ResourceInput::Command { argv: vec![], cwd: String::new() }).err();
        assert_eq!(err.map(|e| e.field), Some("resource.command.argv".to_owned()));
        let input = RequestInput {
            request_id: String::new(),
            actor: Actor { user: "alice".into(), agent: " ".into(), session: "s1".into() },
            action: "fs.read".into(),
            resource: ResourceInput::File { path: "/x".into(), cwd: String::new(), pattern: false },
            justification: String::new(),
            context_json: String::new(),
        };
        assert_eq!(normalize(&input).err().map(|e| e.field), Some("actor.agent".to_owned()));
    }
}
