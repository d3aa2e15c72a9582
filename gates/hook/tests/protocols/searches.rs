//! Searches are reads of every file below the folder searched that their
//! filter lets through, asked as a pattern of files (`File.pattern`): under
//! the bundled policies a filter naming credential files is denied, an
//! unfiltered search of the workspace waits for a person, and a search of
//! one named file is a plain read.

use serde_json::json;

use crate::support::{Bundled, ask, claude, decisions_of, gemini};

const CREDENTIALS: &str = "files.no-credentials";
const MONITOR_DATA: &str = "files.monitor-data";
const HIDDEN: &str = "files.hidden-patterns";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_s_grep_and_glob_read_every_file_below_their_folder() {
    let setup = Bundled::start().await;
    let workspace = setup.workspace();
    std::fs::create_dir_all(workspace.join("src")).unwrap();
    std::fs::write(workspace.join("src/main.rs"), "fn main() {}\n").unwrap();
    std::fs::write(workspace.join(".env"), "SECRET=1\n").unwrap();
    let endpoint = setup.endpoint.as_str();
    let event = |tool: &str, input| claude("searches", &workspace, tool, input);

    // One named file, however it is read, is a plain read in the workspace.
    let main_rs = workspace.join("src/main.rs");
    for (tool, input) in [
        ("Read", json!({"file_path": "src/main.rs"})),
        ("Bash", json!({"command": "grep -n fn src/main.rs"})),
        ("Bash", json!({"command": "cat src/main.rs"})),
        ("Grep", json!({"pattern": "fn", "path": main_rs})),
        ("Grep", json!({"pattern": "fn", "path": "src/main.rs", "glob": "*.md"})),
    ] {
        let (allowed, reason) = ask(endpoint, "claude-code", 5, event(tool, input.clone())).await;
        assert!(allowed, "{tool} {input}: {reason}");
    }

    // A filter naming credential files, however it is spelled.
    for (tool, input, policy) in [
        ("Grep", json!({"pattern": "SECRET", "glob": ".env"}), CREDENTIALS),
        ("Grep", json!({"pattern": "SECRET", "glob": "*.rs,.env", "path": workspace}), CREDENTIALS),
        ("Grep", json!({"pattern": "SECRET", "glob": "*.rs .env"}), CREDENTIALS),
        ("Grep", json!({"pattern": "SECRET", "glob": "{*.rs,.env}"}), CREDENTIALS),
        ("Grep", json!({"pattern": "SECRET", "glob": "**/.env", "output_mode": "content"}), CREDENTIALS),
        ("Glob", json!({"pattern": ".env"}), CREDENTIALS),
        ("Glob", json!({"pattern": "**/.env", "path": workspace}), CREDENTIALS),
        ("Glob", json!({"pattern": "**/.warden/*"}), MONITOR_DATA),
        ("Glob", json!({"pattern": format!("{}/**/.ssh/*", workspace.display())}), CREDENTIALS),
    ] {
        let (allowed, reason) = ask(endpoint, "claude-code", 5, event(tool, input.clone())).await;
        assert!(!allowed && reason.contains(policy), "{tool} {input}: {reason}");
    }

    // A search of the whole workspace can read hidden files: a person
    // decides, and nobody answers within the hook's wait.
    let (allowed, reason) = ask(endpoint, "claude-code", 1, event("Grep", json!({"pattern": "SECRET"}))).await;
    assert!(!allowed && reason.contains("waited 1 s") && reason.contains(HIDDEN), "{reason}");

    // What the monitor was asked: the patterns, as Claude Code's ripgrep
    // reads them (a glob without a slash matches at any depth).
    let decided = decisions_of(endpoint, "searches").await;
    let asked = |resource: String| {
        decided
            .iter()
            .find(|d| d.resource == format!("File::{:?}", resource))
            .unwrap_or_else(|| panic!("{resource} was not asked: {decided:#?}"))
    };
    let ws = workspace.display();
    assert_eq!(asked(format!("{ws}/**/.env")).outcome, warden_proto::v1::Outcome::Deny);
    assert_eq!(asked(format!("{ws}/**/.warden/*")).outcome, warden_proto::v1::Outcome::Deny);
    // Asked once: waiting on it asks again under the same request id,
    // which the monitor answers with the same approval.
    let whole_resource = format!("File::{:?}", format!("{ws}/**/*"));
    assert_eq!(decided.iter().filter(|d| d.resource == whole_resource).count(), 1, "{decided:#?}");
    let whole = asked(format!("{ws}/**/*"));
    assert_eq!(
        (whole.outcome, whole.policy_ids.as_slice()),
        (warden_proto::v1::Outcome::Pending, &[HIDDEN.to_owned()][..])
    );
    // The named file was read as itself, not as a folder.
    assert_eq!(asked(format!("{ws}/src/main.rs")).outcome, warden_proto::v1::Outcome::Allow);
    setup.monitor.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_cli_s_searches_read_every_file_they_can_match() {
    let setup = Bundled::start().await;
    let workspace = setup.workspace();
    std::fs::create_dir_all(workspace.join("src")).unwrap();
    std::fs::write(workspace.join("src/main.rs"), "fn main() {}\n").unwrap();
    std::fs::write(workspace.join(".env"), "SECRET=1\n").unwrap();
    let endpoint = setup.endpoint.as_str();
    let event = |tool: &str, input| gemini("gemini-searches", &workspace, tool, input);

    for (tool, input) in [
        ("read_file", json!({"file_path": "src/main.rs"})),
        ("run_shell_command", json!({"command": "grep -n fn src/main.rs"})),
        ("glob", json!({"pattern": "src/*.rs"})),
        ("read_many_files", json!({"include": ["src/main.rs"]})),
    ] {
        let (allowed, reason) = ask(endpoint, "gemini", 5, event(tool, input.clone())).await;
        assert!(allowed, "{tool} {input}: {reason}");
    }
    for (tool, input, policy) in [
        ("grep_search", json!({"pattern": "SECRET", "include_pattern": ".env"}), CREDENTIALS),
        ("search_file_content", json!({"pattern": "SECRET", "include": ".env", "dir_path": "."}), CREDENTIALS),
        ("glob", json!({"pattern": ".env"}), CREDENTIALS),
        ("glob", json!({"pattern": "**/.warden/*", "dir_path": workspace}), MONITOR_DATA),
        ("read_many_files", json!({"include": ["src/main.rs", ".env"]}), CREDENTIALS),
        ("read_many_files", json!({"include": ["**/{.env,*.rs}"]}), CREDENTIALS),
    ] {
        let (allowed, reason) = ask(endpoint, "gemini", 5, event(tool, input.clone())).await;
        assert!(!allowed && reason.contains(policy), "{tool} {input}: {reason}");
    }
    let (allowed, reason) = ask(endpoint, "gemini", 1, event("grep_search", json!({"pattern": "SECRET"}))).await;
    assert!(!allowed && reason.contains(HIDDEN), "{reason}");
    let decided = decisions_of(endpoint, "gemini-searches").await;
    let whole = format!("File::{:?}", format!("{}/**/*", workspace.display()));
    assert!(
        decided.iter().any(|d| d.resource == whole && d.outcome == warden_proto::v1::Outcome::Pending),
        "{decided:#?}"
    );
    setup.monitor.stop().await.unwrap();
}
