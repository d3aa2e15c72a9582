//! What the box lets a command see and do: credentials hidden, the system read-only, the workspace written, the box ending with the run, `run.toml`, and what an attacker's review found.

use super::*;

/// Inside the box the user's credentials, the token file and the
/// workspace's `.env` files are not there (or empty), the system is
/// read-only, the workspace is written (checked on disk), the environment
/// holds no token, and the agent's exit code is the run's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_box_hides_credentials_and_keeps_writes_to_the_workspace() {
    if !sandbox_or_skip() {
        return;
    }
    let machine = Machine::new();
    let monitor = monitor().await;
    let token_file = machine.token_file().display().to_string();
    let script = format!(
        "cat ~/.ssh/id_rsa > got-ssh 2>&1; cat '{token_file}' > got-token 2>&1; cat .env > got-env; \
         cat app/.env.local > got-env-local; cat .warden/admin.token > got-admin; env > got-environ; echo written > out.txt; \
         echo x 2> got-home > ~/new; echo x 2> got-etc > /etc/warden-run-test; exit 7"
    );
    let mut command = machine.warden_run(&monitor.endpoint, &["--session", "box-1", "--", "sh", "-c", &script]);
    command.env("ANTHROPIC_API_KEY", "sk-real-key").env("SSH_AUTH_SOCK", "/run/user/1/ssh.sock");
    let out = output(command).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(7), "{stderr}");
    assert!(stderr.contains("session box-1"), "{stderr}");

    assert!(machine.read("got-ssh").contains("No such file"), "{}", machine.read("got-ssh"));
    assert!(machine.read("got-token").contains("No such file"), "{}", machine.read("got-token"));
    assert_eq!(machine.read("got-env"), "");
    assert_eq!(machine.read("got-env-local"), "");
    assert_eq!(machine.read("got-admin"), "");
    assert_eq!(machine.read(".warden/admin.token"), "wdn_admin_secret");
    assert!(machine.read("got-home").contains("Read-only"), "{}", machine.read("got-home"));
    assert!(machine.read("got-etc").contains("Read-only"), "{}", machine.read("got-etc"));
    assert_eq!(machine.read("out.txt"), "written\n");
    // The files the box hid are as they were, and nothing was made outside.
    assert_eq!(machine.read(".env"), "API_KEY=real");
    assert_eq!(machine.read("app/.env.local"), "DB_PASSWORD=real");
    assert!(!machine.home().join("new").exists());
    assert!(!Path::new("/etc/warden-run-test").exists());

    let environ = machine.read("got-environ");
    for secret in [HARNESS, "sk-real-key", "ssh.sock", "WARDEN_TOKEN_FILE"] {
        assert!(!environ.contains(secret), "{secret} inside: {environ}");
    }
    // The gates inside ask through the run's door; their token is a marker.
    assert!(environ.contains("WARDEN_TOKEN=warden-run\n"), "{environ}");
    assert!(environ.contains("WARDEN_ENDPOINT=unix:/run/warden/sock/monitor.sock\n"), "{environ}");
    assert!(environ.contains("WARDEN_SESSION=box-1\n"), "{environ}");
    assert!(environ.contains("HTTPS_PROXY=http://127.0.0.1:3128\n"), "{environ}");
    assert!(environ.contains("SSL_CERT_FILE=/run/warden/ca-bundle.pem\n"), "{environ}");
    monitor.server.stop().await.unwrap();
}

/// Killing warden-run (SIGKILL: no clean-up of its own) ends the agent and
/// everything it started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_warden_run_ends_the_agent() {
    if !sandbox_or_skip() || !found_or_skip("pgrep") {
        return;
    }
    let machine = Machine::new();
    let monitor = monitor().await;
    let marker = format!("sleep {}", 900_000 + std::process::id() % 90_000);
    let script = format!("({marker}) & {marker}");
    let mut command = machine.warden_run(&monitor.endpoint, &["--", "sh", "-c", &script]);
    let mut child = command.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !running(&marker) {
        assert!(Instant::now() < deadline, "the agent did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while running(&marker) {
        assert!(Instant::now() < deadline, "`{marker}` outlived warden-run");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    monitor.server.stop().await.unwrap();
}

/// Without bubblewrap warden-run refuses to start, says why and what to
/// do, and runs nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_box_nothing_runs_and_the_refusal_says_why() {
    let machine = Machine::new();
    let monitor = monitor().await;
    let mut command = machine.warden_run(&monitor.endpoint, &["--", "sh", "-c", "echo ran > ran.txt"]);
    command.env("WARDEN_BWRAP", "/nonexistent/bwrap");
    let out = output(command).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("bubblewrap") && stderr.contains("--no-sandbox"), "{stderr}");
    assert!(!machine.workspace().join("ran.txt").exists());
    monitor.server.stop().await.unwrap();
}

/// `run.toml` adds to every run's box: paths not there, workspace files
/// shown empty, paths the agent may write, variables passed in; a key it
/// does not know is refused, naming it, and nothing runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_toml_adds_to_the_box() {
    if !sandbox_or_skip() {
        return;
    }
    let machine = Machine::new();
    let monitor = monitor().await;
    std::fs::create_dir_all(machine.home().join("private-notes")).unwrap();
    std::fs::write(machine.home().join("private-notes/plans.txt"), "secret plans").unwrap();
    std::fs::create_dir_all(machine.home().join(".cache")).unwrap();
    std::fs::write(machine.workspace().join("prod.tfvars"), "db_password = \"real\"").unwrap();
    let config = machine.root.path().join("run.toml");
    std::fs::write(
        &config,
        "[box]\nhide = [\"~/private-notes\"]\nworkspace_secrets = [\"*.tfvars\"]\nwritable = [\"~/.cache\"]\nenv = [\"GREETING=hello\"]\n",
    )
    .unwrap();
    let script = "cat ~/private-notes/plans.txt > got-notes 2>&1; cat prod.tfvars > got-tfvars; \
                  echo cached > ~/.cache/pip-state; echo \"$GREETING\" > got-greeting";
    let command =
        machine.warden_run(&monitor.endpoint, &["--config", config.to_str().unwrap(), "--", "sh", "-c", script]);
    let out = output(command).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(machine.read("got-notes").contains("No such file"), "{}", machine.read("got-notes"));
    assert_eq!(machine.read("got-tfvars"), "");
    assert_eq!(machine.read("prod.tfvars"), "db_password = \"real\"");
    assert_eq!(std::fs::read_to_string(machine.home().join(".cache/pip-state")).unwrap(), "cached\n");
    assert_eq!(machine.read("got-greeting"), "hello\n");

    std::fs::write(&config, "[box]\nhidden = [\"~/private-notes\"]\n").unwrap();
    let command = machine
        .warden_run(&monitor.endpoint, &["--config", config.to_str().unwrap(), "--", "sh", "-c", "echo ran > ran.txt"]);
    let out = output(command).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("run.toml") && stderr.contains("hidden"), "{stderr}");
    assert!(!machine.workspace().join("ran.txt").exists());
    monitor.server.stop().await.unwrap();
}

/// What an attacker's review found, closed: `.git` is read-only whole (its
/// config, `commondir` and submodules would run code outside, and a renamed
/// copy would carry no mount); an agent's settings folder made in the box
/// is set aside after the run; a `--config` file in the workspace cannot be
/// rewritten; a unix socket in the home folder is not reachable; shell
/// startup files and the run's secrets file are not readable; a `.env`
/// that is a link to elsewhere is masked where it leads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_an_attacker_found_is_closed() {
    if !sandbox_or_skip() {
        return;
    }
    let machine = Machine::new();
    let monitor = monitor().await;
    let ws = machine.workspace();
    std::fs::create_dir_all(ws.join(".git/hooks")).unwrap();
    std::fs::write(ws.join(".git/config"), "[core]\n").unwrap();
    std::fs::write(ws.join("run.toml"), "[box]\n").unwrap();
    std::fs::write(machine.home().join(".bashrc"), "export AWS_SECRET_ACCESS_KEY=real-aws\n").unwrap();
    let secrets = machine.root.path().join("run-secrets.toml");
    std::fs::write(&secrets, "deploy-key = \"deploy-real\"\n").unwrap();
    std::fs::set_permissions(&secrets, std::fs::Permissions::from_mode(0o600)).unwrap();
    let elsewhere = machine.root.path().join("prod.env");
    std::fs::write(&elsewhere, "DB_PASSWORD=linked-real").unwrap();
    std::os::unix::fs::symlink(&elsewhere, ws.join(".env.production")).unwrap();
    let socket = machine.home().join(".docker-desktop.sock");
    let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    listener.set_nonblocking(true).unwrap();

    let script = format!(
        "mv .git .git-old 2> git-mv.txt; echo x 2> git-commondir.txt > .git/commondir; \
         echo '[core] fsmonitor = evil' 2> git-config.txt >> .git/config; \
         mkdir -p .claude && echo '{{\"hooks\": {{}}}}' > .claude/settings.json; \
         echo '[box]' 2> config.txt >> run.toml; cat ~/.bashrc > bashrc.txt; cat '{}' > secrets.txt 2>&1; \
         cat .env.production > linked.txt; \
         python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); s.connect('{}')\" 2> socket.txt; true",
        secrets.display(),
        socket.display()
    );
    let args = [
        "--config",
        "run.toml",
        "--secrets",
        secrets.to_str().unwrap(),
        "--session",
        "attack-1",
        "--",
        "sh",
        "-c",
        &script,
    ];
    let out = output(machine.warden_run(&monitor.endpoint, &args)).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");

    for (file, what) in
        [("git-mv.txt", "mv .git"), ("git-commondir.txt", ".git/commondir"), ("git-config.txt", ".git/config")]
    {
        let said = machine.read(file);
        assert!(said.contains("Read-only") || said.contains("busy"), "{what}: {said}");
    }
    assert!(ws.join(".git/hooks").is_dir() && !ws.join(".git/commondir").exists() && !ws.join(".git-old").exists());
    assert_eq!(machine.read(".git/config"), "[core]\n");
    // The settings made in the box were set aside, and the run said so.
    assert!(!ws.join(".claude").exists(), "an agent's settings made in the box stayed in place");
    assert!(ws.join(".claude.from-warden-run-attack-1/settings.json").exists());
    assert!(stderr.contains("set aside"), "{stderr}");
    assert!(machine.read("config.txt").contains("Read-only"), "{}", machine.read("config.txt"));
    assert_eq!(machine.read("run.toml"), "[box]\n");
    assert_eq!(machine.read("bashrc.txt"), "");
    assert!(!machine.read("secrets.txt").contains("deploy-real"), "{}", machine.read("secrets.txt"));
    assert_eq!(machine.read("linked.txt"), "");
    assert_eq!(std::fs::read_to_string(&elsewhere).unwrap(), "DB_PASSWORD=linked-real");
    assert!(!machine.read("socket.txt").is_empty(), "the socket answered from inside the box");
    assert!(
        matches!(listener.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "a connection reached the home folder's socket"
    );
    monitor.server.stop().await.unwrap();
}

fn running(marker: &str) -> bool {
    Command::new("pgrep").args(["-f", marker]).stdout(Stdio::null()).status().is_ok_and(|s| s.success())
}
