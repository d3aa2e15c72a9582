//! The audit chain of a stopped monitor, read from its data folder (what
//! `wardenctl audit verify --data` reports): the write-ahead log applied
//! first, so that every acknowledged record is verified.

use std::path::Path;

use crate::checkpoint::CheckpointKey;
use crate::config::{CHECKPOINT_KEY_FILE, STORE_DIR};
use crate::store::{AuditRecord, VerifyReport, open_stopped, trees, verify_chain};

/// What a stopped monitor's data folder says of its chain.
#[derive(Debug, Clone)]
pub struct OfflineReport {
    /// The walk of the chain.
    pub report: VerifyReport,
    /// The hex public key of the monitor's checkpoint key, when it has one.
    pub public_key: Option<String>,
    /// The hash stored at the record asked for (`at_seq`), when it exists.
    pub hash_at: Option<String>,
}

/// Verifies the chain in `data` (a stopped monitor's data folder), and
/// reads the hash stored at record `at_seq`. Read only: a missing key is
/// not created.
pub fn verify_offline(data: &Path, at_seq: Option<u64>) -> Result<OfflineReport, String> {
    let path = data.join(STORE_DIR);
    if !path.is_dir() {
        return Err(format!("{} holds no store", data.display()));
    }
    let db = open_stopped(&path).map_err(|e| {
        format!("cannot open {} (is the monitor still running? then verify without --data): {e}", path.display())
    })?;
    let tree = db.open_tree(trees::AUDIT).map_err(|e| e.to_string())?;
    let report = verify_chain(tree.iter().map(|item| item.map(|(k, v)| (k.to_vec(), v.to_vec()))));
    let key_path = data.join(CHECKPOINT_KEY_FILE);
    let public_key =
        if key_path.is_file() { Some(CheckpointKey::load_or_create(&key_path)?.public_hex()) } else { None };
    let hash_at = match at_seq {
        Some(seq) => tree
            .get(seq.to_be_bytes())
            .map_err(|e| e.to_string())?
            .and_then(|v| AuditRecord::from_bytes(&v).ok())
            .map(|r| r.hash),
        None => None,
    };
    Ok(OfflineReport { report, public_key, hash_at })
}
