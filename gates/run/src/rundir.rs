//! The run's folder outside the box: the proxy's socket and CA, the CA
//! bundle the box trusts, and an empty file for masks. Private (0700), under
//! `$XDG_RUNTIME_DIR` or `/tmp` (both hidden inside the box), removed when
//! the run ends.

use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The system's CA bundles, the first that exists is used.
const SYSTEM_ROOTS: &[&str] =
    &["/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"];

/// The run's folder; removed on drop.
#[derive(Debug)]
pub struct RunDir {
    path: PathBuf,
}

/// Whether `session` can name a run (and a folder): 1 to 128 of
/// `A-Z a-z 0-9 . _ -`, not starting with a dot.
pub fn valid_session(session: &str) -> bool {
    (1..=128).contains(&session.len())
        && !session.starts_with('.')
        && session.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

fn private_dir(path: &Path) -> io::Result<()> {
    match std::fs::create_dir(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = std::fs::symlink_metadata(path)?;
    let uid = std::fs::metadata("/proc/self")?.uid();
    if !meta.is_dir() || meta.uid() != uid {
        return Err(io::Error::other(format!("{} is not a folder of this user", path.display())));
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700))
}

impl RunDir {
    /// Makes the folder of run `session`: refuses one that exists (another
    /// run of that session is under way, or ended badly).
    pub fn create(session: &str) -> io::Result<Self> {
        // Only under /run (or /tmp), which the box replaces: elsewhere (WSLg
        // keeps it in /mnt) the box would see the proxy's CA key.
        let base = match std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) {
            Some(runtime) if runtime.is_dir() && runtime.starts_with("/run") => runtime.join("warden-run"),
            _ => PathBuf::from(format!("/tmp/warden-run-{}", std::fs::metadata("/proc/self")?.uid())),
        };
        private_dir(&base)?;
        let path = base.join(session);
        std::fs::create_dir(&path).map_err(|e| match e.kind() {
            io::ErrorKind::AlreadyExists => io::Error::other(format!(
                "{} exists: a run of session `{session}` is under way (or ended without cleaning up: remove it)",
                path.display()
            )),
            _ => e,
        })?;
        let dir = Self { path };
        std::fs::set_permissions(&dir.path, std::fs::Permissions::from_mode(0o700))?;
        std::fs::create_dir(dir.path.join("sock"))?;
        let empty = dir.empty();
        std::fs::write(&empty, b"")?;
        std::fs::set_permissions(&empty, std::fs::Permissions::from_mode(0o444))?;
        Ok(dir)
    }

    /// The folder.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The proxy's socket.
    pub fn proxy_socket(&self) -> PathBuf {
        self.path.join("sock").join("proxy.sock")
    }

    /// The run's door to the monitor (`pin`).
    pub fn monitor_socket(&self) -> PathBuf {
        self.path.join("sock").join("monitor.sock")
    }

    /// The proxy's data (its CA), never shown inside.
    pub fn proxy_data(&self) -> PathBuf {
        self.path.join("proxy")
    }

    /// A 0-byte read-only file, mounted over files to hide.
    pub fn empty(&self) -> PathBuf {
        self.path.join("empty")
    }

    /// Writes the CA bundle the box trusts: the system's roots and `ca_pem`.
    pub fn write_ca_bundle(&self, ca_pem: &str) -> io::Result<PathBuf> {
        let mut bundle = SYSTEM_ROOTS.iter().find_map(|p| std::fs::read_to_string(p).ok()).unwrap_or_default();
        if !bundle.is_empty() && !bundle.ends_with('\n') {
            bundle.push('\n');
        }
        bundle.push_str(ca_pem);
        let path = self.path.join("ca-bundle.pem");
        std::fs::write(&path, bundle)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444))?;
        Ok(path)
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_names_one_folder() {
        for good in ["run-1", "a.b_c", "X"] {
            assert!(valid_session(good), "{good}");
        }
        for bad in ["", ".", "..", "../x", "a/b", "a b", ".hidden", &"x".repeat(129)] {
            assert!(!valid_session(bad), "{bad}");
        }
    }
}
