//! Support for Warden's end-to-end tests (the tests themselves are in `tests/e2e/`).
//!
//! - [`model_server`]: `ScriptedModel`, a scripted Anthropic Messages API on loopback.
//! - [`claude_code`]: finding the real Claude Code CLI and running it against a `ScriptedModel`, no network.
//! - [`monitor`]: a real monitor deciding by a policy text of a test's own.
//! - [`wait`]: `eventually`, the one way tests wait for an event.
//! - [`net`]: `Untouched`, an endpoint no client may reach; `dead_endpoint`, `Relay` and `Swallow`, replicas that are down, crash, or die with a call on them.
//! - [`postgres`]: `PgCluster`, a PostgreSQL server of a test's own.
//! - [`replicas`]: `Replica`, a `wardend` process on a shared PostgreSQL store.
//! - [`version`]: what every binary's `--version` must print.

#![deny(missing_docs)]

pub mod claude_code;
pub mod model_server;
pub mod monitor;
pub mod net;
pub mod postgres;
pub mod replicas;
pub mod version;
pub mod wait;
