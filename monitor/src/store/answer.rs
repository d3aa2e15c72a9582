//! Answers given again (`Guard::Answer`): what a re-ask of a request id or a harness waiting on an approval is told, from the approval as it stands; an approved one's ALLOW is given once.

use super::*;

/// The record kinds whose ALLOW or PENDING a lock turns into a DENY: a
/// fresh decision, a replay and an approval's use.
pub(super) const KINDS: [&str; 3] = ["decision", REPLAY, USED];

/// A re-ask of a request id the monitor has answered, answered again.
pub(crate) const REPLAY: &str = "replay";

/// An approved approval's ALLOW, given to the harness waiting on it.
pub(crate) const USED: &str = "approval.used";

/// Fills in `commit` (its decision and its record's outcome, policies and
/// reasons, after the ones the caller put first) with the answer `approval`
/// gives now. Returns the approval when that answer is its one ALLOW, to be
/// stored as used by this record unless a lock still stops it.
pub(super) fn from_approval(commit: &mut Commit, approval: ApprovalRecord) -> Option<ApprovalRecord> {
    let used = approval.used_seq;
    let (answer, unused) = match approval.state {
        ApprovalState::Approved if used == 0 => (approval.decision.clone(), Some(approval)),
        ApprovalState::Approved => {
            // Used up: this answer says so, under the record's own kind.
            if commit.entry.kind == USED {
                commit.entry.kind = REPLAY.into();
            }
            (spent(&approval), None)
        }
        // Waiting, denied or expired: as it stands.
        _ => (approval.decision, None),
    };
    commit.entry.outcome = answer.outcome.as_str().into();
    commit.entry.policy_ids = answer.policy_ids.iter().chain(&answer.grant_ids).cloned().collect();
    commit.entry.reasons.extend(answer.reasons.iter().cloned());
    commit.decision = Some(answer);
    unused
}

/// The refusal of an approval whose one ALLOW was given.
fn spent(approval: &ApprovalRecord) -> DecisionRecord {
    DecisionRecord {
        request_id: approval.request_id.clone(),
        outcome: Outcome::Deny,
        policy_ids: approval.policy_ids.clone(),
        reasons: vec![format!(
            "approval `{}` was used: a person's approval lets the action run once, and it was given in audit record #{}; \
             to run it again, ask under a new request id (a person decides again)",
            approval.approval_id, approval.used_seq
        )],
        approval_id: approval.approval_id.clone(),
        expires_at_unix_ns: None,
        grant_ids: vec![],
        policy_version: approval.decision.policy_version.clone(),
        audit_seq: 0,
        resolved_by: approval.resolved_by.clone(),
        note: String::new(),
        labels: vec![],
    }
}
