//! What `--version` prints on every Warden binary: the release and the
//! commit it was built from, e.g. `0.1.0 (commit 3f9c2d41a0b7)`.

#![forbid(unsafe_code)]

/// The release and the commit, for clap's `version`.
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("WARDEN_COMMIT"), ")");

/// The commit alone: 12 hex digits, what the build was given as
/// `WARDEN_COMMIT`, or `unknown` outside a git checkout.
pub const COMMIT: &str = env!("WARDEN_COMMIT");

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_version_names_the_commit_of_this_checkout() {
        assert!(VERSION.starts_with(concat!(env!("CARGO_PKG_VERSION"), " (commit ")), "{VERSION}");
        if env!("WARDEN_COMMIT_SOURCE") == "given" {
            return; // The build was told the commit.
        }
        let head = std::process::Command::new("git")
            .args(["-C", env!("CARGO_MANIFEST_DIR"), "rev-parse", "--short=12", "HEAD"])
            .output()
            .ok()
            .filter(|o| o.status.success());
        match head {
            Some(head) => assert_eq!(COMMIT, String::from_utf8(head.stdout).unwrap().trim()),
            None => assert_eq!(COMMIT, "unknown"),
        }
    }
}
