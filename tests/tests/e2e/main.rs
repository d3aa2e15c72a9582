//! End-to-end tests: a real monitor on 127.0.0.1:0, real gRPC clients, a
//! real sled store in a temporary folder.

// A test binary: a failed unwrap is a failed test, which is the point.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

mod approvals;
mod audit;
mod authentication;
mod commands;
mod decisions;
mod grants;
mod invalid_input;
mod limits;
mod lockdown;
mod passkeys;
mod policies;
mod preview;
mod reload;
mod replicas;
mod retention;
mod security;
mod services;
mod sessions;
mod support;
mod tls;
mod trifecta;
