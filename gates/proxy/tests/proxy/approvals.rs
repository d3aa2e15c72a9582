//! A request that needs a person's approval: answered at once (403
//! PENDING naming the approval), sent when the same request comes again
//! after the approval, once; or held while `--approval-wait` lasts.

use crate::clients::setup;
use crate::support::{DEPLOY_SECRET, Got, Monitor, Proxy, curl, found_or_skip};
use crate::upstream::Upstream;

const POST: [&str; 2] = ["--data", "release=1.2"];

/// A 403 PENDING answer's approval id, after checking that the header and
/// the body agree and say what the proxy promises.
fn pending_approval(got: &Got, policy: &str) -> String {
    assert_eq!(got.status, 403, "{}\n{}", got.headers, got.body);
    let body = got.json();
    assert_eq!(body["outcome"], "PENDING", "{body}");
    assert_eq!(got.header("x-warden-decision").as_deref(), Some("PENDING"), "{}", got.headers);
    let id = got.header("warden-approval").unwrap_or_else(|| panic!("no Warden-Approval: {}", got.headers));
    assert_eq!(body["approval_id"], id.as_str(), "{body}");
    assert!(body["expires_at"].as_str().is_some_and(|at| at.ends_with('Z')), "{body}");
    assert!(body["policy_ids"].as_array().unwrap().iter().any(|p| p == policy), "{body}");
    let reasons = body["reasons"].to_string();
    assert!(reasons.contains("a person must approve") && reasons.contains("send the same request again"), "{body}");
    let retry: u64 = got.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=10).contains(&retry), "Retry-After: {retry}");
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_that_needs_approval_is_answered_at_once_and_sent_once_approved() {
    if !found_or_skip("curl") {
        return;
    }
    let (mut monitor, upstream, proxy) = setup().await;
    let url = format!("https://localhost:{}/deploy", upstream.port());

    // At once (the approval's deadline is 2 minutes away, curl gives up
    // after 60 s): 403 PENDING, and the upstream saw nothing.
    let first = pending_approval(&curl(&proxy, &url, &POST).await, "http.post-needs-approval");
    assert_eq!(upstream.connections(), 0, "a pending request reached the upstream");
    let waiting: Vec<String> = monitor.pending().await.into_iter().map(|a| a.approval_id).collect();
    assert_eq!(waiting, vec![first.clone()]);

    // Sent again before anyone answered: the same approval, no new one.
    let again = pending_approval(&curl(&proxy, &url, &POST).await, "http.post-needs-approval");
    assert_eq!(again, first);
    assert_eq!(monitor.pending().await.len(), 1, "asking again made another approval");
    assert_eq!(upstream.connections(), 0);

    // Approved: the same request goes through, body and all.
    monitor.resolve(&first, true, "ship it").await;
    let got = curl(&proxy, &url, &POST).await;
    assert_eq!(got.status, 200, "{}\n{}", got.headers, got.body);
    let seen = upstream.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!((seen[0].method.as_str(), seen[0].path.as_str(), seen[0].body_bytes), ("POST", "/deploy", 11));

    // The approval is spent: the next identical request asks a person again.
    let third = pending_approval(&curl(&proxy, &url, &POST).await, "http.post-needs-approval");
    assert_ne!(third, first, "an approval let two requests through");
    assert_eq!(upstream.seen().len(), 1);

    // Another request is another approval.
    let other = pending_approval(&curl(&proxy, &format!("{url}?env=prod"), &POST).await, "http.post-needs-approval");
    assert_ne!(other, third);

    // The monitor gone: a remembered approval cannot be looked at, and
    // nothing is sent.
    monitor.stop().await;
    let got = curl(&proxy, &url, &POST).await;
    assert_eq!(got.status, 503, "{}\n{}", got.headers, got.body);
    assert!(got.body.contains("Warden could not be asked"), "{}", got.body);
    assert_eq!(upstream.seen().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_that_needs_approval_is_put_in_once_approved() {
    if !found_or_skip("curl") {
        return;
    }
    let (monitor, upstream, proxy) = setup().await;
    let url = format!("https://localhost:{}/api", upstream.port());
    let header = ["-H", "Authorization: Bearer warden-secret:deploy-key"];

    let got = curl(&proxy, &url, &header).await;
    let first = pending_approval(&got, "secrets.deploy-key-needs-approval");
    assert!(got.json()["pending"].as_str().unwrap().contains("secret `deploy-key` in `authorization`"), "{}", got.body);
    assert_eq!(upstream.connections(), 0);
    // The approver is shown the secret's name and where it would go.
    let waiting = monitor.pending().await;
    assert_eq!(waiting.len(), 1);
    let request = waiting[0].request.as_ref().unwrap();
    assert_eq!(request.action, "secret.use");
    assert!(request.context_json.contains("\"destination\":\"localhost\""), "{}", request.context_json);

    monitor.resolve(&first, true, "for this call").await;
    let got = curl(&proxy, &url, &header).await;
    assert_eq!(got.status, 200, "{}\n{}", got.headers, got.body);
    let seen = upstream.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].header("authorization"), Some(format!("Bearer {DEPLOY_SECRET}").as_str()));

    // Once: the next use of the secret waits for a person again.
    let got = curl(&proxy, &url, &header).await;
    let third = pending_approval(&got, "secrets.deploy-key-needs-approval");
    assert_ne!(third, first);
    assert_eq!(upstream.seen().len(), 1);
    assert!(!got.body.contains(DEPLOY_SECRET) && !got.headers.contains(DEPLOY_SECRET));
    assert!(!proxy.log().contains(DEPLOY_SECRET), "the proxy logged the secret");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_with_two_approvals_uses_both_in_the_one_request_sent() {
    if !found_or_skip("curl") {
        return;
    }
    let (monitor, upstream, proxy) = setup().await;
    let url = format!("https://localhost:{}/deploy", upstream.port());
    let post = ["--data", "release=1.2", "-H", "Authorization: Bearer warden-secret:deploy-key"];

    let request = pending_approval(&curl(&proxy, &url, &post).await, "http.post-needs-approval");
    monitor.resolve(&request, true, "the POST").await;
    // The POST is approved; the secret in it is the next thing to approve.
    // The request is not sent, so its approval is kept, not spent.
    let secret = pending_approval(&curl(&proxy, &url, &post).await, "secrets.deploy-key-needs-approval");
    assert_eq!(upstream.connections(), 0);
    monitor.resolve(&secret, true, "the key").await;
    let got = curl(&proxy, &url, &post).await;
    assert_eq!(got.status, 200, "{}\n{}", got.headers, got.body);
    let seen = upstream.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].header("authorization"), Some(format!("Bearer {DEPLOY_SECRET}").as_str()));
    // Both spent by the one request sent.
    let again = pending_approval(&curl(&proxy, &url, &post).await, "http.post-needs-approval");
    assert_ne!(again, request);
    assert_eq!(monitor.pending().await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_approval_is_a_403_with_the_approvers_note() {
    if !found_or_skip("curl") {
        return;
    }
    let (monitor, upstream, proxy) = setup().await;
    let url = format!("https://localhost:{}/deploy", upstream.port());
    let first = pending_approval(&curl(&proxy, &url, &POST).await, "http.post-needs-approval");
    monitor.resolve(&first, false, "not before the release review").await;

    let got = curl(&proxy, &url, &POST).await;
    assert_eq!(got.status, 403, "{}\n{}", got.headers, got.body);
    assert_eq!(got.header("x-warden-decision").as_deref(), Some("DENY"));
    let body = got.json();
    assert_eq!(body["outcome"], "DENY");
    assert_eq!(body["approval_id"], first.as_str());
    assert_eq!(body["note"], "not before the release review");
    assert!(body["reasons"].to_string().contains("not before the release review"), "{body}");
    assert_eq!(upstream.connections(), 0, "a denied request reached the upstream");

    // The denial is not remembered either: the next try asks afresh.
    let next = pending_approval(&curl(&proxy, &url, &POST).await, "http.post-needs-approval");
    assert_ne!(next, first);
    assert_eq!(upstream.connections(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_an_approval_wait_a_post_approved_meanwhile_goes_through_in_one_request() {
    if !found_or_skip("curl") {
        return;
    }
    let monitor = Monitor::start().await;
    let upstream = Upstream::start().await;
    let proxy =
        tokio::task::block_in_place(|| Proxy::start_flags(&monitor, &upstream.ca_pem, &["--approval-wait", "60s"]));
    let url = format!("https://localhost:{}/deploy", upstream.port());
    let posting = {
        let (proxy_url, ca, url) = (proxy.url(), proxy.ca.clone(), url.clone());
        tokio::spawn(async move {
            tokio::process::Command::new("curl")
                .args(["-sS", "--max-time", "60", "--proxy", &proxy_url, "--cacert"])
                .arg(ca)
                .args(["-w", "\n%{http_code}", "--data", "release=1.2", &url])
                .output()
                .await
                .unwrap()
        })
    };
    monitor.resolve_when_pending("/deploy", true).await;
    let output = posting.await.unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.ends_with("200"), "{stdout}");
    let seen = upstream.seen();
    assert_eq!((seen[0].method.as_str(), seen[0].path.as_str(), seen[0].body_bytes), ("POST", "/deploy", 11));
    assert!(monitor.pending().await.is_empty());

    // Nobody answering within the wait: 403 PENDING when it ends.
    let brief =
        tokio::task::block_in_place(|| Proxy::start_flags(&monitor, &upstream.ca_pem, &["--approval-wait", "1s"]));
    let id = pending_approval(&curl(&brief, &url, &POST).await, "http.post-needs-approval");
    assert_eq!(monitor.pending().await.into_iter().map(|a| a.approval_id).collect::<Vec<_>>(), vec![id]);
    assert_eq!(upstream.seen().len(), 1);
}
