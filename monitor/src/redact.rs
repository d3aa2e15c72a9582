//! Credentials in what an agent wrote: taken out of what the harness is
//! told and what is logged (reasons naming a command or a URL, log lines),
//! and found, not replaced, for approvers, who are shown the request
//! exactly, with what looks like a credential named beside it
//! (`RequestInput::credentials`). Policies and the audit record see the
//! real request. Pure, and a leaf: text in, text out.

use std::sync::LazyLock;

use regex::Regex;

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

/// `text` with every credential it shows replaced by `REDACTED`.
pub(crate) fn text(text: &str) -> String {
    let mut out = text.to_owned();
    for (pattern, with) in RULES.iter() {
        out = pattern.replace_all(&out, *with).into_owned();
    }
    out
}

/// What in `text` looks like a credential, each as written with the name
/// it follows (`api_key=cHJp…`, `Authorization: Bearer abc`, `--token
/// abc`): what [`text`] would replace, found rather than replaced, in order,
/// each once.
pub(crate) fn credentials(text: &str) -> Vec<String> {
    let mut found: Vec<(usize, String)> = Vec::new();
    for (pattern, _) in RULES.iter() {
        for hit in pattern.find_iter(text) {
            let written = hit.as_str().trim_start_matches(|c: char| c.is_whitespace() || "?&;'\":/".contains(c));
            let at = hit.end() - written.len();
            if !found.iter().any(|(start, seen)| *start <= at && at < start + seen.len()) {
                found.push((at, written.to_owned()));
            }
        }
    }
    found.sort();
    found.into_iter().map(|(_, written)| written).collect()
}

/// What in JSON text looks like a credential: every member whose name names
/// a secret, as `name: value`, and what [`credentials`] finds in strings;
/// text that is not JSON as [`credentials`] reads it.
pub(crate) fn json_credentials(source: &str) -> Vec<String> {
    fn walk(value: &serde_json::Value, found: &mut Vec<String>) {
        static SECRET_KEY: LazyLock<Option<Regex>> =
            LazyLock::new(|| Regex::new(&format!(r"(?i)^{SECRET_NAME}$")).ok());
        match value {
            serde_json::Value::String(s) => found.extend(credentials(s)),
            serde_json::Value::Array(items) => items.iter().for_each(|item| walk(item, found)),
            serde_json::Value::Object(members) => {
                for (key, member) in members {
                    match member {
                        serde_json::Value::Null => {}
                        serde_json::Value::String(value) if SECRET_KEY.as_ref().is_some_and(|re| re.is_match(key)) => {
                            found.push(format!("{key}: {value}"));
                        }
                        _ if SECRET_KEY.as_ref().is_some_and(|re| re.is_match(key)) => {
                            found.push(format!("{key}: {member}"));
                        }
                        _ => walk(member, found),
                    }
                }
            }
            _ => {}
        }
    }
    match serde_json::from_str::<serde_json::Value>(source) {
        Ok(value) => {
            let mut found = Vec::new();
            walk(&value, &mut found);
            found
        }
        Err(_) => credentials(source),
    }
}

#[cfg(test)]
mod tests {
    use super::{credentials, json_credentials, text};

    #[test]
    fn credentials_are_found_as_written_with_their_names() {
        let line = "curl -H 'Authorization: Bearer abc.def' 'https://x/?user=al&access_token=s3cr3t' --token t0k -u al:pw https://bo:hunter2@db/";
        assert_eq!(
            credentials(line),
            ["Authorization: Bearer abc.def", "access_token=s3cr3t", "--token t0k", "-u al:pw", "bo:hunter2@"],
            "{line}"
        );
        assert!(credentials("git push origin main && cat /home/alice/token.txt").is_empty());
        let json = r#"{"text":"notes api_key=cHJpdmF0ZSBub3Rlczog","auth":{"db_password":"p"},"n":3}"#;
        assert_eq!(json_credentials(json), ["api_key=cHJpdmF0ZSBub3Rlczog", "db_password: p"]);
        assert_eq!(json_credentials("not json token=abc"), ["token=abc"]);
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
