//! The hash chain: each audit record's hash, and the walk that verifies it.

use super::*;

/// Domain separation for record hashes.
pub(super) const HASH_DOMAIN: &[u8] = b"warden.audit.v1\0";

impl AuditRecord {
    /// SHA-256 over a length-prefixed, domain-separated encoding of every
    /// field but `hash`; it never depends on the storage form.
    pub fn compute_hash(&self) -> String {
        let mut h = Sha256::new();
        h.update(HASH_DOMAIN);
        h.update(self.seq.to_be_bytes());
        h.update(self.time_unix_ns.to_be_bytes());
        let mut text = |value: &str| {
            h.update((value.len() as u64).to_be_bytes());
            h.update(value.as_bytes());
        };
        self.texts_before_lists().into_iter().for_each(&mut text);
        for list in [&self.policy_ids, &self.reasons] {
            text(&list.len().to_string());
            for value in list {
                text(value);
            }
        }
        self.texts_after_lists().into_iter().for_each(text);
        hex::encode(h.finalize())
    }

    /// The text fields before `policy_ids` and `reasons`, in hashing and
    /// storage order.
    pub(super) fn texts_before_lists(&self) -> [&str; 9] {
        [
            &self.kind,
            &self.caller,
            &self.actor.user,
            &self.actor.agent,
            &self.actor.session,
            &self.action,
            &self.resource,
            &self.request,
            &self.outcome,
        ]
    }

    /// The text fields after the lists, but `hash`.
    pub(super) fn texts_after_lists(&self) -> [&str; 4] {
        [&self.policy_version, &self.request_id, &self.approval_id, &self.prev_hash]
    }
}

impl AuditRecord {
    /// The record as stored (see [`super::codec`]).
    pub fn to_bytes(&self) -> Vec<u8> {
        codec::encode(self)
    }

    /// A record as stored, in this form or in the JSON of older versions.
    pub fn from_bytes(value: &[u8]) -> Result<Self, CodecError> {
        codec::decode(value)
    }
}

/// The result of walking the audit chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyReport {
    /// Records checked (up to and including the first bad one).
    pub records: u64,
    /// The last good head.
    pub head: Head,
    /// The first record that does not verify, and why.
    pub first_bad: Option<(u64, String)>,
    /// Where the chain starts: genesis, or after retention took the oldest
    /// segments, the record before the oldest left (which a signed
    /// checkpoint must vouch for, see `checkpoint::check_base`).
    pub base: Head,
    /// What the `audit.segment-removed` records in the walked chain say
    /// retention took, by the last record taken (their signatures are
    /// checked by `checkpoint::check_base`, which has the key).
    pub removed_through: std::collections::BTreeMap<u64, Removal>,
}

/// What one `audit.segment-removed` record says was taken.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct Removal {
    /// The first record taken.
    pub first_seq: u64,
    /// The hash of the last record taken.
    pub last_hash: String,
    /// The monitor's checkpoint key's signature (hex) over the range and
    /// hash; empty in records of versions that did not sign them.
    #[serde(default)]
    pub signature: String,
}

impl VerifyReport {
    /// Whether the whole chain verified.
    pub fn ok(&self) -> bool {
        self.first_bad.is_none()
    }
}

/// Checks that records follow `base` numbered without gaps, that each links
/// to the previous one's hash, and that each hash matches its content. Pure,
/// so that `wardenctl audit verify --data` can run it on a stopped
/// monitor's store.
pub fn verify_chain<E: std::fmt::Display>(
    base: Head,
    records: impl Iterator<Item = Result<AuditRecord, E>>,
) -> VerifyReport {
    let mut head = base.clone();
    let mut count = 0;
    let mut removed_through = std::collections::BTreeMap::new();
    for item in records {
        count += 1;
        let expected_seq = head.seq + 1;
        let bad = |message: String| VerifyReport {
            records: count,
            head: head.clone(),
            first_bad: Some((expected_seq, message)),
            base: base.clone(),
            removed_through: removed_through.clone(),
        };
        let record = match item {
            Ok(record) => record,
            Err(e) => return bad(format!("cannot read the record: {e}")),
        };
        if record.seq != expected_seq {
            return bad(format!("record {} follows {}: a record is missing", record.seq, head.seq));
        }
        if record.prev_hash != head.hash {
            return bad("does not link to the previous record's hash".into());
        }
        if record.compute_hash() != record.hash {
            return bad("content does not match its hash: the record was altered".into());
        }
        if record.kind == REMOVED_KIND
            && let Ok(value) = serde_json::from_str::<serde_json::Value>(&record.request)
            && let Some(last) = value.get("last_seq").and_then(serde_json::Value::as_u64)
            && let Ok(removal) = serde_json::from_value::<Removal>(value)
        {
            removed_through.insert(last, removal);
        }
        head = Head { seq: record.seq, hash: record.hash };
    }
    VerifyReport { records: count, head, first_bad: None, base, removed_through }
}

/// The kind of the record retention writes before it takes a segment; its
/// `request` is a JSON object with `first_seq`, `last_seq`, `last_hash`,
/// `bytes`, `archive`, `why` and `signature` (see `Removal`).
pub(crate) const REMOVED_KIND: &str = "audit.segment-removed";

/// The records of a cursor up to a seq, one at a time.
pub(crate) struct Records {
    cursor: Cursor,
    upto: u64,
    page: std::collections::VecDeque<AuditRecord>,
    failed: bool,
}

impl Records {
    pub(crate) fn new(cursor: Cursor, upto: u64) -> Self {
        Self { cursor, upto, page: Default::default(), failed: false }
    }
}

impl Iterator for Records {
    type Item = Result<AuditRecord, LogError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.page.is_empty() && !self.failed {
            match self.cursor.next_page(self.upto, 4096) {
                Ok(page) => self.page.extend(page),
                Err(e) => {
                    self.failed = true;
                    return Some(Err(e));
                }
            }
        }
        self.page.pop_front().map(Ok)
    }
}

/// Walks the log in `dir` up to record `upto`, from where it starts; the
/// chain must reach `upto` (the head the store knows): a log that ends
/// earlier lost its newest records.
pub(crate) fn verify_log(dir: &Path, upto: u64) -> VerifyReport {
    let mut cursor = Cursor::new(dir, 1);
    let base = match cursor.base_or_open() {
        Ok(base) => base.unwrap_or_else(Head::genesis),
        Err(e) => {
            return VerifyReport {
                records: 0,
                head: Head::genesis(),
                first_bad: Some((1, format!("cannot read the log: {e}"))),
                base: Head::genesis(),
                removed_through: Default::default(),
            };
        }
    };
    let mut report = verify_chain(base, Records::new(cursor, upto));
    if report.ok() && report.head.seq < upto {
        report.first_bad = Some((
            report.head.seq + 1,
            format!("the log ends at record {} but the store's head is {upto}: records are missing", report.head.seq),
        ));
    }
    report
}
