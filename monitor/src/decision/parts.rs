//! A command as its parts: which requests it is made of, and the strictest outcome of theirs, one line per part.

use super::*;

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
pub(super) fn runs_nothing(blocked: &Option<String>) -> Evaluation {
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
pub(super) fn is_itself(parts: &[(Part, NormalizedRequest)], request: &NormalizedRequest) -> bool {
    match parts {
        [] => false,
        [(_, only)] => only.action == request.action && only.resource == request.resource,
        _ => false,
    }
}

/// The strictest outcome of the parts (DENY over PENDING over ALLOW), with
/// the reasons of the parts that decided, each naming its part.
pub(super) fn combine(decided: &[(&Part, Evaluation)]) -> Evaluation {
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
