//! `wardenctl … | head -1`: a reader that takes one line and goes away.
//! The output here is longer than a pipe holds, so wardenctl is still
//! writing when the pipe closes; it must end quietly, with the status a
//! shell gives a program a closed pipe stopped (141), never a panic.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::io::{BufRead as _, BufReader, Read as _};
use std::path::Path;
use std::process::{Command, Stdio};

use warden_monitor::auth::{CredentialConfig, Role};
use warden_monitor::server::{ServerConfig, start};
use warden_sdk::{ActionRequest, Actor, Client};

const HARNESS: &str = "wdn_pipe_test_harness";
const ADMIN: &str = "wdn_pipe_test_admin";

/// More than a pipe holds (64 KiB on Linux) plus what the reader's buffer
/// takes at once (8 KiB): a command whose whole output is longer cannot
/// have finished writing when the reader goes away.
const LONGER_THAN_A_PIPE: usize = 80 * 1024;

fn wardenctl(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_wardenctl"));
    command.args(args).env_remove("WARDEN_TOKEN_FILE").env("WARDEN_TOKEN", ADMIN);
    command
}

/// What a reader that takes one line and closes the pipe sees: the line,
/// the exit status, and standard error.
fn one_line_then_close(mut command: Command) -> (String, Option<i32>, String) {
    let mut child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    drop(stdout);
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    let status = child.wait().unwrap();
    (line, status.code(), stderr)
}

/// Runs `args` read whole, then read one line: the whole is longer than a
/// pipe, and the short read ends wardenctl quietly with 141.
fn closes_quietly(args: &[&str], first_line: &str) {
    let whole = wardenctl(args).output().unwrap();
    assert!(whole.status.success(), "{args:?}: {}", String::from_utf8_lossy(&whole.stderr));
    assert!(whole.stdout.len() > LONGER_THAN_A_PIPE, "{args:?}: only {} bytes", whole.stdout.len());
    let (line, code, stderr) = one_line_then_close(wardenctl(args));
    assert!(line.starts_with(first_line), "{args:?}: {line}");
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    assert_eq!((code, stderr.as_str()), (Some(141), ""), "{args:?}");
}

#[test]
fn completions_end_quietly_when_the_reader_goes_away() {
    closes_quietly(&["completions", "bash"], "_wardenctl()");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_listings_end_quietly_when_the_reader_goes_away() {
    let data = tempfile::tempdir().unwrap();
    let policies = Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies");
    let config = ServerConfig::new(
        policies,
        data.path().to_owned(),
        vec![
            CredentialConfig::for_token("h", Role::Harness, HARNESS, &["*"]),
            CredentialConfig::for_token("a", Role::Admin, ADMIN, &[]),
        ],
    );
    let monitor = start(config, tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap()).await.unwrap();
    let endpoint = format!("http://{}", monitor.addr());
    // A thousand decisions: a listing of them is longer than a pipe.
    let client = Client::connect(endpoint.clone(), HARNESS).await.unwrap();
    let mut asked = tokio::task::JoinSet::new();
    for worker in 0..16 {
        let client = client.clone();
        asked.spawn(async move {
            let actor = Actor::new("alice", "claude-code", format!("pipe-{worker}"));
            for n in 0..63 {
                let path = format!("/home/alice/project/src/module_{worker}_{n}.rs");
                client.authorize(&actor, ActionRequest::read_file(path)).await.unwrap();
            }
        });
    }
    while let Some(done) = asked.join_next().await {
        done.unwrap();
    }

    tokio::task::spawn_blocking(move || {
        let endpoint_args = ["--endpoint", endpoint.as_str()];
        closes_quietly(&[&endpoint_args[..], &["audit", "tail", "--all"]].concat(), "#");
        closes_quietly(&[&endpoint_args[..], &["--json", "audit", "tail", "--all"]].concat(), "{");
        closes_quietly(&[&endpoint_args[..], &["audit", "export"]].concat(), "{");
    })
    .await
    .unwrap();
    monitor.stop().await.unwrap();
}
