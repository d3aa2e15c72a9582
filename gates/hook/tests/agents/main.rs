//! The real Codex CLI, Gemini CLI, Cline and OpenCode (npm, pinned by
//! `scripts/test-deps`) with `warden-hook` installed the way a user installs
//! it (`warden-hook install AGENT`), each driven by a scripted model server
//! on loopback, against a real monitor with the bundled policies. Each test
//! checks what happened on disk: an allowed command runs, a denied one does
//! not and the model is told the policy and its reason, a command waiting
//! for a person runs once approved, a denied file write leaves the file as
//! it was, and with the monitor stopped nothing runs. A missing CLI skips
//! the test with a reason (fails under `WARDEN_REQUIRE_NPM=1`, as in CI).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use warden_proto::v1 as pb;
use warden_tests::model_server::{ScriptedModel, Step};
use warden_tests::monitor::Bundled;

mod cline;
mod codex;
mod gemini;
mod opencode;

const HARNESS: &str = "wdn_agents_test_harness";
const APPROVER: &str = "wdn_agents_test_approver";
const ADMIN: &str = "wdn_agents_test_admin";

/// The commands every agent is given, in its shell tool, and what the
/// bundled policies say: a copy in the workspace runs; reading `.env`
/// is refused (`commands.no-credentials`); a recursive delete waits for a
/// person.
const ALLOWED: &str = "cp notes.txt copy.txt";
const DENIED: &str = "cat .env > leaked.txt";
const PENDING: &str = "rm -r build";
/// The workspace's `.npmrc`, which each agent's file tool is told to
/// overwrite (`files.no-credentials`; Gemini CLI refuses `.env` itself
/// before its hook is asked).
const NPMRC: &str = "registry=https://registry.npmjs.org/\n";

/// A workspace with notes, a `.env` and a build folder, the monitor with
/// the bundled policies (alice's workspace being this one), a home folder
/// for the agent, and the harness token in a file only its owner reads.
struct Scene {
    bundled: Bundled,
}

impl Scene {
    async fn start() -> Self {
        let bundled = Bundled::start(HARNESS, APPROVER, ADMIN).await.unwrap();
        let scene = Self { bundled };
        let workspace = scene.workspace();
        std::fs::write(workspace.join("notes.txt"), "hello from the notes").unwrap();
        std::fs::write(workspace.join(".env"), "SECRET=1\n").unwrap();
        std::fs::write(workspace.join(".npmrc"), NPMRC).unwrap();
        std::fs::create_dir_all(workspace.join("build/out")).unwrap();
        std::fs::write(workspace.join("build/out/app"), "old build").unwrap();
        std::fs::create_dir_all(scene.home()).unwrap();
        std::fs::write(scene.token_file(), format!("{HARNESS}\n")).unwrap();
        std::fs::set_permissions(scene.token_file(), std::fs::Permissions::from_mode(0o600)).unwrap();
        scene
    }

    fn workspace(&self) -> PathBuf {
        self.bundled.workspace()
    }

    fn home(&self) -> PathBuf {
        self.bundled.root.path().join("home")
    }

    fn token_file(&self) -> PathBuf {
        self.bundled.root.path().join("harness.token")
    }

    /// `warden-hook install AGENT ARGS…` for this monitor and token file,
    /// run in the workspace with `env`; its stderr.
    fn install(&self, agent: &str, args: &[&str], env: &[(&str, &Path)]) -> String {
        let mut command = Command::new(env!("CARGO_BIN_EXE_warden-hook"));
        command
            .args(["install", agent, "--max-wait", "90", "--endpoint", &self.bundled.endpoint])
            .args(args)
            .arg("--token-file")
            .arg(self.token_file())
            .current_dir(self.workspace())
            .env_remove("WARDEN_TOKEN")
            .env("HOME", self.home());
        for (name, value) in env {
            command.env(name, value);
        }
        let output = command.output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(output.status.success(), "{stderr}");
        stderr
    }

    /// An agent's command: a clean environment (PATH, the home folder, the
    /// user Warden acts for) in the workspace, stdin closed.
    fn agent(&self, program: &Path) -> Command {
        let mut command = Command::new(program);
        command
            .current_dir(self.workspace())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.home())
            .env("WARDEN_USER", "alice")
            .stdin(Stdio::null());
        command
    }

    /// `command`'s output; the agent is killed after three minutes, and
    /// what it left running (Cline's hub daemon) once it ends.
    async fn output(&self, mut command: Command) -> Output {
        let home = self.home();
        tokio::task::spawn_blocking(move || {
            use std::io::Read as _;
            let mut child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
            let read = |mut pipe: Box<dyn std::io::Read + Send>| {
                let (done, bytes) = std::sync::mpsc::channel();
                std::thread::spawn(move || {
                    let mut read = Vec::new();
                    let _ = pipe.read_to_end(&mut read);
                    let _ = done.send(read);
                });
                bytes
            };
            let stdout = read(Box::new(child.stdout.take().unwrap()));
            let stderr = read(Box::new(child.stderr.take().unwrap()));
            let deadline = std::time::Instant::now() + Duration::from_secs(180);
            let status = loop {
                if let Some(status) = child.try_wait().unwrap() {
                    break status;
                }
                if std::time::Instant::now() > deadline {
                    let _ = child.kill();
                    break child.wait().unwrap();
                }
                std::thread::sleep(Duration::from_millis(50));
            };
            kill_left_running(&home);
            let collect = |bytes: std::sync::mpsc::Receiver<Vec<u8>>| {
                bytes.recv_timeout(Duration::from_secs(10)).unwrap_or_default()
            };
            Output { status, stdout: collect(stdout), stderr: collect(stderr) }
        })
        .await
        .unwrap()
    }

    /// What the run left on disk and told the model, under the bundled
    /// policies: the allowed copy, no leak, the approved delete, `.env`
    /// unchanged; the model read the refusals' policies and reasons.
    async fn as_warden_decided(&self, model: &ScriptedModel, output: &Output, approval: &pb::Approval) {
        let workspace = self.workspace();
        let said = format!("{}\n{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        assert_eq!(approval.state, pb::ApprovalState::Approved as i32, "{approval:?}");
        assert_eq!(
            std::fs::read_to_string(workspace.join("copy.txt")).ok().as_deref(),
            Some("hello from the notes"),
            "the allowed copy did not run: {said}"
        );
        assert!(!workspace.join("leaked.txt").exists(), "the denied command ran: {said}");
        assert!(!workspace.join("build").exists(), "the approved delete did not run: {said}");
        assert_eq!(
            std::fs::read_to_string(workspace.join(".env")).unwrap(),
            "SECRET=1\n",
            "the denied write ran: {said}"
        );
        // The model's last request carries all it was told (a tool's result,
        // or, for Cline, a message after it).
        let last = model.requests().last().map(ToString::to_string).unwrap_or_default();
        let told = |policy: &str| last.contains(policy) && last.contains("credential files");
        assert!(told("commands.no-credentials"), "the model was not told the command's policy: {last}");
        assert!(told("files.no-credentials"), "the model was not told the write's policy: {last}");
        // Each asked once, in one session, with the outcome the bundled
        // policies give.
        let decisions = self.bundled.decisions().await.unwrap();
        let outcome = |what: &str| {
            let found: Vec<i32> = decisions.iter().filter(|(_, r, _)| r.contains(what)).map(|(_, _, o)| *o).collect();
            assert_eq!(found.len(), 1, "{what} was asked {} times: {decisions:?}", found.len());
            found[0]
        };
        assert_eq!(outcome(ALLOWED), pb::Outcome::Allow as i32, "{decisions:?}");
        assert_eq!(outcome(DENIED), pb::Outcome::Deny as i32, "{decisions:?}");
        assert_eq!(outcome(PENDING), pb::Outcome::Pending as i32, "{decisions:?}");
        assert_eq!(outcome("/.npmrc"), pb::Outcome::Deny as i32, "{decisions:?}");
        assert!(decisions.iter().all(|(session, _, _)| *session == decisions[0].0), "{decisions:?}");
    }

    /// With the monitor stopped, `touch ran.txt` did not run and the model
    /// was told why.
    fn nothing_ran(&self, model: &ScriptedModel, output: &Output) {
        let said = format!("{}\n{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        assert!(!self.workspace().join("ran.txt").exists(), "a tool ran with Warden stopped: {said}");
        let last = model.requests().last().map(ToString::to_string).unwrap_or_default();
        assert!(last.contains("Warden is unreachable"), "{last}\n{said}");
    }
}

/// The script: the allowed, denied and waiting commands in the agent's
/// shell tool (`tool`, its command in `field`), then `write` (the agent's
/// own file tool writing `.npmrc`), then a final answer.
fn script(tool: &str, field: &str, write: Step) -> Vec<Step> {
    let shell = |command: &str| Step::tool_use(tool, serde_json::json!({field: command, "description": "run it"}));
    vec![shell(ALLOWED), shell(DENIED), shell(PENDING), write, Step::text("all done")]
}

/// Runs `command` (blocking) with a deadline, while the approver approves
/// the one request that waits.
async fn run_approving(scene: &Scene, command: Command) -> (Output, pb::Approval) {
    let run = scene.output(command);
    let (output, approval) = tokio::join!(run, scene.bundled.approve_when_pending());
    (output, approval.unwrap())
}

/// Kills every process whose `HOME` is `home` (what an agent run left
/// behind: Cline's hub daemon keeps running after the CLI exits).
fn kill_left_running(home: &Path) {
    let marker = format!("HOME={}", home.display());
    let Ok(entries) = std::fs::read_dir("/proc") else { return };
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        let environ = std::fs::read(entry.path().join("environ")).unwrap_or_default();
        if environ.split(|b| *b == 0).any(|var| var == marker.as_bytes()) {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
    }
}
