//! The three Cedar questions Warden's outcome is made of, each a policy set
//! of its own, so that the solver can compare two sets question by question.
//!
//! Warden decides a request twice (DESIGN.md "The decision"): with
//! `context.approved = false` (allowed: ALLOW), then with `true` (allowed:
//! PENDING, else DENY); under a grant once with `true`, where it allows
//! unless a forbid matches. So a set `P` answers, for each request:
//! - [`Question::Alone`]: does `P` allow it without a person? `P` with every
//!   `context.approved` read as `false`;
//! - [`Question::Approved`]: does `P` allow it once a person approves? `P`
//!   with `context.approved` read as `true`;
//! - [`Question::Granted`]: does a grant let it through? `P`'s forbids with
//!   `context.approved` read as `true`, beside one permit of everything.
//!
//! Two sets give every request the same outcome exactly when they answer
//! the three questions alike. Pure: no solver here.

use cedar_policy::{Effect, Policy, PolicyId, PolicySet};
use serde_json::Value;

/// One of the three questions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Question {
    /// Allowed without a person (ALLOW).
    Alone,
    /// Allowed once a person approves (PENDING when not [`Question::Alone`]).
    Approved,
    /// Allowed under a grant (no forbid in the way).
    Granted,
}

impl Question {
    pub(crate) const ALL: [Question; 3] = [Question::Alone, Question::Approved, Question::Granted];
}

/// `set` made into the policy set that answers `question`, with the
/// assumptions `facts` (forbids that hold back requests Warden never
/// builds) added. `Err` names a policy that reads `context` in a way that
/// cannot be rewritten (the whole record as a value).
pub(crate) fn question_set(set: &PolicySet, question: Question, facts: &PolicySet) -> Result<PolicySet, String> {
    let approved = question != Question::Alone;
    let mut out = PolicySet::new();
    for policy in set.policies() {
        if question == Question::Granted && policy.effect() != Effect::Forbid {
            continue;
        }
        out.add(approved_as(policy, approved)?).map_err(|e| e.to_string())?;
    }
    if question == Question::Granted {
        let everything: Policy =
            Policy::parse(Some(PolicyId::new("warden-grant")), "permit (principal, action, resource);")
                .map_err(|e| e.to_string())?;
        out.add(everything).map_err(|e| e.to_string())?;
    }
    for fact in facts.policies() {
        out.add(fact.clone()).map_err(|e| e.to_string())?;
    }
    Ok(out)
}

/// `policy` with `context.approved` (and `context has approved`, true in
/// every schema Warden accepts) replaced by the literal `value`.
pub(crate) fn approved_as(policy: &Policy, value: bool) -> Result<Policy, String> {
    let mut json = policy.to_json().map_err(|e| e.to_string())?;
    let mut bare = false;
    rewrite(&mut json, value, &mut bare);
    if bare {
        return Err(format!(
            "policy {} reads `context` as a whole value, which the analysis cannot split into \
             the decision with and without a person's approval",
            policy.id()
        ));
    }
    Policy::from_json(Some(policy.id().clone()), json).map_err(|e| e.to_string())
}

/// Whether `json` is `{"Var": "context"}`.
fn is_context(json: &Value) -> bool {
    json.get("Var").and_then(Value::as_str) == Some("context")
}

fn rewrite(json: &mut Value, value: bool, bare: &mut bool) {
    match json {
        Value::Object(map) => {
            // `context.approved` is {".": {"left": {"Var": "context"}, "attr": "approved"}},
            // `context has approved` is {"has": {...the same...}}.
            for op in [".", "has"] {
                let reads_approved = map.get(op).is_some_and(|inner| {
                    inner.get("left").is_some_and(is_context)
                        && inner.get("attr").and_then(Value::as_str) == Some("approved")
                });
                if reads_approved && map.len() == 1 {
                    let literal = if op == "." { value } else { true };
                    *json = serde_json::json!({ "Value": literal });
                    return;
                }
            }
            for (key, inner) in map.iter_mut() {
                // `context.x`, `context has x`: the record's other fields stay.
                let reads_field = (key == "." || key == "has") && inner.get("left").is_some_and(is_context);
                if reads_field {
                    if let Value::Object(fields) = inner {
                        for (field, v) in fields.iter_mut() {
                            if field != "left" {
                                rewrite(v, value, bare);
                            }
                        }
                    }
                    continue;
                }
                if is_context(inner) {
                    *bare = true;
                }
                rewrite(inner, value, bare);
            }
        }
        Value::Array(items) => {
            for item in items {
                if is_context(item) {
                    *bare = true;
                }
                rewrite(item, value, bare);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(text: &str) -> Policy {
        Policy::parse(Some(PolicyId::new("p")), text).unwrap_or_else(|e| unreachable!("{e}"))
    }

    #[test]
    fn approved_becomes_a_literal_and_other_context_fields_stay() {
        let policy = one(
            r#"permit (principal, action, resource) when { context.approved && context.justification == "x" && context has approved };"#,
        );
        let alone = approved_as(&policy, false).unwrap_or_else(|e| unreachable!("{e}")).to_string();
        assert!(alone.contains("false"), "{alone}");
        assert!(!alone.contains("approved"), "{alone}");
        assert!(alone.contains("justification"), "{alone}");
        let approved = approved_as(&policy, true).unwrap_or_else(|e| unreachable!("{e}")).to_string();
        assert!(!approved.contains("approved") && approved.contains("true"), "{approved}");
    }

    #[test]
    fn the_whole_context_as_a_value_is_refused() {
        let policy = one(r#"permit (principal, action, resource) when { context == {"approved": true} };"#);
        assert!(approved_as(&policy, false).is_err());
    }

    #[test]
    fn the_granted_question_keeps_only_forbids_beside_a_permit_of_everything() {
        let set: PolicySet = r#"
            permit (principal, action, resource);
            forbid (principal, action, resource) unless { context.approved };
        "#
        .parse()
        .unwrap_or_else(|e| unreachable!("{e}"));
        let granted = question_set(&set, Question::Granted, &PolicySet::new()).unwrap_or_else(|e| unreachable!("{e}"));
        let text = granted.to_string();
        assert_eq!(granted.policies().count(), 2, "{text}");
        assert!(text.contains("unless"), "{text}");
        assert!(!text.contains("approved"), "{text}");
    }
}
