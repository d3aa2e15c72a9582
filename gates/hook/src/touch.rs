//! What a tool call touches, as the tool names it (pure): one file, a
//! search below a folder, a pattern of file names, or an action that is not
//! about this machine's files; and how search tools' filters become
//! patterns of files. [`crate::plan`] asks the filesystem what a search
//! root is and where links lead.

use warden_sdk::ActionRequest;

/// The most patterns one filter or brace expression becomes; past it the
/// filter is asked as written (wider: a person reads it).
pub const MAX_ALTERNATIVES: usize = 20;

/// Read or write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// `fs.read`.
    Read,
    /// `fs.write`.
    Write,
    /// `fs.delete`.
    Delete,
}

/// One thing a tool call touches.
#[derive(Debug, Clone, PartialEq)]
pub enum Touch {
    /// Not this machine's files (a command, a URL, an MCP tool): asked as
    /// it is.
    Request(ActionRequest),
    /// One file (or folder, for a listing) by the path the tool names,
    /// absolute or relative to the call's folder.
    File {
        /// Read or written.
        access: Access,
        /// As the tool names it.
        path: String,
    },
    /// Every file below `root` whose path below it matches one of `names`
    /// (`**/*`, `**/*.rs`): a recursive search. A root that is one file is
    /// a read of that file.
    Search {
        /// The folder (or file) searched, absolute or relative to the
        /// call's folder.
        root: String,
        /// Patterns relative to `root`; never empty.
        names: Vec<String>,
    },
    /// Every file a pattern of names can match (`/w/src/*.rs`), absolute
    /// or relative to the call's folder.
    Pattern(String),
    /// A GET of one URL of several, named in the reason.
    Url(String),
}

/// Whether `text` holds a character a glob reads as a pattern.
pub fn is_pattern(text: &str) -> bool {
    text.contains(['*', '?', '[', '{'])
}

/// `path` in `base` (itself when absolute).
pub fn join(base: &str, path: &str) -> String {
    if path.starts_with('/') || base.is_empty() {
        path.to_owned()
    } else if base.ends_with('/') {
        format!("{base}{path}")
    } else {
        format!("{base}/{path}")
    }
}

/// JavaScript's `\s`, which Claude Code and Gemini CLI split on: Unicode's
/// white space and the byte-order mark.
pub fn is_js_space(c: char) -> bool {
    c.is_whitespace() || c == '\u{feff}'
}

/// The patterns below the folder searched that a ripgrep `--glob` lets
/// through, as Claude Code's Grep and Glob run it (2.1.328: `rg --hidden`
/// with `--glob` per filter). A glob without a slash matches a name at any
/// depth (gitignore's rule); one with a slash is anchored to ripgrep's
/// working folder, which is not always the one searched, so it too is
/// asked at any depth: wider, never narrower. A negated glob (`!x`) only
/// narrows, so it adds nothing; with no other glob every file is read.
pub fn rg_globs<'a>(globs: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut names: Vec<String> = globs.into_iter().filter(|g| !g.starts_with('!')).map(at_any_depth).collect();
    if names.is_empty() {
        names.push("**/*".to_owned());
    }
    names.dedup();
    names
}

/// `glob` below the folder searched, at any depth.
pub fn at_any_depth(glob: &str) -> String {
    let mut rest = glob.trim_start_matches('/');
    while let Some(stripped) = rest.strip_prefix("**/") {
        rest = stripped.trim_start_matches('/');
    }
    if rest.is_empty() || rest == "**" {
        "**/*".to_owned()
    } else if rest.ends_with('/') {
        // A folder: the files below it.
        format!("**/{rest}**/*")
    } else {
        format!("**/{rest}")
    }
}

/// Claude Code's Grep `glob` field as it passes it to ripgrep: split on
/// white space, then on commas unless the piece holds braces.
pub fn claude_code_globs(field: &str) -> Vec<String> {
    let mut globs = Vec::new();
    for piece in field.split(is_js_space).filter(|p| !p.is_empty()) {
        if piece.contains('{') && piece.contains('}') {
            globs.push(piece.to_owned());
        } else {
            globs.extend(piece.split(',').filter(|g| !g.is_empty()).map(str::to_owned));
        }
    }
    globs
}

/// Claude Code's Glob: an absolute pattern is split where its first
/// wildcard's folder ends (the folder searched, and the rest as a ripgrep
/// glob); a relative one is a ripgrep glob in `path`.
pub fn claude_code_glob(pattern: &str, path: &str) -> Touch {
    if !pattern.starts_with('/') {
        return Touch::Search { root: path.to_owned(), names: rg_globs([pattern]) };
    }
    let split = match pattern.find(['*', '?', '[', '{']) {
        // No wildcard: the folder above, and the name.
        None => pattern.rfind('/'),
        Some(wildcard) => pattern.get(..wildcard).and_then(|fixed| fixed.rfind('/')),
    };
    let (root, rest) = match split {
        Some(0) => ("/", pattern.get(1..).unwrap_or_default()),
        Some(at) => (pattern.get(..at).unwrap_or(pattern), pattern.get(at + 1..).unwrap_or_default()),
        None => (path, pattern),
    };
    Touch::Search { root: root.to_owned(), names: rg_globs([rest]) }
}

/// `pattern` with its brace alternatives written out (`*.{rs,toml}` is
/// `*.rs` and `*.toml`), at most [`MAX_ALTERNATIVES`]; past that, or with
/// unbalanced braces, the pattern as written.
pub fn expand_braces(pattern: &str) -> Vec<String> {
    let mut done = Vec::new();
    let mut todo = vec![pattern.to_owned()];
    while let Some(next) = todo.pop() {
        match split_first_braces(&next) {
            Some((head, alternatives, tail)) => {
                for alternative in alternatives.iter().rev() {
                    todo.push(format!("{head}{alternative}{tail}"));
                }
            }
            None => done.push(next),
        }
        if done.len() + todo.len() > MAX_ALTERNATIVES {
            return vec![pattern.to_owned()];
        }
    }
    done.dedup();
    done
}

/// The text before the first balanced `{…}`, its comma-separated
/// alternatives (commas inside nested braces kept), and the text after.
fn split_first_braces(pattern: &str) -> Option<(&str, Vec<&str>, &str)> {
    let open = pattern.find('{')?;
    let mut depth = 0usize;
    let mut start = open + 1;
    let mut alternatives = Vec::new();
    for (at, c) in pattern.char_indices().skip_while(|(at, _)| *at <= open) {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                alternatives.push(pattern.get(start..at)?);
                return Some((pattern.get(..open)?, alternatives, pattern.get(at + 1..)?));
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                alternatives.push(pattern.get(start..at)?);
                start = at + 1;
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ripgrep_globs_match_at_any_depth_below_the_folder() {
        assert_eq!(rg_globs([".env"]), ["**/.env"]);
        assert_eq!(rg_globs(["**/.warden/*"]), ["**/.warden/*"]);
        assert_eq!(rg_globs(["/src/*.rs"]), ["**/src/*.rs"]);
        assert_eq!(rg_globs(["target/"]), ["**/target/**/*"]);
        assert_eq!(rg_globs(["!*.lock"]), ["**/*"]);
        assert_eq!(rg_globs(["!*.lock", "*.rs"]), ["**/*.rs"]);
        assert_eq!(rg_globs(Vec::<&str>::new()), ["**/*"]);
    }

    #[test]
    fn claude_code_splits_its_grep_filter_like_this() {
        assert_eq!(claude_code_globs("*.rs,.env"), ["*.rs", ".env"]);
        assert_eq!(claude_code_globs("*.rs  .env"), ["*.rs", ".env"]);
        assert_eq!(claude_code_globs("*.{ts,tsx} ,x"), ["*.{ts,tsx}", "x"]);
        assert_eq!(claude_code_globs("a\u{feff}b"), ["a", "b"]);
    }

    #[test]
    fn claude_code_s_glob_searches_its_path_or_the_folder_an_absolute_pattern_names() {
        let search = |root: &str, names: &[&str]| Touch::Search {
            root: root.to_owned(),
            names: names.iter().map(|n| (*n).to_owned()).collect(),
        };
        assert_eq!(claude_code_glob("*.rs", "/w"), search("/w", &["**/*.rs"]));
        assert_eq!(claude_code_glob("src/**/*.rs", "/w"), search("/w", &["**/src/**/*.rs"]));
        assert_eq!(claude_code_glob("/etc/*.conf", "/w"), search("/etc", &["**/*.conf"]));
        assert_eq!(claude_code_glob("/home/a/.ssh/id_*", "/w"), search("/home/a/.ssh", &["**/id_*"]));
        assert_eq!(claude_code_glob("/*", "/w"), search("/", &["**/*"]));
        assert_eq!(claude_code_glob("/home/a/.env", "/w"), search("/home/a", &["**/.env"]));
    }

    #[test]
    fn braces_are_written_out_within_a_bound() {
        assert_eq!(expand_braces("**/*.{rs,toml}"), ["**/*.rs", "**/*.toml"]);
        assert_eq!(expand_braces("{a,b}/{c,d}"), ["a/c", "a/d", "b/c", "b/d"]);
        assert_eq!(expand_braces("{.env,{x,y}.rs}"), [".env", "x.rs", "y.rs"]);
        assert_eq!(expand_braces("a{b"), ["a{b"]);
        assert_eq!(expand_braces("plain"), ["plain"]);
        let many = "{a,b,c,d,e}{f,g,h,i,j}";
        assert_eq!(expand_braces(many), [many]);
    }
}
