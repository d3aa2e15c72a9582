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

/// Whether `request` is a command of several parts (a script, a wrapper, a
/// program with file arguments), which has no parent scope to approve a
/// window over: only that exact command.
pub(crate) fn is_composite(snapshot: &PolicySnapshot, request: &NormalizedRequest) -> bool {
    let request = identified(snapshot, request);
    match command_parts(snapshot, &request) {
        Ok(Some(parts)) => !is_itself(&parts, &request),
        Ok(None) => false,
        // Too many parts: composite, whatever it is.
        Err(_) => true,
    }
}

/// The request as policies see it: a command's program by its identity
/// (`programs::Programs::identity`).
pub(crate) fn identified<'r>(snapshot: &PolicySnapshot, request: &'r NormalizedRequest) -> Cow<'r, NormalizedRequest> {
    if let Resource::Command { program, path, .. } = &request.resource {
        let identity = snapshot.programs.identity(program, path);
        if &identity != program {
            let mut owned = request.clone();
            if let Resource::Command { program, .. } = &mut owned.resource {
                *program = identity;
            }
            return Cow::Owned(owned);
        }
    }
    Cow::Borrowed(request)
}

/// The parts of an `exec` request, each as a request of its own; `None`
/// for any other request. Parts whose action the schema does not have (a
/// policy set without file actions) are left out.
pub(crate) fn command_parts(
    snapshot: &PolicySnapshot,
    request: &NormalizedRequest,
) -> Result<Option<Vec<(Part, NormalizedRequest)>>, InvalidInput> {
    let Resource::Command { words, cwd, .. } = &request.resource else { return Ok(None) };
    if request.action != "exec" || words.is_empty() {
        return Ok(None);
    }
    let parts = crate::command::parts(words, cwd, &request.actor.user, &snapshot.programs)?;
    let found = parts.len();
    let mut out = Vec::with_capacity(parts.len());
    for part in parts {
        if !snapshot.actions.contains_key(&part.action) {
            continue;
        }
        let resource = match normalize_resource(&part.resource) {
            Ok(mut resource) => {
                if let Resource::Command { opaque, program, path, .. } = &mut resource {
                    *opaque = part.opaque;
                    *program = snapshot.programs.identity(program, path);
                }
                resource
            }
            // A part that is not valid on its own (a path too long): what
            // the monitor cannot read is opaque.
            Err(_) => {
                let mut resource = request.resource.clone();
                if let Resource::Command { opaque, .. } = &mut resource {
                    *opaque = true;
                }
                resource
            }
        };
        let part_request = NormalizedRequest { action: part.action.clone(), resource, ..request.clone() };
        out.push((part, part_request));
    }
    // Parts the schema has no action for are not nothing: the command is
    // then decided as it was sent.
    if out.is_empty() && found > 0 {
        return Ok(None);
    }
    Ok(Some(out))
}

/// A script that runs only shell builtins (`echo done; true`): the shell is
/// transparent, and nothing in it is for the policies to decide.
fn runs_nothing(blocked: &Option<String>) -> Evaluation {
    match blocked {
        Some(why) => Evaluation::deny(vec![], vec![why.clone()]),
        None => Evaluation {
            outcome: Outcome::Allow,
            reasons: vec!["the script runs only shell builtins, which nothing in the policies decides".to_owned()],
            ..Evaluation::default()
        },
    }
}

/// Whether the parts are just the request itself (a plain command with no
/// file arguments): then it is decided as one.
fn is_itself(parts: &[(Part, NormalizedRequest)], request: &NormalizedRequest) -> bool {
    match parts {
        [] => false,
        [(_, only)] => only.action == request.action && only.resource == request.resource,
        _ => false,
    }
}

/// The strictest outcome of the parts (DENY over PENDING over ALLOW), with
/// the reasons of the parts that decided, each naming its part.
fn combine(decided: &[(&Part, Evaluation)]) -> Evaluation {
    let count = decided.len();
    let name = |i: usize, part: &Part| {
        if count == 1 { part.shown() } else { format!("part {} of {count}, {}", i + 1, part.shown()) }
    };
    let lines: Vec<String> = decided
        .iter()
        .enumerate()
        .map(|(i, (part, e))| {
            let by = if e.policy_ids.is_empty() { String::new() } else { format!(" by {}", e.policy_ids.join(", ")) };
            let why = if e.reasons.is_empty() { String::new() } else { format!(": {}", e.reasons.join("; ")) };
            format!("{}: {}{by}{why}", name(i, part), e.outcome.as_str())
        })
        .collect();
    let prefixed = |i: usize, part: &Part, e: &Evaluation| -> Vec<String> {
        e.reasons.iter().map(|r| format!("{}: {r}", name(i, part))).collect()
    };
    if let Some((i, (part, denied))) = decided.iter().enumerate().find(|(_, (_, e))| e.outcome == Outcome::Deny) {
        return Evaluation {
            policy_ids: denied.policy_ids.clone(),
            reasons: prefixed(i, part, denied),
            grant_ids: denied.grant_ids.clone(),
            parts: lines,
            ..Evaluation::deny(vec![], vec![])
        };
    }
    let mut policy_ids = Vec::new();
    let mut reasons = Vec::new();
    let add = |list: &mut Vec<String>, items: &[String]| {
        for item in items {
            if !list.contains(item) {
                list.push(item.clone());
            }
        }
    };
    let pending: Vec<(usize, &(&Part, Evaluation))> =
        decided.iter().enumerate().filter(|(_, (_, e))| e.outcome == Outcome::Pending).collect();
    if !pending.is_empty() {
        let mut approvers = Vec::new();
        let mut permit_ids = Vec::new();
        let mut passkey = Vec::new();
        let mut timeout: Option<Duration> = None;
        for (i, (part, e)) in &pending {
            add(&mut policy_ids, &e.policy_ids);
            add(&mut reasons, &prefixed(*i, part, e));
            if let Some(terms) = &e.approval {
                add(&mut approvers, &terms.approvers);
                add(&mut permit_ids, &terms.permit_ids);
                add(&mut passkey, &terms.passkey);
                timeout = Some(timeout.map_or(terms.timeout, |t| t.min(terms.timeout)));
            }
        }
        approvers.sort();
        policy_ids.sort();
        permit_ids.sort();
        passkey.sort();
        return Evaluation {
            outcome: Outcome::Pending,
            policy_ids,
            reasons,
            approval: Some(ApprovalTerms { approvers, timeout: timeout.unwrap_or_default(), permit_ids, passkey }),
            parts: lines,
            ..Evaluation::default()
        };
    }
    let mut grant_ids = Vec::new();
    let mut labels = Vec::new();
    for (_, e) in decided {
        add(&mut policy_ids, &e.policy_ids);
        add(&mut reasons, &e.reasons);
        add(&mut grant_ids, &e.grant_ids);
        add(&mut labels, &e.labels);
    }
    policy_ids.sort();
    grant_ids.sort();
    labels.sort();
    Evaluation { outcome: Outcome::Allow, policy_ids, reasons, approval: None, grant_ids, labels, parts: lines }
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

/// A request ready for Cedar: its entities, principal, action and resource,
/// and the policies whose scope can match it.
struct Evaluator<'a> {
    snapshot: &'a PolicySnapshot,
    request: &'a NormalizedRequest,
    action: &'a EntityUid,
    principal: EntityUid,
    resource: EntityUid,
    entities: Arc<Entities>,
    ancestors: Ancestors,
    policies: Arc<cedar_policy::PolicySet>,
    /// Evaluate only the grants whose scope can match (else all of the
    /// user's, to check that both agree).
    use_index: bool,
    now: String,
}

impl<'a> Evaluator<'a> {
    /// `Err` is bad input; `Ok(Err(denial))` a request that is denied before
    /// Cedar runs (unknown user, entities that cannot be built).
    fn new(
        snapshot: &'a PolicySnapshot,
        request: &'a NormalizedRequest,
        facts: &SessionFacts,
        now: OffsetDateTime,
        use_index: bool,
    ) -> Result<Result<Self, Evaluation>, InvalidInput> {
        Self::with_entities(snapshot, request, facts, now, use_index, None)
    }

    /// As [`Evaluator::new`], with the entities built already (for the
    /// parts of a command, which share them).
    fn with_entities(
        snapshot: &'a PolicySnapshot,
        request: &'a NormalizedRequest,
        facts: &SessionFacts,
        now: OffsetDateTime,
        use_index: bool,
        built: Option<(Arc<Entities>, Ancestors)>,
    ) -> Result<Result<Self, Evaluation>, InvalidInput> {
        let Some(action) = snapshot.actions.get(&request.action) else {
            return Err(InvalidInput::new(
                "action",
                format!("`{}` is not an action of the policy schema", request.action),
            ));
        };
        let resource_type = request.resource.entity_type();
        if !action.resource_types.iter().any(|t| t == resource_type) {
            return Err(InvalidInput::new(
                "resource",
                format!(
                    "action `{}` does not apply to a {} resource (it applies to {})",
                    request.action,
                    request.resource.kind(),
                    if action.resource_types.is_empty() {
                        "nothing".to_owned()
                    } else {
                        action.resource_types.join(", ")
                    }
                ),
            ));
        }
        for key in request.context.keys() {
            if RESERVED_CONTEXT.contains(&key.as_str()) {
                return Err(InvalidInput::new("context_json", format!("`{key}` is set by the monitor")));
            }
        }
        let types = &snapshot.types;
        let user = uid(&types.user, &request.actor.user);
        if snapshot.entities.get(&user).is_none() {
            return Ok(Err(Evaluation::deny(
                vec![],
                vec![format!("unknown user `{}`: not in the policy entities", request.actor.user)],
            )));
        }
        let (entities, ancestors) = match built {
            Some(built) => built,
            None => match request_entities(snapshot, request, facts) {
                Ok((entities, ancestors)) => (Arc::new(entities), ancestors),
                Err(reason) => return Ok(Err(Evaluation::deny(vec![], vec![reason]))),
            },
        };
        let principal = uid(&types.session, &request.actor.session);
        let resource = uid(types.of(&request.resource).0, &request.resource.entity_id());
        // Only the policies whose scope can match: the same decision as the
        // whole set (a policy out of scope is never satisfied, never errs).
        let policies = if use_index {
            snapshot.index.slice(&request.action, &principal, &resource, &ancestors)
        } else {
            Arc::clone(&snapshot.policies)
        };
        Ok(Ok(Self {
            snapshot,
            request,
            action: &action.uid,
            principal,
            resource,
            entities,
            ancestors,
            policies,
            use_index,
            now: cedar_datetime(now),
        }))
    }

    /// The grants (of the request's user) that match this request. An
    /// erroring grant denies, like any erroring policy.
    fn matching_grants(&self, facts: &SessionFacts) -> Result<Result<Vec<String>, Box<Evaluation>>, InvalidInput> {
        let Some(grants) = &facts.grants else { return Ok(Ok(vec![])) };
        // Only the grants whose session and scope can match (the rest are
        // never satisfied): usually none, and then Cedar does not run.
        let candidates = if self.use_index {
            grants.candidates(&self.request.actor.session, &facts.harness, &self.resource, &self.ancestors.resource)
        } else {
            grants.all(&facts.harness)
        };
        if candidates.is_empty() {
            return Ok(Ok(vec![]));
        }
        let request = match self.request(false) {
            Ok(request) => request,
            // Bad context is bad input, as without grants.
            Err(e) => return e.into_result().map(|denial| Err(Box::new(denial))),
        };
        let response = Authorizer::new().is_authorized(&request, &candidates, &self.entities);
        if let Some(error) = response.diagnostics().errors().next() {
            return Ok(Err(Box::new(Evaluation::deny(
                vec![],
                vec![format!("a grant could not be evaluated, so the request is denied: {error}")],
            ))));
        }
        let mut ids: Vec<String> = response.diagnostics().reason().map(ToString::to_string).collect();
        ids.sort();
        Ok(Ok(ids))
    }

    /// The `@approvers` group and passkey mark of each forbid in the way
    /// that a person's approval would lift (satisfied without approval, not
    /// with it).
    fn liftable_forbids(&self, snapshot: &PolicySnapshot) -> Result<Vec<Liftable>, RequestError> {
        let forbids = |response: &Response| -> BTreeSet<PolicyId> {
            response
                .diagnostics()
                .reason()
                .filter(|id| snapshot.meta(id).is_some_and(|m| m.effect == Effect::Forbid))
                .cloned()
                .collect()
        };
        let unapproved = forbids(&self.evaluate(false)?);
        let approved = forbids(&self.evaluate(true)?);
        Ok(unapproved
            .difference(&approved)
            .filter_map(|id| snapshot.meta(id))
            .map(|meta| Liftable { approvers: meta.approvers.clone(), passkey: meta.passkey })
            .collect())
    }

    fn evaluate(&self, approved: bool) -> Result<Response, RequestError> {
        let request = self.request(approved)?;
        Ok(Authorizer::new().is_authorized(&request, &self.policies, &self.entities))
    }

    fn request(&self, approved: bool) -> Result<Request, RequestError> {
        let new_request = |context, blame: fn(String) -> RequestError| {
            Request::new(
                self.principal.clone(),
                self.action.clone(),
                self.resource.clone(),
                context,
                Some(&self.snapshot.schema),
            )
            .map_err(|e| blame(e.to_string()))
        };
        let base = base_context(self.request, &self.now, approved)?;
        if self.request.context.is_empty() {
            return new_request(base, RequestError::Schema);
        }
        // The monitor's own fields must fit before the harness's are blamed.
        new_request(base, RequestError::Schema)?;
        let full = full_context(self.snapshot, self.request, self.action, &self.now, approved)?;
        new_request(full, RequestError::Context)
    }
}

/// Why a Cedar request could not be built.
enum RequestError {
    /// The harness's `context_json` does not fit the schema.
    Context(String),
    /// The monitor's own request does not fit the schema: the schema does not
    /// follow Warden's domain model. Fail closed.
    Schema(String),
}

impl RequestError {
    fn into_result(self) -> Result<Evaluation, InvalidInput> {
        match self {
            RequestError::Context(message) => Err(InvalidInput::new("context_json", message)),
            RequestError::Schema(message) => Ok(Evaluation::deny(
                vec![],
                vec![format!("the request does not conform to the policy schema: {message}")],
            )),
        }
    }
}

/// Any policy that errored denies the request (Cedar would skip it).
fn errors_deny(snapshot: &PolicySnapshot, response: &Response) -> Option<Evaluation> {
    let mut policy_ids = Vec::new();
    let mut reasons = Vec::new();
    for error in response.diagnostics().errors() {
        let cedar_policy::AuthorizationError::PolicyEvaluationError(error) = error;
        let id = snapshot.meta(error.policy_id()).map_or_else(|| error.policy_id().to_string(), |m| m.id.clone());
        reasons.push(format!("policy `{id}` could not be evaluated, so the request is denied: {}", error.inner()));
        policy_ids.push(id);
    }
    (!policy_ids.is_empty()).then(|| Evaluation::deny(policy_ids, reasons))
}

/// The `@id`s and `@reason`s of `ids`, sorted by id for stable output.
fn describe(snapshot: &PolicySnapshot, ids: &[PolicyId]) -> (Vec<String>, Vec<String>) {
    let mut metas: Vec<_> = ids.iter().filter_map(|id| snapshot.meta(id)).collect();
    metas.sort_by(|a, b| a.id.cmp(&b.id));
    let policy_ids = metas.iter().map(|m| m.id.clone()).collect();
    let reasons = metas.iter().filter_map(|m| m.reason.clone()).collect();
    (policy_ids, reasons)
}

fn approval_terms(
    snapshot: &PolicySnapshot,
    in_the_way: &[PolicyId],
    permit_ids: Vec<String>,
    config: &DecisionConfig,
) -> ApprovalTerms {
    let metas: Vec<_> = in_the_way.iter().filter_map(|id| snapshot.meta(id)).collect();
    let approvers: BTreeSet<String> = metas.iter().filter_map(|m| m.approvers.clone()).collect();
    let timeout = metas.iter().filter_map(|m| m.timeout).min().unwrap_or(config.default_approval_timeout);
    let passkey: BTreeSet<String> = metas.iter().filter(|m| m.passkey).map(|m| m.id.clone()).collect();
    ApprovalTerms {
        approvers: approvers.into_iter().collect(),
        timeout,
        permit_ids,
        passkey: passkey.into_iter().collect(),
    }
}

/// The `@label`s of the policies `ids`.
fn labels_of(snapshot: &PolicySnapshot, ids: &[PolicyId]) -> Vec<String> {
    let labels: BTreeSet<String> =
        ids.iter().filter_map(|id| snapshot.meta(id)).filter_map(|m| m.label.clone()).collect();
    labels.into_iter().collect()
}

/// The context every request carries, built without JSON. Building it
/// evaluates `datetime(now)`, which parses the timestamp (6 % of wardend's
/// CPU at 32 callers): the contexts of the current millisecond, with and
/// without approval, are kept per thread and cloned (a clone shares them).
fn base_context(request: &NormalizedRequest, now: &str, approved: bool) -> Result<Context, RequestError> {
    /// The instant, the justification, and the context built for them.
    type Built = Option<(String, String, Context)>;
    thread_local! {
        /// Without approval, and with it.
        static LAST: RefCell<(Built, Built)> = const { RefCell::new((None, None)) };
    }
    fn pick(last: &mut (Built, Built), approved: bool) -> &mut Built {
        if approved { &mut last.1 } else { &mut last.0 }
    }
    let cached = LAST.with_borrow_mut(|last| match pick(last, approved) {
        Some((at, justification, context)) if at == now && *justification == request.justification => {
            Some(context.clone())
        }
        _ => None,
    });
    if let Some(context) = cached {
        return Ok(context);
    }
    let context = Context::from_pairs([
        ("now".to_owned(), datetime(now)),
        ("approved".to_owned(), RestrictedExpression::new_bool(approved)),
        ("justification".to_owned(), RestrictedExpression::new_string(request.justification.clone())),
    ])
    .map_err(|e| RequestError::Schema(e.to_string()))?;
    LAST.with_borrow_mut(|last| {
        *pick(last, approved) = Some((now.to_owned(), request.justification.clone(), context.clone()));
    });
    Ok(context)
}

/// `RestrictedExpression::new_datetime(now)`, shared by the requests of the
/// same millisecond on a thread: that call parses the name `datetime` with
/// Cedar's full parser each time (about 7 µs, 5 % of wardend's CPU at 32
/// concurrent callers).
fn datetime(now: &str) -> RestrictedExpression {
    thread_local! {
        static LAST: RefCell<Option<(String, RestrictedExpression)>> = const { RefCell::new(None) };
    }
    LAST.with_borrow_mut(|last| match last {
        Some((at, expression)) if at == now => expression.clone(),
        _ => {
            let expression = RestrictedExpression::new_datetime(now);
            *last = Some((now.to_owned(), expression.clone()));
            expression
        }
    })
}

/// The base context plus the harness's fields, read by Cedar's JSON reader,
/// which types them by the schema.
fn full_context(
    snapshot: &PolicySnapshot,
    request: &NormalizedRequest,
    action: &EntityUid,
    now: &str,
    approved: bool,
) -> Result<Context, RequestError> {
    let mut object = request.context.clone();
    object.insert("now".into(), serde_json::json!({ "__extn": { "fn": "datetime", "arg": now } }));
    object.insert("approved".into(), serde_json::Value::Bool(approved));
    object.insert("justification".into(), serde_json::Value::String(request.justification.clone()));
    Context::from_json_value(serde_json::Value::Object(object), Some((&snapshot.schema, action)))
        .map_err(|e| RequestError::Context(e.to_string()))
}

/// What Cedar is given for a request's first evaluation (`context.approved
/// = false`): its request, its entities, and the whole policy set, as
/// `decide` builds them. For measuring bare `Authorizer::is_authorized` on
/// the same policies and requests (`warden-bench`); a request that is
/// denied before Cedar runs (unknown user) is an error here.
pub fn cedar_inputs(
    snapshot: &PolicySnapshot,
    request: &NormalizedRequest,
    facts: &SessionFacts,
    now: OffsetDateTime,
) -> Result<(Request, Entities, Arc<cedar_policy::PolicySet>), String> {
    let evaluator = match Evaluator::new(snapshot, request, facts, now, false) {
        Ok(Ok(evaluator)) => evaluator,
        Ok(Err(denial)) => return Err(denial.reasons.join("; ")),
        Err(e) => return Err(e.to_string()),
    };
    let cedar_request = evaluator.request(false).map_err(|e| match e {
        RequestError::Context(message) | RequestError::Schema(message) => message,
    })?;
    Ok((cedar_request, Entities::clone(&evaluator.entities), Arc::clone(&snapshot.policies)))
}

/// The request's entities: the user's and agent's (cached per snapshot),
/// and, built per request, the session, the resource with its ancestors and
/// the action.
fn request_entities(
    snapshot: &PolicySnapshot,
    request: &NormalizedRequest,
    facts: &SessionFacts,
) -> Result<(Entities, Ancestors), String> {
    let (entities, mut ancestors) = build_entities(snapshot, &[request], facts, false)?
        .ok_or_else(|| "cannot build the request's entities".to_owned())?;
    ancestors.pop().ok_or_else(|| "cannot build the request's entities".to_owned()).map(|a| (entities, a))
}

/// The entities of the parts of one command, built together (one closure
/// over the principal's side and every part's resource); `None` when two
/// parts' resources share an id with different attributes (each part then
/// builds its own) or any part's cannot be built.
fn parts_entities(
    snapshot: &PolicySnapshot,
    requests: &[&NormalizedRequest],
    facts: &SessionFacts,
) -> Option<(Entities, Vec<Ancestors>)> {
    build_entities(snapshot, requests, facts, true).ok().flatten()
}

/// The entities of `requests` (one actor): the session, each resource with
/// its ancestors, each action. `shared`: several requests' resources in one
/// set, `None` if two of them conflict.
fn build_entities(
    snapshot: &PolicySnapshot,
    requests: &[&NormalizedRequest],
    facts: &SessionFacts,
    shared: bool,
) -> Result<Option<(Entities, Vec<Ancestors>)>, String> {
    let Some(first) = requests.first() else { return Ok(None) };
    let types = &snapshot.types;
    let actor = &first.actor;
    let side = snapshot.principals.get(&snapshot.entities, &snapshot.types, &actor.user, &actor.agent)?;
    let known = Some(&side.entities);
    let mut out: HashMap<EntityUid, Entity> = HashMap::new();

    let session_attrs = HashMap::from([
        ("user".to_owned(), RestrictedExpression::new_string(actor.user.clone())),
        ("agent".to_owned(), RestrictedExpression::new_string(actor.agent.clone())),
        (
            "labels".to_owned(),
            RestrictedExpression::new_set(facts.labels.iter().cloned().map(RestrictedExpression::new_string)),
        ),
        ("harness".to_owned(), RestrictedExpression::new_string(facts.harness.clone())),
        ("owner".to_owned(), RestrictedExpression::new_entity_uid(uid(&types.user, &actor.user))),
    ]);
    let session_uid = uid(&types.session, &actor.session);
    let session = Entity::new(session_uid.clone(), session_attrs, side.parents.clone())
        .map_err(|e| format!("cannot build the session entity: {e}"))?;
    out.insert(session_uid.clone(), session);
    let mut overlap = side.entities.get(&session_uid).is_some();
    let mut resources: HashMap<EntityUid, Entity> = HashMap::new();
    let mut all_ancestors = Vec::with_capacity(requests.len());

    for request in requests {
        let (resource_type, ancestor_type) = types.of(&request.resource);
        let (ancestor_ids, attrs) = resource_shape(&request.resource);
        // The chain nearest first: each ancestor's parents are the ones after it.
        let chain: Vec<EntityUid> = ancestor_ids.iter().map(|id| uid(ancestor_type, id)).collect();
        // From the farthest down, so that an ancestor made here gets as
        // parents everything above it, the declared ancestors of those
        // in entities.json included: the set is transitively closed as
        // built (see `add_built`).
        let mut parents = HashSet::new();
        for ancestor in chain.iter().rev() {
            let above: Vec<EntityUid> = parents.iter().cloned().collect();
            parents.extend(add_known(&snapshot.entities, ancestor.clone(), &above, &mut out, known));
        }
        let resource_uid = uid(resource_type, &request.resource.entity_id());
        // Attributes come from the request; parents declared in entities.json for
        // the same uid are kept too.
        if let Some(found) = snapshot.entities.ancestors(&resource_uid) {
            for ancestor in found.cloned().collect::<Vec<_>>() {
                parents.extend(add_known(&snapshot.entities, ancestor, &[], &mut out, known));
            }
        }
        let resource = Entity::new(resource_uid.clone(), attrs, parents.clone())
            .map_err(|e| format!("cannot build the resource entity: {e}"))?;
        // The session and the resource built here are what Cedar sees under
        // their ids, whatever entities.json says.
        overlap |= side.entities.get(&resource_uid).is_some();
        match resources.get(&resource_uid) {
            Some(existing) if existing != &resource => return Ok(None),
            _ => {
                resources.insert(resource_uid, resource);
            }
        }
        if let Some(action) = snapshot.actions.get(&request.action).and_then(|a| a.entity.clone())
            && side.entities.get(&action.uid()).is_none()
        {
            out.insert(action.uid(), action);
        }
        all_ancestors.push(Ancestors { principal: side.parents.clone(), resource: parents });
    }
    if shared && (overlap || resources.contains_key(&session_uid)) {
        return Ok(None);
    }
    // A resource is what the request says it is, also where it names an
    // ancestor's id.
    out.extend(resources);

    let entities = if overlap {
        // Only with a schema where users or agents sit under a resource or
        // session entity: build the whole set afresh, the request's own
        // entities replacing the cached ones.
        let mut all: HashMap<EntityUid, Entity> = side.entities.iter().map(|e| (e.uid(), e.clone())).collect();
        all.extend(out);
        Entities::from_entities(all.into_values(), None).map_err(|e| e.to_string())
    } else {
        add_built(&side.entities, out.into_values())
    }
    .map_err(|e| format!("cannot build the request's entities: {e}"))?;
    Ok(Some((entities, all_ancestors)))
}

/// The principal's side with the request's entities added, without
/// computing the transitive closure again: `Entities::add_entities` would
/// walk every entity's ancestors on every request (a tenth of a decision's
/// time in the profile), and the request's entities are built closed (a
/// resource's parents are its whole chain and the declared ancestors of
/// each link, a made ancestor's parents everything above it, the session's
/// the principal side's closed parents). Debug builds, and so every test,
/// check that the result is closed instead of assuming it.
fn add_built(side: &Entities, built: impl IntoIterator<Item = Entity>) -> Result<Entities, String> {
    use cedar_policy_core::entities::{NoEntitiesSchema, TCComputation};
    let tc = if cfg!(debug_assertions) {
        TCComputation::EnforceAlreadyComputed
    } else {
        TCComputation::AssumeAlreadyComputed
    };
    let core: &cedar_policy_core::entities::Entities = side.as_ref();
    let added = core
        .clone()
        .add_entities(
            built.into_iter().map(|e| std::sync::Arc::new(e.as_ref().clone())),
            None::<&NoEntitiesSchema>,
            tc,
            cedar_policy_core::extensions::Extensions::all_available(),
        )
        .map_err(|e| e.to_string())?;
    Ok(Entities::from(added))
}

/// The ancestor ids (nearest first) and the attributes of a resource.
fn resource_shape(resource: &Resource) -> (Vec<&str>, HashMap<String, RestrictedExpression>) {
    let s = |v: &str| RestrictedExpression::new_string(v.to_owned());
    match resource {
        // A path may name a folder (`grep -r src`, `find .`): what is read
        // there is in that folder, so the file is also in `Dir::"<path>"`.
        Resource::File { path, name, extension, dirs, pattern } => (
            std::iter::once(path.as_str()).filter(|p| *p != "/").chain(dirs.iter().map(String::as_str)).collect(),
            HashMap::from([
                ("path".to_owned(), s(path)),
                ("name".to_owned(), s(name)),
                ("extension".to_owned(), s(extension)),
                ("pattern".to_owned(), RestrictedExpression::new_bool(*pattern)),
            ]),
        ),
        Resource::Command { program, argv, args, cwd, opaque, .. } => (
            vec![program.as_str()],
            HashMap::from([
                ("program".to_owned(), s(program)),
                ("argv".to_owned(), s(argv)),
                ("args".to_owned(), RestrictedExpression::new_set(args.iter().map(|a| s(a)))),
                ("cwd".to_owned(), s(cwd)),
                ("opaque".to_owned(), RestrictedExpression::new_bool(*opaque)),
            ]),
        ),
        Resource::Url { scheme, host, port, path, method, domains, .. } => (
            domains.iter().map(String::as_str).collect(),
            HashMap::from([
                ("scheme".to_owned(), s(scheme)),
                ("host".to_owned(), s(host)),
                ("port".to_owned(), RestrictedExpression::new_long(i64::from(*port))),
                ("path".to_owned(), s(path)),
                ("method".to_owned(), s(method)),
            ]),
        ),
        Resource::Secret { name } => (vec![], HashMap::from([("name".to_owned(), s(name))])),
        Resource::Tool { server, name, arguments } => (
            vec![server.as_str()],
            HashMap::from([
                ("server".to_owned(), s(server)),
                ("name".to_owned(), s(name)),
                ("arguments".to_owned(), s(arguments)),
            ]),
        ),
    }
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
