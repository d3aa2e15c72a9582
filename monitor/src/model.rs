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
