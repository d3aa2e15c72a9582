//! Asks the monitor whether alice's agent may read a file, the way a harness
//! would before letting the agent act.
//!
//! `WARDEN_TOKEN_FILE=.warden/harness.token cargo run -p warden-sdk --example check -- /home/alice/project/src/main.rs`

use std::process::ExitCode;

use warden_sdk::{ActionRequest, Actor, Client, Error};

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let path = std::env::args().nth(1).unwrap_or_else(|| "/home/alice/project/src/main.rs".to_owned());
    let client = match Client::from_env().await {
        Ok(client) => client,
        Err(e) => {
            eprintln!("check: {e}");
            return ExitCode::FAILURE;
        }
    };
    let actor = Actor::new("alice", "claude-code", "example-session");
    match client.check(&actor, ActionRequest::read_file(&path).justification("example")).await {
        Ok(decision) => {
            println!("allowed: {path} ({}, audit #{})", decision.policy_ids.join(", "), decision.audit_seq);
            ExitCode::SUCCESS
        }
        Err(Error::Denied(decision)) => {
            println!("denied: {path}: {}", decision.reasons.join("; "));
            ExitCode::from(2)
        }
        Err(e) => {
            // Anything else is not an allow either: fail closed.
            eprintln!("not allowed: {e}");
            ExitCode::FAILURE
        }
    }
}
