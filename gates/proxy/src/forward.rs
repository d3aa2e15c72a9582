//! One request through the proxy, absolute-form or inside a tunnel: its
//! method in one spelling and its target checked, `http.request` decided,
//! then `secret.use` for each placeholder in its headers, the secrets put
//! in, the request sent upstream, and a secret the answer echoes redacted.

use std::sync::atomic::Ordering;

use http::header::{self, HeaderValue};
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use serde_json::json;
use warden_sdk::{ActionRequest, Actor};

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
const HTTP_CONTEXT: &str = "http.request: header_bytes";

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
    let path = parts.uri.path_and_query().map_or("/", http::uri::PathAndQuery::as_str);
    let url = target.url(path);
    if let Err(why) = request::unambiguous_target(&url) {
        return bad_request(format!("{why}: refused, nothing was sent"));
    }
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

    // Approvals this request uses: put back unless it is sent.
    let mut claims = shared.approvals.claims(actor);
    if let Err(refused) = decide(shared, actor, &method, &url, header_bytes, &mut claims).await {
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

    // Upstream, with the method and URL the monitor decided on.
    parts.uri = match url.parse() {
        Ok(uri) => uri,
        Err(e) => return bad_request(format!("the URL `{url}`: {e}")),
    };
    parts.version = http::Version::HTTP_11;
    claims.spend();
    let sent = tokio::time::timeout(shared.upstream_timeout, shared.upstream.request(Request::from_parts(parts, body)));
    match sent.await {
        Ok(Ok(response)) => {
            let (mut parts, body) = response.into_parts();
            strip_hop_by_hop(&mut parts.headers);
            // An upstream that echoes a header back must not hand the agent
            // the value it was never to hold.
            for value in parts.headers.values_mut() {
                if sent_values
                    .iter()
                    .any(|secret| value.as_bytes().windows(secret.len()).any(|w| w == secret.as_bytes()))
                {
                    *value = HeaderValue::from_static(REDACTED);
                }
            }
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

/// Asks `http.request` of `method` `url` with what the proxy knows besides
/// (`header_bytes`). A policy schema that does not declare that context
/// (another policy set than the bundled one) is asked without it, and told
/// once in the log.
async fn decide(
    shared: &Shared,
    actor: &Actor,
    method: &str,
    url: &str,
    header_bytes: u64,
    claims: &mut Claims<'_>,
) -> Result<(), Response<Body>> {
    let what = format!("{method} {url}");
    let context = json!({ "header_bytes": header_bytes }).to_string();
    let request = ActionRequest::http(method, url).context_json(context);
    match shared.approvals.ask(actor, request, &what, claims).await {
        Ok(()) => Ok(()),
        Err(Refused::Answer(refused)) => Err(refused),
        Err(Refused::Unfit(message)) => {
            if !shared.told_unfit.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    %message,
                    "the policy schema does not declare http.request's context ({HTTP_CONTEXT}): asking without it, so policies cannot see it"
                );
            }
            let request = ActionRequest::http(method, url);
            shared.approvals.ask(actor, request, &what, claims).await.map_err(|e| e.into_answer(HTTP_CONTEXT))
        }
    }
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
