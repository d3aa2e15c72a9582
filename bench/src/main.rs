//! `warden-bench`: a load generator for `wardend`.
//!
//! For each policy-set size it generates a synthetic policy folder (the
//! bundled schema, users in groups, permits, soft forbids `unless
//! { context.approved }` and plain forbids over many directories, programs
//! and domains), starts the real `wardend` on it, and drives `Authorize`
//! through `warden_sdk::Client` with C concurrent tasks for a fixed time.
//! Each run prints decisions/s, latency percentiles, the monitor's CPU time
//! per decision, the outcome mix and errors, next to the in-process decision
//! (`warden_monitor::decision::decide`, with and without the policy index)
//! on the same policies and requests.
//!
//! `cargo build --release -p warden-bench -p warden-monitor`
//! `./target/release/warden-bench --policies 10,1000 --concurrency 1,32 --duration 3`

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use clap::Parser;
use warden_monitor::decision::{DecisionConfig, SessionFacts, cedar_inputs, decide};
use warden_monitor::normalize::{Actor as InputActor, RequestInput, ResourceInput, normalize};
use warden_monitor::policy::PolicySnapshot;
use warden_sdk::{ActionRequest, Actor, Client, Outcome};

/// Users in the generated `entities.json`.
const USERS: usize = 200;
/// Groups the users are spread over.
const GROUPS: usize = 20;
/// Policies per slot: every slot (one directory, program and domain) has one
/// policy of each kind.
const KINDS: usize = 6;
/// Policies per generated `.cedar` file.
const POLICIES_PER_FILE: usize = 500;
/// Time spent on each in-process measurement.
const IN_PROCESS_BUDGET: Duration = Duration::from_millis(1000);
/// Sequential calls before the measured runs of each policy set.
const WARMUP_CALLS: u64 = 100;

/// Load generator for wardend: Authorize throughput and latency as the
/// policy set and the number of concurrent callers grow.
#[derive(Parser, Debug)]
#[command(name = "warden-bench", version)]
struct Args {
    /// Policy-set sizes to generate, comma-separated; one wardend is started
    /// per size.
    #[arg(long, value_name = "N[,N...]", value_delimiter = ',', default_values_t = vec![10, 100, 1000, 10000])]
    policies: Vec<usize>,

    /// Numbers of concurrent callers, comma-separated; one run per value and
    /// policy-set size.
    #[arg(long, value_name = "C[,C...]", value_delimiter = ',', default_values_t = vec![1, 8, 32, 128])]
    concurrency: Vec<usize>,

    /// Seconds each run lasts.
    #[arg(long, value_name = "SECS", default_value_t = 5.0)]
    duration: f64,

    /// Only write the policy folder of the first --policies size into DIR
    /// (schema, entities, generated policies) and exit: a second pack for
    /// `wardenctl policy diff` and `policy check`.
    #[arg(long, value_name = "DIR")]
    write_policies: Option<PathBuf>,

    /// Print one JSON object per run (one per line) instead of a table.
    #[arg(long)]
    json: bool,
    /// Grants to create (through the Admin service) before the runs of
    /// each policy set, spread over the users, on folders the request mix
    /// never touches: for the resident size with many grants
    #[arg(long, value_name = "N", default_value_t = 0)]
    grants: usize,
    /// The started monitor's durability: `fsync` (an answer survives power
    /// loss) or `flush` (survives a killed process; no fdatasync)
    #[arg(long, value_name = "MODE", default_value = "fsync", value_parser = ["fsync", "flush"])]
    durability: String,
    /// How the load reaches the started monitor: `tcp` (loopback) or `unix`
    /// (its Unix socket, `wardend --socket`)
    #[arg(long, value_name = "HOW", default_value = "tcp", value_parser = ["tcp", "unix"])]
    transport: String,

    /// Drive an already running wardend at this URL (e.g.
    /// http://127.0.0.1:50051) instead of starting one: no policy generation,
    /// no in-process comparison and no CPU figure. The request mix is the one
    /// for the first --policies value, so outcomes only match when that
    /// monitor serves a policy folder generated the same way.
    #[arg(long, value_name = "URL", requires = "token_file")]
    target: Option<String>,

    /// File holding the harness token for --target.
    #[arg(long, value_name = "FILE", requires = "target")]
    token_file: Option<PathBuf>,

    /// Give each request a request id and ask it a second time under that
    /// id at once (a harness retrying): the re-asks' latency is reported
    /// apart (`re_ask_*`), the table and counts are the first asks'.
    #[arg(long)]
    re_ask: bool,
}

// ---------------------------------------------------------------------------
// Policy set and request mix

/// The user and group that own slot `k`.
fn slot_owner(k: usize) -> (usize, usize) {
    let user = (k * 7) % USERS;
    (user, user % GROUPS)
}

/// `count` policies; policy `n` is of kind `n % KINDS` in slot `n / KINDS`.
fn policy(n: usize) -> String {
    let k = n / KINDS;
    let (user, group) = slot_owner(k);
    match n % KINDS {
        0 => format!(
            "@id(\"p{n}\") @reason(\"user{user} works in /data/{k}\")\n\
             permit (principal in User::\"user{user}\", action in [Action::\"fs.read\", Action::\"fs.write\"], resource in Dir::\"/data/{k}\")\n\
             when {{ resource.extension != \"exe\" && principal.agent == \"claude-code\" }};\n"
        ),
        1 => format!(
            "@id(\"p{n}\") @reason(\"secrets of /data/{k} are never read by agents\")\n\
             forbid (principal, action in [Action::\"fs.read\", Action::\"fs.write\"], resource in Dir::\"/data/{k}/secret\");\n"
        ),
        2 => format!(
            "@id(\"p{n}\") @reason(\"team{group} runs tool{k}\")\n\
             permit (principal in Group::\"team{group}\", action == Action::\"exec\", resource in Program::\"tool{k}\")\n\
             when {{ principal.agent == \"claude-code\" && !resource.args.contains(\"--no-audit\") }};\n"
        ),
        3 => format!(
            "@id(\"p{n}\") @reason(\"tool{k} --force needs a person\")\n\
             forbid (principal, action == Action::\"exec\", resource in Program::\"tool{k}\")\n\
             when {{ resource.args.contains(\"--force\") }} unless {{ context.approved }};\n"
        ),
        4 => format!(
            "@id(\"p{n}\") @reason(\"team{group} talks to host{k}.example\")\n\
             permit (principal in Group::\"team{group}\", action == Action::\"http.request\", resource in Domain::\"host{k}.example\")\n\
             when {{ resource.scheme == \"https\" && (resource.method == \"GET\" || resource.method == \"POST\") }};\n"
        ),
        _ => format!(
            "@id(\"p{n}\") @reason(\"sending data to host{k}.example needs a person\")\n\
             forbid (principal, action == Action::\"http.request\", resource in Domain::\"host{k}.example\")\n\
             when {{ resource.method == \"POST\" && !principal.labels.contains(\"trusted\") }} unless {{ context.approved }};\n"
        ),
    }
}

fn entities() -> serde_json::Value {
    let mut entities = Vec::new();
    for g in 0..GROUPS {
        entities.push(
            serde_json::json!({ "uid": { "type": "Group", "id": format!("team{g}") }, "attrs": {}, "parents": [] }),
        );
    }
    for u in 0..USERS {
        entities.push(serde_json::json!({
            "uid": { "type": "User", "id": format!("user{u}") },
            "attrs": { "workspace": { "__entity": { "type": "Dir", "id": format!("/home/user{u}") } } },
            "parents": [{ "type": "Group", "id": format!("team{}", u % GROUPS) }]
        }));
    }
    for agent in ["claude-code", "codex"] {
        entities.push(serde_json::json!({ "uid": { "type": "Agent", "id": agent }, "attrs": {}, "parents": [] }));
    }
    serde_json::Value::Array(entities)
}

/// Writes the schema, entities and `count` policies into `dir`.
fn write_policy_folder(dir: &Path, count: usize) -> Result<()> {
    let schema = Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies/schema.cedarschema");
    std::fs::copy(&schema, dir.join("schema.cedarschema")).with_context(|| format!("copy {}", schema.display()))?;
    std::fs::write(dir.join("entities.json"), entities().to_string())?;
    let mut file = 0;
    let mut start = 0;
    while start < count {
        let end = (start + POLICIES_PER_FILE).min(count);
        let text: String = (start..end).map(policy).collect();
        std::fs::write(dir.join(format!("generated-{file:03}.cedar")), text)?;
        file += 1;
        start = end;
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Allow,
    Deny,
    Pending,
}

enum Resource {
    Read(String),
    Write(String),
    Exec(Vec<String>),
    Http(&'static str, String),
}

/// One request of the mix: 4 in 8 ALLOW, 2 DENY, 2 PENDING.
struct Spec {
    user: String,
    session: String,
    resource: Resource,
    expect: Expect,
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Slots whose six policies all exist (at least one).
fn full_slots(policies: usize) -> usize {
    (policies / KINDS).max(1)
}

/// Request `i` of caller `task`, over `slots` slots.
fn spec(slots: usize, task: usize, i: u64) -> Spec {
    let k = (splitmix((i << 16) ^ task as u64) % slots as u64) as usize;
    let (owner, _) = slot_owner(k);
    let user = format!("user{owner}");
    let session = format!("b{task}-{user}");
    let (user, session, resource, expect) = match i % 8 {
        0 => (user, session, Resource::Read(format!("/data/{k}/src/f{i}.rs")), Expect::Allow),
        1 => (user, session, Resource::Exec(vec![format!("/usr/bin/tool{k}"), "build".into()]), Expect::Allow),
        2 => (user, session, Resource::Http("GET", format!("https://host{k}.example/api/{i}")), Expect::Allow),
        3 => (user, session, Resource::Read(format!("/data/{k}/secret/key{i}")), Expect::Deny),
        4 => {
            let other = format!("user{}", (owner + 1) % USERS);
            let session = format!("b{task}-{other}");
            (other, session, Resource::Write(format!("/data/{k}/f{i}.txt")), Expect::Deny)
        }
        // PENDING requests get a session of their own: a session may have
        // only so many approvals waiting (max_pending_per_session).
        5 => (
            user,
            format!("p{task}-{i}"),
            Resource::Exec(vec![format!("tool{k}"), "--force".into(), format!("t{i}")]),
            Expect::Pending,
        ),
        6 => (
            user,
            format!("p{task}-{i}"),
            Resource::Http("POST", format!("https://host{k}.example/up/{i}")),
            Expect::Pending,
        ),
        _ => (user, session, Resource::Write(format!("/data/{k}/out/f{i}.txt")), Expect::Allow),
    };
    Spec { user, session, resource, expect }
}

impl Spec {
    fn sdk(&self) -> (Actor, ActionRequest) {
        let actor = Actor::new(self.user.clone(), "claude-code", self.session.clone());
        let request = match &self.resource {
            Resource::Read(path) => ActionRequest::read_file(path.clone()),
            Resource::Write(path) => ActionRequest::write_file(path.clone()),
            Resource::Exec(argv) => ActionRequest::exec(argv.clone()),
            Resource::Http(method, url) => ActionRequest::http(*method, url.clone()),
        };
        (actor, request)
    }

    fn input(&self) -> RequestInput {
        let (action, resource) = match &self.resource {
            Resource::Read(path) => {
                ("fs.read", ResourceInput::File { path: path.clone(), cwd: String::new(), pattern: false })
            }
            Resource::Write(path) => {
                ("fs.write", ResourceInput::File { path: path.clone(), cwd: String::new(), pattern: false })
            }
            Resource::Exec(argv) => ("exec", ResourceInput::Command { argv: argv.clone(), cwd: String::new() }),
            Resource::Http(method, url) => {
                ("http.request", ResourceInput::Http { method: (*method).to_owned(), url: url.clone() })
            }
        };
        RequestInput {
            request_id: String::new(),
            actor: InputActor { user: self.user.clone(), agent: "claude-code".into(), session: self.session.clone() },
            action: action.into(),
            resource,
            justification: String::new(),
            context_json: String::new(),
        }
    }
}

// ---------------------------------------------------------------------------
// Statistics

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let at = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted.get(at.min(sorted.len() - 1)).copied().unwrap_or_default()
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// `594µs`, `3.4ms`.
fn human(us: f64) -> String {
    if us >= 10_000.0 {
        format!("{:.1}ms", us / 1000.0)
    } else if us >= 1000.0 {
        format!("{:.2}ms", us / 1000.0)
    } else {
        format!("{us:.0}µs")
    }
}

#[derive(Default)]
struct Tally {
    latencies: Vec<Duration>,
    /// With --re-ask: the second asks under the same request id.
    re_asks: Vec<Duration>,
    allow: u64,
    deny: u64,
    pending: u64,
    unexpected: u64,
    errors: u64,
    first_error: Option<String>,
}

impl Tally {
    fn merge(&mut self, other: Tally) {
        self.latencies.extend(other.latencies);
        self.re_asks.extend(other.re_asks);
        self.allow += other.allow;
        self.deny += other.deny;
        self.pending += other.pending;
        self.unexpected += other.unexpected;
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
    }
}

/// The in-process decision on the same policies and requests.
#[derive(Clone, Copy, Default)]
struct InProcess {
    indexed_p50: Duration,
    unindexed_p50: Duration,
    /// Bare `Authorizer::is_authorized` over the whole policy set, its
    /// request and entities built beforehand: the floor a service cannot
    /// beat without indexing.
    cedar_p50: Duration,
    /// Decisions that differ from the mix's expectation.
    unexpected: u64,
}

// ---------------------------------------------------------------------------
// wardend as a child process

struct Wardend {
    child: Child,
    pid: u32,
    /// TCP, for the admin calls.
    endpoint: String,
    /// Where the load goes: the TCP endpoint or `unix:PATH`.
    load_endpoint: String,
    token: String,
    data: tempfile::TempDir,
}

fn wardend_binary() -> Result<PathBuf> {
    let path = std::env::current_exe()?.with_file_name("wardend");
    if !path.exists() {
        bail!(
            "{} not found: run `cargo build --release -p warden-monitor` first (wardend must sit next to warden-bench)",
            path.display()
        );
    }
    Ok(path)
}

fn start_wardend(binary: &Path, policies: &Path, durability: &str, unix: bool) -> Result<Wardend> {
    let data = tempfile::tempdir()?;
    let stderr_path = data.path().join("wardend.stderr");
    let stderr = std::fs::File::create(&stderr_path)?;
    let config = data.path().join("wardend.toml");
    std::fs::write(&config, format!("durability = \"{durability}\"\n"))?;
    let socket = data.path().join("wardend.sock");
    let mut command = Command::new(binary);
    if unix {
        command.arg("--socket").arg(&socket);
    }
    let mut child = command
        .args(["--listen", "127.0.0.1:0", "--policies"])
        .arg(policies)
        .arg("--data")
        .arg(data.path())
        .arg("--config")
        .arg(&config)
        .stdout(Stdio::piped())
        .stderr(Stdio::from(stderr))
        .spawn()
        .with_context(|| format!("start {}", binary.display()))?;
    let pid = child.id();
    let stdout = child.stdout.take().ok_or_else(|| anyhow!("no stdout from wardend"))?;
    let mut reader = BufReader::new(stdout);
    let mut endpoint = None;
    let mut line = String::new();
    while reader.read_line(&mut line)? > 0 {
        if let Some(rest) = line.trim_end().strip_prefix("wardend listening on ")
            && let Some(addr) = rest.split_whitespace().next()
        {
            endpoint = Some(format!("http://{addr}"));
            break;
        }
        line.clear();
    }
    let Some(endpoint) = endpoint else {
        let _ = child.kill();
        let _ = child.wait();
        let log = std::fs::read_to_string(&stderr_path).unwrap_or_default();
        bail!("wardend exited before listening; its stderr:\n{log}");
    };
    // Keep the pipe drained so that wardend never blocks on stdout.
    std::thread::spawn(move || std::io::copy(&mut reader, &mut std::io::sink()));
    let token = std::fs::read_to_string(data.path().join("harness.token"))
        .context("read harness.token from wardend's data folder")?
        .trim()
        .to_owned();
    let load_endpoint = if unix { format!("unix:{}", socket.display()) } else { endpoint.clone() };
    Ok(Wardend { child, pid, endpoint, load_endpoint, token, data })
}

/// SIGTERM, then wait (SIGKILL after 10 s).
fn stop_wardend(mut wardend: Wardend) -> Result<()> {
    let _ = Command::new("kill").args(["-TERM", &wardend.pid.to_string()]).status();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if wardend.child.try_wait()?.is_some() {
            return Ok(());
        }
        if Instant::now() > deadline {
            eprintln!("wardend (pid {}) did not stop after SIGTERM; killing it", wardend.pid);
            wardend.child.kill()?;
            wardend.child.wait()?;
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// VmRSS and VmHWM of `pid`, in MiB.
fn resident_mib(pid: u32) -> Option<(f64, f64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<f64> {
        let line = status.lines().find(|l| l.starts_with(name))?;
        let kib: f64 = line.get(name.len()..)?.split_whitespace().next()?.parse().ok()?;
        Some(kib / 1024.0)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// Creates `count` grants through the Admin service: user `k % USERS`,
/// `fs.write` under `/granted/k`, where the request mix never goes.
async fn create_grants(wardend: &Wardend, count: usize) -> Result<()> {
    use warden_proto::v1 as pb;
    if count == 0 {
        return Ok(());
    }
    let token = std::fs::read_to_string(wardend.data.path().join("admin.token"))
        .context("read admin.token from wardend's data folder")?;
    let channel = tonic::transport::Channel::from_shared(wardend.endpoint.clone())?.connect().await?;
    let admin = pb::admin_client::AdminClient::with_interceptor(channel, warden_sdk::BearerToken::new(token.trim())?);
    let mut tasks = Vec::new();
    for worker in 0..8 {
        let mut admin = admin.clone();
        tasks.push(tokio::spawn(async move {
            for k in (worker..count).step_by(8) {
                admin
                    .create_grant(pb::CreateGrantRequest {
                        user: format!("user{}", k % USERS),
                        actions: vec!["fs.write".into()],
                        resource_scope: format!("dir:/granted/{k}"),
                        ttl_seconds: 6 * 3600,
                        reason: "warden-bench".into(),
                        ..Default::default()
                    })
                    .await
                    .with_context(|| format!("create grant {k}"))?;
            }
            anyhow::Ok(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(())
}

/// utime + stime of `pid`, in clock ticks.
fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_comm = stat.get(stat.rfind(')')? + 1..)?;
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    // Fields 14 and 15 of stat(5); `fields` starts at field 3 (state).
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

fn ticks_per_second() -> u64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .filter(|t| *t > 0)
        .unwrap_or(100)
}

// ---------------------------------------------------------------------------
// Measurements

fn outcome_matches(outcome: Outcome, expect: Expect) -> bool {
    matches!(
        (outcome, expect),
        (Outcome::Allow, Expect::Allow) | (Outcome::Deny, Expect::Deny) | (Outcome::Pending, Expect::Pending)
    )
}

/// `concurrency` callers, each calling `Authorize` back to back until
/// `duration` is over; with `re_ask`, each request twice under one id.
async fn drive(
    client: &Client,
    slots: usize,
    concurrency: usize,
    duration: Duration,
    round: u64,
    re_ask: bool,
) -> Result<Tally> {
    let deadline = Instant::now() + duration;
    let mut tasks = Vec::with_capacity(concurrency);
    for task in 0..concurrency {
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let mut tally = Tally::default();
            // Distinct request numbers per round, so sessions and paths are fresh.
            let mut i = round << 32;
            while Instant::now() < deadline {
                let spec = spec(slots, task, i);
                i += 1;
                let (actor, mut request) = spec.sdk();
                if re_ask {
                    request = request.request_id(format!("bench-{round}-{task}-{i}"));
                }
                let start = Instant::now();
                let answer = client.authorize(&actor, request.clone()).await;
                tally.latencies.push(start.elapsed());
                if re_ask && let Ok(first) = &answer {
                    let start = Instant::now();
                    let again = client.authorize(&actor, request).await;
                    tally.re_asks.push(start.elapsed());
                    if !again.is_ok_and(|again| again.outcome == first.outcome) {
                        tally.unexpected += 1;
                    }
                }
                match answer {
                    Ok(decision) => {
                        match decision.outcome {
                            Outcome::Allow => tally.allow += 1,
                            Outcome::Deny => tally.deny += 1,
                            Outcome::Pending => tally.pending += 1,
                        }
                        if !outcome_matches(decision.outcome, spec.expect) {
                            tally.unexpected += 1;
                        }
                    }
                    Err(error) => {
                        tally.errors += 1;
                        if tally.first_error.is_none() {
                            tally.first_error = Some(error.to_string());
                        }
                    }
                }
            }
            tally
        }));
    }
    let mut total = Tally::default();
    for task in tasks {
        total.merge(task.await?);
    }
    total.latencies.sort_unstable();
    total.re_asks.sort_unstable();
    Ok(total)
}

/// p50 of normalize + decide over the mix, for at most `IN_PROCESS_BUDGET`.
fn in_process_p50(snapshot: &PolicySnapshot, slots: usize, config: &DecisionConfig) -> Result<(Duration, u64)> {
    let facts = SessionFacts { harness: "bench".into(), ..SessionFacts::default() };
    let specs: Vec<Spec> = (0..512).map(|i| spec(slots, 0, i)).collect();
    let inputs: Vec<RequestInput> = specs.iter().map(Spec::input).collect();
    let mut samples = Vec::new();
    let mut unexpected = 0;
    let began = Instant::now();
    'outer: loop {
        for (spec, input) in specs.iter().zip(&inputs) {
            let start = Instant::now();
            let request = normalize(input).map_err(|e| anyhow!("normalize: {e:?}"))?;
            let evaluation = decide(snapshot, &request, &facts, time::OffsetDateTime::now_utc(), config)
                .map_err(|e| anyhow!("decide: {e:?}"))?;
            samples.push(start.elapsed());
            let outcome = match evaluation.outcome {
                warden_monitor::decision::Outcome::Allow => Outcome::Allow,
                warden_monitor::decision::Outcome::Deny => Outcome::Deny,
                warden_monitor::decision::Outcome::Pending => Outcome::Pending,
            };
            if !outcome_matches(outcome, spec.expect) && samples.len() <= specs.len() {
                unexpected += 1;
            }
            if began.elapsed() > IN_PROCESS_BUDGET || samples.len() >= 20_000 {
                break 'outer;
            }
        }
    }
    samples.sort_unstable();
    Ok((percentile(&samples, 0.5), unexpected))
}

/// p50 of bare Cedar `is_authorized` over the whole set, on the mix's
/// requests with their Cedar inputs built beforehand (as `decide` builds
/// them).
fn cedar_p50(snapshot: &PolicySnapshot, slots: usize) -> Result<Duration> {
    let facts = SessionFacts { harness: "bench".into(), ..SessionFacts::default() };
    let now = time::OffsetDateTime::now_utc();
    let mut inputs = Vec::new();
    for i in 0..256 {
        let request = normalize(&spec(slots, 0, i).input()).map_err(|e| anyhow!("normalize: {e:?}"))?;
        inputs.push(cedar_inputs(snapshot, &request, &facts, now).map_err(|e| anyhow!("cedar inputs: {e}"))?);
    }
    let authorizer = cedar_policy::Authorizer::new();
    let mut samples = Vec::new();
    let began = Instant::now();
    'outer: loop {
        for (request, entities, policies) in &inputs {
            let start = Instant::now();
            std::hint::black_box(authorizer.is_authorized(request, policies, entities));
            samples.push(start.elapsed());
            if began.elapsed() > IN_PROCESS_BUDGET || samples.len() >= 20_000 {
                break 'outer;
            }
        }
    }
    samples.sort_unstable();
    Ok(percentile(&samples, 0.5))
}

fn in_process(dir: &Path, slots: usize) -> Result<InProcess> {
    let snapshot = PolicySnapshot::load(dir).map_err(|e| anyhow!("load the generated policies in-process: {e:?}"))?;
    let (indexed_p50, unexpected) = in_process_p50(&snapshot, slots, &DecisionConfig::default())?;
    let (unindexed_p50, _) =
        in_process_p50(&snapshot, slots, &DecisionConfig { use_index: false, ..DecisionConfig::default() })?;
    let cedar_p50 = cedar_p50(&snapshot, slots)?;
    Ok(InProcess { indexed_p50, unindexed_p50, cedar_p50, unexpected })
}

// ---------------------------------------------------------------------------
// Reporting

struct Row {
    policies: Option<usize>,
    concurrency: usize,
    seconds: f64,
    tally: Tally,
    cpu_us_per_decision: Option<f64>,
    /// The monitor's resident size after the run (VmRSS), and its peak
    /// (VmHWM), in MiB.
    rss_mib: Option<(f64, f64)>,
    in_process: Option<InProcess>,
}

impl Row {
    fn json(&self) -> serde_json::Value {
        let l = &self.tally.latencies;
        let p50 = micros(percentile(l, 0.5));
        let decisions = l.len() as f64;
        serde_json::json!({
            "policies": self.policies,
            "concurrency": self.concurrency,
            "seconds": self.seconds,
            "decisions": l.len(),
            "decisions_per_s": decisions / self.seconds,
            "p50_us": p50,
            "p90_us": micros(percentile(l, 0.9)),
            "p99_us": micros(percentile(l, 0.99)),
            "max_us": micros(l.last().copied().unwrap_or_default()),
            "re_asks": self.tally.re_asks.len(),
            "re_ask_p50_us": micros(percentile(&self.tally.re_asks, 0.5)),
            "re_ask_p99_us": micros(percentile(&self.tally.re_asks, 0.99)),
            "cpu_us_per_decision": self.cpu_us_per_decision,
            "rss_mib": self.rss_mib.map(|(now, _)| now),
            "peak_rss_mib": self.rss_mib.map(|(_, peak)| peak),
            "allow": self.tally.allow,
            "deny": self.tally.deny,
            "pending": self.tally.pending,
            "unexpected_outcomes": self.tally.unexpected,
            "errors": self.tally.errors,
            "first_error": self.tally.first_error,
            "in_process_indexed_p50_us": self.in_process.map(|p| micros(p.indexed_p50)),
            "in_process_unindexed_p50_us": self.in_process.map(|p| micros(p.unindexed_p50)),
            "grpc_p50_over_indexed_p50": self.in_process.map(|p| p50 / micros(p.indexed_p50).max(1e-3)),
            "grpc_p50_over_unindexed_p50": self.in_process.map(|p| p50 / micros(p.unindexed_p50).max(1e-3)),
            "in_process_cedar_p50_us": self.in_process.map(|p| micros(p.cedar_p50)),
            "grpc_p50_over_cedar_p50": self.in_process.map(|p| p50 / micros(p.cedar_p50).max(1e-3)),
        })
    }

    fn header() -> String {
        format!(
            "{:>8} {:>5} {:>9} {:>8} {:>8} {:>8} {:>8} {:>9} {:>7} {:>7} {:>7} {:>7} {:>6} {:>9} {:>9} {:>9} {:>8} {:>10}",
            "policies",
            "conc",
            "dec/s",
            "p50",
            "p90",
            "p99",
            "max",
            "cpu/dec",
            "rss",
            "allow",
            "deny",
            "pending",
            "errors",
            "inproc",
            "unindexed",
            "cedar",
            "grpc/inp",
            "grpc/cedar"
        )
    }

    fn table(&self) -> String {
        let l = &self.tally.latencies;
        let p50 = micros(percentile(l, 0.5));
        let (indexed, unindexed, cedar, ratio, cedar_ratio) = match self.in_process {
            Some(p) => (
                human(micros(p.indexed_p50)),
                human(micros(p.unindexed_p50)),
                human(micros(p.cedar_p50)),
                format!("{:.1}x", p50 / micros(p.indexed_p50).max(1e-3)),
                format!("{:.2}x", p50 / micros(p.cedar_p50).max(1e-3)),
            ),
            None => ("-".into(), "-".into(), "-".into(), "-".into(), "-".into()),
        };
        format!(
            "{:>8} {:>5} {:>9.0} {:>8} {:>8} {:>8} {:>8} {:>9} {:>7} {:>7} {:>7} {:>7} {:>6} {:>9} {:>9} {:>9} {:>8} {:>10}",
            self.policies.map_or_else(|| "target".to_owned(), |n| n.to_string()),
            self.concurrency,
            l.len() as f64 / self.seconds,
            human(p50),
            human(micros(percentile(l, 0.9))),
            human(micros(percentile(l, 0.99))),
            human(micros(l.last().copied().unwrap_or_default())),
            self.cpu_us_per_decision.map_or_else(|| "-".to_owned(), human),
            self.rss_mib.map_or_else(|| "-".to_owned(), |(now, _)| format!("{now:.0}M")),
            self.tally.allow,
            self.tally.deny,
            self.tally.pending,
            self.tally.errors,
            indexed,
            unindexed,
            cedar,
            ratio,
            cedar_ratio
        )
    }
}

struct Printer {
    json: bool,
    header_done: bool,
}

impl Printer {
    fn note(&self, text: &str) {
        // Notes go to stderr with --json, so that stdout is JSON lines only.
        if self.json {
            eprintln!("# {text}");
        } else {
            println!("# {text}");
        }
    }

    fn row(&mut self, row: &Row) {
        if self.json {
            println!("{}", row.json());
        } else {
            if !self.header_done {
                println!("{}", Row::header());
                self.header_done = true;
            }
            println!("{}", row.table());
        }
        let re = &row.tally.re_asks;
        if !re.is_empty() {
            let first = &row.tally.latencies;
            self.note(&format!(
                "re-asks under the same request id (a `replay` record each): {}, p50 {} (first asks {}), p99 {} (first asks {})",
                re.len(),
                human(micros(percentile(re, 0.5))),
                human(micros(percentile(first, 0.5))),
                human(micros(percentile(re, 0.99))),
                human(micros(percentile(first, 0.99))),
            ));
        }
        if row.tally.errors > 0 {
            eprintln!(
                "ERROR: {} of {} calls failed (policies {}, concurrency {}); first error: {}",
                row.tally.errors,
                row.tally.latencies.len(),
                row.policies.map_or_else(|| "target".to_owned(), |n| n.to_string()),
                row.concurrency,
                row.tally.first_error.as_deref().unwrap_or("?")
            );
        }
        if row.tally.unexpected > 0 {
            eprintln!(
                "warning: {} decisions differ from the mix's expected outcome (policies {}, concurrency {})",
                row.tally.unexpected,
                row.policies.map_or_else(|| "target".to_owned(), |n| n.to_string()),
                row.concurrency
            );
        }
        let _ = std::io::stdout().flush();
    }
}

async fn connect(endpoint: &str, token: &str) -> Result<Client> {
    let client = Client::connect(endpoint.to_owned(), token)
        .await
        .with_context(|| format!("connect to {endpoint}"))?
        .with_timeout(Duration::from_secs(10));
    Ok(client)
}

async fn warm_up(client: &Client, slots: usize) -> Result<()> {
    for i in 0..WARMUP_CALLS {
        let (actor, request) = spec(slots, usize::MAX, i).sdk();
        client.authorize(&actor, request).await.context("warm-up call")?;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    if !args.duration.is_finite() || args.duration <= 0.0 {
        bail!("--duration must be positive");
    }
    if args.policies.is_empty() || args.concurrency.is_empty() || args.concurrency.contains(&0) {
        bail!("--policies and --concurrency need at least one value, concurrency > 0");
    }
    if let Some(dir) = &args.write_policies {
        let count = args.policies.first().copied().unwrap_or(10);
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        write_policy_folder(dir, count)?;
        println!("{count} policies written to {}", dir.display());
        return Ok(());
    }
    let duration = Duration::from_secs_f64(args.duration);
    let mut printer = Printer { json: args.json, header_done: false };
    let mut failed = false;

    if let (Some(target), Some(token_file)) = (&args.target, &args.token_file) {
        let token = std::fs::read_to_string(token_file)
            .with_context(|| format!("read {}", token_file.display()))?
            .trim()
            .to_owned();
        let policies = args.policies.first().copied().unwrap_or(10);
        printer.note(&format!(
            "target {target}: no policy generation, no in-process comparison, no CPU figure; \
             request mix for {policies} generated policies"
        ));
        let client = connect(target, &token).await?;
        let slots = full_slots(policies);
        warm_up(&client, slots).await?;
        for (round, &concurrency) in args.concurrency.iter().enumerate() {
            let began = Instant::now();
            let tally = drive(&client, slots, concurrency, duration, round as u64 + 1, args.re_ask).await?;
            let row = Row {
                policies: None,
                concurrency,
                seconds: began.elapsed().as_secs_f64(),
                tally,
                cpu_us_per_decision: None,
                rss_mib: None,
                in_process: None,
            };
            failed |= row.tally.errors > 0;
            printer.row(&row);
        }
    } else {
        let binary = wardend_binary()?;
        let ticks = ticks_per_second();
        printer.note(&format!(
            "wardend {} ({} durability, load over {}); {}s per run; mix 4/8 ALLOW, 2/8 DENY, 2/8 PENDING; cpu/dec from /proc (CLK_TCK {ticks}); \
             rss = wardend's resident size after the run; \
             inproc = normalize + decide in this process (indexed), unindexed = every policy evaluated; \
             cedar = bare Cedar is_authorized over every policy, request and entities built beforehand; \
             grpc/inp = gRPC p50 / inproc p50, grpc/cedar = gRPC p50 / cedar p50",
            binary.display(),
            args.durability,
            args.transport,
            args.duration
        ));
        for &count in &args.policies {
            let dir = tempfile::tempdir()?;
            write_policy_folder(dir.path(), count)?;
            let slots = full_slots(count);
            let in_process = in_process(dir.path(), slots)?;
            if in_process.unexpected > 0 {
                eprintln!(
                    "warning: {count} policies: {} in-process decisions differ from the mix's expected outcome",
                    in_process.unexpected
                );
            }
            let wardend = start_wardend(&binary, dir.path(), &args.durability, args.transport == "unix")?;
            let started = resident_mib(wardend.pid);
            let result = async {
                create_grants(&wardend, args.grants).await?;
                if let (Some((at_start, _)), Some((with_grants, _))) = (started, resident_mib(wardend.pid)) {
                    let grants = match args.grants {
                        0 => String::new(),
                        n => {
                            format!(", {with_grants:.0} MiB with {n} grants (the in-process columns run without them)")
                        }
                    };
                    printer.note(&format!("{count} policies: wardend resident {at_start:.0} MiB after start{grants}"));
                }
                let client = connect(&wardend.load_endpoint, &wardend.token).await?;
                warm_up(&client, slots).await?;
                for (round, &concurrency) in args.concurrency.iter().enumerate() {
                    let cpu_before = cpu_ticks(wardend.pid);
                    let began = Instant::now();
                    let tally = drive(&client, slots, concurrency, duration, round as u64 + 1, args.re_ask).await?;
                    let seconds = began.elapsed().as_secs_f64();
                    let cpu_after = cpu_ticks(wardend.pid);
                    let decisions = tally.latencies.len() as f64;
                    let cpu_us_per_decision = match (cpu_before, cpu_after) {
                        (Some(before), Some(after)) if decisions > 0.0 => {
                            Some(after.saturating_sub(before) as f64 * 1e6 / ticks as f64 / decisions)
                        }
                        _ => None,
                    };
                    let row = Row {
                        policies: Some(count),
                        concurrency,
                        seconds,
                        tally,
                        cpu_us_per_decision,
                        rss_mib: resident_mib(wardend.pid),
                        in_process: Some(in_process),
                    };
                    failed |= row.tally.errors > 0;
                    printer.row(&row);
                }
                anyhow::Ok(())
            }
            .await;
            stop_wardend(wardend)?;
            result?;
        }
    }
    if failed {
        bail!("some calls failed (see ERROR lines above)");
    }
    Ok(())
}
