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

mod admin;
mod approvals;
mod authority;
mod convert;

use self::admin::AdminService;
use self::approvals::ApprovalsService;
use self::authority::AuthorityService;
use self::convert::*;
pub use self::convert::{explanation_to_proto, request_input};

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
