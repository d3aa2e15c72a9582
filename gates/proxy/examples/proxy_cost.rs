//! What the proxy adds: per-request latency of an HTTPS GET through
//! warden-proxy (one CONNECT tunnel, kept alive; each request decided by a
//! real monitor with fsync'd audit) against the same GET sent directly, and
//! the throughput of a large download both ways. Everything on loopback in
//! one process; the upstream is the tests' recording HTTPS server.
//!
//! `cargo run --release -p warden-proxy --example proxy_cost -- 2000 1024`
//! (requests, then MiB to download)

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

#[path = "../tests/proxy/upstream.rs"]
#[allow(dead_code)]
mod upstream;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Empty};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use warden_monitor::auth::{CredentialConfig, Role};
use warden_monitor::server::{ServerConfig, start};
use warden_monitor::service::MonitorConfig;
use warden_proxy::ca::Authority;
use warden_proxy::clients::Clients;
use warden_proxy::proxy::{Settings, serve};
use warden_sdk::Actor;

const HARNESS: &str = "wdn_bench_proxy_harness";

type Sender = hyper::client::conn::http1::SendRequest<Empty<Bytes>>;

fn tls_config(roots_pem: &[&str]) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for pem in roots_pem {
        for cert in rustls_pki_types::pem::PemObject::pem_slice_iter(pem.as_bytes()) {
            roots.add(cert.unwrap()).unwrap();
        }
    }
    let mut config = rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

/// An HTTP/1.1 connection over TLS to `localhost:port`, directly or through
/// a CONNECT tunnel of the proxy at `proxy`.
async fn connection(port: u16, proxy: Option<&str>, config: Arc<rustls::ClientConfig>) -> Sender {
    let mut tcp =
        tokio::net::TcpStream::connect(proxy.map_or(format!("127.0.0.1:{port}"), str::to_owned)).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    if proxy.is_some() {
        tcp.write_all(format!("CONNECT localhost:{port} HTTP/1.1\r\nHost: localhost:{port}\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut byte = [0u8; 1];
            tcp.read_exact(&mut byte).await.unwrap();
            head.push(byte[0]);
        }
        assert!(head.starts_with(b"HTTP/1.1 200"));
    }
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    let tls = tokio_rustls::TlsConnector::from(config).connect(name, tcp).await.unwrap();
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await.unwrap();
    tokio::spawn(conn);
    sender
}

async fn get(sender: &mut Sender, port: u16, path: &str) -> u64 {
    let request = http::Request::get(path).header("host", format!("localhost:{port}")).body(Empty::new()).unwrap();
    // The connection is ready again once the last answer's body is done.
    sender.ready().await.unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    let mut body = response.into_body();
    let mut bytes = 0;
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.unwrap().into_data() {
            bytes += data.len() as u64;
        }
    }
    bytes
}

fn percentile(sorted: &[Duration], q: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut args = std::env::args().skip(1);
    let requests: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(2000);
    let mib: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1024);

    // The monitor: the bundled schema, every request allowed, fsync'd audit.
    let policies = tempfile::tempdir().unwrap();
    let bundled = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../policies");
    for file in ["schema.cedarschema", "entities.json"] {
        std::fs::copy(bundled.join(file), policies.path().join(file)).unwrap();
    }
    std::fs::write(
        policies.path().join("p.cedar"),
        "@id(\"all\") @reason(\"benchmark\") permit (principal, action == Action::\"http.request\", resource);",
    )
    .unwrap();
    let data = tempfile::tempdir().unwrap();
    let config = ServerConfig {
        policies: policies.path().to_owned(),
        data: data.path().to_owned(),
        credentials: vec![CredentialConfig::for_token("proxy", Role::Harness, HARNESS, &["*"])],
        durability: Default::default(),
        checkpoint_every: Duration::from_secs(300),
        tls: None,
        socket: None,
        audit: Default::default(),
        store: None,
        monitor: MonitorConfig { policy_dir: policies.path().to_owned(), ..MonitorConfig::default() },
    };
    let monitor = start(config, tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap()).await.unwrap();

    let upstream = upstream::Upstream::start().await;
    let port = upstream.port();
    let proxy_data = tempfile::tempdir().unwrap();
    let ca = Authority::load_or_create(proxy_data.path()).unwrap();
    let ca_pem = ca.cert_pem().to_owned();
    let mut settings = Settings::new(Clients::fixed(Actor::new("alice", "bench", "bench-1"), 64));
    for cert in rustls_pki_types::pem::PemObject::pem_slice_iter(upstream.ca_pem.as_bytes()) {
        settings.upstream_roots.add(cert.unwrap()).unwrap();
    }
    let warden = warden_sdk::Client::connect(format!("http://{}", monitor.addr()), HARNESS).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy_addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(serve(warden_proxy::proxy::Listener::Tcp(listener), warden, ca, settings));

    let config = tls_config(&[&upstream.ca_pem, &ca_pem]);
    let mut direct = connection(port, None, Arc::clone(&config)).await;
    let mut proxied = connection(port, Some(&proxy_addr), Arc::clone(&config)).await;
    for _ in 0..50 {
        get(&mut direct, port, "/hello").await;
        get(&mut proxied, port, "/hello").await;
    }
    let (mut direct_times, mut proxied_times) = (Vec::new(), Vec::new());
    // Interleaved, so that both see the same machine.
    for _ in 0..requests {
        let started = Instant::now();
        get(&mut direct, port, "/hello").await;
        direct_times.push(started.elapsed());
        let started = Instant::now();
        get(&mut proxied, port, "/hello").await;
        proxied_times.push(started.elapsed());
    }
    direct_times.sort();
    proxied_times.sort();
    println!("{requests} sequential HTTPS GETs, one kept-alive connection each way:");
    for (name, times) in [("direct", &direct_times), ("through warden-proxy", &proxied_times)] {
        println!(
            "  {name:<22} p50 {:>8.0} µs  p99 {:>8.0} µs",
            percentile(times, 0.5).as_secs_f64() * 1e6,
            percentile(times, 0.99).as_secs_f64() * 1e6
        );
    }
    println!(
        "  added                  p50 {:>8.0} µs  p99 {:>8.0} µs",
        (percentile(&proxied_times, 0.5).as_secs_f64() - percentile(&direct_times, 0.5).as_secs_f64()) * 1e6,
        (percentile(&proxied_times, 0.99).as_secs_f64() - percentile(&direct_times, 0.99).as_secs_f64()) * 1e6
    );

    let path = format!("/big?bytes={}", mib * 1024 * 1024);
    println!("download of {mib} MiB:");
    for (name, sender) in [("direct", &mut direct), ("through warden-proxy", &mut proxied)] {
        let started = Instant::now();
        let bytes = get(sender, port, &path).await;
        let seconds = started.elapsed().as_secs_f64();
        println!("  {name:<22} {:>8.0} MiB/s", bytes as f64 / seconds / (1024.0 * 1024.0));
    }
    let _ = monitor.stop().await;
}
