//! Several replicas of the monitor as one channel: a call that fails because a replica is down goes to the next.
//!
//! `WARDEN_ENDPOINT` (and `--endpoint`) may list several endpoints separated
//! by commas ([`EndpointList`]). [`Replicas`] is the tower service that the
//! generated gRPC clients of every Rust client of the workspace (the SDK's
//! [`crate::Client`], `wardenctl`) send their calls through. It sends a call to
//! the replica that answered last; when that replica is down (it cannot be
//! reached, the connection broke, it answered `UNAVAILABLE`), it sends the
//! same request (same bytes, so the same request id) to the next, each
//! replica at most once per call, and returns the last one's answer when
//! none is up. Which calls may be sent twice is [`Resend::for_method`]'s
//! rule. With one endpoint a call goes through untouched.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use http_body_util::BodyExt as _;
use prost::Message as _;
use tonic::body::Body;
use tonic::codegen::{Bytes, StdError, http};
use tonic::transport::{Channel, Endpoint};

use crate::Error;

/// The endpoints of the monitor's replicas, in the order they are tried: one,
/// or several separated by commas (`http://10.0.0.1:50051,http://10.0.0.2:50051`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointList(Vec<String>);

impl EndpointList {
    /// The list in `text`, each entry trimmed; an empty entry is refused,
    /// named by its place. Each entry is checked when it is made into a
    /// connection, as a single endpoint always was.
    pub fn parse(text: &str) -> Result<Self, Error> {
        let entries: Vec<String> = text.split(',').map(|entry| entry.trim().to_owned()).collect();
        if let [only] = entries.as_slice()
            && only.is_empty()
        {
            return Err(Error::Config("the endpoint is empty".into()));
        }
        if let Some(place) = entries.iter().position(String::is_empty) {
            return Err(Error::Config(format!(
                "endpoint list `{text}`: entry {} of {} is empty (separate endpoints with single commas)",
                place + 1,
                entries.len()
            )));
        }
        Ok(Self(entries))
    }

    /// The entries, in order.
    pub fn iter(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(String::as_str)
    }

    /// How many endpoints (at least one).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Never: a list holds at least one endpoint.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::str::FromStr for EndpointList {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self, Error> {
        Self::parse(text)
    }
}

/// When a call that failed on one replica may be sent to the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resend {
    /// After any failure of the replica (not reached, connection broken,
    /// `UNAVAILABLE`): reads, and changes that leave the store as the first
    /// would have (a lock, a revocation, a resolution: the store refuses a
    /// second resolution of the same approval, which then says it is no
    /// longer pending).
    AfterAnyFailure,
    /// `Authorize`: as [`Resend::AfterAnyFailure`] when the request carries
    /// a request id (the next replica answers the decision recorded for it
    /// again); without one, as [`Resend::IfNeverSent`].
    WithRequestId,
    /// Only when the replica could not be connected to, so that the call
    /// never left: a change that would be made twice (a grant, an enrolment
    /// link), and any method not known here.
    IfNeverSent,
}

impl Resend {
    /// The rule for a gRPC method, by its path (`/warden.v1.Admin/CreateGrant`).
    pub fn for_method(path: &str) -> Self {
        let (service, method) = path.trim_start_matches('/').split_once('/').unwrap_or(("", ""));
        match (service, method) {
            ("warden.v1.Authority", "Authorize") => Resend::WithRequestId,
            ("warden.v1.Authority", "AwaitDecision" | "Preview")
            | ("warden.v1.Approvals", "ListPending" | "WatchPending" | "GetApproval" | "Resolve")
            | (
                "warden.v1.Admin",
                "RevokeGrant" | "ListGrants" | "LockSession" | "UnlockSession" | "GetSession" | "ClearSessionLabels"
                | "PolicyStatus" | "GetPolicyFiles" | "ReloadPolicies" | "Explain" | "TailAudit" | "VerifyAudit"
                | "ListApprovers" | "ConfirmApprover" | "RevokeApprover",
            )
            | ("grpc.health.v1.Health", _)
            | ("grpc.reflection.v1.ServerReflection" | "grpc.reflection.v1alpha.ServerReflection", _) => {
                Resend::AfterAnyFailure
            }
            _ => Resend::IfNeverSent,
        }
    }

    fn allows(self, failure: Failure, has_request_id: impl FnOnce() -> bool) -> bool {
        match (self, failure) {
            (_, Failure::NeverSent) | (Resend::AfterAnyFailure, _) => true,
            (Resend::WithRequestId, _) => has_request_id(),
            (Resend::IfNeverSent, _) => false,
        }
    }
}

/// How a replica failed a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failure {
    /// It could not be connected to: the call never left.
    NeverSent,
    /// The connection failed with the call on it: it may have been served.
    Broken,
    /// It answered `UNAVAILABLE` (shutting down, its store down), or a
    /// proxy in front of it answered 502, 503 or 504.
    Unavailable,
}

fn failure_of(error: &tonic::transport::Error) -> Failure {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(error) = source {
        if error.is::<tonic::ConnectError>() {
            return Failure::NeverSent;
        }
        source = error.source();
    }
    Failure::Broken
}

fn failure_in(response: &http::Response<Body>) -> Option<Failure> {
    let unavailable = match response.headers().get("grpc-status") {
        // A trailers-only answer: the status is in the headers.
        Some(code) => code.as_bytes() == b"14",
        None => matches!(response.status().as_u16(), 502..=504),
    };
    unavailable.then_some(Failure::Unavailable)
}

/// Whether a buffered `AuthorizeRequest` (one uncompressed gRPC frame)
/// carries a request id.
fn has_request_id(frame: &[u8]) -> bool {
    match frame.split_first() {
        Some((0, rest)) => rest
            .get(4..)
            .and_then(|message| warden_proto::v1::AuthorizeRequest::decode(message).ok())
            .is_some_and(|request| !request.request_id.is_empty()),
        _ => false,
    }
}

struct Replica {
    endpoint: String,
    channel: Channel,
}

struct Shared {
    /// At least one.
    replicas: Vec<Replica>,
    /// The replica that answered last: where the next call starts.
    current: AtomicUsize,
}

/// The monitor's replicas as one tower service for the generated gRPC
/// clients (`AdminClient::with_interceptor(replicas, token)`), cheap to
/// clone (clones share which replica answered last).
#[derive(Clone)]
pub struct Replicas(Arc<Shared>);

impl std::fmt::Debug for Replicas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replicas").field("endpoints", &self.endpoints().collect::<Vec<_>>()).finish()
    }
}

impl Replicas {
    /// Channels made already, one per endpoint (named for errors), tried in
    /// this order from the first.
    pub fn new(replicas: impl IntoIterator<Item = (String, Channel)>) -> Result<Self, Error> {
        let replicas: Vec<Replica> =
            replicas.into_iter().map(|(endpoint, channel)| Replica { endpoint, channel }).collect();
        if replicas.is_empty() {
            return Err(Error::Config("no endpoint".into()));
        }
        Ok(Self(Arc::new(Shared { replicas, current: AtomicUsize::new(0) })))
    }

    /// One channel made already.
    pub fn single(endpoint: impl Into<String>, channel: Channel) -> Self {
        let replicas = vec![Replica { endpoint: endpoint.into(), channel }];
        Self(Arc::new(Shared { replicas, current: AtomicUsize::new(0) }))
    }

    /// Connects to the endpoints in order until one connects, which is
    /// where calls start; the others connect at their first call. When none
    /// connects, the last one's error.
    pub async fn connect(endpoints: impl IntoIterator<Item = (String, Endpoint)>) -> Result<Self, Error> {
        let mut replicas = Vec::new();
        let mut connected = None;
        let mut last_error = None;
        for (name, endpoint) in endpoints {
            let channel = if connected.is_some() {
                endpoint.connect_lazy()
            } else {
                match endpoint.connect().await {
                    Ok(channel) => {
                        connected = Some(replicas.len());
                        channel
                    }
                    Err(e) => {
                        last_error = Some(e);
                        endpoint.connect_lazy()
                    }
                }
            };
            replicas.push((name, channel));
        }
        match (connected, last_error) {
            (Some(at), _) => {
                let replicas = Self::new(replicas)?;
                replicas.0.current.store(at, Ordering::Relaxed);
                Ok(replicas)
            }
            (None, Some(error)) => Err(Error::Transport(error)),
            (None, None) => Err(Error::Config("no endpoint".into())),
        }
    }

    /// Channels that connect at their first call: a client made while
    /// every replica is down refuses (fails closed) until one is up.
    pub fn lazy(endpoints: impl IntoIterator<Item = (String, Endpoint)>) -> Result<Self, Error> {
        Self::new(endpoints.into_iter().map(|(name, endpoint)| (name, endpoint.connect_lazy())))
    }

    /// The endpoints, in the order given.
    pub fn endpoints(&self) -> impl Iterator<Item = &str> {
        self.0.replicas.iter().map(|replica| replica.endpoint.as_str())
    }

    /// The endpoint the next call is sent to first: the one that answered last.
    pub fn current(&self) -> &str {
        let replicas = &self.0.replicas;
        let at = self.0.current.load(Ordering::Relaxed);
        replicas.get(at).or(replicas.first()).map_or("", |replica| replica.endpoint.as_str())
    }
}

async fn send_to(
    channel: &Channel,
    request: http::Request<Body>,
) -> Result<http::Response<Body>, tonic::transport::Error> {
    use tower::{Service as _, ServiceExt as _};
    let mut channel = channel.clone();
    channel.ready().await?;
    channel.call(request).await
}

impl Shared {
    async fn send(&self, request: http::Request<Body>) -> Result<http::Response<Body>, StdError> {
        let count = self.replicas.len();
        if let [only] = self.replicas.as_slice() {
            // One endpoint: the call as it always went.
            return send_to(&only.channel, request).await.map_err(Into::into);
        }
        let rule = Resend::for_method(request.uri().path());
        // Buffered so that each replica gets the same bytes. Warden's calls
        // send one message each (none streams requests).
        let (parts, body) = request.into_parts();
        let body: Bytes = body.collect().await?.to_bytes();
        let start = self.current.load(Ordering::Relaxed);
        for tried in 0..count {
            let at = (start + tried) % count;
            let Some(replica) = self.replicas.get(at) else { continue };
            let attempt = http::Request::from_parts(parts.clone(), Body::new(http_body_util::Full::new(body.clone())));
            let outcome = send_to(&replica.channel, attempt).await;
            let failure = match &outcome {
                Ok(response) => failure_in(response),
                Err(error) => Some(failure_of(error)),
            };
            let last = tried + 1 == count;
            match failure {
                None => {
                    self.current.store(at, Ordering::Relaxed);
                }
                Some(failure) if !last && rule.allows(failure, || has_request_id(&body)) => continue,
                Some(_) => {}
            }
            let endpoint = replica.endpoint.clone();
            return match outcome {
                Ok(response) => Ok(response.map(|body| broken_is_unavailable(body, endpoint))),
                Err(error) => Err(error.into()),
            };
        }
        Err("no replica to send the call to".into())
    }
}

/// A response body whose connection breaks mid-stream (the server's own
/// statuses come in trailers, never as body errors) ends in `UNAVAILABLE`,
/// naming the replica: what a caller that follows a stream reconnects on.
fn broken_is_unavailable(body: Body, endpoint: String) -> Body {
    Body::new(body.map_err(move |status: tonic::Status| {
        tonic::Status::unavailable(format!("the connection to `{endpoint}` broke: {}", status.message()))
    }))
}

impl tower::Service<http::Request<Body>> for Replicas {
    type Response = http::Response<Body>;
    type Error = StdError;
    type Future = Pin<Box<dyn Future<Output = Result<http::Response<Body>, StdError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), StdError>> {
        // Each replica's channel is readied when a call goes to it.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let shared = Arc::clone(&self.0);
        Box::pin(async move { shared.send(request).await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_is_split_at_commas_and_trimmed() {
        let list = EndpointList::parse(" http://a:1 , unix:/run/w.sock,https://b:2 ").unwrap();
        assert_eq!(list.iter().collect::<Vec<_>>(), ["http://a:1", "unix:/run/w.sock", "https://b:2"]);
        assert_eq!(EndpointList::parse("http://a:1").unwrap().len(), 1);
    }

    #[test]
    fn an_empty_entry_is_refused_by_its_place() {
        for (text, place) in
            [("http://a:1,,http://b:2", "entry 2 of 3"), ("http://a:1, ", "entry 2 of 2"), (",x", "entry 1 of 2")]
        {
            let error = EndpointList::parse(text).unwrap_err().to_string();
            assert!(error.contains(place) && error.contains(&format!("`{text}`")), "{error}");
        }
        assert_eq!(EndpointList::parse("  ").unwrap_err().to_string(), "configuration: the endpoint is empty");
    }

    #[test]
    fn each_method_has_its_rule() {
        assert_eq!(Resend::for_method("/warden.v1.Authority/Authorize"), Resend::WithRequestId);
        for read in [
            "/warden.v1.Authority/AwaitDecision",
            "/warden.v1.Approvals/WatchPending",
            "/warden.v1.Approvals/Resolve",
            "/warden.v1.Admin/TailAudit",
            "/warden.v1.Admin/LockSession",
            "/grpc.health.v1.Health/Check",
        ] {
            assert_eq!(Resend::for_method(read), Resend::AfterAnyFailure, "{read}");
        }
        for once in ["/warden.v1.Admin/CreateGrant", "/warden.v1.Admin/EnrollApprover", "/other.Service/Call", ""] {
            assert_eq!(Resend::for_method(once), Resend::IfNeverSent, "{once}");
        }
    }

    #[test]
    fn a_call_that_may_have_been_served_is_resent_only_by_its_rule() {
        let (yes, no) = (|| true, || false);
        assert!(Resend::IfNeverSent.allows(Failure::NeverSent, no));
        assert!(!Resend::IfNeverSent.allows(Failure::Broken, yes));
        assert!(!Resend::IfNeverSent.allows(Failure::Unavailable, yes));
        assert!(Resend::WithRequestId.allows(Failure::Broken, yes));
        assert!(!Resend::WithRequestId.allows(Failure::Unavailable, no));
        assert!(Resend::WithRequestId.allows(Failure::NeverSent, no));
        assert!(Resend::AfterAnyFailure.allows(Failure::Unavailable, no));
    }

    #[test]
    fn the_request_id_is_read_from_the_frame() {
        let frame = |request: warden_proto::v1::AuthorizeRequest, flag: u8| {
            let message = request.encode_to_vec();
            let mut frame = vec![flag];
            frame.extend(u32::try_from(message.len()).unwrap().to_be_bytes());
            frame.extend(message);
            frame
        };
        let with = warden_proto::v1::AuthorizeRequest { request_id: "r-1".into(), ..Default::default() };
        assert!(has_request_id(&frame(with.clone(), 0)));
        assert!(!has_request_id(&frame(warden_proto::v1::AuthorizeRequest::default(), 0)));
        // Compressed: unknown, so not resent.
        assert!(!has_request_id(&frame(with, 1)));
        assert!(!has_request_id(&[]));
    }
}
