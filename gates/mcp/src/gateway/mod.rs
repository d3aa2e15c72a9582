//! One client connection of the gateway: an MCP server to the client, an MCP
//! client to each upstream server, and Warden in between for `tools/call`,
//! `tools/list` and `resources/read`.
//!
//! Each connection has its own upstream connections (a stdio server is
//! spawned per connection), so that nothing of one client (its
//! notifications, its sampling requests, its subscriptions) reaches another.
//!
//! By concern: this module holds the connection, who it acts for and its
//! upstreams; `handler` answers each MCP method; `decide` asks Warden;
//! `lists` keeps the filtered tool list and tells the client when it
//! changes; `upstream` is the gateway as a client of each server; `version`
//! is what differs between protocol versions, and [`Gateway`], the
//! connection as served, every answer in the client's version's terms.

#![allow(deprecated)] // sampling, roots, logging and subscriptions are deprecated in 2026-07-28, not gone

mod decide;
mod handler;
mod lists;
mod upstream;
pub mod version;

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rmcp::model::{ErrorData, LoggingLevel, ProtocolVersion, ServerNotification};
use rmcp::service::{RequestContext, SubscriptionSink};
use rmcp::{Peer, RoleServer};
use tokio::sync::OnceCell;
use warden_sdk::{Actor, Client};

use crate::config::Config;
use upstream::{Upstream, UpstreamHandler, Upstreams, connect};
pub use version::Gateway;

/// Between a server's name and its tool's name when tools are prefixed.
pub const SEPARATOR: &str = "__";
/// The action a `resources/read` is decided as (on `Tool::"<server>/<uri>"`).
pub const READ_ACTION: &str = "mcp.read";
/// The action a `prompts/get` is decided as (on `Tool::"<server>/<prompt>"`,
/// with the prompt's arguments).
pub const PROMPT_ACTION: &str = "mcp.prompt";
/// The action a `tools/call` is decided as.
pub const CALL_ACTION: &str = "tool.call";
/// How long a server may take to start and answer `initialize`.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// A resource URI as the URL parser spells it (scheme lower-cased, dot
/// segments resolved); one with white space or control characters, or
/// that does not parse, is refused.
fn canonical_uri(uri: &str) -> Result<String, ErrorData> {
    if uri.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(ErrorData::invalid_params("the resource URI has white space or control characters", None));
    }
    url::Url::parse(uri)
        .map(String::from)
        .map_err(|e| ErrorData::invalid_params(format!("the resource URI does not parse: {e}"), None))
}

/// Whether the monitor takes `name` as a tool (or prompt, or URI) name.
fn acceptable_name(name: &str) -> bool {
    !name.trim().is_empty() && name.len() <= 256 && !name.chars().any(char::is_control)
}

/// What every connection shares: the configuration and the monitor.
pub struct Shared {
    /// The gateway's configuration.
    pub config: Config,
    /// The harness-role client of the monitor.
    pub warden: Client,
    /// Where the monitor is, for messages.
    pub endpoint: String,
    /// What the upstream servers offer, merged, as a connection last found.
    upstream_capabilities: Mutex<Option<rmcp::model::ServerCapabilities>>,
    /// The tools each client (by its key) was last shown, on any of its
    /// connections: what a change is a change from for a stream that
    /// listens on a connection of its own (a stateless request).
    last_shown: Mutex<HashMap<String, BTreeSet<String>>>,
}

impl Shared {
    /// What connections share.
    pub fn new(config: Config, warden: Client, endpoint: String) -> Self {
        Self {
            config,
            warden,
            endpoint,
            upstream_capabilities: Mutex::new(None),
            last_shown: Mutex::new(HashMap::new()),
        }
    }

    /// Who a request acts for, and a stable key of the client (for the
    /// session of stateless requests): over HTTP (`parts` present) from the
    /// bearer token when clients are configured, and from the session
    /// header when one is configured; otherwise the configured actor.
    pub fn identify(&self, parts: Option<&http::request::Parts>) -> Result<(Identity, String), ErrorData> {
        let config = &self.config;
        let Some(parts) = parts else {
            let identity =
                Identity { user: config.user.clone(), agent: config.agent.clone(), session: config.session.clone() };
            return Ok((identity, format!("{}-{}", config.user, config.agent)));
        };
        // Over HTTP every request carries a client's token (`http` refuses
        // the others before they get here).
        let client = crate::http::client_of(&config.clients, &parts.headers)
            .ok_or_else(|| ErrorData::invalid_request("no valid bearer token for this gateway", None))?;
        let header = config.session_header.as_ref().and_then(|name| parts.headers.get(name.as_str()));
        // A session fixed for the client wins over the session header.
        let session = match (&client.session, header) {
            (Some(fixed), _) => Some(fixed.clone()),
            // Named by the client, within the client's own sessions: the
            // token's hash comes first, so that two clients of one user can
            // never name (and share the labels and windows of) each other's.
            (None, Some(value)) => Some(format!(
                "{}/{}",
                client.token_sha256.chars().take(8).collect::<String>().to_ascii_lowercase(),
                value.to_str().map_err(|_| ErrorData::invalid_request("the session header is not text", None))?
            )),
            (None, None) => config.session.clone(),
        };
        let identity = Identity {
            user: client.user.clone(),
            agent: client.agent.clone().unwrap_or_else(|| config.agent.clone()),
            session,
        };
        Ok((identity, client.token_sha256.chars().take(16).collect()))
    }
}

/// Who a connection acts for, and how its session is named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The user and agent kind.
    pub user: String,
    /// The kind of agent.
    pub agent: String,
    /// The session, when fixed; otherwise one is made for the connection.
    pub session: Option<String>,
}

/// One client connection: the MCP methods it answers are in terms every
/// protocol version shares; it is served through [`Gateway`], which shapes
/// each answer for the version the client speaks.
#[derive(Clone)]
pub struct Connection {
    shared: Arc<Shared>,
    state: Arc<State>,
}

struct State {
    /// The actor, and the key of the client it was fixed for.
    actor: Mutex<Option<(Actor, String)>>,
    upstreams: OnceCell<Upstreams>,
    /// The client, once a request came through a peer that reaches it (a
    /// `server/discover` comes through one that does not): what upstreams'
    /// notifications and requests are forwarded to.
    downstream: Mutex<Option<Peer<RoleServer>>>,
    /// The protocol version the client's last request was made in.
    client_version: Mutex<Option<ProtocolVersion>>,
    /// The client's open `subscriptions/listen` streams (2026-07-28): the
    /// only way change notifications reach a client on that version.
    listeners: Mutex<Vec<Listener>>,
    /// The names of the tools the client was last shown.
    shown: Mutex<Option<BTreeSet<String>>>,
    /// The policy version the last list was filtered with.
    listed_version: Mutex<String>,
    /// Whether the list watcher runs.
    watching: std::sync::atomic::AtomicBool,
    /// Wakes the list watcher (a decision under another policy version, an
    /// upstream's own list change).
    recheck: Arc<tokio::sync::Notify>,
}

/// One open `subscriptions/listen` stream.
struct Listener {
    /// The listen request's id, to take it out when it ends.
    id: rmcp::model::RequestId,
    /// Sends only what the stream accepted.
    sink: SubscriptionSink,
    /// The resource URIs it watches (subscribed upstream while it is open).
    uris: Vec<String>,
}

/// Locks a mutex, taking the value even if a panicking holder poisoned it.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Connection {
    /// A connection; who it acts for is known at its first request.
    pub fn new(shared: Arc<Shared>) -> Self {
        Self {
            shared,
            state: Arc::new(State {
                actor: Mutex::new(None),
                upstreams: OnceCell::new(),
                downstream: Mutex::new(None),
                client_version: Mutex::new(None),
                listeners: Mutex::new(Vec::new()),
                shown: Mutex::new(None),
                listed_version: Mutex::new(String::new()),
                watching: std::sync::atomic::AtomicBool::new(false),
                recheck: Arc::new(tokio::sync::Notify::new()),
            }),
        }
    }

    /// The actor of this request. It is fixed at the connection's first
    /// request: over HTTP from the client's bearer token (and the session
    /// header, when configured), otherwise from the configuration. A session
    /// made for the connection when none is configured: a new one per
    /// connection that starts with `initialize`, and a stable one per client
    /// for stateless (2026-07-28) requests, so that a stateless client keeps
    /// its session's labels from one request to the next. A later request
    /// of another client on the same connection is refused.
    fn actor(&self, context: &RequestContext<RoleServer>, initializing: bool) -> Result<Actor, ErrorData> {
        let parts = context.extensions.get::<http::request::Parts>();
        let (identity, client_key) = self.shared.identify(parts)?;
        let mut actor = lock(&self.state.actor);
        if let Some((actor, key)) = actor.as_ref() {
            if *key != client_key || actor.user != identity.user || actor.agent != identity.agent {
                return Err(ErrorData::invalid_request("this MCP session belongs to another client", None));
            }
            return Ok(actor.clone());
        }
        // Over stdio the connection is the process's; over HTTP a session
        // starts with `initialize`, and a request without one is stateless.
        let whole_connection = parts.is_none() || initializing;
        let session = identity.session.clone().unwrap_or_else(|| {
            if whole_connection {
                format!("mcp-{}", uuid::Uuid::new_v4().simple())
            } else {
                format!("mcp-{client_key}")
            }
        });
        if whole_connection {
            self.watch_list(context.peer.clone());
        }
        let fixed = Actor::new(identity.user, identity.agent, session);
        *actor = Some((fixed.clone(), client_key));
        Ok(fixed)
    }

    /// Connects to every upstream (once), and returns those that answered.
    /// One that cannot be reached leaves its tools out and makes its calls
    /// fail; when none can, the connection fails. `peer` becomes the client
    /// that upstream notifications and requests are forwarded to, when it
    /// reaches one.
    async fn upstreams(&self, peer: &Peer<RoleServer>) -> Result<&Vec<Upstream>, ErrorData> {
        if !peer.is_transport_closed() {
            let mut downstream = lock(&self.state.downstream);
            if downstream.as_ref().is_none_or(Peer::is_transport_closed) {
                *downstream = Some(peer.clone());
            }
        }
        let upstreams = self
            .state
            .upstreams
            .get_or_init(|| async {
                let mut upstreams = Upstreams::default();
                for server in &self.shared.config.servers {
                    let handler = UpstreamHandler::new(&server.name, &self.state);
                    let maps = handler.maps();
                    let connected = tokio::time::timeout(CONNECT_TIMEOUT, connect(server, handler))
                        .await
                        .unwrap_or_else(|_| Err(format!("no answer to `initialize` within {CONNECT_TIMEOUT:?}")));
                    match connected {
                        Ok(running) => upstreams.live.push(Upstream::new(server.name.clone(), running, maps)),
                        Err(e) => {
                            tracing::warn!(server = %server.name, error = %e, "upstream server unreachable");
                            upstreams.failed.push((server.name.clone(), e));
                        }
                    }
                }
                // What they offer, for connections that have not connected
                // theirs when they must say (see `get_info`).
                *lock(&self.shared.upstream_capabilities) = Some(upstream::capabilities(&upstreams.live));
                upstreams
            })
            .await;
        if upstreams.live.is_empty() {
            let why: Vec<String> = upstreams.failed.iter().map(|(name, e)| format!("`{name}`: {e}")).collect();
            return Err(ErrorData::internal_error(
                format!("no upstream server can be reached ({})", why.join("; ")),
                None,
            ));
        }
        Ok(&upstreams.live)
    }

    async fn upstream(&self, peer: &Peer<RoleServer>, name: &str) -> Result<&Upstream, ErrorData> {
        if let Some(found) = self.upstreams(peer).await?.iter().find(|u| u.name == name) {
            return Ok(found);
        }
        let failed = self.state.upstreams.get().and_then(|u| u.failed.iter().find(|(n, _)| n == name));
        Err(match failed {
            Some((_, e)) => ErrorData::internal_error(format!("upstream server `{name}` cannot be reached: {e}"), None),
            None => ErrorData::invalid_params(format!("no server `{name}` behind this gateway"), None),
        })
    }

    /// The server and the upstream's own name of a tool as the client names it.
    fn split_name<'a>(&'a self, name: &'a str) -> Result<(&'a str, &'a str), ErrorData> {
        if !self.shared.config.prefixed() {
            let server = self.shared.config.servers.first().map(|s| s.name.as_str()).unwrap_or_default();
            return Ok((server, name));
        }
        name.split_once(SEPARATOR)
            .filter(|(server, _)| self.shared.config.servers.iter().any(|s| s.name == *server))
            .ok_or_else(|| {
                ErrorData::invalid_params(format!("unknown tool `{name}`: tools are named `<server>__<tool>`"), None)
            })
    }

    fn client_name(&self, server: &str, tool: &str) -> String {
        if self.shared.config.prefixed() { format!("{server}{SEPARATOR}{tool}") } else { tool.to_owned() }
    }

    /// Ends the connections to the upstream servers (when the client has
    /// left): each server is closed and waited for, and stopped if it does
    /// not exit by itself.
    pub async fn close(&self) {
        if let Some(upstreams) = self.state.upstreams.get() {
            for upstream in &upstreams.live {
                upstream.close().await;
            }
        }
    }
}

impl State {
    /// Notes the protocol version a request of the client was made in.
    fn saw_client_version(&self, version: Option<ProtocolVersion>) {
        if let Some(version) = version {
            *lock(&self.client_version) = Some(version);
        }
    }

    /// Whether the client speaks a version without `initialize`
    /// (2026-07-28): no requests from servers, change notifications only
    /// through `subscriptions/listen`, log messages only for a request that
    /// asks.
    fn client_is_stateless(&self) -> bool {
        version::is_stateless(lock(&self.client_version).as_ref())
    }

    fn downstream(&self) -> Option<Peer<RoleServer>> {
        lock(&self.downstream).clone()
    }

    /// Tells the client of a change (a list, a resource): an older client
    /// directly, a client on 2026-07-28 through each of its
    /// `subscriptions/listen` streams that accepted it, and never otherwise.
    /// False when the client is gone.
    async fn tell(&self, notification: ServerNotification) -> bool {
        if !self.client_is_stateless() {
            let Some(peer) = self.downstream() else { return true };
            return peer.send_notification(notification).await.is_ok();
        }
        let sinks: Vec<SubscriptionSink> = lock(&self.listeners).iter().map(|l| l.sink.clone()).collect();
        for sink in sinks {
            // A stream that did not accept this kind refuses it here.
            let _ = sink.send(notification.clone()).await;
        }
        true
    }

    /// Whether a log message at `level` may reach the client for a request
    /// that asked for `asked` (2026-07-28: none unless asked, and only at or
    /// above the level asked for; before, whatever the upstream sends, which
    /// `logging/setLevel` governs).
    fn log_wanted(&self, asked: Option<LoggingLevel>, level: LoggingLevel) -> bool {
        if !self.client_is_stateless() {
            return true;
        }
        asked.is_some_and(|asked| version::log_rank(level) >= version::log_rank(asked))
    }
}
