//! Proofs about policy sets, outside the decision path: what a change of
//! the policy folder allows or stops (`wardenctl policy diff`), proved by
//! Cedar's symbolic compiler (`cedar-policy-symcc`, modelled in Lean) and
//! the cvc5 solver, a process of its own.
//!
//! - `variants`: the three Cedar questions Warden's outcome is made of
//!   (allowed alone, allowed once approved, allowed under a grant), each
//!   a policy set the solver can compare (pure);
//! - `facts`: what holds of every request Warden builds (a session in its
//!   user's groups, a file in the folders above it …), given to the solver
//!   so that its counterexamples are requests that can happen (pure);
//! - `solver`: the cvc5 process;
//! - `example`: a counterexample decided again by Warden's rules with both
//!   sets, in Warden's terms, with the `wardenctl` line that reproduces it,
//!   and decided by `decision::decide` itself;
//! - `slice`: the shared policies a comparison can leave out, their scopes
//!   disjoint from every changed policy's under the facts (pure);
//! - `diff`: the comparison, per request environment of the schema;
//! - `invariants`: a folder's `invariants/*.cedar` proved against its
//!   policies (`policy check`, and every load of the monitor).
//!
//! Nothing here is on a decision's path: the monitor decides with
//! `decision` alone.

mod diff;
mod example;
mod facts;
mod invariants;
mod slice;
mod solver;
mod variants;

use std::collections::BTreeMap;

use cedar_policy::Entities;
use serde_json::Value;

pub use diff::{DiffReport, EnvDiff, Finding, Folder, Reproduced, Under, Verdict, diff};
pub use example::{Decided, Example};
pub use invariants::{InvariantProof, Proof, prove_invariants};
pub use solver::{Solver, find_cvc5};

/// How the entities changed, a line each: who was added or removed, whose
/// parents or attributes differ.
pub(crate) fn entity_changes(old: &Entities, new: &Entities) -> Vec<String> {
    let index = |entities: &Entities| -> BTreeMap<String, (Value, Value)> {
        let Ok(Value::Array(items)) = entities.to_json_value() else { return BTreeMap::new() };
        items
            .into_iter()
            .map(|item| {
                let uid = item.get("uid").cloned().unwrap_or(Value::Null);
                let name = match (uid.get("type").and_then(Value::as_str), uid.get("id").and_then(Value::as_str)) {
                    (Some(kind), Some(id)) => format!("{kind}::{}", facts::quote(id)),
                    _ => uid.to_string(),
                };
                let mut parents: Vec<String> = item
                    .get("parents")
                    .and_then(Value::as_array)
                    .map(|p| p.iter().map(Value::to_string).collect())
                    .unwrap_or_default();
                parents.sort();
                (name, (Value::from(parents), item.get("attrs").cloned().unwrap_or(Value::Null)))
            })
            .collect()
    };
    let (old, new) = (index(old), index(new));
    let mut out = Vec::new();
    for (name, (parents, attrs)) in &new {
        match old.get(name) {
            None => out.push(format!("{name} added")),
            Some((old_parents, old_attrs)) => {
                if old_parents != parents {
                    out.push(format!("{name}: parents {old_parents} -> {parents}"));
                }
                if old_attrs != attrs {
                    out.push(format!("{name}: attributes {old_attrs} -> {attrs}"));
                }
            }
        }
    }
    out.extend(old.keys().filter(|name| !new.contains_key(*name)).map(|name| format!("{name} removed")));
    out
}
