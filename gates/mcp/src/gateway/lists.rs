//! The tool list a client is shown (every upstream's, filtered by
//! `Preview`), and telling the client when it changes: directly before
//! 2026-07-28, on its `subscriptions/listen` streams from then on.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use rmcp::model::{
    ErrorData, ServerNotification, SubscribeRequestParams, SubscriptionFilter, Tool, ToolListChangedNotification,
    UnsubscribeRequestParams,
};
use rmcp::service::SubscriptionContext;
use rmcp::{Peer, RoleServer};
use warden_sdk::Outcome;

use super::upstream::{Upstream, upstream_error};
use super::{CALL_ACTION, Connection, Listener, lock};

/// How often a list watcher with no refresh period checks that its client is
/// still there.
const LIVENESS_CHECK: Duration = Duration::from_secs(30);

impl Connection {
    /// Every upstream's tools, named for the client, filtered by `Preview`:
    /// a tool this actor may never call (DENY with empty arguments) is not
    /// shown; one that needs approval is. Remembers what was shown.
    pub(super) async fn filtered_tools(&self, peer: &Peer<RoleServer>) -> Result<Vec<Tool>, ErrorData> {
        // A server that fails to list leaves its tools out; when every one
        // fails, so does the list.
        let mut listed = Vec::new();
        let mut failure = None;
        let upstreams = self.upstreams(peer).await?;
        for upstream in upstreams {
            match upstream.peer.list_all_tools().await {
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
        let shown: BTreeSet<String> = tools.iter().map(|t| t.name.to_string()).collect();
        if let Some((_, client)) = lock(&self.state.actor).as_ref() {
            lock(&self.shared.last_shown).insert(client.clone(), shown.clone());
        }
        *lock(&self.state.shown) = Some(shown);
        *lock(&self.state.listed_version) = version;
        Ok(tools)
    }

    /// Whether `tool` is a tool `server` lists (asked again when the last
    /// list did not have it): a call is forwarded only under a name the
    /// server itself gave, so that a server that matches names loosely
    /// cannot be reached under a spelling the policies did not expect.
    pub(super) async fn listed(&self, upstream: &Upstream, tool: &str) -> Result<bool, ErrorData> {
        if lock(&upstream.tools).as_ref().is_some_and(|names| names.contains(tool)) {
            return Ok(true);
        }
        let tools = upstream.peer.list_all_tools().await.map_err(|e| upstream_error(&upstream.name, e))?;
        let names: HashSet<String> = tools.into_iter().map(|t| t.name.to_string()).collect();
        let found = names.contains(tool);
        *lock(&upstream.tools) = Some(names);
        Ok(found)
    }

    /// A decision under another policy version than the shown list's: the
    /// list may be out of date.
    pub(super) fn saw_version(&self, version: &str) {
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
    /// differs, the client is told `notifications/tools/list_changed` (see
    /// `State::tell`). One watcher per connection; it holds the connection
    /// weakly, and ends with it.
    pub(super) fn watch_list(&self, peer: Peer<RoleServer>) {
        if self.state.watching.swap(true, Ordering::SeqCst) {
            return;
        }
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
                // A client of 2026-07-28 hears of a change on a listen
                // stream only: without one, there is no one to tell.
                if state.client_is_stateless() && lock(&state.listeners).is_empty() {
                    continue;
                }
                let this = Connection { shared: Arc::clone(&shared), state };
                let before = lock(&this.state.shown).clone();
                let Some(before) = before else { continue };
                let Ok(tools) = this.filtered_tools(&peer).await else { continue };
                let now: BTreeSet<String> = tools.iter().map(|t| t.name.to_string()).collect();
                let changed =
                    ToolListChangedNotification { method: Default::default(), extensions: Default::default() };
                if now != before && !this.state.tell(ServerNotification::ToolListChangedNotification(changed)).await {
                    return;
                }
            }
        });
    }

    /// What a `subscriptions/listen` stream may carry: all the client asks
    /// for (rmcp then keeps only what `get_info` advertises).
    pub(super) fn listenable(requested: &SubscriptionFilter) -> SubscriptionFilter {
        requested.clone()
    }

    /// Serves one `subscriptions/listen` stream (2026-07-28) until the
    /// client ends it: the tool list is watched from what the client was
    /// last shown (on any of its connections; what it is now, if it never
    /// listed), the resources it names are subscribed to upstream, and
    /// every change the stream accepted goes out on it.
    pub(super) async fn listen_until_cancelled(&self, subscription: SubscriptionContext) -> Result<(), ErrorData> {
        let context = subscription.request_context();
        self.actor(context, false)?;
        let upstreams = self.upstreams(&context.peer).await?;
        let accepted = subscription.accepted().clone();
        if accepted.tools_list_changed == Some(true) {
            if lock(&self.state.shown).is_none() {
                let client = lock(&self.state.actor).as_ref().map(|(_, client)| client.clone());
                let last = client.and_then(|client| lock(&self.shared.last_shown).get(&client).cloned());
                match last {
                    Some(last) => *lock(&self.state.shown) = Some(last),
                    None => {
                        self.filtered_tools(&context.peer).await?;
                    }
                }
            }
            self.watch_list(context.peer.clone());
        }
        let uris = accepted.resource_subscriptions.clone().unwrap_or_default();
        for uri in &uris {
            for upstream in upstreams {
                let _ = upstream.peer.subscribe(SubscribeRequestParams::new(uri.clone())).await;
            }
        }
        let id = context.id.clone();
        lock(&self.state.listeners).push(Listener { id: id.clone(), sink: subscription.sink().clone(), uris });
        subscription.cancelled().await;
        let ended = {
            let mut listeners = lock(&self.state.listeners);
            let ended = listeners.iter().position(|l| l.id == id).map(|i| listeners.swap_remove(i));
            // A URI another stream still watches stays subscribed.
            ended.map(|l| l.uris.into_iter().filter(|u| !listeners.iter().any(|o| o.uris.contains(u))).collect())
        };
        let unwatched: Vec<String> = ended.unwrap_or_default();
        for uri in unwatched {
            for upstream in upstreams {
                let _ = upstream.peer.unsubscribe(UnsubscribeRequestParams::new(uri.clone())).await;
            }
        }
        Ok(())
    }
}
