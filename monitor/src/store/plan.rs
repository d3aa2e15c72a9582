//! Planning one commit against the store as a batch sees it: the guards
//! (a request id is new, an approval still pending, the session's labels as
//! the decision saw them, no lock in the way), the chain's next record, and
//! what state goes with it. Both backends plan with this, each through a
//! [`View`] of its own: the embedded store's trees and batches in flight,
//! PostgreSQL's rows read in the batch's transaction.

use super::*;

/// What a backend's stored state says, as planning needs it; what earlier
/// commits of the same batch wrote is in the [`Overlay`] and comes first.
pub(super) trait View {
    /// The newest idempotency record of `key` that can still be replayed at
    /// `now_unix_ns`.
    fn request(&self, key: &[u8], now_unix_ns: i64) -> Result<Option<Remembered>, StoreError>;
    /// A stored approval.
    fn approval(&self, approval_id: &str) -> Result<Option<ApprovalRecord>, StoreError>;
    /// A stored session.
    fn session(&self, key: &SessionKey) -> Result<Option<SessionRecord>, StoreError>;
    /// The lock on `target` (`session:ID`, `user:ID`, `agent:ID`).
    fn lock(&self, target: &str) -> Result<Option<Lock>, StoreError>;
    /// False only when no lock can be stored at all (a fast path).
    fn may_have_locks(&self) -> bool;
    /// Whether the grant is stored.
    fn grant_exists(&self, grant_id: &str) -> Result<bool, StoreError>;
    /// How many approvals wait at `now_unix_ns` for the session `key` and
    /// for the harness `harness` (one past its deadline does not).
    fn waiting(&self, key: &SessionKey, harness: &str, now_unix_ns: i64) -> Result<(usize, usize), StoreError>;
    /// The hash of record `last_seq` when `first_seq` is the oldest record
    /// stored; `None` otherwise (a store whose log is not rows refuses).
    fn oldest_records(&self, first_seq: u64, last_seq: u64) -> Result<Option<String>, StoreError>;
}

/// The session record as of the batch being planned.
pub(super) fn stored_session(
    view: &impl View,
    overlay: &Overlay,
    key: &SessionKey,
) -> Result<Option<SessionRecord>, StoreError> {
    match overlay.sessions.get(key) {
        Some(found) => Ok(Some(found.clone())),
        None => view.session(key),
    }
}

/// An approval as of the batch being planned; `missing`: what it is that
/// the store lacks, when it does (a caller read it before).
fn stored_approval(
    view: &impl View,
    overlay: &Overlay,
    approval_id: &str,
    missing: &str,
) -> Result<ApprovalRecord, StoreError> {
    let found = match overlay.approvals.get(approval_id) {
        Some(found) => Some(found.clone()),
        None => view.approval(approval_id)?,
    };
    found.ok_or_else(|| StoreError::Corrupt {
        tree: trees::APPROVALS,
        key: approval_id.to_owned(),
        message: missing.to_owned(),
    })
}

/// Why `approval` may not wait, when its session or its harness already has
/// as many waiting as `caps` allow (the batch's earlier new ones counted).
fn over_cap(
    view: &impl View,
    overlay: &Overlay,
    caps: Caps,
    approval: &ApprovalRecord,
) -> Result<Option<String>, StoreError> {
    let now = approval.created_unix_ns;
    let key = SessionKey::of(&approval.request.actor, &approval.harness);
    let (mut of_session, mut of_harness) = view.waiting(&key, &approval.harness, now)?;
    for earlier in overlay.approvals.values() {
        let new = earlier.state == ApprovalState::Pending
            && earlier.expires_unix_ns > now
            && view.approval(&earlier.approval_id)?.is_none();
        if new && earlier.harness == approval.harness {
            of_harness += 1;
            of_session += usize::from(SessionKey::of(&earlier.request.actor, &earlier.harness) == key);
        }
    }
    let actor = &approval.request.actor;
    if of_session >= caps.per_session {
        return Ok(Some(format!(
            "session `{}` already has {of_session} approvals waiting (at most {}): denied without asking",
            actor.session, caps.per_session
        )));
    }
    if of_harness >= caps.per_harness {
        return Ok(Some(format!(
            "credential `{}` already has {of_harness} approvals waiting (at most {}): denied without asking",
            approval.harness, caps.per_harness
        )));
    }
    Ok(None)
}

/// Records in a decision's `request` member a fact that changed its
/// outcome here (a lock written before it, the cap on waiting approvals),
/// so that a replay of the log decides it with that fact too. Rare: only
/// then is the request read and written again.
fn note_in_request(request: &mut String, note: impl FnOnce(&mut crate::model::RecordedRequest)) {
    if let Ok(mut recorded) = serde_json::from_str::<crate::model::RecordedRequest>(request) {
        note(&mut recorded);
        *request = recorded.to_json();
    }
}

/// Why the actor's session, user or agent kind is locked, as of the batch
/// being planned.
fn locked(view: &impl View, overlay: &Overlay, actor: &Actor) -> Result<Option<String>, StoreError> {
    if overlay.locks.is_empty() && !view.may_have_locks() {
        return Ok(None);
    }
    for (kind, id) in [("session", &actor.session), ("user", &actor.user), ("agent", &actor.agent)] {
        let target = format!("{kind}:{id}");
        let lock = match overlay.locks.get(&target) {
            Some(found) => found.clone(),
            None => view.lock(&target)?,
        };
        if let Some(lock) = lock {
            let why = if lock.reason.is_empty() { String::new() } else { format!(": {}", lock.reason) };
            return Ok(Some(format!("{kind} `{id}` is locked by `{}`{why}", lock.locked_by)));
        }
    }
    Ok(None)
}

/// Decides what one commit does, advancing `head` when it appends.
pub(super) fn plan(
    view: &impl View,
    overlay: &Overlay,
    commit: Commit,
    head: &mut Head,
) -> Result<Planned, StoreError> {
    let request_key = match &commit.guard {
        Guard::None => None,
        Guard::NewRequest { harness, request_id, request_hash, now_unix_ns, policy_version, replay } => {
            let key = request_key(harness, request_id);
            let earlier = match overlay.requests.get(&key).cloned() {
                Some(found) => Some(found),
                None => view.request(&key, *now_unix_ns)?,
            };
            if let Some(earlier) = earlier
                && *replay
                && earlier.replayable(*now_unix_ns, policy_version)
            {
                return Ok(Planned::Answer(Box::new(if &earlier.request_hash == request_hash {
                    Committed::Replay(earlier.decision)
                } else {
                    Committed::KeyReused(Box::new(earlier))
                })));
            }
            Some((key, request_hash.clone(), *now_unix_ns))
        }
        Guard::StillPending { approval_id } => {
            let current = stored_approval(view, overlay, approval_id, "the approval to resolve is missing")?;
            if current.state != ApprovalState::Pending {
                return Ok(Planned::Answer(Box::new(Committed::NotPending(Box::new(current)))));
            }
            None
        }
        Guard::GrantExists { grant_id } => {
            let exists = match overlay.grants.get(grant_id) {
                Some(put) => *put,
                None => view.grant_exists(grant_id)?,
            };
            if !exists {
                return Ok(Planned::Answer(Box::new(Committed::GrantGone)));
            }
            None
        }
        Guard::OldestRecords { first_seq, last_seq, last_hash } => {
            if view.oldest_records(*first_seq, *last_seq)?.as_ref() != Some(last_hash) {
                return Ok(Planned::Answer(Box::new(Committed::AuditMoved)));
            }
            None
        }
        Guard::Answer { .. } => None,
    };
    let removes = match &commit.guard {
        Guard::OldestRecords { first_seq, last_seq, .. } => Some((*first_seq, *last_seq)),
        _ => None,
    };
    // A decision made with other labels than the session has now (another
    // decision of the same session came first, on this monitor or another
    // on the same database) is decided again: a session's decisions are
    // serialized here, where every label is written.
    if let (Some(seen), Some(change)) = (&commit.seen_labels, &commit.session) {
        let now = stored_session(view, overlay, change.key())?.map(|s| s.labels).unwrap_or_default();
        if now != *seen {
            return Ok(Planned::Answer(Box::new(Committed::SessionMoved)));
        }
    }
    // An ALLOW that a grant gave stands only while the grant does: on a
    // shared store another monitor may have revoked it since this one read
    // its grants.
    if let Some(decision) = &commit.decision
        && decision.outcome == Outcome::Allow
        && commit.entry.kind == "decision"
    {
        for grant_id in &decision.grant_ids {
            let exists = match overlay.grants.get(grant_id) {
                Some(put) => *put,
                None => view.grant_exists(grant_id)?,
            };
            if !exists {
                return Ok(Planned::Answer(Box::new(Committed::GrantsMoved)));
            }
        }
    }
    let seq = head.seq + 1;
    let mut commit = commit;
    // An answer from an approval: as the approval stands now.
    let mut unused = None;
    if let Guard::Answer { approval_id } = &commit.guard
        && !approval_id.is_empty()
    {
        let approval = stored_approval(view, overlay, approval_id, "the approval to answer from is missing")?;
        unused = answer::from_approval(&mut commit, approval);
    }
    let session = match &commit.session {
        None => None,
        Some(change) => merge_session(stored_session(view, overlay, change.key())?, change),
    };
    let mut session = session;
    // A decision made before a lock but written after it is not an
    // ALLOW, nor an approval to wait for (the lock's sweep of pending
    // approvals may be done already): the writer, which writes locks
    // too, has the last word.
    if let Some(decision) = commit.decision.as_mut()
        && matches!(decision.outcome, Outcome::Allow | Outcome::Pending)
        && answer::KINDS.contains(&commit.entry.kind.as_str())
        && let Some(actor) = &commit.entry.actor
        && let Some(why) = locked(view, overlay, actor)?
    {
        if decision.outcome == Outcome::Pending {
            decision.approval_id.clear();
            decision.expires_at_unix_ns = None;
            commit.approval = None;
            commit.entry.approval_id.clear();
        }
        decision.outcome = Outcome::Deny;
        decision.reasons.push(why.clone());
        commit.entry.outcome = Outcome::Deny.as_str().into();
        note_in_request(&mut commit.entry.request, |r| r.blocked = Some(why.clone()));
        commit.entry.reasons.push(why);
        // A denied action gives the session no label.
        if let (Some(current), Some(change @ SessionChange::Touch { .. })) = (&mut session, &commit.session) {
            current.labels = stored_session(view, overlay, change.key())?.map(|b| b.labels).unwrap_or_default();
        }
    }
    // A new approval waits only while its session and its harness have
    // fewer waiting than they may, counted here, where every approval is
    // written (the service's count before the decision can race with
    // another monitor's, or its own concurrent requests).
    if let (Some(caps), Some(approval)) = (commit.caps, &commit.approval)
        && approval.state == ApprovalState::Pending
        && let Some(why) = over_cap(view, overlay, caps, approval)?
        && let Some(decision) = commit.decision.as_mut()
    {
        decision.approval_id.clear();
        decision.expires_at_unix_ns = None;
        decision.outcome = Outcome::Deny;
        decision.reasons.push(why.clone());
        commit.approval = None;
        commit.entry.approval_id.clear();
        commit.entry.outcome = Outcome::Deny.as_str().into();
        note_in_request(&mut commit.entry.request, |r| r.capped = Some(why.clone()));
        commit.entry.reasons.push(why);
    }
    // An approved approval's ALLOW, given now (no lock came in the
    // way): this record uses it.
    if let Some(approval) = unused
        && commit.decision.as_ref().is_some_and(|d| d.outcome == Outcome::Allow)
    {
        commit.approval = Some(ApprovalRecord { used_seq: seq, ..approval });
    }
    let Commit { entry, decision, approval, grant, lock, .. } = commit;
    let mut record = AuditRecord {
        seq,
        time_unix_ns: entry.time_unix_ns,
        kind: entry.kind,
        caller: entry.caller,
        actor: entry.actor.unwrap_or(Actor { user: String::new(), agent: String::new(), session: String::new() }),
        action: entry.action,
        resource: entry.resource,
        request: entry.request,
        outcome: entry.outcome,
        policy_ids: entry.policy_ids,
        reasons: entry.reasons,
        policy_version: entry.policy_version,
        request_id: entry.request_id,
        approval_id: entry.approval_id,
        prev_hash: head.hash.clone(),
        hash: String::new(),
    };
    record.hash = record.compute_hash();
    *head = Head { seq, hash: record.hash.clone() };
    let decision = decision.map(|mut d| {
        d.audit_seq = seq;
        d
    });
    let approval = approval.map(|mut a| {
        if a.state == ApprovalState::Pending {
            a.audit_seq = seq;
        }
        a.decision.audit_seq = seq;
        a
    });
    let remembered = match (request_key, &decision) {
        (Some((key, request_hash, decided_unix_ns)), Some(decision)) => {
            Some((key, Remembered { request_hash, decided_unix_ns, decision: decision.clone() }))
        }
        _ => None,
    };
    Ok(Planned::Append(Box::new(Write { record, decision, remembered, approval, grant, lock, session, removes })))
}
