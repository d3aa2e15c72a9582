//! A software authenticator for the page's tests: ES256 passkeys with
//! "none" attestation, made and used as a browser and a platform
//! authenticator would (Chromium's virtual authenticator does the same in
//! the browser test): a credential is discoverable only when the options
//! asked for a resident key, and a request with an empty `allowCredentials`
//! can use discoverable credentials only.

use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rustls_pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio_rustls::rustls::SignatureScheme;
use tokio_rustls::rustls::sign::SigningKey;

/// A P-256 key made for these tests only (PKCS#8, DER): every credential
/// of the authenticator signs with it, under its own random id.
const TEST_KEY: &str = "308187020100301306072a8648ce3d020106082a8648ce3d030107046d306b02010104207c91cb8a0fde9c0b9deda0\
                        b81b05c39ca9b5ecca1e618c7be56066484b45cc03a14403420004cbcd81602f4d72977c7417b4f0caa0c450ff7e3b\
                        e61dea11a9f7031b1797a772c33073b89e010879b8af2c488a88392fe33247563fc89a965cb4656a35fc6617";

/// A credential the authenticator holds.
pub(super) struct Held {
    pub(super) id: Vec<u8>,
    pub(super) user_handle: Vec<u8>,
    pub(super) counter: u32,
    /// Stored on the authenticator (a resident key): found without its id.
    pub(super) discoverable: bool,
}

pub(super) struct Authenticator {
    key: Arc<dyn SigningKey>,
    /// The public key's x and y.
    point: Vec<u8>,
    origin: String,
    pub(super) held: Vec<Held>,
    /// Whether the user is verified (PIN or biometrics) when asked.
    pub(super) user_verified: bool,
    /// Whether it keeps a signature counter (many platform authenticators
    /// say 0 always).
    pub(super) counts: bool,
}

fn cbor_head(major: u8, len: usize) -> Vec<u8> {
    match len {
        0..=23 => vec![(major << 5) | u8::try_from(len).unwrap()],
        24..=255 => vec![(major << 5) | 24, u8::try_from(len).unwrap()],
        _ => {
            let mut head = vec![(major << 5) | 25];
            head.extend(u16::try_from(len).unwrap().to_be_bytes());
            head
        }
    }
}

fn cbor_bytes(bytes: &[u8]) -> Vec<u8> {
    [cbor_head(2, bytes.len()), bytes.to_vec()].concat()
}

fn cbor_text(text: &str) -> Vec<u8> {
    [cbor_head(3, text.len()), text.as_bytes().to_vec()].concat()
}

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

fn unb64(value: &Value) -> Vec<u8> {
    URL_SAFE_NO_PAD.decode(value.as_str().unwrap()).unwrap()
}

impl Authenticator {
    pub(super) fn new(origin: &str) -> Self {
        let der = hex::decode(TEST_KEY).unwrap();
        let key = tokio_rustls::rustls::crypto::ring::sign::any_ecdsa_type(&PrivateKeyDer::Pkcs8(
            PrivatePkcs8KeyDer::from(der),
        ))
        .unwrap();
        let spki = key.public_key().unwrap();
        let spki: &[u8] = spki.as_ref();
        // The SubjectPublicKeyInfo ends with the uncompressed point: x, y.
        let point = spki[spki.len() - 64..].to_vec();
        Self { key, point, origin: origin.to_owned(), held: Vec::new(), user_verified: true, counts: true }
    }

    fn rp_id_hash(&self) -> [u8; 32] {
        let host = url::Url::parse(&self.origin).unwrap().host_str().unwrap().to_owned();
        Sha256::digest(host.as_bytes()).into()
    }

    fn client_data(&self, kind: &str, challenge: &Value) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "type": kind,
            "challenge": challenge.as_str().unwrap(),
            "origin": self.origin,
            "crossOrigin": false,
        }))
        .unwrap()
    }

    /// `navigator.credentials.create` with the page's options (as
    /// `/api/enroll/start` gives them): the credential's JSON, as
    /// `credential.toJSON()` gives it.
    pub(super) fn create(&mut self, options: &Value) -> Value {
        let public_key = &options["publicKey"];
        let selection = &public_key["authenticatorSelection"];
        let discoverable = selection["residentKey"] == "required"
            || selection["residentKey"] == "preferred"
            || selection["requireResidentKey"] == true;
        let mut id = [0u8; 16];
        getrandom::fill(&mut id).unwrap();
        let user_handle = unb64(&public_key["user"]["id"]);
        let client_data = self.client_data("webauthn.create", &public_key["challenge"]);
        let (x, y) = self.point.split_at(32);
        let cose =
            [vec![0xa5, 0x01, 0x02, 0x03, 0x26, 0x20, 0x01, 0x21], cbor_bytes(x), vec![0x22], cbor_bytes(y)].concat();
        // User present and verified, attested credential data follows.
        let flags = 0x01 | if self.user_verified { 0x04 } else { 0 } | 0x40;
        let id_len = u16::try_from(id.len()).unwrap().to_be_bytes();
        let auth_data =
            [&self.rp_id_hash()[..], &[flags], &0u32.to_be_bytes(), &[0u8; 16], &id_len, &id, &cose].concat();
        let attestation = [
            vec![0xa3],
            cbor_text("fmt"),
            cbor_text("none"),
            cbor_text("attStmt"),
            vec![0xa0],
            cbor_text("authData"),
            cbor_bytes(&auth_data),
        ]
        .concat();
        self.held.push(Held { id: id.to_vec(), user_handle, counter: 0, discoverable });
        json!({
            "id": b64(&id),
            "rawId": b64(&id),
            "type": "public-key",
            "response": { "attestationObject": b64(&attestation), "clientDataJSON": b64(&client_data) },
            "clientExtensionResults": { "credProps": { "rk": discoverable } },
        })
    }

    /// `navigator.credentials.get` with the page's options, the person
    /// choosing credential `which`: its assertion's JSON. Panics (as the
    /// browser refuses) when that credential may not answer these options.
    pub(super) fn get(&mut self, options: &Value, which: usize) -> Value {
        let public_key = &options["publicKey"];
        let allowed: Vec<Vec<u8>> =
            public_key["allowCredentials"].as_array().into_iter().flatten().map(|c| unb64(&c["id"])).collect();
        let client_data = self.client_data("webauthn.get", &public_key["challenge"]);
        let rp_id_hash = self.rp_id_hash();
        let flags = 0x01 | if self.user_verified { 0x04 } else { 0 };
        let counts = self.counts;
        let held = &mut self.held[which];
        if allowed.is_empty() {
            assert!(held.discoverable, "NotAllowedError: no discoverable credential for an empty allowCredentials");
        } else {
            assert!(allowed.contains(&held.id), "NotAllowedError: the credential is not in allowCredentials");
        }
        if counts {
            held.counter += 1;
        }
        let auth_data = [&rp_id_hash[..], &[flags], &held.counter.to_be_bytes()].concat();
        let signed = [auth_data.clone(), Sha256::digest(&client_data).to_vec()].concat();
        let signer = self.key.choose_scheme(&[SignatureScheme::ECDSA_NISTP256_SHA256]).unwrap();
        let signature = signer.sign(&signed).unwrap();
        let held = &self.held[which];
        json!({
            "id": b64(&held.id),
            "rawId": b64(&held.id),
            "type": "public-key",
            "response": {
                "authenticatorData": b64(&auth_data),
                "clientDataJSON": b64(&client_data),
                "signature": b64(&signature),
                "userHandle": b64(&held.user_handle),
            },
            "clientExtensionResults": {},
        })
    }
}
