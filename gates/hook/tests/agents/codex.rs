//! Codex CLI 0.171.0 with `warden-hook install codex --scope user` (its
//! `CODEX_HOME`'s `config.toml`, the hook trusted), checked by `warden-hook
//! doctor codex`: `exec_command`, and `apply_patch` run through it.

use super::*;

fn codex_or_skip() -> Option<PathBuf> {
    warden_tests::claude_code::npm_or_skip("codex", "@openai/codex").unwrap()
}

/// The user's Codex config (the scripted provider), then Warden's hook
/// installed into it as a user does, and the doctor's word that it runs.
fn install(scene: &Scene, model: &ScriptedModel) -> PathBuf {
    let home = scene.bundled.root.path().join("codex-home");
    std::fs::create_dir_all(&home).unwrap();
    let config = format!(
        "model = \"scripted\"\nmodel_provider = \"scripted\"\napproval_policy = \"never\"\n\
         sandbox_mode = \"danger-full-access\"\n[model_providers.scripted]\nname = \"scripted\"\n\
         base_url = \"{}/v1\"\nenv_key = \"SCRIPTED_API_KEY\"\nwire_api = \"responses\"\n",
        model.base_url()
    );
    std::fs::write(home.join("config.toml"), config).unwrap();
    scene.install("codex", &["--scope", "user"], &[("CODEX_HOME", &home)]);
    let doctor = Command::new(env!("CARGO_BIN_EXE_warden-hook"))
        .args(["doctor", "codex"])
        .env("CODEX_HOME", &home)
        .env("HOME", scene.home())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&doctor.stdout);
    assert!(doctor.status.success() && said.contains("the hook is trusted"), "{said}");
    home
}

fn codex(scene: &Scene, program: &Path, home: &Path) -> Command {
    let mut command = scene.agent(program);
    command
        .args(["exec", "--skip-git-repo-check", "do the task"])
        .env("CODEX_HOME", home)
        .env("SCRIPTED_API_KEY", "scripted");
    command
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_cli_runs_what_warden_allows_waits_for_a_person_and_is_told_why_the_rest_is_not() {
    let Some(program) = codex_or_skip() else { return };
    let scene = Scene::start().await;
    // Codex 0.171.0 edits files with apply_patch run through its shell
    // tool (it offers no apply_patch tool of its own to this model).
    let patch = "apply_patch <<'EOF'\n*** Begin Patch\n*** Update File: .npmrc\n@@\n-registry=https://registry.npmjs.org/\n\
                 +registry=https://evil/\n*** End Patch\nEOF\n";
    let write = Step::tool_use("exec_command", serde_json::json!({"cmd": patch}));
    let model = ScriptedModel::start(script("exec_command", "cmd", write)).await.unwrap();
    let home = install(&scene, &model);
    let (output, approval) = run_approving(&scene, codex(&scene, &program, &home)).await;
    scene.as_warden_decided(&model, &output, &approval).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_cli_with_warden_stopped_runs_nothing() {
    let Some(program) = codex_or_skip() else { return };
    let mut scene = Scene::start().await;
    let model = ScriptedModel::start(vec![
        Step::tool_use("exec_command", serde_json::json!({"cmd": "touch ran.txt"})),
        Step::text("all done"),
    ])
    .await
    .unwrap();
    let home = install(&scene, &model);
    scene.bundled.stop().await.unwrap();
    let output = scene.output(codex(&scene, &program, &home)).await;
    scene.nothing_ran(&model, &output);
}
