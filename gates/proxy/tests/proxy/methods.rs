//! A request's method is decided and sent upstream in one spelling, and
//! what its headers carry is the policies' to see.

use crate::clients::setup;
use crate::support::{asked, curl, found_or_skip, raw};
use crate::upstream::Upstream;

/// The methods and paths the upstream saw, in order.
fn seen(upstream: &Upstream) -> Vec<(String, String, u64)> {
    upstream.seen().into_iter().map(|s| (s.method, s.path, s.body_bytes)).collect()
}

fn own(items: &[(&str, &str, u64)]) -> Vec<(String, String, u64)> {
    items.iter().map(|(m, p, b)| (m.to_string(), p.to_string(), *b)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_method_in_any_case_is_decided_and_sent_as_one() {
    if !found_or_skip("curl") {
        return;
    }
    let (monitor, tls, proxy) = setup().await;
    let plain = Upstream::plain().await;
    let body = "x".repeat(51);
    for (upstream, base) in
        [(&tls, format!("https://localhost:{}", tls.port())), (&plain, format!("http://localhost:{}", plain.port()))]
    {
        // `get` with a body is a GET with a body: refused, nothing sent.
        let got = curl(&proxy, &format!("{base}/lower"), &["-X", "get", "--data-binary", &body]).await;
        assert_eq!(got.status, 400, "{base}: {}", got.body);
        assert!(got.body.contains("a GET with a body is refused"), "{}", got.body);
        assert_eq!(upstream.connections(), 0, "{base}: a refused request reached the upstream");
        // Without a body it goes, as GET; `dElEtE` as DELETE; an extension
        // method upper-cased, as it was decided.
        for (method, path) in [("get", "/lower"), ("dElEtE", "/gone"), ("propfind", "/dav")] {
            let got = curl(&proxy, &format!("{base}{path}"), &["-X", method]).await;
            assert_eq!(got.status, 200, "{base} {method}: {}", got.body);
        }
        assert_eq!(seen(upstream), own(&[("GET", "/lower", 0), ("DELETE", "/gone", 0), ("PROPFIND", "/dav", 0)]));
    }
    // The monitor decided each as the upstream got it.
    let methods: Vec<String> = asked(&monitor, "http.request")
        .await
        .iter()
        .filter_map(|r| r.pointer("/resource/Url/method").and_then(|m| m.as_str()).map(str::to_owned))
        .collect();
    for method in ["GET", "DELETE", "PROPFIND"] {
        assert_eq!(methods.iter().filter(|m| *m == method).count(), 2, "{method}: {methods:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_curl_cannot_send_is_decided_in_one_spelling_or_refused() {
    let (_monitor, _tls, proxy) = setup().await;
    let plain = Upstream::plain().await;
    let host = format!("localhost:{}", plain.port());
    // `head`: a HEAD upstream, whose answer has no body.
    let answer =
        raw(&proxy, &format!("head http://{host}/h HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("\r\n\r\n"), "a HEAD answer with a body: {answer}");
    assert_eq!(seen(&plain), own(&[("HEAD", "/h", 0)]));
    // `gEt` with a body: refused before anything is sent.
    let answer = raw(
        &proxy,
        &format!(
            "gEt http://{host}/b HTTP/1.1\r\nHost: {host}\r\nContent-Length: 51\r\nConnection: close\r\n\r\n{}",
            "x".repeat(51)
        ),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    // Not a method, a CONNECT spelled otherwise, a method longer than the
    // monitor takes: refused.
    for (line, why) in [
        (format!("G@T http://{host}/ HTTP/1.1"), ""),
        (format!("connect {host} HTTP/1.1"), "CONNECT"),
        (format!("Connect http://{host}/ HTTP/1.1"), "CONNECT"),
        (format!("{} http://{host}/ HTTP/1.1", "X".repeat(40)), "longer than"),
    ] {
        let answer = raw(&proxy, &format!("{line}\r\nHost: {host}\r\nConnection: close\r\n\r\n")).await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{line}: {answer}");
        assert!(answer.contains(why), "{line}: {answer}");
    }
    assert_eq!(plain.seen().len(), 1, "a refused request reached the upstream: {:?}", plain.seen());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bytes_a_request_carries_in_its_headers_are_the_policies_to_see() {
    let (monitor, _tls, proxy) = setup().await;
    let plain = Upstream::plain().await;
    let host = format!("localhost:{}", plain.port());
    // Host (from the decided URL) and the hop's own headers do not count:
    // `x-data` and its value do, 6 + 2000 bytes.
    let request = |bytes: usize| {
        format!(
            "GET http://{host}/h{bytes} HTTP/1.1\r\nHost: {host}\r\nProxy-Connection: keep-alive\r\nX-Data: {}\r\nConnection: close\r\n\r\n",
            "a".repeat(bytes)
        )
    };
    let answer = raw(&proxy, &request(2000)).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let decided = asked(&monitor, "http.request").await;
    assert_eq!(decided.last().and_then(|r| r.pointer("/context/header_bytes")), Some(&serde_json::json!(2006)));
    // The test's policies refuse a GET that carries more than 16 KiB out in
    // its headers.
    let answer = raw(&proxy, &request(20_000)).await;
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    assert!(answer.contains("http.get-header-bytes"), "{answer}");
    assert_eq!(plain.seen().len(), 1);
}
