//! Messages into domain types and back.

use super::*;

pub(super) fn passkey_to_proto(e: crate::passkeys::Enrolled) -> pb::ApproverPasskey {
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

pub(super) fn grant_to_proto(grant: Grant) -> pb::Grant {
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

pub(super) fn status_to_proto(status: PolicyStatusView) -> pb::PolicyStatusResponse {
    pb::PolicyStatusResponse {
        policy_version: status.version,
        loaded_at: Some(timestamp(status.loaded_at_unix_ns)),
        files: status.files,
        error: status.error,
        warnings: status.warnings,
        policies: u32::try_from(status.policies).unwrap_or(u32::MAX),
        error_at: status.error_at_unix_ns.map(timestamp),
        replicas: vec![],
        shadow: status.shadow.map(|shadow| pb::ShadowStatus {
            dir: shadow.dir,
            policy_version: shadow.version,
            loaded_at: (shadow.loaded_at_unix_ns != 0).then(|| timestamp(shadow.loaded_at_unix_ns)),
            policies: u32::try_from(shadow.policies).unwrap_or(u32::MAX),
            error: shadow.error,
        }),
    }
}

pub(super) fn lock_to_proto(outcome: LockOutcome) -> pb::LockResponse {
    pb::LockResponse { target: outcome.target, locked: outcome.locked, denied_approvals: outcome.denied_approvals }
}

pub(super) fn session_to_proto(view: SessionView) -> pb::Session {
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

pub(super) fn approval_event(approval: ApprovalRecord) -> pb::ApprovalEvent {
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

pub(super) fn input_to_proto(input: RequestInput) -> pb::AuthorizeRequest {
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

pub(super) fn outcome_to_proto(outcome: Outcome) -> pb::Outcome {
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

pub(super) fn audit_to_proto(record: AuditRecord) -> pb::AuditRecord {
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

pub(super) fn timestamp(unix_ns: i64) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: unix_ns.div_euclid(1_000_000_000),
        nanos: i32::try_from(unix_ns.rem_euclid(1_000_000_000)).unwrap_or(0),
    }
}
