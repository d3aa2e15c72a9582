//! Signed checkpoints of the audit head. A hash chain shows a record was
//! changed, but not that the newest records were cut off and the head
//! rewritten; a checkpoint signed with a key kept outside the store (and
//! saved by someone else) does: the log must still hold that record, with
//! that hash.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use serde::{Deserialize, Serialize};

use crate::store::{Head, VerifyReport};

/// Domain separation for checkpoint signatures.
const DOMAIN: &[u8] = b"warden.checkpoint.v1\0";
/// Domain separation for the signature of a retention record: a checkpoint's
/// signature can never pass for one, nor one for a checkpoint.
const REMOVAL_DOMAIN: &[u8] = b"warden.segment-removed.v1\0";

/// A signed statement: the audit log had this record, with this hash, then.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The head's sequence number.
    pub seq: u64,
    /// The head's hash (hex).
    pub hash: String,
    /// When it was signed, nanoseconds since the Unix epoch.
    pub time_unix_ns: i64,
    /// The monitor's public key (hex).
    pub public_key: String,
    /// Ed25519 signature (hex) over the domain, seq, hash and time.
    pub signature: String,
}

fn message(seq: u64, hash: &str, time_unix_ns: i64) -> Vec<u8> {
    let mut out = Vec::with_capacity(DOMAIN.len() + 16 + hash.len());
    out.extend_from_slice(DOMAIN);
    out.extend_from_slice(&seq.to_be_bytes());
    out.extend_from_slice(&time_unix_ns.to_be_bytes());
    out.extend_from_slice(hash.as_bytes());
    out
}

/// What a retention record's signature covers: the records it says were
/// taken, from `first_seq` to `last`, and the last one's hash.
fn removal_message(first_seq: u64, last: &Head) -> Vec<u8> {
    let mut out = Vec::with_capacity(REMOVAL_DOMAIN.len() + 16 + last.hash.len());
    out.extend_from_slice(REMOVAL_DOMAIN);
    out.extend_from_slice(&first_seq.to_be_bytes());
    out.extend_from_slice(&last.seq.to_be_bytes());
    out.extend_from_slice(last.hash.as_bytes());
    out
}

/// The monitor's signing key.
pub(crate) struct CheckpointKey(SigningKey);

impl CheckpointKey {
    /// Reads the key file, or creates it (32 random bytes, hex, mode 0600).
    pub(crate) fn load_or_create(path: &Path) -> Result<Self, String> {
        let describe = |e: std::io::Error| format!("{}: {e}", path.display());
        let bytes = match std::fs::read_to_string(path) {
            Ok(text) => hex::decode(text.trim()).map_err(|e| format!("{}: not a hex key: {e}", path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let mut bytes = [0u8; 32];
                getrandom::fill(&mut bytes).map_err(|e| format!("no random numbers for the key: {e}"))?;
                let mut file = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(path)
                    .map_err(describe)?;
                file.write_all(format!("{}\n", hex::encode(bytes)).as_bytes()).map_err(describe)?;
                file.sync_all().map_err(describe)?;
                bytes.to_vec()
            }
            Err(e) => return Err(describe(e)),
        };
        let bytes: [u8; 32] = bytes.try_into().map_err(|_| format!("{}: a key is 32 bytes", path.display()))?;
        Ok(Self(SigningKey::from_bytes(&bytes)))
    }

    /// The public key, hex.
    pub(crate) fn public_hex(&self) -> String {
        hex::encode(self.0.verifying_key().to_bytes())
    }

    /// Signs a retention record's range (hex): only the key proves that the
    /// monitor, not someone with write access to its data folder, took
    /// records `first_seq` to `last` out of the log.
    pub(crate) fn sign_removal(&self, first_seq: u64, last: &Head) -> String {
        hex::encode(self.0.sign(&removal_message(first_seq, last)).to_bytes())
    }

    /// Signs a head.
    pub(crate) fn sign(&self, head: &Head, time_unix_ns: i64) -> Checkpoint {
        let signature = self.0.sign(&message(head.seq, &head.hash, time_unix_ns));
        Checkpoint {
            seq: head.seq,
            hash: head.hash.clone(),
            time_unix_ns,
            public_key: self.public_hex(),
            signature: hex::encode(signature.to_bytes()),
        }
    }
}

/// Checks a checkpoint's signature (by its own public key).
pub(crate) fn verify_signature(checkpoint: &Checkpoint) -> Result<(), String> {
    let key: [u8; 32] = hex::decode(&checkpoint.public_key)
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or("the checkpoint's public key is not 32 hex bytes")?;
    let key = VerifyingKey::from_bytes(&key).map_err(|e| format!("the checkpoint's public key is invalid: {e}"))?;
    let signature: [u8; 64] = hex::decode(&checkpoint.signature)
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or("the checkpoint's signature is not 64 hex bytes")?;
    key.verify(&message(checkpoint.seq, &checkpoint.hash, checkpoint.time_unix_ns), &Signature::from_bytes(&signature))
        .map_err(|_| "the checkpoint's signature does not verify".to_owned())
}

/// Whether `signature` (hex) is `public_key`'s (hex) over a removal of
/// records `first_seq` to `last`.
pub(crate) fn removal_signed(public_key: &str, first_seq: u64, last: &Head, signature: &str) -> bool {
    let key = hex::decode(public_key).ok().and_then(|b| <[u8; 32]>::try_from(b).ok());
    let signature = hex::decode(signature).ok().and_then(|b| <[u8; 64]>::try_from(b).ok());
    let (Some(key), Some(signature)) = (key, signature) else { return false };
    VerifyingKey::from_bytes(&key)
        .is_ok_and(|key| key.verify(&removal_message(first_seq, last), &Signature::from_bytes(&signature)).is_ok())
}

/// Checks the log against a saved checkpoint: the chain verifies at least up
/// to the checkpoint's record, and that record has the signed hash.
/// `hash_at` gives the stored hash of a record.
pub fn check_log(checkpoint: &Checkpoint, report: &VerifyReport, hash_at: Option<String>) -> Result<(), String> {
    verify_signature(checkpoint)?;
    if report.head.seq < checkpoint.seq {
        return Err(format!(
            "the log verifies only up to record {} but a checkpoint signed record {}: records were removed{}",
            report.head.seq,
            checkpoint.seq,
            if report.ok() { " (and the head rewritten)" } else { "" }
        ));
    }
    match hash_at {
        Some(hash) if hash == checkpoint.hash => Ok(()),
        Some(_) => {
            Err(format!("record {} is not the one the checkpoint signed: the log was rewritten", checkpoint.seq))
        }
        None => Err(format!("record {} is missing", checkpoint.seq)),
    }
}

/// The checkpoints of `lines` (JSON, one a line), skipping what does not
/// parse (a torn last line).
pub fn parse_checkpoints<'a>(lines: impl IntoIterator<Item = &'a str>) -> Vec<Checkpoint> {
    lines.into_iter().filter_map(|line| serde_json::from_str::<Checkpoint>(line).ok()).collect()
}

/// The checkpoints of the log file `log`; none when it cannot be read.
pub fn read_checkpoints(log: &Path) -> Vec<Checkpoint> {
    std::fs::read_to_string(log).map(|text| parse_checkpoints(text.lines())).unwrap_or_default()
}

/// A log that no longer starts at record 1 (retention took its oldest
/// segments) proves where it starts only with both: an
/// `audit.segment-removed` record in the chain that remains naming the
/// record just before its oldest segment, with its hash, as the last one
/// taken, and signed by `public_key` (retention writes it, durably, before
/// it deletes; a frame anyone can append, so only the signature makes it
/// the monitor's), and a checkpoint of that record, signed by `public_key`,
/// among `checkpoints` (the monitor's `checkpoints.jsonl`; on PostgreSQL
/// also those kept in the database). A periodic checkpoint alone is not
/// enough: old segments deleted by hand start the log after a signed
/// record too. Without both, `report` names the first missing record as bad.
pub fn check_base(report: &mut VerifyReport, checkpoints: &[Checkpoint], public_key: Option<&str>) {
    // Checked even when the chain breaks later: the missing start comes first.
    if report.base.seq == 0 {
        return;
    }
    let base = &report.base;
    let vouched = checkpoints.iter().any(|c| {
        c.seq == base.seq
            && c.hash == base.hash
            && public_key.is_some_and(|key| key == c.public_key)
            && verify_signature(c).is_ok()
    });
    let removal = report.removed_through.get(&base.seq);
    let recorded = removal.is_some();
    let signed = removal.is_some_and(|removal| {
        removal.last_hash == base.hash
            && public_key.is_some_and(|key| removal_signed(key, removal.first_seq, base, &removal.signature))
    });
    if !(vouched && signed) {
        let missing = match (vouched, recorded, signed) {
            (false, false, _) => "no signed checkpoint of that record and no retention record of its removal",
            (_, true, false) => {
                "a retention record (audit.segment-removed) of its removal that this monitor's key did not sign"
            }
            (false, true, true) => "no checkpoint signed by this monitor's key of that record",
            _ => "no retention record (audit.segment-removed) of its removal",
        };
        report.first_bad =
            Some((1, format!("the log starts after record {}, with {missing}: records were removed", base.seq)));
        report.head = Head::genesis();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signed_head_verifies_and_a_changed_one_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("checkpoint.key");
        let key = CheckpointKey::load_or_create(&path).unwrap();
        let again = CheckpointKey::load_or_create(&path).unwrap();
        assert_eq!(key.public_hex(), again.public_hex());
        let head = Head { seq: 7, hash: "ab".repeat(32) };
        let mut checkpoint = key.sign(&head, 42);
        assert_eq!(verify_signature(&checkpoint), Ok(()));
        checkpoint.seq = 6;
        assert!(verify_signature(&checkpoint).is_err());
    }

    #[test]
    fn a_removal_verifies_only_with_its_range_its_hash_and_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let key = CheckpointKey::load_or_create(&dir.path().join("checkpoint.key")).unwrap();
        let other = CheckpointKey::load_or_create(&dir.path().join("other.key")).unwrap();
        let last = Head { seq: 40, hash: "cd".repeat(32) };
        let signature = key.sign_removal(1, &last);
        assert!(removal_signed(&key.public_hex(), 1, &last, &signature));
        assert!(!removal_signed(&other.public_hex(), 1, &last, &signature));
        assert!(!removal_signed(&key.public_hex(), 2, &last, &signature));
        assert!(!removal_signed(&key.public_hex(), 1, &Head { seq: 41, hash: last.hash.clone() }, &signature));
        assert!(!removal_signed(&key.public_hex(), 1, &Head { seq: 40, hash: "ce".repeat(32) }, &signature));
        assert!(!removal_signed(&key.public_hex(), 1, &last, ""));
        // A checkpoint's signature of the same head is no removal's.
        let checkpoint = key.sign(&last, 0);
        assert!(!removal_signed(&key.public_hex(), 1, &last, &checkpoint.signature));
    }
}
