//! Tests of the approval page: its pure parts, and its routes driven as a
//! browser would, with a software authenticator (`authenticator`), over a
//! `Monitor` on a temporary store and a clock the test moves.

use std::sync::atomic::{AtomicI64, Ordering};

use axum::body::Body;

use super::*;
use crate::auth::{CredentialConfig, Role, UserScope};
use crate::service::{Clock, MonitorConfig, Shutdown};

mod authenticator;
mod resolve;
mod signin;

use authenticator::Authenticator;

fn addr(text: &str) -> SocketAddr {
    text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
}

#[test]
fn plain_http_is_loopback_only_and_https_needs_tls() {
    let origin =
        |a: &str, configured: Option<&str>, tls: bool| origin_for(addr(a), configured, tls).map(|u| u.to_string());
    assert_eq!(origin("127.0.0.1:8443", None, false).as_deref(), Ok("http://localhost:8443/"));
    assert_eq!(origin("[::1]:8443", None, false).as_deref(), Ok("http://localhost:8443/"));
    for (a, configured, tls, why) in [
        ("0.0.0.0:8443", None, false, "localhost only"),
        ("0.0.0.0:8443", Some("http://localhost:8443"), false, "localhost only"),
        ("127.0.0.1:8443", Some("https://warden.example.com"), false, "no tls_cert"),
        ("0.0.0.0:8443", None, true, "needs web_origin"),
        ("0.0.0.0:8443", Some("http://warden.example.com"), true, "https on a DNS name"),
        ("0.0.0.0:8443", Some("http://localhost:8443"), true, "https on a DNS name"),
        ("127.0.0.2:8443", None, false, "127.0.0.1 or [::1]"),
        ("127.0.0.1:8443", Some("http://localhost:9999"), false, "another port"),
        ("0.0.0.0:8443", Some("https://warden.example.com/approvals"), true, "only scheme, host and port"),
    ] {
        let error = origin(a, configured, tls).expect_err(a);
        assert!(error.contains(why), "{a} {configured:?} {tls}: {error}");
    }
    assert_eq!(
        origin("0.0.0.0:8443", Some("https://warden.example.com:8443"), true).as_deref(),
        Ok("https://warden.example.com:8443/")
    );
}

#[test]
fn what_an_agent_wrote_is_shown_with_its_hidden_characters_escaped() {
    let mut value =
        json!({ "why": "fine \u{202e}txt.exe", "argv": ["a\u{2066}b", "c\u{7}"], "n": 1, "lines": "a\nb\tc" });
    visible(&mut value);
    assert_eq!(
        value,
        json!({ "why": "fine \\u{202e}txt.exe", "argv": ["a\\u{2066}b", "c\\u{7}"], "n": 1, "lines": "a\nb\tc" })
    );
}

const ORIGIN: &str = "http://localhost:8080";

/// A policy that holds `deploy production` for an approver of `ops` at a
/// passkey, as in the browser test.
const POLICIES: &str = r#"
@id("deploy.allowed") permit (principal, action == Action::"exec", resource in Program::"deploy");
@id("deploy.production") @reason("production needs a person at a passkey")
@approval("passkey") @approvers("ops")
forbid (principal, action == Action::"exec", resource in Program::"deploy")
when { resource.args.contains("production") } unless { context.approved };
"#;

/// A signed-in tab: the cookie and the CSRF token.
#[derive(Clone)]
struct Tab {
    cookie: String,
    csrf: String,
}

struct Fixture {
    monitor: Arc<Monitor>,
    credentials: Arc<Credentials>,
    router: axum::Router,
    offset_ns: Arc<AtomicI64>,
    _closer: crate::store::StoreCloser,
    _dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let bundled = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies");
        let policies = dir.path().join("policies");
        std::fs::create_dir(&policies).unwrap();
        for name in ["schema.cedarschema", "entities.json"] {
            std::fs::copy(bundled.join(name), policies.join(name)).unwrap();
        }
        std::fs::write(policies.join("deploy.cedar"), POLICIES).unwrap();
        let snapshot = crate::policy::PolicySnapshot::load(&policies).unwrap();
        let (store, closer) = crate::store::Embedded::open_with(
            &dir.path().join("store"),
            crate::store::Durability::Flush,
            crate::store::log::DEFAULT_SEGMENT_BYTES,
        )
        .unwrap();
        let offset_ns = Arc::new(AtomicI64::new(0));
        let clock: Clock = {
            let offset_ns = Arc::clone(&offset_ns);
            Arc::new(move || {
                time::OffsetDateTime::now_utc() + time::Duration::nanoseconds(offset_ns.load(Ordering::SeqCst))
            })
        };
        let config = MonitorConfig { policy_dir: policies, clock, ..MonitorConfig::default() };
        let (_stop, shutdown) = Shutdown::new();
        let data = dir.path().join("data");
        std::fs::create_dir(&data).unwrap();
        let book = Book::open(&data).unwrap();
        let monitor = Arc::new(Monitor::new(snapshot, store, config, shutdown).unwrap().with_passkeys(book));
        let origin = Url::parse(ORIGIN).unwrap();
        monitor.passkeys().serve_at(&origin).unwrap();
        let approver = |name: &str, group: &str| CredentialConfig {
            groups: vec![group.to_owned()],
            ..CredentialConfig::for_token(name, Role::Approver, &format!("wdn_{name}"), &[])
        };
        let credentials =
            Arc::new(Credentials::new(&[approver("ops", "ops"), approver("release", "release-managers")]).unwrap());
        let router = router(&monitor, Arc::clone(&credentials), &origin);
        Self { monitor, credentials, router, offset_ns, _closer: closer, _dir: dir }
    }

    fn advance(&self, by: std::time::Duration) {
        self.offset_ns.fetch_add(i64::try_from(by.as_nanos()).unwrap(), Ordering::SeqCst);
    }

    /// A request to the page from the page's origin, as `tab` when given:
    /// the status, the JSON answer and the headers.
    async fn call(
        &self,
        path: &str,
        body: Option<serde_json::Value>,
        tab: Option<&Tab>,
    ) -> (StatusCode, serde_json::Value, HeaderMap) {
        let mut request = http::Request::builder().uri(path).header(header::ORIGIN, ORIGIN);
        if let Some(tab) = tab {
            request = request.header(header::COOKIE, format!("{COOKIE}={}", tab.cookie)).header(CSRF_HEADER, &tab.csrf);
        }
        let request = match body {
            Some(body) => request
                .method("POST")
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(serde_json::to_vec(&body).unwrap())),
            None => request.method("GET").body(Body::empty()),
        }
        .unwrap();
        let response = tower::ServiceExt::oneshot(self.router.clone(), request).await.unwrap();
        let (parts, body) = response.into_parts();
        let bytes = axum::body::to_bytes(body, MAX_BODY).await.unwrap();
        let value = serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
        (parts.status, value, parts.headers)
    }

    /// Registers a passkey for approver `name` (of `group`) from an
    /// enrolment link: the answer of `/api/enroll/finish`.
    async fn register(
        &self,
        authenticator: &mut Authenticator,
        name: &str,
        group: &str,
    ) -> (StatusCode, serde_json::Value) {
        let link = self.monitor.passkeys().link(name, vec![group.to_owned()], "admin").unwrap();
        let token = Url::parse(&link).unwrap().fragment().unwrap().to_owned();
        let (status, started, _) = self.call("/api/enroll/start", Some(json!({ "token": token })), None).await;
        assert_eq!(status, StatusCode::OK, "{started}");
        let credential = authenticator.create(&started["options"]);
        let (status, done, _) =
            self.call("/api/enroll/finish", Some(json!({ "token": token, "credential": credential })), None).await;
        (status, done)
    }

    /// Registers and confirms (as the admin does) a passkey for `name`: its key id.
    async fn enrol(&self, authenticator: &mut Authenticator, name: &str, group: &str) -> String {
        let (status, done) = self.register(authenticator, name, group).await;
        assert_eq!(status, StatusCode::OK, "{done}");
        let key_id = done["key_id"].as_str().unwrap().to_owned();
        self.monitor.passkeys().confirm(name, &key_id, crate::service::unix_ns(self.monitor.now())).unwrap();
        key_id
    }

    /// Signs in with the authenticator's credential `which`: the answer,
    /// and the tab when signed in.
    async fn sign_in(
        &self,
        authenticator: &mut Authenticator,
        which: usize,
    ) -> (StatusCode, serde_json::Value, Option<Tab>) {
        let (status, started, _) = self.call("/api/signin/start", Some(json!({})), None).await;
        assert_eq!(status, StatusCode::OK, "{started}");
        let credential = authenticator.get(&started["options"], which);
        self.finish_sign_in(credential).await
    }

    async fn finish_sign_in(&self, credential: serde_json::Value) -> (StatusCode, serde_json::Value, Option<Tab>) {
        let (status, done, headers) =
            self.call("/api/signin/finish", Some(json!({ "credential": credential })), None).await;
        let tab = headers.get(header::SET_COOKIE).map(|set| {
            let set = set.to_str().unwrap();
            let cookie = set.split(';').next().unwrap().split_once('=').unwrap().1.to_owned();
            Tab { cookie, csrf: done["csrf"].as_str().unwrap().to_owned() }
        });
        (status, done, tab)
    }

    /// Has the harness ask to run `argv`: the decision.
    async fn ask(&self, argv: &[&str]) -> crate::model::DecisionRecord {
        let harness = crate::auth::Caller {
            name: "harness".into(),
            role: Role::Harness,
            users: UserScope::All,
            groups: UserScope::All,
            rate: None,
        };
        let input = crate::normalize::RequestInput {
            request_id: String::new(),
            actor: crate::normalize::Actor { user: "alice".into(), agent: "claude-code".into(), session: "s1".into() },
            action: "exec".into(),
            resource: crate::normalize::ResourceInput::Command {
                argv: argv.iter().map(|a| (*a).to_owned()).collect(),
                cwd: "/home/alice".into(),
            },
            justification: String::new(),
            context_json: String::new(),
        };
        self.monitor.authorize(&harness, input).await.unwrap()
    }
}
