//! The approval page (`wardend --web ADDR`): approvers enrol a passkey from
//! a single-use link, sign in with it, see what waits, and approve or deny
//! one approval with an assertion bound to it (see `passkeys`).
//!
//! Every state change is a JSON POST whose `Origin` must be the page's own;
//! once signed in it also carries the sign-in's CSRF token in a header. The
//! sign-in cookie is `Secure`, `HttpOnly` and `SameSite=Strict`. The page
//! loads nothing from elsewhere, and its Content-Security-Policy says so.

use std::net::SocketAddr;
use std::sync::{Arc, Weak};

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::json;
use webauthn_rs::prelude::{PublicKeyCredential, RegisterPublicKeyCredential, Url};

use crate::auth::Credentials;
use crate::model::{ApprovalRecord, ApprovalState};
use crate::passkeys::{Binding, Book, PasskeyError, constant_time_eq};
use crate::service::{CallError, Monitor, Resolution, unix_ns};

const COOKIE: &str = "warden_session";
/// The largest request body taken.
const MAX_BODY: usize = 64 * 1024;
const CSRF_HEADER: &str = "x-warden-csrf";
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; \
                   base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

const INDEX: &str = include_str!("index.html");
const ENROLL: &str = include_str!("enroll.html");
const SCRIPT: &str = include_str!("app.js");
const STYLE: &str = include_str!("app.css");

/// What the page's handlers share.
#[derive(Clone)]
struct Page {
    monitor: Weak<Monitor>,
    book: Arc<Book>,
    credentials: Arc<Credentials>,
    origin: String,
}

/// The origin the page is reached at: `configured`, else
/// `http://localhost:PORT` for a loopback listener.
/// Plain HTTP only on loopback, at `http://localhost`; HTTPS only with TLS.
pub(crate) fn origin_for(addr: SocketAddr, configured: Option<&str>, tls: bool) -> Result<Url, String> {
    // `localhost` is 127.0.0.1 and ::1, and nothing else: the page holds
    // the port on both (see `RunningServer::serve_web`).
    let plain_on_loopback = || {
        let localhost = addr.ip() == std::net::Ipv4Addr::LOCALHOST || addr.ip() == std::net::Ipv6Addr::LOCALHOST;
        if localhost {
            Ok(())
        } else {
            Err(format!(
                "--web {addr}: plaintext serves http://localhost only, on 127.0.0.1 or [::1]; configure tls_cert and tls_key"
            ))
        }
    };
    let Some(text) = configured else {
        if tls {
            return Err(
                "the approval page over TLS needs web_origin: the https URL (a DNS name) the approvers open".into()
            );
        }
        plain_on_loopback()?;
        return Url::parse(&format!("http://localhost:{}", addr.port())).map_err(|e| e.to_string());
    };
    let url = Url::parse(text).map_err(|e| format!("web_origin `{text}`: {e}"))?;
    if url.path() != "/" || url.query().is_some() || url.fragment().is_some() || !url.username().is_empty() {
        return Err(format!("web_origin `{text}`: give only scheme, host and port"));
    }
    match (url.scheme(), url.host_str()) {
        ("https", Some(_)) if tls => Ok(url),
        ("https", _) => Err(format!("web_origin `{text}` is https, but no tls_cert and tls_key are configured")),
        ("http", Some("localhost")) if !tls => {
            plain_on_loopback()?;
            // Links and the relying party name this port: it must be ours.
            if url.port_or_known_default() != Some(addr.port()) {
                return Err(format!("web_origin `{text}` names another port than --web {addr}"));
            }
            Ok(url)
        }
        _ => Err(format!("web_origin `{text}`: passkeys need https on a DNS name (or http://localhost without TLS)")),
    }
}

/// The TLS configuration of the page: the gRPC listener's certificate and
/// key (HTTP/1.1; no client certificates).
pub(crate) fn tls_config(pem: &crate::config::TlsPem) -> Result<Arc<tokio_rustls::rustls::ServerConfig>, String> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_slice_iter(pem.cert.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("the TLS certificate: {e}"))?;
    let key = PrivateKeyDer::from_pem_slice(pem.key.as_bytes()).map_err(|e| format!("the TLS key: {e}"))?;
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let mut config = tokio_rustls::rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|b| b.with_no_client_auth().with_single_cert(certs, key))
        .map_err(|e| format!("the approval page's TLS: {e}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The page's routes.
pub(crate) fn router(monitor: &Arc<Monitor>, credentials: Arc<Credentials>, origin: &Url) -> axum::Router {
    let page = Page {
        monitor: Arc::downgrade(monitor),
        book: monitor.passkeys(),
        credentials,
        origin: origin.origin().ascii_serialization(),
    };
    axum::Router::new()
        .route("/", get(|| async { asset("text/html; charset=utf-8", INDEX) }))
        .route("/enroll", get(|| async { asset("text/html; charset=utf-8", ENROLL) }))
        .route("/app.js", get(|| async { asset("text/javascript; charset=utf-8", SCRIPT) }))
        .route("/app.css", get(|| async { asset("text/css; charset=utf-8", STYLE) }))
        .route("/api/enroll/start", post(enroll_start))
        .route("/api/enroll/finish", post(enroll_finish))
        .route("/api/signin/start", post(sign_in_start))
        .route("/api/signin/finish", post(sign_in_finish))
        .route("/api/signout", post(sign_out))
        .route("/api/me", get(me))
        .route("/api/approvals", get(list))
        .route("/api/approvals/{id}/start", post(resolve_start))
        .route("/api/approvals/{id}/finish", post(resolve_finish))
        .layer(axum::middleware::map_response(secure_headers))
        // A passkey assertion is a few KiB: nothing here needs more.
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY))
        .with_state(page)
}

async fn secure_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    // A page that opened this one keeps no handle on it.
    headers.insert("cross-origin-opener-policy", HeaderValue::from_static("same-origin"));
    response
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

/// An answer the page shows: `{"error": …}` with a status.
struct Refusal(StatusCode, String);

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        (self.0, Json(json!({ "error": self.1 }))).into_response()
    }
}

impl From<PasskeyError> for Refusal {
    fn from(error: PasskeyError) -> Self {
        let status = match &error {
            PasskeyError::Gone(_) => StatusCode::UNAUTHORIZED,
            PasskeyError::Refused(_) => StatusCode::FORBIDDEN,
            PasskeyError::Unavailable(_) | PasskeyError::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
        };
        Refusal(status, error.to_string())
    }
}

impl From<CallError> for Refusal {
    fn from(error: CallError) -> Self {
        let status = match &error {
            CallError::NotFound(_) => StatusCode::NOT_FOUND,
            CallError::PermissionDenied(_) => StatusCode::FORBIDDEN,
            CallError::FailedPrecondition(_) => StatusCode::CONFLICT,
            CallError::InvalidArgument(_) => StatusCode::BAD_REQUEST,
            _ => StatusCode::SERVICE_UNAVAILABLE,
        };
        Refusal(status, error.to_string())
    }
}

type Answer = Result<Response, Refusal>;

impl Page {
    fn monitor(&self) -> Result<Arc<Monitor>, Refusal> {
        self.monitor.upgrade().ok_or_else(|| Refusal(StatusCode::SERVICE_UNAVAILABLE, "the monitor is stopping".into()))
    }

    /// A state change must come from the page itself.
    fn same_origin(&self, headers: &HeaderMap) -> Result<(), Refusal> {
        match headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) {
            Some(origin) if origin == self.origin => Ok(()),
            other => Err(Refusal(
                StatusCode::FORBIDDEN,
                format!("refused: a request from origin {other:?} is not from the approval page ({})", self.origin),
            )),
        }
    }

    /// The signed-in approver's cookie value, with the sign-in's CSRF token
    /// in its header: on every call, reads too, since a cookie reaches every
    /// port of localhost while the token lives in this origin's session
    /// storage only. A state change (`change`) must also come from the
    /// page's origin.
    fn session(&self, headers: &HeaderMap, change: bool) -> Result<(String, crate::passkeys::SignedIn), Refusal> {
        let cookie =
            cookie(headers).ok_or_else(|| Refusal(StatusCode::UNAUTHORIZED, "sign in with your passkey".into()))?;
        let signed_in = self.book.signed_in(&cookie)?;
        if change {
            self.same_origin(headers)?;
        }
        let sent = headers.get(CSRF_HEADER).and_then(|v| v.to_str().ok()).unwrap_or_default();
        if !constant_time_eq(sent.as_bytes(), signed_in.csrf.as_bytes()) {
            return Err(Refusal(
                StatusCode::UNAUTHORIZED,
                "sign in with your passkey (this tab holds no sign-in)".into(),
            ));
        }
        Ok((cookie, signed_in))
    }
}

fn cookie(headers: &HeaderMap) -> Option<String> {
    headers.get_all(header::COOKIE).iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(';')).find_map(|pair| {
        let (name, value) = pair.trim().split_once('=')?;
        (name == COOKIE && !value.is_empty()).then(|| value.to_owned())
    })
}

#[derive(Deserialize)]
struct EnrollStart {
    token: String,
}

async fn enroll_start(State(page): State<Page>, headers: HeaderMap, Json(body): Json<EnrollStart>) -> Answer {
    page.same_origin(&headers)?;
    let (name, options) = page.book.start_enrolment(&body.token)?;
    Ok(Json(json!({ "name": name, "options": options })).into_response())
}

#[derive(Deserialize)]
struct EnrollFinish {
    token: String,
    credential: RegisterPublicKeyCredential,
}

async fn enroll_finish(State(page): State<Page>, headers: HeaderMap, Json(body): Json<EnrollFinish>) -> Answer {
    page.same_origin(&headers)?;
    let monitor = page.monitor()?;
    let now = unix_ns(monitor.now());
    let book = Arc::clone(&page.book);
    let enrolled = blocking(move || book.finish_enrolment(&body.token, &body.credential, now)).await?;
    // Inert until an admin confirms it, so a failed record leaves nothing usable.
    monitor.audit_passkey("approver.enrolled", &enrolled.enrolled_by, &enrolled.name, &enrolled.key_id()).await?;
    tracing::info!(approver = %enrolled.name, key = %enrolled.key_id(), "passkey enrolled, waiting for an admin to confirm it");
    Ok(Json(json!({ "name": enrolled.name, "key_id": enrolled.key_id() })).into_response())
}

async fn sign_in_start(State(page): State<Page>, headers: HeaderMap) -> Answer {
    page.same_origin(&headers)?;
    let options = page.book.start_sign_in()?;
    Ok(Json(json!({ "options": options })).into_response())
}

#[derive(Deserialize)]
struct SignIn {
    credential: PublicKeyCredential,
}

#[derive(Deserialize)]
struct Assertion {
    ceremony: String,
    credential: PublicKeyCredential,
    #[serde(default)]
    note: String,
}

/// Runs `work` (which may write `passkeys.json`) off the async workers.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, PasskeyError> + Send + 'static,
) -> Result<T, Refusal> {
    match tokio::task::spawn_blocking(work).await {
        Ok(done) => done.map_err(Refusal::from),
        Err(e) => Err(Refusal(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())),
    }
}

async fn sign_in_finish(State(page): State<Page>, headers: HeaderMap, Json(body): Json<SignIn>) -> Answer {
    page.same_origin(&headers)?;
    let monitor = page.monitor()?;
    let now = unix_ns(monitor.now());
    let book = Arc::clone(&page.book);
    let (cookie, signed_in) = blocking(move || book.finish_sign_in(&body.credential, now)).await?;
    monitor.audit_passkey("approver.signed-in", &signed_in.name, &signed_in.name, &signed_in.key_id).await?;
    let set = format!(
        "{COOKIE}={cookie}; Path=/; HttpOnly; Secure; SameSite=Strict; Max-Age={}",
        crate::passkeys::SIGN_IN_VALID.as_secs()
    );
    let mut response = Json(json!({ "name": signed_in.name, "csrf": signed_in.csrf })).into_response();
    response.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_str(&set).map_err(|e| Refusal(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?,
    );
    Ok(response)
}

async fn sign_out(State(page): State<Page>, headers: HeaderMap) -> Answer {
    let (cookie, _) = page.session(&headers, true)?;
    page.book.sign_out(&cookie);
    let mut response = Json(json!({})).into_response();
    let expired = format!("{COOKIE}=; Path=/; HttpOnly; Secure; SameSite=Strict; Max-Age=0");
    if let Ok(value) = HeaderValue::from_str(&expired) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    Ok(response)
}

async fn me(State(page): State<Page>, headers: HeaderMap) -> Answer {
    let (_, signed_in) = page.session(&headers, false)?;
    Ok(Json(json!({ "name": signed_in.name, "key_id": signed_in.key_id })).into_response())
}

/// An approval as the page shows it: what `approvals list` and the
/// notification show, with the request as sent (every part of a command).
fn shown(approval: &ApprovalRecord) -> serde_json::Value {
    let mut value = json!({
        "approval_id": approval.approval_id,
        "action": approval.request.action,
        "resource": approval.request.resource.uid(),
        "actor": approval.request.actor,
        "justification": approval.request.justification,
        // Exactly what would run, and what in it looks like a credential.
        "request": approval.input,
        "credentials": approval.input.credentials(),
        "policy_ids": approval.policy_ids,
        "reasons": approval.reasons,
        "approvers": approval.approvers,
        "passkey_policies": approval.passkey_policies,
        "harness": approval.harness,
        "request_hash": approval.request_hash,
        "created_at": crate::service::format_time(approval.created_unix_ns),
        "expires_at": crate::service::format_time(approval.expires_unix_ns),
    });
    visible(&mut value);
    value
}

/// What an agent wrote cannot reorder or hide what the approver reads:
/// control characters, bidirectional overrides and invisible marks in every
/// string are shown as `\u{…}`, as wardenctl shows them.
fn visible(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::String(text) if text.chars().any(hidden) => {
            *text = text
                .chars()
                .map(|c| if hidden(c) { format!("\\u{{{:x}}}", u32::from(c)) } else { c.to_string() })
                .collect();
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(visible),
        serde_json::Value::Object(fields) => fields.values_mut().for_each(visible),
        _ => {}
    }
}

fn hidden(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(
            c,
            // Format characters: soft hyphen, joiners, marks, overrides, isolates.
            '\u{ad}' | '\u{34f}' | '\u{61c}' | '\u{180e}' | '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}'
            | '\u{2060}'..='\u{206f}' | '\u{feff}' | '\u{fff9}'..='\u{fffb}'
            // Fillers that print as nothing.
            | '\u{115f}' | '\u{1160}' | '\u{3164}' | '\u{ffa0}'
            // Variation selectors, tags, shorthand and musical format controls.
            | '\u{fe00}'..='\u{fe0f}' | '\u{e0000}'..='\u{e007f}' | '\u{e0100}'..='\u{e01ef}'
            | '\u{1bca0}'..='\u{1bca3}' | '\u{1d173}'..='\u{1d17a}'
            // Private use.
            | '\u{e000}'..='\u{f8ff}' | '\u{f0000}'..='\u{10ffff}'
        )
}

async fn list(State(page): State<Page>, headers: HeaderMap) -> Answer {
    page.session(&headers, false)?;
    let monitor = page.monitor()?;
    let pending: Vec<serde_json::Value> = monitor.list_pending().await?.iter().map(shown).collect();
    Ok(Json(json!({ "approvals": pending })).into_response())
}

/// An approval that no longer waits (resolved, or past its deadline while
/// the sweeper has yet to mark it) is refused as a conflict, naming how it
/// ended, before any challenge is bound to it. (A ceremony's finish is
/// refused the same way by `Monitor::resolve`, which checks under its lock.)
fn still_pending(approval: &ApprovalRecord, now_unix_ns: i64) -> Result<(), Refusal> {
    let how = match approval.state {
        ApprovalState::Pending if now_unix_ns < approval.expires_unix_ns => return Ok(()),
        ApprovalState::Pending | ApprovalState::Expired => {
            format!("it expired at {}", crate::service::format_time(approval.expires_unix_ns))
        }
        ApprovalState::Approved => format!("it was approved by `{}`", approval.resolved_by),
        ApprovalState::Denied => format!("it was denied by `{}`", approval.resolved_by),
    };
    Err(Refusal(StatusCode::CONFLICT, format!("approval `{}` is no longer pending: {how}", approval.approval_id)))
}

#[derive(Deserialize)]
struct ResolveStart {
    approve: bool,
}

async fn resolve_start(
    State(page): State<Page>,
    Path(id): Path<String>,
    headers: HeaderMap,
    Json(body): Json<ResolveStart>,
) -> Answer {
    let (cookie, _) = page.session(&headers, true)?;
    let monitor = page.monitor()?;
    let approval = monitor.approval(&id).await?;
    // No challenge for an approval that no longer waits.
    still_pending(&approval, unix_ns(monitor.now()))?;
    // Bound to the request as it is stored now: the hash is checked again
    // when the approval is resolved.
    let binding = Binding {
        approval_id: approval.approval_id.clone(),
        request_hash: approval.request_hash.clone(),
        approve: body.approve,
    };
    let (ceremony, options) = page.book.start_resolve(&cookie, binding)?;
    Ok(Json(json!({ "ceremony": ceremony, "options": options, "approval": shown(&approval) })).into_response())
}

async fn resolve_finish(
    State(page): State<Page>,
    Path(id): Path<String>,
    headers: HeaderMap,
    Json(body): Json<Assertion>,
) -> Answer {
    let (cookie, _) = page.session(&headers, true)?;
    let monitor = page.monitor()?;
    let now = unix_ns(monitor.now());
    let book = Arc::clone(&page.book);
    let (ceremony, credential) = (body.ceremony, body.credential);
    let (binding, enrolled) = blocking(move || book.finish_resolve(&cookie, &ceremony, &credential, now)).await?;
    if binding.approval_id != id {
        return Err(Refusal(
            StatusCode::FORBIDDEN,
            format!("this assertion was made for approval `{}`, not `{id}`", binding.approval_id),
        ));
    }
    // Revoked while the assertion was checked: it approves nothing.
    if !page.book.still_confirmed(&enrolled.key_id()) {
        return Err(Refusal(StatusCode::FORBIDDEN, "this passkey was revoked".into()));
    }
    let caller = page.credentials.approver(&enrolled.name).ok_or_else(|| {
        Refusal(
            StatusCode::FORBIDDEN,
            format!("approver credential `{}` no longer exists: its passkey approves nothing", enrolled.name),
        )
    })?;
    if !crate::auth::same_groups(&caller.groups, &enrolled.groups) {
        return Err(Refusal(
            StatusCode::FORBIDDEN,
            format!(
                "the groups of approver `{}` changed since its passkey was enrolled: enrol it again",
                enrolled.name
            ),
        ));
    }
    let resolution = Resolution {
        approval_id: binding.approval_id,
        approve: binding.approve,
        note: body.note,
        request_hash: binding.request_hash,
        passkey: Some(enrolled.key_id()),
        ..Resolution::default()
    };
    let resolved = monitor.resolve(&caller, resolution).await?;
    Ok(Json(json!({
        "approval_id": resolved.approval_id,
        "state": resolved.state.as_str(),
        "reasons": resolved.decision.reasons,
        "audit_seq": resolved.decision.audit_seq,
    }))
    .into_response())
}

// Linux's errno values for running out of descriptors, memory and buffers.
const EMFILE: i32 = 24;
const ENFILE: i32 = 23;
const ENOMEM: i32 = 12;
const ENOBUFS: i32 = 105;
/// A request (its body and the answer) must be done within this.
const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15);

/// Connections served at once; more wait in the kernel's backlog.
const MAX_CONNECTIONS: usize = 256;
/// A request's head must arrive within this (also between keep-alive requests).
const HEAD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// The TLS handshake must be done within this.
const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// No connection lives longer than this.
const CONNECTION_LIFETIME: std::time::Duration = std::time::Duration::from_secs(300);

/// Serves the page on `listeners` (plain: loopback only, checked by
/// [`origin_for`]; else TLS) until `stopped` resolves: at most
/// [`MAX_CONNECTIONS`] at once, each with timeouts for its handshake, its
/// request heads and its life.
pub(crate) async fn serve(
    listeners: Vec<tokio::net::TcpListener>,
    router: axum::Router,
    tls: Option<Arc<tokio_rustls::rustls::ServerConfig>>,
    stopped: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    let (stop, _) = tokio::sync::broadcast::channel::<()>(1);
    let mut tasks = Vec::new();
    for listener in listeners {
        let (slots, acceptor, router, mut stopping) =
            (Arc::clone(&slots), acceptor.clone(), router.clone(), stop.subscribe());
        tasks.push(tokio::spawn(async move {
            loop {
                let slot = tokio::select! {
                    _ = stopping.recv() => return,
                    slot = Arc::clone(&slots).acquire_owned() => match slot {
                        Ok(slot) => slot,
                        Err(_) => return,
                    },
                };
                let stream = tokio::select! {
                    _ = stopping.recv() => return,
                    accepted = listener.accept() => match accepted {
                        Ok((stream, _)) => stream,
                        Err(e) => {
                            // Out of file descriptors or memory: wait instead
                            // of spinning. A connection that went away: next.
                            if matches!(e.raw_os_error(), Some(EMFILE | ENFILE | ENOMEM | ENOBUFS)) {
                                tracing::warn!(error = %e, "the approval page cannot accept a connection");
                                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                            }
                            continue;
                        }
                    },
                };
                let (acceptor, router) = (acceptor.clone(), router.clone());
                tokio::spawn(async move {
                    let _slot = slot;
                    let _ = tokio::time::timeout(CONNECTION_LIFETIME, connection(stream, acceptor, router)).await;
                });
            }
        }));
    }
    stopped.await;
    let _ = stop.send(());
    for task in tasks {
        let _ = task.await;
    }
}

async fn connection(stream: tokio::net::TcpStream, acceptor: Option<tokio_rustls::TlsAcceptor>, router: axum::Router) {
    let service = hyper::service::service_fn(move |request: http::Request<hyper::body::Incoming>| {
        let answer = tower::ServiceExt::oneshot(router.clone(), request);
        async move {
            match tokio::time::timeout(REQUEST_TIMEOUT, answer).await {
                Ok(answer) => answer,
                Err(_) => Ok(Refusal(StatusCode::REQUEST_TIMEOUT, "the request took too long".into()).into_response()),
            }
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(hyper_util::rt::TokioTimer::new()).header_read_timeout(HEAD_TIMEOUT);
    match acceptor {
        None => {
            let _ = builder.serve_connection(hyper_util::rt::TokioIo::new(stream), service).await;
        }
        Some(acceptor) => {
            let Ok(Ok(stream)) = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await else {
                return;
            };
            let _ = builder.serve_connection(hyper_util::rt::TokioIo::new(stream), service).await;
        }
    }
}

#[cfg(test)]
mod tests;
