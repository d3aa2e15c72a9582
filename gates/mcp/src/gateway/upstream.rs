//! The gateway as a client of each upstream server: connecting, sending a
//! call on, and forwarding to the one client of the connection what the
//! upstream sends (progress, log messages, changes, its own requests).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use rmcp::model::*;
use rmcp::service::{NotificationContext, PeerRequestOptions, RequestContext, RunningService};
use rmcp::transport::{ConfigureCommandExt as _, StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, ErrorData, Peer, RoleClient, RoleServer, ServiceError, ServiceExt as _};

use super::{State, lock};
use crate::config::{Server, Transport};

/// How long the gateway waits for the client to answer a request of an
/// upstream (sampling, elicitation, roots).
const CLIENT_ANSWER_TIMEOUT: Duration = Duration::from_secs(300);

#[derive(Default)]
pub(super) struct Upstreams {
    pub(super) live: Vec<Upstream>,
    /// The servers that could not be reached, and why.
    pub(super) failed: Vec<(String, String)>,
}

pub(super) struct Upstream {
    pub(super) name: String,
    /// The server, to send it requests.
    pub(super) peer: Peer<RoleClient>,
    /// The connection to it, until [`Upstream::close`].
    running: Mutex<Option<RunningService<RoleClient, UpstreamHandler>>>,
    /// Shared with the handler: the upstream request's progress token → the client's.
    pub(super) progress: ProgressMap,
    /// Shared with the handler: the calls in flight.
    pub(super) calls: CallMap,
    /// The names of the server's tools, as it last listed them.
    pub(super) tools: Mutex<Option<HashSet<String>>>,
}

impl Upstream {
    pub(super) fn new(
        name: String,
        running: RunningService<RoleClient, UpstreamHandler>,
        (progress, calls): (ProgressMap, CallMap),
    ) -> Self {
        Self {
            name,
            peer: running.peer().clone(),
            running: Mutex::new(Some(running)),
            progress,
            calls,
            tools: Mutex::new(None),
        }
    }

    /// Ends the connection to the server: a stdio server's input is closed,
    /// and it is stopped (SIGTERM, then killed) if it does not exit. A
    /// connection that is only dropped stops its server from a task of its
    /// own, which a process that is exiting never runs.
    pub(super) async fn close(&self) {
        let running = lock(&self.running).take();
        if let Some(mut running) = running {
            let _ = running.close_with_timeout(UPSTREAM_CLOSE_TIMEOUT).await;
        }
    }
}

/// How long closing an upstream may take (rmcp gives a stdio server 3 s
/// after its input closes and 3 s after SIGTERM before it kills it).
const UPSTREAM_CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

/// A client's call in flight upstream.
#[derive(Clone)]
pub(super) struct InFlight {
    /// The client's request id.
    client: RequestId,
    /// The log level the client's request asked for (2026-07-28), if any.
    log_level: Option<LoggingLevel>,
}

pub(super) type ProgressMap = Arc<Mutex<HashMap<ProgressToken, ProgressToken>>>;
/// The upstream request id → the client's call.
pub(super) type CallMap = Arc<Mutex<HashMap<RequestId, InFlight>>>;

/// What the upstreams offer a client, merged (the first server's offer of
/// each kind). Tools are the gateway's own, whatever the servers offer.
pub(super) fn capabilities(upstreams: &[Upstream]) -> ServerCapabilities {
    let mut capabilities = ServerCapabilities::default();
    for info in upstreams.iter().filter_map(|u| u.peer.peer_info()) {
        let c = &info.capabilities;
        capabilities.resources = capabilities.resources.take().or_else(|| c.resources.clone());
        capabilities.prompts = capabilities.prompts.take().or_else(|| c.prompts.clone());
        capabilities.logging = capabilities.logging.take().or_else(|| c.logging.clone());
        capabilities.completions = capabilities.completions.take().or_else(|| c.completions.clone());
    }
    capabilities
}

pub(super) fn upstream_error(server: &str, error: ServiceError) -> ErrorData {
    match error {
        // The upstream's own JSON-RPC error passes through as it is.
        ServiceError::McpError(e) => e,
        other => ErrorData::internal_error(format!("upstream server `{server}` failed: {other}"), None),
    }
}

/// Opens one upstream connection. The gateway speaks to every server with
/// `initialize` at the newest version that has it, whatever the client
/// speaks: each result is shaped for the client on its way back.
pub(super) async fn connect(
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

/// Sends a call upstream; the client's progress token is mapped onto the
/// one rmcp puts in the upstream request, and a cancellation by the client
/// cancels the upstream request.
pub(super) async fn forward_call(
    upstream: &Upstream,
    request: CallToolRequestParams,
    context: &RequestContext<RoleServer>,
) -> Result<CallToolResponse, ServiceError> {
    let handle = upstream
        .peer
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
    let in_flight = InFlight { client: context.id.clone(), log_level: context.meta.log_level() };
    lock(&upstream.calls).insert(id.clone(), in_flight);
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
        // Shaped for the client's version on the way out (`version::shape`).
        ServerResult::CallToolResult(r) => Ok(CallToolResponse::Complete(r)),
        ServerResult::InputRequiredResult(r) => Ok(CallToolResponse::InputRequired(r)),
        ServerResult::CreateTaskResult(r) => Ok(CallToolResponse::Task(r)),
        ServerResult::EmptyResult(_) => Ok(CallToolResult::success(vec![]).into()),
        _ => Err(ServiceError::UnexpectedResponse),
    }
}

/// The gateway as a client of one upstream: forwards what the upstream
/// sends to the one client of this connection, in the terms of the
/// client's protocol version.
pub(super) struct UpstreamHandler {
    server: String,
    /// The upstream request's progress token → the client's.
    progress: ProgressMap,
    /// The calls in flight: upstream request id → the client's call.
    calls: CallMap,
    state: Weak<State>,
}

impl UpstreamHandler {
    pub(super) fn new(server: &str, state: &Arc<State>) -> Self {
        Self {
            server: server.to_owned(),
            progress: ProgressMap::default(),
            calls: CallMap::default(),
            state: Arc::downgrade(state),
        }
    }

    /// The maps the connection shares with this handler.
    pub(super) fn maps(&self) -> (ProgressMap, CallMap) {
        (Arc::clone(&self.progress), Arc::clone(&self.calls))
    }

    /// The client's call a message of the upstream belongs to: the one the
    /// upstream names (over streamable HTTP), else the one call in flight.
    fn call_of(&self, extensions: &Extensions) -> Option<InFlight> {
        let calls = lock(&self.calls);
        match extensions.get::<rmcp::service::InboundStreamOrigin>() {
            Some(rmcp::service::InboundStreamOrigin::OutboundRequest(id)) => calls.get(id).cloned(),
            _ if calls.len() == 1 => calls.values().next().cloned(),
            _ => None,
        }
    }

    /// Tells the client of a change the upstream announced.
    async fn tell(&self, notification: ServerNotification) {
        if let Some(state) = self.state.upgrade() {
            state.tell(notification).await;
        }
    }
}

impl ClientHandler for UpstreamHandler {
    fn get_info(&self) -> ClientInfo {
        // Offer upstream what the client offers the gateway (nothing when the
        // client speaks 2026-07-28, which has no requests from servers).
        let capabilities = self
            .state
            .upgrade()
            .filter(|state| !state.client_is_stateless())
            .and_then(|state| state.downstream())
            .and_then(|peer| peer.peer_info())
            .map(|info| info.capabilities.clone())
            .unwrap_or_default();
        ClientInfo::new(capabilities, Implementation::new("warden-mcp", env!("CARGO_PKG_VERSION")))
            .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }

    async fn on_progress(&self, mut params: ProgressNotificationParam, _context: NotificationContext<RoleClient>) {
        let theirs = lock(&self.progress).get(&params.progress_token).cloned();
        let downstream = self.state.upgrade().and_then(|state| state.downstream());
        if let (Some(theirs), Some(downstream)) = (theirs, downstream) {
            params.progress_token = theirs;
            let _ = downstream.notify_progress(params).await;
        }
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        context: NotificationContext<RoleClient>,
    ) {
        let Some(state) = self.state.upgrade() else { return };
        let asked = self.call_of(&context.extensions).and_then(|call| call.log_level);
        if !state.log_wanted(asked, params.level) {
            return;
        }
        if let Some(downstream) = state.downstream() {
            let _ = downstream.notify_logging_message(params).await;
        }
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let updated = ResourceUpdatedNotification::new(params);
        self.tell(ServerNotification::ResourceUpdatedNotification(updated)).await;
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        // Filtered again before the client hears of it.
        if let Some(state) = self.state.upgrade() {
            state.recheck.notify_one();
        }
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let changed = ResourceListChangedNotification { method: Default::default(), extensions: Default::default() };
        self.tell(ServerNotification::ResourceListChangedNotification(changed)).await;
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let changed = PromptListChangedNotification { method: Default::default(), extensions: Default::default() };
        self.tell(ServerNotification::PromptListChangedNotification(changed)).await;
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let request = ServerRequest::CreateMessageRequest(CreateMessageRequest::new(params));
        match self.to_client(request, &context).await? {
            ClientResult::CreateMessageResult(result) => Ok(*result),
            _ => Err(ErrorData::internal_error("the client answered sampling with something else", None)),
        }
    }

    async fn create_elicitation(
        &self,
        params: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let request = ServerRequest::ElicitRequest(ElicitRequest::new(params));
        match self.to_client(request, &context).await? {
            ClientResult::ElicitResult(result) => Ok(result),
            _ => Err(ErrorData::internal_error("the client answered elicitation with something else", None)),
        }
    }

    async fn list_roots(&self, context: RequestContext<RoleClient>) -> Result<ListRootsResult, ErrorData> {
        let request = ServerRequest::ListRootsRequest(ListRootsRequest::default());
        match self.to_client(request, &context).await? {
            ClientResult::ListRootsResult(result) => Ok(result),
            _ => Err(ErrorData::internal_error("the client answered roots/list with something else", None)),
        }
    }
}

impl UpstreamHandler {
    /// Forwards a request of the upstream to the client, if the client
    /// offered that capability, and within [`CLIENT_ANSWER_TIMEOUT`]. It is
    /// tied to the client's call it belongs to (so that over HTTP it goes
    /// out on that call's stream). Sent from a task of its own: rmcp tags a
    /// request with the request being handled in the current task, which
    /// here is the upstream's, from another id space.
    async fn to_client(
        &self,
        mut request: ServerRequest,
        context: &RequestContext<RoleClient>,
    ) -> Result<ClientResult, ErrorData> {
        let what = match &request {
            ServerRequest::CreateMessageRequest(_) => "sampling",
            ServerRequest::ElicitRequest(_) => "elicitation",
            _ => "roots",
        };
        let not_offered = |why: String| ErrorData::new(ErrorCode::METHOD_NOT_FOUND, why, None);
        let Some(state) = self.state.upgrade() else {
            return Err(not_offered("the client of this gateway is gone".to_owned()));
        };
        if state.client_is_stateless() {
            // 2026-07-28 has no requests from servers; its multi-round-trip
            // input is not something warden-mcp translates into.
            return Err(not_offered(format!(
                "the client of this gateway speaks MCP 2026-07-28, which has no requests from servers: no {what}"
            )));
        }
        let peer = state.downstream();
        let offered = peer.as_ref().and_then(|p| p.peer_info()).is_some_and(|info| {
            let c = &info.capabilities;
            match &request {
                ServerRequest::CreateMessageRequest(_) => c.sampling.is_some(),
                ServerRequest::ElicitRequest(_) => c.elicitation.is_some(),
                _ => c.roots.is_some(),
            }
        });
        let Some(peer) = peer.filter(|_| offered) else {
            return Err(not_offered(format!("the client of this gateway does not offer {what}")));
        };
        let origin = self.call_of(&context.extensions).map(|call| call.client);
        if let Some(origin) = origin {
            request.extensions_mut().insert(rmcp::service::OriginatingRequestId(origin));
        }
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
