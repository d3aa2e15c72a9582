//! The `Approvals` service: approvers list, watch and resolve.

use super::*;

/// Approvals in a `ListPending` page unless asked otherwise, and at most.
const DEFAULT_PAGE: usize = 100;
const MAX_PAGE: usize = 500;
/// A page ends before its approvals pass this many bytes (gRPC's default
/// message limit is 4 MiB).
const MAX_PAGE_BYTES: usize = 2 * 1024 * 1024;

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
