//! Symbolic links in the workspace (a cloned repository can carry them):
//! a file tool is decided on the path as written and on where its links
//! lead, the strictest answer holding; a path without links is asked once.

use std::os::unix::fs::symlink;
use std::path::Path;

use serde_json::{Value, json};

use crate::support::{ask, claude, credentials, decisions_of, gemini, visible_tempdir};

const POLICIES: &str = r#"
@id("test.read-write")
@reason("the test reads and writes anywhere")
permit (principal, action in [Action::"fs.read", Action::"fs.write"], resource);

@id("test.no-ssh")
@reason("SSH keys are never read or written")
forbid (principal, action in [Action::"fs.read", Action::"fs.write"], resource)
when { resource.path like "*/.ssh/*" || resource.path like "*/.ssh" };
"#;

/// A home with an SSH key, and a workspace whose links lead there.
fn tree(root: &Path) {
    let (home, workspace) = (root.join("home"), root.join("workspace"));
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::write(home.join(".ssh/id_rsa"), "PRIVATE KEY").unwrap();
    std::fs::create_dir_all(workspace.join("src")).unwrap();
    std::fs::write(workspace.join("notes.txt"), "notes").unwrap();
    symlink(home.join(".ssh/id_rsa"), workspace.join("link")).unwrap();
    symlink("../home/.ssh/id_rsa", workspace.join("relative")).unwrap();
    symlink("../home/.ssh", workspace.join("keys")).unwrap();
    // Dangling: writing through it creates the file it names.
    symlink(home.join(".ssh/new_key"), workspace.join("dangling")).unwrap();
    symlink("dangling", workspace.join("chain")).unwrap();
    // A link to a folder above, then down again.
    symlink("..", workspace.join("src/up")).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_tool_is_decided_where_its_links_lead() {
    let monitor = warden_tests::monitor::start_with_policies(POLICIES, credentials()).await.unwrap();
    let endpoint = monitor.endpoint.as_str();
    let root = visible_tempdir();
    tree(root.path());
    let workspace = root.path().join("workspace");
    let key = root.path().join("home/.ssh/id_rsa");
    let at = |name: &str| workspace.join(name);

    let denied: Vec<(&str, &str, Value)> = vec![
        ("claude-code", "Read", json!({"file_path": at("link")})),
        ("claude-code", "Read", json!({"file_path": "relative"})),
        ("claude-code", "Read", json!({"file_path": at("keys/id_rsa")})),
        ("claude-code", "Read", json!({"file_path": at("src/up/link")})),
        ("claude-code", "NotebookRead", json!({"notebook_path": at("link")})),
        ("claude-code", "Write", json!({"file_path": at("dangling"), "content": "x"})),
        ("claude-code", "Write", json!({"file_path": at("chain"), "content": "x"})),
        ("claude-code", "Write", json!({"file_path": at("keys/authorized_keys"), "content": "x"})),
        ("claude-code", "Edit", json!({"file_path": at("link"), "old_string": "a", "new_string": "b"})),
        ("claude-code", "MultiEdit", json!({"file_path": at("relative"), "edits": []})),
        ("claude-code", "NotebookEdit", json!({"notebook_path": at("link"), "new_source": "x"})),
        ("claude-code", "Grep", json!({"pattern": "KEY", "path": at("keys")})),
        ("claude-code", "Grep", json!({"pattern": "KEY", "path": at("link")})),
        ("claude-code", "Glob", json!({"pattern": "*", "path": at("keys")})),
        ("gemini", "read_file", json!({"file_path": "link"})),
        ("gemini", "write_file", json!({"file_path": "dangling", "content": "x"})),
        ("gemini", "replace", json!({"file_path": "link", "old_string": "a", "new_string": "b"})),
        ("gemini", "read_many_files", json!({"include": ["notes.txt", "link"]})),
        ("gemini", "list_directory", json!({"dir_path": "keys"})),
        ("cursor", "beforeReadFile", json!({"file_path": at("link")})),
    ];
    for (agent, tool, input) in denied {
        // A session is one agent's.
        let call = event(agent, &format!("links-{agent}"), &workspace, tool, input.clone());
        let (allowed, reason) = ask(endpoint, agent, 5, call).await;
        assert!(!allowed && reason.contains("test.no-ssh"), "{agent} {tool} {input}: {reason}");
    }
    // The agent reads where the link led.
    let read = event("claude-code", "links-claude-code", &workspace, "Read", json!({"file_path": at("link")}));
    let (_, reason) = ask(endpoint, "claude-code", 5, read).await;
    assert!(reason.contains(key.to_str().unwrap()), "{reason}");

    // A file without links: allowed, asked once.
    let read = event("claude-code", "plain", &workspace, "Read", json!({"file_path": at("notes.txt")}));
    let (allowed, reason) = ask(endpoint, "claude-code", 5, read).await;
    assert!(allowed, "{reason}");
    let decided = decisions_of(endpoint, "plain").await;
    assert_eq!(decided.len(), 1, "{decided:#?}");
    assert_eq!(decided[0].resource, format!("File::{:?}", at("notes.txt").to_str().unwrap()));
    monitor.server.stop().await.unwrap();
}

fn event(agent: &str, session: &str, cwd: &Path, tool: &str, input: Value) -> Value {
    match agent {
        "claude-code" => claude(session, cwd, tool, input),
        "gemini" => gemini(session, cwd, tool, input),
        _ => {
            let mut event = json!({"conversation_id": session, "generation_id": "g", "hook_event_name": tool,
                "workspace_roots": [cwd]});
            event.as_object_mut().unwrap().extend(input.as_object().unwrap().clone());
            event
        }
    }
}
