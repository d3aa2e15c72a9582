//! A solver's counterexample made into something a person can read and run
//! again: the outcome each set gives it by Warden's rules (decided here with
//! Cedar's ordinary authorizer, a policy's evaluation error denying), the
//! request in Warden's terms, and the `wardenctl authorize --explain` line;
//! then that request decided by Warden's own `decide` with both folders.

use std::collections::BTreeMap;

use cedar_policy::{
    Authorizer, Context, Decision, Entities, EntityUid, EvalResult, PolicyId, PolicySet, Request, RestrictedExpression,
};
use serde::Serialize;
use time::OffsetDateTime;

use crate::decision::{DecisionConfig, Outcome, SessionFacts, decide};
use crate::normalize::{Actor, RequestInput, ResourceInput, normalize, quote_argv};
use crate::policy::PolicySnapshot;

/// The outcome one set gives a request, and the policies that decided it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decided {
    /// ALLOW, DENY or PENDING.
    #[serde(serialize_with = "outcome_name")]
    pub outcome: Outcome,
    /// The `@id`s of the policies that decided (for PENDING, those in the way).
    pub policies: Vec<String>,
}

fn outcome_name<S: serde::Serializer>(outcome: &Outcome, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(outcome.as_str())
}

/// What one Cedar evaluation says.
struct Evaluated {
    allowed: bool,
    /// The policies that determined it (permits when allowed, forbids when not).
    ids: Vec<PolicyId>,
    /// The first policy that failed to evaluate, if any (Warden denies).
    failed: Option<PolicyId>,
}

fn evaluate(set: &PolicySet, request: &Request, entities: &Entities) -> Evaluated {
    let response = Authorizer::new().is_authorized(request, set, entities);
    let failed = response.diagnostics().errors().next().map(|error| {
        let cedar_policy::AuthorizationError::PolicyEvaluationError(error) = error;
        error.policy_id().clone()
    });
    Evaluated {
        allowed: response.decision() == Decision::Allow,
        ids: response.diagnostics().reason().cloned().collect(),
        failed,
    }
}

/// `request` with `context.approved` set to `approved`.
fn with_approved(request: &Request, approved: bool) -> Option<Request> {
    let context = request.context()?.clone();
    let pairs = context
        .into_iter()
        .map(|(k, v)| if k == "approved" { (k, RestrictedExpression::new_bool(approved)) } else { (k, v) });
    let context = Context::from_pairs(pairs).ok()?;
    Request::new(request.principal()?.clone(), request.action()?.clone(), request.resource()?.clone(), context, None)
        .ok()
}

/// The outcome of `request` under `snapshot`'s policies by Warden's rules,
/// without a grant and with one.
pub(crate) fn outcomes(
    snapshot: &PolicySnapshot,
    request: &Request,
    entities: &Entities,
) -> Option<(Decided, Decided)> {
    let set = snapshot.policies.as_ref();
    let name = |ids: &[PolicyId]| -> Vec<String> {
        ids.iter().map(|id| snapshot.meta(id).map_or_else(|| id.to_string(), |m| m.id.clone())).collect()
    };
    let decided = |outcome, ids: &[PolicyId]| Decided { outcome, policies: name(ids) };
    let alone = evaluate(set, &with_approved(request, false)?, entities);
    let approved = evaluate(set, &with_approved(request, true)?, entities);
    let plain = if let Some(failed) = &alone.failed {
        decided(Outcome::Deny, std::slice::from_ref(failed))
    } else if alone.allowed {
        decided(Outcome::Allow, &alone.ids)
    } else if let Some(failed) = &approved.failed {
        decided(Outcome::Deny, std::slice::from_ref(failed))
    } else if approved.allowed {
        let in_the_way: Vec<PolicyId> = alone
            .ids
            .iter()
            .filter(|id| set.policy(id).is_some_and(|p| p.effect() == cedar_policy::Effect::Forbid))
            .cloned()
            .collect();
        decided(Outcome::Pending, &in_the_way)
    } else if approved.ids.is_empty() {
        decided(Outcome::Deny, &alone.ids)
    } else {
        decided(Outcome::Deny, &approved.ids)
    };
    // Under a grant: one evaluation as approved; allowed, or no policy
    // matched at all (the grant is the permit), is ALLOW.
    let granted = if let Some(failed) = &approved.failed {
        decided(Outcome::Deny, std::slice::from_ref(failed))
    } else if approved.allowed || approved.ids.is_empty() {
        decided(Outcome::Allow, &approved.ids)
    } else {
        decided(Outcome::Deny, &approved.ids)
    };
    Some((plain, granted))
}

/// A counterexample in Warden's terms.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Example {
    /// The user.
    pub user: String,
    /// The kind of agent.
    pub agent: String,
    /// The session id.
    pub session: String,
    /// Labels the session holds.
    pub labels: Vec<String>,
    /// The harness credential's name the session was started by.
    pub harness: String,
    /// The action.
    pub action: String,
    /// The resource as Cedar sees it, e.g. `File::"/etc/passwd"`.
    pub resource: String,
    /// Its attributes.
    pub attributes: BTreeMap<String, String>,
    /// The context fields a harness or gate sends (not `now`, `approved`).
    pub context: BTreeMap<String, serde_json::Value>,
    /// Why the agent asked.
    pub justification: String,
    /// The entities that matter: the user's groups, the resource's parents.
    pub entities: Vec<String>,
    /// The resource as `wardenctl authorize` takes it, when it can be built.
    #[serde(skip)]
    pub(crate) input: Option<ResourceInput>,
}

fn text(value: &EvalResult) -> String {
    match value {
        EvalResult::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn json(value: &EvalResult) -> serde_json::Value {
    match value {
        EvalResult::Bool(b) => serde_json::Value::Bool(*b),
        EvalResult::Long(n) => serde_json::Value::from(*n),
        EvalResult::String(s) => serde_json::Value::String(s.clone()),
        EvalResult::Set(items) => serde_json::Value::Array(items.iter().map(json).collect()),
        EvalResult::Record(fields) => {
            serde_json::Value::Object(fields.iter().map(|(k, v)| (k.clone(), json(v))).collect())
        }
        other => serde_json::Value::String(other.to_string()),
    }
}

/// An attribute of `uid` in `entities`.
fn attr(entities: &Entities, uid: &EntityUid, name: &str) -> Option<EvalResult> {
    entities.get(uid)?.attr(name)?.ok()
}

/// A name Warden accepts where the solver chose an empty one: no policy
/// names it, so it decides like any other unnamed value.
fn or_some(value: String, fallback: &str) -> String {
    if value.is_empty() { fallback.to_owned() } else { value }
}

impl Example {
    /// The counterexample `request` with its `entities`.
    pub(crate) fn new(request: &Request, entities: &Entities) -> Option<Self> {
        let principal = request.principal()?;
        let resource = request.resource()?;
        let action = request.action()?.id().unescaped().to_owned();
        let owner = match attr(entities, principal, "owner") {
            Some(EvalResult::EntityUid(uid)) => Some(uid),
            _ => None,
        };
        let user = match (&owner, attr(entities, principal, "user")) {
            (Some(owner), _) => owner.id().unescaped().to_owned(),
            (None, Some(user)) => text(&user),
            _ => String::new(),
        };
        let labels = match attr(entities, principal, "labels") {
            Some(EvalResult::Set(items)) => items.iter().map(text).collect(),
            _ => vec![],
        };
        let mut out_entities = Vec::new();
        if let Some(owner) = &owner
            && let Some(ancestors) = entities.ancestors(owner)
        {
            let mut names: Vec<String> = ancestors.map(ToString::to_string).collect();
            names.sort();
            if !names.is_empty() {
                out_entities.push(format!("{owner} in {}", names.join(", ")));
            }
        }
        let mut attributes = BTreeMap::new();
        if let Some(entity) = entities.get(resource) {
            for name in ["path", "name", "extension", "pattern", "program", "argv", "args", "cwd", "opaque"]
                .into_iter()
                .chain(["scheme", "host", "port", "method", "server", "arguments"])
            {
                if let Some(Ok(value)) = entity.attr(name) {
                    attributes.insert(name.to_owned(), value.to_string());
                }
            }
            if let Some(ancestors) = entities.ancestors(resource) {
                let mut names: Vec<String> = ancestors.map(ToString::to_string).collect();
                names.sort();
                if !names.is_empty() {
                    out_entities.push(format!("{resource} in {}", names.join(", ")));
                }
            }
        }
        let mut context = BTreeMap::new();
        let mut justification = String::new();
        if let Some(ctx) = request.context() {
            for (key, _) in ctx.clone() {
                let Some(value) = ctx.get(&key) else { continue };
                match key.as_str() {
                    "now" | "approved" => {}
                    "justification" => justification = text(&value),
                    _ => {
                        context.insert(key, json(&value));
                    }
                }
            }
        }
        let string = |name: &str| attr(entities, resource, name).map(|v| text(&v)).unwrap_or_default();
        let input = match resource.type_name().to_string().as_str() {
            "File" => Some(ResourceInput::File { path: string("path"), cwd: String::new(), pattern: false }),
            "Command" => {
                let mut argv = vec![string("program")];
                if let Some(EvalResult::Set(args)) = attr(entities, resource, "args") {
                    argv.extend(args.iter().map(text));
                }
                Some(ResourceInput::Command { argv, cwd: string("cwd") })
            }
            "Url" => {
                let port = match attr(entities, resource, "port") {
                    Some(EvalResult::Long(port)) => port,
                    _ => 0,
                };
                let url = format!("{}://{}:{port}{}", string("scheme"), string("host"), string("path"));
                Some(ResourceInput::Http { method: string("method"), url })
            }
            "Secret" => Some(ResourceInput::Secret { name: string("name") }),
            "Tool" => Some(ResourceInput::Tool {
                server: string("server"),
                name: string("name"),
                arguments_json: or_some(string("arguments"), "{}"),
            }),
            _ => None,
        };
        Some(Self {
            user,
            agent: or_some(attr(entities, principal, "agent").map(|v| text(&v)).unwrap_or_default(), "some-agent"),
            session: or_some(principal.id().unescaped().to_owned(), "some-session"),
            labels,
            harness: attr(entities, principal, "harness").map(|v| text(&v)).unwrap_or_default(),
            action,
            resource: resource.to_string(),
            attributes,
            context,
            justification,
            entities: out_entities,
            input,
        })
    }

    /// The request as Warden's API takes it.
    pub(crate) fn request_input(&self) -> Option<RequestInput> {
        Some(RequestInput {
            request_id: String::new(),
            actor: Actor { user: self.user.clone(), agent: self.agent.clone(), session: self.session.clone() },
            action: self.action.clone(),
            resource: self.input.clone()?,
            justification: self.justification.clone(),
            context_json: if self.context.is_empty() {
                String::new()
            } else {
                serde_json::Value::Object(self.context.clone().into_iter().collect()).to_string()
            },
        })
    }

    /// `wardenctl authorize --explain --policies DIR …` for this request.
    pub fn wardenctl(&self, dir: &str) -> Option<String> {
        let input = self.request_input()?;
        let mut words: Vec<String> =
            ["wardenctl", "authorize", "--explain", "--policies", dir].map(str::to_owned).into();
        for (flag, value) in [("--user", &self.user), ("--agent", &self.agent), ("--session", &self.session)] {
            words.extend([flag.to_owned(), value.clone()]);
        }
        for label in &self.labels {
            words.extend(["--label".to_owned(), label.clone()]);
        }
        if !self.justification.is_empty() {
            words.extend(["--justification".to_owned(), self.justification.clone()]);
        }
        if !input.context_json.is_empty() {
            words.extend(["--context-json".to_owned(), input.context_json.clone()]);
        }
        let known = ["fs.", "exec", "http.", "secret.", "tool."].iter().any(|p| self.action.starts_with(p));
        match &input.resource {
            ResourceInput::Command { cwd, .. } if !cwd.is_empty() => words.extend(["--cwd".to_owned(), cwd.clone()]),
            _ => {}
        }
        if !known {
            let kind = match &input.resource {
                ResourceInput::File { .. } => "file",
                ResourceInput::Command { .. } => "command",
                ResourceInput::Http { .. } => "http",
                ResourceInput::Secret { .. } => "secret",
                ResourceInput::Tool { .. } => "tool",
            };
            words.extend(["--kind".to_owned(), kind.to_owned()]);
        }
        words.push(self.action.clone());
        words.push("--".to_owned());
        match input.resource {
            ResourceInput::File { path, .. } => words.push(path),
            ResourceInput::Command { argv, .. } => words.extend(argv),
            ResourceInput::Http { method, url } => words.extend([method, url]),
            ResourceInput::Secret { name } => words.push(name),
            ResourceInput::Tool { server, name, arguments_json } => words.extend([server, name, arguments_json]),
        }
        Some(quote_argv(&words))
    }

    /// This request decided by Warden's own `decide` with `snapshot`, the
    /// session holding the example's labels; `Err` says why it could not be.
    pub(crate) fn decide(&self, snapshot: &PolicySnapshot) -> Result<Decided, String> {
        let input = self.request_input().ok_or("the resource has no form Warden takes")?;
        let request = normalize(&input).map_err(|e| e.to_string())?;
        let facts = SessionFacts {
            labels: self.labels.iter().cloned().collect(),
            harness: self.harness.clone(),
            grants: None,
            blocked: None,
        };
        let evaluation = decide(snapshot, &request, &facts, OffsetDateTime::now_utc(), &DecisionConfig::default())
            .map_err(|e| e.to_string())?;
        Ok(Decided { outcome: evaluation.outcome, policies: evaluation.policy_ids.clone() })
    }
}
