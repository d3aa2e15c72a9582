//! The way out: the run's proxy as the run's session, labels across the hook and the proxy, the run's door, secrets put in by the proxy, and the monitor stopped mid-run.

use super::*;

/// The box's only way out is the run's proxy, which asks Warden as the
/// run's session: curl through it reaches the host's server when allowed,
/// gets a 403 naming the policy when not (and the server never hears of
/// it), and curl around it (`--noproxy '*'`) reaches nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_only_way_out_is_the_proxy_as_the_run_s_session() {
    if !sandbox_or_skip() || !found_or_skip("curl") {
        return;
    }
    let machine = Machine::new();
    let monitor = monitor().await;
    let (address, seen) = upstream().await;
    let script = format!(
        "curl -sS -m 10 http://{address}/via -o via.txt 2> via-err.txt; \
         curl -s -m 10 -X POST -d notes http://{address}/upload -o upload.txt -w '%{{http_code}}' > upload-code.txt; \
         curl -sS -m 5 --noproxy '*' http://{address}/around -o around.txt 2> around-err.txt; \
         echo \"around: $?\" > around-code.txt"
    );
    let command = machine.warden_run(&monitor.endpoint, &["--session", "net-1", "--json", "--", "sh", "-c", &script]);
    let out = output(command).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let summary: serde_json::Value = serde_json::from_str(stderr.lines().last().unwrap()).unwrap();
    assert_eq!(summary["session"], "net-1");
    assert_eq!(summary["by_gate"]["proxy"], serde_json::json!({"ALLOW": 1, "DENY": 1, "PENDING": 0}), "{summary}");
    assert_eq!(summary["refused"][0]["policy_ids"], serde_json::json!(["web.no-upload"]), "{summary}");

    assert_eq!(machine.read("via.txt"), "hello from upstream", "{}", machine.read("via-err.txt"));
    assert_eq!(machine.read("upload-code.txt"), "403");
    let refusal = machine.read("upload.txt");
    assert!(refusal.contains("web.no-upload") && refusal.contains("nothing is uploaded"), "{refusal}");
    assert_ne!(machine.read("around-code.txt"), "around: 0\n", "{}", machine.read("around-err.txt"));
    assert_eq!(*seen.lock().unwrap(), ["/via"], "only the allowed request reached the server");

    let decided = decisions(&monitor.endpoint).await;
    assert_eq!(decided.len(), 2, "{decided:?}");
    assert!(decided.iter().all(|(session, _, _)| session == "net-1"), "{decided:?}");
    assert_eq!(decided[1].2, pb::Outcome::Deny as i32);
    monitor.server.stop().await.unwrap();
}

/// The lethal trifecta across gates, as one session: untrusted web content
/// read through the proxy, then a private file read through the coding
/// agent's hook (`warden-hook`, asking through the run's door with no token,
/// its event naming a session of its own), then an upload through the
/// proxy: the upload waits for a person and never reaches the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn labels_gained_through_the_hook_hold_at_the_proxy() {
    if !sandbox_or_skip() || !found_or_skip("curl") {
        return;
    }
    let Some(hook) = hook_or_skip() else { return };
    let machine = Machine::new();
    let trifecta = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../policies/trifecta.cedar"));
    let policies = format!(
        r#"
@id("files.read") @reason("files may be read") @label("private-data")
permit (principal, action == Action::"fs.read", resource);
@id("web.read") @reason("the web may be read") @label("untrusted-input")
permit (principal, action == Action::"http.request", resource) when {{ ["GET", "HEAD"].contains(resource.method) }};
@id("web.send") @reason("data may be sent")
permit (principal, action == Action::"http.request", resource) when {{ resource.method == "POST" }};
{}"#,
        trifecta.unwrap()
    );
    let monitor = monitor_with(&policies).await;
    let (address, seen) = upstream().await;
    let notes = machine.workspace().join("notes.txt");
    let event = serde_json::json!({"session_id": "claude-session-9", "transcript_path": "/tmp/t.jsonl",
        "cwd": machine.workspace(), "hook_event_name": "PreToolUse", "permission_mode": "default",
        "tool_name": "Read", "tool_input": {"file_path": notes}, "tool_use_id": "toolu_1"});
    std::fs::write(machine.workspace().join("event.json"), event.to_string()).unwrap();
    let script = format!(
        "curl -sS -m 10 http://{address}/page -o page.txt; \
         '{}' claude-code < event.json > hook.json 2> hook-err.txt; \
         curl -s -m 10 -X POST --data-binary @notes.txt http://{address}/upload -o upload.txt -w '%{{http_code}}' > upload-code.txt",
        hook.display()
    );
    let command = machine.warden_run(&monitor.endpoint, &["--session", "trifecta-1", "--", "sh", "-c", &script]);
    let out = output(command).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    println!("{stderr}");
    // The run's summary: every gate's decisions, the approval asked, and
    // that nobody answered it.
    assert!(stderr.contains("warden-run: session trifecta-1 ended with exit code 0: 3 decisions"), "{stderr}");
    assert!(stderr.contains("(hook 1 ALLOW, 0 DENY, 0 PENDING; proxy 1 ALLOW, 0 DENY, 1 PENDING)"), "{stderr}");
    assert!(
        stderr.contains(&format!("(proxy, http.request POST http://{address}/upload): no answer reached the run")),
        "{stderr}"
    );

    assert_eq!(machine.read("page.txt"), "hello from upstream");
    let hook_answer: serde_json::Value = serde_json::from_str(&machine.read("hook.json"))
        .unwrap_or_else(|e| panic!("{e}: {} {}", machine.read("hook.json"), machine.read("hook-err.txt")));
    assert_eq!(hook_answer["hookSpecificOutput"]["permissionDecision"], "allow", "{hook_answer}");
    assert_eq!(machine.read("upload-code.txt"), "403");
    let upload = machine.read("upload.txt");
    assert!(upload.contains("trifecta.no-exfiltration") && upload.contains("PENDING"), "{upload}");
    assert_eq!(*seen.lock().unwrap(), ["/page"], "the upload reached the server");

    let decided = decisions(&monitor.endpoint).await;
    let sessions: Vec<&str> = decided.iter().map(|(s, _, _)| s.as_str()).collect();
    assert_eq!(sessions, ["trifecta-1"; 3], "{decided:?}");
    assert!(decided[1].1.contains("notes.txt"), "the hook's read: {decided:?}");
    assert_eq!(decided[2].2, pb::Outcome::Pending as i32, "{decided:?}");
    // The security team's view: one session, with the labels both gates gave.
    let wardenctl = Path::new(env!("CARGO_BIN_EXE_warden-run")).with_file_name("wardenctl");
    if wardenctl.exists() {
        let shown = Command::new(&wardenctl)
            .args(["sessions", "show", "trifecta-1", "--user", "alice", "--endpoint", &monitor.endpoint])
            .env("WARDEN_TOKEN", ADMIN)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&shown.stdout);
        assert!(shown.status.success(), "{text}{}", String::from_utf8_lossy(&shown.stderr));
        assert!(text.contains("private-data") && text.contains("untrusted-input"), "{text}");
    } else {
        assert!(std::env::var_os("WARDEN_REQUIRE_SANDBOX").is_none(), "{} is not built", wardenctl.display());
        println!("skipped the wardenctl check: {} is not built", wardenctl.display());
    }
    monitor.server.stop().await.unwrap();
}

/// The run's door asks as the run's actor whatever a caller names, and lets
/// a caller wait only on approvals it was handed there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_run_s_door_pins_the_actor_and_its_approvals() {
    let monitor = monitor_with(
        r#"@id("ask") @reason("a person decides") forbid (principal, action, resource) unless { context.approved };
           @id("any") permit (principal, action, resource);"#,
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("monitor.sock");
    let upstream = warden_sdk::Client::connect(monitor.endpoint.clone(), HARNESS).await.unwrap();
    let run_actor = warden_sdk::Actor::new("alice", "claude-code", "run-7");
    let listener = tokio::net::UnixListener::bind(&socket).unwrap();
    tokio::spawn(warden_run::pin::serve(
        listener,
        warden_run::pin::Pin::new(upstream.clone(), run_actor, "hook", Default::default()),
    ));

    let inside =
        warden_sdk::Client::connect(format!("unix:{}", socket.display()), warden_run::pin::MARKER_TOKEN).await.unwrap();
    let bob = warden_sdk::Actor::new("bob", "other-agent", "not-the-run");
    let pending = inside.authorize(&bob, warden_sdk::ActionRequest::read_file("/srv/x")).await.unwrap();
    assert_eq!(pending.outcome, warden_sdk::Outcome::Pending);
    let decided = decisions(&monitor.endpoint).await;
    assert_eq!(decided.len(), 1);
    assert_eq!(decided[0].0, "run-7", "{decided:?}");
    // Its own approval may be awaited; another one, asked outside the
    // door by the same harness credential, may not.
    let waited = inside.await_decision(&pending.approval_id, Duration::from_millis(10)).await.unwrap();
    assert_eq!(waited.outcome, warden_sdk::Outcome::Pending);
    let outside = upstream
        .authorize(
            &warden_sdk::Actor::new("alice", "claude-code", "elsewhere"),
            warden_sdk::ActionRequest::read_file("/srv/y"),
        )
        .await
        .unwrap();
    let refused = inside.await_decision(&outside.approval_id, Duration::from_millis(10)).await.unwrap_err();
    assert!(
        matches!(&refused, warden_sdk::Error::Status(s) if s.code() == tonic::Code::PermissionDenied),
        "{refused:?}"
    );
    monitor.server.stop().await.unwrap();
}

/// A model API key in warden-run's environment reaches the model server
/// only through the proxy, which puts it in after `secret.use` for that
/// destination and header; the box holds the placeholder. A secret of
/// `--secrets` that the policies do not allow there is not put in, and the
/// request does not leave.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_key_is_put_in_by_the_proxy_and_never_inside() {
    if !sandbox_or_skip() || !found_or_skip("curl") {
        return;
    }
    let machine = Machine::new();
    let monitor = monitor_with(r#"
@id("web.any") permit (principal, action == Action::"http.request", resource);
@id("model-key") @reason("the model key goes to the model server in x-api-key")
permit (principal, action == Action::"secret.use", resource == Secret::"anthropic-api-key")
when { context has destination && context.destination == "127.0.0.2" && context has header && context.header == "x-api-key" };
"#).await;
    let (address, seen, heads) = upstream_heads().await;
    let secrets = machine.root.path().join("secrets.toml");
    std::fs::write(&secrets, "deploy-key = \"deploy-s3cr3t\"\n").unwrap();
    std::fs::set_permissions(&secrets, std::fs::Permissions::from_mode(0o600)).unwrap();
    let script = format!(
        "env > got-environ; \
         curl -sS -m 10 -H \"x-api-key: $ANTHROPIC_API_KEY\" -d '{{}}' http://{address}/v1/messages -o model.txt; \
         curl -s -m 10 -H \"authorization: Bearer $DEPLOY_TOKEN\" http://{address}/deploy -o deploy.txt -w '%{{http_code}}' > deploy-code.txt"
    );
    let args =
        ["--secrets", secrets.to_str().unwrap(), "--secret-env", "DEPLOY_TOKEN=deploy-key", "--", "sh", "-c", &script];
    let mut command = machine.warden_run(&monitor.endpoint, &args);
    command.env("ANTHROPIC_API_KEY", "sk-ant-real-123");
    let out = output(command).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let environ = machine.read("got-environ");
    assert!(environ.contains("ANTHROPIC_API_KEY=warden-secret:anthropic-api-key\n"), "{environ}");
    assert!(environ.contains("DEPLOY_TOKEN=warden-secret:deploy-key\n"), "{environ}");
    assert!(!environ.contains("sk-ant-real-123") && !environ.contains("deploy-s3cr3t"), "{environ}");
    assert_eq!(machine.read("model.txt"), "hello from upstream");
    let heads = heads.lock().unwrap().clone();
    assert_eq!(heads.len(), 1, "{heads:?}");
    assert!(heads[0].to_ascii_lowercase().contains("x-api-key: sk-ant-real-123"), "{}", heads[0]);
    assert_eq!(machine.read("deploy-code.txt"), "403");
    assert!(!machine.read("deploy.txt").contains("deploy-s3cr3t"));
    assert_eq!(*seen.lock().unwrap(), ["/v1/messages"]);

    // Passing the key itself in is refused: the placeholder stays.
    let mut command =
        machine.warden_run(&monitor.endpoint, &["--env", "ANTHROPIC_API_KEY", "--", "sh", "-c", "echo ran > ran.txt"]);
    command.env("ANTHROPIC_API_KEY", "sk-ant-real-123");
    let out = output(command).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("holds a secret's placeholder"), "{stderr}");
    assert!(!machine.workspace().join("ran.txt").exists());
    monitor.server.stop().await.unwrap();
}

/// The monitor stopped in the middle of a run: from then on nothing the
/// box asks for is allowed, through the proxy or through the hook.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_monitor_stopped_mid_run_everything_is_refused() {
    if !sandbox_or_skip() || !found_or_skip("curl") {
        return;
    }
    let Some(hook) = hook_or_skip() else { return };
    let machine = Machine::new();
    let monitor = monitor().await;
    let (address, seen) = upstream().await;
    let event = serde_json::json!({"session_id": "c", "transcript_path": "/tmp/t.jsonl", "cwd": machine.workspace(),
        "hook_event_name": "PreToolUse", "permission_mode": "default", "tool_name": "Bash",
        "tool_input": {"command": "ls"}, "tool_use_id": "toolu_1"});
    std::fs::write(machine.workspace().join("event.json"), event.to_string()).unwrap();
    let script = format!(
        "curl -sS -m 10 http://{address}/before -o before.txt; \
         while [ ! -f go ]; do sleep 0.05; done; \
         curl -s -m 10 http://{address}/after -o after.txt -w '%{{http_code}}' > after-code.txt; \
         '{}' claude-code < event.json > hook.json 2> hook-err.txt",
        hook.display()
    );
    let mut command = machine.warden_run(&monitor.endpoint, &["--", "sh", "-c", &script]);
    let child = command.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !machine.workspace().join("before.txt").exists() {
        assert!(Instant::now() < deadline, "the first request did not come back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    monitor.server.stop().await.unwrap();
    std::fs::write(machine.workspace().join("go"), "").unwrap();
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap()).await.unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    assert_eq!(machine.read("before.txt"), "hello from upstream");
    assert_ne!(machine.read("after-code.txt"), "200");
    assert_eq!(*seen.lock().unwrap(), ["/before"], "a request went out with the monitor stopped");
    let answer: serde_json::Value = serde_json::from_str(&machine.read("hook.json"))
        .unwrap_or_else(|e| panic!("{e}: {} {}", machine.read("hook.json"), machine.read("hook-err.txt")));
    assert_eq!(answer["hookSpecificOutput"]["permissionDecision"], "deny", "{answer}");
}
