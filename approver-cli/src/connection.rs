//! Reaching the monitor: endpoint, token or certificate, TLS, and a client per service.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Args;
use warden_proto::v1::admin_client::AdminClient;
use warden_sdk::{BearerToken, Client, EndpointList, Replicas};

use crate::approvals;

#[derive(Debug, Args)]
pub(crate) struct Connection {
    /// The monitor's gRPC endpoint; several replicas' endpoints separated
    /// by commas are tried in turn when one is down
    #[arg(long, global = true, env = "WARDEN_ENDPOINT", default_value = warden_sdk::DEFAULT_ENDPOINT)]
    pub(crate) endpoint: String,
    /// The bearer token
    #[arg(long, global = true, env = "WARDEN_TOKEN", hide_env_values = true, conflicts_with = "token_file")]
    pub(crate) token: Option<String>,
    /// A file holding the bearer token, e.g. .warden/harness.token
    #[arg(long, global = true, env = "WARDEN_TOKEN_FILE", value_name = "FILE")]
    pub(crate) token_file: Option<PathBuf>,
    /// For an https:// endpoint: the CA that signed the monitor's
    /// certificate (PEM) [default: the system's CAs]
    #[arg(long, global = true, env = "WARDEN_CA_CERT", value_name = "FILE")]
    pub(crate) ca_cert: Option<PathBuf>,
    /// For mutual TLS: this client's certificate (PEM); a configured one
    /// identifies an approver or admin without a token
    #[arg(long, global = true, env = "WARDEN_CLIENT_CERT", value_name = "FILE", requires = "client_key")]
    pub(crate) client_cert: Option<PathBuf>,
    /// For mutual TLS: this client's private key (PEM)
    #[arg(long, global = true, env = "WARDEN_CLIENT_KEY", value_name = "FILE", requires = "client_cert")]
    pub(crate) client_key: Option<PathBuf>,
}

impl Connection {
    pub(crate) fn token(&self) -> anyhow::Result<String> {
        match (&self.token, &self.token_file) {
            (Some(token), _) => Ok(token.trim().to_owned()),
            (None, Some(path)) => Ok(warden_sdk::read_token_file(path)?),
            (None, None) => bail!("no token: give --token, --token-file, WARDEN_TOKEN or WARDEN_TOKEN_FILE"),
        }
    }

    /// The connection's settings for one endpoint of the list.
    fn endpoint_for(&self, entry: &str) -> anyhow::Result<tonic::transport::Endpoint> {
        // TLS files for a plaintext endpoint are refused, not ignored:
        // whoever gave them meant TLS, and the token would cross in the clear.
        if !entry.starts_with("https://") {
            let named = [
                ("--ca-cert / WARDEN_CA_CERT", self.ca_cert.is_some()),
                ("--client-cert / WARDEN_CLIENT_CERT", self.client_cert.is_some()),
            ];
            if let Some((flag, _)) = named.iter().find(|(_, given)| *given) {
                bail!(
                    "endpoint `{entry}`: {flag} is for TLS, which only an https:// endpoint speaks; use https:// or \
                     leave it out"
                );
            }
        }
        let mut endpoint = tonic::transport::Endpoint::from_shared(entry.to_owned())
            .with_context(|| format!("endpoint `{entry}`"))?
            .connect_timeout(Duration::from_secs(5));
        if entry.starts_with("https://") {
            let read =
                |path: &PathBuf| std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()));
            // The CA named, or else the system's (a certificate from a CA
            // the system trusts needs no flag).
            let mut tls = tonic::transport::ClientTlsConfig::new();
            tls = match &self.ca_cert {
                Some(ca) => tls.ca_certificate(tonic::transport::Certificate::from_pem(read(ca)?)),
                None => tls.with_native_roots(),
            };
            if let (Some(cert), Some(key)) = (&self.client_cert, &self.client_key) {
                tls = tls.identity(tonic::transport::Identity::from_pem(read(cert)?, read(key)?));
            }
            endpoint = endpoint.tls_config(tls).context("TLS settings")?;
        }
        Ok(endpoint)
    }

    /// The monitor's replicas (`--endpoint` lists one or several, separated
    /// by commas), connected to the first that answers: every service
    /// client goes through them, so a call that fails because a replica is
    /// down goes to the next (`warden_sdk::Resend` says which calls may).
    pub(crate) async fn replicas(&self) -> anyhow::Result<Replicas> {
        let list = EndpointList::parse(&self.endpoint)?;
        let endpoints = list
            .iter()
            .map(|entry| Ok((entry.to_owned(), self.endpoint_for(entry)?)))
            .collect::<anyhow::Result<Vec<_>>>()?;
        match Replicas::connect(endpoints).await {
            Ok(replicas) => Ok(replicas),
            Err(warden_sdk::Error::Transport(e)) => {
                Err(anyhow::Error::new(e).context(format!("cannot reach the monitor at {}", self.endpoint)))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The token, or none when a client certificate stands for it.
    pub(crate) fn optional_token(&self) -> anyhow::Result<Option<BearerToken>> {
        if self.token.is_none() && self.token_file.is_none() && self.client_cert.is_some() {
            return Ok(None);
        }
        Ok(Some(BearerToken::new(&self.token()?)?))
    }

    pub(crate) async fn harness(&self) -> anyhow::Result<Client> {
        let token = BearerToken::new(&self.token()?)?;
        Ok(Client::with_replicas(self.replicas().await?, token))
    }

    pub(crate) async fn approvals(&self) -> anyhow::Result<approvals::ApprovalsClient> {
        let token = self.optional_token()?;
        Ok(warden_proto::v1::approvals_client::ApprovalsClient::with_interceptor(
            self.replicas().await?,
            MaybeToken(token),
        ))
    }

    pub(crate) async fn admin(&self) -> anyhow::Result<Admin> {
        let token = self.optional_token()?;
        Ok(AdminClient::with_interceptor(self.replicas().await?, MaybeToken(token)))
    }
}

/// When a stream that ended in an error (a followed audit log, the pending
/// approvals) is opened again, on the next replica: only with several
/// endpoints (one behaves as it always did: the command ends with the
/// error), only after `UNAVAILABLE` (the replica's connection broke, or it
/// is shutting down), and at most once per replica in a row without
/// anything received in between.
pub(crate) struct Reopen {
    replicas: usize,
    left: usize,
}

impl Reopen {
    pub(crate) fn new(connection: &Connection) -> Self {
        let replicas = EndpointList::parse(&connection.endpoint).map_or(1, |list| list.len());
        Self { replicas, left: replicas }
    }

    /// Something came: the replicas may each fail once more.
    pub(crate) fn received(&mut self) {
        self.left = self.replicas;
    }

    /// Whether to open the stream again after `status`; says so on stderr.
    pub(crate) fn after(&mut self, status: &tonic::Status) -> bool {
        if self.replicas < 2 || status.code() != tonic::Code::Unavailable || self.left == 0 {
            return false;
        }
        self.left -= 1;
        eprintln!("wardenctl: {}; going on with the next replica", status.message());
        true
    }
}

pub(crate) type Admin = AdminClient<tonic::service::interceptor::InterceptedService<Replicas, MaybeToken>>;

/// A bearer token, or nothing when a client certificate identifies the caller.
#[derive(Clone)]
pub struct MaybeToken(Option<BearerToken>);

impl tonic::service::Interceptor for MaybeToken {
    fn call(&mut self, request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        match &mut self.0 {
            Some(token) => token.call(request),
            None => Ok(request),
        }
    }
}
