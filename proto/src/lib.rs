//! The gRPC contract of Warden, package `warden.v1`, as generated Rust code.
//!
//! The `.proto` files under `warden/v1/` are the source of truth; other
//! clients generate their own code from them.

#![forbid(unsafe_code)]

/// Messages and services of package `warden.v1`.
pub mod v1 {
    #![allow(missing_docs, clippy::all, clippy::pedantic)]
    tonic::include_proto!("warden.v1");
}

/// The encoded `FileDescriptorSet` of `warden.v1`, for server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("warden_descriptor");

pub use prost_types::Timestamp;
