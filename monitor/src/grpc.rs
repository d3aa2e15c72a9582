//! The only module that knows proto types: authentication of each call,
//! conversion of messages into domain types and back, and the one mapping of
//! errors to gRPC status codes.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio_stream::Stream;
use tonic::service::Interceptor;
use tonic::{Request, Response, Status};
use warden_proto::v1 as pb;

use crate::auth::{Caller, Credentials, Role};
use crate::decision::Outcome;
use crate::grants::Grant;
use crate::model::{ApprovalEvent, ApprovalRecord, ApprovalState, AuditRecord, DecisionRecord};
use crate::normalize::{Actor, InvalidInput, RequestInput, ResourceInput};
use crate::service::{
    CallError, GrantRequest, LockOutcome, LockTarget, Monitor, PolicyStatusView, PreviewInput, Resolution,
    SessionQuery, SessionView,
};
use crate::store::StoreError;

/// Checks the bearer token of every call to one service: unknown or missing
/// is `UNAUTHENTICATED`, another role's token is `PERMISSION_DENIED`. Runs
/// before the request's content is looked at.
#[derive(Clone)]
pub(crate) struct Authenticator {
    credentials: Arc<Credentials>,
    role: Role,
    /// On the Unix socket: the peer uids admitted at all.
    uids: Option<Arc<std::collections::HashSet<u32>>>,
}

impl Authenticator {
    /// Admits only tokens of `role`.
    pub(crate) fn new(credentials: Arc<Credentials>, role: Role) -> Self {
        Self { credentials, role, uids: None }
    }
}

impl Interceptor for Authenticator {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        if let Some(uids) = &self.uids {
            // SO_PEERCRED, from the kernel: not something a peer can claim.
            let uid = request
                .extensions()
                .get::<tonic::transport::server::UdsConnectInfo>()
                .and_then(|info| info.peer_cred)
                .map(|cred| cred.uid());
            match uid {
                Some(uid) if uids.contains(&uid) => {}
                Some(uid) => return Err(Status::permission_denied(format!("uid {uid} may not use this socket"))),
                None => return Err(Status::permission_denied("the peer of this socket is unknown")),
            }
        }
        let caller = match request.metadata().get("authorization") {
            Some(header) => {
                let token = header
                    .to_str()
                    .ok()
                    .and_then(|value| value.strip_prefix("Bearer ").or_else(|| value.strip_prefix("bearer ")))
                    .map(str::trim)
                    .ok_or_else(|| Status::unauthenticated("the `authorization` metadata must be `Bearer <token>`"))?;
                self.credentials.authenticate(token).ok_or_else(|| Status::unauthenticated("unknown token"))?
            }
            // On a mutual-TLS listener, a client certificate may stand for a token.
            None => match request.peer_certs().and_then(|certs| certs.first().cloned()) {
                Some(cert) => self.credentials.authenticate_cert(cert.as_ref()).ok_or_else(|| {
                    Status::unauthenticated("this client certificate is not a credential of this monitor")
                })?,
                None => return Err(Status::unauthenticated("missing `authorization: Bearer <token>` metadata")),
            },
        };
        if caller.role != self.role {
            return Err(Status::permission_denied(format!(
                "a `{}` token cannot use this service: it needs a `{}` token",
                caller.role, self.role
            )));
        }
        request.extensions_mut().insert(caller);
        Ok(request)
    }
}

fn caller<T>(request: &Request<T>) -> Result<Arc<Caller>, Status> {
    // The interceptor always inserts it; without it, refuse rather than guess.
    request.extensions().get::<Arc<Caller>>().cloned().ok_or_else(|| Status::unauthenticated("not authenticated"))
}

/// The largest request the monitor reads (every field has its own, smaller
/// limit in `normalize::limits`).
pub(crate) const MAX_MESSAGE_BYTES: usize = 512 * 1024;

/// Reports the health of the Warden services.
pub(crate) struct Health(tonic_health::server::HealthReporter);

impl Health {
    /// Marks every Warden service as no longer serving (shutdown has begun).
    pub(crate) async fn stopping(&self) {
        self.0.set_not_serving::<pb::authority_server::AuthorityServer<AuthorityService>>().await;
        self.0.set_not_serving::<pb::approvals_server::ApprovalsServer<ApprovalsService>>().await;
        self.0.set_not_serving::<pb::admin_server::AdminServer<AdminService>>().await;
    }
}

/// Every service behind its role's authentication, plus health (no token)
/// and reflection.
/// The gRPC services behind the layer that counts their requests.
pub(crate) type Router = tonic::transport::server::Router<
    tower::layer::util::Stack<crate::metrics::GrpcLayer, tower::layer::util::Identity>,
>;

pub(crate) async fn router(
    monitor: &Arc<Monitor>,
    credentials: &Arc<Credentials>,
    tls: Option<&crate::config::TlsPem>,
    uids: Option<Arc<std::collections::HashSet<u32>>>,
) -> Result<(Router, Health), String> {
    let (reporter, health_service) = tonic_health::server::health_reporter();
    reporter.set_serving::<pb::authority_server::AuthorityServer<AuthorityService>>().await;
    reporter.set_serving::<pb::approvals_server::ApprovalsServer<ApprovalsService>>().await;
    reporter.set_serving::<pb::admin_server::AdminServer<AdminService>>().await;
    // Both versions of reflection: v1, and v1alpha for the clients that
    // still speak only that (Python's grpcio-reflection, older grpcurl).
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(warden_proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let reflection_v1 = reflection().build_v1().map_err(|e| e.to_string())?;
    let reflection_v1alpha = reflection().build_v1alpha().map_err(|e| e.to_string())?;
    let guard = |role| Authenticator { uids: uids.clone(), ..Authenticator::new(Arc::clone(credentials), role) };
    let authority = tonic::service::interceptor::InterceptedService::new(
        pb::authority_server::AuthorityServer::new(AuthorityService::new(Arc::clone(monitor)))
            .max_decoding_message_size(MAX_MESSAGE_BYTES),
        guard(Role::Harness),
    );
    let approvals = tonic::service::interceptor::InterceptedService::new(
        pb::approvals_server::ApprovalsServer::new(ApprovalsService::new(Arc::clone(monitor)))
            .max_decoding_message_size(MAX_MESSAGE_BYTES),
        guard(Role::Approver),
    );
    let admin = tonic::service::interceptor::InterceptedService::new(
        pb::admin_server::AdminServer::new(AdminService {
            monitor: Arc::clone(monitor),
            credentials: Arc::clone(credentials),
        })
        .max_decoding_message_size(MAX_MESSAGE_BYTES),
        guard(Role::Admin),
    );
    let mut builder =
        tonic::transport::Server::builder().layer(crate::metrics::GrpcLayer(Arc::clone(&monitor.metrics)));
    if let Some(tls) = tls {
        use tonic::transport::{Certificate, Identity, ServerTlsConfig};
        let mut config = ServerTlsConfig::new().identity(Identity::from_pem(&tls.cert, &tls.key));
        if let Some(ca) = &tls.client_ca {
            // Optional: harnesses still come with tokens.
            config = config.client_ca_root(Certificate::from_pem(ca)).client_auth_optional(true);
        }
        builder = builder.tls_config(config).map_err(|e| format!("TLS: {e}"))?;
    }
    let router = builder
        // An upper bound for every call; `AwaitDecision` waits at most
        // `MAX_AWAIT`, streams answer at once and then run on.
        .timeout(crate::service::MAX_AWAIT + std::time::Duration::from_secs(30))
        .trace_fn(|request| tracing::debug_span!("rpc", path = %request.uri().path()))
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(authority)
        .add_service(approvals)
        .add_service(admin);
    Ok((router, Health(reporter)))
}

/// The single mapping from domain errors to gRPC status.
impl From<CallError> for Status {
    fn from(error: CallError) -> Self {
        match error {
            CallError::InvalidArgument(e) => Status::invalid_argument(e.to_string()),
            CallError::PermissionDenied(message) => Status::permission_denied(message),
            CallError::NotFound(message) => Status::not_found(message),
            CallError::FailedPrecondition(message) => Status::failed_precondition(message),
            CallError::RateLimited { message, retry_after } => {
                let mut status = Status::resource_exhausted(message);
                if let Ok(value) = retry_after.as_millis().to_string().parse() {
                    status.metadata_mut().insert("retry-after-ms", value);
                }
                status
            }
            CallError::Store(e) => {
                tracing::error!(error = %e, "store failure; the call fails closed");
                match e {
                    StoreError::WriterGone => Status::unavailable("the monitor is shutting down"),
                    _ => Status::unavailable(
                        "the audit store is unavailable; nothing is allowed without a durable record",
                    ),
                }
            }
            CallError::Unavailable(message) => Status::unavailable(message),
        }
    }
}

/// The `Authority` service for harnesses.
pub(crate) struct AuthorityService {
    monitor: Arc<Monitor>,
}

impl AuthorityService {
    /// Serves `monitor`.
    pub(crate) fn new(monitor: Arc<Monitor>) -> Self {
        Self { monitor }
    }
}

#[tonic::async_trait]
impl pb::authority_server::Authority for AuthorityService {
    async fn authorize(&self, request: Request<pb::AuthorizeRequest>) -> Result<Response<pb::Decision>, Status> {
        let caller = caller(&request)?;
        let message = request.into_inner();
        let span = tracing::info_span!("Authorize", request_id = %message.request_id, caller = %caller.name);
        let input = request_input(message).map_err(CallError::from)?;
        let decision = tracing::Instrument::instrument(self.monitor.authorize(&caller, input), span).await?;
        Ok(Response::new(decision_to_proto(decision)))
    }

    async fn await_decision(
        &self,
        request: Request<pb::AwaitDecisionRequest>,
    ) -> Result<Response<pb::Decision>, Status> {
        let caller = caller(&request)?;
        let message = request.into_inner();
        let span = tracing::info_span!("AwaitDecision", approval_id = %message.approval_id, caller = %caller.name);
        let timeout = Duration::from_millis(u64::from(message.timeout_ms));
        let decision =
            tracing::Instrument::instrument(self.monitor.await_decision(&caller, &message.approval_id, timeout), span)
                .await?;
        Ok(Response::new(decision_to_proto(decision)))
    }

    async fn preview(&self, request: Request<pb::PreviewRequest>) -> Result<Response<pb::PreviewResponse>, Status> {
        let caller = caller(&request)?;
        let message = request.into_inner();
        let span = tracing::info_span!("Preview", caller = %caller.name, resources = message.resources.len());
        let input = preview_input(message).map_err(CallError::from)?;
        let preview = tracing::Instrument::instrument(self.monitor.preview(&caller, input), span).await?;
        Ok(Response::new(pb::PreviewResponse {
            outcomes: preview.outcomes.into_iter().map(|o| outcome_to_proto(o) as i32).collect(),
            policy_version: preview.policy_version,
        }))
    }
}

/// The `Admin` service for the security team.
pub(crate) struct AdminService {
    monitor: Arc<Monitor>,
    /// To look up the approver credential a passkey is enrolled for.
    credentials: Arc<Credentials>,
}

/// Approvals in a `ListPending` page unless asked otherwise, and at most.
const DEFAULT_PAGE: usize = 100;
const MAX_PAGE: usize = 500;
/// A page ends before its approvals pass this many bytes (gRPC's default
/// message limit is 4 MiB).
const MAX_PAGE_BYTES: usize = 2 * 1024 * 1024;

/// Default number of records `TailAudit` sends.
const DEFAULT_TAIL: u32 = 20;
/// Records read from the store at a time for `TailAudit`.
const TAIL_PAGE: usize = 1000;

type AuditStream = Pin<Box<dyn Stream<Item = Result<pb::AuditRecord, Status>> + Send>>;

#[tonic::async_trait]
impl pb::admin_server::Admin for AdminService {
    type TailAuditStream = AuditStream;

    async fn tail_audit(&self, request: Request<pb::TailAuditRequest>) -> Result<Response<AuditStream>, Status> {
        let message = request.into_inner();
        let count = if message.count == 0 { DEFAULT_TAIL } else { message.count };
        // Subscribe before reading, so that nothing falls between the two.
        let mut live = self.monitor.store().durable_updates();
        let next = if message.from_seq > 0 {
            message.from_seq
        } else if message.since_unix_ns != 0 {
            self.monitor.store().seq_at_time(message.since_unix_ns).await.map_err(CallError::from)?
        } else {
            self.monitor.audit_start(u64::from(count), message.all)?
        };
        let store = self.monitor.store().clone();
        let mut cursor = store.audit_cursor(next);
        let (tx, rx) = tokio::sync::mpsc::channel(256);
        let follow = message.follow;
        let mut shutdown = self.monitor.shutdown();
        tokio::spawn(async move {
            // Records are always read from the store, in pages; live events
            // only say that there is more to read.
            loop {
                loop {
                    let page = match store.audit_page(&mut cursor, TAIL_PAGE).await {
                        Ok(page) => page,
                        Err(e) => {
                            let _ = tx.send(Err(Status::from(CallError::from(e)))).await;
                            return;
                        }
                    };
                    if page.is_empty() {
                        break;
                    }
                    for record in page {
                        if tx.send(Ok(audit_to_proto(record))).await.is_err() {
                            return;
                        }
                    }
                }
                if !follow {
                    return;
                }
                tokio::select! {
                    changed = live.changed() => if changed.is_err() {
                        return;
                    },
                    () = shutdown.stopped() => {
                        let _ = tx.send(Err(Status::unavailable("the monitor is shutting down"))).await;
                        return;
                    }
                    () = tx.closed() => return,
                }
            }
        });
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))))
    }

    async fn create_grant(&self, request: Request<pb::CreateGrantRequest>) -> Result<Response<pb::Grant>, Status> {
        let caller = caller(&request)?;
        let m = request.into_inner();
        let grant = self
            .monitor
            .create_grant(
                &caller.name,
                GrantRequest {
                    user: m.user,
                    session: m.session,
                    agent: m.agent,
                    actions: m.actions,
                    resource_scope: m.resource_scope,
                    ttl_seconds: m.ttl_seconds,
                    reason: m.reason,
                    approver_groups: None,
                    harness: m.harness,
                    passkey: false,
                },
            )
            .await?;
        Ok(Response::new(grant_to_proto(grant)))
    }

    async fn revoke_grant(
        &self,
        request: Request<pb::RevokeGrantRequest>,
    ) -> Result<Response<pb::RevokeGrantResponse>, Status> {
        let caller = caller(&request)?;
        let grant = self.monitor.revoke_grant(&caller.name, &request.into_inner().grant_id).await?;
        Ok(Response::new(pb::RevokeGrantResponse { grant: Some(grant_to_proto(grant)) }))
    }

    async fn list_grants(
        &self,
        request: Request<pb::ListGrantsRequest>,
    ) -> Result<Response<pb::ListGrantsResponse>, Status> {
        let m = request.into_inner();
        let grants = self
            .monitor
            .list_grants(&m.user, &m.session)
            .into_iter()
            .map(|(grant, policy)| pb::Grant { policy, ..grant_to_proto(grant) })
            .collect();
        Ok(Response::new(pb::ListGrantsResponse { grants }))
    }

    async fn lock_session(
        &self,
        request: Request<pb::LockSessionRequest>,
    ) -> Result<Response<pb::LockResponse>, Status> {
        let caller = caller(&request)?;
        let m = request.into_inner();
        let outcome = self
            .monitor
            .lock(&caller, LockTarget { session: m.session, user: m.user, agent: m.agent }, &m.reason)
            .await?;
        Ok(Response::new(lock_to_proto(outcome)))
    }

    async fn unlock_session(
        &self,
        request: Request<pb::UnlockSessionRequest>,
    ) -> Result<Response<pb::LockResponse>, Status> {
        let caller = caller(&request)?;
        let m = request.into_inner();
        let outcome =
            self.monitor.unlock(&caller, LockTarget { session: m.session, user: m.user, agent: m.agent }).await?;
        Ok(Response::new(lock_to_proto(outcome)))
    }

    async fn get_session(&self, request: Request<pb::GetSessionRequest>) -> Result<Response<pb::Session>, Status> {
        let m = request.into_inner();
        let view = self.monitor.session(&SessionQuery { session: m.session, user: m.user, harness: m.harness }).await?;
        Ok(Response::new(session_to_proto(view)))
    }

    async fn clear_session_labels(
        &self,
        request: Request<pb::ClearSessionLabelsRequest>,
    ) -> Result<Response<pb::Session>, Status> {
        let caller = caller(&request)?;
        let m = request.into_inner();
        let query = SessionQuery { session: m.session, user: m.user, harness: m.harness };
        let view = self.monitor.clear_labels(&caller, &query, &m.reason).await?;
        Ok(Response::new(session_to_proto(view)))
    }

    async fn explain(&self, request: Request<pb::AuthorizeRequest>) -> Result<Response<pb::Explanation>, Status> {
        let input = request_input(request.into_inner()).map_err(CallError::from)?;
        let (evaluation, traces) = self.monitor.explain(&input).await?;
        Ok(Response::new(explanation_to_proto(input.request_id, evaluation, traces)))
    }

    async fn policy_status(
        &self,
        _request: Request<pb::PolicyStatusRequest>,
    ) -> Result<Response<pb::PolicyStatusResponse>, Status> {
        Ok(Response::new(status_to_proto(self.monitor.policy_status())))
    }

    async fn reload_policies(
        &self,
        request: Request<pb::ReloadPoliciesRequest>,
    ) -> Result<Response<pb::ReloadPoliciesResponse>, Status> {
        let caller = caller(&request)?;
        let (loaded, status) = self.monitor.reload(&caller.name).await?;
        Ok(Response::new(pb::ReloadPoliciesResponse { loaded, status: Some(status_to_proto(status)) }))
    }

    async fn enroll_approver(
        &self,
        request: Request<pb::EnrollApproverRequest>,
    ) -> Result<Response<pb::EnrollApproverResponse>, Status> {
        let caller = caller(&request)?;
        let name = request.into_inner().name;
        let groups = self.credentials.approver_groups(&name).ok_or_else(|| {
            Status::invalid_argument(format!("name: `{name}` is not an approver credential of this monitor"))
        })?;
        let url = self.monitor.enroll_link(&caller, &name, groups).await?;
        let expires = crate::service::unix_ns(self.monitor.now())
            .saturating_add(i64::try_from(crate::passkeys::LINK_VALID.as_nanos()).unwrap_or(i64::MAX));
        Ok(Response::new(pb::EnrollApproverResponse { url, expires_at: Some(timestamp(expires)) }))
    }

    async fn list_approvers(
        &self,
        _request: Request<pb::ListApproversRequest>,
    ) -> Result<Response<pb::ListApproversResponse>, Status> {
        let passkeys = self.monitor.approvers().into_iter().map(passkey_to_proto).collect();
        Ok(Response::new(pb::ListApproversResponse { passkeys }))
    }

    async fn confirm_approver(
        &self,
        request: Request<pb::ConfirmApproverRequest>,
    ) -> Result<Response<pb::ApproverPasskey>, Status> {
        let caller = caller(&request)?;
        let message = request.into_inner();
        let confirmed = self.monitor.confirm_approver(&caller, &message.name, &message.key_id).await?;
        Ok(Response::new(passkey_to_proto(confirmed)))
    }

    async fn revoke_approver(
        &self,
        request: Request<pb::RevokeApproverRequest>,
    ) -> Result<Response<pb::RevokeApproverResponse>, Status> {
        let caller = caller(&request)?;
        let name = request.into_inner().name;
        let revoked = self.monitor.revoke_approver(&caller, &name).await?;
        Ok(Response::new(pb::RevokeApproverResponse { revoked: u32::try_from(revoked).unwrap_or(u32::MAX) }))
    }

    async fn verify_audit(
        &self,
        _request: Request<pb::VerifyAuditRequest>,
    ) -> Result<Response<pb::VerifyAuditResponse>, Status> {
        let (report, checkpoint) = self.monitor.verify_audit().await;
        let (first_bad_seq, error) = report.first_bad.clone().unwrap_or_default();
        Ok(Response::new(pb::VerifyAuditResponse {
            ok: report.ok(),
            records: report.records,
            head_seq: report.head.seq,
            head_hash: report.head.hash,
            first_bad_seq,
            error,
            checkpoint: checkpoint.map(|c| pb::Checkpoint {
                seq: c.seq,
                hash: c.hash,
                time_unix_ns: c.time_unix_ns,
                public_key: c.public_key,
                signature: c.signature,
            }),
        }))
    }
}

/// The `Approvals` service for approvers on call.
pub(crate) struct ApprovalsService {
    monitor: Arc<Monitor>,
}

impl ApprovalsService {
    /// Serves `monitor`.
    pub(crate) fn new(monitor: Arc<Monitor>) -> Self {
        Self { monitor }
    }
}

/// Events a watcher may have queued before it is cut off as too slow.
const WATCH_BUFFER: usize = 1024;

type ApprovalStream = Pin<Box<dyn Stream<Item = Result<pb::ApprovalEvent, Status>> + Send>>;

#[tonic::async_trait]
impl pb::approvals_server::Approvals for ApprovalsService {
    type WatchPendingStream = ApprovalStream;

    async fn list_pending(
        &self,
        request: Request<pb::ListPendingRequest>,
    ) -> Result<Response<pb::ListPendingResponse>, Status> {
        use prost::Message as _;
        let m = request.into_inner();
        let page_size = match m.page_size {
            0 => DEFAULT_PAGE,
            n if n as usize > MAX_PAGE => {
                return Err(CallError::from(InvalidInput::new("page_size", format!("is more than {MAX_PAGE}"))).into());
            }
            n => n as usize,
        };
        // The token is the last listed approval's deadline and id: pending
        // approvals are listed by (deadline, id), so the next page starts
        // after it whatever was resolved meanwhile.
        let after = if m.page_token.is_empty() {
            None
        } else {
            let parsed =
                m.page_token.split_once(':').and_then(|(at, id)| Some((at.parse::<i64>().ok()?, id.to_owned())));
            Some(
                parsed
                    .ok_or_else(|| CallError::from(InvalidInput::new("page_token", "is not a token of this list")))?,
            )
        };
        let pending = self.monitor.list_pending().await?;
        let mut rest = pending
            .into_iter()
            .filter(|a| after.as_ref().is_none_or(|(at, id)| (a.expires_unix_ns, &a.approval_id) > (*at, id)))
            .peekable();
        let mut approvals = Vec::new();
        let mut bytes = 0;
        let mut last = None;
        while let Some(next) = rest.peek() {
            let encoded = approval_to_proto(next.clone());
            let size = encoded.encoded_len();
            if approvals.len() == page_size || (!approvals.is_empty() && bytes + size > MAX_PAGE_BYTES) {
                break;
            }
            bytes += size;
            last = Some(format!("{}:{}", next.expires_unix_ns, next.approval_id));
            approvals.push(encoded);
            rest.next();
        }
        let next_page_token = if rest.peek().is_some() { last.unwrap_or_default() } else { String::new() };
        Ok(Response::new(pb::ListPendingResponse { approvals, next_page_token }))
    }

    async fn get_approval(&self, request: Request<pb::GetApprovalRequest>) -> Result<Response<pb::Approval>, Status> {
        let approval = self.monitor.approval(&request.into_inner().approval_id).await?;
        Ok(Response::new(approval_to_proto(approval)))
    }

    async fn watch_pending(
        &self,
        request: Request<pb::WatchPendingRequest>,
    ) -> Result<Response<ApprovalStream>, Status> {
        let caller = caller(&request)?;
        let (current, mut events) = self.monitor.watch_pending().await?;
        let mut shutdown = self.monitor.shutdown();
        let (tx, rx) = tokio::sync::mpsc::channel(WATCH_BUFFER);
        tokio::spawn(async move {
            // Never block the monitor on a watcher: the broadcast does not
            // wait, and a watcher whose queue is full is cut off, keeping one
            // slot for the status that says so.
            let send = |event: Result<pb::ApprovalEvent, Status>| {
                if tx.capacity() <= 1 {
                    let _ = tx.try_send(Err(Status::resource_exhausted(
                        "this watcher fell behind and was cut off; watch again to get the current pending approvals",
                    )));
                    return false;
                }
                tx.try_send(event).is_ok()
            };
            // An approval listed as current may also come as a new event
            // (published after the subscription, read before the list): a
            // watcher sees it once.
            let mut listed: std::collections::HashSet<String> = current.iter().map(|a| a.approval_id.clone()).collect();
            for approval in current {
                let event = pb::ApprovalEvent {
                    kind: pb::ApprovalEventKind::Current as i32,
                    approval: Some(approval_to_proto(approval)),
                };
                if !send(Ok(event)) {
                    return;
                }
            }
            loop {
                let event = tokio::select! {
                    event = events.recv() => event,
                    () = shutdown.stopped() => {
                        let _ = tx.try_send(Err(Status::unavailable("the monitor is shutting down")));
                        return;
                    }
                    () = tx.closed() => return,
                };
                let sent = match event {
                    Ok(ApprovalEvent { approval })
                        if approval.state == ApprovalState::Pending && listed.remove(&approval.approval_id) =>
                    {
                        true
                    }
                    Ok(ApprovalEvent { approval }) => send(Ok(approval_event(approval))),
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(missed)) => {
                        tracing::warn!(watcher = %caller.name, missed, "approval watcher cut off: too slow");
                        send(Err(Status::resource_exhausted(format!(
                            "this watcher missed {missed} events and was cut off; watch again to get the current pending approvals"
                        ))));
                        false
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => false,
                };
                if !sent {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))))
    }

    async fn resolve(&self, request: Request<pb::ResolveRequest>) -> Result<Response<pb::Approval>, Status> {
        let caller = caller(&request)?;
        let message = request.into_inner();
        let span = tracing::info_span!("Resolve", approval_id = %message.approval_id, caller = %caller.name);
        let resolution = Resolution {
            approval_id: message.approval_id,
            approve: message.approve,
            note: message.note,
            grant_for_seconds: message.grant_for_seconds,
            grant_scope: message.grant_scope,
            request_hash: message.request_hash,
            // A token is no passkey: only the approval page sets it.
            passkey: None,
        };
        let approval = tracing::Instrument::instrument(self.monitor.resolve(&caller, resolution), span).await?;
        Ok(Response::new(approval_to_proto(approval)))
    }
}

fn passkey_to_proto(e: crate::passkeys::Enrolled) -> pb::ApproverPasskey {
    pb::ApproverPasskey {
        key_id: e.key_id(),
        confirmed: e.confirmed,
        name: e.name,
        groups: e.groups,
        enrolled_at: Some(timestamp(e.enrolled_unix_ns)),
        enrolled_by: e.enrolled_by,
        last_used_at: e.used_unix_ns.map(timestamp),
    }
}

fn grant_to_proto(grant: Grant) -> pb::Grant {
    pb::Grant {
        grant_id: grant.grant_id,
        user: grant.user,
        session: grant.session,
        agent: grant.agent,
        actions: grant.actions,
        resource_scope: grant.resource_scope,
        expires_at: Some(timestamp(grant.expires_unix_ns)),
        reason: grant.reason,
        created_by: grant.created_by,
        created_at: Some(timestamp(grant.created_unix_ns)),
        policy: String::new(),
        harness: grant.harness,
    }
}

/// A what-if as the security team sees it.
pub fn explanation_to_proto(
    request_id: String,
    evaluation: crate::decision::Evaluation,
    traces: Vec<crate::decision::PolicyTrace>,
) -> pb::Explanation {
    let decision = pb::Decision {
        request_id,
        outcome: outcome_to_proto(evaluation.outcome) as i32,
        policy_ids: evaluation.policy_ids,
        reasons: evaluation.reasons,
        grant_ids: evaluation.grant_ids,
        ..pb::Decision::default()
    };
    let policies = traces
        .into_iter()
        .map(|t| pb::PolicyTrace {
            id: t.id,
            effect: t.effect.to_owned(),
            file: t.file,
            matches: t.matches,
            matches_approved: t.matches_approved,
            error: t.error.unwrap_or_default(),
        })
        .collect();
    pb::Explanation { decision: Some(decision), policies }
}

fn status_to_proto(status: PolicyStatusView) -> pb::PolicyStatusResponse {
    pb::PolicyStatusResponse {
        policy_version: status.version,
        loaded_at: Some(timestamp(status.loaded_at_unix_ns)),
        files: status.files,
        error: status.error,
        warnings: status.warnings,
        policies: u32::try_from(status.policies).unwrap_or(u32::MAX),
        error_at: status.error_at_unix_ns.map(timestamp),
    }
}

fn lock_to_proto(outcome: LockOutcome) -> pb::LockResponse {
    pb::LockResponse { target: outcome.target, locked: outcome.locked, denied_approvals: outcome.denied_approvals }
}

fn session_to_proto(view: SessionView) -> pb::Session {
    pb::Session {
        session: view.record.session,
        user: view.record.user,
        agent: view.record.agent,
        labels: view.record.labels.into_iter().collect(),
        locked: view.lock.is_some(),
        locked_reason: view.lock.unwrap_or_default(),
        harness: view.record.harness,
    }
}

fn approval_event(approval: ApprovalRecord) -> pb::ApprovalEvent {
    let kind = match approval.state {
        ApprovalState::Pending => pb::ApprovalEventKind::New,
        ApprovalState::Approved | ApprovalState::Denied => pb::ApprovalEventKind::Resolved,
        ApprovalState::Expired => pb::ApprovalEventKind::Expired,
    };
    pb::ApprovalEvent { kind: kind as i32, approval: Some(approval_to_proto(approval)) }
}

/// An approval as approvers see it.
pub(crate) fn approval_to_proto(approval: ApprovalRecord) -> pb::Approval {
    let state = match approval.state {
        ApprovalState::Pending => pb::ApprovalState::Pending,
        ApprovalState::Approved => pb::ApprovalState::Approved,
        ApprovalState::Denied => pb::ApprovalState::Denied,
        ApprovalState::Expired => pb::ApprovalState::Expired,
    };
    pb::Approval {
        approval_id: approval.approval_id,
        resource: approval.request.resource.uid(),
        // Approvers see the request exactly as it would run, and what in it
        // looks like a credential named beside it.
        credentials: approval.input.credentials(),
        request: Some(input_to_proto(approval.input)),
        reasons: approval.reasons,
        policy_ids: approval.policy_ids,
        state: state as i32,
        created_at: Some(timestamp(approval.created_unix_ns)),
        expires_at: Some(timestamp(approval.expires_unix_ns)),
        resolved_by: approval.resolved_by,
        note: approval.note,
        request_hash: approval.request_hash,
        approvers: approval.approvers,
        passkey_policies: approval.passkey_policies,
        harness: approval.harness,
        permit_ids: approval.permit_ids,
        decision: Some(decision_to_proto(approval.decision)),
    }
}

fn input_to_proto(input: RequestInput) -> pb::AuthorizeRequest {
    use pb::authorize_request::Resource as R;
    let resource = match input.resource {
        ResourceInput::File { path, cwd, pattern } => R::File(pb::FileResource { path, cwd, pattern }),
        ResourceInput::Command { argv, cwd } => R::Command(pb::CommandResource { argv, cwd }),
        ResourceInput::Http { method, url } => R::Http(pb::HttpResource { method, url }),
        ResourceInput::Secret { name } => R::Secret(pb::SecretResource { name }),
        ResourceInput::Tool { server, name, arguments_json } => {
            R::Tool(pb::ToolResource { server, name, arguments_json })
        }
    };
    pb::AuthorizeRequest {
        request_id: input.request_id,
        actor: Some(pb::Actor { user: input.actor.user, agent: input.actor.agent, session: input.actor.session }),
        action: input.action,
        resource: Some(resource),
        justification: input.justification,
        context_json: input.context_json,
    }
}

const RESOURCE_REQUIRED: &str = "is required: one of file, command, http, secret, tool";

fn resource_input(kind: pb::resource::Kind) -> ResourceInput {
    use pb::resource::Kind as K;
    match kind {
        K::File(f) => ResourceInput::File { path: f.path, cwd: f.cwd, pattern: f.pattern },
        K::Command(c) => ResourceInput::Command { argv: c.argv, cwd: c.cwd },
        K::Http(h) => ResourceInput::Http { method: h.method, url: h.url },
        K::Secret(s) => ResourceInput::Secret { name: s.name },
        K::Tool(t) => ResourceInput::Tool { server: t.server, name: t.name, arguments_json: t.arguments_json },
    }
}

/// Converts a `PreviewRequest` into the domain's input, naming missing fields.
pub(crate) fn preview_input(message: pb::PreviewRequest) -> Result<PreviewInput, InvalidInput> {
    let actor = message.actor.ok_or_else(|| InvalidInput::new("actor", "is required"))?;
    let resources = message
        .resources
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            r.kind.map(resource_input).ok_or_else(|| InvalidInput::new(format!("resources[{i}]"), RESOURCE_REQUIRED))
        })
        .collect::<Result<_, _>>()?;
    Ok(PreviewInput {
        actor: Actor { user: actor.user, agent: actor.agent, session: actor.session },
        action: message.action,
        resources,
    })
}

/// Converts an `AuthorizeRequest` into the domain's input, naming missing fields.
pub fn request_input(message: pb::AuthorizeRequest) -> Result<RequestInput, InvalidInput> {
    let actor = message.actor.ok_or_else(|| InvalidInput::new("actor", "is required"))?;
    use pb::authorize_request::Resource as R;
    let resource = match message.resource.ok_or_else(|| InvalidInput::new("resource", RESOURCE_REQUIRED))? {
        R::File(f) => resource_input(pb::resource::Kind::File(f)),
        R::Command(c) => resource_input(pb::resource::Kind::Command(c)),
        R::Http(h) => resource_input(pb::resource::Kind::Http(h)),
        R::Secret(s) => resource_input(pb::resource::Kind::Secret(s)),
        R::Tool(t) => resource_input(pb::resource::Kind::Tool(t)),
    };
    Ok(RequestInput {
        request_id: message.request_id,
        actor: Actor { user: actor.user, agent: actor.agent, session: actor.session },
        action: message.action,
        resource,
        justification: message.justification,
        context_json: message.context_json,
    })
}

fn outcome_to_proto(outcome: Outcome) -> pb::Outcome {
    match outcome {
        Outcome::Allow => pb::Outcome::Allow,
        Outcome::Deny => pb::Outcome::Deny,
        Outcome::Pending => pb::Outcome::Pending,
    }
}

/// A decision as the harness sees it.
pub(crate) fn decision_to_proto(decision: DecisionRecord) -> pb::Decision {
    pb::Decision {
        request_id: decision.request_id,
        outcome: outcome_to_proto(decision.outcome) as i32,
        policy_ids: decision.policy_ids,
        reasons: decision.reasons,
        approval_id: decision.approval_id,
        expires_at: decision.expires_at_unix_ns.map(timestamp),
        grant_ids: decision.grant_ids,
        policy_version: decision.policy_version,
        audit_seq: decision.audit_seq,
        resolved_by: decision.resolved_by,
        note: decision.note,
        labels: decision.labels,
    }
}

fn audit_to_proto(record: AuditRecord) -> pb::AuditRecord {
    let outcome = match record.outcome.as_str() {
        "ALLOW" => pb::Outcome::Allow,
        "DENY" => pb::Outcome::Deny,
        "PENDING" => pb::Outcome::Pending,
        _ => pb::Outcome::Unspecified,
    };
    let actor = (!record.actor.user.is_empty()).then_some(pb::Actor {
        user: record.actor.user,
        agent: record.actor.agent,
        session: record.actor.session,
    });
    pb::AuditRecord {
        seq: record.seq,
        time: Some(timestamp(record.time_unix_ns)),
        kind: record.kind,
        caller: record.caller,
        actor,
        action: record.action,
        resource: record.resource,
        outcome: outcome as i32,
        policy_ids: record.policy_ids,
        reasons: record.reasons,
        policy_version: record.policy_version,
        request_id: record.request_id,
        approval_id: record.approval_id,
        request: record.request,
        prev_hash: record.prev_hash,
        hash: record.hash,
    }
}

fn timestamp(unix_ns: i64) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: unix_ns.div_euclid(1_000_000_000),
        nanos: i32::try_from(unix_ns.rem_euclid(1_000_000_000)).unwrap_or(0),
    }
}
