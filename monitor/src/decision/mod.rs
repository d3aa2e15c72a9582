//! The decision, pure: a normalized request, a policy snapshot and the clock
//! in; ALLOW, DENY or PENDING with the determining policies and reasons out.
//!
//! DESIGN.md "The decision": evaluate with `context.approved = false`;
//! allowed is ALLOW; otherwise evaluate again with `approved = true`: allowed
//! now is PENDING (a person may approve), still denied is DENY. Any Cedar
//! evaluation error denies and names the policy. No tonic, sled or tokio here,
//! and no clock read: `now` is passed in.

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use cedar_policy::{
    Authorizer, Context, Decision as CedarDecision, Effect, Entities, Entity, EntityUid, PolicyId, Request, Response,
    RestrictedExpression,
};
use time::OffsetDateTime;

use crate::command::Part;
pub(crate) use crate::entities::cedar_datetime;
use crate::entities::{Ancestors, add_known, uid};
use crate::grants::{CompiledGrant, Liftable, UserGrants};
use crate::normalize::{InvalidInput, NormalizedRequest, Resource, normalize_resource};
use crate::policy::PolicySnapshot;

mod evaluator;
mod inputs;
mod parts;

use evaluator::*;
pub use inputs::cedar_inputs;
use inputs::*;
use parts::{combine, is_itself, runs_nothing};
pub(crate) use parts::{command_parts, identified, is_composite};

/// The three answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
pub enum Outcome {
    /// The action may go ahead.
    Allow,
    /// The action must not happen.
    #[default]
    Deny,
    /// The action waits for a person's approval.
    Pending,
}

impl Outcome {
    /// `ALLOW`, `DENY` or `PENDING`, as in the proto.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Allow => "ALLOW",
            Outcome::Deny => "DENY",
            Outcome::Pending => "PENDING",
        }
    }

    /// The outcome named `ALLOW`, `DENY` or `PENDING`.
    pub(crate) fn from_name(name: &str) -> Option<Self> {
        [Outcome::Allow, Outcome::Deny, Outcome::Pending].into_iter().find(|o| o.as_str() == name)
    }
}

/// How a pending action may be approved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ApprovalTerms {
    /// Groups named by `@approvers` on the policies in the way; empty: any approver.
    pub(crate) approvers: Vec<String>,
    /// How long the approval may wait: the shortest `@timeout` of the
    /// policies in the way, else the configured default.
    pub(crate) timeout: Duration,
    /// The policies that would permit the action once approved.
    pub(crate) permit_ids: Vec<String>,
    /// The `@id`s of the policies in the way marked `@approval("passkey")`:
    /// when any, approving needs a passkey assertion.
    pub(crate) passkey: Vec<String>,
}

/// The result of evaluating one request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Evaluation {
    /// ALLOW, DENY or PENDING.
    pub outcome: Outcome,
    /// `@id`s of the determining policies.
    pub(crate) policy_ids: Vec<String>,
    /// Their `@reason`s and the monitor's own reasons.
    pub(crate) reasons: Vec<String>,
    /// Set exactly when the outcome is PENDING.
    pub(crate) approval: Option<ApprovalTerms>,
    /// Grants that matched (and so counted as approval).
    pub grant_ids: Vec<String>,
    /// For ALLOW: the `@label`s of the determining policies, which the
    /// session gains.
    pub(crate) labels: Vec<String>,
    /// For a command of several parts: each part, how it was decided and
    /// why, one line each (`part 2 of 3, `cat /x` (fs.read): DENY by p: …`).
    pub parts: Vec<String>,
}

impl Evaluation {
    /// What the audit record and an approval keep: every part of a command
    /// once, with its outcome, policies and reasons; for anything else the
    /// reasons.
    pub(crate) fn recorded_reasons(&self) -> Vec<String> {
        if self.parts.is_empty() { self.reasons.clone() } else { self.parts.clone() }
    }

    /// For ALLOW: the labels the session gains.
    pub fn labels(&self) -> &[String] {
        &self.labels
    }

    /// A denial with these policies and reasons.
    pub(crate) fn deny(policy_ids: Vec<String>, reasons: Vec<String>) -> Self {
        Self { outcome: Outcome::Deny, policy_ids, reasons, ..Self::default() }
    }
}

/// What the monitor knows about the session and caller, beyond the request.
#[derive(Debug, Clone, Default)]
pub struct SessionFacts {
    /// Labels the session holds.
    pub labels: BTreeSet<String>,
    /// The name of the authenticated harness credential.
    pub harness: String,
    /// The active grants of the request's user.
    pub grants: Option<Arc<UserGrants>>,
    /// Why the session may not act at all: it, its user or its agent kind
    /// is locked, or the session id belongs to another user or agent.
    pub blocked: Option<String>,
}

/// Settings of the decision that are not in the policies.
#[derive(Debug, Clone)]
pub struct DecisionConfig {
    /// How long an approval waits when no policy in the way has `@timeout`.
    pub default_approval_timeout: Duration,
    /// Evaluate only the policies whose scope can match (the index); off,
    /// every policy is evaluated (for differential tests and comparisons).
    pub use_index: bool,
}

impl Default for DecisionConfig {
    fn default() -> Self {
        Self { default_approval_timeout: Duration::from_secs(600), use_index: true }
    }
}

/// Context fields the monitor sets; a harness may not send them.
const RESERVED_CONTEXT: [&str; 3] = ["now", "approved", "justification"];

/// Decides one request. `Err` is bad input (an action the schema does not
/// know, a resource the action does not apply to, context that does not fit
/// the schema); every other problem is a DENY with its reason.
///
/// A command is decided as the parts it is made of (`command::parts`):
/// the strictest outcome of its parts, naming the part that decided. A
/// grant on the whole command (a window approved for this exact script)
/// counts as approval for each part.
pub fn decide(
    snapshot: &PolicySnapshot,
    request: &NormalizedRequest,
    facts: &SessionFacts,
    now: OffsetDateTime,
    config: &DecisionConfig,
) -> Result<Evaluation, InvalidInput> {
    let request = identified(snapshot, request);
    let parts = match command_parts(snapshot, &request)? {
        Some(parts) if parts.is_empty() => return Ok(runs_nothing(&facts.blocked)),
        Some(parts) if !is_itself(&parts, &request) => parts,
        _ => return decide_one(snapshot, &request, facts, now, config, &[], None),
    };
    let inherited = match &facts.grants {
        None => vec![],
        Some(_) => match Evaluator::new(snapshot, &request, facts, now, config.use_index)? {
            Ok(evaluator) => match evaluator.matching_grants(facts)? {
                Ok(ids) => ids,
                Err(denial) => return Ok(*denial),
            },
            Err(denial) => return Ok(denial),
        },
    };
    let requests: Vec<&NormalizedRequest> = parts.iter().map(|(_, r)| r).collect();
    let mut shared = parts_entities(snapshot, &requests, facts).map(|(entities, ancestors)| {
        let entities = Arc::new(entities);
        ancestors.into_iter().map(move |a| Some((Arc::clone(&entities), a))).collect::<Vec<_>>()
    });
    let mut decided = Vec::with_capacity(parts.len());
    for (at, (part, part_request)) in parts.iter().enumerate() {
        let built = shared.as_mut().and_then(|all| all.get_mut(at).and_then(Option::take));
        decided.push((part, decide_one(snapshot, part_request, facts, now, config, &inherited, built)?));
    }
    Ok(combine(&decided))
}

/// Decides one request (a part of a command, or any other request), with
/// `inherited`: grants that matched the whole command.
fn decide_one(
    snapshot: &PolicySnapshot,
    request: &NormalizedRequest,
    facts: &SessionFacts,
    now: OffsetDateTime,
    config: &DecisionConfig,
    inherited: &[String],
    built: Option<(Arc<Entities>, Ancestors)>,
) -> Result<Evaluation, InvalidInput> {
    let evaluator = match Evaluator::with_entities(snapshot, request, facts, now, config.use_index, built)? {
        Ok(evaluator) => evaluator,
        Err(denial) => return Ok(denial),
    };
    // Step 1: lockdown.
    if let Some(why) = &facts.blocked {
        return Ok(Evaluation::deny(vec![], vec![why.clone()]));
    }
    // Step 2: a matching grant counts as approval; one an approver made
    // for a window, only if it lifts every forbid a person could lift here.
    let mut grant_ids = match evaluator.matching_grants(facts)? {
        Ok(ids) => ids,
        Err(denial) => return Ok(*denial),
    };
    for id in inherited {
        if !grant_ids.contains(id) {
            grant_ids.push(id.clone());
        }
    }
    if let Some(grants) = &facts.grants
        && grant_ids.iter().any(|id| grants.get(id).is_some_and(CompiledGrant::restricted))
    {
        match evaluator.liftable_forbids(snapshot) {
            Ok(liftable) => {
                grant_ids.retain(|id| grants.get(id).is_some_and(|g| liftable.iter().all(|forbid| g.lifts(forbid))))
            }
            Err(e) => return e.into_result(),
        }
    }
    let approved = !grant_ids.is_empty();

    // Step 3: the policy files, with `approved` as found.
    let first = match evaluator.evaluate(approved) {
        Ok(response) => response,
        Err(e) => return e.into_result(),
    };
    if let Some(denial) = errors_deny(snapshot, &first) {
        return Ok(denial);
    }
    let first_ids: Vec<PolicyId> = first.diagnostics().reason().cloned().collect();
    let allowed = first.decision() == CedarDecision::Allow;
    // A grant is a permit too: with no forbid in the way it allows.
    if allowed || (approved && first_ids.is_empty()) {
        let (policy_ids, reasons) = describe(snapshot, &first_ids);
        let labels = labels_of(snapshot, &first_ids);
        let reasons = if reasons.is_empty() && approved {
            vec![format!("allowed by grant {}", grant_ids.join(", "))]
        } else {
            reasons
        };
        return Ok(Evaluation {
            outcome: Outcome::Allow,
            policy_ids,
            reasons,
            approval: None,
            grant_ids,
            labels,
            parts: vec![],
        });
    }
    if approved {
        // Approved by a grant and still denied: plain forbids win.
        let (policy_ids, reasons) = describe(snapshot, &first_ids);
        return Ok(Evaluation { grant_ids, ..Evaluation::deny(policy_ids, reasons) });
    }

    // Step 4: would a person's approval let it through?
    let second = match evaluator.evaluate(true) {
        Ok(response) => response,
        Err(e) => return e.into_result(),
    };
    if let Some(denial) = errors_deny(snapshot, &second) {
        return Ok(denial);
    }
    let second_ids: Vec<PolicyId> = second.diagnostics().reason().cloned().collect();
    if second.decision() == CedarDecision::Allow {
        // The forbids that stood in the way when not approved.
        let in_the_way: Vec<PolicyId> =
            first_ids.into_iter().filter(|id| snapshot.meta(id).is_some_and(|m| m.effect == Effect::Forbid)).collect();
        let (policy_ids, mut reasons) = describe(snapshot, &in_the_way);
        if reasons.is_empty() {
            reasons.push("this action needs a person's approval".to_owned());
        }
        let (permit_ids, _) = describe(snapshot, &second_ids);
        let approval = approval_terms(snapshot, &in_the_way, permit_ids, config);
        return Ok(Evaluation {
            outcome: Outcome::Pending,
            policy_ids,
            reasons,
            approval: Some(approval),
            ..Evaluation::default()
        });
    }

    // Denied even with approval: a plain forbid, or nothing permits it.
    if !second_ids.is_empty() {
        let (policy_ids, reasons) = describe(snapshot, &second_ids);
        return Ok(Evaluation::deny(policy_ids, reasons));
    }
    let (policy_ids, mut reasons) = describe(snapshot, &first_ids);
    reasons.push(no_permit(request));
    Ok(Evaluation::deny(policy_ids, reasons))
}

/// Decides a request a person has approved: one evaluation with
/// `context.approved = true` against the policies of this moment. ALLOW with
/// the permits, or DENY with what stands in the way now. A command: every
/// part, as in [`decide`].
pub(crate) fn decide_approved(
    snapshot: &PolicySnapshot,
    request: &NormalizedRequest,
    facts: &SessionFacts,
    now: OffsetDateTime,
) -> Result<Evaluation, InvalidInput> {
    let request = identified(snapshot, request);
    let parts = match command_parts(snapshot, &request)? {
        Some(parts) if parts.is_empty() => return Ok(runs_nothing(&facts.blocked)),
        Some(parts) if !is_itself(&parts, &request) => parts,
        _ => return decide_approved_one(snapshot, &request, facts, now),
    };
    let mut decided = Vec::with_capacity(parts.len());
    for (part, part_request) in &parts {
        decided.push((part, decide_approved_one(snapshot, part_request, facts, now)?));
    }
    Ok(combine(&decided))
}

fn decide_approved_one(
    snapshot: &PolicySnapshot,
    request: &NormalizedRequest,
    facts: &SessionFacts,
    now: OffsetDateTime,
) -> Result<Evaluation, InvalidInput> {
    let evaluator = match Evaluator::new(snapshot, request, facts, now, true)? {
        Ok(evaluator) => evaluator,
        Err(denial) => return Ok(denial),
    };
    if let Some(why) = &facts.blocked {
        return Ok(Evaluation::deny(vec![], vec![why.clone()]));
    }
    let response = match evaluator.evaluate(true) {
        Ok(response) => response,
        Err(e) => return e.into_result(),
    };
    if let Some(denial) = errors_deny(snapshot, &response) {
        return Ok(denial);
    }
    let ids: Vec<PolicyId> = response.diagnostics().reason().cloned().collect();
    let (policy_ids, mut reasons) = describe(snapshot, &ids);
    if response.decision() == CedarDecision::Allow {
        let labels = labels_of(snapshot, &ids);
        return Ok(Evaluation { outcome: Outcome::Allow, policy_ids, reasons, labels, ..Evaluation::default() });
    }
    if ids.is_empty() {
        reasons.push(no_permit(request));
    }
    Ok(Evaluation::deny(policy_ids, reasons))
}

/// How one policy fared for a request, for `authorize --explain`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyTrace {
    /// `@id` (or the grant id).
    pub(crate) id: String,
    /// `permit` or `forbid`.
    pub(crate) effect: &'static str,
    /// The file it came from (`grant` for grants).
    pub(crate) file: String,
    /// Its conditions hold with `context.approved = false`.
    pub(crate) matches: bool,
    /// Its conditions hold with `context.approved = true`.
    pub(crate) matches_approved: bool,
    /// Its evaluation error, if any.
    pub(crate) error: Option<String>,
}

/// Every policy (and grant of the user) evaluated on its own against the
/// request, with and without approval, and the decision itself.
pub fn explain(
    snapshot: &PolicySnapshot,
    request: &NormalizedRequest,
    facts: &SessionFacts,
    now: OffsetDateTime,
    config: &DecisionConfig,
) -> Result<(Evaluation, Vec<PolicyTrace>), InvalidInput> {
    let evaluation = decide(snapshot, request, facts, now, config)?;
    let evaluator = match Evaluator::new(snapshot, request, facts, now, false)? {
        Ok(evaluator) => evaluator,
        Err(_) => return Ok((evaluation, vec![])),
    };
    let requests = match (evaluator.request(false), evaluator.request(true)) {
        (Ok(plain), Ok(approved)) => (plain, approved),
        _ => return Ok((evaluation, vec![])),
    };
    let mut sources: Vec<(cedar_policy::Policy, String)> = snapshot
        .policies
        .policies()
        .map(|p| (p.clone(), snapshot.meta(p.id()).map_or_else(String::new, |m| m.file.clone())))
        .collect();
    if let Some(grants) = &facts.grants {
        sources.extend(grants.policies().map(|p| (p.clone(), "grant".to_owned())));
    }
    let authorizer = Authorizer::new();
    let mut traces = Vec::with_capacity(sources.len());
    for (policy, file) in sources {
        let id = snapshot.meta(policy.id()).map_or_else(|| policy.id().to_string(), |m| m.id.clone());
        let effect = match policy.effect() {
            Effect::Permit => "permit",
            Effect::Forbid => "forbid",
        };
        let mut alone = cedar_policy::PolicySet::new();
        if alone.add(policy.clone()).is_err() {
            continue;
        }
        let run = |request: &Request| {
            let response = authorizer.is_authorized(request, &alone, &evaluator.entities);
            let error = response.diagnostics().errors().next().map(ToString::to_string);
            (response.diagnostics().reason().next().is_some(), error)
        };
        let (matches, error) = run(&requests.0);
        let (matches_approved, error_approved) = run(&requests.1);
        traces.push(PolicyTrace { id, effect, file, matches, matches_approved, error: error.or(error_approved) });
    }
    traces.sort_by(|a, b| (a.file.as_str(), a.id.as_str()).cmp(&(b.file.as_str(), b.id.as_str())));
    Ok((evaluation, traces))
}

fn no_permit(request: &NormalizedRequest) -> String {
    format!("no policy permits `{}` on {}", request.action, request.resource.display_uid())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::normalize::{Actor, RequestInput, ResourceInput, normalize};

    fn justified(why: &str) -> NormalizedRequest {
        normalize(&RequestInput {
            request_id: String::new(),
            actor: Actor { user: "alice".into(), agent: "claude-code".into(), session: "s1".into() },
            action: "fs.read".into(),
            resource: ResourceInput::File { path: "/tmp/x".into(), cwd: String::new(), pattern: false },
            justification: why.into(),
            context_json: String::new(),
        })
        .unwrap()
    }

    fn field(context: &Context, key: &str) -> String {
        context.get(key).map(|v| v.to_string()).unwrap_or_default()
    }

    /// The contexts kept for the current millisecond are told apart by
    /// approval and justification, and a new millisecond makes new ones.
    #[test]
    fn a_kept_context_is_only_reused_for_the_same_instant_approval_and_justification() {
        let now = "2026-12-01T10:00:00.001Z";
        let (a, b) = (justified("a"), justified("b"));
        let context = |request, at, approved| base_context(request, at, approved).ok().unwrap();
        assert_eq!(field(&context(&a, now, false), "justification"), "\"a\"");
        assert_eq!(field(&context(&b, now, false), "justification"), "\"b\"");
        assert_eq!(field(&context(&b, now, false), "approved"), "false");
        assert_eq!(field(&context(&b, now, true), "approved"), "true");
        assert_eq!(field(&context(&b, now, false), "approved"), "false");
        let later = "2026-12-01T10:00:00.002Z";
        let first = field(&context(&b, now, true), "now");
        let second = field(&context(&b, later, true), "now");
        assert_ne!(first, second);
        assert!(second.contains("2026-12-01T10:00:00.002Z"), "{second}");
    }
}
