//! An HTTPS server on loopback with a test CA of its own (HTTP/1.1 and
//! HTTP/2), or a plain HTTP/1.1 one, recording every connection and request
//! that reaches it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt as _, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, SanType};

/// One request as the upstream saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub version: http::Version,
    pub headers: Vec<(String, String)>,
    pub body_bytes: u64,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

pub struct Upstream {
    pub addr: SocketAddr,
    /// The CA that signed its certificate (PEM), for the proxy to trust.
    pub ca_pem: String,
    pub connections: Arc<AtomicUsize>,
    pub seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

static CHUNK: [u8; 64 * 1024] = [b'x'; 64 * 1024];

type Body = BoxBody<Bytes, hyper::Error>;

/// Serves `/git/…` with `git http-backend` (CGI) from `root`.
async fn git_backend(root: &std::path::Path, request: Request<Incoming>) -> Response<Body> {
    use tokio::io::AsyncWriteExt as _;
    let path = request.uri().path().trim_start_matches("/git").to_owned();
    let query = request.uri().query().unwrap_or("").to_owned();
    let header = |name: &str| request.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    let (content_type, encoding, protocol) =
        (header("content-type"), header("content-encoding"), header("git-protocol"));
    let method = request.method().to_string();
    let body = request.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let mut child = tokio::process::Command::new("git")
        .arg("http-backend")
        .env("GIT_PROJECT_ROOT", root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("PATH_INFO", path)
        .env("QUERY_STRING", query)
        .env("REQUEST_METHOD", method)
        .env("CONTENT_TYPE", content_type)
        .env("HTTP_CONTENT_ENCODING", encoding)
        .env("GIT_PROTOCOL", protocol)
        .env("REMOTE_ADDR", "127.0.0.1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(&body).await.unwrap();
    drop(stdin);
    let output = child.wait_with_output().await.unwrap();
    let split = output
        .stdout
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|at| (at, 4))
        .or_else(|| output.stdout.windows(2).position(|w| w == b"\n\n").map(|at| (at, 2)));
    let (head, rest) = match split {
        Some((at, len)) => {
            (String::from_utf8_lossy(&output.stdout[..at]).into_owned(), output.stdout[at + len..].to_vec())
        }
        None => (String::new(), output.stdout.clone()),
    };
    let mut response = Response::new(Full::new(Bytes::from(rest)).map_err(|never| match never {}).boxed());
    for line in head.lines() {
        let Some((name, value)) = line.split_once(':') else { continue };
        let value = value.trim();
        if name.eq_ignore_ascii_case("status") {
            let code = value.split_whitespace().next().and_then(|c| c.parse().ok()).unwrap_or(500);
            *response.status_mut() = http::StatusCode::from_u16(code).unwrap();
        } else if let (Ok(name), Ok(value)) =
            (http::HeaderName::try_from(name.trim()), http::HeaderValue::try_from(value))
        {
            response.headers_mut().append(name, value);
        }
    }
    response
}

async fn answer(
    request: Request<Incoming>,
    seen: Arc<Mutex<Vec<Seen>>>,
    git: Option<Arc<std::path::PathBuf>>,
) -> Result<Response<Body>, hyper::Error> {
    if let Some(root) = git.filter(|_| request.uri().path().starts_with("/git/")) {
        let (method, path) = (request.method().to_string(), request.uri().to_string());
        seen.lock().unwrap().push(Seen { method, path, version: request.version(), headers: vec![], body_bytes: 0 });
        return Ok(git_backend(&root, request).await);
    }
    let method = request.method().to_string();
    let path = request.uri().path_and_query().map_or("/".to_owned(), |p| p.to_string());
    let version = request.version();
    let headers = request
        .headers()
        .iter()
        .map(|(n, v)| (n.as_str().to_owned(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
        .collect();
    // Read the body as it comes: count it, keep none of it.
    let mut body = request.into_body();
    let mut body_bytes = 0u64;
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            body_bytes += data.len() as u64;
        }
    }
    seen.lock().unwrap().push(Seen { method, path: path.clone(), version, headers, body_bytes });
    if let Some(size) = path.strip_prefix("/big?bytes=") {
        let size: u64 = size.parse().unwrap_or(0);
        let chunks = size / CHUNK.len() as u64;
        let frames = tokio_stream::iter((0..chunks).map(|_| Ok(Frame::data(Bytes::from_static(&CHUNK)))));
        return Ok(Response::new(StreamBody::new(frames).boxed()));
    }
    let text = format!("upstream saw {path} with {body_bytes} body bytes");
    let mut response = Response::new(Full::new(Bytes::from(text)).map_err(|never| match never {}).boxed());
    // `/echo`: the request's Authorization comes back in a header, as a
    // careless (or hostile) server would send it.
    if path == "/echo" {
        let seen = seen.lock().unwrap();
        if let Some(value) = seen.last().and_then(|s| s.header("authorization")) {
            response.headers_mut().insert("x-echo", http::HeaderValue::from_str(value).unwrap());
        }
    }
    // `/reason`: the same, in the status line's reason phrase (HTTP/1.1
    // only: HTTP/2 has none).
    if path == "/reason" {
        let seen = seen.lock().unwrap();
        if let Some(value) = seen.last().and_then(|s| s.header("authorization")) {
            let phrase = hyper::ext::ReasonPhrase::try_from(format!("Echo {value}")).unwrap();
            response.extensions_mut().insert(phrase);
        }
    }
    Ok(response)
}

impl Upstream {
    pub async fn start() -> Self {
        Self::serving(None).await
    }

    /// Plain HTTP/1.1 on loopback, no TLS (`http://localhost:PORT`).
    pub async fn plain() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let task = tokio::spawn({
            let (connections, seen) = (Arc::clone(&connections), Arc::clone(&seen));
            async move {
                loop {
                    let Ok((stream, _)) = listener.accept().await else { return };
                    connections.fetch_add(1, Ordering::SeqCst);
                    let seen = Arc::clone(&seen);
                    tokio::spawn(async move {
                        let service = hyper::service::service_fn(move |r| answer(r, Arc::clone(&seen), None));
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    });
                }
            }
        });
        Self { addr, ca_pem: String::new(), connections, seen, task }
    }

    /// Also serves the repositories under `root` at `/git/…` (git's smart
    /// HTTP, through `git http-backend`).
    pub async fn with_git(root: std::path::PathBuf) -> Self {
        Self::serving(Some(Arc::new(root))).await
    }

    async fn serving(git: Option<Arc<std::path::PathBuf>>) -> Self {
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(rcgen::DnType::CommonName, "upstream test CA");
        let ca_cert = ca_params.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca_params, ca_key);
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        params.subject_alt_names.push(SanType::IpAddress("127.0.0.1".parse().unwrap()));
        let cert = params.signed_by(&key, &issuer).unwrap();

        let mut config =
            rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(
                    vec![cert.der().clone()],
                    rustls_pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
                )
                .unwrap();
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let task = tokio::spawn({
            let (connections, seen, git) = (Arc::clone(&connections), Arc::clone(&seen), git.clone());
            async move {
                loop {
                    let Ok((stream, _)) = listener.accept().await else { return };
                    connections.fetch_add(1, Ordering::SeqCst);
                    let (acceptor, seen, git) = (acceptor.clone(), Arc::clone(&seen), git.clone());
                    tokio::spawn(async move {
                        let Ok(tls) = acceptor.accept(stream).await else { return };
                        let service = hyper::service::service_fn(move |r| answer(r, Arc::clone(&seen), git.clone()));
                        let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                            .serve_connection(TokioIo::new(tls), service)
                            .await;
                    });
                }
            }
        });
        Self { addr, ca_pem: ca_cert.pem(), connections, seen, task }
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}
