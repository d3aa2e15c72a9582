//! warden-mcp end to end: a real monitor, the real gateway binary, the
//! reference MCP server from npm (`@modelcontextprotocol/server-everything`)
//! and real clients: the official Python `mcp` package and Claude Code.
//! Each test skips with a printed reason when npm's or PyPI's packages are
//! missing, unless `WARDEN_REQUIRE_NPM=1` (as in `.ci/run`).

// A test binary: a failed unwrap is a failed test, which is the point.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

mod actor;
mod claude;
mod protocol;
mod python;
mod support;

#[test]
fn version_names_the_release_and_the_commit() {
    warden_tests::version::assert_version(env!("CARGO_BIN_EXE_warden-mcp"), "warden-mcp");
}
