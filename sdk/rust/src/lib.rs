//! Fail-closed Rust client for harnesses that ask Warden before an agent acts.
//!
//! ```no_run
//! use warden_sdk::{ActionRequest, Actor, Client};
//!
//! # async fn run() -> Result<(), warden_sdk::Error> {
//! // WARDEN_ENDPOINT (default http://127.0.0.1:50051; several replicas separated
//! // by commas) and WARDEN_TOKEN or WARDEN_TOKEN_FILE.
//! let client = Client::from_env().await?;
//! let actor = Actor::new("alice", "claude-code", "session-1");
//!
//! // `check` is Ok only when the action is allowed: a denial, an approval
//! // that never came, a timeout or an unreachable monitor are all errors.
//! let allowed = client.check(&actor, ActionRequest::read_file("/home/alice/project/src/main.rs")).await?;
//! println!("allowed by {:?} (audit #{})", allowed.policy_ids, allowed.audit_seq);
//!
//! // `authorize` returns the decision as it is, PENDING included.
//! let decision = client.authorize(&actor, ActionRequest::exec(["git", "push", "origin", "main"])).await?;
//! println!("{:?}: {:?}", decision.outcome, decision.reasons);
//! # Ok(())
//! # }
//! ```

#![forbid(unsafe_code)]
#![deny(missing_docs)]

use std::time::{Duration, SystemTime};

use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};
use warden_proto::v1 as pb;
use warden_proto::v1::authority_client::AuthorityClient;

/// The generated proto types, for what this crate does not wrap.
pub use warden_proto::v1 as proto;

mod replicas;
pub use replicas::{EndpointList, Replicas, Resend};

/// Default endpoint when `WARDEN_ENDPOINT` is not set.
pub const DEFAULT_ENDPOINT: &str = "http://127.0.0.1:50051";

/// Everything that can go wrong. Only `Ok` from [`Client::check`] means
/// allowed; every error means the agent must not act.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The client is not configured (endpoint, token).
    #[error("configuration: {0}")]
    Config(String),
    /// The monitor cannot be reached.
    #[error("cannot reach the monitor: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// The monitor answered with an error status (bad input, bad token, unavailable).
    #[error("the monitor refused the call ({:?}): {}", .0.code(), .0.message())]
    Status(#[from] tonic::Status),
    /// The action is denied.
    #[error("denied: {}", .0.reasons.join("; "))]
    Denied(Box<Decision>),
    /// The action waited for a person and no approval came in time.
    #[error("not approved in time (approval {})", .0.approval_id)]
    NotApproved(Box<Decision>),
    /// The monitor's answer does not make sense.
    #[error("unexpected answer from the monitor: {0}")]
    Protocol(String),
}

impl Error {
    /// Whether the monitor may answer if asked again soon (it is
    /// restarting, or a call timed out); every other error is final.
    pub fn is_transient(&self) -> bool {
        matches!(self, Error::Status(status) if is_transient(status))
    }
}

/// ALLOW, DENY or PENDING.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The action may go ahead.
    Allow,
    /// The action must not happen.
    Deny,
    /// The action waits for a person's approval.
    Pending,
}

/// The monitor's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The request's idempotency key.
    pub request_id: String,
    /// ALLOW, DENY or PENDING.
    pub outcome: Outcome,
    /// The determining policies' ids.
    pub policy_ids: Vec<String>,
    /// Their reasons, and the monitor's.
    pub reasons: Vec<String>,
    /// The approval to wait for, when PENDING.
    pub approval_id: String,
    /// When the approval expires.
    pub expires_at: Option<SystemTime>,
    /// Grants that contributed.
    pub grant_ids: Vec<String>,
    /// The policy version that decided.
    pub policy_version: String,
    /// The decision's audit record.
    pub audit_seq: u64,
    /// Who resolved the approval.
    pub resolved_by: String,
    /// The approver's note.
    pub note: String,
    /// The session labels this answer gave (its ALLOW's policies'
    /// `@label`); none on a replay.
    pub labels: Vec<String>,
}

fn outcome_from_proto(value: i32) -> Result<Outcome, Error> {
    match pb::Outcome::try_from(value) {
        Ok(pb::Outcome::Allow) => Ok(Outcome::Allow),
        Ok(pb::Outcome::Deny) => Ok(Outcome::Deny),
        Ok(pb::Outcome::Pending) => Ok(Outcome::Pending),
        _ => Err(Error::Protocol(format!("outcome {value} is not ALLOW, DENY or PENDING"))),
    }
}

/// What [`Client::preview`] answers: what `Authorize` would answer now for
/// each resource, in the order asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preview {
    /// One per resource.
    pub outcomes: Vec<Outcome>,
    /// The policy version that decided.
    pub policy_version: String,
}

impl TryFrom<pb::Decision> for Decision {
    type Error = Error;

    fn try_from(d: pb::Decision) -> Result<Self, Error> {
        let outcome = outcome_from_proto(d.outcome)?;
        let expires_at = d.expires_at.and_then(|t| {
            let secs = u64::try_from(t.seconds).ok()?;
            let nanos = u32::try_from(t.nanos).ok()?;
            SystemTime::UNIX_EPOCH.checked_add(Duration::new(secs, nanos))
        });
        Ok(Self {
            request_id: d.request_id,
            outcome,
            policy_ids: d.policy_ids,
            reasons: d.reasons,
            approval_id: d.approval_id,
            expires_at,
            grant_ids: d.grant_ids,
            policy_version: d.policy_version,
            audit_seq: d.audit_seq,
            resolved_by: d.resolved_by,
            note: d.note,
            labels: d.labels,
        })
    }
}

impl From<Outcome> for pb::Outcome {
    fn from(outcome: Outcome) -> Self {
        match outcome {
            Outcome::Allow => pb::Outcome::Allow,
            Outcome::Deny => pb::Outcome::Deny,
            Outcome::Pending => pb::Outcome::Pending,
        }
    }
}

/// A decision as the proto says it (for a service that passes decisions
/// on, as `warden-run`'s door does).
impl From<Decision> for pb::Decision {
    fn from(d: Decision) -> Self {
        let expires_at = d.expires_at.and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok()).map(|since| {
            prost_types::Timestamp {
                seconds: i64::try_from(since.as_secs()).unwrap_or(i64::MAX),
                nanos: i32::try_from(since.subsec_nanos()).unwrap_or(0),
            }
        });
        Self {
            request_id: d.request_id,
            outcome: pb::Outcome::from(d.outcome) as i32,
            policy_ids: d.policy_ids,
            reasons: d.reasons,
            approval_id: d.approval_id,
            expires_at,
            grant_ids: d.grant_ids,
            policy_version: d.policy_version,
            audit_seq: d.audit_seq,
            resolved_by: d.resolved_by,
            note: d.note,
            labels: d.labels,
        }
    }
}

/// Who is acting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor {
    /// The human user.
    pub user: String,
    /// The kind of agent, e.g. `claude-code`.
    pub agent: String,
    /// The agent's session.
    pub session: String,
}

impl Actor {
    /// An actor.
    pub fn new(user: impl Into<String>, agent: impl Into<String>, session: impl Into<String>) -> Self {
        Self { user: user.into(), agent: agent.into(), session: session.into() }
    }
}

/// One action to ask about. Each carries a fresh request id, so asking again
/// with the same value (after a lost answer) never records it twice.
#[derive(Debug, Clone, PartialEq)]
pub struct ActionRequest {
    action: String,
    resource: pb::authorize_request::Resource,
    justification: String,
    context_json: String,
    request_id: String,
}

impl ActionRequest {
    /// Any action on any resource kind, e.g. an action of a custom schema.
    pub fn new(action: impl Into<String>, resource: pb::authorize_request::Resource) -> Self {
        Self {
            action: action.into(),
            resource,
            justification: String::new(),
            context_json: String::new(),
            request_id: format!("sdk-{}", uuid::Uuid::new_v4()),
        }
    }

    fn file(action: &str, path: impl Into<String>) -> Self {
        Self::new(
            action,
            pb::authorize_request::Resource::File(pb::FileResource {
                path: path.into(),
                cwd: String::new(),
                pattern: false,
            }),
        )
    }

    /// `fs.read` of every file a pattern of names can match (`/w/**/*.rs`,
    /// `/w/**/*`): what a recursive search reads, decided as
    /// `File.pattern`, so that rules about hidden and credential files apply.
    pub fn read_pattern(pattern: impl Into<String>) -> Self {
        Self::new(
            "fs.read",
            pb::authorize_request::Resource::File(pb::FileResource {
                path: pattern.into(),
                cwd: String::new(),
                pattern: true,
            }),
        )
    }

    /// `fs.read` of a file.
    pub fn read_file(path: impl Into<String>) -> Self {
        Self::file("fs.read", path)
    }

    /// `fs.write` of a file.
    pub fn write_file(path: impl Into<String>) -> Self {
        Self::file("fs.write", path)
    }

    /// `fs.delete` of a file.
    pub fn delete_file(path: impl Into<String>) -> Self {
        Self::file("fs.delete", path)
    }

    /// `exec` of a command line; argv[0] names the program.
    pub fn exec<S: Into<String>>(argv: impl IntoIterator<Item = S>) -> Self {
        Self::new(
            "exec",
            pb::authorize_request::Resource::Command(pb::CommandResource {
                argv: argv.into_iter().map(Into::into).collect(),
                cwd: String::new(),
            }),
        )
    }

    /// `http.request` with a method and URL.
    pub fn http(method: impl Into<String>, url: impl Into<String>) -> Self {
        Self::new(
            "http.request",
            pb::authorize_request::Resource::Http(pb::HttpResource { method: method.into(), url: url.into() }),
        )
    }

    /// `secret.use` of a named secret.
    pub fn use_secret(name: impl Into<String>) -> Self {
        Self::new("secret.use", pb::authorize_request::Resource::Secret(pb::SecretResource { name: name.into() }))
    }

    /// `tool.call` of an MCP tool with JSON arguments (may be empty).
    pub fn call_tool(server: impl Into<String>, name: impl Into<String>, arguments_json: impl Into<String>) -> Self {
        Self::new(
            "tool.call",
            pb::authorize_request::Resource::Tool(pb::ToolResource {
                server: server.into(),
                name: name.into(),
                arguments_json: arguments_json.into(),
            }),
        )
    }

    /// The working directory, for relative file paths and commands.
    pub fn cwd(mut self, cwd: impl Into<String>) -> Self {
        match &mut self.resource {
            pb::authorize_request::Resource::File(f) => f.cwd = cwd.into(),
            pb::authorize_request::Resource::Command(c) => c.cwd = cwd.into(),
            _ => {}
        }
        self
    }

    /// Why the agent wants to act; shown to approvers.
    pub fn justification(mut self, text: impl Into<String>) -> Self {
        self.justification = text.into();
        self
    }

    /// Extra context fields declared in the policy schema, as a JSON object.
    pub fn context_json(mut self, json: impl Into<String>) -> Self {
        self.context_json = json.into();
        self
    }

    /// Replaces the generated request id (the idempotency key). An empty
    /// id keeps the generated one: every request carries an id, so that
    /// asking again (the same replica after a lost answer, or the next
    /// replica) is the same decision.
    pub fn request_id(mut self, id: impl Into<String>) -> Self {
        let id = id.into();
        if !id.is_empty() {
            self.request_id = id;
        }
        self
    }

    /// The request as a proto message with no actor (for tools that send it
    /// themselves, like `wardenctl authorize --explain`).
    pub fn into_proto_request(self) -> pb::AuthorizeRequest {
        pb::AuthorizeRequest {
            request_id: self.request_id,
            actor: None,
            action: self.action,
            resource: Some(self.resource),
            justification: self.justification,
            context_json: self.context_json,
        }
    }

    fn to_proto(&self, actor: &Actor) -> pb::AuthorizeRequest {
        pb::AuthorizeRequest {
            request_id: self.request_id.clone(),
            actor: Some(pb::Actor {
                user: actor.user.clone(),
                agent: actor.agent.clone(),
                session: actor.session.clone(),
            }),
            action: self.action.clone(),
            resource: Some(self.resource.clone()),
            justification: self.justification.clone(),
            context_json: self.context_json.clone(),
        }
    }
}

/// Adds `authorization: Bearer <token>` to every call.
#[derive(Clone)]
pub struct BearerToken(MetadataValue<Ascii>);

impl BearerToken {
    /// The header value for `token`.
    pub fn new(token: &str) -> Result<Self, Error> {
        let token = token.trim();
        if token.is_empty() {
            return Err(Error::Config("the token is empty".into()));
        }
        format!("Bearer {token}")
            .parse()
            .map(Self)
            .map_err(|_| Error::Config("the token has characters that cannot be sent".into()))
    }
}

impl Interceptor for BearerToken {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        request.metadata_mut().insert("authorization", self.0.clone());
        Ok(request)
    }
}

/// How long [`Client::authorize`] keeps trying when the monitor is briefly
/// unreachable, by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long after an approval's deadline `check` waits for the monitor's
/// final DENY before it gives up by itself.
const EXPIRY_GRACE: Duration = Duration::from_secs(2);

/// The connection to one endpoint of a list: `unix:PATH` is the monitor's
/// Unix socket; `https://` is TLS, trusted by the CA in the PEM file that
/// `WARDEN_CA_CERT` names (then by it alone), as for every Warden client, or
/// else by the system's CA store. An unreadable CA file, or a system without
/// CAs, fails here, closed.
fn endpoint_of(endpoint: &str) -> Result<Endpoint, Error> {
    let ca_cert = std::env::var_os("WARDEN_CA_CERT");
    plaintext_without_tls_files(endpoint, ca_cert.is_some())?;
    if let Some(path) = endpoint.strip_prefix("unix:") {
        return unix_endpoint(endpoint, path);
    }
    let mut built = Endpoint::from_shared(endpoint.to_owned())
        .map_err(|e| Error::Config(format!("endpoint `{endpoint}`: {e}")))?
        .connect_timeout(Duration::from_secs(5));
    if endpoint.starts_with("https://") {
        let tls = tonic::transport::ClientTlsConfig::new();
        let tls = match ca_cert {
            Some(path) => {
                let pem = std::fs::read_to_string(&path).map_err(|e| {
                    Error::Config(format!("WARDEN_CA_CERT `{}`: {e}", std::path::Path::new(&path).display()))
                })?;
                tls.ca_certificate(tonic::transport::Certificate::from_pem(pem))
            }
            None => tls.with_native_roots(),
        };
        built = built.tls_config(tls).map_err(|e| Error::Config(format!("endpoint `{endpoint}`: TLS: {e}")))?;
    }
    Ok(built)
}

/// tonic's Unix-socket endpoint for the path after `unix:` (tonic reads
/// `unix://` as a prefix, so a path written `//x` is passed as `/x`, the
/// same file).
#[cfg(unix)]
fn unix_endpoint(endpoint: &str, path: &str) -> Result<Endpoint, Error> {
    let path = if path.starts_with("//") { format!("/{}", path.trim_start_matches('/')) } else { path.to_owned() };
    Endpoint::from_shared(format!("unix:{path}"))
        .map(|built| built.connect_timeout(Duration::from_secs(5)))
        .map_err(|e| Error::Config(format!("endpoint `{endpoint}`: {e}")))
}

/// Unix sockets exist only on Unix systems.
#[cfg(not(unix))]
fn unix_endpoint(endpoint: &str, _path: &str) -> Result<Endpoint, Error> {
    Err(Error::Config(format!("endpoint `{endpoint}`: Unix sockets need a Unix system")))
}

/// Each endpoint of `endpoint` (one, or several separated by commas), made
/// into a connection's settings; the first bad one is refused.
fn endpoints_of(endpoint: &str) -> Result<Vec<(String, Endpoint)>, Error> {
    EndpointList::parse(endpoint)?.iter().map(|entry| Ok((entry.to_owned(), endpoint_of(entry)?))).collect()
}

/// A CA named for an endpoint that is not `https://` is refused rather than
/// ignored: whoever named it meant TLS, and would otherwise send the token
/// in the clear (as the Python SDK and `wardenctl` refuse it).
fn plaintext_without_tls_files(endpoint: &str, ca_cert: bool) -> Result<(), Error> {
    if ca_cert && !endpoint.starts_with("https://") {
        return Err(Error::Config(format!(
            "endpoint `{endpoint}`: WARDEN_CA_CERT is set, but TLS is only for https:// endpoints; use https:// or \
             unset it"
        )));
    }
    Ok(())
}

/// A harness's connection to the monitor.
#[derive(Clone)]
pub struct Client {
    authority: AuthorityClient<InterceptedService<Replicas, BearerToken>>,
    timeout: Duration,
}

impl Client {
    /// Connects to `endpoint` (e.g. `http://127.0.0.1:50051`) with a harness token.
    ///
    /// `unix:/path/to/wardend.sock` (an absolute path) connects to the
    /// monitor's Unix socket (`wardend --socket`), where it also checks the
    /// caller's uid. `https://…` is TLS, trusted by the CA file that
    /// `WARDEN_CA_CERT` names, or else by the system's CAs.
    ///
    /// Several endpoints separated by commas are replicas of one monitor
    /// (see [`Replicas`]): this connects to the first that answers, and a
    /// call that fails because its replica is down is sent to the next with
    /// the same request id.
    pub async fn connect(endpoint: impl Into<String>, token: &str) -> Result<Self, Error> {
        let endpoints = endpoints_of(&endpoint.into())?;
        let token = BearerToken::new(token)?;
        Ok(Self::with_replicas(Replicas::connect(endpoints).await?, token))
    }

    /// Like [`Client::connect`], but connects at the first call, not now: a
    /// gate can start while the monitor is down, and refuses (fails closed)
    /// until it is up. A single Unix-socket endpoint connects now.
    pub async fn connect_lazy(endpoint: impl Into<String>, token: &str) -> Result<Self, Error> {
        let endpoint = endpoint.into();
        let endpoints = endpoints_of(&endpoint)?;
        if let [(only, _)] = endpoints.as_slice()
            && only.starts_with("unix:")
        {
            return Self::connect(endpoint, token).await;
        }
        let token = BearerToken::new(token)?;
        Ok(Self::with_replicas(Replicas::lazy(endpoints)?, token))
    }

    /// Uses an existing channel.
    pub fn with_channel(channel: Channel, token: BearerToken) -> Self {
        Self::with_replicas(Replicas::single("channel", channel), token)
    }

    /// Uses replicas connected already (as `wardenctl` makes them, with its
    /// own TLS settings).
    pub fn with_replicas(replicas: Replicas, token: BearerToken) -> Self {
        Self { authority: AuthorityClient::with_interceptor(replicas, token), timeout: DEFAULT_TIMEOUT }
    }

    /// Connects with `WARDEN_ENDPOINT` (default [`DEFAULT_ENDPOINT`]) and
    /// `WARDEN_TOKEN`, or `WARDEN_TOKEN_FILE` naming a file that holds it.
    pub async fn from_env() -> Result<Self, Error> {
        let endpoint = std::env::var("WARDEN_ENDPOINT").unwrap_or_else(|_| DEFAULT_ENDPOINT.to_owned());
        let token = match (std::env::var("WARDEN_TOKEN"), std::env::var("WARDEN_TOKEN_FILE")) {
            (Ok(token), _) => token,
            (Err(_), Ok(path)) => {
                read_token_file(&path).map_err(|e| Error::Config(format!("WARDEN_TOKEN_FILE: {e}")))?
            }
            _ => return Err(Error::Config("set WARDEN_TOKEN or WARDEN_TOKEN_FILE".into())),
        };
        Self::connect(endpoint, &token).await
    }

    /// How long `authorize` keeps retrying an unreachable monitor.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Asks for a decision and returns it as it is, PENDING included.
    /// Retries while the monitor is unavailable, up to the client's timeout;
    /// the request id makes the retries safe.
    pub async fn authorize(&self, actor: &Actor, request: ActionRequest) -> Result<Decision, Error> {
        let message = request.to_proto(actor);
        let deadline = tokio::time::Instant::now() + self.timeout;
        retrying(deadline, || {
            let mut authority = self.authority.clone();
            let message = message.clone();
            async move {
                let mut call = tonic::Request::new(message);
                call.set_timeout(self.timeout);
                authority.authorize(call).await
            }
        })
        .await
        .and_then(|response| Decision::try_from(response.into_inner()))
    }

    /// What `Authorize` would answer now for `actor` doing `action` on each
    /// resource, with no side effect on the monitor (no label, no approval,
    /// no idempotency record; one audit record for the call). For filtering
    /// what an agent is shown, never for letting an action through: a gate
    /// still calls `authorize` (or `check`) before the effect. Retries while
    /// the monitor is unavailable, like `authorize`.
    pub async fn preview(
        &self,
        actor: &Actor,
        action: impl Into<String>,
        resources: impl IntoIterator<Item = pb::resource::Kind>,
    ) -> Result<Preview, Error> {
        let message = pb::PreviewRequest {
            actor: Some(pb::Actor {
                user: actor.user.clone(),
                agent: actor.agent.clone(),
                session: actor.session.clone(),
            }),
            action: action.into(),
            resources: resources.into_iter().map(|kind| pb::Resource { kind: Some(kind) }).collect(),
        };
        let asked = message.resources.len();
        let deadline = tokio::time::Instant::now() + self.timeout;
        let response = retrying(deadline, || {
            let mut authority = self.authority.clone();
            let message = message.clone();
            async move {
                let mut call = tonic::Request::new(message);
                call.set_timeout(self.timeout);
                authority.preview(call).await
            }
        })
        .await?
        .into_inner();
        if response.outcomes.len() != asked {
            return Err(Error::Protocol(format!(
                "asked about {asked} resources and got {} outcomes",
                response.outcomes.len()
            )));
        }
        let outcomes = response.outcomes.into_iter().map(outcome_from_proto).collect::<Result<_, _>>()?;
        Ok(Preview { outcomes, policy_version: response.policy_version })
    }

    /// Waits up to `timeout` for an approval; returns the decision, still
    /// PENDING if nobody answered.
    pub async fn await_decision(&self, approval_id: &str, timeout: Duration) -> Result<Decision, Error> {
        let mut authority = self.authority.clone();
        let timeout_ms = u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX);
        let mut call =
            tonic::Request::new(pb::AwaitDecisionRequest { approval_id: approval_id.to_owned(), timeout_ms });
        call.set_timeout(timeout + Duration::from_secs(10));
        let response = authority.await_decision(call).await?;
        Decision::try_from(response.into_inner())
    }

    /// Fail-closed: `Ok` only when the action is allowed, after waiting
    /// through PENDING until the approval's deadline. A denial, an expired
    /// or unanswered approval, bad input, a bad token, a timeout or an
    /// unreachable monitor are all `Err`.
    pub async fn check(&self, actor: &Actor, request: ActionRequest) -> Result<Decision, Error> {
        let mut decision = self.authorize(actor, request).await?;
        loop {
            match decision.outcome {
                Outcome::Allow => return Ok(decision),
                Outcome::Deny => return Err(Error::Denied(Box::new(decision))),
                Outcome::Pending => {}
            }
            if decision.approval_id.is_empty() {
                return Err(Error::Protocol("PENDING without an approval id".into()));
            }
            // Past the deadline the monitor denies; give it a moment to say
            // so (with its reason) before giving up on our own.
            let remaining = decision
                .expires_at
                .and_then(|at| (at + EXPIRY_GRACE).duration_since(SystemTime::now()).ok())
                .unwrap_or_default();
            if remaining.is_zero() {
                return Err(Error::NotApproved(Box::new(decision)));
            }
            let wait = remaining.min(Duration::from_secs(30));
            let deadline = tokio::time::Instant::now() + wait + Duration::from_secs(5);
            let approval_id = decision.approval_id.clone();
            let next = retrying(deadline, || {
                let mut authority = self.authority.clone();
                let approval_id = approval_id.clone();
                async move {
                    let timeout_ms = u32::try_from(wait.as_millis()).unwrap_or(u32::MAX);
                    let mut call = tonic::Request::new(pb::AwaitDecisionRequest { approval_id, timeout_ms });
                    call.set_timeout(wait + Duration::from_secs(10));
                    authority.await_decision(call).await
                }
            })
            .await;
            match next {
                Ok(response) => {
                    let next = Decision::try_from(response.into_inner())?;
                    // An answer about another request is no answer.
                    if next.approval_id != decision.approval_id || next.request_id != decision.request_id {
                        return Err(Error::Protocol(format!(
                            "asked about approval {} and got an answer about {}",
                            decision.approval_id, next.approval_id
                        )));
                    }
                    decision = next;
                }
                // The monitor may be restarting; keep waiting until the deadline.
                Err(Error::Status(status)) if is_transient(&status) => {}
                Err(e) => return Err(e),
            }
        }
    }
}

fn is_transient(status: &tonic::Status) -> bool {
    matches!(status.code(), tonic::Code::Unavailable | tonic::Code::DeadlineExceeded | tonic::Code::Cancelled)
}

/// Runs `call` until it succeeds, fails for good, or `deadline` passes.
async fn retrying<T, F, Fut>(deadline: tokio::time::Instant, mut call: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, tonic::Status>>,
{
    let mut backoff = Duration::from_millis(50);
    loop {
        match call().await {
            Ok(value) => return Ok(value),
            Err(status) if is_transient(&status) && tokio::time::Instant::now() + backoff < deadline => {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
            Err(status) => return Err(Error::Status(status)),
        }
    }
}

/// Reads a token from the file at `path`, trimmed, refusing a file that
/// anyone but its owner may read or write (mode bits `0o077`), as ssh
/// refuses such a private key: a token is a password. The mode is read
/// from the file that is read, so a swap between the check and the read
/// does not slip through. Every client of the workspace reads token files
/// through this.
pub fn read_token_file(path: impl AsRef<std::path::Path>) -> Result<String, Error> {
    use std::io::Read;
    use std::os::unix::fs::PermissionsExt;
    let path = path.as_ref();
    let failed = |e: std::io::Error| Error::Config(format!("token file `{}`: {e}", path.display()));
    let mut file = std::fs::File::open(path).map_err(failed)?;
    let mode = file.metadata().map_err(failed)?.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(Error::Config(format!(
            "token file `{}` may be read or written by others (mode {mode:04o}): `chmod 600` it, a token is a password",
            path.display()
        )));
    }
    let mut token = String::new();
    file.read_to_string(&mut token).map_err(failed)?;
    Ok(token.trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_decision_goes_to_the_proto_and_back_unchanged() {
        let decision = Decision {
            request_id: "r-1".into(),
            outcome: Outcome::Pending,
            policy_ids: vec!["p".into()],
            reasons: vec!["a person decides".into()],
            approval_id: "apr-1".into(),
            expires_at: Some(SystemTime::UNIX_EPOCH + Duration::new(1_796_000_000, 123_000_000)),
            grant_ids: vec!["grt-1".into()],
            policy_version: "sha256:1".into(),
            audit_seq: 7,
            resolved_by: "alice".into(),
            note: "ok".into(),
            labels: vec!["private-data".into()],
        };
        let back = Decision::try_from(pb::Decision::from(decision.clone())).unwrap();
        assert_eq!(back, decision);
    }
}
