//! The run's door to the monitor for the gates inside the box (the coding
//! agent's hook): an `Authority` service on a unix socket of the run, which
//! asks the monitor through the SDK with the run's harness token, as the
//! run's user, agent and session whatever the caller names, and lets a
//! caller wait only on approvals it was handed here. Inside the box there
//! is no token: the caller's own (a marker) is not looked at, since only
//! the box and the run's user reach the socket.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tonic::{Request, Response, Status};
use warden_proto::v1 as pb;
use warden_sdk::{ActionRequest, Actor, Client, Decision, Error};

use crate::summary::{Tally, what};

/// What the box's callers send as their token: not a credential.
pub const MARKER_TOKEN: &str = "warden-run";

/// Approvals handed out at most, remembered for `AwaitDecision`.
const REMEMBERED: usize = 100_000;

/// The service.
#[derive(Clone)]
pub struct Pin {
    client: Client,
    actor: Actor,
    approvals: Arc<Mutex<HashSet<String>>>,
    gate: &'static str,
    tally: Arc<Mutex<Tally>>,
}

impl Pin {
    /// Asks `client` (holding the run's token) as `actor`, for the gate
    /// named `gate`, recording what it is told in `tally`.
    pub fn new(client: Client, actor: Actor, gate: &'static str, tally: Arc<Mutex<Tally>>) -> Self {
        Self { client, actor, approvals: Arc::default(), gate, tally }
    }

    fn tally(&self) -> std::sync::MutexGuard<'_, Tally> {
        self.tally.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn handed_out(&self, decision: &Decision) {
        if decision.approval_id.is_empty() {
            return;
        }
        let mut approvals = self.approvals.lock().unwrap_or_else(PoisonError::into_inner);
        if approvals.len() < REMEMBERED {
            approvals.insert(decision.approval_id.clone());
        }
    }

    fn may_await(&self, approval_id: &str) -> bool {
        self.approvals.lock().unwrap_or_else(PoisonError::into_inner).contains(approval_id)
    }
}

fn status(error: Error) -> Status {
    match error {
        Error::Status(status) => status,
        Error::Transport(e) => Status::unavailable(format!("warden-run cannot reach the monitor: {e}")),
        other => Status::unavailable(format!("warden-run: {other}")),
    }
}

#[tonic::async_trait]
impl pb::authority_server::Authority for Pin {
    async fn authorize(&self, request: Request<pb::AuthorizeRequest>) -> Result<Response<pb::Decision>, Status> {
        let message = request.into_inner();
        let asked = what(&message);
        let resource = message.resource.ok_or_else(|| Status::invalid_argument("resource: is required"))?;
        let mut request = ActionRequest::new(message.action, resource)
            .justification(message.justification)
            .context_json(message.context_json);
        if !message.request_id.is_empty() {
            request = request.request_id(message.request_id);
        }
        // Whoever the caller names, the run's actor asks.
        let decision = self.client.authorize(&self.actor, request).await.map_err(status)?;
        self.handed_out(&decision);
        self.tally().decided(self.gate, asked, &decision);
        Ok(Response::new(decision.into()))
    }

    async fn await_decision(
        &self,
        request: Request<pb::AwaitDecisionRequest>,
    ) -> Result<Response<pb::Decision>, Status> {
        let message = request.into_inner();
        if !self.may_await(&message.approval_id) {
            return Err(Status::permission_denied(format!(
                "approval `{}` was not asked for in this run",
                message.approval_id
            )));
        }
        let wait = Duration::from_millis(u64::from(message.timeout_ms));
        let decision = self.client.await_decision(&message.approval_id, wait).await.map_err(status)?;
        self.tally().awaited(&decision);
        Ok(Response::new(decision.into()))
    }

    async fn preview(&self, request: Request<pb::PreviewRequest>) -> Result<Response<pb::PreviewResponse>, Status> {
        let message = request.into_inner();
        let kinds = message.resources.into_iter().map(|r| r.kind).collect::<Option<Vec<_>>>();
        let kinds = kinds.ok_or_else(|| Status::invalid_argument("resources: every resource needs a kind"))?;
        let preview = self.client.preview(&self.actor, message.action, kinds).await.map_err(status)?;
        Ok(Response::new(pb::PreviewResponse {
            outcomes: preview.outcomes.into_iter().map(|o| pb::Outcome::from(o) as i32).collect(),
            policy_version: preview.policy_version,
        }))
    }
}

/// Serves `pin` on `listener` until the process ends.
pub async fn serve(listener: tokio::net::UnixListener, pin: Pin) -> Result<(), tonic::transport::Error> {
    tonic::transport::Server::builder()
        .add_service(pb::authority_server::AuthorityServer::new(pin))
        .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener))
        .await
}
