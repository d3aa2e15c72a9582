//! The audit chain of a stopped monitor, read from its data folder (what
//! `wardenctl audit verify --data` reports): the write-ahead log applied
//! first, so that every acknowledged record is verified.

use std::path::Path;

use crate::checkpoint::CheckpointKey;
use crate::config::{CHECKPOINT_KEY_FILE, CHECKPOINT_LOG_FILE, STORE_DIR};
use crate::store::{StoppedStore, VerifyReport};

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

/// Opens the store of a stopped monitor's data folder `data`.
pub fn open_stopped(data: &Path) -> Result<StoppedStore, String> {
    let path = data.join(STORE_DIR);
    if !path.is_dir() {
        return Err(format!("{} holds no store", data.display()));
    }
    StoppedStore::open(&path).map_err(|e| {
        format!(
            "cannot open {} (is the monitor still running? then ask it instead of using --data): {e}",
            path.display()
        )
    })
}

/// Verifies the chain in `data` (a stopped monitor's data folder), and
/// reads the hash stored at record `at_seq`. Read only: a missing key is
/// not created. A log whose oldest segments retention took must start
/// after a record that a checkpoint signed by this monitor's key names.
pub fn verify_offline(data: &Path, at_seq: Option<u64>) -> Result<OfflineReport, String> {
    let store = open_stopped(data)?;
    let mut report = store.verify();
    let key_path = data.join(CHECKPOINT_KEY_FILE);
    let public_key =
        if key_path.is_file() { Some(CheckpointKey::load_or_create(&key_path)?.public_hex()) } else { None };
    let checkpoints = crate::checkpoint::read_checkpoints(&data.join(CHECKPOINT_LOG_FILE));
    crate::checkpoint::check_base(&mut report, &checkpoints, public_key.as_deref());
    let hash_at = match at_seq {
        Some(seq) => store.hash_at(seq).map_err(|e| e.to_string())?,
        None => None,
    };
    Ok(OfflineReport { report, public_key, hash_at })
}
