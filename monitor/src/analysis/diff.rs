//! `policy diff OLD NEW`: for every request environment of the schema
//! (principal type, action, resource type), whether NEW decides every
//! request as OLD does, and where not, a request that shows it.
//!
//! Per environment and per question of [`variants`](super::variants), two
//! solver questions: is there a request NEW's set allows and OLD's does not
//! (a gain), and the other way (a loss). Six questions all proved means the
//! same outcome for every request, with or without a person or a grant.
//! Each counterexample is decided again by Warden's rules with both sets
//! ([`outcomes`]): only a change of outcome is reported as one; a request
//! the solver found that decides alike (a policy that reads
//! `context.approved` backwards, an evaluation error) makes the question
//! unknown, never equivalent. Policies that are new or changed are also
//! asked whether they can fail to evaluate, since Warden denies then and
//! Cedar's own semantics would skip them.

use std::collections::BTreeSet;
use std::time::Instant;

use cedar_policy::{Policy, PolicySet, RequestEnv};
use cedar_policy_symcc::{CompiledPolicy, CompiledPolicySet, Env};
use serde::Serialize;

use super::example::{Decided, Example, outcomes};
use super::facts::{Hierarchy, Referenced, facts};
use super::slice::{can_apply, relevant};
use super::solver::{Answer, Solver};
use super::variants::{Question, question_set};
use crate::decision::Outcome;
use crate::policy::PolicySnapshot;

/// A policy folder as the analysis sees it.
pub struct Folder<'a> {
    /// How the person named it (shown, and put in `wardenctl` lines).
    pub name: String,
    /// Its loaded, validated set.
    pub snapshot: &'a PolicySnapshot,
}

/// How a change of outcome was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Under {
    /// The request as it comes, no grant.
    NoGrant,
    /// The request under a grant of the user's that matches it.
    Grant,
}

/// Whether Warden's own `decide` gives the example the same two outcomes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum Reproduced {
    /// Warden decides the example request so with each folder.
    Yes,
    /// It decides it otherwise: what each folder said.
    No {
        /// OLD's outcome by `decide`.
        old: String,
        /// NEW's.
        new: String,
    },
    /// Not tried: why.
    NotTried {
        /// Why not.
        why: String,
    },
}

/// One change of outcome, with a request that shows it.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    /// OLD's outcome and policies.
    pub old: Decided,
    /// NEW's.
    pub new: Decided,
    /// Without or with a grant.
    pub under: Under,
    /// The request.
    pub example: Example,
    /// `wardenctl authorize --explain` against each folder.
    /// against OLD,
    pub run_old: Option<String>,
    /// The same against NEW.
    pub run_new: Option<String>,
    /// Whether `decide` agrees.
    pub reproduced: Reproduced,
    /// What the solver was asked.
    pub found_by: String,
}

impl Finding {
    /// A request NEW lets further than OLD (DENY < PENDING < ALLOW).
    pub fn permits(&self) -> bool {
        rank(self.new.outcome) > rank(self.old.outcome)
    }
}

fn rank(outcome: Outcome) -> u8 {
    match outcome {
        Outcome::Deny => 0,
        Outcome::Pending => 1,
        Outcome::Allow => 2,
    }
}

/// The answer for one request environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Every request decided alike: proved.
    Equivalent,
    /// Some request is let further, none held back further.
    NewlyPermits,
    /// Some request is held back further, none let further.
    NewlyForbids,
    /// Some of each.
    Both,
    /// No change shown, and not every question proved.
    Unknown,
    /// In OLD's schema only.
    OnlyOld,
    /// In NEW's schema only.
    OnlyNew,
}

impl Verdict {
    /// For people.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Equivalent => "equivalent",
            Verdict::NewlyPermits => "newly permits",
            Verdict::NewlyForbids => "newly forbids",
            Verdict::Both => "newly permits and newly forbids",
            Verdict::Unknown => "unknown",
            Verdict::OnlyOld => "only in OLD's schema",
            Verdict::OnlyNew => "only in NEW's schema",
        }
    }
}

/// One request environment's answer.
#[derive(Debug, Clone, Serialize)]
pub struct EnvDiff {
    /// The principal type.
    pub principal: String,
    /// The action.
    pub action: String,
    /// The resource type.
    pub resource: String,
    /// The answer.
    pub verdict: Verdict,
    /// The changes of outcome shown, one per kind of change.
    pub findings: Vec<Finding>,
    /// Questions without an answer, and why.
    pub unknown: Vec<String>,
    /// How long it took.
    pub millis: u128,
}

impl EnvDiff {
    /// An environment `(principal, action, resource)` with nothing found yet.
    fn new((principal, action, resource): (String, String, String), verdict: Verdict) -> Self {
        Self { principal, action, resource, verdict, findings: vec![], unknown: vec![], millis: 0 }
    }
}

/// The whole answer.
#[derive(Debug, Clone, Serialize)]
pub struct DiffReport {
    /// OLD as named.
    pub old: String,
    /// NEW as named.
    pub new: String,
    /// OLD's policy version.
    pub old_version: String,
    /// NEW's.
    pub new_version: String,
    /// Each request environment.
    pub envs: Vec<EnvDiff>,
    /// How `entities.json` changed (users, groups, attributes); the proofs
    /// take NEW's.
    pub entity_changes: Vec<String>,
    /// How long the whole took.
    pub millis: u128,
}

impl DiffReport {
    /// Whether every environment is proved equivalent and the entities are the same.
    pub fn equivalent(&self) -> bool {
        self.entity_changes.is_empty() && self.envs.iter().all(|e| e.verdict == Verdict::Equivalent)
    }

    /// Whether some change of outcome was shown.
    pub fn differs(&self) -> bool {
        !self.entity_changes.is_empty()
            || self.envs.iter().any(|e| {
                matches!(
                    e.verdict,
                    Verdict::NewlyPermits | Verdict::NewlyForbids | Verdict::Both | Verdict::OnlyOld | Verdict::OnlyNew
                )
            })
    }
}

fn env_key(env: &RequestEnv) -> (String, String, String) {
    (env.principal().to_string(), env.action().id().unescaped().to_owned(), env.resource().to_string())
}

/// A policy without its annotations, to tell a changed policy from one
/// whose words only changed.
fn body(policy: &Policy) -> String {
    match policy.to_json() {
        Ok(mut json) => {
            if let Some(map) = json.as_object_mut() {
                map.remove("annotations");
            }
            json.to_string()
        }
        Err(_) => policy.to_string(),
    }
}

/// What both sets' policies refer to.
fn named(sets: &[&PolicySet]) -> Referenced {
    Referenced::of(sets.iter().flat_map(|set| set.policies()))
}

/// Compares `old` with `new`, asking `solver`.
pub async fn diff(old: &Folder<'_>, new: &Folder<'_>, solver: &mut Solver) -> DiffReport {
    let started = Instant::now();
    let schema = &new.snapshot.schema;
    let (old_set, new_set) = (old.snapshot.policies.as_ref(), new.snapshot.policies.as_ref());
    let old_bodies: BTreeSet<String> = old_set.policies().map(body).collect();
    let new_bodies: BTreeSet<String> = new_set.policies().map(body).collect();
    let changed: Vec<&Policy> = old_set
        .policies()
        .filter(|p| !new_bodies.contains(&body(p)))
        .chain(new_set.policies().filter(|p| !old_bodies.contains(&body(p))))
        .collect();
    // Only the shared policies that can take part where a changed one does.
    let shared: Vec<&Policy> = new_set.policies().filter(|p| old_bodies.contains(&body(p))).collect();
    let all_facts = facts(schema, &new.snapshot.entities, &named(&[old_set, new_set]));
    let hierarchy = Hierarchy::new(&new.snapshot.entities, &all_facts.kept);
    let sides = Sides { old_bodies, new_bodies, changed, shared, hierarchy };

    let old_envs: BTreeSet<_> = old.snapshot.schema.request_envs().map(|e| env_key(&e)).collect();
    let mut envs = Vec::new();
    for env in schema.request_envs() {
        let at = Instant::now();
        let key = env_key(&env);
        let only_new = !old_envs.contains(&key);
        let mut out = EnvDiff::new(key, Verdict::OnlyNew);
        if !only_new {
            match sides.questions(old, new, &env) {
                Ok(None) => {}
                Ok(Some((questions, changed))) => {
                    compare_env(old, new, &env, &questions, &changed, solver, &mut out).await
                }
                Err(why) => out.unknown.push(why),
            }
            out.verdict = verdict(&out);
        }
        out.millis = at.elapsed().as_millis();
        envs.push(out);
    }
    let new_envs: BTreeSet<_> = schema.request_envs().map(|e| env_key(&e)).collect();
    envs.extend(old_envs.difference(&new_envs).map(|key| EnvDiff::new(key.clone(), Verdict::OnlyOld)));
    envs.sort_by(|a, b| (&a.action, &a.principal, &a.resource).cmp(&(&b.action, &b.principal, &b.resource)));
    DiffReport {
        old: old.name.clone(),
        new: new.name.clone(),
        old_version: old.snapshot.version.clone(),
        new_version: new.snapshot.version.clone(),
        envs,
        entity_changes: super::entity_changes(&old.snapshot.entities, &new.snapshot.entities),
        millis: started.elapsed().as_millis(),
    }
}

/// What both sides share and what changed, for slicing each environment.
struct Sides<'a> {
    old_bodies: BTreeSet<String>,
    new_bodies: BTreeSet<String>,
    changed: Vec<&'a Policy>,
    shared: Vec<&'a Policy>,
    hierarchy: Hierarchy,
}

type Questions = Vec<(Question, PolicySet, PolicySet)>;

impl<'a> Sides<'a> {
    /// The question sets of `env`, each side cut down to the changed
    /// policies that apply there and the shared ones that can take part
    /// where those do, with the facts for what they name; `None` when no
    /// changed policy applies (the same policies decide there: equivalent).
    fn questions(
        &self,
        old: &Folder<'_>,
        new: &Folder<'_>,
        env: &RequestEnv,
    ) -> Result<Option<(Questions, Vec<&'a Policy>)>, String> {
        let schema = &new.snapshot.schema;
        let changed: Vec<&Policy> = self.changed.iter().filter(|p| can_apply(p, env, schema)).copied().collect();
        if changed.is_empty() {
            return Ok(None);
        }
        let shared: Vec<&Policy> = self.shared.iter().filter(|p| can_apply(p, env, schema)).copied().collect();
        let kept: BTreeSet<String> = relevant(&shared, &changed, &self.hierarchy)
            .into_iter()
            .filter_map(|at| shared.get(at).map(|p| body(p)))
            .collect();
        let slice = |set: &PolicySet| -> Result<PolicySet, String> {
            let mut out = PolicySet::new();
            for policy in set.policies().filter(|p| can_apply(p, env, schema)) {
                let b = body(policy);
                if !self.old_bodies.contains(&b) || !self.new_bodies.contains(&b) || kept.contains(&b) {
                    out.add(policy.clone()).map_err(|e| e.to_string())?;
                }
            }
            Ok(out)
        };
        let (old_slice, new_slice) = (slice(&old.snapshot.policies)?, slice(&new.snapshot.policies)?);
        let facts = facts(schema, &new.snapshot.entities, &named(&[&old_slice, &new_slice])).set;
        let mut questions = Vec::new();
        for question in Question::ALL {
            questions.push((
                question,
                question_set(&old_slice, question, &facts)?,
                question_set(&new_slice, question, &facts)?,
            ));
        }
        Ok(Some((questions, changed)))
    }
}

fn verdict(env: &EnvDiff) -> Verdict {
    let permits = env.findings.iter().any(Finding::permits);
    let forbids = env.findings.iter().any(|f| !f.permits());
    match (permits, forbids) {
        (true, true) => Verdict::Both,
        (true, false) => Verdict::NewlyPermits,
        (false, true) => Verdict::NewlyForbids,
        (false, false) if env.unknown.is_empty() => Verdict::Equivalent,
        (false, false) => Verdict::Unknown,
    }
}

fn question_name(question: Question) -> &'static str {
    match question {
        Question::Alone => "allowed without a person",
        Question::Approved => "allowed once a person approves",
        Question::Granted => "allowed under a grant",
    }
}

async fn compare_env(
    old: &Folder<'_>,
    new: &Folder<'_>,
    env: &RequestEnv,
    questions: &[(Question, PolicySet, PolicySet)],
    changed: &[&Policy],
    solver: &mut Solver,
    out: &mut EnvDiff,
) {
    let schema = &new.snapshot.schema;
    for (question, old_q, new_q) in questions {
        let compiled = (CompiledPolicySet::compile(old_q, env, schema), CompiledPolicySet::compile(new_q, env, schema));
        let (o, n) = match compiled {
            (Ok(o), Ok(n)) => (o, n),
            (Err(e), _) => {
                out.unknown.push(format!("OLD's policies do not type-check against NEW's schema here: {e}"));
                return;
            }
            (_, Err(e)) => {
                out.unknown.push(format!("NEW's policies cannot be compiled for the solver: {e}"));
                return;
            }
        };
        let under = if *question == Question::Granted { Under::Grant } else { Under::NoGrant };
        for (gain, a, b) in [(true, &n, &o), (false, &o, &n)] {
            let asked = format!(
                "{} by {} and not by {}",
                question_name(*question),
                if gain { "NEW" } else { "OLD" },
                if gain { "OLD" } else { "NEW" }
            );
            match solver.implies(a, b).await {
                Answer::Proved => {}
                Answer::Unknown(why) => out.unknown.push(format!("{asked}: {why}")),
                Answer::Counterexample(found) => record(old, new, &found, under, &asked, false, out),
            }
        }
    }
    for policy in changed {
        let Ok(compiled) = CompiledPolicy::compile(policy, env, schema) else { continue };
        let which = if old.snapshot.policies.policy(policy.id()).is_some_and(|p| body(p) == body(policy)) {
            old.snapshot
        } else {
            new.snapshot
        };
        let name = which.meta(policy.id()).map_or_else(|| policy.id().to_string(), |m| m.id.clone());
        let asked = format!("policy {name} fails to evaluate (Warden denies)");
        match solver.errors(&compiled).await {
            Answer::Proved => {}
            Answer::Unknown(why) => out.unknown.push(format!("{asked}: {why}")),
            Answer::Counterexample(found) => {
                record(old, new, &found, Under::NoGrant, &asked, true, out);
                record(old, new, &found, Under::Grant, &asked, true, out);
            }
        }
    }
}

/// Decides the counterexample with both sets and keeps it when the outcome
/// changes. `error_search`: the solver was asked where a policy fails to
/// evaluate, not for a change, so a request decided alike says nothing.
fn record(
    old: &Folder<'_>,
    new: &Folder<'_>,
    found: &Env,
    under: Under,
    asked: &str,
    error_search: bool,
    out: &mut EnvDiff,
) {
    let (Some(o), Some(n)) = (
        outcomes(old.snapshot, &found.request, &found.entities),
        outcomes(new.snapshot, &found.request, &found.entities),
    ) else {
        out.unknown.push(format!("{asked}: the solver's request cannot be decided again"));
        return;
    };
    let ((old_plain, old_granted), (new_plain, new_granted)) = (o, n);
    let (old_d, new_d) = match under {
        Under::NoGrant => (old_plain, new_plain),
        Under::Grant => (old_granted, new_granted),
    };
    if old_d.outcome == new_d.outcome {
        if error_search {
            return;
        }
        out.unknown.push(format!(
            "{asked}: the request the solver found is decided {} by both when checked, so this question stays open",
            old_d.outcome.as_str()
        ));
        return;
    }
    if out.findings.iter().any(|f| f.under == under && f.old.outcome == old_d.outcome && f.new.outcome == new_d.outcome)
    {
        return;
    }
    let Some(example) = Example::new(&found.request, &found.entities) else {
        out.unknown.push(format!("{asked}: the solver's request has no principal, action or resource"));
        return;
    };
    let reproduced = match under {
        Under::Grant => Reproduced::NotTried {
            why: "it needs a grant, which `authorize --explain --policies` cannot hold".to_owned(),
        },
        Under::NoGrant => match (example.decide(old.snapshot), example.decide(new.snapshot)) {
            (Ok(o), Ok(n)) if o.outcome == old_d.outcome && n.outcome == new_d.outcome => Reproduced::Yes,
            (Ok(o), Ok(n)) => Reproduced::No { old: o.outcome.as_str().to_owned(), new: n.outcome.as_str().to_owned() },
            (Err(why), _) | (_, Err(why)) => Reproduced::NotTried { why },
        },
    };
    out.findings.push(Finding {
        run_old: example.wardenctl(&old.name),
        run_new: example.wardenctl(&new.name),
        old: old_d,
        new: new_d,
        under,
        example,
        reproduced,
        found_by: asked.to_owned(),
    });
}
