//! Where a path leads on this machine (reads the filesystem): every
//! symbolic link along it followed, as the kernel follows them when the
//! tool opens the path, including a dangling link, through which a write
//! creates the file it names.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

/// The most links one path may pass through (Linux's own bound, after
/// which `open` fails with `ELOOP`).
pub const MAX_LINKS: usize = 40;

/// A path whose links cannot be followed to an end.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    /// A loop, or a chain longer than [`MAX_LINKS`].
    #[error("`{0}` passes through more than {MAX_LINKS} symbolic links")]
    TooMany(String),
}

/// `path` cleaned lexically (`.`, `..`, `//`), as the monitor cleans the
/// paths it is asked about; `..` above the root stays at the root.
pub fn clean(path: &Path) -> PathBuf {
    let mut cleaned = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                cleaned.pop();
            }
            other => cleaned.push(other),
        }
    }
    cleaned
}

/// Where the absolute `path` leads: the canonical path when it exists;
/// otherwise every link along it followed (a dangling one to the path it
/// names, chains too) and the part that does not exist appended as
/// written.
pub fn resolve(path: &Path) -> Result<PathBuf, LinkError> {
    match std::fs::canonicalize(path) {
        Ok(real) => Ok(real),
        Err(_) => walk(path),
    }
}

/// `path` one component at a time, each link's target put in its place.
fn walk(path: &Path) -> Result<PathBuf, LinkError> {
    let mut resolved = PathBuf::from("/");
    let mut rest: VecDeque<OsString> = parts(path).collect();
    let mut links = 0;
    // Below a missing folder nothing exists: the rest is as written.
    let mut exists = true;
    while let Some(part) = rest.pop_front() {
        if part == ".." {
            resolved.pop();
            continue;
        }
        let next = resolved.join(&part);
        if !exists {
            resolved = next;
            continue;
        }
        match std::fs::symlink_metadata(&next) {
            Ok(meta) if meta.file_type().is_symlink() => {
                links += 1;
                if links > MAX_LINKS {
                    return Err(LinkError::TooMany(path.display().to_string()));
                }
                match std::fs::read_link(&next) {
                    Ok(target) => {
                        if target.is_absolute() {
                            resolved = PathBuf::from("/");
                        }
                        for part in parts(&target).collect::<Vec<_>>().into_iter().rev() {
                            rest.push_front(part);
                        }
                    }
                    // A link that cannot be read cannot be followed by
                    // the tool either.
                    Err(_) => resolved = next,
                }
            }
            Ok(_) => resolved = next,
            Err(_) => {
                exists = false;
                resolved = next;
            }
        }
    }
    Ok(resolved)
}

/// The names and `..` of a path, without its root and `.`.
fn parts(path: &Path) -> impl Iterator<Item = OsString> + '_ {
    path.components().filter_map(|component| match component {
        Component::Normal(name) => Some(name.to_owned()),
        Component::ParentDir => Some(OsString::from("..")),
        Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
    })
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    #[test]
    fn paths_are_cleaned_like_the_monitor_cleans_them() {
        assert_eq!(clean(Path::new("/w/./a//b/../c")), Path::new("/w/a/c"));
        assert_eq!(clean(Path::new("/../x")), Path::new("/x"));
    }

    #[test]
    fn every_link_along_a_path_is_followed_existing_or_not() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let (home, work) = (root.join("home"), root.join("work"));
        std::fs::create_dir_all(home.join(".ssh")).unwrap();
        std::fs::create_dir_all(work.join("sub")).unwrap();
        std::fs::write(home.join(".ssh/id_rsa"), "k").unwrap();
        symlink(home.join(".ssh"), work.join("keys")).unwrap();
        symlink("../keys/id_rsa", work.join("sub/key")).unwrap();
        symlink(home.join(".ssh/new"), work.join("dangling")).unwrap();
        symlink("dangling", work.join("chain")).unwrap();
        symlink("../missing/x", work.join("nowhere")).unwrap();
        symlink("loop", work.join("loop")).unwrap();

        let at = |p: &str| resolve(&work.join(p)).unwrap();
        assert_eq!(at("sub/key"), home.join(".ssh/id_rsa"));
        assert_eq!(at("keys/new_file"), home.join(".ssh/new_file"));
        assert_eq!(at("keys/a/b"), home.join(".ssh/a/b"));
        assert_eq!(at("dangling"), home.join(".ssh/new"));
        assert_eq!(at("chain"), home.join(".ssh/new"));
        assert_eq!(at("nowhere"), root.join("missing/x"));
        // `..` after a link is taken from where the link led.
        assert_eq!(at("keys/../.ssh/id_rsa"), home.join(".ssh/id_rsa"));
        assert_eq!(at("plain/new.txt"), work.join("plain/new.txt"));
        assert!(matches!(resolve(&work.join("loop")), Err(LinkError::TooMany(_))));
        assert!(matches!(resolve(&work.join("loop/x")), Err(LinkError::TooMany(_))));
    }
}
