//! TLS and mutual TLS: harnesses with tokens over TLS, an admin identified by
//! its client certificate alone, and no plaintext on a TLS listener.

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};
use warden_monitor::auth::{CredentialConfig, Role, sha256_hex};
use warden_monitor::server::{ServerConfig, TlsPem, start};
use warden_proto::v1 as pb;
use warden_sdk::{ActionRequest, Actor, BearerToken, Client, Outcome};

struct Pki {
    ca_pem: String,
    server_cert: String,
    server_key: String,
    admin_cert: String,
    admin_key: String,
    admin_der: Vec<u8>,
    stranger_cert: String,
    stranger_key: String,
}

fn pki() -> Pki {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let server_key = KeyPair::generate().unwrap();
    let server = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
        .unwrap()
        .signed_by(&server_key, &ca)
        .unwrap();
    let client = |name: &str| {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec![name.to_owned()]).unwrap().signed_by(&key, &ca).unwrap();
        (cert, key)
    };
    let (admin, admin_key) = client("security-admin");
    let (stranger, stranger_key) = client("stranger");
    Pki {
        ca_pem: ca.pem(),
        server_cert: server.pem(),
        server_key: server_key.serialize_pem(),
        admin_cert: admin.pem(),
        admin_key: admin_key.serialize_pem(),
        admin_der: admin.der().to_vec(),
        stranger_cert: stranger.pem(),
        stranger_key: stranger_key.serialize_pem(),
    }
}

async fn tls_channel(addr: std::net::SocketAddr, pki: &Pki, identity: Option<(&str, &str)>) -> Channel {
    let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&pki.ca_pem)).domain_name("localhost");
    if let Some((cert, key)) = identity {
        tls = tls.identity(Identity::from_pem(cert, key));
    }
    Channel::from_shared(format!("https://{addr}")).unwrap().tls_config(tls).unwrap().connect().await.unwrap()
}

#[tokio::test]
async fn tls_with_tokens_and_client_certificates() {
    let pki = pki();
    let data = tempfile::tempdir().unwrap();
    let credentials = vec![
        CredentialConfig::for_token("harness", Role::Harness, "h", &["*"]),
        CredentialConfig {
            name: "security-by-cert".into(),
            role: Role::Admin,
            token_sha256: String::new(),
            cert_sha256: Some(sha256_hex(&pki.admin_der)),
            users: vec![],
            groups: vec![],
            rate_per_second: None,
            burst: None,
        },
    ];
    let server = start(
        ServerConfig {
            policies: crate::support::bundled_policies(),
            data: data.path().to_owned(),
            credentials,
            monitor: Default::default(),
            durability: Default::default(),
            checkpoint_every: std::time::Duration::from_secs(300),
            tls: Some(TlsPem {
                cert: pki.server_cert.clone(),
                key: pki.server_key.clone(),
                client_ca: Some(pki.ca_pem.clone()),
            }),
            socket: None,
            audit: Default::default(),
            store: None,
        },
        tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
    )
    .await
    .unwrap();
    let addr = server.addr();

    // A harness over TLS with its token.
    let harness = Client::with_channel(tls_channel(addr, &pki, None).await, BearerToken::new("h").unwrap());
    let decision = harness
        .authorize(&Actor::new("alice", "claude-code", "tls"), ActionRequest::read_file("/home/alice/project/a.rs"))
        .await
        .unwrap();
    assert_eq!(decision.outcome, Outcome::Allow);

    // An admin by its client certificate, no token at all.
    let mut admin =
        pb::admin_client::AdminClient::new(tls_channel(addr, &pki, Some((&pki.admin_cert, &pki.admin_key))).await);
    let verified = admin.verify_audit(pb::VerifyAuditRequest {}).await.unwrap().into_inner();
    assert!(verified.ok && verified.records == 1);
    // The same certificate is not a harness.
    let mut as_harness = pb::authority_client::AuthorityClient::new(
        tls_channel(addr, &pki, Some((&pki.admin_cert, &pki.admin_key))).await,
    );
    let status = as_harness.authorize(pb::AuthorizeRequest::default()).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::PermissionDenied);
    // A certificate from the right CA but not configured is nobody.
    let mut stranger = pb::admin_client::AdminClient::new(
        tls_channel(addr, &pki, Some((&pki.stranger_cert, &pki.stranger_key))).await,
    );
    let status = stranger.verify_audit(pb::VerifyAuditRequest {}).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unauthenticated);

    // Plaintext to a TLS listener gets nowhere.
    let plaintext = Channel::from_shared(format!("http://{addr}")).unwrap().connect().await;
    if let Ok(channel) = plaintext {
        let mut client = pb::admin_client::AdminClient::new(channel);
        assert!(client.verify_audit(pb::VerifyAuditRequest {}).await.is_err());
    }
    server.stop().await.unwrap();
}

/// A channel over a Unix socket.
async fn unix_channel(path: std::path::PathBuf) -> Channel {
    tonic::transport::Endpoint::from_static("http://local.socket")
        .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
            let path = path.clone();
            async move {
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(tokio::net::UnixStream::connect(path).await?))
            }
        }))
        .await
        .unwrap()
}

#[tokio::test]
async fn the_unix_socket_admits_only_the_listed_uids() {
    let dir = tempfile::tempdir().unwrap();
    let me = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(dir.path()).unwrap());
    for (uids, admitted) in [(vec![me], true), (vec![me + 1], false)] {
        let data = tempfile::tempdir().unwrap();
        let socket = data.path().join("wardend.sock");
        let server = start(
            ServerConfig {
                policies: crate::support::bundled_policies(),
                data: data.path().to_owned(),
                credentials: vec![CredentialConfig::for_token("local-admin", Role::Admin, "a", &[])],
                monitor: Default::default(),
                durability: Default::default(),
                checkpoint_every: std::time::Duration::from_secs(300),
                tls: None,
                socket: Some(warden_monitor::server::UnixSocket { path: socket.clone(), uids }),
                audit: Default::default(),
                store: None,
            },
            tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
        )
        .await
        .unwrap();
        let mut admin =
            pb::admin_client::AdminClient::with_interceptor(unix_channel(socket).await, BearerToken::new("a").unwrap());
        let result = admin.verify_audit(pb::VerifyAuditRequest {}).await;
        if admitted {
            assert!(result.unwrap().into_inner().ok);
        } else {
            let status = result.unwrap_err();
            assert_eq!(status.code(), tonic::Code::PermissionDenied);
            assert!(status.message().contains(&format!("uid {me}")), "{}", status.message());
        }
        server.stop().await.unwrap();
    }
}

#[tokio::test]
async fn the_sdk_decides_over_the_unix_socket() {
    let data = tempfile::tempdir().unwrap();
    let me = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(data.path()).unwrap());
    let socket = data.path().join("wardend.sock");
    let server = start(
        ServerConfig {
            socket: Some(warden_monitor::server::UnixSocket { path: socket.clone(), uids: vec![me] }),
            audit: Default::default(),
            store: None,
            ..ServerConfig::new(
                crate::support::bundled_policies(),
                data.path().to_owned(),
                vec![CredentialConfig::for_token("local-harness", Role::Harness, "h", &["alice"])],
            )
        },
        tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
    )
    .await
    .unwrap();
    let client = Client::connect(format!("unix:{}", socket.display()), "h").await.unwrap();
    let actor = Actor::new("alice", "claude-code", "uds-1");
    let allowed = client.authorize(&actor, ActionRequest::read_file("/home/alice/project/src/main.rs")).await.unwrap();
    assert_eq!(allowed.outcome, Outcome::Allow, "{allowed:?}");
    let denied = client.authorize(&actor, ActionRequest::read_file("/etc/shadow")).await.unwrap();
    assert_eq!(denied.outcome, Outcome::Deny, "{denied:?}");
    // The token still decides who may act for whom.
    let status = client.authorize(&Actor::new("bob", "claude-code", "uds-2"), ActionRequest::read_file("/tmp/x")).await;
    assert!(status.is_err(), "{status:?}");
    server.stop().await.unwrap();
}
