//! Proving a folder's invariants (`invariants/*.cedar`) against its
//! policies: on `wardenctl policy check` and on every load of the monitor,
//! which refuses a set that breaks one.
//!
//! An invariant is a forbid `M` whose scope and conditions pick requests;
//! the set `{permit everything, M}` allows exactly the requests `M` does not
//! pick, so "some request `M` picks that the question `Q` allows" is the
//! solver's question `implies(Q, {permit everything, M})`. Per kind:
//! - `needs-a-person`: [`Question::Alone`] (ALLOW without a person);
//! - `denied`: also [`Question::Approved`] and [`Question::Granted`];
//! - `needs-a-passkey`: `needs-a-person`, and [`Question::Approved`] with
//!   the set's `@approval("passkey")` forbids, unapproved, added: a request
//!   a person could let through with no passkey forbid in the way.
//!
//! Each counterexample is decided again by Warden's rules; only one that
//! breaks the invariant when checked is reported as breaking it, any other
//! leaves it unknown, which a load treats as broken.

use std::collections::HashMap;
use std::time::Instant;

use cedar_policy::{Policy, PolicyId, PolicySet, RequestEnv};
use cedar_policy_symcc::CompiledPolicySet;
use serde::Serialize;

use super::example::{Decided, Example, outcomes};
use super::facts::{Hierarchy, Referenced, facts};
use super::slice::can_apply;
use super::solver::{Answer, Solver};
use super::variants::{Question, approved_as, question_set};
use crate::decision::Outcome;
use crate::policy::{Invariant, InvariantKind, PolicySnapshot};

/// How an invariant fared.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum Proof {
    /// Proved for every request.
    Holds,
    /// A request that breaks it, decided so by Warden's rules.
    Broken {
        /// The request.
        example: Box<Example>,
        /// What the set decides without a grant.
        decided: Decided,
        /// What it decides under a grant.
        granted: Decided,
        /// `wardenctl authorize --explain` for it.
        run: Option<String>,
    },
    /// Not proved: why.
    Unknown {
        /// Why.
        why: String,
    },
}

/// One invariant's proof.
#[derive(Debug, Clone, Serialize)]
pub struct InvariantProof {
    /// `@id`.
    pub id: String,
    /// The file.
    pub file: String,
    /// `@invariant`.
    pub kind: InvariantKind,
    /// `@reason`.
    pub reason: Option<String>,
    /// The answer.
    pub proof: Proof,
    /// How long it took.
    pub millis: u128,
}

impl InvariantProof {
    /// One line for logs and the policy status: `invariants/x.cedar: `id` (kind) …`.
    pub fn summary(&self) -> String {
        let what = match &self.proof {
            Proof::Holds => "holds".to_owned(),
            Proof::Broken { example, decided, granted, .. } => {
                let labels = if example.labels.is_empty() {
                    String::new()
                } else {
                    format!(" holding {}", example.labels.join(", "))
                };
                format!(
                    "BROKEN: {} {} by {} (user {}, session{labels}) is {} by {}{}",
                    example.action,
                    example.attributes.get("path").or(example.attributes.get("argv")).map_or(&example.resource, |p| p),
                    example.agent,
                    example.user,
                    decided.outcome.as_str(),
                    if decided.policies.is_empty() { "no policy".to_owned() } else { decided.policies.join(", ") },
                    if granted.outcome == Outcome::Allow && decided.outcome != Outcome::Allow {
                        ", ALLOW under a grant"
                    } else {
                        ""
                    }
                )
            }
            Proof::Unknown { why } => format!("NOT PROVED: {why}"),
        };
        format!("{}: invariant `{}` ({}): {what}", self.file, self.id, self.kind.as_str())
    }

    /// Whether it was proved.
    pub fn holds(&self) -> bool {
        matches!(self.proof, Proof::Holds)
    }
}

/// Proves every invariant of `snapshot` against its policies; `dir` names
/// the folder in `wardenctl` lines. Each invariant is asked, per request
/// environment, about the policies that can decide a request it picks
/// (`Shared::slice`); a question set is built and compiled once per
/// environment and slice, and shared by the invariants whose slices agree.
pub async fn prove_invariants(snapshot: &PolicySnapshot, dir: &str, solver: &mut Solver) -> Vec<InvariantProof> {
    let shared = Shared::new(snapshot);
    let envs: Vec<RequestEnv> = snapshot.schema.request_envs().collect();
    let mut compiled = Compiled::new();
    let mut out = Vec::with_capacity(snapshot.invariants.len());
    for invariant in &snapshot.invariants {
        let started = Instant::now();
        let proof = prove(snapshot, invariant, dir, &shared, &envs, &mut compiled, solver).await;
        out.push(InvariantProof {
            id: invariant.id.clone(),
            file: invariant.file.clone(),
            kind: invariant.kind,
            reason: invariant.reason.clone(),
            proof,
            millis: started.elapsed().as_millis(),
        });
    }
    out
}

/// The compiled question sets, by request environment, kind and the
/// policies sliced for an invariant: invariants whose slices agree share
/// them.
type Compiled = HashMap<(usize, Kind, Vec<usize>), Result<CompiledPolicySet, String>>;

/// The question sets an invariant is checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Question(Question),
    /// [`Question::Approved`] with the passkey forbids, unapproved, added.
    ApprovedNoPasskey,
}

/// What every invariant of a folder shares: the facts, what scopes can
/// meet under them, and the folder's policies in a fixed order.
struct Shared {
    facts: PolicySet,
    hierarchy: Hierarchy,
    policies: Vec<Policy>,
    /// Which of them are marked `@approval("passkey")`.
    passkey: Vec<bool>,
}

impl Shared {
    fn new(snapshot: &PolicySnapshot) -> Self {
        let set = snapshot.policies.as_ref();
        let named = Referenced::of(set.policies().chain(snapshot.invariants.iter().map(|i| &i.policy)));
        let found = facts(&snapshot.schema, &snapshot.entities, &named);
        let policies: Vec<Policy> = set.policies().cloned().collect();
        let passkey = policies.iter().map(|p| snapshot.meta(p.id()).is_some_and(|m| m.passkey)).collect();
        Self { facts: found.set, hierarchy: Hierarchy::new(&snapshot.entities, &found.kept), policies, passkey }
    }

    /// The policies that can decide a request of `env` that `invariant`
    /// picks, by position: those whose scope fits the environment and can
    /// meet the invariant's. A policy left out never matches such a
    /// request (nor errs on it: its scope is false first), so the question
    /// asked on these alone has the answer it has on all of them.
    fn slice(&self, invariant: &Invariant, env: &RequestEnv, schema: &cedar_policy::Schema) -> Vec<usize> {
        self.policies
            .iter()
            .enumerate()
            .filter(|(_, policy)| can_apply(policy, env, schema) && !self.hierarchy.disjoint(&invariant.policy, policy))
            .map(|(at, _)| at)
            .collect()
    }

    /// The question set of `kind` over the policies at `slice`.
    fn question(&self, slice: &[usize], kind: Kind) -> Result<PolicySet, String> {
        let sliced = || slice.iter().filter_map(|&at| self.policies.get(at).zip(self.passkey.get(at)));
        let mut subset = PolicySet::new();
        for (policy, _) in sliced() {
            subset.add(policy.clone()).map_err(|e| e.to_string())?;
        }
        match kind {
            Kind::Question(question) => question_set(&subset, question, &self.facts),
            Kind::ApprovedNoPasskey => {
                let mut approved = question_set(&subset, Question::Approved, &self.facts)?;
                for (policy, _) in sliced().filter(|(_, passkey)| **passkey) {
                    let unapproved =
                        approved_as(policy, false)?.new_id(PolicyId::new(format!("{} (unapproved)", policy.id())));
                    approved.add(unapproved).map_err(|e| e.to_string())?;
                }
                Ok(approved)
            }
        }
    }

    /// The requests an invariant does not pick: everything but what it forbids.
    fn outside(&self, invariant: &Invariant) -> Result<PolicySet, String> {
        let mut outside = PolicySet::new();
        let everything =
            Policy::parse(Some(PolicyId::new("warden-everything")), "permit (principal, action, resource);")
                .map_err(|e| e.to_string())?;
        outside.add(everything).map_err(|e| e.to_string())?;
        outside.add(invariant.policy.new_id(PolicyId::new("warden-invariant"))).map_err(|e| e.to_string())?;
        for fact in self.facts.policies() {
            outside.add(fact.clone()).map_err(|e| e.to_string())?;
        }
        Ok(outside)
    }
}

/// The question sets an invariant of `kind` is asked against.
fn kinds(kind: InvariantKind) -> &'static [Kind] {
    match kind {
        InvariantKind::NeedsAPerson => &[Kind::Question(Question::Alone)],
        InvariantKind::Denied => {
            &[Kind::Question(Question::Alone), Kind::Question(Question::Approved), Kind::Question(Question::Granted)]
        }
        InvariantKind::NeedsAPasskey => &[Kind::Question(Question::Alone), Kind::ApprovedNoPasskey],
    }
}

async fn prove(
    snapshot: &PolicySnapshot,
    invariant: &Invariant,
    dir: &str,
    shared: &Shared,
    envs: &[RequestEnv],
    compiled: &mut Compiled,
    solver: &mut Solver,
) -> Proof {
    let schema = &snapshot.schema;
    let outside = match shared.outside(invariant) {
        Ok(outside) => outside,
        Err(why) => return Proof::Unknown { why },
    };
    let mut unknown = Vec::new();
    for (at, env) in envs.iter().enumerate() {
        if !can_apply(&invariant.policy, env, schema) {
            continue;
        }
        let outside = match CompiledPolicySet::compile(&outside, env, schema) {
            Ok(compiled) => compiled,
            Err(e) => return Proof::Unknown { why: format!("the invariant cannot be compiled for the solver: {e}") },
        };
        let slice = shared.slice(invariant, env, schema);
        for kind in kinds(invariant.kind) {
            let set = compiled.entry((at, *kind, slice.clone())).or_insert_with(|| {
                shared.question(&slice, *kind).and_then(|set| {
                    CompiledPolicySet::compile(&set, env, schema)
                        .map_err(|e| format!("the policies cannot be compiled for the solver: {e}"))
                })
            });
            let set = match set {
                Ok(set) => set,
                Err(why) => return Proof::Unknown { why: why.clone() },
            };
            let question = match kind {
                Kind::Question(question) => *question,
                Kind::ApprovedNoPasskey => Question::Approved,
            };
            match solver.implies(set, &outside).await {
                Answer::Proved => {}
                Answer::Unknown(why) => unknown.push(format!("{}: {why}", env.action())),
                Answer::Counterexample(found) => match broken(snapshot, invariant, question, &found, dir) {
                    Ok(proof) => return proof,
                    Err(why) => unknown.push(format!("{}: {why}", env.action())),
                },
            }
        }
    }
    if unknown.is_empty() { Proof::Holds } else { Proof::Unknown { why: unknown.join("; ") } }
}

/// The counterexample decided by Warden's rules: `Ok` when it breaks the invariant.
fn broken(
    snapshot: &PolicySnapshot,
    invariant: &Invariant,
    question: Question,
    found: &cedar_policy_symcc::Env,
    dir: &str,
) -> Result<Proof, String> {
    let (decided, granted) =
        outcomes(snapshot, &found.request, &found.entities).ok_or("the solver's request cannot be decided again")?;
    let breaks = match (invariant.kind, question) {
        (_, Question::Alone) => decided.outcome == Outcome::Allow,
        (InvariantKind::Denied, Question::Approved) => decided.outcome != Outcome::Deny,
        (InvariantKind::Denied, Question::Granted) => granted.outcome != Outcome::Deny,
        (InvariantKind::NeedsAPasskey, Question::Approved) => {
            decided.outcome == Outcome::Pending
                && !decided.policies.iter().any(|id| snapshot.meta(&PolicyId::new(id)).is_some_and(|m| m.passkey))
        }
        _ => false,
    };
    if !breaks {
        return Err(format!(
            "the solver's request is decided {} ({} under a grant) when checked, which keeps the invariant, \
             so the proof is open",
            decided.outcome.as_str(),
            granted.outcome.as_str()
        ));
    }
    let example = Example::new(&found.request, &found.entities).ok_or("the solver's request has no principal")?;
    Ok(Proof::Broken { run: example.wardenctl(dir), example: Box::new(example), decided, granted })
}
