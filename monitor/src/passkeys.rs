//! Passkeys of approvers: enrolment links, the enrolled credentials (kept
//! in `<data>/passkeys.json`), and the WebAuthn ceremonies of the approval
//! page (sign-in, and the assertion that resolves one approval).
//!
//! An assertion that resolves an approval is bound to it: its challenge is
//! the SHA-256 of the approval id, the request hash, the outcome chosen and
//! a fresh nonce, so a signature made for one approval, one request or one
//! outcome is worth nothing for another, and each ceremony is taken once.
//!
//! A passkey registered from a link works only once an admin confirms it
//! (`wardenctl approvers confirm NAME KEY`), having heard its key id from
//! the approver: a leaked link enrols nothing that counts.
//!
//! Signing in names nobody: passkeys are discoverable (enrolment requires a
//! resident key), the sign-in's request lists no credential, and the
//! approver is found by the credential the assertion names, among
//! confirmed passkeys only. Whoever asks to sign in learns neither who the
//! approvers are nor their credential ids.
//!
//! Nobody signed in can hold memory here: a sign-in's challenge is made
//! without state (a timestamp and a nonce, authenticated with a key of this
//! process) and only an assertion that verifies is remembered, to be taken
//! once. Links (made by admins), sign-ins (made by a verified passkey) and
//! approval ceremonies (made by a sign-in, a few each) are bounded apart.
//!
//! Locks: `writing` before `enrolled` before `open`, never the other way.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use webauthn_rs::prelude::{
    CredentialID, Passkey, PasskeyAuthentication, PasskeyRegistration, PublicKeyCredential,
    RegisterPublicKeyCredential, Url, Uuid, Webauthn, WebauthnBuilder,
};

/// How long an enrolment link stays valid.
pub(crate) const LINK_VALID: Duration = Duration::from_secs(10 * 60);
/// How long a ceremony (the browser asking the authenticator) may take.
const CEREMONY_VALID: Duration = Duration::from_secs(3 * 60);
/// How long a sign-in on the page lasts.
pub(crate) const SIGN_IN_VALID: Duration = Duration::from_secs(12 * 3600);
/// Open enrolment links at most (only admins make them).
const MAX_LINKS: usize = 256;
/// Sign-ins at most; the oldest goes first (only a verified passkey makes one).
const MAX_SESSIONS: usize = 1024;
/// Sign-ins of one approver at most; that approver's oldest goes first.
const MAX_SESSIONS_PER_APPROVER: usize = 16;
/// Approval ceremonies open per sign-in; the oldest goes first.
const MAX_CEREMONIES_PER_SESSION: usize = 8;
/// A registered passkey must be confirmed within this, or it never counts.
const CONFIRM_WITHIN: Duration = Duration::from_secs(3600);
/// Sign-in challenges used and not yet expired, at most.
const MAX_SEEN: usize = 65_536;

/// An approver's passkey, as kept.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Enrolled {
    /// The approver credential it stands for.
    pub(crate) name: String,
    /// That credential's groups when it was enrolled.
    pub(crate) groups: Vec<String>,
    /// The public key and its id.
    pub(crate) passkey: Passkey,
    /// The highest signature counter seen (0: the authenticator keeps none).
    #[serde(default)]
    pub(crate) counter: u32,
    /// An admin confirmed it: only then does it sign in and approve.
    #[serde(default)]
    pub(crate) confirmed: bool,
    /// When, nanoseconds since the Unix epoch.
    pub(crate) enrolled_unix_ns: i64,
    /// The admin credential that made the link.
    pub(crate) enrolled_by: String,
    /// Last used, nanoseconds since the Unix epoch.
    #[serde(default)]
    pub(crate) used_unix_ns: Option<i64>,
}

impl Enrolled {
    /// The key id people compare and type: the first 16 hex digits of the
    /// SHA-256 of the credential id.
    pub(crate) fn key_id(&self) -> String {
        key_id(self.passkey.cred_id())
    }
}

fn key_id(credential: &CredentialID) -> String {
    let bytes: &[u8] = credential.as_ref();
    hex::encode(Sha256::digest(bytes)).get(..16).unwrap_or_default().to_owned()
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct File {
    enrolled: Vec<Enrolled>,
}

/// A single-use enrolment link.
struct Link {
    name: String,
    groups: Vec<String>,
    by: String,
    until: Instant,
    /// The registration under way from this link.
    registration: Option<PasskeyRegistration>,
}

/// What an approval ceremony commits to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Binding {
    pub(crate) approval_id: String,
    pub(crate) request_hash: String,
    pub(crate) approve: bool,
}

impl Binding {
    /// The challenge: SHA-256 over the approval id, the request hash, the
    /// outcome and the nonce, each length-prefixed.
    pub(crate) fn challenge(&self, nonce: &[u8; 32]) -> [u8; 32] {
        let mut hash = Sha256::new();
        hash.update(b"warden approval v1\0");
        let outcome: &[u8] = if self.approve { b"approve" } else { b"deny" };
        for part in [self.approval_id.as_bytes(), self.request_hash.as_bytes(), outcome, nonce] {
            hash.update(u64::try_from(part.len()).unwrap_or(u64::MAX).to_be_bytes());
            hash.update(part);
        }
        hash.finalize().into()
    }
}

/// An approval ceremony under way.
struct Ceremony {
    state: PasskeyAuthentication,
    binding: Binding,
    challenge: [u8; 32],
    session: [u8; 32],
    opened: Instant,
}

/// A signed-in approver on the page.
#[derive(Debug, Clone)]
pub(crate) struct SignedIn {
    pub(crate) name: String,
    pub(crate) csrf: String,
    pub(crate) key_id: String,
    opened: Instant,
}

#[derive(Default)]
struct Open {
    links: HashMap<[u8; 32], Link>,
    ceremonies: HashMap<[u8; 32], Ceremony>,
    sessions: HashMap<[u8; 32], SignedIn>,
    /// Sign-in challenges taken, until they expire.
    seen: HashMap<Vec<u8>, Instant>,
}

impl Open {
    fn sweep(&mut self, now: Instant) {
        self.links.retain(|_, l| l.until > now);
        self.sessions.retain(|_, s| now.duration_since(s.opened) < SIGN_IN_VALID);
        let sessions = &self.sessions;
        // A ceremony lives no longer than its sign-in.
        self.ceremonies
            .retain(|_, c| now.duration_since(c.opened) < CEREMONY_VALID && sessions.contains_key(&c.session));
        self.seen.retain(|_, until| *until > now);
    }
}

/// Why a passkey step failed: said to the page as it is.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PasskeyError {
    /// The link, ceremony or sign-in is unknown, used or expired.
    #[error("{0}")]
    Gone(String),
    /// The assertion or registration does not verify.
    #[error("{0}")]
    Refused(String),
    /// There is no approval page (no `--web`), or too much is open.
    #[error("{0}")]
    Unavailable(String),
    /// `passkeys.json` cannot be written.
    #[error("{0}")]
    Store(String),
}

/// The relying party: the page's origin and its WebAuthn verifier.
pub(crate) struct RelyingParty {
    pub(crate) origin: Url,
    webauthn: Webauthn,
}

/// Where the enrolled passkeys are kept: `passkeys.json` in the data
/// folder, or a shared store (several monitors on one database).
pub(crate) trait Keep: Send + Sync {
    /// Changes the kept list with `change`, starting from the list as kept
    /// now (`current` is this monitor's copy, which another monitor may have
    /// changed since), and keeps the result, which it returns. Blocking:
    /// call it off the async workers.
    fn update(
        &self,
        current: &[Enrolled],
        change: &mut dyn FnMut(&mut Vec<Enrolled>) -> Result<(), PasskeyError>,
    ) -> Result<Vec<Enrolled>, PasskeyError>;
}

/// `passkeys.json`, rewritten whole (0600) on each change.
struct FileKeep(PathBuf);

impl Keep for FileKeep {
    fn update(
        &self,
        current: &[Enrolled],
        change: &mut dyn FnMut(&mut Vec<Enrolled>) -> Result<(), PasskeyError>,
    ) -> Result<Vec<Enrolled>, PasskeyError> {
        let mut next = current.to_vec();
        change(&mut next)?;
        let text = serde_json::to_vec_pretty(&File { enrolled: next.clone() })
            .map_err(|e| PasskeyError::Store(e.to_string()))?;
        crate::config::write_private(&self.0, &text).map_err(|e| PasskeyError::Store(e.to_string()))?;
        Ok(next)
    }
}

/// The enrolled passkeys in `passkeys.json` of the data folder `data`, if any.
pub(crate) fn read_file(data: &Path) -> Result<Vec<Enrolled>, String> {
    let path = data.join("passkeys.json");
    match std::fs::read(&path) {
        Ok(bytes) => {
            Ok(serde_json::from_slice::<File>(&bytes).map_err(|e| format!("{}: {e}", path.display()))?.enrolled)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// The approvers' passkeys and everything open on the approval page.
pub(crate) struct Book {
    /// Where they are kept; `None`: nowhere (no passkey can be enrolled).
    keep: Option<Box<dyn Keep>>,
    enrolled: Mutex<Vec<Enrolled>>,
    open: Mutex<Open>,
    party: OnceLock<RelyingParty>,
    /// Held by whoever changes `enrolled` (and writes the file), for the
    /// whole change: writers one at a time, readers never waiting on a write.
    writing: Mutex<()>,
    /// Authenticates the sign-in challenges this process made.
    key: [u8; 32],
    /// Sign-in challenges carry the milliseconds since this: a monotonic
    /// clock, which a change of the system's time does not move.
    epoch: Instant,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn random<const N: usize>() -> Result<[u8; N], PasskeyError> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).map_err(|e| PasskeyError::Unavailable(format!("no randomness: {e}")))?;
    Ok(bytes)
}

fn hashed(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// A secret handed out (link token, ceremony id, cookie): 32 random bytes,
/// base64url, and the SHA-256 under which it is kept.
fn secret() -> Result<(String, [u8; 32]), PasskeyError> {
    let text = URL_SAFE_NO_PAD.encode(random::<32>()?);
    let hash = hashed(&text);
    Ok((text, hash))
}

/// Whether `a == b`, in time that depends on the length only.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// HMAC-SHA-256 (RFC 2104) of `message` under `key`.
fn hmac(key: &[u8; 32], message: &[&[u8]]) -> [u8; 32] {
    let mut inner = Sha256::new();
    inner.update(key.map(|b| b ^ 0x36));
    inner.update([0x36u8; 32]);
    for part in message {
        inner.update(part);
    }
    let mut outer = Sha256::new();
    outer.update(key.map(|b| b ^ 0x5c));
    outer.update([0x5cu8; 32]);
    outer.update(inner.finalize());
    outer.finalize().into()
}

/// Sets the field at `path` (which must exist) of `json` to `value`.
fn set(json: &mut serde_json::Value, path: &[&str], value: serde_json::Value) -> Result<(), PasskeyError> {
    let mut at = json;
    for step in path {
        at =
            at.get_mut(*step).ok_or_else(|| PasskeyError::Unavailable(format!("no `{step}` in the WebAuthn state")))?;
    }
    *at = value;
    Ok(())
}

/// The JSON of a value whose WebAuthn challenge is replaced by `challenge`
/// at `path` (webauthn-rs draws its own; ours are derived).
fn with_challenge(value: &impl Serialize, path: &[&str], challenge: &[u8]) -> Result<serde_json::Value, PasskeyError> {
    let mut json = serde_json::to_value(value).map_err(|e| PasskeyError::Unavailable(e.to_string()))?;
    set(&mut json, path, serde_json::Value::String(URL_SAFE_NO_PAD.encode(challenge)))?;
    Ok(json)
}

fn state_with(state: &PasskeyAuthentication, challenge: &[u8]) -> Result<PasskeyAuthentication, PasskeyError> {
    serde_json::from_value(with_challenge(state, &["ast", "challenge"], challenge)?)
        .map_err(|e| PasskeyError::Unavailable(e.to_string()))
}

/// The challenge a browser signed, read from the assertion's client data.
fn signed_challenge(credential: &PublicKeyCredential) -> Option<Vec<u8>> {
    let client_data: serde_json::Value = serde_json::from_slice(credential.response.client_data_json.as_ref()).ok()?;
    URL_SAFE_NO_PAD.decode(client_data.get("challenge")?.as_str()?).ok()
}

const GONE_LINK: &str = "this enrolment link is unknown, used or expired: ask an admin for a new one";

impl Book {
    /// The passkeys enrolled in `data`, read now.
    pub(crate) fn open(data: &Path) -> Result<Self, String> {
        let enrolled = read_file(data)?;
        Self::kept(Box::new(FileKeep(data.join("passkeys.json"))), enrolled)
    }

    /// A book whose passkeys `keep` keeps, `enrolled` as kept now.
    pub(crate) fn kept(keep: Box<dyn Keep>, enrolled: Vec<Enrolled>) -> Result<Self, String> {
        let key = random::<32>().map_err(|e| e.to_string())?;
        Ok(Self {
            keep: Some(keep),
            enrolled: Mutex::new(enrolled),
            writing: Mutex::default(),
            open: Mutex::default(),
            party: OnceLock::new(),
            key,
            epoch: Instant::now(),
        })
    }

    /// A book that keeps nothing: no passkey can be enrolled in it.
    pub(crate) fn empty() -> Self {
        Self {
            keep: None,
            enrolled: Mutex::default(),
            writing: Mutex::default(),
            open: Mutex::default(),
            party: OnceLock::new(),
            key: [0; 32],
            epoch: Instant::now(),
        }
    }

    /// Sets the page's origin (once, when the page starts serving).
    pub(crate) fn serve_at(&self, origin: &Url) -> Result<(), String> {
        if self.keep.is_none() {
            return Err("this monitor keeps no passkeys".into());
        }
        let rp_id = origin.host_str().ok_or_else(|| format!("the page's origin {origin} has no host"))?;
        let webauthn = WebauthnBuilder::new(rp_id, origin)
            .and_then(|b| b.rp_name("Warden approvals").build())
            .map_err(|e| format!("WebAuthn relying party for {origin}: {e}"))?;
        self.party
            .set(RelyingParty { origin: origin.clone(), webauthn })
            .map_err(|_| "the approval page is already serving".to_owned())
    }

    /// The relying party, once the page serves.
    pub(crate) fn party(&self) -> Result<&RelyingParty, PasskeyError> {
        self.party
            .get()
            .ok_or_else(|| PasskeyError::Unavailable("there is no approval page: start wardend with --web ADDR".into()))
    }

    /// Whether passkey `key_id` is still enrolled and confirmed.
    pub(crate) fn still_confirmed(&self, key_id: &str) -> bool {
        lock(&self.enrolled).iter().any(|e| e.confirmed && e.key_id() == key_id)
    }

    /// Every enrolled passkey.
    pub(crate) fn list(&self) -> Vec<Enrolled> {
        lock(&self.enrolled).clone()
    }

    /// Takes the list as another monitor on the same store changed it:
    /// `fetch` reads it while this book's writers wait, so that a change
    /// made here meanwhile is never overwritten by an older list.
    pub(crate) fn replace_with<E>(&self, fetch: impl FnOnce() -> Result<Vec<Enrolled>, E>) -> Result<(), E> {
        let _writing = lock(&self.writing);
        let enrolled = fetch()?;
        *lock(&self.enrolled) = enrolled;
        Ok(())
    }

    /// Changes the enrolled list with `change` and keeps it, or changes nothing.
    ///
    /// Writers take `writing` for the whole of it, `after` included (which
    /// runs once the change is kept); `enrolled` is held only to copy and to
    /// swap, so a reader never waits for the fsync.
    fn update<T, U>(
        &self,
        change: impl FnOnce(&mut Vec<Enrolled>) -> Result<T, PasskeyError>,
        after: impl FnOnce(&T) -> Result<U, PasskeyError>,
    ) -> Result<(T, U), PasskeyError> {
        let _writing = lock(&self.writing);
        let keep = self.keep.as_ref().ok_or_else(|| PasskeyError::Store("this monitor keeps no passkeys".into()))?;
        let current = lock(&self.enrolled).clone();
        // The kept list may be newer than this copy (another monitor): the
        // change runs on it, once.
        let (mut change, mut answer) = (Some(change), None);
        let next = keep.update(&current, &mut |list| {
            let change = change.take().ok_or_else(|| PasskeyError::Store("a change ran twice".into()))?;
            answer = Some(change(list)?);
            Ok(())
        })?;
        let answer = answer.ok_or_else(|| PasskeyError::Store("the change did not run".into()))?;
        *lock(&self.enrolled) = next;
        let later = after(&answer)?;
        Ok((answer, later))
    }

    /// A single-use link for approver `name` (with its `groups`), made by `by`:
    /// the URL to open, valid for [`LINK_VALID`].
    pub(crate) fn link(&self, name: &str, groups: Vec<String>, by: &str) -> Result<String, PasskeyError> {
        let party = self.party()?;
        let (token, hash) = secret()?;
        let mut open = lock(&self.open);
        open.sweep(Instant::now());
        if open.links.len() >= MAX_LINKS {
            return Err(PasskeyError::Unavailable(format!("{MAX_LINKS} enrolment links are open; let some expire")));
        }
        let link = Link {
            name: name.to_owned(),
            groups,
            by: by.to_owned(),
            until: Instant::now() + LINK_VALID,
            registration: None,
        };
        open.links.insert(hash, link);
        let mut url = party.origin.join("enroll").map_err(|e| PasskeyError::Unavailable(e.to_string()))?;
        url.set_fragment(Some(&token));
        Ok(url.to_string())
    }

    /// Starts registering a passkey from the link `token`: the options for
    /// `navigator.credentials.create`.
    pub(crate) fn start_enrolment(&self, token: &str) -> Result<(String, serde_json::Value), PasskeyError> {
        let party = self.party()?;
        let enrolled = lock(&self.enrolled);
        let mut open = lock(&self.open);
        open.sweep(Instant::now());
        let link = open.links.get_mut(&hashed(token)).ok_or_else(|| PasskeyError::Gone(GONE_LINK.into()))?;
        if link.registration.is_some() {
            // One registration per link: a second start (someone else
            // holding the link) spends it instead.
            open.links.remove(&hashed(token));
            return Err(PasskeyError::Gone(
                "this enrolment link was already opened once: ask an admin for a new one".into(),
            ));
        }
        let existing: Vec<CredentialID> =
            enrolled.iter().filter(|e| e.name == link.name).map(|e| e.passkey.cred_id().clone()).collect();
        // A random user handle: one nobody can compute, so that no other
        // page on this name can make a passkey that replaces this one.
        let handle = random::<16>()?;
        let (options, registration) = party
            .webauthn
            .start_passkey_registration(Uuid::from_bytes(handle), &link.name, &link.name, Some(existing))
            .map_err(|e| PasskeyError::Refused(format!("cannot start a registration: {e}")))?;
        link.registration = Some(registration);
        let mut options = serde_json::to_value(options).map_err(|e| PasskeyError::Unavailable(e.to_string()))?;
        // A discoverable credential (a resident key): signing in names
        // nobody, so the authenticator must find the passkey by itself.
        // webauthn-rs's passkeys discourage one; the browser enforces this.
        let selection = ["publicKey", "authenticatorSelection"];
        set(&mut options, &[&selection[..], &["residentKey"]].concat(), "required".into())?;
        set(&mut options, &[&selection[..], &["requireResidentKey"]].concat(), true.into())?;
        Ok((link.name.clone(), options))
    }

    /// Finishes the registration from `token` with the browser's
    /// credential: the link is spent, and the passkey is enrolled,
    /// unconfirmed (inert until an admin confirms it).
    pub(crate) fn finish_enrolment(
        &self,
        token: &str,
        credential: &RegisterPublicKeyCredential,
        now_unix_ns: i64,
    ) -> Result<Enrolled, PasskeyError> {
        let party = self.party()?;
        let link = {
            let mut open = lock(&self.open);
            open.sweep(Instant::now());
            // Spent whatever happens next: a link is tried once.
            open.links.remove(&hashed(token)).ok_or_else(|| PasskeyError::Gone(GONE_LINK.into()))?
        };
        let registration = link
            .registration
            .ok_or_else(|| PasskeyError::Refused("the registration was not started from this link".into()))?;
        // What the browser says of it (`credProps`, where it tells): one
        // the authenticator does not keep could never sign in.
        if credential.extensions.cred_props.as_ref().and_then(|p| p.rk) == Some(false) {
            return Err(PasskeyError::Refused(
                "this passkey is not discoverable (kept on the authenticator), so it could never sign in: \
                 use an authenticator that keeps passkeys, and ask an admin for a new link"
                    .into(),
            ));
        }
        let passkey = party
            .webauthn
            .finish_passkey_registration(credential, &registration)
            .map_err(|e| PasskeyError::Refused(format!("the passkey was not registered: {e}")))?;
        let entry = Enrolled {
            name: link.name,
            groups: link.groups,
            passkey,
            counter: 0,
            confirmed: false,
            enrolled_unix_ns: now_unix_ns,
            enrolled_by: link.by,
            used_unix_ns: None,
        };
        self.update(
            |enrolled| {
                if enrolled
                    .iter()
                    .any(|e| e.passkey.cred_id() == entry.passkey.cred_id() || e.key_id() == entry.key_id())
                {
                    return Err(PasskeyError::Refused("this passkey is already enrolled".into()));
                }
                enrolled.push(entry.clone());
                Ok(())
            },
            |()| Ok(()),
        )?;
        Ok(entry)
    }

    /// Confirms approver `name`'s passkey `key_id` (an admin heard it from
    /// the approver): from now on it signs in and approves.
    pub(crate) fn confirm(&self, name: &str, key_id: &str, now_unix_ns: i64) -> Result<Enrolled, PasskeyError> {
        let confirm = |enrolled: &mut Vec<Enrolled>| {
            let entry = enrolled.iter_mut().find(|e| e.name == name && e.key_id() == key_id).ok_or_else(|| {
                PasskeyError::Gone(format!("approver `{name}` has no passkey {key_id}: see `wardenctl approvers list`"))
            })?;
            let age = u64::try_from(now_unix_ns.saturating_sub(entry.enrolled_unix_ns)).unwrap_or(0);
            if !entry.confirmed && u128::from(age) > CONFIRM_WITHIN.as_nanos() {
                return Err(PasskeyError::Gone(format!(
                    "passkey {key_id} was registered over an hour ago and never confirmed: revoke it and enrol again"
                )));
            }
            entry.confirmed = true;
            Ok(entry.clone())
        };
        self.update(confirm, |_| Ok(())).map(|(entry, ())| entry)
    }

    /// Removes every passkey of approver `name`, and its sign-ins; how many.
    pub(crate) fn revoke(&self, name: &str) -> Result<usize, PasskeyError> {
        let _writing = lock(&self.writing);
        let keep = self.keep.as_ref().ok_or_else(|| PasskeyError::Store("this monitor keeps no passkeys".into()))?;
        let current = lock(&self.enrolled).clone();
        let mut removed = 0;
        let next = keep.update(&current, &mut |list| {
            let before = list.len();
            list.retain(|e| e.name != name);
            removed = before - list.len();
            Ok(())
        })?;
        *lock(&self.enrolled) = next;
        // Under the same lock as a sign-in's creation (see `finish_sign_in`).
        let mut open = lock(&self.open);
        open.sessions.retain(|_, s| s.name != name);
        open.sweep(Instant::now());
        Ok(removed)
    }

    fn confirmed(enrolled: &[Enrolled], name: &str) -> Vec<Passkey> {
        enrolled.iter().filter(|e| e.confirmed && e.name == name).map(|e| e.passkey.clone()).collect()
    }

    /// Starts a sign-in: the options for `navigator.credentials.get`, for
    /// any discoverable passkey (an empty `allowCredentials`: whoever asks
    /// learns nothing of who the approvers are or of their credentials),
    /// user verification required, and a challenge that is a timestamp and
    /// a nonce under this process's key. Nothing is kept, nothing is read.
    pub(crate) fn start_sign_in(&self) -> Result<serde_json::Value, PasskeyError> {
        let party = self.party()?;
        // webauthn-rs's passkey request over no credential: the same request
        // as its discoverable one (behind its `conditional-ui` feature),
        // which would also ask for the browser's autofill mediation.
        let (options, _) = party
            .webauthn
            .start_passkey_authentication(&[])
            .map_err(|e| PasskeyError::Refused(format!("cannot start a sign-in: {e}")))?;
        let stamp = self.now_ms().to_be_bytes();
        let nonce = random::<16>()?;
        let tag = hmac(&self.key, &[b"warden sign-in v1", &stamp, &nonce]);
        let challenge = [&stamp[..], &nonce[..], tag.get(..16).unwrap_or_default()].concat();
        with_challenge(&options, &["publicKey", "challenge"], &challenge)
    }

    /// Checks a sign-in challenge this process made, not expired.
    fn sign_in_challenge(&self, challenge: &[u8]) -> Result<(), PasskeyError> {
        let refused = || PasskeyError::Refused("this sign-in was not started here, or has expired: start again".into());
        let (stamp, rest) = challenge.split_first_chunk::<8>().ok_or_else(refused)?;
        let (nonce, tag) = rest.split_first_chunk::<16>().ok_or_else(refused)?;
        let expected = hmac(&self.key, &[b"warden sign-in v1", stamp, nonce]);
        if tag.len() != 16 || !constant_time_eq(tag, expected.get(..16).unwrap_or_default()) {
            return Err(refused());
        }
        let (now, made) = (self.now_ms(), u64::from_be_bytes(*stamp));
        if made > now || u128::from(now - made) > CEREMONY_VALID.as_millis() {
            return Err(refused());
        }
        Ok(())
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Starts the assertion that resolves one approval, for the approver
    /// signed in with `session`: bound to `binding` and a fresh nonce.
    pub(crate) fn start_resolve(
        &self,
        session: &str,
        binding: Binding,
    ) -> Result<(String, serde_json::Value), PasskeyError> {
        let party = self.party()?;
        let signed_in = self.signed_in(session)?;
        let passkeys = Self::confirmed(&lock(&self.enrolled), &signed_in.name);
        let (options, state) = party
            .webauthn
            .start_passkey_authentication(&passkeys)
            .map_err(|e| PasskeyError::Refused(format!("cannot start an assertion: {e}")))?;
        let challenge = binding.challenge(&random::<32>()?);
        let options = with_challenge(&options, &["publicKey", "challenge"], &challenge)?;
        let state = state_with(&state, &challenge)?;
        let (id, hash) = secret()?;
        let session = hashed(session);
        let mut open = lock(&self.open);
        open.sweep(Instant::now());
        // A few at once per sign-in: the oldest goes.
        let mut mine: Vec<([u8; 32], Instant)> =
            open.ceremonies.iter().filter(|(_, c)| c.session == session).map(|(k, c)| (*k, c.opened)).collect();
        mine.sort_by_key(|(_, opened)| *opened);
        for (old, _) in mine.iter().take((mine.len() + 1).saturating_sub(MAX_CEREMONIES_PER_SESSION)) {
            open.ceremonies.remove(old);
        }
        open.ceremonies.insert(hash, Ceremony { state, binding, challenge, session, opened: Instant::now() });
        Ok((id, options))
    }

    /// Verifies an assertion against `state` and then, as a writer (see
    /// `update`), the passkey: enrolled, confirmed, its counter moving
    /// forward, then kept with the new counter. `then` runs once it is kept,
    /// still as the writer.
    fn verify<T>(
        &self,
        credential: &PublicKeyCredential,
        state: &PasskeyAuthentication,
        now_unix_ns: i64,
        then: impl FnOnce(&Enrolled) -> Result<T, PasskeyError>,
    ) -> Result<(Enrolled, T), PasskeyError> {
        let party = self.party()?;
        let result = party
            .webauthn
            .finish_passkey_authentication(credential, state)
            .map_err(|e| PasskeyError::Refused(format!("the passkey assertion does not verify: {e}")))?;
        if !result.user_verified() {
            return Err(PasskeyError::Refused("the authenticator did not verify the user (PIN or biometrics)".into()));
        }
        let update = |enrolled: &mut Vec<Enrolled>| {
            let entry = enrolled
                .iter_mut()
                .find(|e| e.passkey.cred_id() == result.cred_id())
                .filter(|e| e.confirmed)
                .ok_or_else(|| {
                PasskeyError::Refused("this passkey is not enrolled and confirmed (revoked?)".into())
            })?;
            // Against the newest counter, not the one the ceremony began with.
            if result.counter() > 0 && result.counter() <= entry.counter {
                return Err(PasskeyError::Refused(format!(
                    "the passkey's counter went back ({} after {}): it may be cloned",
                    result.counter(),
                    entry.counter
                )));
            }
            entry.passkey.update_credential(&result);
            entry.counter = entry.counter.max(result.counter());
            entry.used_unix_ns = Some(now_unix_ns);
            Ok(entry.clone())
        };
        self.update(update, then)
    }

    /// Finishes a sign-in: a cookie value for the page and the sign-in.
    ///
    /// The approver is the one whose confirmed passkey has the credential
    /// id the assertion names, verified with that passkey's public key (the
    /// user handle beside it is not signed, so it decides nothing).
    pub(crate) fn finish_sign_in(
        &self,
        credential: &PublicKeyCredential,
        now_unix_ns: i64,
    ) -> Result<(String, SignedIn), PasskeyError> {
        let party = self.party()?;
        let challenge = signed_challenge(credential)
            .ok_or_else(|| PasskeyError::Refused("no challenge in the assertion".into()))?;
        self.sign_in_challenge(&challenge)?;
        let passkey = lock(&self.enrolled)
            .iter()
            .find(|e| e.confirmed && constant_time_eq(e.passkey.cred_id().as_ref(), credential.raw_id.as_ref()))
            .map(|e| e.passkey.clone())
            .ok_or_else(|| {
                PasskeyError::Refused(
                    "no confirmed passkey has this credential: ask an admin to confirm yours, or for an enrolment link"
                        .into(),
                )
            })?;
        let (_, state) = party
            .webauthn
            .start_passkey_authentication(std::slice::from_ref(&passkey))
            .map_err(|e| PasskeyError::Refused(format!("no passkey to sign in with: {e}")))?;
        let state = state_with(&state, &challenge)?;
        let (cookie, hash) = secret()?;
        let (csrf, _) = secret()?;
        let (_, signed_in) = self.verify(credential, &state, now_unix_ns, |entry| {
            // Under the enrolled lock: a revocation comes wholly before
            // this sign-in (and refuses it) or after (and ends it).
            let mut open = lock(&self.open);
            open.sweep(Instant::now());
            if open.seen.contains_key(&challenge) {
                return Err(PasskeyError::Refused("this sign-in was already used: start again".into()));
            }
            if open.seen.len() >= MAX_SEEN {
                return Err(PasskeyError::Unavailable("too many sign-ins at once; try again in a few minutes".into()));
            }
            open.seen.insert(challenge.clone(), Instant::now() + CEREMONY_VALID);
            // One approver's sign-ins push out only that approver's oldest;
            // all of them together, the oldest of all.
            let mine = open.sessions.values().filter(|s| s.name == entry.name).count();
            let oldest = if mine >= MAX_SESSIONS_PER_APPROVER {
                open.sessions
                    .iter()
                    .filter(|(_, s)| s.name == entry.name)
                    .min_by_key(|(_, s)| s.opened)
                    .map(|(k, _)| *k)
            } else if open.sessions.len() >= MAX_SESSIONS {
                open.sessions.iter().min_by_key(|(_, s)| s.opened).map(|(k, _)| *k)
            } else {
                None
            };
            if let Some(oldest) = oldest {
                open.sessions.remove(&oldest);
                open.sweep(Instant::now());
            }
            let signed_in = SignedIn { name: entry.name.clone(), csrf, key_id: entry.key_id(), opened: Instant::now() };
            open.sessions.insert(hash, signed_in.clone());
            Ok(signed_in)
        })?;
        Ok((cookie, signed_in))
    }

    /// The approver signed in with this cookie value.
    pub(crate) fn signed_in(&self, cookie: &str) -> Result<SignedIn, PasskeyError> {
        let mut open = lock(&self.open);
        open.sweep(Instant::now());
        open.sessions
            .get(&hashed(cookie))
            .cloned()
            .ok_or_else(|| PasskeyError::Gone("sign in with your passkey".into()))
    }

    /// How many approval ceremonies are open.
    #[cfg(test)]
    pub(crate) fn ceremonies_open(&self) -> usize {
        let mut open = lock(&self.open);
        open.sweep(Instant::now());
        open.ceremonies.len()
    }

    /// Ends a sign-in.
    pub(crate) fn sign_out(&self, cookie: &str) {
        let mut open = lock(&self.open);
        open.sessions.remove(&hashed(cookie));
        open.sweep(Instant::now());
    }

    /// Finishes the assertion of a resolution: what it was bound to, and
    /// the passkey that signed, which must be the signed-in approver's.
    /// The ceremony is spent first, whatever follows.
    pub(crate) fn finish_resolve(
        &self,
        session: &str,
        ceremony_id: &str,
        credential: &PublicKeyCredential,
        now_unix_ns: i64,
    ) -> Result<(Binding, Enrolled), PasskeyError> {
        let signed_in = self.signed_in(session)?;
        let ceremony = {
            let mut open = lock(&self.open);
            open.sweep(Instant::now());
            open.ceremonies.remove(&hashed(ceremony_id)).ok_or_else(|| {
                PasskeyError::Gone("this passkey request is unknown, used or expired: start again".into())
            })?
        };
        if ceremony.session != hashed(session) {
            return Err(PasskeyError::Refused("this passkey request belongs to another sign-in".into()));
        }
        if signed_challenge(credential).as_deref() != Some(ceremony.challenge.as_slice()) {
            return Err(PasskeyError::Refused("the assertion was made for another challenge".into()));
        }
        let (entry, ()) = self.verify(credential, &ceremony.state, now_unix_ns, |entry| {
            if entry.name == signed_in.name {
                Ok(())
            } else {
                Err(PasskeyError::Refused("this passkey is not the signed-in approver's".into()))
            }
        })?;
        Ok((ceremony.binding, entry))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_is_rfc_2104_and_the_binding_separates_every_part() {
        // A known answer computed elsewhere:
        // python3 -c 'import hmac; print(hmac.new(b"k"*32, b"msg", "sha256").hexdigest())'
        let tag = hmac(&[b'k'; 32], &[b"m", b"sg"]);
        assert_eq!(hex::encode(tag), "ce3cf455678bd9de76d2f2e35c4b385d37d2b6f478869f052c8e3b4587a9f1fd");
        let nonce = [7u8; 32];
        let base = Binding { approval_id: "apr-1".into(), request_hash: "ab".into(), approve: true };
        let other = [
            Binding { approval_id: "apr-2".into(), ..base.clone() },
            Binding { request_hash: "ac".into(), ..base.clone() },
            Binding { approve: false, ..base.clone() },
            // Length prefixes: moving a byte between fields changes it.
            Binding { approval_id: "apr-1a".into(), request_hash: "b".into(), ..base.clone() },
        ];
        for changed in other {
            assert_ne!(base.challenge(&nonce), changed.challenge(&nonce), "{changed:?}");
        }
        assert_ne!(base.challenge(&nonce), base.challenge(&[8u8; 32]));
    }
}
