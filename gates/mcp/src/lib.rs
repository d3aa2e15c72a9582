//! warden-mcp: an MCP gateway that asks Warden before every `tools/call`
//! (and `resources/read`), and shows a client only the tools its actor may
//! call or ask for.
//!
//! ```text
//! MCP client --(stdio | streamable HTTP)--> Connection (gateway.rs)
//!    tools/list  -> upstreams' lists -> Warden Preview -> filtered
//!    tools/call  -> Warden Authorize (waits through PENDING) -> upstream
//!    the rest    -> passed through, both ways
//! ```

#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod config;
pub mod gateway;
pub mod http;

use std::sync::Arc;

use rmcp::ServiceExt as _;

pub use gateway::{Connection, Shared};

/// Serves one client on this process's stdin and stdout until it leaves.
pub async fn serve_stdio(shared: Arc<Shared>) -> anyhow::Result<()> {
    let connection = Connection::new(shared);
    let running = connection.serve(rmcp::transport::stdio()).await?;
    running.waiting().await?;
    Ok(())
}
