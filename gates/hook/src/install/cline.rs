//! Cline's hook (checked with the Cline CLI 3.0.65): an executable file
//! named `PreToolUse` (any case; no extension or `.sh`, `.py`, `.js` …) in
//! a hooks folder: the project's `.clinerules/hooks/` or `.cline/hooks/`,
//! or the user's `$CLINE_DIR/hooks/` (default `~/.cline/hooks/`). Cline runs
//! every such file it finds, each with the event on stdin; the one Warden
//! writes is a `sh` script running `warden-hook cline`. A `PreToolUse` that
//! is someone else's stays: Warden's goes beside it as `PreToolUse.sh`.

use std::path::{Path, PathBuf};

use super::InstallError;

/// The line that marks the file as Warden's.
pub const MARKER: &str = "# Written by `warden-hook install cline`";

/// The hook file's text: a `sh` script running `command`.
pub fn script(command: &str) -> String {
    format!(
        "#!/bin/sh\n{MARKER}: every tool call of Cline is asked about at Warden\n\
         # first; a refusal, or no answer, stops it. Install again to change it.\n{command}\n"
    )
}

/// Where Warden's hook file goes in the hooks folder `dir`: `PreToolUse`,
/// unless someone else's is there, then `PreToolUse.sh`; an error when both
/// are someone else's.
pub fn place(dir: &Path) -> Result<PathBuf, InstallError> {
    let ours_or_free = |path: &Path| match std::fs::read_to_string(path) {
        Ok(text) => text.contains(MARKER),
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
    };
    ["PreToolUse", "PreToolUse.sh"].iter().map(|name| dir.join(name)).find(|path| ours_or_free(path)).ok_or_else(|| {
        InstallError::Invalid(format!(
            "{} holds PreToolUse and PreToolUse.sh that are not Warden's: Cline runs every hook file there, so add \
             `warden-hook cline` to one of them, or move one away",
            dir.display()
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warden_s_file_goes_beside_someone_else_s() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(place(dir.path()).unwrap(), dir.path().join("PreToolUse"));
        std::fs::write(dir.path().join("PreToolUse"), script("/bin/warden-hook cline")).unwrap();
        assert_eq!(place(dir.path()).unwrap(), dir.path().join("PreToolUse"), "ours is replaced");
        std::fs::write(dir.path().join("PreToolUse"), "#!/bin/sh\naudit.sh\n").unwrap();
        assert_eq!(place(dir.path()).unwrap(), dir.path().join("PreToolUse.sh"));
        std::fs::write(dir.path().join("PreToolUse.sh"), "echo mine\n").unwrap();
        assert!(place(dir.path()).is_err());
        // The script runs the command as sh reads it.
        let text = script("printf '%s' \"$0\"");
        let out = std::process::Command::new("sh").arg("-c").arg(&text).output().unwrap();
        assert!(out.status.success());
    }
}
