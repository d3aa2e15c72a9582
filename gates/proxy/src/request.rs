//! What a request is checked for before it is decided, pure: its method in
//! one spelling, a target that would mean one thing to the monitor and
//! another upstream, the headers that belong to one hop, and the bytes its
//! headers carry.

use http::Method;
use http::header::{self, HeaderMap, HeaderName};

/// The longest method the monitor takes (`resource.http.method`).
pub const METHOD_MAX: usize = 32;

/// A method that is not sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MethodError {
    /// Not an RFC 9110 token.
    #[error("`{0}` is not an HTTP method")]
    NotAToken(String),
    /// Longer than the monitor takes.
    #[error("the method `{0}` is longer than {METHOD_MAX} bytes")]
    TooLong(String),
    /// `CONNECT` other than as the proxy's own (spelled otherwise, or
    /// inside a tunnel).
    #[error("`{0}` is CONNECT, which opens a tunnel to the proxy and is sent nowhere")]
    Connect(String),
}

/// The method a request is decided and sent as: methods are compared
/// without regard to case (the monitor upper-cases what it decides on), so
/// the standard ones in their canonical spelling, an extension method
/// upper-cased (decided and sent as such: WebDAV's `PROPFIND`, `REPORT` …);
/// a non-token, an overlong method and `CONNECT` are refused.
pub fn canonical_method(method: &Method) -> Result<Method, MethodError> {
    let text = method.as_str();
    if text.is_empty() || !text.bytes().all(is_tchar) {
        return Err(MethodError::NotAToken(text.escape_default().to_string()));
    }
    if text.len() > METHOD_MAX {
        return Err(MethodError::TooLong(format!("{}…", text.get(..METHOD_MAX).unwrap_or(text))));
    }
    let upper = text.to_ascii_uppercase();
    if upper == "CONNECT" {
        return Err(MethodError::Connect(text.to_owned()));
    }
    // `Method::from_bytes` gives the standard constant for a standard name.
    Method::from_bytes(upper.as_bytes()).map_err(|_| MethodError::NotAToken(text.to_owned()))
}

/// Whether the decision on `method` is about a read, so that a body would
/// carry data out unseen.
pub fn is_read(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE)
}

/// RFC 9110 `tchar`.
fn is_tchar(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&byte)
}

/// Why a request target would mean one thing to the monitor and another to
/// the upstream, if it would: the monitor decides on the URL in normal
/// form (dot segments removed), and servers differ in what they decode or
/// collapse (`%2f`, `//`, `..;`). Such a target is refused, not guessed at.
/// Otherwise the URL, parsed.
pub fn unambiguous_target(url: &str) -> Result<url::Url, String> {
    let parsed = match url::Url::parse(url) {
        Ok(parsed) => parsed,
        Err(e) => return Err(format!("`{url}` is not a URL: {e}")),
    };
    let raw_path =
        url.split_once("://").and_then(|(_, rest)| rest.find('/').and_then(|at| rest.get(at..))).unwrap_or("/");
    let raw_path = raw_path.split(['?', '#']).next().unwrap_or("/");
    let lower = raw_path.to_ascii_lowercase();
    if parsed.path() != raw_path {
        return Err(format!("the path `{raw_path}` is not in normal form (`{}`)", parsed.path()));
    }
    if ["%2f", "%5c", "%2e", "%00"].iter().any(|encoded| lower.contains(encoded)) {
        return Err(format!("the path `{raw_path}` encodes a `/`, `\\`, `.` or NUL"));
    }
    if raw_path.contains("//")
        || raw_path.split('/').any(|segment| segment.starts_with(".;") || segment.starts_with("..;"))
    {
        return Err(format!("the path `{raw_path}` has an empty or dot segment"));
    }
    Ok(parsed)
}

/// Headers that belong to one hop, never forwarded.
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "proxy-connection",
    "keep-alive",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
    "trailer",
    "upgrade",
];

/// Removes the headers of one hop: the standard ones, those `Connection`
/// names, and `Transfer-Encoding` (each side frames its own body).
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let listed: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in listed {
        headers.remove(name);
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
    headers.remove(header::TRANSFER_ENCODING);
}

/// The bytes of the header names and values in `headers` (what a request
/// carries out besides its URL and body), `Host` left out: upstream it is
/// written from the decided URL.
pub fn header_bytes(headers: &HeaderMap) -> u64 {
    headers
        .iter()
        .filter(|(name, _)| **name != header::HOST)
        .map(|(name, value)| (name.as_str().len() + value.len()) as u64)
        .sum()
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    fn method(text: &str) -> Result<Method, MethodError> {
        canonical_method(&Method::from_bytes(text.as_bytes()).unwrap())
    }

    #[test]
    fn methods_are_one_spelling_whatever_the_case() {
        for (sent, decided) in [
            ("get", Method::GET),
            ("GeT", Method::GET),
            ("GET", Method::GET),
            ("head", Method::HEAD),
            ("post", Method::POST),
            ("dElEtE", Method::DELETE),
            ("options", Method::OPTIONS),
            ("trace", Method::TRACE),
            ("patch", Method::PATCH),
            ("put", Method::PUT),
        ] {
            let got = method(sent).unwrap();
            assert_eq!(got, decided, "{sent}");
            // The constant, not an extension that prints the same.
            assert!(is_read(&got) == matches!(decided, Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE));
        }
        assert!(is_read(&method("get").unwrap()), "`get` is a read");
        assert_eq!(method("propfind").unwrap().as_str(), "PROPFIND");
        assert!(!is_read(&method("propfind").unwrap()));
        for connect in ["connect", "Connect", "CONNECT"] {
            assert!(matches!(method(connect), Err(MethodError::Connect(_))), "{connect}");
        }
        assert!(matches!(method(&"X".repeat(METHOD_MAX + 1)), Err(MethodError::TooLong(_))));
        assert!(method(&"X".repeat(METHOD_MAX)).is_ok());
    }

    #[test]
    fn header_bytes_count_names_and_values_but_not_host() {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_static("example.com"));
        headers.insert("x-data", HeaderValue::from_static("abcd"));
        headers.append("x-data", HeaderValue::from_static("ef"));
        headers.insert(header::CONNECTION, HeaderValue::from_static("x-hop"));
        headers.insert("x-hop", HeaderValue::from_static("1"));
        headers.insert("proxy-authorization", HeaderValue::from_static("Basic eA=="));
        strip_hop_by_hop(&mut headers);
        assert_eq!(header_bytes(&headers), (6 + 4) + (6 + 2));
    }

    #[test]
    fn a_target_that_could_mean_two_things_is_refused() {
        assert_eq!(unambiguous_target("https://h/a/b?x").map(|u| u.path().to_owned()), Ok("/a/b".to_owned()));
        for url in ["https://h/a/../b", "https://h//b", "https://h/a%2fb", "https://h/x/..;/y", "https://h/%2e%2e/y"] {
            assert!(unambiguous_target(url).is_err(), "{url}");
        }
    }
}
