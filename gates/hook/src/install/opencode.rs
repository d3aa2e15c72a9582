//! OpenCode's guard (checked with 1.18.33): a plugin, `warden.js`, in the
//! project's `.opencode/plugin/` or the user's
//! `$XDG_CONFIG_HOME/opencode/plugin/` (default `~/.config/opencode`).
//! OpenCode loads every `*.js` and `*.ts` there and runs its
//! `tool.execute.before` before each tool call; the plugin runs
//! `warden-hook opencode` with the call on stdin and throws unless the
//! answer is an allow, which stops the tool and tells the model why. A
//! plugin that fails to load is skipped without a word: `warden-hook
//! install opencode` writes only text it generated, with every value JSON
//! encoded.

use serde_json::Value;

use super::InstallError;

/// The line that marks the file as Warden's.
pub const MARKER: &str = "// Written by `warden-hook install opencode`";

/// The plugin's text: it runs `argv` with `env` added, and gives up (a
/// refusal) after `timeout_ms`.
pub fn plugin(argv: &[String], env: &[(&str, String)], timeout_ms: u64) -> String {
    let argv = Value::from(argv.to_vec()).to_string();
    let env: serde_json::Map<String, Value> =
        env.iter().map(|(name, value)| ((*name).to_owned(), Value::from(value.clone()))).collect();
    let env = Value::Object(env).to_string();
    format!(
        r#"{MARKER}: every tool call of OpenCode is asked about
// at Warden first; a refusal, or no answer, stops it. Install again to change it.
import {{ spawn }} from "node:child_process";

const HOOK = {argv};
const ENV = {env};
const TIMEOUT_MS = {timeout_ms};

// warden-hook's answer to one call: {{"decision": "allow"}}, or a refusal.
function ask(event) {{
  return new Promise((resolve) => {{
    let child;
    try {{
      child = spawn(HOOK[0], HOOK.slice(1), {{ env: {{ ...process.env, ...ENV }}, stdio: ["pipe", "pipe", "pipe"] }});
    }} catch (error) {{
      resolve({{ decision: "deny", reason: `Warden's hook could not start (${{error}}): denied` }});
      return;
    }}
    let out = "";
    const timer = setTimeout(() => child.kill("SIGKILL"), TIMEOUT_MS);
    child.stdout.on("data", (data) => {{ out += data; }});
    child.stderr.on("data", () => {{}});
    child.on("error", (error) => {{
      clearTimeout(timer);
      resolve({{ decision: "deny", reason: `Warden's hook could not run (${{error.message}}): denied` }});
    }});
    child.on("close", (code, signal) => {{
      clearTimeout(timer);
      try {{
        const answer = JSON.parse(out);
        if (code === 0 && answer && typeof answer.decision === "string") {{
          resolve(answer);
          return;
        }}
      }} catch {{}}
      resolve({{ decision: "deny", reason: `Warden's hook gave no answer (exit ${{code ?? signal}}): denied` }});
    }});
    child.stdin.on("error", () => {{}});
    child.stdin.end(event);
  }});
}}

export const Warden = async (ctx) => ({{
  "tool.execute.before": async (input, output) => {{
    const event = JSON.stringify({{
      tool: input.tool,
      sessionID: input.sessionID,
      callID: input.callID,
      args: output.args,
      cwd: ctx.directory,
    }});
    const answer = await ask(event);
    if (answer.decision !== "allow") {{
      throw new Error(answer.reason || "Warden denied this tool call");
    }}
  }},
}});
"#
    )
}

/// Whether `existing` (the file at the plugin's path) may be replaced:
/// there is none, or it is Warden's.
pub fn replaceable(existing: Option<&str>, path: &std::path::Path) -> Result<(), InstallError> {
    match existing {
        Some(text) if !text.contains(MARKER) => Err(InstallError::Invalid(format!(
            "{} is not Warden's plugin; move it away, or install into the other scope",
            path.display()
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plugin_names_the_hook_with_every_value_encoded() {
        let text = plugin(
            &["/opt/warden \"x\"/warden-hook".into(), "opencode".into()],
            &[("WARDEN_ENDPOINT", "http://127.0.0.1:1".into()), ("WARDEN_TOKEN_FILE", "/a'b/t".into())],
            930_000,
        );
        assert!(text.contains(r#"const HOOK = ["/opt/warden \"x\"/warden-hook","opencode"];"#), "{text}");
        assert!(text.contains(r#""WARDEN_TOKEN_FILE":"/a'b/t""#), "{text}");
        assert!(text.contains("const TIMEOUT_MS = 930000;"));
        assert!(replaceable(Some(&text), std::path::Path::new("w.js")).is_ok());
        assert!(replaceable(None, std::path::Path::new("w.js")).is_ok());
        assert!(replaceable(Some("export const Mine = 1"), std::path::Path::new("w.js")).is_err());
    }
}
