//! One request through the proxy, absolute-form or inside a tunnel: its
//! method in one spelling and its target checked, its host resolved once,
//! `http.request` decided with the addresses and their kinds, then
//! `secret.use` for each placeholder in its headers, the secrets put in,
//! the request sent upstream to the decided addresses only, and a secret
//! the answer echoes (in a header or its reason phrase) redacted.

use std::net::IpAddr;
use std::sync::atomic::Ordering;

use http::header::{self, HeaderValue};
use http::{Request, Response, StatusCode, Uri};
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use hyper::ext::ReasonPhrase;
use serde_json::json;
use warden_sdk::{ActionRequest, Actor};

use crate::addresses::Resolved;
use crate::answer::{Body, answer};
use crate::approvals::{Claims, Refused};
use crate::proxy::{Shared, Target};
use crate::request::{self, strip_hop_by_hop};
use crate::secrets;

/// A secret's value as the upstream's answer might carry it back, for
/// redaction.
const REDACTED: &str = "[redacted by warden-proxy]";

/// The context fields `http.request` is asked with (for the message when
/// the policy schema does not declare them).
const HTTP_CONTEXT: &str = "http.request: header_bytes, addresses, address_kinds";

/// The context fields `secret.use` is asked with.
const SECRET_CONTEXT: &str = "secret.use: destination, header, scheme, port";

fn bad_request(why: String) -> Response<Body> {
    answer(StatusCode::BAD_REQUEST, "ERROR", &[], &[why])
}

/// Decides the request and, if allowed, sends it upstream with its
/// secrets put in.
pub(crate) async fn forward(
    shared: &Shared,
    actor: &Actor,
    request: Request<Incoming>,
    target: &Target,
) -> Response<Body> {
    let (mut parts, body) = request.into_parts();
    // One spelling for the monitor and the upstream: `get` is GET.
    parts.method = match request::canonical_method(&parts.method) {
        Ok(method) => method,
        Err(e) => return bad_request(format!("{e}: refused, nothing was sent")),
    };
    let method = parts.method.as_str().to_owned();
    let path = parts.uri.path_and_query().map_or("/", http::uri::PathAndQuery::as_str).to_owned();
    let url = target.url(&path);
    let parsed = match request::unambiguous_target(&url) {
        Ok(parsed) => parsed,
        Err(why) => return bad_request(format!("{why}: refused, nothing was sent")),
    };
    let Some(host) = parsed.host() else {
        return bad_request(format!("`{url}` has no host: refused, nothing was sent"));
    };
    // A read carries no data out: the decision on a GET is about a read.
    if request::is_read(&parts.method) && !hyper::body::Body::is_end_stream(&body) {
        return bad_request(format!(
            "a {method} with a body is refused: {method} is decided as a read, and a body would carry data out"
        ));
    }
    strip_hop_by_hop(&mut parts.headers);
    // Upstream, `Host` is written from the decided URL.
    parts.headers.remove(header::HOST);
    let header_bytes = request::header_bytes(&parts.headers);
    // Where the host is, once: what is decided is where it connects.
    let resolved = match shared.resolver.resolve(&host).await {
        Ok(resolved) => resolved,
        Err(e) => {
            tracing::info!(%url, error = %e, "does not resolve");
            return answer(StatusCode::BAD_GATEWAY, "ERROR", &[], &[format!("{e}: nothing was sent")]);
        }
    };
    let upstream_uri = match upstream_uri(&parsed, &path) {
        Ok(uri) => uri,
        Err(e) => return bad_request(format!("the URL `{url}`: {e}")),
    };

    // Approvals this request uses: put back unless it is sent.
    let mut claims = shared.approvals.claims(actor);
    let http = Http { method: &method, url: &url, host: &host.to_string(), header_bytes, resolved: &resolved };
    if let Err(refused) = decide(shared, actor, &http, &mut claims).await {
        tracing::info!(%method, %url, "refused");
        return refused;
    }

    // The secrets its headers name, each allowed for this destination and
    // this header.
    let mut asked: Vec<(String, String)> = Vec::new();
    for (name, value) in &parts.headers {
        let Ok(text) = value.to_str() else {
            if value.as_bytes().windows(secrets::PREFIX.len()).any(|w| w == secrets::PREFIX.as_bytes()) {
                return bad_request("a secret placeholder in a header that is not text".into());
            }
            continue;
        };
        for secret in secrets::names(text) {
            let pair = (secret.to_owned(), name.as_str().to_owned());
            if !asked.contains(&pair) {
                asked.push(pair);
            }
        }
    }
    let scheme = if target.https { "https" } else { "http" };
    for (secret, header) in &asked {
        let context =
            json!({ "destination": target.host, "header": header, "scheme": scheme, "port": target.port }).to_string();
        let request = ActionRequest::use_secret(secret).context_json(context);
        let what = format!("the use of secret `{secret}` in `{header}`");
        if let Err(refused) = shared.approvals.ask(actor, request, &what, &mut claims).await {
            tracing::info!(%secret, host = %target.host, %header, "secret refused");
            return refused.into_answer(SECRET_CONTEXT);
        }
        if shared.secrets.get(secret).is_none() {
            return answer(
                StatusCode::FORBIDDEN,
                "ERROR",
                &[],
                &[format!("the proxy holds no secret named `{secret}`: nothing was sent")],
            );
        }
    }
    let mut sent_values: Vec<&str> = Vec::new();
    if !asked.is_empty() {
        for value in parts.headers.values_mut() {
            let Ok(text) = value.to_str() else { continue };
            if !text.contains(secrets::PREFIX) {
                continue;
            }
            for secret in secrets::names(text) {
                sent_values.extend(shared.secrets.get(secret));
            }
            let replaced = secrets::substitute(text, |name| shared.secrets.get(name));
            match replaced.and_then(|text| HeaderValue::from_str(&text).ok()) {
                Some(mut filled) => {
                    filled.set_sensitive(true);
                    *value = filled;
                }
                None => {
                    return answer(
                        StatusCode::FORBIDDEN,
                        "ERROR",
                        &[],
                        &["a secret could not be put into its header".into()],
                    );
                }
            }
        }
    }

    // Upstream, with the method and URL the monitor decided on, to the
    // addresses it decided on.
    parts.uri = upstream_uri;
    parts.version = http::Version::HTTP_11;
    claims.spend();
    let upstream = shared.upstreams.client(&resolved.addresses);
    let sent = tokio::time::timeout(shared.upstream_timeout, upstream.request(Request::from_parts(parts, body)));
    match sent.await {
        Ok(Ok(response)) => {
            let (mut parts, body) = response.into_parts();
            strip_hop_by_hop(&mut parts.headers);
            redact_echoes(&mut parts, &sent_values);
            Response::from_parts(parts, body.boxed())
        }
        Ok(Err(e)) => {
            tracing::info!(%url, error = %e, "upstream failed");
            answer(
                StatusCode::BAD_GATEWAY,
                "ERROR",
                &[],
                &[format!("upstream {}: {}", target.host, upstream_error(&e))],
            )
        }
        Err(_) => answer(
            StatusCode::GATEWAY_TIMEOUT,
            "ERROR",
            &[],
            &[format!("upstream {} did not answer within {:?}", target.host, shared.upstream_timeout)],
        ),
    }
}

/// An upstream that echoes a secret back (in a header, or in the status
/// line's reason phrase, which an HTTP/1.1 answer passes on as it came)
/// must not hand the agent the value it was never to hold.
fn redact_echoes(parts: &mut http::response::Parts, sent_values: &[&str]) {
    let holds_secret = |bytes: &[u8]| {
        sent_values
            .iter()
            .any(|secret| !secret.is_empty() && bytes.windows(secret.len()).any(|w| w == secret.as_bytes()))
    };
    for value in parts.headers.values_mut() {
        if holds_secret(value.as_bytes()) {
            *value = HeaderValue::from_static(REDACTED);
        }
    }
    if parts.extensions.get::<ReasonPhrase>().is_some_and(|reason| holds_secret(reason.as_bytes())) {
        match ReasonPhrase::try_from(REDACTED.as_bytes()) {
            Ok(redacted) => {
                parts.extensions.insert(redacted);
            }
            // The status code's own phrase, then.
            Err(_) => {
                parts.extensions.remove::<ReasonPhrase>();
            }
        }
    }
}

/// What `http.request` is asked about.
struct Http<'a> {
    method: &'a str,
    url: &'a str,
    /// The URL's host, as the addresses are of.
    host: &'a str,
    header_bytes: u64,
    resolved: &'a Resolved,
}

/// Asks `http.request` of the method and URL with what the proxy knows
/// besides: `header_bytes`, the `addresses` it would connect to and their
/// `address_kinds`. A policy schema that does not declare that context
/// (another policy set than the bundled one) is asked without it, and told
/// once in the log; as no policy of it can see where a name points, the
/// proxy then refuses any address that is not public itself.
async fn decide(
    shared: &Shared,
    actor: &Actor,
    http: &Http<'_>,
    claims: &mut Claims<'_>,
) -> Result<(), Response<Body>> {
    let what = format!("{} {}", http.method, http.url);
    let context = json!({
        "header_bytes": http.header_bytes,
        "addresses": http.resolved.texts(),
        "address_kinds": http.resolved.kind_names(),
    });
    let request = ActionRequest::http(http.method, http.url).context_json(context.to_string());
    match shared.approvals.ask(actor, request, &what, claims).await {
        Ok(()) => Ok(()),
        Err(Refused::Answer(refused)) => Err(refused),
        Err(Refused::Unfit(message)) => {
            if !shared.told_unfit.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    %message,
                    "the policy schema does not declare http.request's context ({HTTP_CONTEXT}): asking without it, so policies cannot see it, and refusing every address that is not public"
                );
            }
            if !http.resolved.all_public() {
                tracing::info!(host = %http.host, addresses = %http.resolved.describe(), "refused: not public, and the policies cannot see it");
                return Err(answer(
                    StatusCode::FORBIDDEN,
                    "DENY",
                    &[],
                    &[format!(
                        "`{}` resolves to {}, not a public address; the policy schema does not declare http.request's context.address_kinds, so no policy can allow that: refused by the proxy, nothing was sent",
                        http.host,
                        http.resolved.describe()
                    )],
                ));
            }
            let request = ActionRequest::http(http.method, http.url);
            shared.approvals.ask(actor, request, &what, claims).await.map_err(|e| e.into_answer(HTTP_CONTEXT))
        }
    }
}

/// The URI sent upstream: the decided URL's scheme, host (lower-case, an
/// address in its one written form: `2130706433` is `127.0.0.1`,
/// `[::ffff:127.0.0.1]` is `127.0.0.1`) and port, and the path and query
/// as the client sent them (checked to be the decided path).
fn upstream_uri(parsed: &url::Url, path_and_query: &str) -> Result<Uri, String> {
    let host = match parsed.host() {
        Some(url::Host::Domain(name)) => name.to_owned(),
        Some(url::Host::Ipv4(ip)) => ip.to_string(),
        Some(url::Host::Ipv6(ip)) => match ip.to_canonical() {
            IpAddr::V4(v4) => v4.to_string(),
            IpAddr::V6(v6) => format!("[{v6}]"),
        },
        None => return Err("no host".into()),
    };
    let authority = match parsed.port() {
        Some(port) => format!("{host}:{port}"),
        None => host,
    };
    format!("{}://{authority}{path_and_query}", parsed.scheme())
        .parse()
        .map_err(|e: http::uri::InvalidUri| e.to_string())
}

fn upstream_error(error: &hyper_util::client::legacy::Error) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
