//! OpenCode 1.18.33 with `warden-hook install opencode --scope user` (the
//! plugin in `$XDG_CONFIG_HOME/opencode/plugin/`): `bash` and `edit`.

use super::*;

fn opencode_or_skip() -> Option<PathBuf> {
    warden_tests::claude_code::npm_or_skip("opencode", "opencode-ai").unwrap()
}

/// OpenCode's folders and its config (the scripted model as an
/// OpenAI-compatible provider, every tool allowed: the plugin is the only
/// gate), then Warden's plugin installed as a user does; the variables the
/// run needs.
fn install(scene: &Scene, model: &ScriptedModel) -> Vec<(String, PathBuf)> {
    let root = scene.bundled.root.path().join("opencode");
    let xdg: Vec<(String, PathBuf)> = ["CONFIG", "DATA", "CACHE", "STATE"]
        .iter()
        .map(|kind| (format!("XDG_{kind}_HOME"), root.join(kind.to_lowercase())))
        .collect();
    for (_, dir) in &xdg {
        std::fs::create_dir_all(dir).unwrap();
    }
    let config = serde_json::json!({
        "$schema": "https://opencode.ai/config.json",
        "model": "scripted/scripted", "small_model": "scripted/scripted", "autoupdate": false, "share": "disabled",
        "provider": {"scripted": {"npm": "@ai-sdk/openai-compatible", "name": "Scripted",
            "options": {"baseURL": format!("{}/v1", model.base_url()), "apiKey": "scripted"},
            "models": {"scripted": {"name": "scripted", "tool_call": true}}}},
        "permission": {"edit": "allow", "bash": "allow", "webfetch": "allow", "external_directory": "allow"},
    });
    let config_file = root.join("opencode.json");
    std::fs::write(&config_file, config.to_string()).unwrap();
    let config_home = xdg[0].1.clone();
    scene.install("opencode", &["--scope", "user"], &[("XDG_CONFIG_HOME", &config_home)]);
    assert!(config_home.join("opencode/plugin/warden.js").is_file());
    let mut env = xdg;
    env.push(("OPENCODE_CONFIG".into(), config_file));
    env
}

fn opencode(scene: &Scene, program: &Path, env: &[(String, PathBuf)]) -> Command {
    let mut command = scene.agent(program);
    command
        .args(["run", "do the task now"])
        .env("OPENCODE_DISABLE_MODELS_FETCH", "1")
        .env("OPENCODE_DISABLE_AUTOUPDATE", "1")
        .envs(env.iter().map(|(name, value)| (name, value)));
    command
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opencode_runs_what_warden_allows_waits_for_a_person_and_is_told_why_the_rest_is_not() {
    let Some(program) = opencode_or_skip() else { return };
    let scene = Scene::start().await;
    let npmrc = scene.workspace().join(".npmrc");
    let write = Step::tool_use(
        "edit",
        serde_json::json!({"filePath": npmrc, "oldString": NPMRC.trim_end(), "newString": "registry=https://evil/"}),
    );
    let model = ScriptedModel::start(script("bash", "command", write)).await.unwrap();
    let env = install(&scene, &model);
    let (output, approval) = run_approving(&scene, opencode(&scene, &program, &env)).await;
    scene.as_warden_decided(&model, &output, &approval).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opencode_with_warden_stopped_runs_nothing() {
    let Some(program) = opencode_or_skip() else { return };
    let mut scene = Scene::start().await;
    let model = ScriptedModel::start(vec![
        Step::tool_use("bash", serde_json::json!({"command": "touch ran.txt", "description": "touch"})),
        Step::text("all done"),
    ])
    .await
    .unwrap();
    let env = install(&scene, &model);
    scene.bundled.stop().await.unwrap();
    let output = scene.output(opencode(&scene, &program, &env)).await;
    scene.nothing_ran(&model, &output);
}
