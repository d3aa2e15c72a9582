//! The policy watcher of a running `wardend`: reads of the folder never
//! reload, an edit reloads once, a broken file left in place is reported
//! once per content, and an idle monitor uses next to no CPU.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_stream::StreamExt;
use warden_proto::v1 as pb;
use warden_sdk::BearerToken;

/// A `wardend` whose JSON log lines are kept.
struct Running {
    child: Child,
    endpoint: String,
    logs: Arc<Mutex<Vec<serde_json::Value>>>,
}

impl Running {
    fn start(data: &Path, policies: &Path) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_wardend"))
            .args(["--listen", "127.0.0.1:0", "--log-format", "json", "--data"])
            .arg(data)
            .arg("--policies")
            .arg(policies)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let logs = Arc::new(Mutex::new(Vec::new()));
        let stderr = child.stderr.take().unwrap();
        let kept = Arc::clone(&logs);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let line: serde_json::Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
                kept.lock().unwrap().push(line);
            }
        });
        let stdout = child.stdout.take().unwrap();
        let mut endpoint = None;
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(rest) = line.strip_prefix("wardend listening on ") {
                endpoint = Some(format!("http://{}", rest.split_whitespace().next().unwrap()));
                break;
            }
        }
        let endpoint = endpoint.expect("wardend printed its address");
        Self { child, endpoint, logs }
    }

    /// Log lines whose message starts with `prefix`.
    fn logged(&self, prefix: &str) -> usize {
        let logs = self.logs.lock().unwrap();
        logs.iter().filter(|line| line["message"].as_str().is_some_and(|m| m.starts_with(prefix))).count()
    }

    /// CPU time (user and system) the process has used so far.
    fn cpu(&self) -> Duration {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap();
        // Fields after the command name, which is in parentheses: utime and
        // stime are the 12th and 13th of them, in clock ticks.
        let rest = stat.rsplit_once(')').unwrap().1;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
        let output = Command::new("getconf").arg("CLK_TCK").output().unwrap();
        let per_second: u64 = String::from_utf8(output.stdout).unwrap().trim().parse().unwrap();
        Duration::from_millis(ticks * 1000 / per_second)
    }

    async fn admin(
        &self,
        data: &Path,
    ) -> pb::admin_client::AdminClient<
        tonic::service::interceptor::InterceptedService<tonic::transport::Channel, BearerToken>,
    > {
        let channel = tonic::transport::Channel::from_shared(self.endpoint.clone()).unwrap().connect().await.unwrap();
        let token = std::fs::read_to_string(data.join("admin.token")).unwrap();
        pb::admin_client::AdminClient::with_interceptor(channel, BearerToken::new(token.trim()).unwrap())
    }

    /// How many audit records of `kind` the log holds.
    async fn records(&self, data: &Path, kind: &str) -> usize {
        let mut admin = self.admin(data).await;
        let records: Vec<pb::AuditRecord> = admin
            .tail_audit(pb::TailAuditRequest { all: true, ..Default::default() })
            .await
            .unwrap()
            .into_inner()
            .collect::<Result<_, _>>()
            .await
            .unwrap();
        records.iter().filter(|r| r.kind == kind).count()
    }

    async fn status(&self, data: &Path) -> pb::PolicyStatusResponse {
        self.admin(data).await.policy_status(pb::PolicyStatusRequest {}).await.unwrap().into_inner()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Reads every file of `dir`, as `cat policies/*` or `wardenctl policy
/// check` does, every 20 ms for `span`.
fn read_folder_for(dir: &Path, span: Duration) {
    let until = Instant::now() + span;
    while Instant::now() < until {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_file() {
                std::fs::read(&path).unwrap();
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A copy of the bundled policy folder (its files, not its test suites).
fn bundled_copy() -> tempfile::TempDir {
    let bundled = Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies");
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(bundled).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            std::fs::copy(&path, dir.path().join(path.file_name().unwrap())).unwrap();
        }
    }
    dir
}

/// Polls `check` until it holds, for at most 30 s.
async fn until<F: std::future::Future<Output = bool>>(what: &str, mut check: impl FnMut() -> F) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !check().await {
        assert!(Instant::now() < deadline, "waited 30 s for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The watcher waits at most this long after a change before it reloads;
/// a little more is how long a test waits for a reload that must not come.
const QUIET: Duration = Duration::from_millis(1500);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_never_reload_an_edit_reloads_once_and_a_broken_file_is_reported_once_per_content() {
    let policies = bundled_copy();
    let data = tempfile::tempdir().unwrap();
    let data = data.path().join("data");
    let wardend = Running::start(&data, policies.path());
    let loaded = wardend.status(&data).await;

    // Reads of the folder, the monitor's own included, change nothing.
    tokio::task::block_in_place(|| read_folder_for(policies.path(), Duration::from_secs(2)));
    tokio::time::sleep(QUIET).await;
    assert_eq!(wardend.records(&data, "policy.reload").await, 0, "a read of the folder reloaded the policies");
    assert_eq!(wardend.status(&data).await.loaded_at, loaded.loaded_at, "the loaded time moved without a change");

    // Idle, the monitor does (next to) nothing.
    let before = wardend.cpu();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let idle = wardend.cpu().saturating_sub(before);
    eprintln!("wardend used {idle:?} of CPU in 3 s idle after the folder was read");
    assert!(idle < Duration::from_millis(150), "an idle wardend used {idle:?} of CPU in 3 s");

    // An edit reloads once, however the folder is read afterwards.
    let freeze = "@id(\"freeze\") @reason(\"frozen\")\nforbid (principal, action == Action::\"fs.read\", resource in Dir::\"/frozen\");\n";
    std::fs::write(policies.path().join("freeze.cedar"), freeze).unwrap();
    until("the edit loaded", || async { wardend.status(&data).await.policy_version != loaded.policy_version }).await;
    tokio::task::block_in_place(|| read_folder_for(policies.path(), Duration::from_secs(1)));
    tokio::time::sleep(QUIET).await;
    assert_eq!(wardend.records(&data, "policy.reload").await, 1);
    assert_eq!(wardend.logged("policies reloaded"), 1);

    // A broken file left in place, read again and again: one record, one warning.
    let broken = policies.path().join("broken.cedar");
    std::fs::write(&broken, "@id(\"oops\")\npermit (principal, action, resource) when { resource.nope };\n").unwrap();
    until("the failure reported", || async { !wardend.status(&data).await.error.is_empty() }).await;
    let hold = if std::env::var_os("WARDEN_SLOW_TESTS").is_some() { 60 } else { 5 };
    tokio::task::block_in_place(|| read_folder_for(policies.path(), Duration::from_secs(hold)));
    tokio::time::sleep(QUIET).await;
    assert_eq!(wardend.records(&data, "policy.reload-failed").await, 1, "after {hold} s of a broken file");
    assert_eq!(wardend.logged("policy reload failed"), 1, "after {hold} s of a broken file");

    // Written again with the same text: still once. Other broken text: once more.
    std::fs::write(&broken, "@id(\"oops\")\npermit (principal, action, resource) when { resource.nope };\n").unwrap();
    tokio::time::sleep(QUIET).await;
    assert_eq!(wardend.records(&data, "policy.reload-failed").await, 1);
    std::fs::write(&broken, "not cedar at all\n").unwrap();
    until("the second failure reported", || async { wardend.records(&data, "policy.reload-failed").await == 2 }).await;
    assert!(wardend.status(&data).await.error.contains("broken.cedar:1:"));

    // Removed: the serving set is what the folder holds again, the error goes,
    // and nothing is reloaded.
    std::fs::remove_file(&broken).unwrap();
    until("the error cleared", || async { wardend.status(&data).await.error.is_empty() }).await;
    tokio::time::sleep(QUIET).await;
    assert_eq!(wardend.records(&data, "policy.reload").await, 1);
    assert_eq!(wardend.records(&data, "policy.reload-failed").await, 2);
    assert_eq!(wardend.logged("policy reload failed"), 2);
}
