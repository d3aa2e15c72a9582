//! `PgCluster`: a PostgreSQL server of a test's own, made with Debian's
//! `initdb` and `pg_ctl` in a temporary folder, on a free loopback port,
//! stopped (and its folder removed) when dropped.
//!
//! The server refuses to run as root; as root its programs run as the
//! `postgres` user (`runuser`), which must then reach the folder. A machine
//! without PostgreSQL skips the test with a printed reason, unless
//! `WARDEN_REQUIRE_POSTGRES` (set by `.ci/run`) says it must run.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context as _, bail};

/// What a cluster started with [`PgCluster::start_secured_or_skip`] asks of
/// the role `warden`: TLS and its password.
pub struct Secured {
    /// The CA (PEM file) that signed the server's certificate (for `localhost`).
    pub ca_file: PathBuf,
    /// A file whose first line is `warden`'s password.
    pub password_file: PathBuf,
    /// `postgres://warden@localhost:PORT/warden?sslmode=require`.
    pub url: String,
}

/// A running PostgreSQL server with one database, `warden`.
pub struct PgCluster {
    bin: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
    as_postgres: bool,
    running: bool,
}

/// Where Debian keeps the server's programs (`initdb` and `pg_ctl` are not
/// on `PATH`), newest version first.
fn server_bin() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("WARDEN_PG_BIN") {
        return Some(PathBuf::from(dir));
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin)
}

/// The server's programs, or `None` (having printed why) when PostgreSQL is
/// not installed and the test may skip.
fn server_bin_or_skip(test: &str) -> Option<PathBuf> {
    let bin = server_bin();
    if bin.is_none() {
        assert!(
            std::env::var_os("WARDEN_REQUIRE_POSTGRES").is_none(),
            "WARDEN_REQUIRE_POSTGRES is set but PostgreSQL's initdb is not installed (apt-get install postgresql)"
        );
        eprintln!("skipping {test}: PostgreSQL is not installed (apt-get install postgresql)");
    }
    bin
}

impl PgCluster {
    /// Starts a cluster, or returns `None` (having printed why) when
    /// PostgreSQL is not installed and the test may skip.
    pub fn start_or_skip(test: &str) -> anyhow::Result<Option<Self>> {
        let Some(bin) = server_bin_or_skip(test) else { return Ok(None) };
        Self::start(bin).map(Some)
    }

    /// Starts a cluster where the role `warden` (the database's owner) may
    /// connect only over TLS (`hostssl`) with its password (SCRAM), as in a
    /// deployment; the test's own `psql` stays the trusted superuser.
    pub fn start_secured_or_skip(test: &str) -> anyhow::Result<Option<(Self, Secured)>> {
        let Some(bin) = server_bin_or_skip(test) else { return Ok(None) };
        let mut cluster = Self::init(bin)?;
        let data = PathBuf::from(cluster.data());
        // A CA of the test's and a certificate for localhost.
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, SanType};
        let ca_key = KeyPair::generate()?;
        let mut ca = CertificateParams::default();
        ca.distinguished_name.push(DnType::CommonName, "warden test database CA");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_pem = ca.self_signed(&ca_key)?.pem();
        let issuer = Issuer::new(ca, ca_key);
        let key = KeyPair::generate()?;
        let mut leaf = CertificateParams::new(vec!["localhost".to_owned()])?;
        leaf.subject_alt_names.push(SanType::IpAddress(std::net::Ipv4Addr::LOCALHOST.into()));
        let cert = leaf.signed_by(&key, &issuer)?;
        cluster.write_owned(&data.join("server.crt"), cert.pem().as_bytes(), 0o644)?;
        cluster.write_owned(&data.join("server.key"), key.serialize_pem().as_bytes(), 0o600)?;
        let mut conf = std::fs::read_to_string(data.join("postgresql.conf"))?;
        conf.push_str("\nssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n");
        cluster.write_owned(&data.join("postgresql.conf"), conf.as_bytes(), 0o600)?;
        // First match wins: warden only over TLS with its password; the
        // superuser (the test) trusted on loopback.
        let hba = "hostssl all warden 127.0.0.1/32 scram-sha-256\nhost all warden 127.0.0.1/32 reject\n\
                   host all postgres 127.0.0.1/32 trust\nlocal all all trust\n";
        cluster.write_owned(&data.join("pg_hba.conf"), hba.as_bytes(), 0o600)?;
        cluster.port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        cluster.start_server()?;
        let password = format!("pw-{}", cluster.port);
        cluster.run("createdb", &["-h", "127.0.0.1", "-p", &cluster.port.to_string(), "-U", "postgres", "warden"])?;
        cluster
            .psql(&format!("CREATE ROLE warden LOGIN PASSWORD '{password}'; ALTER DATABASE warden OWNER TO warden"))?;
        let ca_file = cluster.dir.path().join("ca.pem");
        std::fs::write(&ca_file, ca_pem)?;
        let password_file = cluster.dir.path().join("password");
        std::fs::write(&password_file, format!("{password}\n"))?;
        let url = format!("postgres://warden@localhost:{}/warden?sslmode=require", cluster.port);
        Ok(Some((cluster, Secured { ca_file, password_file, url })))
    }

    /// Writes a file in the cluster's folder that the server (as
    /// `postgres`) owns.
    fn write_owned(&self, path: &Path, bytes: &[u8], mode: u32) -> anyhow::Result<()> {
        std::fs::write(path, bytes)?;
        set_mode(path, mode)?;
        if self.as_postgres {
            chown_to_postgres(path)?;
        }
        Ok(())
    }

    /// A cluster made with initdb, not started.
    fn init(bin: PathBuf) -> anyhow::Result<Self> {
        let as_postgres = is_root();
        let dir = tempfile::Builder::new().prefix("warden-pg").tempdir()?;
        // The server runs as `postgres`: it must reach its folder.
        set_mode(dir.path(), 0o755)?;
        if as_postgres {
            chown_to_postgres(dir.path())?;
        }
        let cluster = Self { bin, dir, port: 0, as_postgres, running: false };
        cluster.run("initdb", &["-D", &cluster.data(), "--auth=trust", "-U", "postgres", "-E", "UTF8", "--no-sync"])?;
        Ok(cluster)
    }

    fn start(bin: PathBuf) -> anyhow::Result<Self> {
        let mut cluster = Self::init(bin)?;
        // A port free now; another process could take it before the server
        // binds it, in which case pg_ctl fails and says so.
        cluster.port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        cluster.start_server()?;
        cluster.run("createdb", &["-h", "127.0.0.1", "-p", &cluster.port.to_string(), "-U", "postgres", "warden"])?;
        Ok(cluster)
    }

    fn data(&self) -> String {
        self.dir.path().join("data").display().to_string()
    }

    fn start_server(&mut self) -> anyhow::Result<()> {
        let options = format!("-p {} -k {} -c listen_addresses=127.0.0.1", self.port, self.dir.path().display());
        let log = self.dir.path().join("log").display().to_string();
        self.run("pg_ctl", &["-D", &self.data(), "-l", &log, "-w", "-o", &options, "start"])?;
        self.running = true;
        Ok(())
    }

    /// Runs one of the server's programs (as `postgres` when root).
    fn run(&self, program: &str, args: &[&str]) -> anyhow::Result<()> {
        let path = self.bin.join(program);
        let mut command = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&path);
            c
        } else {
            Command::new(&path)
        };
        let out = command
            .args(args)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running {}", path.display()))?;
        if !out.status.success() {
            bail!(
                "{program} failed ({}): {}{}\nserver log: {}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
                std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
            );
        }
        Ok(())
    }

    /// The URL of the `warden` database, for `wardend --store`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/warden", self.port)
    }

    /// The server's loopback port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Runs SQL with `psql` and returns what it printed (unaligned, no
    /// headers: one row a line, columns separated by `|`).
    pub fn psql(&self, sql: &str) -> anyhow::Result<String> {
        let out = Command::new("psql")
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", &self.url(), "-c", sql])
            .stdin(Stdio::null())
            .output()
            .context("running psql")?;
        if !out.status.success() {
            bail!("psql failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Stops the server as a crash would (`pg_ctl -m immediate`): what was
    /// committed survives, nothing else.
    pub fn crash(&mut self) -> anyhow::Result<()> {
        self.run("pg_ctl", &["-D", &self.data(), "-m", "immediate", "stop"])?;
        self.running = false;
        Ok(())
    }

    /// Starts it again on the same port.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.start_server()
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        if self.running {
            let _ = self.run("pg_ctl", &["-D", &self.data(), "-m", "immediate", "stop"]);
        }
    }
}

fn is_root() -> bool {
    // `id -u` rather than a libc call: this crate has no unsafe code.
    Command::new("id").arg("-u").output().map(|o| o.stdout.trim_ascii() == b"0").unwrap_or(false)
}

fn set_mode(path: &Path, mode: u32) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("chmod {}", path.display()))
}

fn chown_to_postgres(path: &Path) -> anyhow::Result<()> {
    let status = Command::new("chown").arg("postgres:postgres").arg(path).status().context("running chown")?;
    if !status.success() {
        bail!("chown postgres {} failed ({status})", path.display());
    }
    Ok(())
}
