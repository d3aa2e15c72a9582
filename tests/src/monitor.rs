//! A real monitor on `127.0.0.1:0` deciding by a policy text of a test's own
//! (with the bundled schema and entities), for the gates' tests.

use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use warden_monitor::auth::CredentialConfig;
use warden_monitor::server::{RunningServer, ServerConfig, start};
use warden_monitor::service::MonitorConfig;

/// A running monitor and the folders it owns.
pub struct OwnPolicies {
    /// The server; stop it with [`RunningServer::stop`].
    pub server: RunningServer,
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    /// The policy folder: the bundled schema and entities, and `test.cedar`.
    pub policies: tempfile::TempDir,
    /// The data folder (store, checkpoints).
    pub data: tempfile::TempDir,
}

/// Starts a monitor whose only policy file is `policies`, accepting
/// `credentials`.
pub async fn start_with_policies(policies: &str, credentials: Vec<CredentialConfig>) -> anyhow::Result<OwnPolicies> {
    let bundled = Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies");
    let dir = tempfile::tempdir()?;
    for file in ["schema.cedarschema", "entities.json"] {
        std::fs::copy(bundled.join(file), dir.path().join(file)).with_context(|| format!("copy {file}"))?;
    }
    std::fs::write(dir.path().join("test.cedar"), policies)?;
    let data = tempfile::tempdir()?;
    let config = ServerConfig {
        policies: dir.path().to_owned(),
        data: data.path().to_owned(),
        credentials,
        durability: Default::default(),
        checkpoint_every: Duration::from_secs(300),
        tls: None,
        socket: None,
        audit: Default::default(),
        monitor: MonitorConfig { policy_dir: dir.path().to_owned(), ..MonitorConfig::default() },
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let server = start(config, listener).await.context("the monitor starts")?;
    let endpoint = format!("http://{}", server.addr());
    Ok(OwnPolicies { server, endpoint, policies: dir, data })
}

/// Every record of the audit log of the monitor at `endpoint`, read with the
/// admin token `admin`, in order.
pub async fn audit(endpoint: &str, admin: &str) -> anyhow::Result<Vec<warden_proto::v1::AuditRecord>> {
    use warden_proto::v1 as pb;
    let channel = tonic::transport::Channel::from_shared(endpoint.to_owned())?.connect().await?;
    let token: tonic::metadata::MetadataValue<_> = format!("Bearer {admin}").parse()?;
    let mut client = pb::admin_client::AdminClient::with_interceptor(channel, move |mut r: tonic::Request<()>| {
        r.metadata_mut().insert("authorization", token.clone());
        Ok(r)
    });
    let request = pb::TailAuditRequest { all: true, ..Default::default() };
    let mut stream = client.tail_audit(request).await?.into_inner();
    let mut records = Vec::new();
    while let Some(record) = stream.message().await? {
        records.push(record);
    }
    Ok(records)
}
