//! What every Warden binary's `--version` prints: its name, the release and
//! the commit ([`warden_version::VERSION`], which its own test checks
//! against the checkout).

use std::process::Command;

/// Runs `binary --version` and asserts it prints `NAME 0.1.0 (commit …)`
/// and exits 0.
#[allow(clippy::panic)]
pub fn assert_version(binary: &str, name: &str) {
    let output = match Command::new(binary).arg("--version").output() {
        Ok(output) => output,
        Err(e) => panic!("cannot run {binary}: {e}"),
    };
    assert!(output.status.success(), "{name} --version exited with {}", output.status);
    assert_eq!(String::from_utf8_lossy(&output.stdout), format!("{name} {}\n", warden_version::VERSION));
}
