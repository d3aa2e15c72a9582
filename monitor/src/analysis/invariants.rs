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
use super::facts::{Referenced, facts};
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
/// the folder in `wardenctl` lines. The question sets are built and
/// compiled once per request environment for all invariants.
pub async fn prove_invariants(snapshot: &PolicySnapshot, dir: &str, solver: &mut Solver) -> Vec<InvariantProof> {
    let shared = Shared::new(snapshot);
    let envs: Vec<RequestEnv> = snapshot.schema.request_envs().collect();
    let mut compiled: HashMap<(usize, Kind), Result<CompiledPolicySet, String>> = HashMap::new();
    let mut out = Vec::with_capacity(snapshot.invariants.len());
    for invariant in &snapshot.invariants {
        let started = Instant::now();
        let proof = match &shared {
            Ok(shared) => prove(snapshot, invariant, dir, shared, &envs, &mut compiled, solver).await,
            Err(why) => Proof::Unknown { why: why.clone() },
        };
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

/// The question sets an invariant is checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Question(Question),
    /// [`Question::Approved`] with the passkey forbids, unapproved, added.
    ApprovedNoPasskey,
}

/// What every invariant of a folder shares: the facts and the question sets.
struct Shared {
    facts: PolicySet,
    sets: HashMap<Kind, PolicySet>,
}

impl Shared {
    fn new(snapshot: &PolicySnapshot) -> Result<Self, String> {
        let set = snapshot.policies.as_ref();
        let named = Referenced::of(set.policies().chain(snapshot.invariants.iter().map(|i| &i.policy)));
        let facts = facts(&snapshot.schema, &snapshot.entities, &named).set;
        let mut sets = HashMap::new();
        for question in Question::ALL {
            sets.insert(Kind::Question(question), question_set(set, question, &facts)?);
        }
        let mut approved = question_set(set, Question::Approved, &facts)?;
        for policy in set.policies() {
            if snapshot.meta(policy.id()).is_some_and(|m| m.passkey) {
                let unapproved =
                    approved_as(policy, false)?.new_id(PolicyId::new(format!("{} (unapproved)", policy.id())));
                approved.add(unapproved).map_err(|e| e.to_string())?;
            }
        }
        sets.insert(Kind::ApprovedNoPasskey, approved);
        Ok(Self { facts, sets })
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
    compiled: &mut HashMap<(usize, Kind), Result<CompiledPolicySet, String>>,
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
        for kind in kinds(invariant.kind) {
            let set = compiled.entry((at, *kind)).or_insert_with(|| match shared.sets.get(kind) {
                Some(set) => CompiledPolicySet::compile(set, env, schema)
                    .map_err(|e| format!("the policies cannot be compiled for the solver: {e}")),
                None => Err("no question set".to_owned()),
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
