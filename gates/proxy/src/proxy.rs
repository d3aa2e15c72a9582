//! The proxy server: what each request goes through before a byte goes
//! upstream.
//!
//! ```text
//! client ──HTTP/1.1──▶ accept (connection bound) ─┬─ absolute-form http://… ──────────────┐
//!                                                  └─ CONNECT host:port ─▶ TLS (leaf for   │
//!                                                     host; SNI must be host) ─▶ HTTP/1.1  │
//!                                                     (Host must be host:port) ────────────┤
//!   forward: the method in one spelling (`get` is GET), the target unambiguous,           │
//!            the host resolved once ─▶ ask(http.request, METHOD, URL, header_bytes,       │
//!            addresses, address_kinds) ─▶ each warden-secret:NAME in a header:            │
//!            ask(secret.use, NAME, destination=host) ─▶ substitute ─▶ upstream,           │
//!            to the decided addresses only ◀──────────────────────────────────────────────┘
//!            (verified TLS, HTTP/2 when offered; bodies streamed both ways)
//! ```
//!
//! `forward` is the module of that name (one request); `ask` is
//! [`crate::approvals`]: Authorize, or the approval remembered for the
//! same request. Every refusal is an answer to the client
//! ([`crate::answer`]), never a request upstream: 403 with
//! `{"outcome","policy_ids","reasons"}` and `X-Warden-Decision` for a
//! denial or a pending approval (then with `Warden-Approval`), 400 for a
//! request that could mean more than is decided, 503 when the
//! monitor cannot be asked, 421 for a `Host` that is not the CONNECT host.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use warden_sdk::Actor;

use crate::addresses::Resolver;
pub use crate::answer::{Body, DECISION_HEADER};
use crate::answer::{answer, empty};
use crate::approvals::{ApprovalWait, Approvals};
use crate::ca::Authority;
use crate::clients::Clients;
use crate::forward::forward;
use crate::pending;
use crate::secrets::Secrets;
use crate::upstream::Upstreams;

/// How the proxy runs.
pub struct Settings {
    /// Who requests are from.
    pub clients: Clients,
    /// The secrets it may put into requests.
    pub secrets: Secrets,
    /// Roots trusted upstream: the system's, plus any extra CA.
    pub upstream_roots: rustls::RootCertStore,
    /// Connections served at once; more wait in the listen queue.
    pub max_connections: usize,
    /// How long an upstream may take to start answering.
    pub upstream_timeout: Duration,
    /// How long a client may take to send a request's head (and how long a
    /// kept-alive connection may stay idle).
    pub header_timeout: Duration,
    /// The largest request head accepted, in bytes.
    pub max_head_bytes: usize,
    /// How long a request that needs a person's approval is held before
    /// the answer (403 PENDING naming the approval).
    pub approval_wait: ApprovalWait,
}

impl Settings {
    /// Defaults for `clients`: system roots only, 256 connections, 60 s
    /// for an upstream to answer, 30 s for a request head of at most 64 KiB,
    /// a request that needs approval answered at once.
    pub fn new(clients: Clients) -> Self {
        Self {
            clients,
            secrets: Secrets::default(),
            upstream_roots: rustls::RootCertStore::empty(),
            max_connections: 256,
            upstream_timeout: Duration::from_secs(60),
            header_timeout: Duration::from_secs(30),
            max_head_bytes: 64 * 1024,
            approval_wait: ApprovalWait::default(),
        }
    }
}

/// What every connection's requests share.
pub(crate) struct Shared {
    pub(crate) approvals: Approvals,
    clients: Clients,
    pub(crate) secrets: Secrets,
    ca: Authority,
    /// Where hosts are, asked once per request (and name, for a while).
    pub(crate) resolver: Resolver,
    /// A client per set of decided addresses.
    pub(crate) upstreams: Upstreams<Incoming>,
    pub(crate) upstream_timeout: Duration,
    header_timeout: Duration,
    max_head_bytes: usize,
    /// Whether the log has said that the policy schema does not declare
    /// http.request's context.
    pub(crate) told_unfit: AtomicBool,
}

/// Where a request goes.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) https: bool,
    /// Lower-case, without brackets.
    pub(crate) host: String,
    pub(crate) port: u16,
}

impl Target {
    /// The URL of `path_and_query` at this target.
    pub(crate) fn url(&self, path_and_query: &str) -> String {
        let default = if self.https { 443 } else { 80 };
        let scheme = if self.https { "https" } else { "http" };
        let host = if self.host.contains(':') { format!("[{}]", self.host) } else { self.host.clone() };
        if self.port == default {
            format!("{scheme}://{host}{path_and_query}")
        } else {
            format!("{scheme}://{host}:{}{path_and_query}", self.port)
        }
    }
}

/// Serves `listener` until the task is dropped.
/// Where the proxy listens: a TCP address, or a Unix socket
/// (`unix:/path`).
pub enum Listener {
    /// `HOST:PORT`.
    Tcp(TcpListener),
    /// `unix:/path`.
    Unix(tokio::net::UnixListener),
}

impl Listener {
    /// Binds `address`: `unix:/path` for a Unix socket (which must not
    /// exist yet), else `HOST:PORT`.
    pub async fn bind(address: &str) -> std::io::Result<Self> {
        match address.strip_prefix("unix:") {
            Some(path) => tokio::net::UnixListener::bind(path).map(Self::Unix),
            None => TcpListener::bind(address).await.map(Self::Tcp),
        }
    }

    /// The address, as it is said back (`127.0.0.1:3128`, `unix:/path`).
    pub fn address(&self) -> String {
        match self {
            Self::Tcp(listener) => listener.local_addr().map_or_else(|e| e.to_string(), |a| a.to_string()),
            Self::Unix(listener) => listener
                .local_addr()
                .ok()
                .and_then(|a| a.as_pathname().map(|p| format!("unix:{}", p.display())))
                .unwrap_or_else(|| "unix:?".into()),
        }
    }
}

/// Serves `listener` until the task is dropped.
pub async fn serve(listener: Listener, warden: warden_sdk::Client, ca: Authority, settings: Settings) {
    let tls = rustls::ClientConfig::builder().with_root_certificates(settings.upstream_roots).with_no_client_auth();
    let shared = Arc::new(Shared {
        approvals: Approvals::new(warden, settings.approval_wait, pending::PER_CLIENT),
        clients: settings.clients,
        secrets: settings.secrets,
        ca,
        resolver: Resolver::new(settings.upstream_timeout),
        upstreams: Upstreams::new(tls),
        upstream_timeout: settings.upstream_timeout,
        header_timeout: settings.header_timeout,
        max_head_bytes: settings.max_head_bytes,
        told_unfit: AtomicBool::new(false),
    });
    let connections = Arc::new(Semaphore::new(settings.max_connections.max(1)));
    loop {
        // A bounded number of connections: the next one is accepted only
        // when a place is free.
        let Ok(permit) = Arc::clone(&connections).acquire_owned().await else { return };
        let accepted = match &listener {
            Listener::Tcp(tcp) => tcp.accept().await.map(|(stream, peer)| {
                let _ = stream.set_nodelay(true);
                (Box::new(stream) as Box<dyn Stream>, peer.to_string())
            }),
            Listener::Unix(unix) => {
                unix.accept().await.map(|(stream, _)| (Box::new(stream) as Box<dyn Stream>, "unix".to_owned()))
            }
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                continue;
            }
        };
        tokio::spawn(connection(Arc::clone(&shared), stream, peer, permit));
    }
}

/// A client's connection: a byte stream either way.
trait Stream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Stream for T {}

async fn connection(shared: Arc<Shared>, stream: Box<dyn Stream>, peer: String, permit: OwnedSemaphorePermit) {
    let _permit = permit;
    let service = {
        let shared = Arc::clone(&shared);
        service_fn(move |request| {
            let shared = Arc::clone(&shared);
            async move { Ok::<_, hyper::Error>(handle(shared, request).await) }
        })
    };
    let served = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(shared.header_timeout)
        .max_buf_size(shared.max_head_bytes)
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades()
        .await;
    if let Err(e) = served {
        tracing::debug!(%peer, error = %e, "connection ended");
    }
}

/// A 431 when the request's head (target and headers) is over the limit.
/// hyper bounds what it buffers while parsing (a few hundred KiB); this is
/// the proxy's own, smaller bound.
fn head_too_large(request: &Request<Incoming>, max: usize) -> Option<Response<Body>> {
    let size = request.uri().to_string().len()
        + request.headers().iter().map(|(name, value)| name.as_str().len() + value.len() + 4).sum::<usize>();
    (size > max).then(|| {
        answer(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "ERROR",
            &[],
            &[format!("the request's head is {size} bytes; the limit is {max}")],
        )
    })
}

async fn handle(shared: Arc<Shared>, request: Request<Incoming>) -> Response<Body> {
    if let Some(refused) = head_too_large(&request, shared.max_head_bytes) {
        return refused;
    }
    let client = match shared.clients.identify(request.headers()) {
        Ok(client) => client,
        Err(why) => {
            let mut response = answer(StatusCode::PROXY_AUTHENTICATION_REQUIRED, "ERROR", &[], &[why.to_string()]);
            let headers = response.headers_mut();
            headers.insert(header::PROXY_AUTHENTICATE, HeaderValue::from_static("Basic realm=\"warden-proxy\""));
            // A stranger does not keep a connection (and a place) open.
            headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
            return response;
        }
    };
    // A place of the client's, for the tunnel's life or this request's.
    let Some(slot) = client.slot() else {
        let why = format!("this sandbox has {} tunnels and requests open already", client.max_connections());
        let mut response = answer(StatusCode::TOO_MANY_REQUESTS, "ERROR", &[], &[why]);
        response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
        return response;
    };
    let actor = client.actor.clone();
    if request.method() == Method::CONNECT {
        return connect(shared, request, actor, slot);
    }
    // Absolute-form: `GET http://host/path HTTP/1.1`.
    let uri = request.uri();
    if uri.scheme_str() != Some("http") {
        return answer(
            StatusCode::BAD_REQUEST,
            "ERROR",
            &[],
            &["a proxy request names an absolute http:// URL; for https://, CONNECT first".into()],
        );
    }
    let Some(host) = uri.host() else {
        return answer(StatusCode::BAD_REQUEST, "ERROR", &[], &["the URL has no host".into()]);
    };
    let target = Target { https: false, host: bare_host(host), port: uri.port_u16().unwrap_or(80) };
    let response = forward(&shared, &actor, request, &target).await;
    drop(slot);
    response
}

fn bare_host(host: &str) -> String {
    host.trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase()
}

/// `CONNECT host:port`: answers 200, then serves the tunnel as TLS with a
/// leaf for `host`.
fn connect(
    shared: Arc<Shared>,
    request: Request<Incoming>,
    actor: Actor,
    slot: OwnedSemaphorePermit,
) -> Response<Body> {
    let Some(authority) = request.uri().authority().cloned() else {
        return answer(StatusCode::BAD_REQUEST, "ERROR", &[], &["CONNECT needs host:port".into()]);
    };
    let Some(port) = authority.port_u16() else {
        return answer(StatusCode::BAD_REQUEST, "ERROR", &[], &["CONNECT needs host:port".into()]);
    };
    let target = Target { https: true, host: bare_host(authority.host()), port };
    let leaf = match shared.ca.leaf(&target.host) {
        Ok(leaf) => leaf,
        Err(e) => {
            return answer(
                StatusCode::BAD_REQUEST,
                "ERROR",
                &[],
                &[format!("no certificate for `{}`: {e}", target.host)],
            );
        }
    };
    tokio::spawn(async move {
        match hyper::upgrade::on(request).await {
            Ok(upgraded) => tunnel(shared, TokioIo::new(upgraded), target, leaf, actor).await,
            Err(e) => tracing::debug!(error = %e, "CONNECT upgrade failed"),
        }
        drop(slot);
    });
    Response::new(empty())
}

/// Presents the leaf for the CONNECT host only: a client hello naming
/// another host (SNI) gets no certificate and the handshake fails. A hello
/// without SNI is accepted only for an IP address (clients send none then).
#[derive(Debug)]
struct Pinned {
    host: String,
    leaf: Arc<CertifiedKey>,
}

impl ResolvesServerCert for Pinned {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let named = match hello.server_name() {
            Some(name) => name.eq_ignore_ascii_case(&self.host),
            None => self.host.parse::<IpAddr>().is_ok(),
        };
        if !named {
            tracing::warn!(connect = %self.host, sni = ?hello.server_name(), "refused: the TLS server name is not the CONNECT host");
        }
        named.then(|| Arc::clone(&self.leaf))
    }
}

async fn tunnel(
    shared: Arc<Shared>,
    io: TokioIo<hyper::upgrade::Upgraded>,
    target: Target,
    leaf: Arc<CertifiedKey>,
    actor: Actor,
) {
    let mut config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(Pinned { host: target.host.clone(), leaf }));
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let handshake = tokio_rustls::TlsAcceptor::from(Arc::new(config)).accept(io);
    let tls = match tokio::time::timeout(shared.header_timeout, handshake).await {
        Ok(Ok(tls)) => tls,
        Err(_) => {
            tracing::debug!(host = %target.host, "TLS from the client did not finish in time");
            return;
        }
        Ok(Err(e)) => {
            tracing::debug!(host = %target.host, error = %e, "TLS from the client failed");
            return;
        }
    };
    let service = {
        let shared = Arc::clone(&shared);
        service_fn(move |request: Request<Incoming>| {
            let shared = Arc::clone(&shared);
            let target = target.clone();
            let actor = actor.clone();
            async move {
                if let Some(refused) = head_too_large(&request, shared.max_head_bytes) {
                    return Ok(refused);
                }
                Ok::<_, hyper::Error>(match host_mismatch(&request, &target) {
                    Some(why) => answer(StatusCode::MISDIRECTED_REQUEST, "ERROR", &[], &[why]),
                    None => forward(&shared, &actor, request, &target).await,
                })
            }
        })
    };
    let served = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(shared.header_timeout)
        .max_buf_size(shared.max_head_bytes)
        .serve_connection(TokioIo::new(tls), service)
        .await;
    if let Err(e) = served {
        tracing::debug!(error = %e, "tunnel ended");
    }
}

/// Why a request inside a tunnel does not go to the CONNECT host, if it
/// does not: its `Host` (or absolute URI) names another host or port.
fn host_mismatch(request: &Request<Incoming>, target: &Target) -> Option<String> {
    let named = match request.uri().authority() {
        Some(authority) => authority.as_str().to_owned(),
        None => match request.headers().get(header::HOST).map(HeaderValue::to_str) {
            Some(Ok(host)) => host.to_owned(),
            _ => return Some("a request in the tunnel must name its Host".into()),
        },
    };
    let Ok(authority) = named.parse::<http::uri::Authority>() else {
        return Some(format!("Host `{named}` is not a host"));
    };
    let host = bare_host(authority.host());
    let port = authority.port_u16().unwrap_or(443);
    (host != target.host || port != target.port).then(|| {
        format!("Host `{named}` is not the CONNECT target {}:{}: refused, nothing was sent", target.host, target.port)
    })
}
