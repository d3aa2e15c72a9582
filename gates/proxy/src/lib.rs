//! `warden-proxy`: an HTTP(S) forward proxy that a sandbox's only route out
//! goes through. Every request is asked of Warden (`http.request` with its
//! method and full URL) before a byte goes upstream; a header value holding
//! `warden-secret:NAME` gets the secret's value only after `secret.use` of
//! `Secret::"NAME"` for that destination is allowed.
//!
//! - [`ca`]: the proxy's certificate authority (created on first use, key
//!   mode 0600) and the per-host leaf certificates it presents to clients.
//! - [`clients`]: who a request is from: one sandbox fixed by flags, or
//!   several with proxy credentials of their own (`Proxy-Authorization`).
//! - [`secrets`]: the secret store (a TOML file of mode 0600) and the
//!   placeholder substitution, pure.
//! - [`proxy`]: the server: absolute-form HTTP and `CONNECT` (TLS
//!   terminated, the CONNECT host pinned against SNI and `Host`), the
//!   decisions, the upstream client, limits.
//! - `forward` (private): one request decided (`http.request` with the
//!   addresses its host resolves to, then `secret.use` per placeholder),
//!   its secrets put in, sent upstream to the decided addresses, and a
//!   secret its answer echoes redacted.
//! - [`addresses`]: the host resolved once, before the decision, and what
//!   each address is (public, loopback, private, metadata …), pure but
//!   for the lookup.
//! - [`upstream`]: the upstream client per set of decided addresses, whose
//!   resolver answers with those addresses only (no second lookup).
//! - [`request`]: what a request is checked for before it is decided,
//!   pure: its method in one spelling, an ambiguous target, the hop's own
//!   headers, the bytes its headers carry.
//! - [`approvals`]: asking Warden about one part of a request, PENDING
//!   included: held at most `--approval-wait`, then 403 PENDING naming the
//!   approval; the same request sent again awaits that approval.
//! - [`pending`]: the approvals remembered per client and request, pure
//!   and bounded.
//! - [`answer`]: the proxy's own JSON answers (denied, pending, errors).

#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod addresses;
pub mod answer;
pub mod approvals;
pub mod ca;
pub mod clients;
mod forward;
pub mod pending;
pub mod proxy;
pub mod request;
pub mod secrets;
pub mod upstream;
