//! Credentials taken out of what people read: approvers' screens, the
//! audit record's display fields, reasons. Policies still see the real
//! request, and the request hash is over it; only the words for people
//! change. Pure, and a leaf: text in, text out
//! (`NormalizedRequest::for_display` applies it to a request).

use std::sync::LazyLock;

use regex::Regex;

/// What replaces a credential.
pub(crate) const REDACTED: &str = "REDACTED";

/// A name of something secret, inside a longer name (`GITHUB_TOKEN`,
/// `db_password`, `x-api-key`).
const SECRET_NAME: &str = r"[a-z0-9_.-]*(?:token|passw(?:or)?d|pwd|secret|api[_-]?key|access[_-]?key|private[_-]?key|credential|signature|sig)[a-z0-9_.-]*";

/// Each rule: what to find, and what to put instead (`$1` keeps the name).
static RULES: LazyLock<Vec<(Regex, &'static str)>> = LazyLock::new(|| {
    let rules = [
        // An HTTP authorization header, with or without its scheme.
        (r"(?i)(authorization:\s*(?:bearer\s+|basic\s+|token\s+)?)[^\s'\x22]+".to_owned(), "${1}REDACTED"),
        // NAME=VALUE in a query string, an option or an environment setting.
        (format!(r"(?i)((?:^|[\s?&;'\x22]|--?){SECRET_NAME}=)[^\s&'\x22]+"), "${1}REDACTED"),
        // --token VALUE, --password VALUE: the value in the next word.
        (
            r"(?i)((?:^|\s)--?(?:token|password|passwd|api[_-]?key|secret|auth-token)\s+)('[^']*'|[^\s'\x22]+)"
                .to_owned(),
            "${1}REDACTED",
        ),
        // curl -u user:password.
        (r"(?i)((?:^|\s)(?:-u|--user)\s+'?[^\s:']+:)[^\s']+".to_owned(), "${1}REDACTED"),
        // A URL's user:password@.
        (r"(://[^/\s:@]+:)[^@\s/]+@".to_owned(), "${1}REDACTED@"),
        // A header that names a secret: `X-Api-Key: VALUE`.
        (format!(r"(?i)((?:^|[\s'\x22]){SECRET_NAME}:\s*)[^\s'\x22]+"), "${1}REDACTED"),
    ];
    rules.into_iter().filter_map(|(pattern, with)| Regex::new(&pattern).ok().map(|re| (re, with))).collect()
});

/// A JSON value without credentials: every member whose name names a
/// secret (`api_key`, `password`, `x-api-key`) has its value replaced, and
/// every string as [`text`] shows it.
pub(crate) fn json(value: &mut serde_json::Value) {
    static SECRET_KEY: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(&format!(r"(?i)^{SECRET_NAME}$")).ok());
    match value {
        serde_json::Value::String(s) => *s = text(s),
        serde_json::Value::Array(items) => items.iter_mut().for_each(json),
        serde_json::Value::Object(members) => {
            for (key, member) in members.iter_mut() {
                if SECRET_KEY.as_ref().is_some_and(|re| re.is_match(key)) && !member.is_null() {
                    *member = serde_json::Value::String(REDACTED.to_owned());
                } else {
                    json(member);
                }
            }
        }
        _ => {}
    }
}

/// JSON text without credentials (see [`json`]), as it was when it shows
/// none; text that is not JSON as [`text`] shows it.
pub(crate) fn json_text(source: &str) -> String {
    match serde_json::from_str::<serde_json::Value>(source) {
        Ok(value) => {
            let mut shown = value.clone();
            json(&mut shown);
            if shown == value { source.to_owned() } else { shown.to_string() }
        }
        Err(_) => text(source),
    }
}

/// `text` with every credential it shows replaced by [`REDACTED`].
pub(crate) fn text(text: &str) -> String {
    let mut out = text.to_owned();
    for (pattern, with) in RULES.iter() {
        out = pattern.replace_all(&out, *with).into_owned();
    }
    out
}

/// An argv without credentials: each element as [`text`] shows it, and the
/// word after a flag that takes a secret (`--token VALUE`), or the password
/// of `-u user:password`.
pub(crate) fn argv(argv: &[String]) -> Vec<String> {
    let mut shown: Vec<String> = Vec::with_capacity(argv.len());
    for arg in argv {
        let previous = shown.last().map(|p| p.to_ascii_lowercase()).unwrap_or_default();
        let value = if SECRET_FLAGS.contains(&previous.as_str()) {
            REDACTED.to_owned()
        } else if (previous == "-u" || previous == "--user") && arg.contains(':') {
            let user = arg.split(':').next().unwrap_or_default();
            format!("{user}:{REDACTED}")
        } else {
            text(arg)
        };
        shown.push(value);
    }
    shown
}

/// Flags whose next word is a secret.
const SECRET_FLAGS: &[&str] =
    &["--token", "-token", "--password", "--passwd", "--api-key", "--apikey", "--api_key", "--secret", "--auth-token"];

#[cfg(test)]
mod tests {
    use super::{argv, json_text, text};

    #[test]
    fn json_loses_the_values_of_secret_members_and_credentials_in_strings() {
        let raw = r#"{"api_key":"sk-live-123","nested":{"db_password":"p"},"headers":["X-Api-Key: sk-live-456"],"url":"https://x.example/?key=1&token=t0k","n":3}"#;
        let shown = json_text(raw);
        for secret in ["sk-live-123", "\"p\"", "sk-live-456", "t0k"] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        assert!(shown.contains(r#""n":3"#) && shown.contains("REDACTED"), "{shown}");
        // Nothing to hide: the text as it was, not re-serialized.
        let plain = r#"{ "path": "/tmp/a",  "b": [1, 2] }"#;
        assert_eq!(json_text(plain), plain);
        assert_eq!(json_text("not json token=abc"), "not json token=REDACTED");
    }

    #[test]
    fn an_argv_loses_the_secret_after_its_flag() {
        let raw: Vec<String> = ["deploy", "--token", "abc", "-u", "al:pw", "-H", "Authorization: Bearer x", "ok"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        assert_eq!(
            argv(&raw),
            ["deploy", "--token", "REDACTED", "-u", "al:REDACTED", "-H", "Authorization: Bearer REDACTED", "ok"]
        );
    }

    #[test]
    fn credentials_are_replaced_and_the_rest_stays() {
        let cases = [
            ("curl -H 'Authorization: Bearer abc.def' https://x", "curl -H 'Authorization: Bearer REDACTED' https://x"),
            ("curl -H \"authorization: token ghp_123\"", "curl -H \"authorization: token REDACTED\""),
            (
                "https://api.x.com/v1?user=al&access_token=s3cr3t&page=2",
                "https://api.x.com/v1?user=al&access_token=REDACTED&page=2",
            ),
            ("deploy --token=abc123 --verbose", "deploy --token=REDACTED --verbose"),
            ("deploy --token abc123 --verbose", "deploy --token REDACTED --verbose"),
            ("mysql --password hunter2 db", "mysql --password REDACTED db"),
            ("env GITHUB_TOKEN=ghp_x make", "env GITHUB_TOKEN=REDACTED make"),
            ("psql postgres://app:hunter2@db/prod", "psql postgres://app:REDACTED@db/prod"),
            ("curl -u alice:hunter2 https://x", "curl -u alice:REDACTED https://x"),
            ("login password=hunter2", "login password=REDACTED"),
            ("git push origin main", "git push origin main"),
            ("cat /home/alice/token.txt", "cat /home/alice/token.txt"),
        ];
        for (raw, shown) in cases {
            assert_eq!(text(raw), shown, "{raw}");
        }
    }
}
