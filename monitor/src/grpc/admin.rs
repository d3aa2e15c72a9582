//! The `Admin` service: grants, locks, sessions, policies, the audit log, approvers.

use super::*;

/// The `Admin` service for the security team.
pub(crate) struct AdminService {
    pub(super) monitor: Arc<Monitor>,
    /// To look up the approver credential a passkey is enrolled for.
    pub(super) credentials: Arc<Credentials>,
}

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
        let mut status = status_to_proto(self.monitor.policy_status());
        status.replicas = self
            .monitor
            .replicas()
            .await?
            .into_iter()
            .map(|(r, answering)| pb::ReplicaStatus {
                replica: r.replica,
                policy_version: r.policy_version,
                loaded_at: Some(timestamp(r.policy_loaded_unix_ns)),
                seen_at: Some(timestamp(r.seen_unix_ns)),
                error: r.policy_error,
                answering,
                started_at: Some(timestamp(r.started_unix_ns)),
            })
            .collect();
        Ok(Response::new(status))
    }

    async fn get_policy_files(
        &self,
        _request: Request<pb::GetPolicyFilesRequest>,
    ) -> Result<Response<pb::GetPolicyFilesResponse>, Status> {
        let snapshot = self.monitor.snapshot();
        Ok(Response::new(pb::GetPolicyFilesResponse {
            policy_version: snapshot.version.clone(),
            files: snapshot.texts().into_iter().map(|(name, text)| pb::PolicyFileText { name, text }).collect(),
        }))
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
