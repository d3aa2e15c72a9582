//! Codex CLI's `apply_patch`, pure. Codex 0.171.0 edits files with its
//! `apply_patch` tool where the model has one (the hook sees tool
//! `apply_patch` with the patch as `tool_input.command`), and otherwise with
//! a shell command its model writes, `apply_patch <<'EOF' … EOF`, which
//! Codex runs itself (the hook sees the `Bash` tool with that command). The patch names each file it adds, updates, deletes or moves
//! (`*** Add File: PATH`, `*** Update File: PATH`, `*** Delete File: PATH`,
//! `*** Move to: PATH`), relative to the working folder: each is asked
//! about as the write (or delete) it is, not as a program nobody knows.

use crate::touch::{Access, Touch};

/// The most files one patch may name.
pub const MAX_FILES: usize = 64;

/// What a patch does to one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Added, updated or moved to: written.
    Write(String),
    /// Deleted (or moved away from).
    Delete(String),
}

/// The patch of an `apply_patch` command (`apply_patch <<'EOF'` … or
/// `apply_patch '*** Begin Patch …'`), when `command` is one: the changes,
/// in order. `Err` for a patch that names no file or too many.
pub fn changes(command: &str) -> Option<Result<Vec<Change>, String>> {
    let trimmed = command.trim_start();
    let rest = trimmed.strip_prefix("apply_patch").or_else(|| trimmed.strip_prefix("applypatch"))?;
    if !rest.starts_with(|c: char| c.is_whitespace() || c == '<' || c == '\'' || c == '"') {
        return None;
    }
    let begin = rest.find("*** Begin Patch")?;
    Some(of_patch(rest.get(begin..).unwrap_or_default()))
}

/// The changes of a patch's text (from `*** Begin Patch`).
pub fn of_patch(body: &str) -> Result<Vec<Change>, String> {
    let mut found = Vec::new();
    let mut updating: Option<String> = None;
    for line in body.lines() {
        let line = line.trim_end();
        let named = |prefix: &str| line.strip_prefix(prefix).map(|p| p.trim().to_owned()).filter(|p| !p.is_empty());
        if let Some(path) = named("*** Add File:") {
            found.push(Change::Write(path));
        } else if let Some(path) = named("*** Update File:") {
            found.push(Change::Write(path.clone()));
            updating = Some(path);
            continue;
        } else if let Some(path) = named("*** Delete File:") {
            found.push(Change::Delete(path));
        } else if let Some(path) = named("*** Move to:") {
            // The updated file is moved: it goes from where it was.
            if let Some(from) = updating.take() {
                found.push(Change::Delete(from));
            }
            found.push(Change::Write(path));
        } else if line.starts_with("*** End Patch") {
            break;
        }
        if line.starts_with("*** ") {
            updating = None;
        }
    }
    match found.len() {
        0 => Err("an apply_patch that names no file".into()),
        n if n > MAX_FILES => {
            Err(format!("an apply_patch naming {n} files, more than the {MAX_FILES} Warden's hook asks about"))
        }
        _ => Ok(found),
    }
}

/// The touches of `changes`.
pub fn touches(changes: Vec<Change>) -> Vec<Touch> {
    changes
        .into_iter()
        .map(|change| match change {
            Change::Write(path) => Touch::File { access: Access::Write, path },
            Change::Delete(path) => Touch::File { access: Access::Delete, path },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_patch_names_each_file_it_writes_or_deletes() {
        let command = "apply_patch <<'EOF'\n*** Begin Patch\n*** Add File: src/new.rs\n+fn x() {}\n\
                       *** Update File: .npmrc\n@@\n-a\n+b\n*** Update File: old.txt\n*** Move to: new.txt\n@@\n-x\n+y\n\
                       *** Delete File: gone.txt\n*** End Patch\nEOF\n";
        assert_eq!(
            changes(command).unwrap().unwrap(),
            [
                Change::Write("src/new.rs".into()),
                Change::Write(".npmrc".into()),
                Change::Write("old.txt".into()),
                Change::Delete("old.txt".into()),
                Change::Write("new.txt".into()),
                Change::Delete("gone.txt".into()),
            ]
        );
        // As one argument too; a line inside a file's text is not a header.
        let quoted = "apply_patch '*** Begin Patch\n*** Add File: a.txt\n+*** Delete File: b.txt\n*** End Patch'";
        assert_eq!(changes(quoted).unwrap().unwrap(), [Change::Write("a.txt".into())]);
        assert_eq!(changes("ls -la"), None);
        assert_eq!(
            of_patch("*** Begin Patch\n*** Delete File: a.txt\n*** End Patch\n").unwrap(),
            [Change::Delete("a.txt".into())]
        );
        assert_eq!(changes("apply_patcher x"), None);
        assert!(changes("apply_patch <<'EOF'\n*** Begin Patch\n*** End Patch\nEOF").unwrap().is_err());
        let many: String = (0..=MAX_FILES).map(|i| format!("*** Add File: f{i}\n+x\n")).collect();
        assert!(changes(&format!("apply_patch '*** Begin Patch\n{many}*** End Patch'")).unwrap().is_err());
    }
}
