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
