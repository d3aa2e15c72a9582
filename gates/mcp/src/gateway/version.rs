//! What differs between the MCP protocol versions the gateway serves, in one
//! place: which versions it accepts, how each answer is shaped for the
//! version the client speaks, and [`Gateway`], the connection as served.
//!
//! The gateway speaks to its upstream servers with `initialize` at the
//! newest version that has it (2025-11-25), whatever the client speaks, so
//! an upstream's result never has what 2026-07-28 added; and it may carry
//! what the gateway's own answers must not (a cache hint a server gives
//! for what is now decided per actor). Each answer is shaped here on its
//! way to the client:
//!
//! - 2026-07-28: `resultType` on every result (`"complete"` when absent),
//!   `cacheScope: "private"` and `ttlMs: 0` on every cacheable one (lists
//!   and reads are decided per actor and per request: no client or shared
//!   cache may answer in the gateway's place);
//! - earlier versions: neither `resultType` (rmcp drops `"complete"`) nor
//!   the cache hints, which those versions do not have.
//!
//! What else 2026-07-28 changed is handled where it happens: no
//! `initialize` (`server/discover`, answered with the upstreams'
//! capabilities), no `ping`, `logging/setLevel` or
//! `resources/subscribe` (refused), changes only on `subscriptions/listen`
//! streams (`lists`), log messages only for a request that asks for them,
//! at or above its level, and no requests from servers (`upstream`).

#![allow(deprecated)] // logging is deprecated in 2026-07-28, not gone

use std::borrow::Cow;
use std::time::Duration;

use rmcp::model::*;
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};

use super::Connection;

/// The protocol versions the gateway serves, each checked against this
/// module: every version rmcp knows up to 2026-07-28 (a newer one rmcp
/// learns is not accepted until it is checked here too).
pub fn supported() -> &'static [ProtocolVersion] {
    ProtocolVersion::known_up_to(&ProtocolVersion::V_2026_07_28)
}

/// Whether `version` is one without `initialize` (2026-07-28 and later);
/// no version known: an older client.
pub fn is_stateless(version: Option<&ProtocolVersion>) -> bool {
    version.is_some_and(|v| !v.has_initialize())
}

/// A log level's rank, lowest first.
pub fn log_rank(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

/// A result that differs between protocol versions.
pub trait Shape {
    /// Shapes it for a client that speaks `version` (see the module's
    /// documentation). rmcp drops `resultType: "complete"` for an older
    /// client afterwards, and fills absent cache hints for a newer one.
    fn shape(&mut self, version: Option<&ProtocolVersion>);
}

/// `resultType` and the cache hints, as `version` has them.
fn shape_fields(
    version: Option<&ProtocolVersion>,
    result_type: &mut Option<ResultType>,
    cache: Option<(&mut Option<u64>, &mut Option<CacheScope>)>,
) {
    let stateless = is_stateless(version);
    if stateless {
        result_type.get_or_insert(ResultType::COMPLETE);
    }
    if let Some((ttl_ms, cache_scope)) = cache {
        if stateless {
            *ttl_ms = Some(0);
            *cache_scope = Some(CacheScope::Private);
        } else {
            *ttl_ms = None;
            *cache_scope = None;
        }
    }
}

macro_rules! shape_plain {
    ($($t:ty),*) => {$(
        impl Shape for $t {
            fn shape(&mut self, version: Option<&ProtocolVersion>) {
                shape_fields(version, &mut self.result_type, None);
            }
        }
    )*};
}

macro_rules! shape_cacheable {
    ($($t:ty),*) => {$(
        impl Shape for $t {
            fn shape(&mut self, version: Option<&ProtocolVersion>) {
                shape_fields(version, &mut self.result_type, Some((&mut self.ttl_ms, &mut self.cache_scope)));
            }
        }
    )*};
}

shape_plain!(CompleteResult, GetPromptResult, CallToolResult);
shape_cacheable!(
    ListToolsResult,
    ListPromptsResult,
    ListResourcesResult,
    ListResourceTemplatesResult,
    ReadResourceResult
);

impl Shape for CallToolResponse {
    fn shape(&mut self, version: Option<&ProtocolVersion>) {
        if let CallToolResponse::Complete(result) = self {
            result.shape(version);
        }
    }
}

impl Shape for GetPromptResponse {
    fn shape(&mut self, version: Option<&ProtocolVersion>) {
        if let GetPromptResponse::Complete(result) = self {
            result.shape(version);
        }
    }
}

impl Shape for ReadResourceResponse {
    fn shape(&mut self, version: Option<&ProtocolVersion>) {
        if let ReadResourceResponse::Complete(result) = self {
            result.shape(version);
        }
    }
}

/// `result` shaped for the version of the request in `context`.
fn shaped<T: Shape>(context_version: Option<ProtocolVersion>, result: Result<T, ErrorData>) -> Result<T, ErrorData> {
    result.map(|mut result| {
        result.shape(context_version.as_ref());
        result
    })
}

/// How long `server/discover` waits for the upstreams whose capabilities it
/// reports (under the 10 s a client such as the Python SDK waits for it):
/// past that, it reports what is known.
const DISCOVER_WAIT: Duration = Duration::from_secs(8);

/// One client's connection as served: [`Connection`] answers each method,
/// and every answer leaves here shaped for the protocol version the
/// request was made in. Every method `Connection` answers is passed on
/// here; one that is not would get rmcp's default answer.
pub struct Gateway(Connection);

impl Gateway {
    /// Serves `connection`.
    pub fn new(connection: Connection) -> Self {
        Self(connection)
    }

    /// Notes the request's version for what the upstreams send, and returns it.
    fn version(&self, context: &RequestContext<RoleServer>) -> Option<ProtocolVersion> {
        let version = context.protocol_version();
        self.0.state.saw_client_version(version.clone());
        version
    }
}

impl ServerHandler for Gateway {
    fn get_info(&self) -> ServerInfo {
        self.0.get_info()
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(supported())
    }

    async fn discover(&self, context: RequestContext<RoleServer>) -> Result<DiscoverResult, ErrorData> {
        self.version(&context);
        // 2026-07-28 has no `initialize` to connect the upstreams at, and
        // this answer carries their capabilities. The peer of a discovery
        // does not reach the client: the upstreams forward to the client
        // of a later request.
        match tokio::time::timeout(DISCOVER_WAIT, self.0.upstreams(&context.peer)).await {
            Ok(Err(e)) => tracing::warn!(error = %e.message, "server/discover: no upstream server"),
            Err(_) => tracing::warn!("server/discover: the upstream servers did not answer within {DISCOVER_WAIT:?}"),
            Ok(Ok(_)) => {}
        }
        Ok(DiscoverResult::from_server_info(supported().to_vec(), self.0.get_info()))
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        self.version(&context);
        self.0.initialize(request, context).await
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let version = self.version(&context);
        shaped(version, self.0.list_tools(request, context).await)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let version = self.version(&context);
        shaped(version, self.0.call_tool(request, context).await)
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let version = self.version(&context);
        shaped(version, self.0.list_resources(request, context).await)
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let version = self.version(&context);
        shaped(version, self.0.list_resource_templates(request, context).await)
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let version = self.version(&context);
        shaped(version, self.0.read_resource(request, context).await)
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let version = self.version(&context);
        shaped(version, self.0.list_prompts(request, context).await)
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let version = self.version(&context);
        shaped(version, self.0.get_prompt(request, context).await)
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let version = self.version(&context);
        shaped(version, self.0.complete(request, context).await)
    }

    fn accepted_subscription_filter(&self, requested: &SubscriptionFilter) -> Option<SubscriptionFilter> {
        self.0.accepted_subscription_filter(requested)
    }

    async fn listen(&self, subscription: SubscriptionContext) -> Result<(), ErrorData> {
        self.version(subscription.request_context());
        self.0.listen(subscription).await
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.version(&context);
        self.0.subscribe(request, context).await
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.version(&context);
        self.0.unsubscribe(request, context).await
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.version(&context);
        self.0.set_level(request, context).await
    }

    async fn on_roots_list_changed(&self, context: NotificationContext<RoleServer>) {
        self.0.on_roots_list_changed(context).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each kind of result as an upstream on 2025-11-25 gives it (no
    /// `resultType`; against the rules, but possible, a server's own cache
    /// hints), shaped for `version`, then as rmcp sends it: the JSON the
    /// client gets.
    fn sent(version: &ProtocolVersion) -> Vec<serde_json::Value> {
        fn out<T: Shape + Into<ServerResult>>(mut result: T, version: &ProtocolVersion) -> serde_json::Value {
            result.shape(Some(version));
            let mut result: ServerResult = result.into();
            // What rmcp's server does after the handler.
            if is_stateless(Some(version)) {
                result.fill_missing_cache_hints();
            } else {
                result.strip_result_type_for_legacy_peer();
            }
            serde_json::to_value(&result).unwrap()
        }
        let resources = ListResourcesResult {
            result_type: None,
            ttl_ms: Some(60_000),
            cache_scope: Some(CacheScope::Public),
            ..Default::default()
        };
        let mut read = ReadResourceResult::new(vec![]);
        read.result_type = None;
        read.cache_scope = Some(CacheScope::Public);
        let templates = ListResourceTemplatesResult { result_type: None, ..Default::default() };
        let mut complete = CompleteResult::default();
        complete.result_type = None;
        let mut call = CallToolResult::success(vec![]);
        call.result_type = None;
        let mut prompt = GetPromptResult::new(vec![]);
        prompt.result_type = None;
        let prompts = ListPromptsResult { result_type: None, ..Default::default() };
        let tools = ListToolsResult::default().with_cache_scope(CacheScope::Private);
        vec![
            out(resources, version),
            out(ReadResourceResponse::Complete(read), version),
            out(templates, version),
            out(complete, version),
            out(CallToolResponse::Complete(call), version),
            out(GetPromptResponse::Complete(prompt), version),
            out(prompts, version),
            out(tools, version),
        ]
    }

    #[test]
    fn a_2026_07_28_client_gets_result_type_and_private_uncached_results() {
        for json in sent(&ProtocolVersion::V_2026_07_28) {
            assert_eq!(json["resultType"], "complete", "{json}");
            let cacheable = ["tools", "prompts", "resources", "resourceTemplates", "contents"];
            if cacheable.iter().any(|field| json.get(field).is_some()) {
                assert_eq!(json["cacheScope"], "private", "{json}");
                assert_eq!(json["ttlMs"], 0, "{json}");
            }
        }
    }

    #[test]
    fn an_older_client_gets_no_field_of_2026_07_28() {
        for version in [&ProtocolVersion::V_2025_11_25, &ProtocolVersion::V_2025_06_18, &ProtocolVersion::V_2024_11_05]
        {
            for json in sent(version) {
                for field in ["resultType", "cacheScope", "ttlMs"] {
                    assert!(json.get(field).is_none(), "{version}: {field} in {json}");
                }
            }
        }
    }

    #[test]
    fn a_result_that_is_not_complete_keeps_its_type() {
        let mut result = CallToolResult::success(vec![]);
        result.result_type = Some(ResultType::INPUT_REQUIRED);
        result.shape(Some(&ProtocolVersion::V_2026_07_28));
        assert_eq!(result.result_type, Some(ResultType::INPUT_REQUIRED));
    }

    #[test]
    fn every_version_up_to_2026_07_28_is_served_and_only_2026_07_28_is_stateless() {
        let served: Vec<&str> = supported().iter().map(ProtocolVersion::as_str).collect();
        assert_eq!(served, ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"]);
        let stateless: Vec<&str> =
            supported().iter().filter(|v| is_stateless(Some(v))).map(ProtocolVersion::as_str).collect();
        assert_eq!(stateless, ["2026-07-28"]);
        assert!(!is_stateless(None));
    }

    #[test]
    fn log_levels_rank_from_debug_to_emergency() {
        let levels = [
            LoggingLevel::Debug,
            LoggingLevel::Info,
            LoggingLevel::Notice,
            LoggingLevel::Warning,
            LoggingLevel::Error,
            LoggingLevel::Critical,
            LoggingLevel::Alert,
            LoggingLevel::Emergency,
        ];
        let ranks: Vec<u8> = levels.into_iter().map(log_rank).collect();
        assert!(ranks.windows(2).all(|w| w.first() < w.last()), "{ranks:?}");
    }
}
