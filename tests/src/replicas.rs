//! `Replica`: a `wardend` process of its own on a shared PostgreSQL store,
//! as an organization runs several: each with its data folder (its
//! checkpoint key), all with the same credentials, policies and database.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::{Context as _, bail};
use warden_monitor::auth::{CredentialConfig, Role};

/// The harness token every replica accepts (acting for every user).
pub const HARNESS: &str = "replica-harness-token-0123456789";
/// The approver token (of every group).
pub const APPROVER: &str = "replica-approver-token-0123456789";
/// A second approver, to race the first.
pub const APPROVER_2: &str = "replica-approver2-token-012345678";
/// The admin token.
pub const ADMIN: &str = "replica-admin-token-0123456789ab";

/// The built `wardend` beside the test's own executable
/// (`target/debug/wardend`), or `None` when it is not built.
pub fn wardend() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let path = exe.parent()?.parent()?.join("wardend");
    path.is_file().then_some(path)
}

/// A running `wardend`; killed when dropped.
pub struct Replica {
    child: Option<Child>,
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    /// Its data folder (checkpoint key) and configuration.
    pub dir: tempfile::TempDir,
    /// Its standard error, for a test that fails.
    pub log: PathBuf,
}

/// The credentials every replica accepts: `harness`, `oncall`, `oncall-2`
/// and `security`.
pub fn credentials() -> Vec<CredentialConfig> {
    vec![
        CredentialConfig::for_token("harness", Role::Harness, HARNESS, &["*"]),
        CredentialConfig::for_token("oncall", Role::Approver, APPROVER, &[]),
        CredentialConfig::for_token("oncall-2", Role::Approver, APPROVER_2, &[]),
        CredentialConfig::for_token("security", Role::Admin, ADMIN, &[]),
    ]
}

/// The configuration every replica reads: the credentials and the store.
pub fn config(store_url: &str) -> String {
    config_with(store_url, credentials())
}

/// The configuration with credentials of the caller's.
pub fn config_with(store_url: &str, credentials: Vec<CredentialConfig>) -> String {
    let mut text = String::new();
    for credential in credentials {
        let mut one = serde_json::to_value(&credential).unwrap_or_default();
        if let Some(map) = one.as_object_mut() {
            text.push_str("[[credentials]]\n");
            for (key, value) in map {
                text.push_str(&format!("{key} = {value}\n"));
            }
        }
    }
    text.push_str(&format!("[store]\nurl = {}\n", serde_json::Value::from(store_url)));
    text
}

impl Replica {
    /// Starts `wardend` with the policies in `policies` on the store at
    /// `store_url`, and waits until it listens.
    pub fn start(wardend: &Path, policies: &Path, store_url: &str) -> anyhow::Result<Self> {
        Self::start_with(wardend, policies, &config(store_url), &[])
    }

    /// Starts it with a configuration text of the caller's and more flags.
    pub fn start_with(wardend: &Path, policies: &Path, config: &str, flags: &[&str]) -> anyhow::Result<Self> {
        Self::start_seeded(wardend, policies, config, flags, &[])
    }

    /// Starts it with `files` (name, content) in its data folder first, as
    /// a monitor that ran before.
    pub fn start_seeded(
        wardend: &Path,
        policies: &Path,
        config: &str,
        flags: &[&str],
        files: &[(&str, &[u8])],
    ) -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new().prefix("wardend-replica").tempdir()?;
        if !files.is_empty() {
            let data = dir.path().join("data");
            std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700).create(&data)?;
            for (name, content) in files {
                std::fs::write(data.join(name), content)?;
            }
        }
        let config_path = dir.path().join("wardend.toml");
        std::fs::write(&config_path, config)?;
        let log = dir.path().join("stderr.log");
        let mut child = Command::new(wardend)
            .args(["--listen", "127.0.0.1:0", "--data"])
            .arg(dir.path().join("data"))
            .arg("--policies")
            .arg(policies)
            .arg("--config")
            .arg(&config_path)
            .args(flags)
            .env("WARDEN_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .with_context(|| format!("starting {}", wardend.display()))?;
        let stdout = BufReader::new(child.stdout.take().context("stdout")?);
        for line in stdout.lines() {
            let line = line?;
            if let Some(rest) = line.strip_prefix("wardend listening on ") {
                let addr = rest.split_whitespace().next().unwrap_or_default().to_owned();
                return Ok(Self { child: Some(child), endpoint: format!("http://{addr}"), dir, log });
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        bail!("wardend did not start: {}", std::fs::read_to_string(&log).unwrap_or_default())
    }

    /// Its process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Kills it with SIGKILL, as a machine that goes down.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops it with SIGTERM and waits.
    pub fn stop(&mut self) -> anyhow::Result<std::process::ExitStatus> {
        let Some(mut child) = self.child.take() else { bail!("not running") };
        Command::new("kill").args(["-TERM", &child.id().to_string()]).status()?;
        Ok(child.wait()?)
    }

    /// What it wrote on standard error so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill();
    }
}
