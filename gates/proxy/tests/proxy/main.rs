//! warden-proxy end to end: a real monitor, the proxy's binary, an HTTPS
//! upstream on loopback with its own CA that records what reaches it, and
//! clients nobody here wrote (curl, git, Python requests). A test skips
//! with a printed reason when its client is missing, unless
//! `WARDEN_REQUIRE_NPM=1` (as in `.ci/run`).

// A test binary: a failed unwrap is a failed test, which is the point.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

mod approvals;
mod clients;
mod destinations;
mod methods;
mod support;
mod upstream;

#[test]
fn version_names_the_release_and_the_commit() {
    warden_tests::version::assert_version(env!("CARGO_BIN_EXE_warden-proxy"), "warden-proxy");
}

/// `warden-proxy ca --print | head -1`: the reader leaving is a quiet exit
/// 141 (as a shell's own commands), not a panic.
#[test]
fn a_reader_that_leaves_early_is_no_panic() {
    let data = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_warden-proxy"))
        .args(["ca", "--print", "--data"])
        .arg(data.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The read end is closed before anything is written.
    drop(child.stdout.take());
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(141), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}
