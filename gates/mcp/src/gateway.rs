//! One client connection of the gateway: an MCP server to the client, an MCP
//! client to each upstream server, and Warden in between for `tools/call`,
//! `tools/list` and `resources/read`.
//!
//! Each connection has its own upstream connections (a stdio server is
//! spawned per connection), so that nothing of one client (its
//! notifications, its sampling requests, its subscriptions) reaches another.

#![allow(deprecated)] // sampling, roots, logging and subscriptions are deprecated in 2026-07-28, not gone

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use rmcp::model::*;
use rmcp::service::{NotificationContext, PeerRequestOptions, RequestContext, RunningService};
use rmcp::transport::{ConfigureCommandExt as _, StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, ErrorData, Peer, RoleClient, RoleServer, ServerHandler, ServiceError, ServiceExt as _};
use tokio::sync::OnceCell;
use warden_sdk::proto as pb;
use warden_sdk::{ActionRequest, Actor, Client, Decision, Outcome};

use crate::config::{Config, Server, Transport};

/// Between a server's name and its tool's name when tools are prefixed.
pub const SEPARATOR: &str = "__";
/// The action a `resources/read` is decided as (on `Tool::"<server>/<uri>"`).
pub const READ_ACTION: &str = "mcp.read";
/// The action a `prompts/get` is decided as (on `Tool::"<server>/<prompt>"`,
/// with the prompt's arguments).
pub const PROMPT_ACTION: &str = "mcp.prompt";
/// The action a `tools/call` is decided as.
pub const CALL_ACTION: &str = "tool.call";
/// How often a waiting call tells the client it is still waiting.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);
/// Most resources one `Preview` call takes (the monitor's bound).
const PREVIEW_CHUNK: usize = 1024;
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

/// How often a list watcher with no refresh period checks that its client is
/// still there.
const LIVENESS_CHECK: Duration = Duration::from_secs(30);
/// How long the gateway waits for the client to answer a request of an
/// upstream (sampling, elicitation, roots).
const CLIENT_ANSWER_TIMEOUT: Duration = Duration::from_secs(300);
/// How long after an approval's deadline the monitor's final answer is awaited.
const EXPIRY_GRACE: Duration = Duration::from_secs(2);

/// What every connection shares: the configuration and the monitor.
pub struct Shared {
    /// The gateway's configuration.
    pub config: Config,
    /// The harness-role client of the monitor.
    pub warden: Client,
    /// Where the monitor is, for messages.
    pub endpoint: String,
}

impl Shared {
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

/// One client connection.
#[derive(Clone)]
pub struct Connection {
    shared: Arc<Shared>,
    state: Arc<State>,
}

struct State {
    /// The actor, and the key of the client it was fixed for.
    actor: Mutex<Option<(Actor, String)>>,
    upstreams: OnceCell<Upstreams>,
    /// The names of the tools the client was last shown.
    shown: Mutex<Option<BTreeSet<String>>>,
    /// The policy version the last list was filtered with.
    listed_version: Mutex<String>,
    /// Wakes the list watcher (a decision under another policy version, an
    /// upstream's own list change).
    recheck: Arc<tokio::sync::Notify>,
}

#[derive(Default)]
struct Upstreams {
    live: Vec<Upstream>,
    /// The servers that could not be reached, and why.
    failed: Vec<(String, String)>,
}

struct Upstream {
    name: String,
    service: RunningService<RoleClient, UpstreamHandler>,
    /// Shared with the handler: the upstream request's progress token → the client's.
    progress: ProgressMap,
    /// Shared with the handler: the calls in flight.
    calls: CallMap,
    /// The names of the server's tools, as it last listed them.
    tools: Mutex<Option<HashSet<String>>>,
}

type ProgressMap = Arc<Mutex<HashMap<ProgressToken, ProgressToken>>>;
type CallMap = Arc<Mutex<HashMap<RequestId, RequestId>>>;

/// Locks a mutex, taking the value even if a panicking holder poisoned it.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn text_result(text: String) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(text)])
}

/// What the agent is told when Warden stands in the way: the policies and
/// their reasons (and the approver's note), so that the model can read why.
fn denial_text(what: &str, decision: &Decision) -> String {
    let mut text = format!("Warden denied {what}");
    if !decision.policy_ids.is_empty() {
        text.push_str(&format!(" (policy {})", decision.policy_ids.join(", ")));
    }
    if decision.reasons.is_empty() {
        text.push_str(": no reason given");
    } else {
        text.push_str(&format!(": {}", decision.reasons.join("; ")));
    }
    if !decision.note.is_empty() {
        text.push_str(&format!(" (approver's note: {})", decision.note));
    }
    text
}

/// A result from an upstream that spoke an older protocol carries no
/// `resultType`; a client on 2026-07-28 requires it (rmcp drops it again
/// for clients on older versions).
fn complete(result_type: &mut Option<ResultType>) {
    result_type.get_or_insert(ResultType::COMPLETE);
}

fn upstream_error(server: &str, error: ServiceError) -> ErrorData {
    match error {
        // The upstream's own JSON-RPC error passes through as it is.
        ServiceError::McpError(e) => e,
        other => ErrorData::internal_error(format!("upstream server `{server}` failed: {other}"), None),
    }
}

impl Connection {
    /// A connection; who it acts for is known at its first request.
    pub fn new(shared: Arc<Shared>) -> Self {
        Self {
            shared,
            state: Arc::new(State {
                actor: Mutex::new(None),
                upstreams: OnceCell::new(),
                shown: Mutex::new(None),
                listed_version: Mutex::new(String::new()),
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

    /// Connects to every upstream (once), with `peer` as the client that
    /// upstream notifications and requests are forwarded to, and returns
    /// those that answered. One that cannot be reached leaves its tools out
    /// and makes its calls fail; when none can, the connection fails.
    async fn upstreams(&self, peer: &Peer<RoleServer>) -> Result<&Vec<Upstream>, ErrorData> {
        let upstreams = self
            .state
            .upstreams
            .get_or_init(|| async {
                let mut upstreams = Upstreams::default();
                for server in &self.shared.config.servers {
                    let progress = ProgressMap::default();
                    let calls = CallMap::default();
                    let handler = UpstreamHandler {
                        server: server.name.clone(),
                        downstream: peer.clone(),
                        progress: Arc::clone(&progress),
                        calls: Arc::clone(&calls),
                        state: Arc::downgrade(&self.state),
                    };
                    let connected = tokio::time::timeout(CONNECT_TIMEOUT, connect(server, handler))
                        .await
                        .unwrap_or_else(|_| Err(format!("no answer to `initialize` within {CONNECT_TIMEOUT:?}")));
                    match connected {
                        Ok(service) => upstreams.live.push(Upstream {
                            name: server.name.clone(),
                            service,
                            progress,
                            calls,
                            tools: Mutex::new(None),
                        }),
                        Err(e) => {
                            tracing::warn!(server = %server.name, error = %e, "upstream server unreachable");
                            upstreams.failed.push((server.name.clone(), e));
                        }
                    }
                }
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

    /// Every upstream's tools, named for the client, filtered by `Preview`:
    /// a tool this actor may never call (DENY with empty arguments) is not
    /// shown; one that needs approval is. Remembers what was shown.
    async fn filtered_tools(&self, peer: &Peer<RoleServer>) -> Result<Vec<Tool>, ErrorData> {
        // A server that fails to list leaves its tools out; when every one
        // fails, so does the list.
        let mut listed = Vec::new();
        let mut failure = None;
        let upstreams = self.upstreams(peer).await?;
        for upstream in upstreams {
            match upstream.service.peer().list_all_tools().await {
                Ok(tools) => listed.extend(tools.into_iter().map(|tool| (upstream.name.clone(), tool))),
                Err(e) => {
                    tracing::warn!(server = %upstream.name, error = %e, "tools/list failed upstream");
                    failure.get_or_insert(upstream_error(&upstream.name, e));
                }
            }
        }
        if let Some(failure) = failure.filter(|_| listed.is_empty()) {
            return Err(failure);
        }
        for upstream in upstreams {
            let names = listed.iter().filter(|(server, _)| *server == upstream.name).map(|(_, t)| t.name.to_string());
            *lock(&upstream.tools) = Some(names.collect());
        }
        let names: Vec<(&str, &str)> =
            listed.iter().map(|(server, tool)| (server.as_str(), tool.name.as_ref())).collect();
        let (outcomes, version) = self.preview(CALL_ACTION, &names).await.map_err(|e| {
            ErrorData::internal_error(
                format!("Warden at {} did not answer, so no tool is shown: {e}", self.shared.endpoint),
                None,
            )
        })?;
        let tools: Vec<Tool> = listed
            .into_iter()
            .zip(outcomes)
            .filter(|(_, outcome)| *outcome != Outcome::Deny)
            .map(|((server, mut tool), _)| {
                tool.name = Cow::Owned(self.client_name(&server, &tool.name));
                tool
            })
            .collect();
        *lock(&self.state.shown) = Some(tools.iter().map(|t| t.name.to_string()).collect());
        *lock(&self.state.listed_version) = version;
        Ok(tools)
    }

    /// `Preview` of `action` on each (server, name), in chunks the monitor
    /// takes. A name the monitor would refuse as input (empty, too long,
    /// control characters) is DENY here, so one odd name of one server
    /// hides that entry, not every server's list.
    async fn preview(&self, action: &str, names: &[(&str, &str)]) -> Result<(Vec<Outcome>, String), warden_sdk::Error> {
        let actor = self.current_actor()?;
        let mut outcomes = vec![Outcome::Deny; names.len()];
        let asked: Vec<usize> =
            (0..names.len()).filter(|&i| names.get(i).is_some_and(|(_, n)| acceptable_name(n))).collect();
        let mut version = String::new();
        for chunk in asked.chunks(PREVIEW_CHUNK) {
            let resources = chunk.iter().filter_map(|&i| names.get(i)).map(|(server, name)| {
                pb::resource::Kind::Tool(pb::ToolResource {
                    server: (*server).to_owned(),
                    name: (*name).to_owned(),
                    arguments_json: String::new(),
                })
            });
            let preview = self.shared.warden.preview(&actor, action, resources).await?;
            for (&i, outcome) in chunk.iter().zip(preview.outcomes) {
                if let Some(slot) = outcomes.get_mut(i) {
                    *slot = outcome;
                }
            }
            version = preview.policy_version;
        }
        Ok((outcomes, version))
    }

    /// The actor fixed at the connection's first request.
    fn current_actor(&self) -> Result<Actor, warden_sdk::Error> {
        lock(&self.state.actor)
            .as_ref()
            .map(|(actor, _)| actor.clone())
            .ok_or_else(|| warden_sdk::Error::Config("no actor yet".into()))
    }

    /// Whether `tool` is a tool `server` lists (asked again when the last
    /// list did not have it): a call is forwarded only under a name the
    /// server itself gave, so that a server that matches names loosely
    /// cannot be reached under a spelling the policies did not expect.
    async fn listed(&self, upstream: &Upstream, tool: &str) -> Result<bool, ErrorData> {
        if lock(&upstream.tools).as_ref().is_some_and(|names| names.contains(tool)) {
            return Ok(true);
        }
        let tools = upstream.service.peer().list_all_tools().await.map_err(|e| upstream_error(&upstream.name, e))?;
        let names: HashSet<String> = tools.into_iter().map(|t| t.name.to_string()).collect();
        let found = names.contains(tool);
        *lock(&upstream.tools) = Some(names);
        Ok(found)
    }

    /// A decision under another policy version than the shown list's: the
    /// list may be out of date.
    fn saw_version(&self, version: &str) {
        let stale = {
            let listed = lock(&self.state.listed_version);
            !listed.is_empty() && *listed != version
        };
        if stale {
            self.state.recheck.notify_one();
        }
    }

    /// Watches what the client was shown, while the client is connected:
    /// every `list_refresh`, on a decision under a new policy version, and
    /// when an upstream's list changes, the list is filtered again; when it
    /// differs, the client gets `notifications/tools/list_changed`. The
    /// watcher holds the connection weakly: it ends with it.
    fn watch_list(&self, peer: Peer<RoleServer>) {
        let shared = Arc::clone(&self.shared);
        let state = Arc::downgrade(&self.state);
        let recheck = Arc::clone(&self.state.recheck);
        let every = shared.config.list_refresh;
        tokio::spawn(async move {
            loop {
                let refresh = tokio::select! {
                    () = tokio::time::sleep(if every.is_zero() { LIVENESS_CHECK } else { every }) => !every.is_zero(),
                    () = recheck.notified() => true,
                };
                let Some(state) = state.upgrade() else { return };
                if peer.is_transport_closed() {
                    return;
                }
                if !refresh {
                    continue;
                }
                let this = Connection { shared: Arc::clone(&shared), state };
                let before = lock(&this.state.shown).clone();
                let Some(before) = before else { continue };
                let Ok(tools) = this.filtered_tools(&peer).await else { continue };
                let now: BTreeSet<String> = tools.iter().map(|t| t.name.to_string()).collect();
                if now != before && peer.notify_tool_list_changed().await.is_err() {
                    return;
                }
            }
        });
    }

    /// Asks Warden about `action` on `Tool::"<server>/<name>"`; the error
    /// to answer with when it is not allowed.
    async fn refusal(
        &self,
        action: &str,
        server: &str,
        name: &str,
        arguments_json: String,
        what: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<Option<ErrorData>, ErrorData> {
        let asked = ActionRequest::new(
            action,
            pb::authorize_request::Resource::Tool(pb::ToolResource {
                server: server.to_owned(),
                name: name.to_owned(),
                arguments_json,
            }),
        );
        Ok(self.decide(asked, what, context).await?.map(|refused| {
            let text = refused.content.first().and_then(|c| c.as_text()).map(|t| t.text.clone());
            ErrorData::invalid_request(text.unwrap_or_else(|| what.to_owned()), None)
        }))
    }

    /// Asks Warden about a call and waits through PENDING (telling the
    /// client, when it asked for progress); `Ok(None)` when the call may go
    /// ahead, `Ok(Some(result))` with what the agent is told when not.
    async fn decide(
        &self,
        request: ActionRequest,
        what: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<Option<CallToolResult>, ErrorData> {
        let actor = self.actor(context, false)?;
        let unreachable = |e: warden_sdk::Error| {
            Some(text_result(format!(
                "Warden at {} could not decide, so {what} was not made: {e}",
                self.shared.endpoint
            )))
        };
        let mut decision = match self.shared.warden.authorize(&actor, request).await {
            Ok(decision) => decision,
            Err(e) => return Ok(unreachable(e)),
        };
        self.saw_version(&decision.policy_version);
        let token = context.meta.get_progress_token();
        let started = tokio::time::Instant::now();
        let mut ticks = 0u32;
        while decision.outcome == Outcome::Pending {
            if decision.approval_id.is_empty() {
                return Ok(Some(text_result(format!(
                    "Warden answered PENDING without an approval, so {what} was not made"
                ))));
            }
            let until_deadline = decision
                .expires_at
                .and_then(|at| at.checked_add(EXPIRY_GRACE)?.duration_since(SystemTime::now()).ok())
                .unwrap_or_default();
            let left = until_deadline.min(self.shared.config.max_wait.saturating_sub(started.elapsed()));
            if left.is_zero() {
                return Ok(Some(text_result(format!(
                    "{what} waited for a person's approval ({}) and none came in time: not made",
                    decision.approval_id
                ))));
            }
            if let Some(token) = &token {
                ticks += 1;
                let message = format!(
                    "waiting for a person to approve ({}): {}",
                    decision.approval_id,
                    decision.reasons.join("; ")
                );
                let progress = ProgressNotificationParam::new(token.clone(), f64::from(ticks)).with_message(message);
                let _ = context.peer.notify_progress(progress).await;
            }
            let wait = left.min(PROGRESS_EVERY);
            let next = tokio::select! {
                next = self.shared.warden.await_decision(&decision.approval_id, wait) => next,
                () = context.ct.cancelled() => {
                    return Err(ErrorData::internal_error(format!("{what} was cancelled while it waited for approval"), None));
                }
            };
            match next {
                Ok(next) if next.approval_id == decision.approval_id => decision = next,
                Ok(other) => {
                    return Ok(Some(text_result(format!(
                        "Warden answered about approval {} while {what} waited for {}: not made",
                        other.approval_id, decision.approval_id
                    ))));
                }
                Err(e) if e.is_transient() => {
                    // The monitor may be restarting; the approval survives it.
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => return Ok(unreachable(e)),
            }
        }
        match decision.outcome {
            Outcome::Allow => Ok(None),
            _ => Ok(Some(text_result(denial_text(what, &decision)))),
        }
    }
}

/// Opens one upstream connection.
async fn connect(
    server: &Server,
    handler: UpstreamHandler,
) -> Result<RunningService<RoleClient, UpstreamHandler>, String> {
    let service = match &server.transport {
        Transport::Stdio { command, args, env, cwd } => {
            let command = tokio::process::Command::new(command).configure(|c| {
                // The server gets the gateway's environment without Warden's
                // own variables: a tool that prints its environment must not
                // hand the agent the harness token.
                for (name, _) in std::env::vars_os() {
                    if name.to_string_lossy().starts_with("WARDEN_") {
                        c.env_remove(name);
                    }
                }
                c.args(args).envs(env);
                if let Some(cwd) = cwd {
                    c.current_dir(cwd);
                }
            });
            let transport = TokioChildProcess::new(command).map_err(|e| e.to_string())?;
            handler.serve(transport).await.map_err(|e| e.to_string())?
        }
        Transport::Http { url, headers } => {
            let mut config =
                rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(url.clone());
            for (name, value) in headers {
                let name = http::HeaderName::try_from(name.as_str()).map_err(|e| format!("header `{name}`: {e}"))?;
                let value = http::HeaderValue::try_from(value.as_str()).map_err(|e| format!("header value: {e}"))?;
                config.custom_headers.insert(name, value);
            }
            // rmcp reconnects a dropped stream for ever by default, so that a
            // call to a dead server would hang: two tries, then an error.
            let mut retry = rmcp::transport::common::client_side_sse::FixedInterval::default();
            retry.max_times = Some(2);
            retry.duration = Duration::from_millis(300);
            config.retry_config = Arc::new(retry);
            let transport = StreamableHttpClientTransport::from_config(config);
            handler.serve(transport).await.map_err(|e| e.to_string())?
        }
    };
    // A proxy must not answer from a cache of what the upstream said before.
    service.peer().set_response_cache_config(rmcp::ClientCacheConfig::disabled()).await;
    Ok(service)
}

impl ServerHandler for Connection {
    fn get_info(&self) -> ServerInfo {
        let mut capabilities = ServerCapabilities::default();
        // What the upstreams offer (known once connected), merged.
        if let Some(upstreams) = self.state.upstreams.get() {
            for info in upstreams.live.iter().filter_map(|u| u.service.peer().peer_info()) {
                let c = &info.capabilities;
                capabilities.resources = capabilities.resources.take().or_else(|| c.resources.clone());
                capabilities.prompts = capabilities.prompts.take().or_else(|| c.prompts.clone());
                capabilities.logging = capabilities.logging.take().or_else(|| c.logging.clone());
                capabilities.completions = capabilities.completions.take().or_else(|| c.completions.clone());
            }
        }
        // Tools always: the filtered list changes with policies.
        let mut tools = ToolsCapability::default();
        tools.list_changed = Some(true);
        capabilities.tools = Some(tools);
        ServerInfo::new(capabilities)
            .with_server_info(Implementation::new("warden-mcp", env!("CARGO_PKG_VERSION")))
            .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
            .with_instructions(
                "Tool calls go through Warden: a call a policy forbids returns an error result naming the policy and its reason; one that needs a person's approval waits for it.",
            )
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        context.peer.set_peer_info(request.clone());
        self.actor(&context, true)?;
        self.upstreams(&context.peer).await?;
        self.negotiate_initialize(&request)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.actor(&context, false)?;
        let tools = self.filtered_tools(&context.peer).await?;
        // The list is this user's: no one else may be served it from a cache.
        Ok(ListToolsResult::with_all_items(tools).with_cache_scope(CacheScope::Private))
    }

    async fn call_tool(
        &self,
        mut request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let client_name = request.name.to_string();
        let (server, tool) = self.split_name(&client_name)?;
        let (server, tool) = (server.to_owned(), tool.to_owned());
        // What Warden decides on is the name and the arguments; nothing
        // else of the client's request goes upstream: not its `_meta`
        // (rmcp sets the progress token), not multi-round-trip input,
        // which Warden would not have seen.
        if request.input_responses.is_some() || request.request_state.is_some() {
            return Ok(text_result(format!(
                "the call of `{client_name}` carries multi-round-trip input (inputResponses, requestState), which warden-mcp does not forward: not made"
            ))
            .into());
        }
        request.meta = None;
        let upstream = self.upstream(&context.peer, &server).await?;
        if !self.listed(upstream, &tool).await? {
            return Err(ErrorData::invalid_params(format!("unknown tool `{client_name}`"), None));
        }
        // The arguments are serialized once: Warden decides on this text,
        // and the upstream receives exactly these arguments.
        let arguments = request.arguments.take().unwrap_or_default();
        let arguments_json = serde_json::to_string(&arguments)
            .map_err(|e| ErrorData::invalid_params(format!("arguments: {e}"), None))?;
        let what = format!("the call of `{client_name}`");
        let asked = ActionRequest::call_tool(&server, &tool, arguments_json.clone());
        if let Some(refused) = self.decide(asked, &what, &context).await? {
            return Ok(refused.into());
        }
        let decided: JsonObject = serde_json::from_str(&arguments_json)
            .map_err(|e| ErrorData::internal_error(format!("arguments: {e}"), None))?;
        request.arguments = Some(decided);
        request.name = Cow::Owned(tool);
        let result = forward_call(upstream, request, &context).await;
        result.map_err(|e| upstream_error(&server, e))
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let mut all = Vec::new();
        for upstream in self.upstreams(&context.peer).await? {
            if self.shared.config.prefixed() || request.is_none() {
                let peer = upstream.service.peer();
                all.extend(peer.list_all_resources().await.map_err(|e| upstream_error(&upstream.name, e))?);
            } else {
                let peer = upstream.service.peer();
                return peer.list_resources(request).await.map_err(|e| upstream_error(&upstream.name, e));
            }
        }
        Ok(ListResourcesResult::with_all_items(all))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let mut all = Vec::new();
        for upstream in self.upstreams(&context.peer).await? {
            let peer = upstream.service.peer();
            all.extend(peer.list_all_resource_templates().await.map_err(|e| upstream_error(&upstream.name, e))?);
        }
        Ok(ListResourceTemplatesResult::with_all_items(all))
    }

    async fn read_resource(
        &self,
        mut request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        // Warden decides on the URI as a URL parser spells it, and that
        // spelling is what the server receives: `DEMO://x/./y` cannot be
        // decided as one resource and read as another.
        let uri = canonical_uri(&request.uri)?;
        request.uri = uri.clone();
        if request.input_responses.is_some() || request.request_state.is_some() {
            return Err(ErrorData::invalid_request("warden-mcp does not forward multi-round-trip input", None));
        }
        request.meta = None;
        // A URI names no server: ask the servers in order, each only after
        // Warden allows reading it from that server.
        let upstreams = self.upstreams(&context.peer).await?;
        let mut last = None;
        for upstream in upstreams {
            let what = format!("the read of `{uri}` from `{}`", upstream.name);
            if let Some(refused) =
                self.refusal(READ_ACTION, &upstream.name, &uri, String::new(), &what, &context).await?
            {
                last = Some(refused);
                continue;
            }
            match upstream.service.peer().read_resource_once(request.clone()).await {
                Ok(ReadResourceResponse::Complete(mut found)) => {
                    complete(&mut found.result_type);
                    return Ok(ReadResourceResponse::Complete(found));
                }
                Ok(other) => return Ok(other),
                Err(e) => last = Some(upstream_error(&upstream.name, e)),
            }
        }
        Err(last.unwrap_or_else(|| ErrorData::resource_not_found(format!("no server has `{uri}`"), None)))
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        for upstream in self.upstreams(&context.peer).await? {
            let _ = upstream.service.peer().subscribe(request.clone()).await;
        }
        Ok(())
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        for upstream in self.upstreams(&context.peer).await? {
            let _ = upstream.service.peer().unsubscribe(request.clone()).await;
        }
        Ok(())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        self.actor(&context, false)?;
        let mut listed = Vec::new();
        for upstream in self.upstreams(&context.peer).await? {
            let prompts =
                upstream.service.peer().list_all_prompts().await.map_err(|e| upstream_error(&upstream.name, e))?;
            listed.extend(prompts.into_iter().map(|prompt| (upstream.name.clone(), prompt)));
        }
        // Like tools: a prompt this actor may never get is not shown.
        let names: Vec<(&str, &str)> = listed.iter().map(|(server, p)| (server.as_str(), p.name.as_str())).collect();
        let (outcomes, _) = self.preview(PROMPT_ACTION, &names).await.map_err(|e| {
            ErrorData::internal_error(
                format!("Warden at {} did not answer, so no prompt is shown: {e}", self.shared.endpoint),
                None,
            )
        })?;
        let prompts = listed
            .into_iter()
            .zip(outcomes)
            .filter(|(_, outcome)| *outcome != Outcome::Deny)
            .map(|((server, mut prompt), _)| {
                prompt.name = self.client_name(&server, &prompt.name);
                prompt
            })
            .collect();
        Ok(ListPromptsResult::with_all_items(prompts).with_cache_scope(CacheScope::Private))
    }

    async fn get_prompt(
        &self,
        mut request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        // A prompt is content from the server, resources embedded: it is
        // decided as `mcp.prompt` on the prompt with its arguments, like a
        // tool call (whose result is the tool's to give).
        let client_name = request.name.clone();
        let (server, prompt) = self.split_name(&client_name)?;
        let (server, prompt) = (server.to_owned(), prompt.to_owned());
        if request.input_responses.is_some() || request.request_state.is_some() {
            return Err(ErrorData::invalid_request("warden-mcp does not forward multi-round-trip input", None));
        }
        request.meta = None;
        let arguments = request.arguments.take().unwrap_or_default();
        let arguments_json = serde_json::to_string(&arguments)
            .map_err(|e| ErrorData::invalid_params(format!("arguments: {e}"), None))?;
        let what = format!("the prompt `{client_name}`");
        if let Some(refused) =
            self.refusal(PROMPT_ACTION, &server, &prompt, arguments_json.clone(), &what, &context).await?
        {
            return Err(refused);
        }
        let decided: JsonObject = serde_json::from_str(&arguments_json)
            .map_err(|e| ErrorData::internal_error(format!("arguments: {e}"), None))?;
        request.arguments = Some(decided);
        request.name = prompt;
        let upstream = self.upstream(&context.peer, &server).await?;
        match upstream.service.peer().get_prompt_once(request).await.map_err(|e| upstream_error(&server, e))? {
            GetPromptResponse::Complete(mut prompt) => {
                complete(&mut prompt.result_type);
                Ok(GetPromptResponse::Complete(prompt))
            }
            other => Ok(other),
        }
    }

    async fn complete(
        &self,
        mut request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        // Completions can tell what a prompt or resource would reveal:
        // decided as getting that prompt (without arguments) or reading that
        // resource template.
        request.meta = None;
        let targets: Vec<(String, &'static str, String)> = match &mut request.r#ref {
            Reference::Prompt(prompt) => {
                let (server, name) = self.split_name(&prompt.name)?;
                let target = (server.to_owned(), PROMPT_ACTION, name.to_owned());
                prompt.name = name.to_owned();
                vec![target]
            }
            Reference::Resource(template) => {
                if !acceptable_name(&template.uri) || template.uri.chars().any(char::is_whitespace) {
                    return Err(ErrorData::invalid_params("the resource reference is not a URI template", None));
                }
                let servers = self.upstreams(&context.peer).await?.iter().map(|u| u.name.clone());
                servers.map(|server| (server, READ_ACTION, template.uri.clone())).collect()
            }
            _ => {
                return Err(ErrorData::invalid_params(
                    "warden-mcp completes prompts and resource templates only",
                    None,
                ));
            }
        };
        let mut last = None;
        for (server, action, name) in targets {
            let what = format!("completion for `{name}` of `{server}`");
            if let Some(refused) = self.refusal(action, &server, &name, String::new(), &what, &context).await? {
                last = Some(refused);
                continue;
            }
            let upstream = self.upstream(&context.peer, &server).await?;
            match upstream.service.peer().complete(request.clone()).await {
                Ok(found) => return Ok(found),
                Err(e) => last = Some(upstream_error(&server, e)),
            }
        }
        Err(last.unwrap_or_else(|| ErrorData::invalid_params("nothing to complete", None)))
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        for upstream in self.upstreams(&context.peer).await? {
            let _ = upstream.service.peer().set_level(request.clone()).await;
        }
        Ok(())
    }

    async fn on_roots_list_changed(&self, _context: NotificationContext<RoleServer>) {
        if let Some(upstreams) = self.state.upstreams.get() {
            for upstream in &upstreams.live {
                let _ = upstream.service.peer().notify_roots_list_changed().await;
            }
        }
    }
}

/// Sends a call upstream; the client's progress token is mapped onto the
/// one rmcp puts in the upstream request, and a cancellation by the client
/// cancels the upstream request.
async fn forward_call(
    upstream: &Upstream,
    request: CallToolRequestParams,
    context: &RequestContext<RoleServer>,
) -> Result<CallToolResponse, ServiceError> {
    let handle = upstream
        .service
        .peer()
        .send_request_with_option(
            ClientRequest::CallToolRequest(CallToolRequest::new(request)),
            PeerRequestOptions::no_options(),
        )
        .await?;
    let (id, token, peer) = (handle.id.clone(), handle.progress_token.clone(), handle.peer.clone());
    let progress = &upstream.progress;
    if let Some(theirs) = context.meta.get_progress_token() {
        lock(progress).insert(token.clone(), theirs);
    }
    lock(&upstream.calls).insert(id.clone(), context.id.clone());
    let result = tokio::select! {
        result = handle.await_response() => result,
        () = context.ct.cancelled() => {
            let reason = Some("cancelled by the client".to_owned());
            let _ = peer.notify_cancelled(CancelledNotificationParam::new(Some(id.clone()), reason.clone())).await;
            Err(ServiceError::Cancelled { reason })
        }
    };
    lock(progress).remove(&token);
    lock(&upstream.calls).remove(&id);
    match result? {
        ServerResult::CallToolResult(mut r) => {
            complete(&mut r.result_type);
            Ok(CallToolResponse::Complete(r))
        }
        ServerResult::InputRequiredResult(r) => Ok(CallToolResponse::InputRequired(r)),
        ServerResult::CreateTaskResult(r) => Ok(CallToolResponse::Task(r)),
        ServerResult::EmptyResult(_) => Ok(CallToolResult::success(vec![]).into()),
        _ => Err(ServiceError::UnexpectedResponse),
    }
}

/// The gateway as a client of one upstream: forwards what the upstream
/// sends to the one client of this connection.
struct UpstreamHandler {
    server: String,
    downstream: Peer<RoleServer>,
    /// The upstream request's progress token → the client's.
    progress: ProgressMap,
    /// The calls in flight: upstream request id → the client's request id.
    calls: CallMap,
    state: std::sync::Weak<State>,
}

impl ClientHandler for UpstreamHandler {
    fn get_info(&self) -> ClientInfo {
        // Offer upstream what the client offers the gateway.
        let capabilities = self.downstream.peer_info().map(|info| info.capabilities.clone()).unwrap_or_default();
        ClientInfo::new(capabilities, Implementation::new("warden-mcp", env!("CARGO_PKG_VERSION")))
            .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }

    async fn on_progress(&self, mut params: ProgressNotificationParam, _context: NotificationContext<RoleClient>) {
        let theirs = lock(&self.progress).get(&params.progress_token).cloned();
        if let Some(theirs) = theirs {
            params.progress_token = theirs;
            let _ = self.downstream.notify_progress(params).await;
        }
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let _ = self.downstream.notify_logging_message(params).await;
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let _ = self.downstream.notify_resource_updated(params).await;
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        // Filtered again before the client hears of it.
        if let Some(state) = self.state.upgrade() {
            state.recheck.notify_one();
        }
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.downstream.notify_resource_list_changed().await;
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.downstream.notify_prompt_list_changed().await;
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let offered = self.downstream.peer_info().is_some_and(|i| i.capabilities.sampling.is_some());
        let request = ServerRequest::CreateMessageRequest(CreateMessageRequest::new(params));
        match self.to_client(offered, request, &context).await? {
            ClientResult::CreateMessageResult(result) => Ok(*result),
            _ => Err(ErrorData::internal_error("the client answered sampling with something else", None)),
        }
    }

    async fn create_elicitation(
        &self,
        params: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let offered = self.downstream.peer_info().is_some_and(|i| i.capabilities.elicitation.is_some());
        let request = ServerRequest::ElicitRequest(ElicitRequest::new(params));
        match self.to_client(offered, request, &context).await? {
            ClientResult::ElicitResult(result) => Ok(result),
            _ => Err(ErrorData::internal_error("the client answered elicitation with something else", None)),
        }
    }

    async fn list_roots(&self, context: RequestContext<RoleClient>) -> Result<ListRootsResult, ErrorData> {
        let offered = self.downstream.peer_info().is_some_and(|i| i.capabilities.roots.is_some());
        let request = ServerRequest::ListRootsRequest(ListRootsRequest::default());
        match self.to_client(offered, request, &context).await? {
            ClientResult::ListRootsResult(result) => Ok(result),
            _ => Err(ErrorData::internal_error("the client answered roots/list with something else", None)),
        }
    }
}

impl UpstreamHandler {
    /// Forwards a request of the upstream to the client, if the client
    /// offered that capability, and within [`CLIENT_ANSWER_TIMEOUT`]. It is
    /// tied to the client's call it belongs to (so that over HTTP it goes
    /// out on that call's stream): the one the upstream names, else the one
    /// call in flight. Sent from a task of its own: rmcp tags a request with
    /// the request being handled in the current task, which here is the
    /// upstream's, from another id space.
    async fn to_client(
        &self,
        offered: bool,
        mut request: ServerRequest,
        context: &RequestContext<RoleClient>,
    ) -> Result<ClientResult, ErrorData> {
        if !offered {
            let what = match &request {
                ServerRequest::CreateMessageRequest(_) => "sampling",
                ServerRequest::ElicitRequest(_) => "elicitation",
                _ => "roots",
            };
            return Err(ErrorData::new(
                ErrorCode::METHOD_NOT_FOUND,
                format!("the client of this gateway does not offer {what}"),
                None,
            ));
        }
        let origin = {
            let calls = lock(&self.calls);
            match context.extensions.get::<rmcp::service::InboundStreamOrigin>() {
                Some(rmcp::service::InboundStreamOrigin::OutboundRequest(id)) => calls.get(id).cloned(),
                _ if calls.len() == 1 => calls.values().next().cloned(),
                _ => None,
            }
        };
        if let Some(origin) = origin {
            request.extensions_mut().insert(rmcp::service::OriginatingRequestId(origin));
        }
        let peer = self.downstream.clone();
        let options = PeerRequestOptions::with_timeout(CLIENT_ANSWER_TIMEOUT);
        let sent =
            tokio::spawn(async move { peer.send_request_with_option(request, options).await?.await_response().await });
        match sent.await {
            Ok(answer) => answer.map_err(|e| client_error(&self.server, e)),
            Err(e) => Err(ErrorData::internal_error(format!("forwarding to the client failed: {e}"), None)),
        }
    }
}

fn client_error(server: &str, error: ServiceError) -> ErrorData {
    match error {
        ServiceError::McpError(e) => e,
        other => ErrorData::internal_error(format!("the client did not answer server `{server}`: {other}"), None),
    }
}
