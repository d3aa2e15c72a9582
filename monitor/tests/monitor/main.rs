//! The monitor's integration tests, one binary: the module graph, reading
//! commands, the crash test, entities of other schemas, the index against
//! the whole set, normalization properties, `wardend` as a process and its
//! policy watcher.

// A test binary: a failed unwrap is a failed test, which is the point.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

mod architecture;
mod command_properties;
mod crash;
mod entities;
mod index_differential;
mod properties;
mod wardend;
mod watcher;
