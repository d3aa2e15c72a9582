//! The gateway's streamable-HTTP face: rmcp's `StreamableHttpService` on a
//! hyper server, behind a bearer-token check when clients are configured.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full, combinators::BoxBody};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use sha2::{Digest as _, Sha256};
use tokio_util::sync::CancellationToken;

use crate::config::HttpClient;
use crate::gateway::{Connection, Shared};

/// The path the MCP endpoint is served on.
pub const PATH: &str = "/mcp";

/// The configured client whose token the request carries.
pub fn client_of<'a>(clients: &'a [HttpClient], headers: &http::HeaderMap) -> Option<&'a HttpClient> {
    let token = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?.strip_prefix("Bearer ")?.trim();
    let hash = hex::encode(Sha256::digest(token.as_bytes()));
    // Compared as hashes: equal length, and the token itself is never compared.
    clients.iter().find(|c| c.token_sha256.eq_ignore_ascii_case(&hash))
}

fn plain(status: http::StatusCode, text: &'static str) -> http::Response<BoxBody<Bytes, Infallible>> {
    let mut response = http::Response::new(Full::new(Bytes::from_static(text.as_bytes())).boxed());
    *response.status_mut() = status;
    response
}

/// Serves the gateway on `listener` until `stop` is cancelled. Sessions
/// (protocol versions up to 2025-11-25) keep their connection and its
/// upstreams; a stateless request (2026-07-28) gets its own, for that
/// request alone. rmcp checks the `Mcp-Method`/`Mcp-Name` headers against
/// the body, and the `Host` header against loopback names.
pub async fn serve(shared: Arc<Shared>, listener: tokio::net::TcpListener, stop: CancellationToken) {
    let config = StreamableHttpServerConfig::default().with_cancellation_token(stop.child_token());
    let factory = {
        let shared = Arc::clone(&shared);
        move || Ok(Connection::new(Arc::clone(&shared)))
    };
    let service = StreamableHttpService::new(factory, Arc::new(LocalSessionManager::default()), config);
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    continue;
                }
            },
            () = stop.cancelled() => return,
        };
        let service = service.clone();
        let shared = Arc::clone(&shared);
        let handler = hyper::service::service_fn(move |request: http::Request<hyper::body::Incoming>| {
            let service = service.clone();
            let shared = Arc::clone(&shared);
            async move {
                if request.uri().path() != PATH {
                    return Ok::<_, Infallible>(plain(
                        http::StatusCode::NOT_FOUND,
                        "not found: the MCP endpoint is /mcp",
                    ));
                }
                if !shared.config.clients.is_empty() && client_of(&shared.config.clients, request.headers()).is_none() {
                    let mut refused =
                        plain(http::StatusCode::UNAUTHORIZED, "a bearer token of this gateway is required");
                    refused
                        .headers_mut()
                        .insert(http::header::WWW_AUTHENTICATE, http::HeaderValue::from_static("Bearer"));
                    return Ok(refused);
                }
                Ok(service.handle(request).await)
            }
        });
        tokio::spawn(async move {
            let builder = hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
            if let Err(e) = builder.serve_connection(hyper_util::rt::TokioIo::new(stream), handler).await {
                tracing::debug!(error = %e, "connection ended");
            }
        });
    }
}
