//! `wardend`, the Warden authority, as a library: the binary, `wardenctl` and
//! the end-to-end tests all use it.
//!
//! Pure core, no I/O beyond reading the policy folder: [`normalize`],
//! [`policy`], [`decision`]. Effects: [`store`] (sled, made durable by the
//! write-ahead log in `store::wal`), [`service`] (what each call does,
//! proto-free), [`grpc`] (the only module that knows proto types),
//! [`server`] (wiring, listeners, shutdown), [`config`] and [`auth`].

#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod analysis;
pub mod auth;
pub mod checkpoint;
pub mod command;
pub mod config;
pub mod decision;
pub mod duration;
pub(crate) mod entities;
pub mod grants;
pub mod grpc;
pub(crate) mod index;
pub(crate) mod metrics;
pub(crate) mod model;
pub mod normalize;
pub(crate) mod passkeys;
pub mod policy;
pub mod policytest;
pub mod programs;
pub mod ratelimit;
pub(crate) mod redact;
pub mod replay;
pub mod server;
pub mod service;
pub mod store;
pub mod verify;
pub(crate) mod watch;
pub(crate) mod web;

/// The binary form of the decision records (kept by `store`).
pub use store::codec;
