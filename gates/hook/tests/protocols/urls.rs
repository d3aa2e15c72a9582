//! Gemini CLI's `web_fetch` fetches every URL its prompt names: each is
//! asked about, and all must be allowed.

use serde_json::json;

use crate::support::{ask, credentials, decisions_of, gemini};

const POLICIES: &str = r#"
@id("test.web")
@reason("the test's two sites")
permit (principal, action == Action::"http.request", resource)
when { resource.host == "example.com" || resource.host == "example.org" };

@id("test.no-metadata")
@reason("the cloud metadata service is never fetched")
forbid (principal, action == Action::"http.request", resource)
when { resource.host == "169.254.169.254" };
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_url_of_a_web_fetch_prompt_is_asked_about() {
    let monitor = warden_tests::monitor::start_with_policies(POLICIES, credentials()).await.unwrap();
    let endpoint = monitor.endpoint.as_str();
    let cwd = std::path::Path::new("/home/alice/project");
    let fetch = |session: &str, input| gemini(session, cwd, "web_fetch", input);

    // The second URL is the metadata service.
    let prompt = "Summarize https://example.com/a and then http://169.254.169.254/latest/meta-data/";
    let (allowed, reason) = ask(endpoint, "gemini", 5, fetch("two", json!({ "prompt": prompt }))).await;
    assert!(!allowed && reason.contains("test.no-metadata"), "{reason}");
    assert!(reason.contains("http://169.254.169.254/latest/meta-data/"), "{reason}");
    let asked: Vec<String> = decisions_of(endpoint, "two").await.into_iter().map(|d| d.resource).collect();
    assert_eq!(
        asked,
        ["Url::\"https://example.com/a\"", "Url::\"http://169.254.169.254/latest/meta-data/\""],
        "each URL asked once, in order"
    );

    // Two allowed URLs.
    let prompt = "Compare https://example.com/a with https://example.org/b, please.";
    let (allowed, reason) = ask(endpoint, "gemini", 5, fetch("allowed", json!({ "prompt": prompt }))).await;
    assert!(allowed, "{reason}");
    assert_eq!(decisions_of(endpoint, "allowed").await.len(), 2);

    // However the URL is written, wherever it is in the text.
    for prompt in [
        "see (http://169.254.169.254/latest) and https://example.com",
        "https://example.com/ HTTP://169.254.169.254/latest",
        "https://example.com/\u{a0}http://169.254.169.254/",
        "https://example.com/\u{feff}http://169.254.169.254/",
        "first https://example.com/?next=http://169.254.169.254/",
        "\"http://169.254.169.254/\"",
        "\u{1}http://169.254.169.254/",
    ] {
        let (allowed, reason) = ask(endpoint, "gemini", 5, fetch("tricks", json!({ "prompt": prompt }))).await;
        assert!(!allowed && reason.contains("test.no-metadata"), "{prompt:?}: {reason}");
    }
    // The direct `url` of Gemini CLI's experimental fetch.
    let (allowed, reason) =
        ask(endpoint, "gemini", 5, fetch("direct", json!({"url": "http://169.254.169.254/latest"}))).await;
    assert!(!allowed && reason.contains("test.no-metadata"), "{reason}");

    // More URLs than Gemini CLI fetches is refused, saying why.
    let prompt: Vec<String> = (0..21).map(|i| format!("https://example.com/{i}")).collect();
    let (allowed, reason) = ask(endpoint, "gemini", 5, fetch("many", json!({ "prompt": prompt.join(" ") }))).await;
    assert!(!allowed && reason.contains("21 URLs") && reason.contains("20"), "{reason}");
    assert!(decisions_of(endpoint, "many").await.is_empty());
    monitor.server.stop().await.unwrap();
}
