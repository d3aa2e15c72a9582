//! wardend's configuration: an optional TOML file, overridden by flags, and
//! the credentials kept in the data folder (created on first start).

use std::io::Write;
use std::net::SocketAddr;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::auth::{CredentialConfig, Role, generate_token, hash_token};
use crate::duration::parse_duration;

/// Default listen address.
pub(crate) const DEFAULT_LISTEN: &str = "127.0.0.1:50051";
/// Default policy folder.
pub(crate) const DEFAULT_POLICIES: &str = "./policies";
/// Default data folder.
pub(crate) const DEFAULT_DATA: &str = "./.warden";
/// The credentials file in the data folder.
pub const CREDENTIALS_FILE: &str = "credentials.toml";
/// The checkpoint signing key in the data folder (outside the store).
pub(crate) const CHECKPOINT_KEY_FILE: &str = "checkpoint.key";
/// Signed checkpoints, one JSON line each, in the data folder.
pub const CHECKPOINT_LOG_FILE: &str = "checkpoints.jsonl";
/// The sled store's folder in the data folder.
pub const STORE_DIR: &str = "store";

/// A configuration problem, said so that a person can fix it.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A TOML file does not parse or has unknown keys.
    #[error("{path}: {message}")]
    Toml {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// A value is wrong.
    #[error("{key}: {message}")]
    Value {
        /// The setting.
        key: &'static str,
        /// Why.
        message: String,
    },
    /// No random numbers for tokens.
    #[error("cannot create a token: {0}")]
    Random(String),
}

/// Log output format.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, for log shippers.
    Json,
}

/// The TOML configuration file; every key optional.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// Address to listen on, e.g. `127.0.0.1:50051`.
    pub(crate) listen: Option<String>,
    /// Policy folder.
    pub(crate) policies: Option<PathBuf>,
    /// Data folder (store, tokens, credentials).
    pub(crate) data: Option<PathBuf>,
    /// `text` or `json`.
    pub(crate) log_format: Option<LogFormat>,
    /// How long an approval waits when no policy says (`@timeout`), e.g. `10m`.
    pub(crate) default_approval_timeout: Option<String>,
    /// The longest a grant (or an approval for a window) may last, e.g. `7d`.
    pub(crate) max_grant_duration: Option<String>,
    /// `fsync` (default: an answer means the record survives power loss) or
    /// `flush` (survives a killed process; faster).
    pub(crate) durability: Option<crate::store::Durability>,
    /// How often the audit head is signed, e.g. `5m` (and on shutdown).
    pub(crate) checkpoint_interval: Option<String>,
    /// Per-session rate limit, requests per second (off when not set).
    pub(crate) session_rate_per_second: Option<f64>,
    /// Per-session burst (default: one second's worth).
    pub(crate) session_burst: Option<u32>,
    /// Most approvals one session may have waiting at once (default 20).
    pub(crate) max_pending_per_session: Option<usize>,
    /// Most approvals one harness credential may have waiting at once.
    pub(crate) max_pending_per_harness: Option<usize>,
    /// TLS certificate chain (PEM file).
    pub(crate) tls_cert: Option<PathBuf>,
    /// TLS private key (PEM file).
    pub(crate) tls_key: Option<PathBuf>,
    /// CA (PEM file) for client certificates: mutual TLS.
    pub(crate) tls_client_ca: Option<PathBuf>,
    /// A Unix socket for local approvers and admins.
    pub(crate) socket: Option<PathBuf>,
    /// The uids that may connect to it (default: the data folder's owner).
    #[serde(default)]
    pub(crate) socket_uids: Vec<u32>,
    /// The approval page's listener (off when absent).
    pub(crate) web: Option<String>,
    /// The URL approvers open the page at (https, a DNS name; default on
    /// loopback: `http://localhost:PORT`).
    pub(crate) web_origin: Option<String>,
    /// Credentials, in addition to those in the data folder.
    #[serde(default)]
    pub(crate) credentials: Vec<CredentialConfig>,
    /// `[audit]`: retention of the audit log.
    #[serde(default)]
    pub(crate) audit: AuditFile,
    /// `[store]`: PostgreSQL instead of the embedded store.
    #[serde(default)]
    pub(crate) store: StoreFile,
    /// `[policy]`: proofs of the folder's invariants, the shadow folder.
    #[serde(default)]
    pub(crate) policy: PolicyFile,
}

/// The `[policy]` table.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PolicyFile {
    /// Refuse a policy folder with invariants when they cannot be proved
    /// at all (no cvc5); default: load it, with a warning in the status.
    pub(crate) require_proofs: Option<bool>,
    /// How long the solver may take on one question, e.g. `10s`.
    pub(crate) proof_timeout: Option<String>,
    /// A second policy folder decided beside the live one on every request,
    /// without effect on the answers (shadow policies).
    pub(crate) shadow_dir: Option<PathBuf>,
}

/// How invariants are proved on each load.
#[derive(Debug, Clone)]
pub struct ProofConfig {
    /// Without a solver, refuse (true) or load with a warning (false).
    pub required: bool,
    /// The solver's limit per question.
    pub timeout: Duration,
}

impl Default for ProofConfig {
    fn default() -> Self {
        Self { required: false, timeout: Duration::from_secs(10) }
    }
}

/// The `[store]` table.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StoreFile {
    /// `postgres://USER@HOST:PORT/DB?sslmode=verify-full`: the state and
    /// audit of several monitors (default: the embedded store in the data
    /// folder).
    pub(crate) url: Option<String>,
    /// A file whose first line is the database password (never in the URL).
    pub(crate) password_file: Option<PathBuf>,
    /// The CA (PEM) that signed the database's certificate (default: the
    /// system's CAs).
    pub(crate) ca_file: Option<PathBuf>,
}

/// The `[audit]` table.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AuditFile {
    /// Sealed segments whose newest record is older than this many days
    /// leave the live store.
    pub(crate) retain_days: Option<u32>,
    /// The oldest sealed segments leave the live store while it holds more
    /// than this (bytes, or a size such as `"20GiB"`).
    pub(crate) retain_bytes: Option<ByteSize>,
    /// Where segments that leave go (default: deleted).
    pub(crate) archive_dir: Option<PathBuf>,
    /// A segment is sealed at this size (default 16 MiB, at least 64 KiB).
    pub(crate) segment_bytes: Option<ByteSize>,
}

/// A size: a number of bytes, or text such as `512MiB`, `20GB`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(untagged)]
pub(crate) enum ByteSize {
    /// Bytes.
    Bytes(u64),
    /// With a unit.
    Text(#[serde(with = "byte_size_text")] u64),
}

impl ByteSize {
    fn bytes(self) -> u64 {
        match self {
            ByteSize::Bytes(n) | ByteSize::Text(n) => n,
        }
    }
}

mod byte_size_text {
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(value: &u64, out: S) -> Result<S::Ok, S::Error> {
        out.serialize_u64(*value)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(input: D) -> Result<u64, D::Error> {
        let text = String::deserialize(input)?;
        super::parse_size(&text).map_err(serde::de::Error::custom)
    }
}

/// `123`, `64KiB`, `512MB`, `20GiB`, `1TB` (KB = 1000, KiB = 1024).
pub(crate) fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().map_err(|_| format!("`{text}` is not a size (say e.g. 512MiB or 20GB)"))?;
    let scale: u64 = match unit.trim() {
        "" | "B" => 1,
        "KB" => 1_000,
        "KiB" => 1 << 10,
        "MB" => 1_000_000,
        "MiB" => 1 << 20,
        "GB" => 1_000_000_000,
        "GiB" => 1 << 30,
        "TB" => 1_000_000_000_000,
        "TiB" => 1 << 40,
        other => return Err(format!("unknown unit `{other}` in `{text}` (B, KB, KiB, MB, MiB, GB, GiB, TB, TiB)")),
    };
    number.checked_mul(scale).ok_or_else(|| format!("`{text}` is too large"))
}

/// Retention and layout of the audit log (DESIGN.md "Audit").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditConfig {
    /// Keep sealed segments whose newest record is at most this old.
    pub retain_days: Option<u32>,
    /// Keep at most this many bytes of segments (the oldest leave first).
    pub retain_bytes: Option<u64>,
    /// Move segments that leave here instead of deleting them.
    pub archive_dir: Option<PathBuf>,
    /// Seal a segment at this size.
    pub segment_bytes: u64,
}

impl Default for AuditConfig {
    fn default() -> Self {
        Self { retain_days: None, retain_bytes: None, archive_dir: None, segment_bytes: DEFAULT_SEGMENT_BYTES }
    }
}

impl AuditConfig {
    /// Whether anything ever leaves the live store.
    pub fn retains(&self) -> bool {
        self.retain_days.is_some() || self.retain_bytes.is_some()
    }
}

pub use crate::store::log::DEFAULT_SEGMENT_BYTES;

impl FileConfig {
    /// Reads a configuration file.
    pub fn read(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io { path: path.to_owned(), source })?;
        toml::from_str(&text).map_err(|e| ConfigError::Toml { path: path.to_owned(), message: e.to_string() })
    }
}

/// Settings after merging file and flags.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Policy folder.
    pub policies: PathBuf,
    /// Data folder.
    pub data: PathBuf,
    /// Log output format.
    pub log_format: LogFormat,
    /// How long an approval waits when no policy says.
    pub default_approval_timeout: Duration,
    /// The longest a grant may last.
    pub max_grant_duration: Duration,
    /// How durable an answer is.
    pub durability: crate::store::Durability,
    /// How often the audit head is signed.
    pub checkpoint_interval: Duration,
    /// Per-session rate limit.
    pub session_rate: Option<crate::ratelimit::Rate>,
    /// Most approvals one session may have waiting at once.
    pub max_pending_per_session: usize,
    /// Most approvals one harness credential may have waiting at once.
    pub max_pending_per_harness: usize,
    /// TLS certificate chain.
    pub tls_cert: Option<PathBuf>,
    /// TLS private key.
    pub tls_key: Option<PathBuf>,
    /// CA for client certificates.
    pub tls_client_ca: Option<PathBuf>,
    /// A Unix socket for local approvers and admins.
    pub socket: Option<PathBuf>,
    /// The uids that may connect to it.
    pub socket_uids: Vec<u32>,
    /// The approval page's listener.
    pub web: Option<String>,
    /// The URL approvers open the page at.
    pub web_origin: Option<String>,
    /// Credentials from the configuration file.
    pub credentials: Vec<CredentialConfig>,
    /// `[audit]`.
    pub audit: AuditConfig,
    /// PostgreSQL (`[store] url` or `--store`); `None`: the embedded store.
    pub store: Option<crate::store::postgres::PgOptions>,
    /// `[policy]`: proofs of invariants.
    pub proofs: ProofConfig,
    /// `[policy] shadow_dir`.
    pub shadow_dir: Option<PathBuf>,
}

/// Values given on the command line; `None` leaves the file's or the default.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `--listen`.
    pub listen: Option<String>,
    /// `--policies`.
    pub policies: Option<PathBuf>,
    /// `--data`.
    pub data: Option<PathBuf>,
    /// `--log-format`.
    pub log_format: Option<LogFormat>,
    /// `--store`.
    pub store: Option<String>,
}

impl Settings {
    /// Flags over file over defaults.
    pub fn merge(file: FileConfig, flags: Overrides) -> Result<Self, ConfigError> {
        let listen_text = flags.listen.or(file.listen).unwrap_or_else(|| DEFAULT_LISTEN.to_owned());
        let listen = listen_text.parse().map_err(|e| ConfigError::Value {
            key: "listen",
            message: format!("`{listen_text}` is not an address and port: {e}"),
        })?;
        let default_approval_timeout =
            positive_duration("default_approval_timeout", file.default_approval_timeout, Duration::from_secs(600))?;
        let max_grant_duration =
            positive_duration("max_grant_duration", file.max_grant_duration, Duration::from_secs(7 * 86_400))?;
        Ok(Self {
            listen,
            policies: flags.policies.or(file.policies).unwrap_or_else(|| PathBuf::from(DEFAULT_POLICIES)),
            data: flags.data.or(file.data).unwrap_or_else(|| PathBuf::from(DEFAULT_DATA)),
            log_format: flags.log_format.or(file.log_format).unwrap_or_default(),
            default_approval_timeout,
            max_grant_duration,
            durability: file.durability.unwrap_or_default(),
            checkpoint_interval: positive_duration(
                "checkpoint_interval",
                file.checkpoint_interval,
                Duration::from_secs(300),
            )?,
            session_rate: match file.session_rate_per_second {
                Some(per_second) => Some(crate::ratelimit::Rate::from_config(per_second, file.session_burst).ok_or(
                    ConfigError::Value { key: "session_rate_per_second", message: "must be a positive number".into() },
                )?),
                None => None,
            },
            max_pending_per_session: file.max_pending_per_session.unwrap_or(20),
            max_pending_per_harness: file.max_pending_per_harness.unwrap_or(100),
            tls_cert: file.tls_cert,
            tls_key: file.tls_key,
            tls_client_ca: file.tls_client_ca,
            socket: file.socket,
            socket_uids: file.socket_uids,
            web: file.web,
            web_origin: file.web_origin,
            credentials: file.credentials,
            audit: audit_config(file.audit)?,
            store: store_config(flags.store, file.store)?,
            proofs: ProofConfig {
                required: file.policy.require_proofs.unwrap_or(false),
                timeout: positive_duration("policy.proof_timeout", file.policy.proof_timeout, Duration::from_secs(10))?,
            },
            shadow_dir: file.policy.shadow_dir,
        })
    }
}

fn audit_config(file: AuditFile) -> Result<AuditConfig, ConfigError> {
    let segment_bytes = file.segment_bytes.map_or(DEFAULT_SEGMENT_BYTES, ByteSize::bytes);
    if segment_bytes < crate::store::log::MIN_SEGMENT_BYTES {
        return Err(ConfigError::Value { key: "audit.segment_bytes", message: "must be at least 64KiB".into() });
    }
    if file.retain_days == Some(0) {
        return Err(ConfigError::Value { key: "audit.retain_days", message: "must be at least 1".into() });
    }
    let retain_bytes = file.retain_bytes.map(ByteSize::bytes);
    if retain_bytes.is_some_and(|bytes| bytes < 2 * segment_bytes) {
        return Err(ConfigError::Value {
            key: "audit.retain_bytes",
            message: format!("must be at least two segments ({} bytes)", 2 * segment_bytes),
        });
    }
    if file.archive_dir.is_some() && file.retain_days.is_none() && retain_bytes.is_none() {
        return Err(ConfigError::Value {
            key: "audit.archive_dir",
            message: "is used only with retain_days or retain_bytes".into(),
        });
    }
    Ok(AuditConfig { retain_days: file.retain_days, retain_bytes, archive_dir: file.archive_dir, segment_bytes })
}

fn positive_duration(key: &'static str, text: Option<String>, default: Duration) -> Result<Duration, ConfigError> {
    let Some(text) = text else { return Ok(default) };
    let duration = parse_duration(&text).map_err(|e| ConfigError::Value { key, message: e.to_string() })?;
    if duration.is_zero() {
        return Err(ConfigError::Value { key, message: "must be longer than zero".into() });
    }
    Ok(duration)
}

/// The credentials file in the data folder.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct CredentialsFile {
    #[serde(default)]
    credentials: Vec<CredentialConfig>,
}

/// What [`load_or_create_credentials`] found or made.
#[derive(Debug, Clone)]
pub struct CredentialSetup {
    /// Every credential: the configuration's and the data folder's.
    pub credentials: Vec<CredentialConfig>,
    /// Token files written on this start, by role (empty when none were).
    pub created_tokens: Vec<(Role, PathBuf)>,
}

/// Creates the data folder (mode 0700) and returns the credentials: those of
/// the configuration plus `<data>/credentials.toml`. When there are none at
/// all, creates one token per role, writes each to `<data>/<role>.token`
/// (mode 0600) and their hashes to `<data>/credentials.toml`, the harness
/// acting for every user (`users = ["*"]`).
pub fn load_or_create_credentials(
    data: &Path,
    configured: &[CredentialConfig],
) -> Result<CredentialSetup, ConfigError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(data)
        .map_err(|source| ConfigError::Io { path: data.to_owned(), source })?;
    let path = data.join(CREDENTIALS_FILE);
    let mut credentials = configured.to_vec();
    if path.exists() {
        let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Io { path: path.clone(), source })?;
        let file: CredentialsFile =
            toml::from_str(&text).map_err(|e| ConfigError::Toml { path: path.clone(), message: e.to_string() })?;
        credentials.extend(file.credentials);
        return Ok(CredentialSetup { credentials, created_tokens: vec![] });
    }
    if !credentials.is_empty() {
        return Ok(CredentialSetup { credentials, created_tokens: vec![] });
    }
    let mut created = Vec::new();
    let mut file = CredentialsFile::default();
    for role in Role::ALL {
        let token = generate_token().map_err(|e| ConfigError::Random(e.to_string()))?;
        let token_path = data.join(format!("{role}.token"));
        write_private(&token_path, format!("{token}\n").as_bytes())?;
        file.credentials.push(CredentialConfig {
            name: role.as_str().to_owned(),
            role,
            token_sha256: hex::encode(hash_token(&token)),
            cert_sha256: None,
            users: if role == Role::Harness { vec!["*".to_owned()] } else { vec![] },
            groups: if role == Role::Approver { vec!["*".to_owned()] } else { vec![] },
            rate_per_second: None,
            burst: None,
        });
        created.push((role, token_path));
    }
    let body = toml::to_string(&file).map_err(|e| ConfigError::Toml { path: path.clone(), message: e.to_string() })?;
    let text = format!(
        "# Credentials of this monitor: token hashes only. Created on first start.\n\
         # Narrow the harness's `users` to the users it may act for, and the\n\
         # approver's `groups` to the @approvers groups it may answer for.\n\n{body}"
    );
    write_private(&path, text.as_bytes())?;
    credentials.extend(file.credentials);
    Ok(CredentialSetup { credentials, created_tokens: created })
}

/// Writes a file readable by its owner only, atomically (temp file, fsync, rename).
pub(crate) fn write_private(path: &Path, contents: &[u8]) -> Result<(), ConfigError> {
    let io = |source| ConfigError::Io { path: path.to_owned(), source };
    let tmp = path.with_extension("tmp");
    // A stale temp file (or a link planted there) is removed, and the new one
    // is created fresh, so it can only have mode 0600.
    match std::fs::remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(e)),
    }
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp).map_err(io)?;
    file.write_all(contents).map_err(io)?;
    file.sync_all().map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)?;
    Ok(())
}

/// The listener's TLS material, as PEM text.
#[derive(Clone)]
pub struct TlsPem {
    /// The server's certificate chain.
    pub cert: String,
    /// Its private key.
    pub key: String,
    /// When set, clients may present a certificate signed by this CA (mutual
    /// TLS); a known certificate then identifies the caller without a token.
    pub client_ca: Option<String>,
}

/// `--store` over `[store] url`; the password file and CA only with a URL.
fn store_config(
    flag: Option<String>,
    file: StoreFile,
) -> Result<Option<crate::store::postgres::PgOptions>, ConfigError> {
    let Some(url) = flag.or(file.url) else {
        if file.password_file.is_some() || file.ca_file.is_some() {
            return Err(ConfigError::Value {
                key: "store",
                message: "password_file and ca_file are for a PostgreSQL store: give its url too".into(),
            });
        }
        return Ok(None);
    };
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        return Err(ConfigError::Value { key: "store.url", message: format!("`{url}` is not a postgres:// URL") });
    }
    Ok(Some(crate::store::postgres::PgOptions { url, password_file: file.password_file, ca_file: file.ca_file }))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;
    use crate::auth::Credentials;

    #[test]
    fn first_start_creates_private_tokens_then_reuses_them() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let first = load_or_create_credentials(&data, &[]).unwrap();
        assert_eq!(first.created_tokens.len(), 3);
        for (_, path) in &first.created_tokens {
            let mode = std::fs::metadata(path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "{}", path.display());
        }
        let token = std::fs::read_to_string(data.join("harness.token")).unwrap();
        let creds = Credentials::new(&first.credentials).unwrap();
        let harness = creds.authenticate(token.trim()).unwrap();
        assert!(harness.may_act_for("anyone"));

        let again = load_or_create_credentials(&data, &[]).unwrap();
        assert!(again.created_tokens.is_empty());
        assert_eq!(again.credentials, first.credentials);
    }

    #[test]
    fn flags_override_the_file() {
        let file: FileConfig = toml::from_str("listen = \"127.0.0.1:1\"\ndefault_approval_timeout = \"15m\"").unwrap();
        let settings =
            Settings::merge(file, Overrides { listen: Some("127.0.0.1:2".into()), ..Overrides::default() }).unwrap();
        assert_eq!(settings.listen.port(), 2);
        assert_eq!(settings.default_approval_timeout, Duration::from_secs(900));
        assert!(toml::from_str::<FileConfig>("lisen = \"x\"").is_err());
    }

    #[test]
    fn a_store_needs_a_postgres_url_and_its_files_need_the_url() {
        let url = "postgres://warden@db:5432/warden".to_owned();
        let store = store_config(Some(url.clone()), StoreFile::default()).unwrap().unwrap();
        assert_eq!(store.url, url);
        // The flag wins over the file.
        let file = StoreFile { url: Some("postgres://other/db".into()), ..StoreFile::default() };
        assert_eq!(store_config(Some(url), file).unwrap().unwrap().url, "postgres://warden@db:5432/warden");
        assert!(store_config(None, StoreFile::default()).unwrap().is_none());
        let bad = store_config(Some("mysql://db/warden".into()), StoreFile::default()).unwrap_err();
        assert!(bad.to_string().contains("store.url"), "{bad}");
        let orphan = StoreFile { password_file: Some("pw".into()), ..StoreFile::default() };
        assert!(store_config(None, orphan).unwrap_err().to_string().contains("give its url too"));
    }
}
