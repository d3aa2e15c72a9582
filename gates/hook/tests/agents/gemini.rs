//! Gemini CLI 0.61.0 with `warden-hook install gemini --scope user` (its
//! `GEMINI_CLI_HOME`'s settings): `run_shell_command` and `write_file`.

use super::*;

fn gemini_or_skip() -> Option<PathBuf> {
    warden_tests::claude_code::npm_or_skip("gemini", "@google/gemini-cli").unwrap()
}

/// The user's Gemini settings (the API key's sign-in), then Warden's hook
/// installed into them as a user does.
fn install(scene: &Scene) -> PathBuf {
    let home = scene.bundled.root.path().join("gemini-home");
    std::fs::create_dir_all(home.join(".gemini")).unwrap();
    let settings = serde_json::json!({"security": {"auth": {"selectedType": "gemini-api-key"}}});
    std::fs::write(home.join(".gemini/settings.json"), settings.to_string()).unwrap();
    scene.install("gemini", &["--scope", "user"], &[("GEMINI_CLI_HOME", &home)]);
    let merged: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(home.join(".gemini/settings.json")).unwrap()).unwrap();
    assert_eq!(merged["security"]["auth"]["selectedType"], "gemini-api-key", "the user's settings were lost");
    home
}

fn gemini(scene: &Scene, program: &Path, home: &Path, model: &ScriptedModel) -> Command {
    let mut command = scene.agent(program);
    command
        .args(["-p", "do the task", "--yolo"])
        .env("GEMINI_CLI_HOME", home)
        .env("GOOGLE_GEMINI_BASE_URL", model.base_url())
        .env("GEMINI_API_KEY", "scripted")
        .env("GEMINI_CLI_TRUST_WORKSPACE", "true");
    command
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_cli_runs_what_warden_allows_waits_for_a_person_and_is_told_why_the_rest_is_not() {
    let Some(program) = gemini_or_skip() else { return };
    let scene = Scene::start().await;
    let home = install(&scene);
    let npmrc = scene.workspace().join(".npmrc");
    let write =
        Step::tool_use("write_file", serde_json::json!({"file_path": npmrc, "content": "registry=https://evil/\n"}));
    let model = ScriptedModel::start(script("run_shell_command", "command", write)).await.unwrap();
    let (output, approval) = run_approving(&scene, gemini(&scene, &program, &home, &model)).await;
    scene.as_warden_decided(&model, &output, &approval).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_cli_with_warden_stopped_runs_nothing() {
    let Some(program) = gemini_or_skip() else { return };
    let mut scene = Scene::start().await;
    let home = install(&scene);
    scene.bundled.stop().await.unwrap();
    let model = ScriptedModel::start(vec![
        Step::tool_use("run_shell_command", serde_json::json!({"command": "touch ran.txt"})),
        Step::text("all done"),
    ])
    .await
    .unwrap();
    let output = scene.output(gemini(&scene, &program, &home, &model)).await;
    scene.nothing_ran(&model, &output);
}
