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
        store: None,
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

/// A monitor on loopback with the bundled policies, in which alice's
/// workspace is a temporary folder (`workspace()`), and a harness, an
/// approver (of every group) and an admin credential: what an agent's gate
/// meets in a real installation.
pub struct Bundled {
    /// The temporary root: `project/` (the workspace), `policies/`, `data/`.
    pub root: tempfile::TempDir,
    /// The server, until a test stops it.
    pub server: Option<RunningServer>,
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    approver: String,
    admin: String,
}

impl Bundled {
    /// Starts it with the harness token `harness` (acting for alice), the
    /// approver token `approver` and the admin token `admin`.
    pub async fn start(harness: &str, approver: &str, admin: &str) -> anyhow::Result<Self> {
        use warden_monitor::auth::Role;
        let root = tempfile::tempdir()?;
        let workspace = root.path().join("project");
        std::fs::create_dir_all(&workspace)?;
        let policies = root.path().join("policies");
        copy_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies"), &policies)?;
        // alice's workspace is the temporary one.
        let entities_path = policies.join("entities.json");
        let mut entities: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&entities_path)?)?;
        for entity in entities.as_array_mut().context("entities.json is a list")? {
            if entity.pointer("/uid/id").and_then(serde_json::Value::as_str) == Some("alice")
                && let Some(id) = entity.pointer_mut("/attrs/workspace/__entity/id")
            {
                *id = workspace.to_string_lossy().into_owned().into();
            }
        }
        std::fs::write(&entities_path, entities.to_string())?;
        let mut on_call = CredentialConfig::for_token("oncall", Role::Approver, approver, &[]);
        on_call.groups = vec!["*".into()];
        let config = ServerConfig::new(
            policies,
            root.path().join("data"),
            vec![
                CredentialConfig::for_token("agent-hook", Role::Harness, harness, &["alice"]),
                on_call,
                CredentialConfig::for_token("admin", Role::Admin, admin, &[]),
            ],
        );
        let server = start(config, tokio::net::TcpListener::bind("127.0.0.1:0").await?).await?;
        let endpoint = format!("http://{}", server.addr());
        Ok(Self { root, server: Some(server), endpoint, approver: approver.to_owned(), admin: admin.to_owned() })
    }

    /// alice's workspace.
    pub fn workspace(&self) -> std::path::PathBuf {
        self.root.path().join("project")
    }

    /// Stops the monitor (a gate then meets a closed port).
    pub async fn stop(&mut self) -> anyhow::Result<()> {
        if let Some(server) = self.server.take() {
            server.stop().await?;
        }
        Ok(())
    }

    /// Every decision record: (session, resource, outcome).
    pub async fn decisions(&self) -> anyhow::Result<Vec<(String, String, i32)>> {
        Ok(audit(&self.endpoint, &self.admin)
            .await?
            .into_iter()
            .filter(|record| record.kind == "decision")
            .map(|record| (record.actor.map(|a| a.session).unwrap_or_default(), record.resource, record.outcome))
            .collect())
    }

    /// Waits (up to two minutes) for an approval to be pending, then
    /// approves it as the approver.
    pub async fn approve_when_pending(&self) -> anyhow::Result<warden_proto::v1::Approval> {
        use warden_proto::v1 as pb;
        let channel = tonic::transport::Channel::from_shared(self.endpoint.clone())?.connect().await?;
        let token: tonic::metadata::MetadataValue<_> = format!("Bearer {}", self.approver).parse()?;
        let mut approvals =
            pb::approvals_client::ApprovalsClient::with_interceptor(channel, move |mut r: tonic::Request<()>| {
                r.metadata_mut().insert("authorization", token.clone());
                Ok(r)
            });
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        let approval = loop {
            let list = approvals.list_pending(pb::ListPendingRequest::default()).await?.into_inner();
            if let Some(approval) = list.approvals.into_iter().next() {
                break approval;
            }
            anyhow::ensure!(tokio::time::Instant::now() < deadline, "nothing went pending in two minutes");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let resolve = pb::ResolveRequest { approval_id: approval.approval_id, approve: true, ..Default::default() };
        Ok(approvals.resolve(resolve).await?.into_inner())
    }
}

fn copy_dir(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}

/// `server`'s metrics (Prometheus text), read from a metrics listener
/// started for this read.
pub async fn metrics(server: &RunningServer) -> anyhow::Result<String> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let _serving = server.serve_metrics(listener);
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").await?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await?;
    Ok(answer)
}
