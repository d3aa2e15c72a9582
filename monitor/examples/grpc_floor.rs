//! A stand-in `Authority` server for measuring floors: what the same load
//! generator gets from a tonic server that does less than `wardend`. It is
//! not a monitor; it answers only `Authorize`, and nothing it answers is
//! checked against the bundled policies beyond what each mode does.
//!
//! `cargo run --release -p warden-monitor --example grpc_floor -- MODE ADDR`
//!
//! MODE:
//! - `bare`: ALLOW for `fs.read` and `http.request`, DENY otherwise, without
//!   deciding anything (the floor of tonic, h2 and tokio under this client);
//! - `decide`: `normalize` and `decide` against the bundled policies, with
//!   the labels each session gained kept in memory (the decision of
//!   `wardend`, without its store, idempotency, grants or locks);
//! - `decide-fsync`: as `decide`, and a 512-byte record per decision appended
//!   to a preallocated file and group-committed with `fdatasync` by one
//!   thread before the answer (the store's durability, without its state).
//!
//! Used by `bench/floor.sh`, which runs each mode beside `wardend` and the
//! Cerbos PDP with `../shared/bench/peer`'s load generator.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::collections::{BTreeSet, HashMap};
use std::io::Write as _;
use std::os::unix::fs::FileExt as _;
use std::path::Path;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;
use tonic::{Request, Response, Status};
use warden_monitor::decision::{DecisionConfig, SessionFacts, decide};
use warden_monitor::normalize::{Actor, RequestInput, ResourceInput, normalize};
use warden_monitor::policy::PolicySnapshot;
use warden_proto::v1 as pb;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Bare,
    Decide,
    DecideFsync,
}

struct Floor {
    mode: Mode,
    snapshot: Arc<PolicySnapshot>,
    to_sync: Option<mpsc::Sender<(Vec<u8>, oneshot::Sender<()>)>>,
    labels: Mutex<HashMap<String, BTreeSet<String>>>,
}

fn input(message: &pb::AuthorizeRequest) -> Result<RequestInput, Status> {
    use pb::authorize_request::Resource;
    let actor = message.actor.clone().unwrap_or_default();
    let resource = match message.resource.clone() {
        Some(Resource::File(f)) => ResourceInput::File { path: f.path, cwd: f.cwd, pattern: f.pattern },
        Some(Resource::Command(c)) => ResourceInput::Command { argv: c.argv, cwd: c.cwd },
        Some(Resource::Http(h)) => ResourceInput::Http { method: h.method, url: h.url },
        _ => return Err(Status::invalid_argument("resource: the floor server knows files, commands and HTTP")),
    };
    Ok(RequestInput {
        request_id: message.request_id.clone(),
        actor: Actor { user: actor.user, agent: actor.agent, session: actor.session },
        action: message.action.clone(),
        resource,
        justification: message.justification.clone(),
        context_json: message.context_json.clone(),
    })
}

#[tonic::async_trait]
impl pb::authority_server::Authority for Floor {
    async fn authorize(&self, request: Request<pb::AuthorizeRequest>) -> Result<Response<pb::Decision>, Status> {
        let message = request.into_inner();
        let outcome = match self.mode {
            Mode::Bare => match message.action.as_str() {
                "fs.read" | "http.request" => pb::Outcome::Allow,
                _ => pb::Outcome::Deny,
            },
            Mode::Decide | Mode::DecideFsync => {
                let normalized = normalize(&input(&message)?).map_err(|e| Status::invalid_argument(e.to_string()))?;
                let session = message.actor.as_ref().map(|a| a.session.clone()).unwrap_or_default();
                let labels = self.labels.lock().unwrap().get(&session).cloned().unwrap_or_default();
                let facts = SessionFacts { harness: "floor".into(), labels, ..SessionFacts::default() };
                let evaluation = decide(
                    &self.snapshot,
                    &normalized,
                    &facts,
                    time::OffsetDateTime::now_utc(),
                    &DecisionConfig::default(),
                )
                .map_err(|e| Status::invalid_argument(e.to_string()))?;
                if !evaluation.labels().is_empty() {
                    self.labels.lock().unwrap().entry(session).or_default().extend(evaluation.labels().iter().cloned());
                }
                if let Some(to_sync) = &self.to_sync {
                    let mut record = vec![0u8; 512];
                    let text = format!("{:?} {message:?}", evaluation.outcome);
                    record[..text.len().min(512)].copy_from_slice(&text.as_bytes()[..text.len().min(512)]);
                    let (done, durable) = oneshot::channel();
                    to_sync.send((record, done)).map_err(|_| Status::unavailable("sync thread gone"))?;
                    durable.await.map_err(|_| Status::unavailable("sync failed"))?;
                }
                // The outcome's type is the monitor's own; its name is public.
                match format!("{:?}", evaluation.outcome).as_str() {
                    "Allow" => pb::Outcome::Allow,
                    "Pending" => pb::Outcome::Pending,
                    _ => pb::Outcome::Deny,
                }
            }
        };
        Ok(Response::new(pb::Decision { outcome: outcome as i32, ..pb::Decision::default() }))
    }

    async fn await_decision(&self, _: Request<pb::AwaitDecisionRequest>) -> Result<Response<pb::Decision>, Status> {
        Err(Status::unimplemented("the floor server answers Authorize only"))
    }

    async fn preview(&self, _: Request<pb::PreviewRequest>) -> Result<Response<pb::PreviewResponse>, Status> {
        Err(Status::unimplemented("the floor server answers Authorize only"))
    }
}

/// One thread: takes every record queued, writes them at the end of what
/// it wrote so far (the file is preallocated), one `fdatasync`, answers.
fn sync_thread(path: &Path, records: mpsc::Receiver<(Vec<u8>, oneshot::Sender<()>)>) {
    let size: u64 = 64 << 20;
    let mut file = std::fs::OpenOptions::new().create(true).truncate(true).read(true).write(true).open(path).unwrap();
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..(size >> 20) {
        file.write_all(&zeros).unwrap();
    }
    file.sync_all().unwrap();
    let mut at = 0u64;
    while let Ok(first) = records.recv() {
        let mut batch = vec![first];
        batch.extend(records.try_iter());
        let bytes: Vec<u8> = batch.iter().flat_map(|(r, _)| r.iter().copied()).collect();
        if at + bytes.len() as u64 > size {
            at = 0;
        }
        file.write_all_at(&bytes, at).unwrap();
        at += bytes.len() as u64;
        file.sync_data().unwrap();
        for (_, done) in batch {
            let _ = done.send(());
        }
    }
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let mode = match args.next().as_deref() {
        Some("bare") => Mode::Bare,
        Some("decide") => Mode::Decide,
        Some("decide-fsync") => Mode::DecideFsync,
        _ => panic!("usage: grpc_floor bare|decide|decide-fsync ADDR"),
    };
    let addr: std::net::SocketAddr = args.next().unwrap_or_else(|| "127.0.0.1:50152".into()).parse().unwrap();
    let policies = Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies");
    let snapshot = Arc::new(PolicySnapshot::load(&policies).unwrap());
    let dir = tempfile::tempdir().unwrap();
    let to_sync = (mode == Mode::DecideFsync).then(|| {
        let (tx, rx) = mpsc::channel();
        let path = dir.path().join("floor.log");
        std::thread::spawn(move || sync_thread(&path, rx));
        tx
    });
    let floor = Floor { mode, snapshot, to_sync, labels: Mutex::default() };
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    println!("listening on {}", listener.local_addr().unwrap());
    tonic::transport::Server::builder()
        .add_service(pb::authority_server::AuthorityServer::new(floor))
        .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)))
        .await
        .unwrap();
}
