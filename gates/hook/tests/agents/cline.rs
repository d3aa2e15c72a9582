//! The Cline CLI 3.0.65 with `warden-hook install cline --scope user` (a
//! `PreToolUse` file in its config folder's `hooks/`): `run_commands` and
//! `editor`. A refusal there does not end the run: the model reads why.

use super::*;

fn cline_or_skip() -> Option<PathBuf> {
    warden_tests::claude_code::npm_or_skip("cline", "cline").unwrap()
}

/// Cline signed in to the scripted model (OpenAI-compatible) in a config
/// folder of the test's, then Warden's hook installed there as a user does.
fn install(scene: &Scene, program: &Path, model: &ScriptedModel) -> PathBuf {
    let config = scene.bundled.root.path().join("cline-config");
    let base = format!("{}/v1", model.base_url());
    let mut auth = scene.agent(program);
    auth.args(["auth", "-p", "openai-compatible", "-k", "scripted", "-m", "scripted", "-b", &base, "--config"])
        .arg(&config);
    let out = auth.output().unwrap();
    kill_left_running(&scene.home());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    scene.install("cline", &["--scope", "user"], &[("CLINE_DIR", &config)]);
    assert!(config.join("hooks/PreToolUse").is_file());
    config
}

fn cline(scene: &Scene, program: &Path, config: &Path) -> Command {
    let mut command = scene.agent(program);
    command.arg("--config").arg(config).arg("do the task now");
    command
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cline_runs_what_warden_allows_waits_for_a_person_and_is_told_why_the_rest_is_not() {
    let Some(program) = cline_or_skip() else { return };
    let scene = Scene::start().await;
    let npmrc = scene.workspace().join(".npmrc");
    let write = Step::tool_use(
        "editor",
        serde_json::json!({"path": npmrc, "old_text": NPMRC.trim_end(), "new_text": "registry=https://evil/"}),
    );
    let steps = script("run_commands", "commands", write)
        .into_iter()
        .map(|step| match step {
            // Cline's shell tool takes a list of commands.
            Step::ToolUse { name, input } if name == "run_commands" => {
                Step::tool_use(name, serde_json::json!({"commands": [input["commands"].clone()]}))
            }
            other => other,
        })
        .collect();
    let model = ScriptedModel::start(steps).await.unwrap();
    let config = install(&scene, &program, &model);
    let (output, approval) = run_approving(&scene, cline(&scene, &program, &config)).await;
    scene.as_warden_decided(&model, &output, &approval).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cline_with_warden_stopped_runs_nothing() {
    let Some(program) = cline_or_skip() else { return };
    let mut scene = Scene::start().await;
    let model = ScriptedModel::start(vec![
        Step::tool_use("run_commands", serde_json::json!({"commands": ["touch ran.txt"]})),
        Step::text("all done"),
    ])
    .await
    .unwrap();
    let config = install(&scene, &program, &model);
    scene.bundled.stop().await.unwrap();
    let output = scene.output(cline(&scene, &program, &config)).await;
    scene.nothing_ran(&model, &output);
}
