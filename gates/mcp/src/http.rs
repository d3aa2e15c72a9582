//! The gateway's streamable-HTTP face: rmcp's `StreamableHttpService` on a
//! hyper server, behind the bearer tokens of `[[clients]]`. An MCP session
//! belongs to the client that opened it, and each client has a bound on its
//! sessions and on its requests in flight (each may hold upstream servers).

use std::collections::HashMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full, combinators::BoxBody};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use sha2::{Digest as _, Sha256};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::config::HttpClient;
use crate::gateway::{Connection, Gateway, Shared};

/// The path the MCP endpoint is served on.
pub const PATH: &str = "/mcp";
/// Most requests one client may have in flight (a stateless request holds
/// its own upstream servers while it runs).
pub const MAX_IN_FLIGHT_PER_CLIENT: usize = 16;
/// Most live MCP sessions one client may hold (each holds its upstream servers).
pub const MAX_SESSIONS_PER_CLIENT: usize = 8;

const SESSION_HEADER: &str = "mcp-session-id";

/// The configured client whose token the request carries.
pub fn client_of<'a>(clients: &'a [HttpClient], headers: &http::HeaderMap) -> Option<&'a HttpClient> {
    let token = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?.strip_prefix("Bearer ")?.trim();
    let hash = hex::encode(Sha256::digest(token.as_bytes()));
    // Compared as hashes: the token itself is never compared.
    clients.iter().find(|c| c.token_sha256.eq_ignore_ascii_case(&hash))
}

type Response = http::Response<BoxBody<Bytes, Infallible>>;

fn plain(status: http::StatusCode, text: &'static str) -> Response {
    let mut response = http::Response::new(Full::new(Bytes::from_static(text.as_bytes())).boxed());
    *response.status_mut() = status;
    response
}

/// A response body that holds its client's in-flight permit until it ends
/// (a streamed answer keeps its connection and upstreams alive till then).
struct Held {
    body: BoxBody<Bytes, Infallible>,
    _permit: OwnedSemaphorePermit,
}

impl http_body::Body for Held {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// Which client owns each session, and each client's in-flight permits.
#[derive(Default)]
struct Clients {
    sessions: Mutex<HashMap<String, String>>,
    in_flight: Mutex<HashMap<String, Arc<Semaphore>>>,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Serves the gateway on `listener` until `stop` is cancelled. Sessions
/// (protocol versions up to 2025-11-25) keep their connection and its
/// upstreams; a stateless request (2026-07-28) gets its own, for that
/// request alone. rmcp checks the `Mcp-Method`/`Mcp-Name` headers against
/// the body, the `Host` header against loopback names, and refuses a
/// browser's `Origin`.
pub async fn serve(shared: Arc<Shared>, listener: tokio::net::TcpListener, stop: CancellationToken) {
    let config =
        StreamableHttpServerConfig::default().enforce_origin_validation().with_cancellation_token(stop.child_token());
    let factory = {
        let shared = Arc::clone(&shared);
        move || Ok(Gateway::new(Connection::new(Arc::clone(&shared))))
    };
    let sessions = Arc::new(LocalSessionManager::default());
    let service = StreamableHttpService::new(factory, Arc::clone(&sessions), config);
    let clients = Arc::new(Clients::default());
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
        let (service, shared, clients, sessions) =
            (service.clone(), Arc::clone(&shared), Arc::clone(&clients), Arc::clone(&sessions));
        let handler = hyper::service::service_fn(move |request: http::Request<hyper::body::Incoming>| {
            let (service, shared, clients, sessions) =
                (service.clone(), Arc::clone(&shared), Arc::clone(&clients), Arc::clone(&sessions));
            async move { Ok::<_, Infallible>(handle(&service, &shared, &clients, &sessions, request).await) }
        });
        tokio::spawn(async move {
            let builder = hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
            if let Err(e) = builder.serve_connection(hyper_util::rt::TokioIo::new(stream), handler).await {
                tracing::debug!(error = %e, "connection ended");
            }
        });
    }
}

async fn handle(
    service: &StreamableHttpService<Gateway, LocalSessionManager>,
    shared: &Shared,
    clients: &Clients,
    sessions: &LocalSessionManager,
    request: http::Request<hyper::body::Incoming>,
) -> Response {
    if request.uri().path() != PATH {
        return plain(http::StatusCode::NOT_FOUND, "not found: the MCP endpoint is /mcp");
    }
    let Some(client) = client_of(&shared.config.clients, request.headers()) else {
        let mut refused = plain(http::StatusCode::UNAUTHORIZED, "a bearer token of this gateway is required");
        refused.headers_mut().insert(http::header::WWW_AUTHENTICATE, http::HeaderValue::from_static("Bearer"));
        return refused;
    };
    let key = client.token_sha256.to_ascii_lowercase();
    let session = request.headers().get(SESSION_HEADER).and_then(|v| v.to_str().ok()).map(str::to_owned);
    match &session {
        // A session is used only by the client that opened it: another
        // token with a leaked session id can neither call, nor listen, nor
        // close it.
        Some(id) => {
            if lock(&clients.sessions).get(id).is_some_and(|owner| *owner != key) {
                return plain(http::StatusCode::NOT_FOUND, "no such session");
            }
        }
        None => {
            let live = sessions.sessions.read().await;
            let mut owned = lock(&clients.sessions);
            owned.retain(|id, _| live.contains_key(id.as_str()));
            if owned.values().filter(|owner| **owner == key).count() >= MAX_SESSIONS_PER_CLIENT {
                return plain(http::StatusCode::TOO_MANY_REQUESTS, "this client holds too many MCP sessions");
            }
        }
    }
    let permits = Arc::clone(
        lock(&clients.in_flight)
            .entry(key.clone())
            .or_insert_with(|| Arc::new(Semaphore::new(MAX_IN_FLIGHT_PER_CLIENT))),
    );
    let Ok(permit) = permits.try_acquire_owned() else {
        return plain(http::StatusCode::TOO_MANY_REQUESTS, "this client has too many requests in flight");
    };
    let response = service.handle(request).await;
    if session.is_none()
        && let Some(id) = response.headers().get(SESSION_HEADER).and_then(|v| v.to_str().ok())
    {
        lock(&clients.sessions).insert(id.to_owned(), key);
    }
    response.map(|body| Held { body, _permit: permit }.boxed())
}
