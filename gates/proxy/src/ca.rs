//! The proxy's certificate authority: the sandbox trusts it, and the proxy
//! presents a leaf certificate it signs for each host a client connects to.
//!
//! Created on first use in the data folder: `ca.key` (mode 0600, never
//! leaves the folder) and `ca.pem` (what `warden-proxy ca --print` prints).

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use rustls::sign::CertifiedKey;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// The CA's key file in the data folder.
pub const KEY_FILE: &str = "ca.key";
/// The CA's certificate in the data folder.
pub const CERT_FILE: &str = "ca.pem";
/// Leaf certificates kept, at most (each ~1 KiB).
const LEAVES: usize = 1024;

/// What can go wrong with the CA.
#[derive(Debug, thiserror::Error)]
pub enum CaError {
    /// A file of the data folder.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The key is readable by others.
    #[error("{path} has mode {mode:o}: the CA key must be readable by its owner only (chmod 600)")]
    Mode {
        /// The file.
        path: String,
        /// Its permission bits.
        mode: u32,
    },
    /// Generating or parsing a certificate.
    #[error("certificate: {0}")]
    Certificate(#[from] rcgen::Error),
    /// rustls refused a key.
    #[error("key: {0}")]
    Key(#[from] rustls::Error),
}

/// The CA and its leaf certificates.
pub struct Authority {
    issuer: Issuer<'static, KeyPair>,
    cert_pem: String,
    cert_der: CertificateDer<'static>,
    leaves: Mutex<HashMap<String, Arc<CertifiedKey>>>,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CaError + '_ {
    move |source| CaError::Io { path: path.display().to_string(), source }
}

fn write_private(path: &Path, contents: &[u8]) -> Result<(), CaError> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path).map_err(io(path))?;
    file.write_all(contents).and_then(|()| file.sync_all()).map_err(io(path))
}

impl Authority {
    /// Loads the CA from `data`, creating it (and the folder, mode 0700)
    /// on first use.
    pub fn load_or_create(data: &Path) -> Result<Self, CaError> {
        use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(data).map_err(io(data))?;
        let key_path = data.join(KEY_FILE);
        let cert_path = data.join(CERT_FILE);
        if !key_path.exists() {
            let key = KeyPair::generate()?;
            let mut params = CertificateParams::default();
            let mut name = DistinguishedName::new();
            name.push(DnType::CommonName, "Warden egress proxy CA");
            name.push(DnType::OrganizationName, "Warden");
            params.distinguished_name = name;
            params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
            params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
            params.not_before = time_now() - std::time::Duration::from_secs(3600);
            params.not_after = time_now() + std::time::Duration::from_secs(10 * 365 * 86_400);
            let cert = params.self_signed(&key)?;
            write_private(&key_path, key.serialize_pem().as_bytes())?;
            // The certificate is public; written last, so that a key
            // without one is the only half state (and is refused below).
            std::fs::write(&cert_path, cert.pem()).map_err(io(&cert_path))?;
        }
        let mode = std::fs::metadata(&key_path).map_err(io(&key_path))?.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(CaError::Mode { path: key_path.display().to_string(), mode });
        }
        let key = KeyPair::from_pem(&std::fs::read_to_string(&key_path).map_err(io(&key_path))?)?;
        let cert_pem = std::fs::read_to_string(&cert_path).map_err(io(&cert_path))?;
        let issuer = Issuer::from_ca_cert_pem(&cert_pem, key)?;
        let cert_der = rustls_pki_types::pem::PemObject::from_pem_slice(cert_pem.as_bytes())
            .map_err(|e| CaError::Io { path: cert_path.display().to_string(), source: std::io::Error::other(e) })?;
        Ok(Self { issuer, cert_pem, cert_der, leaves: Mutex::new(HashMap::new()) })
    }

    /// The CA certificate (PEM), for the sandbox to trust.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// A leaf certificate for `host` (a DNS name or an IP address), signed
    /// by the CA, with the CA in its chain.
    pub fn leaf(&self, host: &str) -> Result<Arc<CertifiedKey>, CaError> {
        let mut leaves = self.leaves.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(found) = leaves.get(host) {
            return Ok(Arc::clone(found));
        }
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        params.subject_alt_names = vec![match host.parse::<std::net::IpAddr>() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => SanType::DnsName(host.try_into()?),
        }];
        params.distinguished_name.push(DnType::CommonName, host);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.not_before = time_now() - std::time::Duration::from_secs(3600);
        params.not_after = time_now() + std::time::Duration::from_secs(30 * 86_400);
        let cert = params.signed_by(&key, &self.issuer)?;
        let der_key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let signing = rustls::crypto::ring::sign::any_supported_type(&der_key)?;
        let certified = Arc::new(CertifiedKey::new(vec![cert.der().clone(), self.cert_der.clone()], signing));
        if leaves.len() >= LEAVES {
            leaves.clear();
        }
        leaves.insert(host.to_owned(), Arc::clone(&certified));
        Ok(certified)
    }
}

fn time_now() -> time::OffsetDateTime {
    time::OffsetDateTime::now_utc()
}
