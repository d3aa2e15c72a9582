//! The records of Warden's domain, as the monitor keeps and answers them:
//! audit records and entries, decisions, approvals, locks, sessions, and
//! approval events. Proto-free and store-free: `store` keeps them, `grpc`
//! converts them, `service` makes them.

use serde::{Deserialize, Serialize};

use crate::decision::Outcome;
use crate::normalize::{Actor, NormalizedRequest, RequestInput};

/// One entry of the audit log, as stored and hashed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// Position in the log, from 1, without gaps.
    pub(crate) seq: u64,
    /// When it happened, nanoseconds since the Unix epoch.
    pub(crate) time_unix_ns: i64,
    /// What happened: `decision`, and more kinds as the monitor grows.
    pub(crate) kind: String,
    /// The authenticated credential that caused it.
    pub(crate) caller: String,
    /// Who acted (empty for records that are not about a request).
    pub(crate) actor: Actor,
    /// The Cedar action.
    pub(crate) action: String,
    /// The normalized resource, `Type::"id"`.
    pub(crate) resource: String,
    /// The whole normalized request (method, argv, cwd, justification,
    /// context…) as JSON; empty for records that are not about a request.
    #[serde(default)]
    pub(crate) request: String,
    /// `ALLOW`, `DENY`, `PENDING`, or empty.
    pub outcome: String,
    /// Determining policy ids.
    pub(crate) policy_ids: Vec<String>,
    /// Reasons given.
    pub(crate) reasons: Vec<String>,
    /// The policy version that decided.
    pub(crate) policy_version: String,
    /// The harness's request id.
    pub(crate) request_id: String,
    /// The approval, for PENDING and its resolution.
    pub(crate) approval_id: String,
    /// Hex SHA-256 of the previous record; all zeros for the first.
    pub(crate) prev_hash: String,
    /// Hex SHA-256 of this record's canonical encoding.
    pub hash: String,
}

impl AuditRecord {
    /// Its position in the log.
    pub fn seq(&self) -> u64 {
        self.seq
    }
}

/// What a caller wants recorded; the writer adds seq and hashes.
#[derive(Debug, Clone, Default)]
pub(crate) struct AuditEntry {
    /// See [`AuditRecord`].
    pub(crate) time_unix_ns: i64,
    /// See [`AuditRecord`].
    pub(crate) kind: String,
    /// See [`AuditRecord`].
    pub(crate) caller: String,
    /// See [`AuditRecord`].
    pub(crate) actor: Option<Actor>,
    /// See [`AuditRecord`].
    pub(crate) action: String,
    /// See [`AuditRecord`].
    pub(crate) resource: String,
    /// See [`AuditRecord`].
    pub(crate) request: String,
    /// See [`AuditRecord`].
    pub(crate) outcome: String,
    /// See [`AuditRecord`].
    pub(crate) policy_ids: Vec<String>,
    /// See [`AuditRecord`].
    pub(crate) reasons: Vec<String>,
    /// See [`AuditRecord`].
    pub(crate) policy_version: String,
    /// See [`AuditRecord`].
    pub(crate) request_id: String,
    /// See [`AuditRecord`].
    pub(crate) approval_id: String,
}

/// The `request` member of a decision's audit record: the normalized
/// request, and the facts of that moment beyond it and the policy folder
/// that the decision was made with, so that `wardenctl policy replay` can
/// decide it again with them. Each fact is written only when there is one
/// (a record of an earlier version has none, which reads as none); the
/// request's own members stay where they always were, those of
/// [`NormalizedRequest`] (written out here rather than flattened: serde
/// reads a flattened struct through a buffer, several times slower, and a
/// replay reads a million of these).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RecordedRequest {
    /// See [`NormalizedRequest`].
    pub(crate) actor: Actor,
    /// See [`NormalizedRequest`].
    pub(crate) action: String,
    /// See [`NormalizedRequest`].
    pub(crate) resource: crate::normalize::Resource,
    /// See [`NormalizedRequest`].
    pub(crate) justification: String,
    /// See [`NormalizedRequest`].
    pub(crate) context: serde_json::Map<String, serde_json::Value>,
    /// The labels the session held.
    #[serde(default, skip_serializing_if = "std::collections::BTreeSet::is_empty")]
    pub(crate) session_labels: std::collections::BTreeSet<String>,
    /// Why the session could not act at all (a lock, a session of another
    /// agent), when it could not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) blocked: Option<String>,
    /// Why a PENDING was a DENY: the approvals waiting at once were at
    /// their cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) capped: Option<String>,
    /// The shadow set's outcome, when it differed from the live one's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) shadow: Option<ShadowOutcome>,
    /// On an approval's record: the window the approver granted with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) window: Option<crate::grants::Grant>,
}

impl RecordedRequest {
    /// A request with no facts beside it.
    pub(crate) fn of(request: &NormalizedRequest) -> Self {
        let NormalizedRequest { actor, action, resource, justification, context } = request.clone();
        Self {
            actor,
            action,
            resource,
            justification,
            context,
            session_labels: Default::default(),
            blocked: None,
            capped: None,
            shadow: None,
            window: None,
        }
    }

    /// The request alone.
    pub(crate) fn request(&self) -> NormalizedRequest {
        NormalizedRequest {
            actor: self.actor.clone(),
            action: self.action.clone(),
            resource: self.resource.clone(),
            justification: self.justification.clone(),
            context: self.context.clone(),
        }
    }

    /// Its JSON, as the audit record keeps it.
    pub(crate) fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// What the shadow policy set (`[policy] shadow_dir`) would have answered,
/// recorded beside the live decision when the two differ.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ShadowOutcome {
    /// The live set's outcome it was compared with: what the policies said,
    /// before the cap on waiting approvals (not policy) had its say.
    #[serde(default)]
    pub(crate) live: String,
    /// `ALLOW`, `DENY` or `PENDING` (or `INVALID_ARGUMENT`: the request does
    /// not fit the shadow set's schema).
    pub(crate) outcome: String,
    /// Its determining policies (and grants).
    pub(crate) policy_ids: Vec<String>,
    /// Its reasons.
    pub(crate) reasons: Vec<String>,
    /// The shadow set's version.
    pub(crate) policy_version: String,
}

/// The `request` member of a grant's audit record (`grant.created`,
/// `grant.revoked`, `grant.expired`, and an approval that granted a
/// window): the grant whole, so that a replay knows the grants of every
/// moment the log covers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RecordedGrant {
    /// The grant's id.
    pub(crate) grant_id: String,
    /// Its expiry.
    pub(crate) expires_unix_ns: i64,
    /// The grant itself (records of earlier versions have only the two
    /// members above).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) grant: Option<crate::grants::Grant>,
}

/// A decision as given to a harness, and as kept for idempotent replays.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DecisionRecord {
    /// The harness's request id (or the one the monitor assigned).
    pub(crate) request_id: String,
    /// ALLOW, DENY or PENDING.
    pub(crate) outcome: Outcome,
    /// Determining policy ids.
    pub(crate) policy_ids: Vec<String>,
    /// Reasons.
    pub(crate) reasons: Vec<String>,
    /// The approval, when PENDING.
    pub(crate) approval_id: String,
    /// When the approval expires, nanoseconds since the Unix epoch.
    pub(crate) expires_at_unix_ns: Option<i64>,
    /// Grants that contributed.
    pub(crate) grant_ids: Vec<String>,
    /// The policy version that decided.
    pub(crate) policy_version: String,
    /// The audit record of this decision.
    pub(crate) audit_seq: u64,
    /// Who resolved the approval.
    pub(crate) resolved_by: String,
    /// The approver's note.
    pub(crate) note: String,
    /// The session labels this answer gave (its policies' `@label`, on an
    /// ALLOW); none on a replay, which gives none. Kept with an approval,
    /// not in the idempotency window.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) labels: Vec<String>,
}

/// Where an approval stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub(crate) enum ApprovalState {
    /// Waiting for a person.
    Pending,
    /// A person approved and the request passed again: ALLOW.
    Approved,
    /// A person denied it, or approved but the request no longer passed: DENY.
    Denied,
    /// Nobody answered before the deadline: DENY.
    Expired,
}

impl ApprovalState {
    /// `PENDING`, `APPROVED`, `DENIED` or `EXPIRED`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ApprovalState::Pending => "PENDING",
            ApprovalState::Approved => "APPROVED",
            ApprovalState::Denied => "DENIED",
            ApprovalState::Expired => "EXPIRED",
        }
    }
}

/// A request that waited (or waits) for a person, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ApprovalRecord {
    /// The approval's id.
    pub(crate) approval_id: String,
    /// The request as the harness sent it.
    pub(crate) input: RequestInput,
    /// The exact normalized request, which is what is re-evaluated.
    pub(crate) request: NormalizedRequest,
    /// Hex SHA-256 of the request as the harness sent it.
    pub(crate) request_hash: String,
    /// The harness's request id.
    pub(crate) request_id: String,
    /// The harness credential that asked.
    pub(crate) harness: String,
    /// The policies in the way.
    pub(crate) policy_ids: Vec<String>,
    /// Their reasons.
    pub(crate) reasons: Vec<String>,
    /// The policies that would permit it once approved.
    pub(crate) permit_ids: Vec<String>,
    /// Groups whose member may resolve it; empty: any approver.
    pub(crate) approvers: Vec<String>,
    /// The policies in the way marked `@approval("passkey")`: when any,
    /// only a passkey assertion on the approval page approves it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) passkey_policies: Vec<String>,
    /// The policy version that decided PENDING.
    pub(crate) policy_version: String,
    /// Created, nanoseconds since the Unix epoch.
    pub(crate) created_unix_ns: i64,
    /// Deadline, nanoseconds since the Unix epoch.
    pub(crate) expires_unix_ns: i64,
    /// The audit record of the PENDING decision.
    pub(crate) audit_seq: u64,
    /// Where it stands.
    pub(crate) state: ApprovalState,
    /// The approver credential that resolved it.
    pub(crate) resolved_by: String,
    /// The approver's note or message for the agent.
    pub(crate) note: String,
    /// When it was resolved or expired.
    pub(crate) resolved_unix_ns: Option<i64>,
    /// The decision as the harness sees it now: PENDING, then the final one.
    pub(crate) decision: DecisionRecord,
    /// For an approved one: the audit record of the answer that used it
    /// (its ALLOW is given once, to the harness waiting on it or to the
    /// first re-ask of its request id); 0 while unused.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) used_seq: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A lockdown of a session, a user or an agent kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Lock {
    /// `session:ID`, `user:ID` or `agent:ID`.
    pub(crate) target: String,
    /// Why, for the denials it causes.
    pub(crate) reason: String,
    /// The admin credential that locked it.
    pub(crate) locked_by: String,
    /// When, nanoseconds since the Unix epoch.
    pub(crate) locked_unix_ns: i64,
}

/// Which session: a session id is scoped to the harness credential and the
/// user that use it, so two users (or two harnesses) naming the same id have
/// two sessions and no one can squat on or share another's.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub(crate) struct SessionKey {
    /// The session id the harness sent.
    pub(crate) session: String,
    /// The harness credential's name.
    pub(crate) harness: String,
    /// The user.
    pub(crate) user: String,
}

/// What the monitor remembers of a session.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SessionRecord {
    /// The session id.
    pub session: String,
    /// Its user, as first seen.
    pub(crate) user: String,
    /// Its agent kind, as first seen.
    pub(crate) agent: String,
    /// Labels it gained, for good (until an admin clears them).
    pub labels: std::collections::BTreeSet<String>,
    /// The harness credential whose session it is; empty in a record
    /// written before sessions were scoped by harness and user (kept under
    /// the bare session id, see [`Store::session`]).
    #[serde(default)]
    pub(crate) harness: String,
}

impl SessionRecord {
    /// Which session this record is of.
    pub(crate) fn key(&self) -> SessionKey {
        SessionKey { session: self.session.clone(), harness: self.harness.clone(), user: self.user.clone() }
    }
}

/// A change to an approval, published after it is flushed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ApprovalEvent {
    /// The approval as it now stands.
    pub(crate) approval: ApprovalRecord,
}
