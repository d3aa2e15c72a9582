//! Prometheus metrics: what the monitor counts as it works, and the text
//! format it serves on a listener of its own (`wardend --metrics ADDR`),
//! never on the gRPC port.
//!
//! Counted where it happens: decisions by outcome and action and their
//! latency (`service::authorize`), approvals resolved by state and how long
//! they waited (`service::approvals`), policy reloads by result, the
//! shadow set's outcomes beside the live ones (`service::shadow`),
//! rate-limited requests, and every gRPC request by method and status (a
//! tower layer in `grpc::router`), the audit log's commit times (the store's histogram).
//! Read at each scrape: approvals pending, the data folder's bytes, the
//! audit log's segments and bytes, records written but not yet durable.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct DecisionLabels {
    pub(crate) outcome: String,
    pub(crate) action: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct StateLabels {
    pub(crate) state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ReloadLabels {
    pub(crate) result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ShadowLabels {
    pub(crate) live: String,
    pub(crate) shadow: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct GrpcLabels {
    pub(crate) method: String,
    pub(crate) code: String,
}

/// The monitor's metrics.
pub struct Metrics {
    registry: Registry,
    pub(crate) decisions: Family<DecisionLabels, Counter>,
    pub(crate) decision_seconds: Histogram,
    pub(crate) resolved: Family<StateLabels, Counter>,
    pub(crate) approval_wait_seconds: Histogram,
    pub(crate) reloads: Family<ReloadLabels, Counter>,
    pub(crate) shadow: Family<ShadowLabels, Counter>,
    pub(crate) rate_limited: Counter,
    pub(crate) grpc: Family<GrpcLabels, Counter>,
    pending: Gauge,
    store_bytes: Gauge,
    durable_lag: Gauge,
    log_bytes: Gauge,
    log_segments: Gauge,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Metrics {
    /// `append_seconds`: the store's own histogram of commit times.
    pub(crate) fn new(append_seconds: Histogram) -> Self {
        let mut registry = Registry::with_prefix("warden");
        registry.register(
            "audit_append_seconds",
            "Time from handing a record to the audit log's writer to its being durable, in seconds",
            append_seconds,
        );
        let durable_lag = Gauge::default();
        registry.register("audit_durable_lag_records", "Audit records written but not yet synced", durable_lag.clone());
        let log_bytes = Gauge::default();
        registry.register("audit_log_bytes", "Bytes of the audit log's live segments", log_bytes.clone());
        let log_segments = Gauge::default();
        registry.register("audit_log_segments", "Live segments of the audit log", log_segments.clone());
        let decisions = Family::<DecisionLabels, Counter>::default();
        registry.register("decisions", "Authorize decisions, by outcome and action", decisions.clone());
        // 50 µs to ~1.6 s.
        let decision_seconds = Histogram::new(exponential_buckets(0.000_05, 2.0, 16));
        registry.register(
            "decision_seconds",
            "Time to a durable Authorize answer, in seconds",
            decision_seconds.clone(),
        );
        let resolved = Family::<StateLabels, Counter>::default();
        registry.register(
            "approvals_resolved",
            "Approvals ended, by state (approved, denied, expired)",
            resolved.clone(),
        );
        // 1 s to ~9 h.
        let approval_wait_seconds = Histogram::new(exponential_buckets(1.0, 2.0, 16));
        registry.register(
            "approval_wait_seconds",
            "How long approvals waited before they ended, in seconds",
            approval_wait_seconds.clone(),
        );
        let reloads = Family::<ReloadLabels, Counter>::default();
        registry.register(
            "policy_reloads",
            "Policy reloads, by result (loaded, unchanged, failed, invariant-broken)",
            reloads.clone(),
        );
        let shadow = Family::<ShadowLabels, Counter>::default();
        registry.register(
            "shadow_decisions",
            "Decisions the shadow policy set also decided, by the live and the shadow outcome",
            shadow.clone(),
        );
        let rate_limited = Counter::default();
        registry.register("rate_limited", "Requests refused by a rate limit", rate_limited.clone());
        let grpc = Family::<GrpcLabels, Counter>::default();
        registry.register("grpc_requests", "gRPC requests, by method and status code", grpc.clone());
        let pending = Gauge::default();
        registry.register("approvals_pending", "Approvals waiting for a person", pending.clone());
        let store_bytes = Gauge::default();
        registry.register(
            "data_bytes",
            "Bytes of the data folder on disk (audit log, sled, checkpoints)",
            store_bytes.clone(),
        );
        Self {
            registry,
            decisions,
            decision_seconds,
            resolved,
            approval_wait_seconds,
            reloads,
            shadow,
            rate_limited,
            grpc,
            pending,
            store_bytes,
            durable_lag,
            log_bytes,
            log_segments,
        }
    }

    /// One decision and how long it took.
    pub(crate) fn decided(&self, outcome: &str, action: &str, took: Duration) {
        self.decisions.get_or_create(&DecisionLabels { outcome: outcome.into(), action: action.into() }).inc();
        self.decision_seconds.observe(took.as_secs_f64());
    }

    /// One approval ended in `state`, after waiting `waited`.
    pub(crate) fn resolved(&self, state: &str, waited: Duration) {
        self.resolved.get_or_create(&StateLabels { state: state.into() }).inc();
        self.approval_wait_seconds.observe(waited.as_secs_f64());
    }

    /// One policy reload.
    pub(crate) fn reloaded(&self, result: &str) {
        self.reloads.get_or_create(&ReloadLabels { result: result.into() }).inc();
    }

    /// One decision the shadow set also decided.
    pub(crate) fn shadowed(&self, live: &str, shadow: &str) {
        self.shadow.get_or_create(&ShadowLabels { live: live.into(), shadow: shadow.into() }).inc();
    }

    /// The text format, with the gauges read now.
    pub(crate) fn render(&self, now: &Gauges) -> String {
        let set = |gauge: &Gauge, value: u64| gauge.set(i64::try_from(value).unwrap_or(i64::MAX));
        set(&self.pending, now.pending);
        set(&self.store_bytes, now.data_bytes);
        set(&self.durable_lag, now.durable_lag);
        set(&self.log_bytes, now.log_bytes);
        set(&self.log_segments, now.log_segments);
        let mut text = String::new();
        if prometheus_client::encoding::text::encode(&mut text, &self.registry).is_err() {
            text.clear();
        }
        text
    }
}

/// What the gauges say at a scrape.
#[derive(Debug, Default)]
pub(crate) struct Gauges {
    pub(crate) pending: u64,
    pub(crate) data_bytes: u64,
    pub(crate) durable_lag: u64,
    pub(crate) log_bytes: u64,
    pub(crate) log_segments: u64,
}

/// The bytes of the files under `dir`.
pub(crate) fn bytes_under(dir: &std::path::Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|entry| match entry.metadata() {
            Ok(meta) if meta.is_dir() => bytes_under(&entry.path()),
            Ok(meta) => meta.len(),
            Err(_) => 0,
        })
        .sum()
}

/// Counts every gRPC request by method and status (the `grpc-status`
/// header of the answer; a unary success carries it in the trailers, so an
/// answer without it counts as `0`). Only Warden's, health's and
/// reflection's methods are named; any other path counts as `other`.
#[derive(Clone)]
pub(crate) struct GrpcLayer(pub(crate) Arc<Metrics>);

impl<S> tower::Layer<S> for GrpcLayer {
    type Service = GrpcCounted<S>;

    fn layer(&self, inner: S) -> Self::Service {
        GrpcCounted { inner, metrics: Arc::clone(&self.0) }
    }
}

#[derive(Clone)]
pub(crate) struct GrpcCounted<S> {
    inner: S,
    metrics: Arc<Metrics>,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B, R> tower::Service<http::Request<B>> for GrpcCounted<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let path = request.uri().path();
        let known = ["/warden.v1.", "/grpc.health.v1.", "/grpc.reflection.v1.", "/grpc.reflection.v1alpha."]
            .iter()
            .any(|p| path.starts_with(p))
            && path.len() <= 128;
        let method = if known { path.to_owned() } else { "other".to_owned() };
        let metrics = Arc::clone(&self.metrics);
        let answer = self.inner.call(request);
        Box::pin(async move {
            let response = answer.await?;
            let code = response
                .headers()
                .get("grpc-status")
                .and_then(|v| v.to_str().ok())
                .filter(|v| v.len() <= 2 && v.bytes().all(|b| b.is_ascii_digit()))
                .unwrap_or("0")
                .to_owned();
            metrics.grpc.get_or_create(&GrpcLabels { method, code }).inc();
            Ok(response)
        })
    }
}

/// Serves `GET /metrics` on `listener` with what `render` gives, until
/// `stopped` resolves.
/// The metrics text, read when asked.
pub(crate) type Render = Arc<dyn Fn() -> std::pin::Pin<Box<dyn Future<Output = String> + Send>> + Send + Sync>;

pub(crate) async fn serve(listener: tokio::net::TcpListener, render: Render, stopped: impl Future<Output = ()> + Send) {
    use hyper::service::service_fn;
    let mut stopped = std::pin::pin!(stopped);
    loop {
        let stream = tokio::select! {
            () = &mut stopped => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "metrics: accept failed");
                    continue;
                }
            },
        };
        let render = Arc::clone(&render);
        tokio::spawn(async move {
            let service = service_fn(move |request: http::Request<hyper::body::Incoming>| {
                let render = Arc::clone(&render);
                async move {
                    if request.method() == http::Method::GET && request.uri().path() == "/metrics" {
                        http::Response::builder()
                            .header("content-type", "application/openmetrics-text; version=1.0.0; charset=utf-8")
                            .body(http_body_util::Full::new(bytes::Bytes::from(render().await)))
                    } else {
                        http::Response::builder()
                            .status(http::StatusCode::NOT_FOUND)
                            .body(http_body_util::Full::new(bytes::Bytes::from_static(b"metrics are at /metrics\n")))
                    }
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
        });
    }
}
