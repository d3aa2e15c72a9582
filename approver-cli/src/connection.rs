//! Reaching the monitor: endpoint, token or certificate, TLS, and a client per service.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Args;
use warden_proto::v1::admin_client::AdminClient;
use warden_sdk::{BearerToken, Client};

use crate::approvals;

#[derive(Debug, Args)]
pub(crate) struct Connection {
    /// The monitor's gRPC endpoint
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

    pub(crate) async fn channel(&self) -> anyhow::Result<tonic::transport::Channel> {
        // TLS files for a plaintext endpoint are refused, not ignored:
        // whoever gave them meant TLS, and the token would cross in the clear.
        if !self.endpoint.starts_with("https://") {
            let named = [
                ("--ca-cert / WARDEN_CA_CERT", self.ca_cert.is_some()),
                ("--client-cert / WARDEN_CLIENT_CERT", self.client_cert.is_some()),
            ];
            if let Some((flag, _)) = named.iter().find(|(_, given)| *given) {
                bail!(
                    "endpoint `{}`: {flag} is for TLS, which only an https:// endpoint speaks; use https:// or leave \
                     it out",
                    self.endpoint
                );
            }
        }
        let mut endpoint = tonic::transport::Endpoint::from_shared(self.endpoint.clone())
            .with_context(|| format!("endpoint `{}`", self.endpoint))?
            .connect_timeout(Duration::from_secs(5));
        if self.endpoint.starts_with("https://") {
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
        endpoint.connect().await.with_context(|| format!("cannot reach the monitor at {}", self.endpoint))
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
        Ok(Client::with_channel(self.channel().await?, token))
    }

    pub(crate) async fn approvals(&self) -> anyhow::Result<approvals::ApprovalsClient> {
        let token = self.optional_token()?;
        Ok(warden_proto::v1::approvals_client::ApprovalsClient::with_interceptor(
            self.channel().await?,
            MaybeToken(token),
        ))
    }

    pub(crate) async fn admin(&self) -> anyhow::Result<Admin> {
        let token = self.optional_token()?;
        Ok(AdminClient::with_interceptor(self.channel().await?, MaybeToken(token)))
    }
}

pub(crate) type Admin =
    AdminClient<tonic::service::interceptor::InterceptedService<tonic::transport::Channel, MaybeToken>>;

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
