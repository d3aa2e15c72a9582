//! Through the proxy with clients nobody here wrote.

use crate::support::{Monitor, Proxy, SECRET, all_bytes, contains, curl, found_or_skip};
use crate::upstream::Upstream;
use std::path::Path;

pub async fn setup() -> (Monitor, Upstream, Proxy) {
    let monitor = Monitor::start().await;
    let upstream = Upstream::start().await;
    let proxy = tokio::task::block_in_place(|| Proxy::start(&monitor, &upstream.ca_pem));
    (monitor, upstream, proxy)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_allowed_gets_arrive_and_denied_ones_never_connect() {
    if !found_or_skip("curl") {
        return;
    }
    let (monitor, upstream, proxy) = setup().await;
    let port = upstream.port();

    let got = curl(&proxy, &format!("https://localhost:{port}/hello?x=1"), &[]).await;
    assert_eq!(got.status, 200, "{}", got.headers);
    assert_eq!(got.body, "upstream saw /hello?x=1 with 0 body bytes");
    let seen = upstream.seen();
    assert_eq!(seen.len(), 1);
    // HTTP/2 upstream, which the server offers; HTTP/1.1 from curl.
    assert_eq!(seen[0].version, http::Version::HTTP_2);
    // The proxy's own header never goes upstream.
    assert!(seen[0].header("proxy-authorization").is_none());

    // Denied: 403 with the policy and its reason, and the upstream never
    // got as much as a connection.
    let connections = upstream.connections();
    let got = curl(&proxy, &format!("https://127.0.0.1:{port}/private/keys"), &[]).await;
    assert_eq!(got.status, 403, "{}", got.headers);
    assert!(got.headers.to_ascii_lowercase().contains("x-warden-decision: deny"), "{}", got.headers);
    let body: serde_json::Value = serde_json::from_str(&got.body).unwrap();
    assert_eq!(body["outcome"], "DENY");
    assert_eq!(body["policy_ids"], serde_json::json!(["http.private"]));
    assert!(body["reasons"][0].as_str().unwrap().contains("not for agents"));
    assert_eq!(upstream.connections(), connections, "a denied request reached the upstream");
    assert_eq!(upstream.seen().len(), 1);

    // The monitor saw each request as http.request of its full URL.
    let audit = monitor.audit().await;
    let asked: Vec<(&str, &str)> =
        audit.iter().filter(|r| r.action == "http.request").map(|r| (r.resource.as_str(), r.kind.as_str())).collect();
    assert!(asked.iter().any(|(r, _)| r.contains(&format!("https://localhost:{port}/hello?x=1"))), "{asked:?}");
    assert!(asked.iter().any(|(r, _)| r.contains(&format!("https://127.0.0.1:{port}/private/keys"))), "{asked:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_reaches_its_host_only_and_nobody_sees_it() {
    if !found_or_skip("curl") {
        return;
    }
    let (monitor, upstream, proxy) = setup().await;
    let port = upstream.port();
    let header = ["-H", "Authorization: Bearer warden-secret:api-key", "-H", "X-Other: plain"];

    let got = curl(&proxy, &format!("https://localhost:{port}/api"), &header).await;
    assert_eq!(got.status, 200, "{}", got.headers);
    let seen = upstream.seen();
    assert_eq!(seen[0].header("authorization"), Some(format!("Bearer {SECRET}").as_str()));
    assert_eq!(seen[0].header("x-other"), Some("plain"), "other headers untouched");

    // Another host: the secret is refused and nothing is sent at all.
    let connections = upstream.connections();
    let got = curl(&proxy, &format!("https://127.0.0.1:{port}/api"), &header).await;
    assert_eq!(got.status, 403, "{}", got.headers);
    assert!(got.body.contains("secrets.api-key-host"), "{}", got.body);
    assert_eq!(upstream.connections(), connections);
    assert_eq!(upstream.seen().len(), 1);

    // A secret the store does not hold: refused, nothing sent.
    let got =
        curl(&proxy, &format!("https://localhost:{port}/api"), &["-H", "Authorization: warden-secret:missing"]).await;
    assert_eq!(got.status, 403, "{}", got.body);
    assert_eq!(upstream.seen().len(), 1);

    // The value is nowhere but upstream: not in what the client got, the
    // proxy's debug log, the audit log or the monitor's files.
    assert!(!got.body.contains(SECRET) && !got.headers.contains(SECRET));
    assert!(!proxy.log().contains(SECRET), "the proxy logged the secret");
    for record in monitor.audit().await {
        assert!(!format!("{record:?}").contains(SECRET), "the secret is in the audit log");
    }
    assert!(!contains(&all_bytes(monitor.data.path()), SECRET), "the secret is in the monitor's store");
    // Asked twice for api-key: allowed for localhost, denied for 127.0.0.1.
    let outcomes: Vec<i32> = monitor
        .audit()
        .await
        .into_iter()
        .filter(|r| r.action == "secret.use" && r.resource.contains("api-key"))
        .map(|r| r.outcome)
        .collect();
    use warden_proto::v1::Outcome;
    assert_eq!(outcomes, vec![Outcome::Allow as i32, Outcome::Deny as i32]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_monitor_stopped_nothing_passes() {
    if !found_or_skip("curl") {
        return;
    }
    let (mut monitor, upstream, proxy) = setup().await;
    monitor.stop().await;
    let got = curl(&proxy, &format!("https://localhost:{}/hello", upstream.port()), &[]).await;
    assert_eq!(got.status, 503, "{}", got.headers);
    assert!(got.body.contains("Warden could not be asked"), "{}", got.body);
    assert_eq!(upstream.connections(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_bodies_stream_through_in_bounded_memory() {
    if !found_or_skip("curl") {
        return;
    }
    let (_monitor, upstream, proxy) = setup().await;
    const SIZE: u64 = 256 * 1024 * 1024;
    let got = curl(
        &proxy,
        &format!("https://localhost:{}/big?bytes={SIZE}", upstream.port()),
        &["-o", "/dev/null", "--max-time", "300"],
    )
    .await;
    assert_eq!(got.status, 200, "{}", got.headers);

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("upload");
    std::fs::File::create(&file).unwrap().set_len(SIZE).unwrap();
    let got = curl(
        &proxy,
        &format!("https://localhost:{}/upload", upstream.port()),
        &["-X", "PUT", "--data-binary", &format!("@{}", file.display()), "--max-time", "300"],
    )
    .await;
    assert_eq!(got.status, 200, "{}", got.headers);
    assert_eq!(upstream.seen().last().unwrap().body_bytes, SIZE);
    // 512 MiB went through; the proxy never held more than a sliver of it.
    let peak = proxy.peak_rss_kib();
    assert!(peak < 96 * 1024, "the proxy's peak RSS was {peak} KiB");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_requests_through_the_proxy() {
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/pysdk/bin/python");
    if !python.exists() {
        assert!(
            std::env::var_os("WARDEN_REQUIRE_NPM").is_none(),
            "WARDEN_REQUIRE_NPM is set but {} is missing",
            python.display()
        );
        println!("skipped: {} is missing (scripts/test-deps makes it)", python.display());
        return;
    }
    let (_monitor, upstream, proxy) = setup().await;
    let script = r#"
import sys, requests
base = sys.argv[1]
# Configured as a sandbox is: HTTPS_PROXY, and REQUESTS_CA_BUNDLE naming
# the proxy's CA.
ok = requests.get(f"{base}/hello", headers={"X-Api-Key": "warden-secret:api-key"})
denied = requests.get(base.replace("localhost", "127.0.0.1") + "/private/x")
print(ok.status_code, ok.text)
print(denied.status_code, denied.headers.get("X-Warden-Decision"), denied.json()["policy_ids"])
"#;
    let output = tokio::process::Command::new(&python)
        .args(["-c", script, &format!("https://localhost:{}", upstream.port())])
        .env("HTTPS_PROXY", proxy.url())
        .env("REQUESTS_CA_BUNDLE", &proxy.ca)
        .env_remove("CURL_CA_BUNDLE")
        .env_remove("NO_PROXY")
        .env_remove("no_proxy")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", String::from_utf8_lossy(&output.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "200 upstream saw /hello with 0 body bytes");
    assert_eq!(lines[1], "403 DENY ['http.private']");
    assert_eq!(upstream.seen()[0].header("x-api-key"), Some(SECRET));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_clones_over_https_through_the_proxy() {
    if !found_or_skip("git") {
        return;
    }
    let repos = tempfile::tempdir().unwrap();
    let git = |dir: &Path, args: &[&str]| {
        let status = std::process::Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "init.defaultBranch=main"])
            .args(args)
            .current_dir(dir)
            .status()
            .unwrap();
        assert!(status.success(), "git {args:?}");
    };
    let work = repos.path().join("work");
    std::fs::create_dir(&work).unwrap();
    git(&work, &["init", "-q"]);
    std::fs::write(work.join("README.md"), "cloned through warden-proxy\n").unwrap();
    git(&work, &["add", "README.md"]);
    git(&work, &["commit", "-q", "-m", "first"]);
    git(repos.path(), &["clone", "-q", "--bare", "work", "repo.git"]);

    let monitor = Monitor::start().await;
    let upstream = Upstream::with_git(repos.path().to_owned()).await;
    let proxy = tokio::task::block_in_place(|| Proxy::start(&monitor, &upstream.ca_pem));
    let into = tempfile::tempdir().unwrap();
    let output = tokio::process::Command::new("git")
        .args(["-c", &format!("http.proxy={}", proxy.url())])
        .arg("-c")
        .arg(format!("http.sslCAInfo={}", proxy.ca.display()))
        .args(["clone", "-q", &format!("https://localhost:{}/git/repo.git", upstream.port()), "clone"])
        .current_dir(into.path())
        .env_remove("GIT_SSL_CAINFO")
        .output()
        .await
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(std::fs::read_to_string(into.path().join("clone/README.md")).unwrap(), "cloned through warden-proxy\n");
    // Every request of the clone was decided: the ref advertisement and
    // the pack fetch.
    let asked: Vec<String> =
        monitor.audit().await.into_iter().filter(|r| r.action == "http.request").map(|r| r.resource).collect();
    assert!(asked.iter().any(|r| r.contains("/git/repo.git/info/refs?service=git-upload-pack")), "{asked:?}");
    assert!(asked.iter().any(|r| r.contains("/git/repo.git/git-upload-pack")), "{asked:?}");
}

/// A TLS client that trusts the proxy's CA.
fn trusting(ca: &Path) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    let pem = std::fs::read(ca).unwrap();
    for cert in rustls_pki_types::pem::PemObject::pem_slice_iter(&pem) {
        roots.add(cert.unwrap()).unwrap();
    }
    tokio_rustls::TlsConnector::from(std::sync::Arc::new(
        rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    ))
}

/// Sends `CONNECT host:port` on `stream` and reads the proxy's 200.
async fn connect_to<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    mut stream: S,
    host: &str,
    port: u16,
) -> S {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    stream
        .write_all(format!("CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        stream.read_exact(&mut byte).await.unwrap();
        head.push(byte[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&head));
    stream
}

/// Sends one request over `stream` and reads the answer to its end.
async fn exchange<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(mut stream: S, request: &str) -> String {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer).await;
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tunnel_goes_to_its_connect_host_only() {
    let (_monitor, upstream, proxy) = setup().await;
    let port = upstream.port();
    let tls = trusting(&proxy.ca);
    let tunnel = |host: &'static str| {
        let addr = proxy.addr.clone();
        async move { connect_to(tokio::net::TcpStream::connect(addr).await.unwrap(), host, port).await }
    };

    // CONNECT localhost, then a TLS server name of another host: no
    // certificate, no handshake.
    let tcp = tunnel("localhost").await;
    let name = rustls_pki_types::ServerName::try_from("api.github.com").unwrap();
    assert!(tls.connect(name, tcp).await.is_err(), "a TLS name other than the CONNECT host was served");

    // CONNECT localhost, TLS for localhost, then Host: another host: 421,
    // nothing sent.
    let tcp = tunnel("localhost").await;
    let stream = tls.connect(rustls_pki_types::ServerName::try_from("localhost").unwrap(), tcp).await.unwrap();
    let answer =
        exchange(stream, &format!("GET /hello HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n")).await;
    assert!(answer.starts_with("HTTP/1.1 421"), "{answer}");
    assert!(answer.contains("is not the CONNECT target"), "{answer}");
    assert_eq!(upstream.connections(), 0, "a mismatched request reached the upstream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_sandbox_is_known_by_its_proxy_credential() {
    use sha2::Digest as _;
    if !found_or_skip("curl") {
        return;
    }
    let monitor = Monitor::start().await;
    let upstream = Upstream::start().await;
    let hash = |token: &str| hex::encode(sha2::Sha256::digest(token.as_bytes()));
    let proxy = tokio::task::block_in_place(|| {
        Proxy::start_with(&monitor, &upstream.ca_pem, "127.0.0.1:0", |dir| {
            let file = dir.join("clients.toml");
            std::fs::write(
                &file,
                format!(
                    "[[clients]]\ntoken_sha256 = \"{}\"\nuser = \"alice\"\nsession = \"box-a\"\n\n\
                     [[clients]]\ntoken_sha256 = \"{}\"\nuser = \"bob\"\nagent = \"ci\"\nsession = \"box-b\"\n",
                    hash("token-of-a"),
                    hash("token-of-b")
                ),
            )
            .unwrap();
            vec!["--clients".into(), file.display().to_string()]
        })
    });
    let url = format!("https://localhost:{}/hello", upstream.port());
    let through = |user: &str| format!("http://{user}@{}", proxy.addr);

    for (credential, expect) in [("x:token-of-a", "alice"), ("x:token-of-b", "bob")] {
        let got = curl(&proxy, &url, &["--proxy", &through(credential)]).await;
        assert_eq!(got.status, 200, "{}", got.headers);
        let audit = monitor.audit().await;
        let last = audit.iter().rev().find(|r| r.action == "http.request").unwrap();
        assert_eq!(last.actor.as_ref().unwrap().user, expect);
    }
    assert_eq!(upstream.seen().len(), 2);
    // No credential, or a wrong one: 407, nothing decided or sent.
    let decided = monitor.audit().await.len();
    for proxy_url in [proxy.url(), through("x:not-a-token")] {
        let got = curl(&proxy, &url, &["--proxy", &proxy_url]).await;
        assert!(got.headers.contains("407"), "{}", got.headers);
    }
    assert_eq!(monitor.audit().await.len(), decided);
    assert_eq!(upstream.seen().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_listens_on_a_unix_socket() {
    let monitor = Monitor::start().await;
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("proxy.sock");
    let listen = format!("unix:{}", socket.display());
    let proxy = tokio::task::block_in_place(|| {
        Proxy::start_with(&monitor, &upstream.ca_pem, &listen, |_| {
            ["--user", "alice", "--session", "socket-1"].map(String::from).to_vec()
        })
    });
    assert_eq!(proxy.addr, listen);
    let port = upstream.port();
    let stream = connect_to(tokio::net::UnixStream::connect(&socket).await.unwrap(), "localhost", port).await;
    let stream = trusting(&proxy.ca)
        .connect(rustls_pki_types::ServerName::try_from("localhost").unwrap(), stream)
        .await
        .unwrap();
    let answer =
        exchange(stream, &format!("GET /hello HTTP/1.1\r\nHost: localhost:{port}\r\nConnection: close\r\n\r\n")).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("upstream saw /hello with 0 body bytes"), "{answer}");
    assert_eq!(upstream.seen().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_request_head_is_refused() {
    if !found_or_skip("curl") {
        return;
    }
    let (_monitor, upstream, proxy) = setup().await;
    let big = format!("X-Big: {}", "a".repeat(100 * 1024));
    let got = curl(&proxy, &format!("http://localhost:{}/hello", upstream.port()), &["-H", &big]).await;
    assert_eq!(got.status, 431, "{}", got.headers);
    assert_eq!(upstream.connections(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_would_mean_more_than_was_decided_is_refused() {
    if !found_or_skip("curl") {
        return;
    }
    let (_monitor, upstream, proxy) = setup().await;
    let port = upstream.port();
    // A path the monitor would read in normal form and a server might not:
    // `/private/..` is `/` to the monitor, and `//`, `%2f`, `..;` are
    // whatever the server makes of them.
    for path in ["/private/../a", "//private/x", "/public/..%2fprivate/x", "/x/..;/private/x"] {
        let got = curl(&proxy, &format!("https://127.0.0.1:{port}{path}"), &["--path-as-is"]).await;
        assert_eq!(got.status, 400, "{path}: {}", got.body);
        assert!(got.body.contains("nothing was sent"), "{}", got.body);
    }
    // A GET is decided as a read: with a body it would carry data out.
    let got = curl(&proxy, &format!("https://localhost:{port}/search"), &["-X", "GET", "--data", "exfiltrated"]).await;
    assert_eq!(got.status, 400, "{}", got.body);
    assert_eq!(upstream.seen().len(), 0, "a refused request reached the upstream");

    // An upstream that echoes the secret back: the agent sees it redacted.
    let got =
        curl(&proxy, &format!("https://localhost:{port}/echo"), &["-H", "Authorization: warden-secret:api-key"]).await;
    assert_eq!(got.status, 200, "{}", got.headers);
    assert_eq!(upstream.seen()[0].header("authorization"), Some(SECRET), "the upstream got the value");
    assert!(!got.headers.contains(SECRET), "{}", got.headers);
    assert!(got.headers.to_ascii_lowercase().contains("x-echo: [redacted by warden-proxy]"), "{}", got.headers);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_echoed_in_the_status_line_is_redacted() {
    if !found_or_skip("curl") {
        return;
    }
    let (_monitor, _tls, proxy) = setup().await;
    // HTTP/1.1 upstream: HTTP/2 has no reason phrase.
    let plain = Upstream::plain().await;
    let url = format!("http://localhost:{}/reason", plain.port());
    let got = curl(&proxy, &url, &["-H", "Authorization: Bearer warden-secret:api-key"]).await;
    assert_eq!(got.status, 200, "{}", got.headers);
    assert_eq!(plain.seen()[0].header("authorization"), Some(format!("Bearer {SECRET}").as_str()));
    assert!(!got.headers.contains(SECRET), "{}", got.headers);
    assert!(got.headers.starts_with("HTTP/1.1 200 [redacted by warden-proxy]"), "{}", got.headers);
    // A reason phrase with no secret in it is the upstream's.
    let got = curl(&proxy, &url, &["-H", "Authorization: Bearer plain-text"]).await;
    assert!(got.headers.starts_with("HTTP/1.1 200 Echo Bearer plain-text"), "{}", got.headers);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_gets_its_places_and_an_idle_client_is_let_go() {
    use sha2::Digest as _;
    use tokio::io::AsyncReadExt as _;
    let monitor = Monitor::start().await;
    let upstream = Upstream::start().await;
    let token = "token-of-one";
    let proxy = tokio::task::block_in_place(|| {
        Proxy::start_with(&monitor, &upstream.ca_pem, "127.0.0.1:0", |dir| {
            let file = dir.join("clients.toml");
            let hash = hex::encode(sha2::Sha256::digest(token.as_bytes()));
            std::fs::write(
                &file,
                format!(
                    "[[clients]]\ntoken_sha256 = \"{hash}\"\nuser = \"alice\"\nsession = \"one\"\nmax_connections = 1\n"
                ),
            )
            .unwrap();
            ["--clients", &file.display().to_string(), "--idle-timeout", "1"].map(String::from).to_vec()
        })
    });
    let port = upstream.port();
    let connect = |authorization: &str| {
        format!(
            "CONNECT localhost:{port} HTTP/1.1\r\nHost: localhost:{port}\r\nProxy-Authorization: Bearer {authorization}\r\n\r\n"
        )
    };
    // One tunnel open takes the sandbox's one place: a second is a 429.
    let mut first = tokio::net::TcpStream::connect(&proxy.addr).await.unwrap();
    let open = exchange_head(&mut first, &connect(token)).await;
    assert!(open.starts_with("HTTP/1.1 200"), "{open}");
    let mut second = tokio::net::TcpStream::connect(&proxy.addr).await.unwrap();
    let refused = exchange_head(&mut second, &connect(token)).await;
    assert!(refused.starts_with("HTTP/1.1 429"), "{refused}");
    // The first tunnel never starts TLS: after the idle timeout the proxy
    // closes it (end of stream), and its place is free again.
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(std::time::Duration::from_secs(30), first.read_to_end(&mut rest)).await;
    assert!(closed.is_ok(), "an idle tunnel was kept open");
    let mut third = tokio::net::TcpStream::connect(&proxy.addr).await.unwrap();
    let reopened = exchange_head(&mut third, &connect(token)).await;
    assert!(reopened.starts_with("HTTP/1.1 200"), "{reopened}");
}

/// Writes `request` and reads the answer's head.
async fn exchange_head(stream: &mut tokio::net::TcpStream, request: &str) -> String {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        if stream.read(&mut byte).await.unwrap() == 0 {
            break;
        }
        head.push(byte[0]);
    }
    String::from_utf8_lossy(&head).into_owned()
}
