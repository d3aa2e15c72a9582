//! The MCP methods the gateway answers, each in terms every protocol
//! version shares (what differs between versions is applied to every answer
//! by `version::Gateway`).

use std::borrow::Cow;

use rmcp::model::*;
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use warden_sdk::{ActionRequest, Outcome};

use super::decide::text_result;
use super::upstream::{self, forward_call, upstream_error};
use super::{Connection, PROMPT_ACTION, READ_ACTION, acceptable_name, canonical_uri, lock, version};

impl ServerHandler for Connection {
    fn get_info(&self) -> ServerInfo {
        // What the upstreams offer (known once connected), merged; before
        // this connection's are, what another connection's offered (a
        // stateless request of 2026-07-28 is a connection of its own, and a
        // stream that listens for changes is told only of what is offered).
        let mut capabilities = match self.state.upstreams.get() {
            Some(upstreams) => upstream::capabilities(&upstreams.live),
            None => lock(&self.shared.upstream_capabilities).clone().unwrap_or_default(),
        };
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

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(version::supported())
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
                let peer = &upstream.peer;
                all.extend(peer.list_all_resources().await.map_err(|e| upstream_error(&upstream.name, e))?);
            } else {
                let peer = &upstream.peer;
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
            let peer = &upstream.peer;
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
            match upstream.peer.read_resource_once(request.clone()).await {
                Ok(found) => return Ok(found),
                Err(e) => last = Some(upstream_error(&upstream.name, e)),
            }
        }
        Err(last.unwrap_or_else(|| ErrorData::resource_not_found(format!("no server has `{uri}`"), None)))
    }

    fn accepted_subscription_filter(&self, requested: &SubscriptionFilter) -> Option<SubscriptionFilter> {
        Some(Self::listenable(requested))
    }

    async fn listen(&self, subscription: SubscriptionContext) -> Result<(), ErrorData> {
        self.listen_until_cancelled(subscription).await
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        for upstream in self.upstreams(&context.peer).await? {
            let _ = upstream.peer.subscribe(request.clone()).await;
        }
        Ok(())
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        for upstream in self.upstreams(&context.peer).await? {
            let _ = upstream.peer.unsubscribe(request.clone()).await;
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
            let prompts = upstream.peer.list_all_prompts().await.map_err(|e| upstream_error(&upstream.name, e))?;
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
        upstream.peer.get_prompt_once(request).await.map_err(|e| upstream_error(&server, e))
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
            match upstream.peer.complete(request.clone()).await {
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
        // 2026-07-28 has no `logging/setLevel`: a request asks for its own
        // log messages in its `_meta`.
        if version::is_stateless(context.protocol_version().as_ref()) {
            return Err(ErrorData::method_not_found::<SetLevelRequestMethod>());
        }
        for upstream in self.upstreams(&context.peer).await? {
            let _ = upstream.peer.set_level(request.clone()).await;
        }
        Ok(())
    }

    async fn on_roots_list_changed(&self, _context: NotificationContext<RoleServer>) {
        if let Some(upstreams) = self.state.upstreams.get() {
            for upstream in &upstreams.live {
                let _ = upstream.peer.notify_roots_list_changed().await;
            }
        }
    }
}
