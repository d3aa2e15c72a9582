//! Recorded decisions against another policy set, off the decision path.
//!
//! `wardenctl policy replay` feeds the audit log to a [`Replayer`], which
//! decides every recorded `decision` again under a candidate set with the
//! facts it was decided with — the request as normalized then, its time,
//! the harness, the session's labels, a lock in the way, the cap on waiting
//! approvals (all in the record's `request`, see `model::RecordedRequest`),
//! and the grants of that moment (rebuilt from the log's grant records) —
//! and reports the decisions whose outcome changes, grouped by the policies
//! responsible. The users' rights are the candidate folder's
//! `entities.json`: they are part of the set under test.
//!
//! `wardenctl policy shadow` feeds it to a [`ShadowScan`], which reads what
//! the monitor recorded when the shadow set (`[policy] shadow_dir`)
//! answered otherwise than the live one, in the same report.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde::Serialize;
use time::OffsetDateTime;

use crate::decision::{DecisionConfig, Outcome, SessionFacts, decide};
use crate::grants::{GrantBook, UserGrants, compile};
use crate::model::{AuditRecord, RecordedGrant, RecordedRequest};
use crate::policy::PolicySnapshot;

/// One audit record, as the stopped store or a monitor's `TailAudit` gives
/// it: what a replay reads of it.
#[derive(Debug, Clone, Default)]
pub struct Recorded {
    /// Its sequence number.
    pub seq: u64,
    /// When, nanoseconds since the Unix epoch.
    pub time_unix_ns: i64,
    /// `decision`, `grant.created`, …
    pub kind: String,
    /// The credential that caused it: for a decision, the harness.
    pub caller: String,
    /// The actor's user (empty for records not about a request).
    pub user: String,
    /// The record's `request` member (JSON).
    pub request: String,
    /// `ALLOW`, `DENY`, `PENDING` or empty.
    pub outcome: String,
    /// The determining policies and grants.
    pub policy_ids: Vec<String>,
    /// The policy version that decided.
    pub policy_version: String,
    /// The harness's request id.
    pub request_id: String,
}

impl From<AuditRecord> for Recorded {
    fn from(record: AuditRecord) -> Self {
        Self {
            seq: record.seq,
            time_unix_ns: record.time_unix_ns,
            kind: record.kind,
            caller: record.caller,
            user: record.actor.user,
            request: record.request,
            outcome: record.outcome,
            policy_ids: record.policy_ids,
            policy_version: record.policy_version,
            request_id: record.request_id,
        }
    }
}

/// The outcome a request that no longer fits the candidate set's schema
/// would get: refused as bad input, before any decision.
pub const REFUSED: &str = "INVALID_ARGUMENT";

/// The decisions that change, grouped.
#[derive(Debug, Clone, Serialize)]
pub struct ChangeReport {
    /// The candidate folder (replay) or the shadow set (shadow).
    pub policies: String,
    /// Its version (replay); the shadow versions seen (shadow), joined.
    pub version: String,
    /// Decisions read in the window.
    pub decisions: u64,
    /// Of those, how many change outcome.
    pub changed: u64,
    /// Of the rest, how many keep their outcome but by other policies.
    pub other_policies: u64,
    /// The first and last record read in the window (0 when none).
    pub first_seq: u64,
    /// See `first_seq`.
    pub last_seq: u64,
    /// The decisions read, by the policy version that made them.
    pub decided_by: BTreeMap<String, u64>,
    /// The changes, the largest group first.
    pub groups: Vec<ChangeGroup>,
    /// What the reader should know (grants the log no longer describes,
    /// records that could not be read).
    pub notes: Vec<String>,
    /// Whether some decision was not decided again as it was made: read as
    /// "not known to be unchanged" (a record that could not be read, a grant
    /// the log does not describe or NEW cannot hold, a failed worker).
    pub incomplete: bool,
    /// Milliseconds taken.
    pub millis: u64,
}

impl ChangeReport {
    fn new(policies: String, version: String) -> Self {
        Self {
            policies,
            version,
            decisions: 0,
            changed: 0,
            other_policies: 0,
            first_seq: 0,
            last_seq: 0,
            decided_by: BTreeMap::new(),
            groups: vec![],
            notes: vec![],
            incomplete: false,
            millis: 0,
        }
    }
}

/// Decisions that change the same way by the same policies.
#[derive(Debug, Clone, Serialize)]
pub struct ChangeGroup {
    /// The recorded outcome.
    pub from: String,
    /// The outcome now (or [`REFUSED`]).
    pub to: String,
    /// The policies (and grants) that decide it now.
    pub by: Vec<String>,
    /// Those that decided it then.
    pub was: Vec<String>,
    /// How many decisions.
    pub count: u64,
    /// The first few, in log order.
    pub examples: Vec<ChangeExample>,
}

/// One decision that changes.
#[derive(Debug, Clone, Serialize)]
pub struct ChangeExample {
    /// Its audit record.
    pub seq: u64,
    /// When it was decided, nanoseconds since the Unix epoch.
    pub time_unix_ns: i64,
    /// The harness's request id.
    pub request_id: String,
    /// `user/agent/session`.
    pub actor: String,
    /// The action.
    pub action: String,
    /// The resource, `Type::"id"`.
    pub resource: String,
    /// What it is told now.
    pub reasons: Vec<String>,
}

/// How many examples a group keeps.
const EXAMPLES: usize = 3;

/// How many decisions go to a worker at once.
const BATCH: usize = 2048;

#[derive(Default)]
struct Grouper {
    index: HashMap<(String, String, Vec<String>, Vec<String>), usize>,
    groups: Vec<ChangeGroup>,
}

impl Grouper {
    fn add(
        &mut self,
        from: &str,
        to: &str,
        by: Vec<String>,
        was: Vec<String>,
        example: impl FnOnce() -> ChangeExample,
    ) {
        let key = (from.to_owned(), to.to_owned(), by, was);
        let at = match self.index.get(&key) {
            Some(at) => *at,
            None => {
                let at = self.groups.len();
                self.groups.push(ChangeGroup {
                    from: key.0.clone(),
                    to: key.1.clone(),
                    by: key.2.clone(),
                    was: key.3.clone(),
                    count: 0,
                    examples: vec![],
                });
                self.index.insert(key, at);
                at
            }
        };
        if let Some(group) = self.groups.get_mut(at) {
            group.count += 1;
            if group.examples.len() < EXAMPLES {
                group.examples.push(example());
            }
        }
    }

    fn sorted(mut self) -> Vec<ChangeGroup> {
        let first = |group: &ChangeGroup| group.examples.first().map(|e| e.seq);
        self.groups.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| first(a).cmp(&first(b))));
        self.groups
    }
}

/// A decision to decide again, with the grants of its moment.
struct Job {
    record: Recorded,
    grants: Option<Arc<UserGrants>>,
}

/// What a job came to.
struct Redecided {
    outcome: String,
    ids: Vec<String>,
    reasons: Vec<String>,
    request: Option<RecordedRequest>,
}

/// A batch of decisions for the workers, by its place in the log.
type Batch = (u64, Vec<Job>);

/// A batch decided.
type Decided = (u64, Vec<(Recorded, Redecided)>);

/// Decides recorded decisions again under a candidate policy set: the
/// caller reads the log and feeds it in order, worker threads (one per
/// core) decide batches meanwhile, and the results are counted in log
/// order.
pub struct Replayer {
    snapshot: Arc<PolicySnapshot>,
    grants: GrantBook,
    /// Grants whose records the log holds but that do not fit the set.
    misfits: BTreeMap<String, String>,
    /// Grant ids decisions relied on that the log does not describe.
    undescribed: u64,
    unreadable: u64,
    /// Decisions handed to the workers.
    fed: u64,
    batch: Vec<Job>,
    sent: u64,
    to_workers: Option<std::sync::mpsc::SyncSender<Batch>>,
    from_workers: std::sync::mpsc::Receiver<Decided>,
    workers: Vec<std::thread::JoinHandle<()>>,
    /// Batches decided ahead of one still being decided.
    early: BTreeMap<u64, Vec<(Recorded, Redecided)>>,
    next: u64,
    grouper: Grouper,
    report: ChangeReport,
    started: std::time::Instant,
}

impl Replayer {
    /// A replay under `snapshot` (the candidate folder, named `name`).
    pub fn new(name: &str, snapshot: Arc<PolicySnapshot>) -> Self {
        let threads = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        let (to_workers, batches) = std::sync::mpsc::sync_channel::<Batch>(2 * threads);
        let (results, from_workers) = std::sync::mpsc::channel::<Decided>();
        let batches = Arc::new(std::sync::Mutex::new(batches));
        let workers = (0..threads)
            .map(|_| {
                let (batches, results, snapshot) = (Arc::clone(&batches), results.clone(), Arc::clone(&snapshot));
                std::thread::spawn(move || {
                    let config = DecisionConfig::default();
                    loop {
                        let next = batches.lock().unwrap_or_else(std::sync::PoisonError::into_inner).recv();
                        let Ok((at, jobs)) = next else { return };
                        let decided = jobs
                            .into_iter()
                            .map(|job| {
                                let result = redecide(&snapshot, &config, &job);
                                (job.record, result)
                            })
                            .collect();
                        if results.send((at, decided)).is_err() {
                            return;
                        }
                    }
                })
            })
            .collect();
        let version = snapshot.version.clone();
        Self {
            snapshot,
            grants: GrantBook::default(),
            misfits: BTreeMap::new(),
            undescribed: 0,
            unreadable: 0,
            fed: 0,
            batch: Vec::with_capacity(BATCH),
            sent: 0,
            to_workers: Some(to_workers),
            from_workers,
            workers,
            early: BTreeMap::new(),
            next: 0,
            grouper: Grouper::default(),
            report: ChangeReport::new(name.to_owned(), version),
            started: std::time::Instant::now(),
        }
    }

    /// Reads one record, in log order. Grant records change the grants of
    /// the moments after them whether or not they are in the window; a
    /// decision is decided again only when `in_window`.
    pub fn feed(&mut self, record: Recorded, in_window: bool) {
        match record.kind.as_str() {
            "decision" if in_window => {
                let grants = self.grants.for_user(&record.user);
                self.undescribed += record
                    .policy_ids
                    .iter()
                    .filter(|id| id.starts_with("grt-") && grants.as_ref().is_none_or(|g| g.get(id).is_none()))
                    .count() as u64;
                self.fed += 1;
                self.batch.push(Job { record, grants });
                if self.batch.len() >= BATCH {
                    self.send();
                    // Count what is decided, without waiting.
                    while let Ok((at, decided)) = self.from_workers.try_recv() {
                        self.arrived(at, decided);
                    }
                }
            }
            "grant.created" => self.grant_created(&record.request),
            "grant.revoked" | "grant.expired" => {
                if let Ok(recorded) = serde_json::from_str::<RecordedGrant>(&record.request) {
                    self.grants.remove(&recorded.grant_id);
                }
            }
            "approval.approved" => {
                if let Ok(recorded) = serde_json::from_str::<RecordedRequest>(&record.request)
                    && let Some(window) = recorded.window
                {
                    self.add_grant(window);
                }
            }
            _ => {}
        }
    }

    fn grant_created(&mut self, request: &str) {
        // Written before grants were recorded whole: not known (a decision
        // that used it is counted in `undescribed`).
        if let Ok(RecordedGrant { grant: Some(grant), .. }) = serde_json::from_str::<RecordedGrant>(request) {
            self.add_grant(grant);
        }
    }

    fn add_grant(&mut self, grant: crate::grants::Grant) {
        match compile(&grant, &self.snapshot) {
            Ok(compiled) => self.grants.insert(grant, compiled),
            Err(why) => {
                self.misfits.insert(grant.grant_id.clone(), why.to_string());
            }
        }
    }

    /// Hands the batch to the workers (waiting while they are behind).
    fn send(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        let jobs = std::mem::replace(&mut self.batch, Vec::with_capacity(BATCH));
        if let Some(to_workers) = &self.to_workers {
            // The workers end only when this sender is dropped.
            let _ = to_workers.send((self.sent, jobs));
            self.sent += 1;
        }
    }

    /// A decided batch: counted now if it is the next in log order, else
    /// kept until those before it are.
    fn arrived(&mut self, at: u64, decided: Vec<(Recorded, Redecided)>) {
        self.early.insert(at, decided);
        while let Some(decided) = self.early.remove(&self.next) {
            for (record, result) in decided {
                self.count(record, result);
            }
            self.next += 1;
        }
    }

    fn count(&mut self, record: Recorded, now: Redecided) {
        let report = &mut self.report;
        report.decisions += 1;
        if report.first_seq == 0 {
            report.first_seq = record.seq;
        }
        report.last_seq = record.seq;
        *report.decided_by.entry(record.policy_version.clone()).or_default() += 1;
        let Some(request) = now.request else {
            self.unreadable += 1;
            return;
        };
        if now.outcome == record.outcome {
            if now.ids != record.policy_ids {
                report.other_policies += 1;
            }
            return;
        }
        report.changed += 1;
        self.grouper.add(&record.outcome, &now.outcome, now.ids, record.policy_ids.clone(), || {
            example(&record, &request, now.reasons)
        });
    }

    /// The report, once every record is fed.
    pub fn finish(mut self) -> ChangeReport {
        self.send();
        self.to_workers = None;
        while self.next < self.sent {
            match self.from_workers.recv() {
                Ok((at, decided)) => self.arrived(at, decided),
                // A worker died: what it held is not counted, and said.
                Err(_) => break,
            }
        }
        for worker in std::mem::take(&mut self.workers) {
            let _ = worker.join();
        }
        let mut report = std::mem::replace(&mut self.report, ChangeReport::new(String::new(), String::new()));
        let lost = self.fed.saturating_sub(report.decisions);
        if lost > 0 {
            report.notes.push(format!("a worker failed: {lost} decisions were not decided again"));
        }
        report.groups = std::mem::take(&mut self.grouper).sorted();
        if self.unreadable > 0 {
            report.notes.push(format!(
                "{} decision records could not be read as requests and were not decided again",
                self.unreadable
            ));
        }
        if self.undescribed > 0 {
            report.notes.push(format!(
                "{} decisions relied on grants whose creation the log does not hold (made before it starts, or \
                 by an earlier version); they were decided again without them",
                self.undescribed
            ));
        }
        for (grant, why) in &self.misfits {
            report.notes.push(format!("grant `{grant}` does not fit this policy set and was left out: {why}"));
        }
        report.incomplete = lost > 0 || self.unreadable > 0 || self.undescribed > 0 || !self.misfits.is_empty();
        report.millis = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        report
    }
}

/// One recorded decision decided again with the facts it was made with.
fn redecide(snapshot: &PolicySnapshot, config: &DecisionConfig, job: &Job) -> Redecided {
    let record = &job.record;
    let Ok(recorded) = serde_json::from_str::<RecordedRequest>(&record.request) else {
        return Redecided { outcome: String::new(), ids: vec![], reasons: vec![], request: None };
    };
    let facts = SessionFacts {
        labels: recorded.session_labels.clone(),
        harness: record.caller.clone(),
        grants: job.grants.clone(),
        blocked: recorded.blocked.clone(),
    };
    let now = OffsetDateTime::from_unix_timestamp_nanos(i128::from(record.time_unix_ns))
        .unwrap_or(OffsetDateTime::UNIX_EPOCH);
    match decide(snapshot, &recorded.request(), &facts, now, config) {
        Ok(mut evaluation) => {
            // The cap on waiting approvals was full then: a PENDING then was
            // a DENY, and is again.
            if evaluation.outcome == Outcome::Pending
                && let Some(full) = &recorded.capped
            {
                evaluation.outcome = Outcome::Deny;
                evaluation.reasons = vec![full.clone()];
                evaluation.grant_ids.clear();
            }
            let reasons = evaluation.recorded_reasons();
            let mut ids = evaluation.policy_ids;
            ids.extend(evaluation.grant_ids);
            Redecided { outcome: evaluation.outcome.as_str().to_owned(), ids, reasons, request: Some(recorded) }
        }
        Err(invalid) => Redecided {
            outcome: REFUSED.to_owned(),
            ids: vec![],
            reasons: vec![format!("refused as bad input: {invalid}")],
            request: Some(recorded),
        },
    }
}

fn example(record: &Recorded, request: &RecordedRequest, reasons: Vec<String>) -> ChangeExample {
    let actor = &request.actor;
    ChangeExample {
        seq: record.seq,
        time_unix_ns: record.time_unix_ns,
        request_id: record.request_id.clone(),
        actor: format!("{}/{}/{}", actor.user, actor.agent, actor.session),
        action: request.action.clone(),
        resource: request.resource.uid(),
        reasons,
    }
}

/// Reads the shadow set's differences that the monitor recorded.
pub struct ShadowScan {
    versions: BTreeMap<String, u64>,
    grouper: Grouper,
    report: ChangeReport,
    started: std::time::Instant,
}

impl Default for ShadowScan {
    fn default() -> Self {
        Self::new()
    }
}

impl ShadowScan {
    /// An empty scan.
    pub fn new() -> Self {
        Self {
            versions: BTreeMap::new(),
            grouper: Grouper::default(),
            report: ChangeReport::new("shadow".into(), String::new()),
            started: std::time::Instant::now(),
        }
    }

    /// Reads one record of the window, in log order.
    pub fn feed(&mut self, record: Recorded) {
        if record.kind != "decision" {
            return;
        }
        let report = &mut self.report;
        report.decisions += 1;
        if report.first_seq == 0 {
            report.first_seq = record.seq;
        }
        report.last_seq = record.seq;
        *report.decided_by.entry(record.policy_version.clone()).or_default() += 1;
        // Only a record that holds a shadow answer is parsed whole.
        if !record.request.contains("\"shadow\"") {
            return;
        }
        let Ok(request) = serde_json::from_str::<RecordedRequest>(&record.request) else { return };
        let Some(shadow) = request.shadow.clone() else { return };
        report.changed += 1;
        *self.versions.entry(shadow.policy_version.clone()).or_default() += 1;
        // From what the live policies said (a PENDING the cap made a DENY
        // is a PENDING here), as the monitor compared them.
        let live = if shadow.live.is_empty() { record.outcome.clone() } else { shadow.live.clone() };
        self.grouper.add(&live, &shadow.outcome, shadow.policy_ids, record.policy_ids.clone(), || {
            example(&record, &request, shadow.reasons)
        });
    }

    /// The report.
    pub fn finish(self) -> ChangeReport {
        let mut report = self.report;
        report.groups = self.grouper.sorted();
        report.version = self.versions.keys().cloned().collect::<Vec<_>>().join(", ");
        report.millis = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bundled() -> Arc<PolicySnapshot> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies");
        Arc::new(PolicySnapshot::load(&dir).unwrap())
    }

    /// A decision record of alice's reading `path`, decided `outcome` by `ids`.
    fn decision(seq: u64, request: &str, outcome: &str, ids: &[&str]) -> Recorded {
        Recorded {
            seq,
            time_unix_ns: 1_796_000_000_000_000_000,
            kind: "decision".into(),
            caller: "harness".into(),
            user: "alice".into(),
            request: request.into(),
            outcome: outcome.into(),
            policy_ids: ids.iter().map(|id| (*id).to_owned()).collect(),
            policy_version: "sha256:then".into(),
            request_id: format!("r{seq}"),
        }
    }

    fn read(path: &str) -> crate::normalize::NormalizedRequest {
        let input = crate::normalize::RequestInput {
            request_id: String::new(),
            actor: crate::normalize::Actor { user: "alice".into(), agent: "claude-code".into(), session: "s1".into() },
            action: "fs.read".into(),
            resource: crate::normalize::ResourceInput::File { path: path.into(), cwd: String::new(), pattern: false },
            justification: String::new(),
            context_json: String::new(),
        };
        crate::normalize::normalize(&input).unwrap()
    }

    #[test]
    fn what_cannot_be_decided_as_it_was_made_leaves_the_report_incomplete() {
        let snapshot = bundled();
        let request = read("/home/alice/project/src/main.rs");
        let json = RecordedRequest::of(&request).to_json();
        // Recorded as the bundled set decides it: nothing changes, all known.
        let facts = SessionFacts { harness: "harness".into(), ..SessionFacts::default() };
        let now = OffsetDateTime::from_unix_timestamp_nanos(1_796_000_000_000_000_000).unwrap();
        let outcome = decide(&snapshot, &request, &facts, now, &DecisionConfig::default()).unwrap().outcome.as_str();
        let mut replayer = Replayer::new("bundled", Arc::clone(&snapshot));
        replayer.feed(decision(1, &json, outcome, &[]), true);
        let complete = replayer.finish();
        assert_eq!((complete.decisions, complete.changed, complete.incomplete), (1, 0, false), "{complete:?}");

        // A record that is not a request, and a decision that relied on a
        // grant the log never described: both said, neither "unchanged".
        let mut replayer = Replayer::new("bundled", Arc::clone(&snapshot));
        replayer.feed(decision(1, "not json", "ALLOW", &[]), true);
        replayer.feed(decision(2, &json, outcome, &["grt-gone"]), true);
        let report = replayer.finish();
        assert_eq!(report.decisions, 2);
        assert!(report.incomplete, "{report:?}");
        assert!(report.notes.iter().any(|n| n.contains("could not be read")), "{:?}", report.notes);
        assert!(report.notes.iter().any(|n| n.contains("relied on grants")), "{:?}", report.notes);
        // Outside the window, a decision is not decided at all.
        let mut replayer = Replayer::new("bundled", Arc::clone(&snapshot));
        replayer.feed(decision(1, "not json", "ALLOW", &[]), false);
        let report = replayer.finish();
        assert_eq!((report.decisions, report.incomplete), (0, false));
    }
}
