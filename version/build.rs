//! Finds the commit the binaries are built from: `WARDEN_COMMIT` when the
//! build is given it (a container build has no `.git`), else `git
//! rev-parse` of this checkout, else `unknown`. Runs again when HEAD moves.

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let dir = std::env::var_os("CARGO_MANIFEST_DIR")?;
    let output = Command::new("git").arg("-C").arg(dir).args(args).output().ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    (output.status.success() && !text.trim().is_empty()).then(|| text.trim().to_owned())
}

fn main() {
    println!("cargo::rerun-if-env-changed=WARDEN_COMMIT");
    let given = std::env::var("WARDEN_COMMIT").ok().filter(|c| !c.trim().is_empty());
    let (commit, source) = match given {
        Some(commit) => (commit.trim().to_owned(), "given"),
        None => {
            // HEAD names a branch; the branch's ref (loose or packed) moves
            // with each commit.
            let mut watched = vec![git(&["rev-parse", "--git-path", "HEAD"])];
            if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
                watched.push(git(&["rev-parse", "--git-path", &branch]));
            }
            watched.push(git(&["rev-parse", "--git-path", "packed-refs"]));
            for path in watched.into_iter().flatten() {
                let path = match Path::new(&path).is_absolute() {
                    true => Path::new(&path).to_owned(),
                    false => Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default()).join(&path),
                };
                if path.exists() {
                    println!("cargo::rerun-if-changed={}", path.display());
                }
            }
            match git(&["rev-parse", "--short=12", "HEAD"]) {
                Some(commit) => (commit, "git"),
                None => ("unknown".to_owned(), "none"),
            }
        }
    };
    println!("cargo::rustc-env=WARDEN_COMMIT={commit}");
    println!("cargo::rustc-env=WARDEN_COMMIT_SOURCE={source}");
}
