//! The key layout: the sled trees, their numbers in the write-ahead log, and how keys are made and read.

use super::*;

pub(super) fn request_slot(unix_ns: i64) -> usize {
    let slots = i64::try_from(REQUEST_SLOTS).unwrap_or(1);
    usize::try_from(unix_ns.div_euclid(REPLAY_WINDOW_NS).rem_euclid(slots)).unwrap_or(0)
}

#[derive(Clone)]
pub(super) struct Trees {
    /// The audit records of a store written before the audit log left
    /// sled: read once, into the log, then emptied (see `recover`).
    pub(super) audit: sled::Tree,
    /// What the store knows of the audit log (`REPLAY_FROM`).
    pub(super) meta: sled::Tree,
    /// The idempotency slots, see [`REQUEST_SLOTS`].
    pub(super) requests: [sled::Tree; REQUEST_SLOTS],
    pub(super) approvals: sled::Tree,
    pub(super) pending: sled::Tree,
    pub(super) pending_sessions: sled::Tree,
    /// `harness \0 approval id` → deadline: waiting approvals by harness.
    pub(super) pending_harnesses: sled::Tree,
    pub(super) grants: sled::Tree,
    pub(super) locks: sled::Tree,
    pub(super) sessions: sled::Tree,
}

/// Tree numbers in write-ahead log operations (stored on disk: never renumber).
pub(super) mod tree_no {
    pub(crate) const AUDIT: u8 = 0;
    pub(crate) const REQUESTS: u8 = 1;
    pub(crate) const APPROVALS: u8 = 2;
    pub(crate) const PENDING: u8 = 3;
    pub(crate) const PENDING_SESSIONS: u8 = 4;
    pub(crate) const GRANTS: u8 = 5;
    pub(crate) const LOCKS: u8 = 6;
    pub(crate) const SESSIONS: u8 = 7;
    pub(crate) const REQUESTS_1: u8 = 8;
    pub(crate) const REQUESTS_2: u8 = 9;
    pub(crate) const PENDING_HARNESSES: u8 = 10;
    /// The tree number of idempotency slot `slot`.
    pub(crate) fn requests(slot: usize) -> u8 {
        match slot {
            1 => REQUESTS_1,
            2 => REQUESTS_2,
            _ => REQUESTS,
        }
    }
}

impl Trees {
    pub(super) fn open(db: &sled::Db) -> Result<Self, StoreError> {
        Ok(Self {
            audit: db.open_tree(trees::AUDIT)?,
            meta: db.open_tree(trees::META)?,
            requests: [
                db.open_tree(trees::REQUESTS)?,
                db.open_tree(trees::REQUESTS_1)?,
                db.open_tree(trees::REQUESTS_2)?,
            ],
            approvals: db.open_tree(trees::APPROVALS)?,
            pending: db.open_tree(trees::PENDING)?,
            pending_sessions: db.open_tree(trees::PENDING_SESSIONS)?,
            pending_harnesses: db.open_tree(trees::PENDING_HARNESSES)?,
            grants: db.open_tree(trees::GRANTS)?,
            locks: db.open_tree(trees::LOCKS)?,
            sessions: db.open_tree(trees::SESSIONS)?,
        })
    }

    /// What is known of a session. A store written before sessions were
    /// scoped keeps a record under the bare session id; it is this
    /// session's when its user is this key's (its harness was not kept), so
    /// labels gained before an upgrade still count after it.
    pub(super) fn session(&self, key: &SessionKey) -> Result<Option<SessionRecord>, StoreError> {
        if key.harness.is_empty() {
            return self.legacy_session(key);
        }
        let bytes = key.bytes();
        if let Some(value) = self.sessions.get(&bytes)? {
            return read(trees::SESSIONS, &bytes, &value).map(Some);
        }
        self.legacy_session(key)
    }

    /// The record an older version kept under the bare session id, when it
    /// is of this key's user.
    pub(super) fn legacy_session(&self, key: &SessionKey) -> Result<Option<SessionRecord>, StoreError> {
        let Some(value) = self.sessions.get(key.session.as_bytes())? else { return Ok(None) };
        let record: SessionRecord = read(trees::SESSIONS, key.session.as_bytes(), &value)?;
        // Another user's record under the bare id is not this session.
        Ok((record.user == key.user).then(|| SessionRecord { harness: key.harness.clone(), ..record }))
    }

    /// The newest idempotency record of `key` that can still be replayable
    /// at `now_unix_ns`: from the current and the previous slot, and with
    /// `ahead`, also the next one (a request whose clock read came just
    /// before a window's end may be written after one whose read came just
    /// after it). A slot may still hold records older than its window (not
    /// yet pruned): the newest wins, and `replayable` checks the time.
    pub(super) fn remembered(
        &self,
        key: &[u8],
        now_unix_ns: i64,
        ahead: bool,
    ) -> Result<Option<Remembered>, StoreError> {
        let current = request_slot(now_unix_ns);
        let previous = request_slot(now_unix_ns.saturating_sub(REPLAY_WINDOW_NS));
        let next = request_slot(now_unix_ns.saturating_add(CLOCK_SKEW_NS));
        let next = (ahead && next != current).then_some(next);
        let mut newest: Option<Remembered> = None;
        for slot in [Some(current), Some(previous), next].into_iter().flatten() {
            if let Some(tree) = self.requests.get(slot)
                && let Some(value) = tree.get(key)?
            {
                let found: Remembered = read(trees::requests(slot), key, &value)?;
                if newest.as_ref().is_none_or(|n| found.decided_unix_ns > n.decided_unix_ns) {
                    newest = Some(found);
                }
            }
        }
        Ok(newest)
    }

    /// The first seq of the oldest segment to replay on open (0: all).
    pub(super) fn replay_from(&self) -> Result<u64, StoreError> {
        Ok(self
            .meta
            .get(trees::REPLAY_FROM)?
            .and_then(|v| <[u8; 8]>::try_from(v.as_ref()).ok())
            .map_or(0, u64::from_be_bytes))
    }

    /// Records that segments before `seq` need no replay: what sled holds
    /// once its next flush is done includes every change they made.
    pub(super) fn set_replay_from(&self, seq: u64) -> Result<(), StoreError> {
        self.meta.insert(trees::REPLAY_FROM, &seq.to_be_bytes())?;
        Ok(())
    }

    pub(super) fn by_no(&self, no: u8) -> Option<&sled::Tree> {
        Some(match no {
            tree_no::AUDIT => &self.audit,
            tree_no::REQUESTS => &self.requests[0],
            tree_no::REQUESTS_1 => &self.requests[1],
            tree_no::REQUESTS_2 => &self.requests[2],
            tree_no::APPROVALS => &self.approvals,
            tree_no::PENDING => &self.pending,
            tree_no::PENDING_SESSIONS => &self.pending_sessions,
            tree_no::PENDING_HARNESSES => &self.pending_harnesses,
            tree_no::GRANTS => &self.grants,
            tree_no::LOCKS => &self.locks,
            tree_no::SESSIONS => &self.sessions,
            _ => return None,
        })
    }

    /// Applies one batch of operations, in order.
    ///
    /// Plain inserts, not a sled transaction or batch: in sled 0.34 either
    /// writes out sled's current log buffer on every call, which cost more
    /// than the whole decision. Atomicity comes from the audit log, whose
    /// frame holds the whole batch, is durable before the batch is applied
    /// (so sled, which writes its buffers on its own, never holds more than
    /// the log), and is applied again on open.
    pub(super) fn apply(&self, ops: &[Op]) -> Result<(), StoreError> {
        for op in ops {
            let tree = self.by_no(op.tree).ok_or_else(|| StoreError::Corrupt {
                tree: "wal",
                key: op.tree.to_string(),
                message: "an operation names an unknown tree".into(),
            })?;
            match &op.value {
                Some(value) => tree.insert(op.key.as_slice(), value.as_slice())?,
                None => tree.remove(op.key.as_slice())?,
            };
        }
        Ok(())
    }
}

/// Names of the sled trees.
pub mod trees {
    /// Where stores written before the audit log left sled kept it: seq
    /// (u64 big-endian) -> [`super::AuditRecord`] (binary, [`super::codec`],
    /// or JSON). Opening such a store moves it into the log.
    pub const AUDIT: &str = "audit";
    /// `replay_from` -> u64 big-endian: the first seq of the oldest audit
    /// log segment whose state changes sled's last flush may lack.
    pub(crate) const META: &str = "meta";
    /// The key in [`META`].
    pub(crate) const REPLAY_FROM: &[u8] = b"replay_from";
    /// harness NUL request id -> [`super::Remembered`] (binary), for the
    /// decisions of one replay window in three (see `REQUEST_SLOTS`);
    /// `requests.1` and `requests.2` hold the other two.
    pub const REQUESTS: &str = "requests";
    /// The second idempotency slot.
    pub const REQUESTS_1: &str = "requests.1";
    /// The third idempotency slot.
    pub const REQUESTS_2: &str = "requests.2";

    /// The name of idempotency slot `slot`.
    pub(crate) fn requests(slot: usize) -> &'static str {
        match slot {
            1 => REQUESTS_1,
            2 => REQUESTS_2,
            _ => REQUESTS,
        }
    }
    /// approval id -> [`super::ApprovalRecord`] JSON.
    pub(crate) const APPROVALS: &str = "approvals";
    /// deadline (i64 big-endian, ns) NUL approval id -> empty: the pending
    /// approvals in deadline order.
    pub(crate) const PENDING: &str = "pending";
    /// session key (session NUL harness NUL user) NUL approval id -> deadline:
    /// the pending approvals of each session.
    pub(crate) const PENDING_SESSIONS: &str = "pending_sessions";
    /// harness credential NUL approval id -> deadline: the pending
    /// approvals of each harness.
    pub(crate) const PENDING_HARNESSES: &str = "pending_harnesses";
    /// grant id -> [`crate::grants::Grant`] JSON.
    pub(crate) const GRANTS: &str = "grants";
    /// `session:ID` | `user:ID` | `agent:ID` -> [`super::Lock`] JSON.
    pub(crate) const LOCKS: &str = "locks";
    /// session id -> [`super::SessionRecord`] (binary).
    pub const SESSIONS: &str = "sessions";
}

impl SessionKey {
    /// The session of `actor` as asked by the harness credential `harness`.
    pub(crate) fn of(actor: &Actor, harness: &str) -> Self {
        Self { session: actor.session.clone(), harness: harness.to_owned(), user: actor.user.clone() }
    }

    /// The key in the `sessions` tree: `session NUL harness NUL user`. Ids
    /// hold no control characters (normalize refuses them), so the
    /// separators are unambiguous, and every session of one id shares the
    /// prefix `session NUL`. Credential names are never empty, so an empty
    /// harness is a record an older version kept under the bare id.
    pub(super) fn bytes(&self) -> Vec<u8> {
        if self.harness.is_empty() {
            return self.session.as_bytes().to_vec();
        }
        let mut key = Vec::with_capacity(self.session.len() + self.harness.len() + self.user.len() + 2);
        key.extend_from_slice(self.session.as_bytes());
        key.push(0);
        key.extend_from_slice(self.harness.as_bytes());
        key.push(0);
        key.extend_from_slice(self.user.as_bytes());
        key
    }
}

pub(super) fn pending_key(deadline_unix_ns: i64, approval_id: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(9 + approval_id.len());
    // Deadlines are after 1970: as big-endian they sort by time.
    key.extend_from_slice(&deadline_unix_ns.max(0).to_be_bytes());
    key.push(0);
    key.extend_from_slice(approval_id.as_bytes());
    key
}

pub(super) fn split_pending_key(key: &[u8]) -> Option<(i64, &str)> {
    let deadline = <[u8; 8]>::try_from(key.get(..8)?).ok().map(i64::from_be_bytes)?;
    let id = std::str::from_utf8(key.get(9..)?).ok()?;
    Some((deadline, id))
}

pub(super) fn request_key(harness: &str, request_id: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(harness.len() + 1 + request_id.len());
    key.extend_from_slice(harness.as_bytes());
    key.push(0);
    key.extend_from_slice(request_id.as_bytes());
    key
}

/// JSON, for the records written at the pace of people: approvals, grants
/// and locks. The records of every decision are in [`super::codec`]'s form.
pub(super) fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(value).map_err(|e| StoreError::Corrupt {
        tree: "encode",
        key: String::new(),
        message: e.to_string(),
    })
}

pub(super) fn decode<T: for<'de> Deserialize<'de>>(
    tree: &'static str,
    key: &[u8],
    value: &[u8],
) -> Result<T, StoreError> {
    serde_json::from_slice(value).map_err(|e| StoreError::Corrupt {
        tree,
        key: String::from_utf8_lossy(key).into_owned(),
        message: e.to_string(),
    })
}

/// A record in the binary form of [`super::codec`] (or older JSON).
pub(super) fn read<R: Record>(tree: &'static str, key: &[u8], value: &[u8]) -> Result<R, StoreError> {
    codec::decode(value).map_err(|e| StoreError::Corrupt {
        tree,
        key: String::from_utf8_lossy(key).into_owned(),
        message: e.to_string(),
    })
}

pub(super) fn seq_of_key(key: &[u8]) -> Option<u64> {
    <[u8; 8]>::try_from(key).ok().map(u64::from_be_bytes)
}

pub(super) fn decode_record(key: &[u8], value: &[u8]) -> Result<AuditRecord, StoreError> {
    let seq = seq_of_key(key).ok_or_else(|| StoreError::Corrupt {
        tree: trees::AUDIT,
        key: hex::encode(key),
        message: "key is not a sequence number".into(),
    })?;
    AuditRecord::from_bytes(value).map_err(|e| StoreError::Corrupt {
        tree: trees::AUDIT,
        key: seq.to_string(),
        message: e.to_string(),
    })
}
