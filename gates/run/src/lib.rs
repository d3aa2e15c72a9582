//! `warden-run`: one command puts an agent in a box whose only way out is
//! Warden's egress proxy, as one session, with no Warden token inside.
//!
//! ```text
//! warden-run ──(in-process warden-proxy, the run's actor)── unix socket ─┐
//!     │                                                                   │ (bound read-only into the box)
//!     └─ bwrap: new user, mount, PID, network namespaces ─────────────────┤
//!          warden-run __inside: relay 127.0.0.1:3128 ──────────────────────┘
//!               └─ the agent (HTTPS_PROXY, the CA bundle, no credentials)
//! ```
//!
//! `sandbox` says what bubblewrap is told (pure), `rundir` makes the run's
//! folder, `inside` is the relay and the agent's supervisor in the box,
//! `terminal` an interactive run's own pseudo-terminal.

pub mod agents;
pub mod config;
pub mod inside;
pub mod pin;
pub mod rundir;
pub mod sandbox;
pub mod summary;
pub mod terminal;
