//! Secrets the agent never holds, and where they go into a request.
//!
//! The store is a TOML file of `NAME = "value"` lines, refused unless only
//! its owner may read it (mode 0600 or stricter). A header value names a
//! secret with the placeholder `warden-secret:NAME`; the proxy replaces it
//! only once Warden allowed `secret.use` of that secret for the request's
//! host. Values never reach a log, an audit record or a response.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

/// The placeholder's prefix.
pub const PREFIX: &str = "warden-secret:";

/// Why the store cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The file cannot be read.
    #[error("secrets file `{path}`: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// Others may read or write it.
    #[error("secrets file `{path}` has mode {mode:o}: only its owner may read it (chmod 600)")]
    Mode {
        /// The file.
        path: String,
        /// Its permission bits.
        mode: u32,
    },
    /// Not a TOML table of strings.
    #[error("secrets file `{path}`: {message}")]
    Parse {
        /// The file.
        path: String,
        /// What is wrong (never a value).
        message: String,
    },
}

/// The secrets, by name. `Debug` shows the names only.
#[derive(Default, Clone)]
pub struct Secrets(BTreeMap<String, String>);

impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.0.keys()).finish()
    }
}

impl Secrets {
    /// Reads the store at `path`, refusing it unless its mode is 0600 or
    /// stricter.
    pub fn load(path: &Path) -> Result<Self, StoreError> {
        use std::os::unix::fs::PermissionsExt as _;
        let shown = path.display().to_string();
        let io = |source| StoreError::Io { path: shown.clone(), source };
        let mode = std::fs::metadata(path).map_err(io)?.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(StoreError::Mode { path: shown, mode });
        }
        let text = std::fs::read_to_string(path).map_err(io)?;
        Self::parse(&text).map_err(|message| StoreError::Parse { path: shown, message })
    }

    /// Parses `NAME = "value"` lines.
    pub fn parse(text: &str) -> Result<Self, String> {
        let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
            // toml's message quotes the line, which may hold a value.
            let line = e.span().map(|s| text[..s.start.min(text.len())].lines().count()).unwrap_or(0);
            format!("not a TOML table of names and strings (near line {line})")
        })?;
        let mut secrets = Self::default();
        for (name, value) in table {
            let toml::Value::String(value) = value else {
                return Err(format!("`{name}` must be a string"));
            };
            secrets.insert(name, value)?;
        }
        Ok(secrets)
    }

    /// Adds (or replaces) `name`, refusing a name that cannot be one and a
    /// value that could not be sent in a header; the message never holds
    /// the value.
    pub fn insert(&mut self, name: String, value: String) -> Result<(), String> {
        if !valid_name(&name) {
            return Err(format!("`{name}` is not a secret name (letters, digits, `.`, `_`, `-`)"));
        }
        if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
            return Err(format!("`{name}` has a line break or NUL: it could not be sent in a header"));
        }
        self.0.insert(name, value);
        Ok(())
    }

    /// The value of `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    /// Whether the store is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// How many secrets it holds.
    pub fn len(&self) -> usize {
        self.0.len()
    }
}

fn name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

/// Whether `name` can be a secret's name.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 128 && name.chars().all(name_char)
}

/// One piece of a header value: text as it is, or a placeholder's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece<'a> {
    /// Text sent as it is.
    Text(&'a str),
    /// `warden-secret:NAME`: the secret's name.
    Secret(&'a str),
}

/// Splits `value` into text and placeholders. A placeholder is the prefix
/// followed by the longest run of name characters; a prefix with no name
/// after it is text.
pub fn pieces(value: &str) -> Vec<Piece<'_>> {
    let mut out = Vec::new();
    let mut rest = value;
    while let Some(at) = rest.find(PREFIX) {
        let after = &rest[at + PREFIX.len()..];
        let len = after.find(|c: char| !name_char(c)).unwrap_or(after.len()).min(128);
        if len == 0 {
            out.push(Piece::Text(&rest[..at + PREFIX.len()]));
            rest = after;
            continue;
        }
        if at > 0 {
            out.push(Piece::Text(&rest[..at]));
        }
        out.push(Piece::Secret(&after[..len]));
        rest = &after[len..];
    }
    if !rest.is_empty() {
        out.push(Piece::Text(rest));
    }
    out
}

/// The names `value` refers to, in order, each once.
pub fn names(value: &str) -> Vec<&str> {
    let mut names = Vec::new();
    for piece in pieces(value) {
        if let Piece::Secret(name) = piece
            && !names.contains(&name)
        {
            names.push(name);
        }
    }
    names
}

/// `value` with every placeholder replaced by `lookup(name)`; `None` when a
/// name has no value. One pass: a value put in is never read again, so no
/// placeholder is replaced twice and a value is never split.
pub fn substitute<'a>(value: &str, lookup: impl Fn(&str) -> Option<&'a str>) -> Option<String> {
    let mut out = String::with_capacity(value.len());
    for piece in pieces(value) {
        match piece {
            Piece::Text(text) => out.push_str(text),
            Piece::Secret(name) => out.push_str(lookup(name)?),
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Header text around placeholders: any printable ASCII, often the
    /// prefix itself or pieces of it.
    fn text() -> impl Strategy<Value = String> {
        prop::collection::vec(
            prop_oneof![
                "[ -~]{0,6}",
                Just(PREFIX.to_owned()),
                Just("warden-secret".to_owned()),
                Just(":".to_owned()),
                Just("key".to_owned()),
                Just(format!("{PREFIX}key")),
                Just(format!("{PREFIX}ab")),
                "[a-z]{1,3}",
            ],
            0..6,
        )
        .prop_map(|parts| parts.concat())
    }

    proptest! {
        /// Every placeholder of a known name becomes exactly its value and
        /// nothing else changes: the value of `a` never lands where `ab`
        /// was written, a value put in is not read again (a value that
        /// looks like a placeholder stays as it is), and a header with no
        /// placeholder is left alone.
        #[test]
        fn substitution_is_exact(text in text(), value_a in "[ -~]{0,12}", value_b in "[ -~]{0,12}") {
            let lookup = |name: &str| match name {
                "a" => Some(value_a.as_str()),
                "ab" => Some(value_b.as_str()),
                _ => None,
            };
            let expected: Option<String> = pieces(&text)
                .into_iter()
                .map(|piece| match piece {
                    Piece::Text(t) => Some(t.to_owned()),
                    Piece::Secret(name) => lookup(name).map(str::to_owned),
                })
                .collect();
            prop_assert_eq!(substitute(&text, lookup), expected.clone());
            // The pieces put together again are the text: nothing lost.
            let rebuilt: String = pieces(&text)
                .into_iter()
                .map(|piece| match piece {
                    Piece::Text(t) => t.to_owned(),
                    Piece::Secret(name) => format!("{PREFIX}{name}"),
                })
                .collect();
            prop_assert_eq!(&rebuilt, &text);
            if !text.contains(PREFIX) {
                prop_assert_eq!(substitute(&text, lookup), Some(text.clone()));
            }
        }

        /// A value never appears in a header that did not name it.
        #[test]
        fn a_value_goes_only_where_it_is_named(text in text()) {
            let secret = "VALUE-7f3a";
            let lookup = |name: &str| (name == "key").then_some(secret);
            if let Some(out) = substitute(&text, lookup) {
                let named = pieces(&text).iter().filter(|p| **p == Piece::Secret("key")).count();
                prop_assert_eq!(out.matches(secret).count(), named + text.matches(secret).count());
            }
        }
    }

    #[test]
    fn placeholders_are_found_whole() {
        assert_eq!(
            pieces("Bearer warden-secret:github-token"),
            vec![Piece::Text("Bearer "), Piece::Secret("github-token")]
        );
        assert_eq!(names("a warden-secret:x,warden-secret:y;warden-secret:x"), vec!["x", "y"]);
        assert_eq!(pieces("warden-secret:"), vec![Piece::Text("warden-secret:")]);
        assert_eq!(pieces("warden-secret: x"), vec![Piece::Text("warden-secret:"), Piece::Text(" x")]);
        let lookup = |n: &str| (n == "x").then_some("VALUE");
        assert_eq!(substitute("k=warden-secret:x&j=1", lookup).as_deref(), Some("k=VALUE&j=1"));
        assert_eq!(substitute("warden-secret:xy", lookup), None, "xy is another name, not x and a y");
    }

    #[test]
    fn the_store_refuses_bad_files() {
        assert!(Secrets::parse("a = \"1\"\n\"b-c.d_e\" = \"2\"").is_ok());
        assert!(Secrets::parse("a = 1").unwrap_err().contains("must be a string"));
        assert!(Secrets::parse("\"a b\" = \"1\"").unwrap_err().contains("not a secret name"));
        assert!(Secrets::parse("a = \"x\\ny\"").unwrap_err().contains("line break"));
        let err = Secrets::parse("a = \"hunter2\" junk").unwrap_err();
        assert!(!err.contains("hunter2"), "{err}");
        let secrets = Secrets::parse("token = \"hunter2\"").unwrap();
        assert!(!format!("{secrets:?}").contains("hunter2"));
    }
}
