//! warden-mcp: an MCP gateway that asks Warden before every `tools/call`
//! (and `resources/read`), and shows a client only the tools its actor may
//! call or ask for.
//!
//! ```text
//! MCP client --(stdio | streamable HTTP)--> Gateway -> Connection (gateway/)
//!    tools/list  -> upstreams' lists -> Warden Preview -> filtered
//!    tools/call  -> Warden Authorize (waits through PENDING) -> upstream
//!    the rest    -> passed through, both ways
//!    every answer in the terms of the client's protocol version
//!    (2024-11-05 to 2026-07-28, gateway/version.rs)
//! ```

#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod config;
pub mod gateway;
pub mod http;

use std::sync::Arc;

use rmcp::ServiceExt as _;

pub use gateway::{Connection, Gateway, Shared};

/// Serves one client on this process's stdin and stdout until it leaves.
pub async fn serve_stdio(shared: Arc<Shared>) -> anyhow::Result<()> {
    let connection = Connection::new(shared);
    let served = async {
        let running = Gateway::new(connection.clone()).serve(rmcp::transport::stdio()).await?;
        running.waiting().await?;
        anyhow::Ok(())
    };
    // A client that has closed our input and waits a moment for us to exit
    // then sends SIGTERM: taken as the same leaving, here and while the
    // servers are being stopped (from now on SIGTERM does not end this
    // process by itself).
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let result = tokio::select! {
        result = served => result,
        _ = terminate.recv() => Ok(()),
    };
    // The servers' lifetime is the client's: stopped before this process
    // exits, not left running by themselves.
    connection.close().await;
    result
}

/// A gateway that cannot start (no user to act for, no harness token, a
/// configuration it cannot use): every request of the client on stdin and
/// stdout is answered with `why`, so that the client shows it instead of
/// "connection closed". Returns when the client leaves.
pub async fn serve_refusal_stdio(why: String) -> anyhow::Result<()> {
    match Refusal(why).serve(rmcp::transport::stdio()).await {
        Ok(running) => {
            running.waiting().await?;
        }
        // An `initialize` refused ends the session once it is answered.
        Err(rmcp::service::ServerInitializeError::InitializeFailed(_)) => {}
        Err(e) => return Err(e.into()),
    }
    Ok(())
}

/// Answers every request with why the gateway cannot serve.
struct Refusal(String);

impl rmcp::Service<rmcp::RoleServer> for Refusal {
    async fn handle_request(
        &self,
        _request: rmcp::model::ClientRequest,
        _context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::ServerResult, rmcp::ErrorData> {
        Err(rmcp::ErrorData::internal_error(format!("warden-mcp cannot serve: {}", self.0), None))
    }

    async fn handle_notification(
        &self,
        _notification: rmcp::model::ClientNotification,
        _context: rmcp::service::NotificationContext<rmcp::RoleServer>,
    ) -> Result<(), rmcp::ErrorData> {
        Ok(())
    }

    fn get_info(&self) -> rmcp::model::ServerConfig {
        rmcp::model::ServerConfig::new(rmcp::model::ServerCapabilities::default())
            .with_server_info(rmcp::model::Implementation::new("warden-mcp", env!("CARGO_PKG_VERSION")))
    }
}
