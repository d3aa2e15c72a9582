//! The `Authority` service: harnesses ask for decisions.

use super::*;

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
