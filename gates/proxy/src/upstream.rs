//! The upstream client: one per set of decided addresses, whose resolver
//! answers with those addresses whatever name it is asked, so that a
//! request connects only where it was decided to go. There is no second
//! lookup: a name that rebinds between the decision and the connection
//! changes nothing, and a pooled connection is reused only by a request
//! decided on the same addresses. At most [`MAX_CLIENTS`] are kept, the
//! least recently used dropped.

use std::collections::HashMap;
use std::future::Ready;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::connect::dns::Name;
use hyper_util::rt::{TokioExecutor, TokioTimer};

/// Clients kept (each with its pool of idle connections).
pub const MAX_CLIENTS: usize = 256;

/// A resolver that answers `addresses` for every name.
#[derive(Debug, Clone)]
pub struct Pinned {
    addresses: Arc<[IpAddr]>,
}

impl tower_service::Service<Name> for Pinned {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = std::io::Error;
    type Future = Ready<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        tracing::debug!(%name, addresses = ?self.addresses, "connecting to the decided addresses");
        // Port 0: the connector puts in the URL's.
        let addresses: Vec<SocketAddr> = self.addresses.iter().map(|ip| SocketAddr::new(*ip, 0)).collect();
        std::future::ready(Ok(addresses.into_iter()))
    }
}

/// An HTTP(S) client that connects to its addresses only.
pub type PinnedClient<B> = Client<HttpsConnector<HttpConnector<Pinned>>, B>;

/// A client for `addresses` (tried in their order), verifying upstream TLS
/// with `tls`, HTTP/2 when the upstream offers it.
pub fn pinned<B>(tls: rustls::ClientConfig, addresses: &[IpAddr]) -> PinnedClient<B>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
{
    let mut http = HttpConnector::new_with_resolver(Pinned { addresses: addresses.into() });
    http.enforce_http(false);
    http.set_nodelay(true);
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(http);
    Client::builder(TokioExecutor::new()).timer(TokioTimer::new()).build(connector)
}

/// The clients by the addresses they connect to.
pub struct Upstreams<B> {
    tls: rustls::ClientConfig,
    kept: Mutex<Kept<B>>,
}

struct Kept<B> {
    clients: HashMap<Vec<IpAddr>, (PinnedClient<B>, u64)>,
    /// Bumped on each use: the smallest stamp is the least recently used.
    clock: u64,
}

impl<B> Upstreams<B>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
{
    /// No clients yet; each verifies upstream TLS with `tls`.
    pub fn new(tls: rustls::ClientConfig) -> Self {
        Self { tls, kept: Mutex::new(Kept { clients: HashMap::new(), clock: 0 }) }
    }

    /// The client that connects to `addresses` only.
    pub fn client(&self, addresses: &[IpAddr]) -> PinnedClient<B> {
        // Nothing in here can be left half done: a poisoned lock is as good.
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        kept.clock += 1;
        let now = kept.clock;
        if let Some((client, used)) = kept.clients.get_mut(addresses) {
            *used = now;
            return client.clone();
        }
        if kept.clients.len() >= MAX_CLIENTS {
            let oldest = kept.clients.iter().min_by_key(|(_, (_, used))| *used).map(|(key, _)| key.clone());
            if let Some(oldest) = oldest {
                kept.clients.remove(&oldest);
            }
        }
        let client = pinned(self.tls.clone(), addresses);
        kept.clients.insert(addresses.to_vec(), (client.clone(), now));
        client
    }

    /// How many clients are kept.
    pub fn len(&self) -> usize {
        self.kept.lock().unwrap_or_else(PoisonError::into_inner).clients.len()
    }

    /// Whether none are.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use bytes::Bytes;
    use http_body_util::{BodyExt as _, Empty};

    use super::*;

    fn tls() -> rustls::ClientConfig {
        rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth()
    }

    /// A plain HTTP server on `127.0.0.1` that counts its connections.
    async fn server() -> (u16, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let connections = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&connections);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(|_| async {
                        Ok::<_, hyper::Error>(http::Response::new(http_body_util::Full::new(Bytes::from("here"))))
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        (port, connections)
    }

    async fn get(client: &PinnedClient<Empty<Bytes>>, url: &str) -> Result<String, String> {
        let request = http::Request::get(url).body(Empty::new()).unwrap();
        let response = client.request(request).await.map_err(|e| e.to_string())?;
        Ok(String::from_utf8(response.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap())
    }

    #[tokio::test]
    async fn a_client_connects_to_its_addresses_whatever_the_name() {
        let (port, connections) = server().await;
        let loopback: IpAddr = "127.0.0.1".parse().unwrap();
        // A name no resolver knows: it is never looked up.
        let client = pinned(tls(), &[loopback]);
        assert_eq!(get(&client, &format!("http://pinned.invalid:{port}/")).await.unwrap(), "here");
        assert_eq!(connections.load(Ordering::SeqCst), 1);
        // A name that resolves to the server, pinned elsewhere: it goes
        // where it was pinned (where nothing listens), not where the name
        // points now.
        let elsewhere = pinned(tls(), &["127.0.0.2".parse().unwrap()]);
        assert!(get(&elsewhere, &format!("http://localhost:{port}/")).await.is_err());
        assert_eq!(connections.load(Ordering::SeqCst), 1, "the name was looked up again");
    }

    #[tokio::test]
    async fn clients_are_kept_per_address_set_and_bounded() {
        let upstreams: Upstreams<Empty<Bytes>> = Upstreams::new(tls());
        let (port, connections) = server().await;
        let loopback: IpAddr = "127.0.0.1".parse().unwrap();
        for _ in 0..3 {
            let client = upstreams.client(&[loopback]);
            assert_eq!(get(&client, &format!("http://pinned.invalid:{port}/")).await.unwrap(), "here");
        }
        assert_eq!(upstreams.len(), 1);
        assert_eq!(connections.load(Ordering::SeqCst), 1, "the one client's pooled connection was reused");
        for n in 0..MAX_CLIENTS as u32 + 10 {
            upstreams.client(&[IpAddr::from(std::net::Ipv4Addr::from(0x5db8_0000 + n))]);
        }
        assert_eq!(upstreams.len(), MAX_CLIENTS);
    }
}
