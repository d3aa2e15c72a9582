//! Who a request is from: one sandbox fixed by flags, or several, each
//! with a proxy credential of its own (`Proxy-Authorization`) mapped to its
//! user, agent and session in a TOML file:
//!
//! ```toml
//! [[clients]]
//! token_sha256 = "<hex SHA-256 of the sandbox's proxy token>"
//! user = "alice"
//! agent = "sandbox"
//! session = "build-42"
//! max_connections = 32   # tunnels and requests at once (default 64)
//! ```
//!
//! A sandbox presents its token as `Proxy-Authorization: Basic
//! base64(any-name:TOKEN)` (a proxy URL `http://x:TOKEN@proxy:3128`, which
//! curl, git, pip, npm and requests understand) or `Bearer TOKEN`. The
//! proxy keeps hashes only.

use std::path::Path;
use std::sync::Arc;

use base64::Engine as _;
use http::HeaderMap;
use serde::Deserialize;
use sha2::{Digest as _, Sha256};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use warden_sdk::Actor;

/// A client's tunnels and requests at once, by default.
pub const DEFAULT_MAX_CONNECTIONS: usize = 64;

/// One sandbox.
pub struct Client {
    /// Who its requests are from.
    pub actor: Actor,
    token_sha256: Option<[u8; 32]>,
    slots: Arc<Semaphore>,
    max: usize,
}

impl Client {
    /// Takes one of the client's places (for a tunnel's life, or one
    /// request's); `None` when all are taken.
    pub fn slot(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.slots).try_acquire_owned().ok()
    }

    /// How many places it has.
    pub fn max_connections(&self) -> usize {
        self.max
    }
}

/// The clients the proxy serves.
pub struct Clients(Vec<Client>);

impl std::fmt::Debug for Clients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.iter().map(|c| &c.actor)).finish()
    }
}

/// Why a request is not from a known client.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Unknown {
    /// No `Proxy-Authorization`.
    #[error("this proxy needs Proxy-Authorization (Basic with the sandbox's token as the password, or Bearer)")]
    Missing,
    /// A token no client has.
    #[error("Proxy-Authorization names no client of this proxy")]
    Wrong,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    clients: Vec<Entry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    token_sha256: String,
    user: String,
    #[serde(default = "default_agent")]
    agent: String,
    session: String,
    max_connections: Option<usize>,
}

fn default_agent() -> String {
    "sandbox".into()
}

impl Clients {
    /// One sandbox, with no credential: every request is from `actor`.
    pub fn fixed(actor: Actor, max_connections: usize) -> Self {
        let max = max_connections.max(1);
        Self(vec![Client { actor, token_sha256: None, slots: Arc::new(Semaphore::new(max)), max }])
    }

    /// The clients of the TOML file at `path`.
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The clients of a TOML text.
    pub fn parse(text: &str) -> Result<Self, String> {
        let file: File = toml::from_str(text).map_err(|e| e.message().to_owned())?;
        if file.clients.is_empty() {
            return Err("no [[clients]]".into());
        }
        let mut clients = Vec::new();
        for (i, entry) in file.clients.into_iter().enumerate() {
            let hash = hex_32(&entry.token_sha256)
                .ok_or_else(|| format!("clients[{i}].token_sha256: 64 hex digits (the SHA-256 of the token)"))?;
            if clients.iter().any(|c: &Client| c.token_sha256 == Some(hash)) {
                return Err(format!("clients[{i}]: the same token as an earlier client"));
            }
            for (field, value) in [("user", &entry.user), ("agent", &entry.agent), ("session", &entry.session)] {
                if value.is_empty() {
                    return Err(format!("clients[{i}].{field}: must not be empty"));
                }
            }
            let max = entry.max_connections.unwrap_or(DEFAULT_MAX_CONNECTIONS).max(1);
            clients.push(Client {
                actor: Actor::new(entry.user, entry.agent, entry.session),
                token_sha256: Some(hash),
                slots: Arc::new(Semaphore::new(max)),
                max,
            });
        }
        Ok(Self(clients))
    }

    /// The client a request is from, by its `Proxy-Authorization`.
    pub fn identify(&self, headers: &HeaderMap) -> Result<&Client, Unknown> {
        if let [only] = self.0.as_slice()
            && only.token_sha256.is_none()
        {
            return Ok(only);
        }
        let header = headers.get(http::header::PROXY_AUTHORIZATION).ok_or(Unknown::Missing)?;
        let token = presented_token(header.as_bytes()).ok_or(Unknown::Wrong)?;
        let hash: [u8; 32] = Sha256::digest(token).into();
        self.0.iter().find(|c| c.token_sha256 == Some(hash)).ok_or(Unknown::Wrong)
    }
}

/// The token in a `Proxy-Authorization` value: Basic's password (or its
/// user name when there is no password), or a Bearer token.
fn presented_token(value: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(value).ok()?.trim();
    let (scheme, rest) = text.split_once(' ')?;
    let rest = rest.trim();
    if scheme.eq_ignore_ascii_case("bearer") {
        return (!rest.is_empty()).then(|| rest.as_bytes().to_vec());
    }
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD.decode(rest).ok()?;
    let token = match decoded.iter().position(|&b| b == b':') {
        Some(at) if at + 1 < decoded.len() => decoded.get(at + 1..)?.to_vec(),
        Some(at) => decoded.get(..at)?.to_vec(),
        None => decoded,
    };
    (!token.is_empty()).then_some(token)
}

fn hex_32(text: &str) -> Option<[u8; 32]> {
    let text = text.trim();
    if text.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash(token: &str) -> String {
        Sha256::digest(token.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
    }

    fn headers(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(http::header::PROXY_AUTHORIZATION, value.parse().unwrap());
        headers
    }

    #[test]
    fn a_token_names_its_sandbox() {
        let text = format!(
            "[[clients]]\ntoken_sha256 = \"{}\"\nuser = \"alice\"\nsession = \"a\"\n\n\
             [[clients]]\ntoken_sha256 = \"{}\"\nuser = \"bob\"\nagent = \"ci\"\nsession = \"b\"\nmax_connections = 2\n",
            hash("tok-a"),
            hash("tok-b")
        );
        let clients = Clients::parse(&text).unwrap();
        let basic = |s: &str| format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(s));
        assert_eq!(clients.identify(&headers(&basic("x:tok-a"))).unwrap().actor.user, "alice");
        assert_eq!(clients.identify(&headers(&basic("tok-b"))).unwrap().actor.agent, "ci");
        assert_eq!(clients.identify(&headers("Bearer tok-b")).unwrap().actor.session, "b");
        assert_eq!(clients.identify(&headers(&basic("x:tok-c"))).err(), Some(Unknown::Wrong));
        assert_eq!(clients.identify(&headers("Digest tok-a")).err(), Some(Unknown::Wrong));
        assert_eq!(clients.identify(&HeaderMap::new()).err(), Some(Unknown::Missing));
        let bob = clients.identify(&headers("Bearer tok-b")).unwrap();
        let (one, two) = (bob.slot(), bob.slot());
        assert!(one.is_some() && two.is_some() && bob.slot().is_none(), "two places for bob");
        drop(one);
        assert!(bob.slot().is_some());
    }

    #[test]
    fn bad_files_are_refused() {
        assert!(Clients::parse("").unwrap_err().contains("clients"));
        let short = "[[clients]]\ntoken_sha256 = \"ab\"\nuser = \"a\"\nsession = \"s\"\n";
        assert!(Clients::parse(short).unwrap_err().contains("64 hex digits"));
        let twice = format!(
            "[[clients]]\ntoken_sha256 = \"{h}\"\nuser = \"a\"\nsession = \"s\"\n[[clients]]\ntoken_sha256 = \"{h}\"\nuser = \"b\"\nsession = \"t\"\n",
            h = hash("x")
        );
        assert!(Clients::parse(&twice).unwrap_err().contains("same token"));
        let extra =
            format!("[[clients]]\ntoken_sha256 = \"{}\"\nuser = \"a\"\nsession = \"s\"\nrole = \"admin\"\n", hash("x"));
        assert!(Clients::parse(&extra).is_err());
    }
}
