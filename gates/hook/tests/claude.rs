//! The real Claude Code (npm) with `warden-hook claude-code` as its
//! PreToolUse hook, driven by a scripted model on loopback, against a real
//! monitor with the bundled policies and a workspace in a temporary folder.
//! Each test checks what happened on disk, not only what the hook said.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use warden_monitor::auth::{CredentialConfig, Role};
use warden_monitor::server::{RunningServer, ServerConfig, start};
use warden_proto::v1 as pb;
use warden_tests::claude_code::{ClaudeRun, claude_or_skip};
use warden_tests::model_server::{ScriptedModel, Step};

const HARNESS: &str = "wdn_hook_test_harness";
const APPROVER: &str = "wdn_hook_test_approver";

/// A workspace, the bundled policies with alice's workspace in it, and a
/// monitor on loopback.
struct Setup {
    root: tempfile::TempDir,
    monitor: Option<RunningServer>,
    endpoint: String,
}

impl Setup {
    async fn start() -> Self {
        let root = tempfile::tempdir().unwrap();
        let workspace = root.path().join("project");
        std::fs::create_dir_all(&workspace).unwrap();
        let policies = root.path().join("policies");
        copy_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../policies"), &policies);
        // alice's workspace is the temporary one.
        let entities_path = policies.join("entities.json");
        let mut entities: Value = serde_json::from_str(&std::fs::read_to_string(&entities_path).unwrap()).unwrap();
        for entity in entities.as_array_mut().unwrap() {
            if entity["uid"]["id"] == "alice" {
                entity["attrs"]["workspace"]["__entity"]["id"] = json!(workspace.to_str().unwrap());
            }
        }
        std::fs::write(&entities_path, entities.to_string()).unwrap();
        let data = root.path().join("data");
        let mut approver = CredentialConfig::for_token("oncall", Role::Approver, APPROVER, &[]);
        approver.groups = vec!["*".into()];
        let config = ServerConfig::new(
            policies,
            data,
            vec![CredentialConfig::for_token("claude-hook", Role::Harness, HARNESS, &["alice"]), approver],
        );
        let monitor = start(config, tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap()).await.unwrap();
        let endpoint = format!("http://{}", monitor.addr());
        Self { root, monitor: Some(monitor), endpoint }
    }

    fn workspace(&self) -> PathBuf {
        self.root.path().join("project")
    }

    /// Claude Code in the workspace, with the hook (as `install` writes it)
    /// the only gate: every tool pre-approved.
    fn claude(&self, claude: &Path, hook_command: &str) -> ClaudeRun {
        let settings = json!({"hooks": {"PreToolUse": [{"matcher": "*", "hooks": [
            {"type": "command", "command": hook_command, "timeout": 120, "onFailure": "block"}
        ]}]}});
        ClaudeRun::new(claude, "do the task")
            .current_dir(self.workspace())
            .allowed_tools(["Bash", "Read", "Write", "Edit"])
            .settings(settings)
            .env("WARDEN_ENDPOINT", &self.endpoint)
            .env("WARDEN_TOKEN", HARNESS)
            .env("WARDEN_USER", "alice")
            .timeout(Duration::from_secs(180))
    }

    /// Waits for one approval, then approves it.
    async fn approve_when_pending(&self) -> pb::Approval {
        let channel = tonic::transport::Channel::from_shared(self.endpoint.clone()).unwrap().connect().await.unwrap();
        let token: tonic::metadata::MetadataValue<_> = format!("Bearer {APPROVER}").parse().unwrap();
        let mut approvals =
            pb::approvals_client::ApprovalsClient::with_interceptor(channel, move |mut r: tonic::Request<()>| {
                r.metadata_mut().insert("authorization", token.clone());
                Ok(r)
            });
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        let approval = loop {
            let list = approvals.list_pending(pb::ListPendingRequest::default()).await.unwrap().into_inner();
            if let Some(approval) = list.approvals.into_iter().next() {
                break approval;
            }
            assert!(tokio::time::Instant::now() < deadline, "nothing went pending");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let resolve = pb::ResolveRequest { approval_id: approval.approval_id, approve: true, ..Default::default() };
        approvals.resolve(resolve).await.unwrap().into_inner()
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

fn hook() -> String {
    format!("{} claude-code --max-wait 90", env!("CARGO_BIN_EXE_warden-hook"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_runs_what_warden_allows_and_is_told_why_the_rest_is_not() {
    let Some(claude) = claude_or_skip().unwrap() else { return };
    let setup = Setup::start().await;
    let workspace = setup.workspace();
    std::fs::write(workspace.join("notes.txt"), "hello from the notes").unwrap();
    std::fs::write(workspace.join(".env"), "SECRET=1\n").unwrap();
    // A build folder to delete: a recursive delete waits for a person.
    std::fs::create_dir_all(workspace.join("build/out")).unwrap();
    std::fs::write(workspace.join("build/out/app"), "old build").unwrap();

    let model = ScriptedModel::start(vec![
        Step::tool_use("Read", json!({"file_path": workspace.join("notes.txt")})),
        Step::tool_use("Bash", json!({"command": "cat .env > leaked.txt", "description": "show the env"})),
        Step::tool_use("Write", json!({"file_path": workspace.join(".env"), "content": "SECRET=stolen\n"})),
        Step::tool_use("Bash", json!({"command": "rm -r build", "description": "clean the build"})),
        Step::text("done"),
    ])
    .await
    .unwrap();
    let run = setup.claude(&claude, &hook()).run(&model);
    let (output, approval) = tokio::join!(run, setup.approve_when_pending());
    let output = output.unwrap();
    assert_eq!(approval.state, pb::ApprovalState::Approved as i32, "{approval:?}");

    let results = model.tool_results();
    assert_eq!(results.len(), 4, "{results:#?}\n{}\n{}", output.stdout, output.stderr);
    // The read inside the workspace ran.
    assert!(!results[0].is_error && results[0].content.contains("hello from the notes"), "{results:#?}");
    // The credential read did not run, and the model reads the policy.
    assert!(results[1].is_error, "{results:#?}");
    assert!(
        results[1].content.contains("commands.no-credentials") || results[1].content.contains("files.no-credentials"),
        "{results:#?}"
    );
    assert!(results[1].content.contains("credential files"), "{results:#?}");
    assert!(!workspace.join("leaked.txt").exists(), "the denied command ran");
    // The write of .env did not happen.
    assert!(results[2].is_error && results[2].content.contains("files.no-credentials"), "{results:#?}");
    assert_eq!(std::fs::read_to_string(workspace.join(".env")).unwrap(), "SECRET=1\n");
    // The delete waited for the approver, then ran: the folder is gone.
    assert!(!results[3].is_error, "{results:#?}");
    assert!(!workspace.join("build").exists(), "the approved delete did not run");
    assert_eq!(output.permission_denials().len(), 2, "{}", output.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_warden_stopped_or_the_hook_broken_nothing_runs() {
    let Some(claude) = claude_or_skip().unwrap() else { return };
    let mut setup = Setup::start().await;
    let workspace = setup.workspace();
    setup.monitor.take().unwrap().stop().await.unwrap();

    // Warden stopped: the hook's own deny, naming the cause.
    let model = ScriptedModel::start(vec![
        Step::tool_use("Bash", json!({"command": "touch ran.txt", "description": "touch"})),
        Step::text("done"),
    ])
    .await
    .unwrap();
    setup.claude(&claude, &hook()).run(&model).await.unwrap();
    let results = model.tool_results();
    assert!(results[0].is_error && results[0].content.contains("Warden is unreachable"), "{results:#?}");
    assert!(!workspace.join("ran.txt").exists(), "the tool ran with Warden stopped");

    // A hook that cannot even start: `onFailure: block` stops the tool.
    let model = ScriptedModel::start(vec![
        Step::tool_use("Bash", json!({"command": "touch ran-too.txt", "description": "touch"})),
        Step::text("done"),
    ])
    .await
    .unwrap();
    setup.claude(&claude, "/nonexistent/warden-hook claude-code").run(&model).await.unwrap();
    assert!(model.tool_results()[0].is_error, "{:#?}", model.tool_results());
    assert!(!workspace.join("ran-too.txt").exists(), "the tool ran with its hook missing");
}
