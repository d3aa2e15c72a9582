//! Property tests of the pure request pipeline: path, URL and argv normalization, proto-to-domain
//! conversion and grant scopes.

use std::collections::BTreeSet;

use proptest::prelude::*;
use warden_monitor::grants::parse_scope;
use warden_monitor::grpc::request_input;
use warden_monitor::normalize::{InvalidInput, Resource, ResourceInput, limits, normalize, normalize_resource};
use warden_proto::v1 as pb;

/// Every case runs in memory; failures are not persisted next to the sources.
fn config(cases: u32) -> ProptestConfig {
    ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() }
}

// ---------------------------------------------------------------------------
// Strategies
// ---------------------------------------------------------------------------

/// Any string at all: every Unicode scalar value, control characters included.
fn any_text(max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(any::<char>(), 0..=max).prop_map(|chars| chars.into_iter().collect())
}

fn strings(values: &'static [&'static str]) -> impl Strategy<Value = String> + Clone {
    prop::sample::select(values).prop_map(str::to_owned)
}

/// One path component, biased towards the interesting ones.
fn path_component() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => strings(&["..", ".", "", "a", "b", "bc", "..."]),
        2 => strings(&["é", "日本語", "a b", ".bashrc", "x.tar.gz", "notes.", "Makefile", "\u{202e}txt", "~"]),
        1 => strings(&["\u{0}", "\n", "\t", "\u{7f}", "\u{85}", "\\"]),
        2 => "[a-z.]{1,4}",
        1 => any_text(6),
    ]
}

/// A path made of `path_component`s, absolute or relative, sometimes with a trailing `/`.
fn path_text() -> impl Strategy<Value = String> {
    (any::<bool>(), prop::collection::vec(path_component(), 0..8), any::<bool>()).prop_map(
        |(absolute, parts, trailing)| {
            let mut text = if absolute { "/".to_owned() } else { String::new() };
            text.push_str(&parts.join("/"));
            if trailing {
                text.push('/');
            }
            text
        },
    )
}

/// A string that is now and then longer than a path may be.
fn long_text() -> impl Strategy<Value = String> {
    (0usize..=limits::PATH_BYTES + 64, any::<bool>()).prop_map(|(n, absolute)| {
        let body = "x/".repeat(n / 2);
        if absolute { format!("/{body}") } else { body }
    })
}

/// Paths and cwds: structured, arbitrary or long.
fn any_path() -> impl Strategy<Value = String> {
    prop_oneof![6 => path_text(), 2 => any_text(24), 1 => long_text()]
}

/// A component with no `/`, no control character and neither `.` nor `..`.
fn normal_component() -> impl Strategy<Value = String> {
    "[^/\\p{Cc}]{1,8}".prop_filter("not a dot component", |part| part != "." && part != "..")
}

fn http_method() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => strings(&["GET", "get", "Post", "HEAD", "PATCH", "x-custom!", "M-SEARCH"]),
        1 => strings(&["", "GE T", "G\u{0}T", "GÉT", "a-very-long-method-name-that-is-over-32"]),
        1 => any_text(8),
    ]
}

fn url_scheme() -> impl Strategy<Value = String> {
    strings(&["http://", "https://", "HTTPS://", "HtTp://", "http:", "https:/", "ftp://", "file://", "", "//"])
}

/// A host, written as a name, an IP address in one of its spellings, or something invalid, with zero, one or
/// two trailing dots.
fn url_host() -> impl Strategy<Value = String> {
    (host_name(), strings(&["", "", "", ".", ".."])).prop_map(|(host, dots)| format!("{host}{dots}"))
}

fn host_name() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => strings(&[
            "example.com",
            "API.GitHub.com",
            "localhost",
            "a.b.c.d.e",
            "bücher.example",
            "xn--bcher-kva.example",
            "EXAMPLE.COM",
            "a..b",
            ".example.com",
            "-dash.example",
            "under_score.example",
            "*.example.com",
        ]),
        3 => strings(&[
            "127.0.0.1",
            "169.254.169.254",
            "0x7f.1",
            "2130706433",
            "017700000001",
            "[::1]",
            "[::ffff:169.254.169.254]",
            "[::ffff:7f00:1]",
            "[2001:db8::1]",
            "256.0.0.1",
            "1.2.3",
            "example.1",
        ]),
        1 => strings(&["", "user:pw@example.com", "TOKEN@github.com", "exa mple.com", "ex%41mple.com", "a\\b"]),
        2 => "[a-zA-Z0-9.-]{1,12}",
        1 => any_text(8),
    ]
}

fn url_port() -> impl Strategy<Value = String> {
    strings(&["", "", "", ":80", ":443", ":8443", ":0", ":65535", ":65536", ":", ":x"])
}

fn url_path() -> impl Strategy<Value = String> {
    let segment = prop_oneof![
        3 => strings(&["", "a", "B", ".", "..", "%2e", "%2E%2e", "~user", "a b", "ü", "%", "%zz", "%2", "%+1"]),
        3 => strings(&["%61", "%2f", "%2F", "%7e", "%7E", "%25", "%252e", "%C3%BC", "%00", "%5C", "a;b=c", "@"]),
        1 => strings(&["%%36%31", "%0%30", "%%2e", "100%", "%%"]),
        1 => "[a-zA-Z0-9%._~-]{0,6}",
        1 => any_text(4),
    ];
    prop::collection::vec(segment, 0..5).prop_map(|segments| {
        segments.iter().fold(String::new(), |mut path, segment| {
            path.push('/');
            path.push_str(segment);
            path
        })
    })
}

fn url_tail() -> impl Strategy<Value = String> {
    strings(&["", "", "?q=1", "?Q=%41&b", "?", "#frag", "?a#b", "#", "?x=%2e%2e/"])
}

/// URLs: mostly assembled from interesting parts, sometimes arbitrary text.
fn any_url() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => (url_scheme(), url_host(), url_port(), url_path(), url_tail())
            .prop_map(|(scheme, host, port, path, tail)| format!("{scheme}{host}{port}{path}{tail}")),
        1 => any_text(32),
    ]
}

fn argv_entry() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => strings(&["git", "/usr/bin/git", "./run.sh", "push", "origin", "main", "-rf", "a b", "", " ", "--"]),
        2 => strings(&["/", ".", "..", "bin/", "/usr/bin/..", "é", "日本", "x\u{0}", "\n", "\t", "\u{9b}"]),
        2 => "[a-z/. -]{0,8}",
        1 => any_text(8),
    ]
}

fn any_argv() -> impl Strategy<Value = Vec<String>> {
    prop_oneof![
        8 => prop::collection::vec(argv_entry(), 0..6),
        1 => prop::collection::vec(Just("x".to_owned()), limits::ARGV_ENTRIES - 1..=limits::ARGV_ENTRIES + 1),
        1 => (0usize..=limits::ARGV_BYTES + 16).prop_map(|n| vec!["cat".to_owned(), "y".repeat(n)]),
    ]
}

fn any_cwd() -> impl Strategy<Value = String> {
    prop_oneof![2 => Just(String::new()), 4 => any_path()]
}

/// Text for an id-like or free-text field: valid, empty, blank, control characters, too long or arbitrary.
fn field_text() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => strings(&["alice", "claude-code", "s-1", "fs.read", "exec", "http.request", "req-1", "secret.use"]),
        2 => strings(&["", " ", "\t", "a\u{0}", "a\nb", "é", "\u{1b}[31m", "  fs.read  "]),
        1 => (0usize..=limits::JUSTIFICATION_BYTES + 8).prop_map(|n| "z".repeat(n)),
        2 => any_text(12),
    ]
}

fn context_json() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => strings(&["", " ", "{}", "{\"a\":1}", "{\"b\":{\"c\":[1,2]}}"]),
        2 => strings(&["[]", "1", "null", "\"x\"", "{", "{\"a\":}", "{\"a\":1}x"]),
        1 => (0usize..=limits::JSON_BYTES + 8).prop_map(|n| format!("{{\"k\":\"{}\"}}", "v".repeat(n))),
        1 => any_text(16),
    ]
}

fn arguments_json() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => strings(&["", "{}", "{\"z\":1,\"a\":[{\"y\":2,\"b\":3}]}", "[1,2]", "3", "null"]),
        1 => strings(&["{", "nope", " ", "{\"a\":1}{}"]),
        1 => any_text(16),
    ]
}

fn resource_oneof() -> impl Strategy<Value = Option<pb::authorize_request::Resource>> {
    use pb::authorize_request::Resource as R;
    prop_oneof![
        1 => Just(None),
        2 => (any_path(), any_cwd())
            .prop_map(|(path, cwd)| Some(R::File(pb::FileResource { path, cwd, pattern: false }))),
        2 => (any_argv(), any_cwd())
            .prop_map(|(argv, cwd)| Some(R::Command(pb::CommandResource { argv, cwd }))),
        2 => (http_method(), any_url())
            .prop_map(|(method, url)| Some(R::Http(pb::HttpResource { method, url }))),
        1 => field_text().prop_map(|name| Some(R::Secret(pb::SecretResource { name }))),
        2 => (prop_oneof![field_text(), strings(&["github", "srv/x"])], field_text(), arguments_json())
            .prop_map(|(server, name, arguments_json)| {
                Some(R::Tool(pb::ToolResource { server, name, arguments_json }))
            }),
    ]
}

fn actor() -> impl Strategy<Value = Option<pb::Actor>> {
    prop_oneof![
        1 => Just(None),
        6 => (field_text(), field_text(), field_text()).prop_map(|(user, agent, session)| Some(pb::Actor {
            user,
            agent,
            session,
        })),
    ]
}

fn authorize_request() -> impl Strategy<Value = pb::AuthorizeRequest> {
    (field_text(), actor(), field_text(), resource_oneof(), field_text(), context_json()).prop_map(
        |(request_id, actor, action, resource, justification, context_json)| pb::AuthorizeRequest {
            request_id,
            actor,
            action,
            resource,
            justification,
            context_json,
        },
    )
}

fn scope_text() -> impl Strategy<Value = String> {
    let kind = prop_oneof![
        8 => strings(&["file", "dir", "program", "domain", "url", "secret", "mcp", "tool", "command"]),
        1 => strings(&["", "File", "grant", "dir ", "x:y"]),
        1 => any_text(4),
    ];
    let id = prop_oneof![
        3 => any_path(),
        3 => any_url(),
        3 => url_host(),
        2 => strings(&["git", "git push origin main", "srv/tool", "/tool", "srv/", "a/b/c", "NAME", "a:b", ""]),
        1 => any_text(12),
    ];
    prop_oneof![9 => (kind, id).prop_map(|(kind, id)| format!("{kind}:{id}")), 1 => any_text(16)]
}

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

fn file(path: &str, cwd: &str) -> Result<Resource, InvalidInput> {
    normalize_resource(&ResourceInput::File { path: path.to_owned(), cwd: cwd.to_owned(), pattern: false })
}

fn http(method: &str, url: &str) -> Result<Resource, InvalidInput> {
    normalize_resource(&ResourceInput::Http { method: method.to_owned(), url: url.to_owned() })
}

/// The fields of a normalized file, or a test failure naming what came back instead.
fn file_fields(resource: Resource) -> Result<(String, String, String, Vec<String>), TestCaseError> {
    match resource {
        Resource::File { path, name, extension, dirs, .. } => Ok((path, name, extension, dirs)),
        other => Err(TestCaseError::fail(format!("not a file: {other:?}"))),
    }
}

/// Checks the shape of a clean absolute path: starts with `/`, no `//`, no `.` or `..` component, no trailing `/`.
fn assert_clean(path: &str) -> Result<(), TestCaseError> {
    prop_assert!(path.starts_with('/'), "`{}` is not absolute", path);
    prop_assert!(!path.contains("//"), "`{}` contains `//`", path);
    if path != "/" {
        prop_assert!(!path.ends_with('/'), "`{}` ends with `/`", path);
        for part in path.split('/').skip(1) {
            prop_assert!(part != "." && part != ".." && !part.is_empty(), "`{}` has component `{}`", path, part);
        }
    }
    Ok(())
}

/// Whether `dir` (a clean absolute directory) is a proper ancestor of the clean absolute `path`.
fn is_proper_ancestor(dir: &str, path: &str) -> bool {
    if dir == "/" { path != "/" } else { path.starts_with(&format!("{dir}/")) }
}

/// `a.b.c` -> `a.b.c`, `b.c`, `c`.
fn parent_domains(host: &str) -> Vec<String> {
    // Written differently from normalize's own chain: the suffixes of the
    // labels, longest first.
    let labels: Vec<&str> = host.split('.').collect();
    (0..labels.len()).map(|from| labels[from..].join(".")).collect()
}

fn is_ip_host(host: &str) -> bool {
    host.parse::<std::net::Ipv4Addr>().is_ok()
        || host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .is_some_and(|h| h.parse::<std::net::Ipv6Addr>().is_ok())
}

/// Decodes the well-formed `%XX` escapes of `text`, leaving everything else as it is.
fn percent_decode(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        match (bytes[at], bytes.get(at + 1).copied().and_then(hex), bytes.get(at + 2).copied().and_then(hex)) {
            (b'%', Some(high), Some(low)) => {
                out.push(u8::try_from(high * 16 + low).unwrap());
                at += 3;
            }
            (byte, _, _) => {
                out.push(byte);
                at += 1;
            }
        }
    }
    out
}

/// The field paths an `InvalidInput` may name for this request.
fn request_fields(request: &pb::AuthorizeRequest) -> BTreeSet<String> {
    use pb::authorize_request::Resource as R;
    let mut fields: BTreeSet<String> = [
        "request_id",
        "actor",
        "actor.user",
        "actor.agent",
        "actor.session",
        "action",
        "resource",
        "justification",
        "context_json",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    let (kind, names): (&str, &[&str]) = match &request.resource {
        None => ("", &[]),
        Some(R::File(_)) => ("file", &["path", "cwd"]),
        Some(R::Command(_)) => ("command", &["argv", "cwd"]),
        Some(R::Http(_)) => ("http", &["method", "url"]),
        Some(R::Secret(_)) => ("secret", &["name"]),
        Some(R::Tool(_)) => ("tool", &["server", "name", "arguments_json"]),
    };
    fields.extend(names.iter().map(|name| format!("resource.{kind}.{name}")));
    fields
}

// ---------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------

proptest! {
    #![proptest_config(config(512))]

    /// 1. File normalization never panics and blames only the path or the cwd.
    #[test]
    fn file_normalization_is_total(path in any_path(), cwd in any_cwd()) {
        match file(&path, &cwd) {
            Ok(resource) => {
                file_fields(resource)?;
            }
            Err(error) => prop_assert!(
                error.field == "resource.file.path" || error.field == "resource.file.cwd",
                "unexpected field {:?} for path {:?} cwd {:?}", error.field, path, cwd
            ),
        }
    }

    /// 2. Normalizing a normalized path again (absolute, no cwd) changes nothing.
    #[test]
    fn file_normalization_is_idempotent(path in any_path(), cwd in any_cwd()) {
        let Ok(first) = file(&path, &cwd) else { return Ok(()) };
        let first = file_fields(first)?;
        let second = file(&first.0, "");
        prop_assert!(second.is_ok(), "{:?} normalized to {:?}, which is refused: {:?}", path, first.0, second);
        let second = file_fields(second.unwrap())?;
        prop_assert_eq!(first, second);
    }

    /// 3a. No `..` climbs above `/`: the result is always a clean absolute path.
    #[test]
    fn file_paths_are_clean_and_absolute(path in any_path(), cwd in any_cwd()) {
        if let Ok(resource) = file(&path, &cwd) {
            let (path, name, _, dirs) = file_fields(resource)?;
            assert_clean(&path)?;
            prop_assert_eq!(&name, path.rsplit('/').next().unwrap());
            for dir in &dirs {
                assert_clean(dir)?;
            }
        }
    }

    /// 3b. A relative path of normal components (no `..`) inside a cwd under `/jail` stays under `/jail`.
    #[test]
    fn relative_paths_without_dotdot_stay_in_their_cwd(
        cwd_parts in prop::collection::vec(prop_oneof![3 => normal_component(), 1 => strings(&[".", ""])], 0..4),
        first in prop_oneof![3 => normal_component(), 1 => Just(".".to_owned())],
        rest in prop::collection::vec(prop_oneof![3 => normal_component(), 1 => strings(&[".", ""])], 0..5),
        trailing in any::<bool>(),
    ) {
        let cwd = format!("/jail/{}", cwd_parts.join("/"));
        let mut rel = first;
        for part in &rest {
            rel.push('/');
            rel.push_str(part);
        }
        if trailing {
            rel.push('/');
        }
        let resource = file(&rel, &cwd);
        prop_assert!(resource.is_ok(), "{:?} in {:?}: {:?}", rel, cwd, resource);
        let (path, _, _, dirs) = file_fields(resource.unwrap())?;
        prop_assert!(path == "/jail" || path.starts_with("/jail/"), "{:?} in {:?} escaped to {:?}", rel, cwd, path);
        prop_assert!(
            path == "/jail" || dirs.iter().any(|dir| dir == "/jail"),
            "{:?} not in Dir /jail: {:?}", path, dirs
        );
        // The cwd itself (cleaned) is an ancestor, or the path is the cwd.
        let clean_cwd = file(&cwd, "").map(file_fields).unwrap()?.0;
        prop_assert!(
            path == clean_cwd || is_proper_ancestor(&clean_cwd, &path),
            "{:?} not under {:?}", path, clean_cwd
        );
    }

    /// 4. `dirs` are exactly the proper ancestor directories, nearest first: `/a/b/...` is in `Dir::"/a/b"`
    /// exactly when it lies below `/a/b`, and a sibling such as `/a/bc/x` is not.
    #[test]
    fn dirs_agree_with_directory_membership(
        suffix in prop::collection::vec(path_component(), 0..6),
        sibling in "[^/\\p{Cc}]{1,4}",
        tail in prop::collection::vec(normal_component(), 0..3),
    ) {
        let generated = format!("/a/b/{}", suffix.join("/"));
        if let Ok(resource) = file(&generated, "") {
            let (path, _, _, dirs) = file_fields(resource)?;
            prop_assert_eq!(
                dirs.iter().any(|dir| dir == "/a/b"),
                path.starts_with("/a/b/"),
                "{:?} -> {:?} with dirs {:?}", generated, path, dirs
            );
            for dir in &dirs {
                prop_assert!(is_proper_ancestor(dir, &path), "{:?} is not above {:?}", dir, path);
            }
            // Every ancestor is listed, once, nearest first, ending with `/`.
            let mut want = Vec::new();
            let mut rest = path.as_str();
            while let Some((parent, _)) = rest.rsplit_once('/') {
                rest = parent;
                want.push(if parent.is_empty() { "/".to_owned() } else { parent.to_owned() });
            }
            if path == "/" {
                want.clear();
            }
            prop_assert_eq!(&dirs, &want, "{:?}", path);
        }

        // A sibling whose name merely starts with `b` is not inside `/a/b`.
        let sibling_path = format!("/a/b{sibling}/{}", tail.join("/"));
        if let Ok(resource) = file(&sibling_path, "") {
            let (path, _, _, dirs) = file_fields(resource)?;
            prop_assert!(
                !dirs.iter().any(|dir| dir == "/a/b"),
                "{:?} -> {:?} has /a/b in {:?}", sibling_path, path, dirs
            );
        }
    }

    /// 5. URL normalization never panics; a normalized URL normalizes to itself, with a lower-case host without
    /// trailing dot and the host's parent domains (or only the host, for an IP).
    #[test]
    fn url_normalization_is_total_and_idempotent(method in http_method(), url in any_url()) {
        let resource = match http(&method, &url) {
            Err(error) => {
                prop_assert!(
                    error.field == "resource.http.url" || error.field == "resource.http.method",
                    "unexpected field {:?} for {:?} {:?}", error.field, method, url
                );
                return Ok(());
            }
            Ok(resource) => resource,
        };
        let Resource::Url { url: normalized, scheme, host, port, path, method: upper, domains } = resource.clone()
        else {
            return Err(TestCaseError::fail(format!("not a URL: {resource:?}")));
        };
        prop_assert_eq!(&upper, &method.to_ascii_uppercase());
        prop_assert!(scheme == "http" || scheme == "https");
        prop_assert!(!host.chars().any(char::is_uppercase), "host {:?} is not lower-case", host);
        prop_assert!(!host.is_empty() && !host.ends_with('.'), "host {:?}", host);
        prop_assert!(!normalized.contains('#'), "fragment kept in {:?}", normalized);
        prop_assert!(port != 0 || normalized.contains(":0/"), "port {} for {:?}", port, normalized);
        if is_ip_host(&host) {
            prop_assert_eq!(&domains, &vec![host.clone()], "{:?} -> {:?}", url, normalized);
        } else {
            prop_assert_eq!(&domains, &parent_domains(&host), "{:?} -> {:?}", url, normalized);
        }

        let again = http(&method, &normalized);
        prop_assert!(again.is_ok(), "{:?} normalized to {:?}, which is refused: {:?}", url, normalized, again);
        let Resource::Url { url: url2, host: host2, port: port2, path: path2, domains: domains2, .. } = again.unwrap()
        else {
            return Err(TestCaseError::fail("not a URL the second time"));
        };
        prop_assert_eq!(
            (&normalized, &host, port, &path, &domains),
            (&url2, &host2, port2, &path2, &domains2),
            "{:?} is not stable", url
        );
    }

    /// 5b. Percent-normalization changes only the spelling of a path: decoding the well-formed escapes of the
    /// normalized path gives the same bytes as decoding those of the path sent.
    #[test]
    fn url_path_spelling_keeps_its_meaning(
        segments in prop::collection::vec(
            "([a-zA-Z0-9+._~-]|%[0-9a-fA-F+]{0,2}){0,5}".prop_filter("not a dot segment", |segment| {
                let decoded = percent_decode(segment);
                decoded != b"." && decoded != b".."
            }),
            1..4,
        ),
    ) {
        let path: String = segments.iter().map(|segment| format!("/{segment}")).collect();
        let resource = http("GET", &format!("http://h{path}"));
        let Ok(Resource::Url { path: normalized, .. }) = resource else {
            return Err(TestCaseError::fail(format!("{path:?}: {resource:?}")));
        };
        prop_assert_eq!(percent_decode(&normalized), percent_decode(&path), "{:?} -> {:?}", path, normalized);
    }

    /// 6. argv normalization never panics; the program is argv[0]'s basename, `args` the set of the rest and
    /// `argv` the entries joined by single spaces.
    #[test]
    fn argv_normalization(argv in any_argv(), cwd in any_cwd()) {
        match normalize_resource(&ResourceInput::Command { argv: argv.clone(), cwd: cwd.clone() }) {
            Err(error) => prop_assert!(
                error.field == "resource.command.argv" || error.field == "resource.command.cwd",
                "unexpected field {:?}", error.field
            ),
            Ok(Resource::Command { program, argv: joined, args, cwd: clean_cwd, .. }) => {
                prop_assert!(!argv.is_empty());
                prop_assert_eq!(&program, argv[0].rsplit('/').next().unwrap());
                prop_assert!(!program.is_empty() && !program.contains('/') && program != "." && program != "..");
                prop_assert_eq!(&args, &argv[1..].iter().cloned().collect::<BTreeSet<_>>());
                prop_assert_eq!(&joined, &argv.join(" "));
                if cwd.is_empty() {
                    prop_assert_eq!(clean_cwd, "");
                } else {
                    assert_clean(&clean_cwd)?;
                }
            }
            Ok(other) => return Err(TestCaseError::fail(format!("not a command: {other:?}"))),
        }
    }

    /// 8. `parse_scope` never panics, blames `resource_scope`, and its canonical form parses to the same scope.
    #[test]
    fn scopes_round_trip(text in scope_text()) {
        match parse_scope(&text) {
            Err(error) => prop_assert_eq!(error.field, "resource_scope"),
            Ok(scope) => {
                let canonical = scope.canonical();
                let again = parse_scope(&canonical);
                prop_assert_eq!(again, Ok(scope), "{:?} -> {:?}", text, canonical);
            }
        }
    }
}

proptest! {
    #![proptest_config(config(384))]

    /// 7. Any `AuthorizeRequest` goes through `request_input` and `normalize` without panicking, and every error
    /// names a non-empty field path of the request as sent.
    #[test]
    fn proto_requests_convert_and_normalize(request in authorize_request()) {
        let fields = request_fields(&request);
        let result = request_input(request.clone()).and_then(|input| normalize(&input));
        if let Err(error) = result {
            prop_assert!(!error.field.is_empty());
            prop_assert!(
                fields.contains(&error.field),
                "field {:?} is not a field of {:?} ({})", error.field, request, error.message
            );
        }
    }
}

proptest! {
    #![proptest_config(config(512))]

    /// 11. A command's entity id tells argvs apart: two different argvs never
    /// share an id, even when their elements joined by spaces read the same
    /// (a window approved for one is not a window for the other).
    #[test]
    fn command_ids_are_injective(
        a in prop::collection::vec(prop_oneof![strings(&["git", "push", "push origin", "origin main", "", "'", "a b", "x'y"]), "[a-z '\\\\]{0,4}"], 1..5),
        b in prop::collection::vec(prop_oneof![strings(&["git", "push", "push origin", "origin main", "", "'", "a b", "x'y"]), "[a-z '\\\\]{0,4}"], 1..5),
    ) {
        let quote = |argv: &[String]| warden_monitor::normalize::quote_argv(argv);
        prop_assert_eq!(a == b, quote(&a) == quote(&b), "{:?} and {:?} give {:?} and {:?}", a, b, quote(&a), quote(&b));
        // The same words split otherwise: the joined text is the same, the id is not.
        let split: Vec<String> = a.iter().flat_map(|arg| arg.split(' ').map(str::to_owned)).collect();
        prop_assert_eq!(split.join(" "), a.join(" "));
        prop_assert_eq!(split == a, quote(&split) == quote(&a), "{:?} and {:?} share {:?}", a, split, quote(&a));
    }
}
