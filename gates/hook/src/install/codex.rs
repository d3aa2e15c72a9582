//! Codex CLI's hook (checked with 0.171.0, see `shared/notes`): in a
//! `config.toml` (`$CODEX_HOME/config.toml`, `~/.codex/config.toml`, or a
//! trusted project's `.codex/config.toml`), `[features] hooks = true` and a
//! `[[hooks.PreToolUse]]` group whose one hook runs `warden-hook codex`.
//!
//! **Trust.** Codex runs a hook only once it is trusted, and skips an
//! untrusted one without a word. The trust is an entry of the same file,
//! `[hooks.state."<config path>:pre_tool_use:<group>:<hook>"]`, holding
//! `trusted_hash = "sha256:<hex>"`: the SHA-256 of the group as compact
//! JSON with sorted keys (`{"event_name":"pre_tool_use","hooks":[{"async":
//! false,"command":…,"timeout":…,"type":"command"}]}`). Changing the command
//! or the timeout, or moving the file, makes it untrusted again: the entry
//! is written for the path Codex will read the file at.
//!
//! Codex lets a tool run when its hook fails in any way (an exit other
//! than 2 with a reason, a crash, a timeout, output it cannot read), so
//! `warden-hook codex` answers every failure of its own with a block
//! (exit 2); what it cannot stop is a hook that never runs.

use std::path::Path;

use sha2::{Digest as _, Sha256};
use toml::{Table, Value};

use super::InstallError;

/// `[hooks.state]`'s key for the first hook of PreToolUse group `group` in
/// the file at `config_path`.
pub fn trust_key(config_path: &Path, group: usize) -> String {
    format!("{}:pre_tool_use:{group}:0", config_path.display())
}

/// The hash that trusts a group of one command hook (no matcher).
pub fn trusted_hash(command: &str, timeout_seconds: u64) -> String {
    // Written out rather than serialized: the keys must be sorted and the
    // text compact whatever serde_json's features are.
    let command = serde_json::Value::from(command).to_string();
    let group = format!(
        r#"{{"event_name":"pre_tool_use","hooks":[{{"async":false,"command":{command},"timeout":{timeout_seconds},"type":"command"}}]}}"#
    );
    format!("sha256:{:x}", Sha256::digest(group.as_bytes()))
}

/// The config `existing` with Codex's hooks turned on and Warden's
/// PreToolUse group last, trusted for `config_path`: a group that already
/// runs `warden-hook … codex` (and its trust entry) is replaced, every
/// other setting, group and trust entry is kept.
pub fn merge(
    existing: Option<&str>,
    command: &str,
    timeout_seconds: u64,
    config_path: &Path,
) -> Result<Table, InstallError> {
    let error = |message: String| InstallError::Settings { path: config_path.display().to_string(), message };
    let mut config: Table = match existing.map(str::trim).filter(|t| !t.is_empty()) {
        None => Table::new(),
        Some(text) => text.parse().map_err(|e| error(format!("is not valid TOML: {e}")))?,
    };
    let table = |parent: &mut Table, name: &str| -> Result<Table, InstallError> {
        match parent.remove(name) {
            None => Ok(Table::new()),
            Some(Value::Table(table)) => Ok(table),
            Some(_) => Err(error(format!("`{name}` is not a table"))),
        }
    };
    let mut features = table(&mut config, "features")?;
    features.insert("hooks".into(), Value::Boolean(true));
    config.insert("features".into(), Value::Table(features));
    let mut hooks = table(&mut config, "hooks")?;
    let mut pre = match hooks.remove("PreToolUse") {
        None => Vec::new(),
        Some(Value::Array(groups)) => groups,
        Some(_) => return Err(error("`hooks.PreToolUse` is not a list".into())),
    };
    let mut state = table(&mut hooks, "state")?;
    // Ours go, with their trust entries; the groups after one move up, and
    // their trust entries with them (a trust entry names a group by place).
    let ours: Vec<bool> = pre
        .iter()
        .map(|group| super::runs_warden_hook(&serde_json::to_value(group).unwrap_or_default(), "codex"))
        .collect();
    let mut moved = Vec::with_capacity(ours.len());
    let mut next = 0usize;
    for &our in &ours {
        moved.push((!our).then_some(next));
        next += usize::from(!our);
    }
    let prefix = format!("{}:pre_tool_use:", config_path.display());
    let mut kept = Table::new();
    for (key, entry) in std::mem::take(&mut state) {
        let place = key.strip_prefix(&prefix).and_then(|rest| rest.split_once(':'));
        match place.map(|(group, hook)| (group.parse::<usize>().ok(), hook)) {
            Some((Some(group), hook)) => {
                if let Some(Some(to)) = moved.get(group) {
                    kept.insert(format!("{prefix}{to}:{hook}"), entry);
                }
            }
            _ => {
                kept.insert(key, entry);
            }
        }
    }
    state = kept;
    let mut ours = ours.into_iter();
    pre.retain(|_| !ours.next().unwrap_or(false));
    let mut hook = Table::new();
    hook.insert("type".into(), "command".into());
    hook.insert("command".into(), command.into());
    hook.insert("timeout".into(), Value::Integer(i64::try_from(timeout_seconds).unwrap_or(i64::MAX)));
    let mut group = Table::new();
    group.insert("hooks".into(), Value::Array(vec![Value::Table(hook)]));
    let mut trust = Table::new();
    trust.insert("trusted_hash".into(), trusted_hash(command, timeout_seconds).into());
    state.insert(trust_key(config_path, pre.len()), Value::Table(trust));
    pre.push(Value::Table(group));
    hooks.insert("PreToolUse".into(), Value::Array(pre));
    hooks.insert("state".into(), Value::Table(state));
    config.insert("hooks".into(), Value::Table(hooks));
    Ok(config)
}

/// What [`check`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// Whether Codex would run Warden's hook.
    pub runs: bool,
    /// What was checked, one line each (`ok: …`, `no: …`).
    pub lines: Vec<String>,
}

/// The words of a command as `sh` reads the ones [`super::shell_word`]
/// writes: plain words and single-quoted ones (with `'\''` inside).
fn words(command: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let (mut quoted, mut started) = (false, false);
    let mut chars = command.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                quoted = !quoted;
                started = true;
            }
            '\\' if !quoted => {
                word.extend(chars.next());
                started = true;
            }
            ' ' if !quoted => {
                if started {
                    words.push(std::mem::take(&mut word));
                }
                started = false;
            }
            c => {
                word.push(c);
                started = true;
            }
        }
    }
    if started {
        words.push(word);
    }
    words
}

/// Whether the config `text` at `config_path` runs Warden's hook: Codex's
/// hooks on, a PreToolUse group running `warden-hook … codex`, its trust
/// entry matching what Codex computes, the program there, and the token
/// file usable.
pub fn check(text: &str, config_path: &Path) -> Report {
    let mut lines = Vec::new();
    let mut runs = true;
    let mut say = |ok: bool, line: String| {
        runs &= ok;
        lines.push(format!("{}: {line}", if ok { "ok" } else { "no" }));
    };
    let config: Table = match text.parse() {
        Ok(config) => config,
        Err(e) => {
            say(false, format!("{} is not valid TOML, and Codex will not start: {e}", config_path.display()));
            return Report { runs, lines };
        }
    };
    let hooks_on = config.get("features").and_then(|f| f.get("hooks")).and_then(Value::as_bool) == Some(true);
    say(hooks_on, format!("[features] hooks = true in {}", config_path.display()));
    let groups = config
        .get("hooks")
        .and_then(|h| h.get("PreToolUse"))
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let ours = groups
        .iter()
        .enumerate()
        .find(|(_, group)| super::runs_warden_hook(&serde_json::to_value(group).unwrap_or_default(), "codex"));
    let Some((index, group)) = ours else {
        say(false, "no [[hooks.PreToolUse]] group runs `warden-hook … codex`: run `warden-hook install codex`".into());
        return Report { runs, lines };
    };
    let hook = group.get("hooks").and_then(Value::as_array).and_then(|h| h.first());
    let command = hook.and_then(|h| h.get("command")).and_then(Value::as_str).unwrap_or_default();
    let timeout = hook.and_then(|h| h.get("timeout")).and_then(Value::as_integer).unwrap_or(0);
    say(true, format!("PreToolUse group {index} runs `{command}`"));
    let alone =
        group.get("hooks").and_then(Value::as_array).is_some_and(|h| h.len() == 1) && group.get("matcher").is_none();
    let key = trust_key(config_path, index);
    let trusted = config
        .get("hooks")
        .and_then(|h| h.get("state"))
        .and_then(|state| state.get(&key))
        .and_then(|entry| entry.get("trusted_hash"))
        .and_then(Value::as_str);
    let want = trusted_hash(command, u64::try_from(timeout).unwrap_or(0));
    match trusted {
        None => say(false, format!("no trust entry [hooks.state.\"{key}\"]: Codex skips the hook without a word")),
        Some(_) if !alone => {
            say(false, "the group has a matcher or more hooks: its trust cannot be checked here".into())
        }
        Some(hash) if hash == want => say(true, "the hook is trusted (its hash is the one Codex computes)".into()),
        Some(hash) => say(
            false,
            format!("the trust entry's hash {hash} is not the hook's ({want}): Codex skips it; install again"),
        ),
    }
    let words = words(command);
    let program = words.iter().position(|w| w == "codex").and_then(|at| at.checked_sub(1)).and_then(|at| words.get(at));
    match program {
        Some(program) => {
            let found = std::fs::metadata(program).is_ok_and(|m| m.is_file());
            say(found, format!("warden-hook is at {program}"));
        }
        None => say(false, format!("cannot tell warden-hook's path in `{command}`")),
    }
    if let Some(file) = words.iter().find_map(|w| w.strip_prefix("WARDEN_TOKEN_FILE=")) {
        match warden_sdk::read_token_file(file) {
            Ok(_) => say(true, format!("the token file {file} can be used")),
            Err(e) => say(false, format!("the token file cannot be used: {e}")),
        }
    }
    Report { runs, lines }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trust_hash_is_codex_s() {
        // Computed by Codex CLI 0.171.0's rule (see the module docs) and
        // checked against the real CLI: with this entry it ran the hook.
        assert_eq!(
            trusted_hash("/tmp/x/hook.sh", 30),
            "sha256:ae2eb6db2584b94581d378abee4077b7c5844ce3896008b741a96ff4f54322b2"
        );
    }

    #[test]
    fn the_group_is_merged_trusted_and_replaced_never_duplicated() {
        let path = Path::new("/home/alice/.codex/config.toml");
        let existing = r#"
model = "gpt-5"
[features]
web_search = true
[[hooks.PreToolUse]]
matcher = "Bash"
[[hooks.PreToolUse.hooks]]
type = "command"
command = "audit.sh"
[hooks.state."/home/alice/.codex/config.toml:pre_tool_use:0:0"]
trusted_hash = "sha256:abc"
"#;
        let merged = merge(Some(existing), "/usr/bin/warden-hook codex", 930, path).unwrap();
        assert_eq!(merged["model"].as_str(), Some("gpt-5"));
        assert_eq!(merged["features"]["web_search"].as_bool(), Some(true));
        assert_eq!(merged["features"]["hooks"].as_bool(), Some(true));
        let pre = merged["hooks"]["PreToolUse"].as_array().unwrap();
        assert_eq!(pre.len(), 2);
        assert_eq!(pre[1]["hooks"][0]["command"].as_str(), Some("/usr/bin/warden-hook codex"));
        assert_eq!(pre[1]["hooks"][0]["timeout"].as_integer(), Some(930));
        let state = merged["hooks"]["state"].as_table().unwrap();
        assert_eq!(state[&trust_key(path, 0)]["trusted_hash"].as_str(), Some("sha256:abc"), "the user's is kept");
        assert_eq!(
            state[&trust_key(path, 1)]["trusted_hash"].as_str(),
            Some(trusted_hash("/usr/bin/warden-hook codex", 930).as_str())
        );
        // Ours first, then the user's: installing again replaces ours, and
        // the user's group, now first, keeps its trust under its new place.
        let mut swapped = merged.clone();
        let hooks = swapped["hooks"].as_table_mut().unwrap();
        hooks["PreToolUse"].as_array_mut().unwrap().reverse();
        let state = hooks["state"].as_table_mut().unwrap();
        let (user, ours) = (state.remove(&trust_key(path, 0)).unwrap(), state.remove(&trust_key(path, 1)).unwrap());
        state.insert(trust_key(path, 0), ours);
        state.insert(trust_key(path, 1), user);
        let text = toml::to_string(&swapped).unwrap();
        let again = merge(Some(&text), "/opt/warden-hook codex --max-wait 60", 90, path).unwrap();
        let pre = again["hooks"]["PreToolUse"].as_array().unwrap();
        assert_eq!(pre.len(), 2);
        assert_eq!(pre[0]["hooks"][0]["command"].as_str(), Some("audit.sh"));
        assert_eq!(pre[1]["hooks"][0]["command"].as_str(), Some("/opt/warden-hook codex --max-wait 60"));
        let state = again["hooks"]["state"].as_table().unwrap();
        assert_eq!(state.len(), 2, "{state:?}");
        assert_eq!(state[&trust_key(path, 0)]["trusted_hash"].as_str(), Some("sha256:abc"));
        assert_eq!(
            state[&trust_key(path, 1)]["trusted_hash"].as_str(),
            Some(trusted_hash("/opt/warden-hook codex --max-wait 60", 90).as_str())
        );
        assert!(merge(Some("model = "), "x codex", 1, path).is_err());

        // The doctor: trusted, then the entry tampered with, then no hooks.
        let bin = tempfile::tempdir().unwrap();
        let program = bin.path().join("warden-hook");
        std::fs::write(&program, "").unwrap();
        let command = format!("WARDEN_ENDPOINT=http://127.0.0.1:1 '{}' codex --max-wait 900", program.display());
        let config = toml::to_string(&merge(None, &command, 930, path).unwrap()).unwrap();
        let report = check(&config, path);
        assert!(report.runs, "{report:?}");
        let untrusted = config.replace("timeout = 930", "timeout = 931");
        let report = check(&untrusted, path);
        assert!(!report.runs && report.lines.iter().any(|l| l.contains("Codex skips it")), "{report:?}");
        let elsewhere = check(&config, Path::new("/moved/config.toml"));
        assert!(!elsewhere.runs && elsewhere.lines.iter().any(|l| l.contains("no trust entry")), "{elsewhere:?}");
        let off = check(&config.replace("hooks = true", "hooks = false"), path);
        assert!(!off.runs, "{off:?}");
        assert!(!check("model = \"x\"", path).runs);
        assert_eq!(words(r"A=1 '/a b/it'\''s' codex"), ["A=1", "/a b/it's", "codex"]);
        assert!(merge(Some("hooks = 3"), "x codex", 1, path).is_err());
    }
}
