//! The policy index: at load time, policies are grouped by the actions they
//! can apply to and carry their principal and resource scope; a request
//! evaluates only the policies whose scope can match its principal's and
//! resource's ancestor sets. A policy whose scope does not match is never
//! satisfied and never evaluated (so never errs), so the slice decides
//! exactly as the whole set does. Slices are cached by the set of policies
//! they hold.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use cedar_policy::{
    ActionConstraint, Entities, EntityTypeName, EntityUid, Policy, PolicySet, PrincipalConstraint, ResourceConstraint,
};

use crate::entities::Ancestors;

/// The positions (in [`PolicyIndex::scoped`]) of the policies in a slice.
type SliceKey = Vec<u32>;

/// Slices kept before the cache starts over. Each holds its own copies of
/// a few policies (about 2 KiB each in Cedar's form): 1,024 bound the cache
/// to a few MiB, while a miss costs less than one Cedar evaluation.
const CACHE: usize = 1024;

/// A scope constraint on the principal or the resource.
#[derive(Debug, Clone)]
enum Scope {
    Any,
    Eq(EntityUid),
    In(EntityUid),
    Is(EntityTypeName),
    IsIn(EntityTypeName, EntityUid),
}

impl Scope {
    fn matches(&self, uid: &EntityUid, ancestors: &HashSet<EntityUid>) -> bool {
        let within = |target: &EntityUid| target == uid || ancestors.contains(target);
        match self {
            Scope::Any => true,
            Scope::Eq(target) => target == uid,
            Scope::In(target) => within(target),
            Scope::Is(type_name) => uid.type_name() == type_name,
            Scope::IsIn(type_name, target) => uid.type_name() == type_name && within(target),
        }
    }
}

#[derive(Debug)]
struct Scoped {
    policy: Policy,
    principal: Scope,
    resource: Scope,
}

impl Scope {
    /// The entity a request's resource (or one of its ancestors) must be for
    /// this scope to match; `None` when any entity of the right type may.
    fn target(&self) -> Option<&EntityUid> {
        match self {
            Scope::Eq(uid) | Scope::In(uid) | Scope::IsIn(_, uid) => Some(uid),
            Scope::Any | Scope::Is(_) => None,
        }
    }
}

/// One action's policies (positions in [`PolicyIndex::scoped`]), reachable
/// by the entity their resource scope names.
#[derive(Debug, Default)]
struct ActionPolicies {
    /// Positions of policies whose resource scope names an entity, by it.
    by_resource: HashMap<EntityUid, Vec<u32>>,
    /// Positions of policies whose resource scope names none.
    any_resource: Vec<u32>,
}

/// Policies by action, with their scopes.
#[derive(Debug, Default)]
pub(crate) struct PolicyIndex {
    /// Every policy once (a copy per action cost 13 MiB at 10,000 policies).
    scoped: Vec<Scoped>,
    by_action: HashMap<String, ActionPolicies>,
    cache: Mutex<HashMap<SliceKey, Arc<PolicySet>>>,
}

impl PolicyIndex {
    /// Indexes `policies` for the actions of the schema (`action_entities`
    /// gives each action's groups, for `action in Action::"group"`).
    pub(crate) fn build(policies: &PolicySet, actions: &[EntityUid], action_entities: &Entities) -> Self {
        let scoped: Vec<Scoped> = policies
            .policies()
            .map(|policy| Scoped {
                principal: match policy.principal_constraint() {
                    PrincipalConstraint::Any => Scope::Any,
                    PrincipalConstraint::Eq(uid) => Scope::Eq(uid),
                    PrincipalConstraint::In(uid) => Scope::In(uid),
                    PrincipalConstraint::Is(type_name) => Scope::Is(type_name),
                    PrincipalConstraint::IsIn(type_name, uid) => Scope::IsIn(type_name, uid),
                },
                resource: match policy.resource_constraint() {
                    ResourceConstraint::Any => Scope::Any,
                    ResourceConstraint::Eq(uid) => Scope::Eq(uid),
                    ResourceConstraint::In(uid) => Scope::In(uid),
                    ResourceConstraint::Is(type_name) => Scope::Is(type_name),
                    ResourceConstraint::IsIn(type_name, uid) => Scope::IsIn(type_name, uid),
                },
                policy: policy.clone(),
            })
            .collect();
        let mut by_action: HashMap<String, ActionPolicies> = HashMap::new();
        for action in actions {
            let groups: HashSet<EntityUid> =
                action_entities.ancestors(action).map(|found| found.cloned().collect()).unwrap_or_default();
            let entry = by_action.entry(action.id().unescaped().to_owned()).or_default();
            for (at, s) in scoped.iter().enumerate() {
                let applies = match s.policy.action_constraint() {
                    ActionConstraint::Any => true,
                    ActionConstraint::Eq(target) => &target == action,
                    ActionConstraint::In(targets) => targets.iter().any(|t| t == action || groups.contains(t)),
                };
                let Ok(at) = u32::try_from(at) else { continue };
                if applies {
                    match s.resource.target() {
                        Some(uid) => entry.by_resource.entry(uid.clone()).or_default().push(at),
                        None => entry.any_resource.push(at),
                    }
                }
            }
        }
        Self { scoped, by_action, cache: Mutex::new(HashMap::new()) }
    }

    /// The policies whose scope can match this request.
    pub(crate) fn slice(
        &self,
        action: &str,
        principal: &EntityUid,
        resource: &EntityUid,
        ancestors: &Ancestors,
    ) -> Arc<PolicySet> {
        let Some(policies) = self.by_action.get(action) else { return Arc::new(PolicySet::new()) };
        // Candidates: the policies naming the resource or one of its
        // ancestors, and those naming no resource entity; the cost follows
        // the candidates, not the size of the policy set.
        let mut positions: Vec<u32> = policies.any_resource.clone();
        for uid in std::iter::once(resource).chain(ancestors.resource.iter()) {
            if let Some(found) = policies.by_resource.get(uid) {
                positions.extend_from_slice(found);
            }
        }
        positions.sort_unstable();
        positions.dedup();
        let scoped = &self.scoped;
        positions.retain(|&at| {
            scoped.get(at as usize).is_some_and(|s| {
                s.principal.matches(principal, &ancestors.principal)
                    && s.resource.matches(resource, &ancestors.resource)
            })
        });
        let mut cache = self.cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(found) = cache.get(&positions) {
            return Arc::clone(found);
        }
        let mut set = PolicySet::new();
        for &at in &positions {
            if let Some(s) = scoped.get(at as usize) {
                // Ids are unique in the snapshot, so adding cannot clash.
                let _ = set.add(s.policy.clone());
            }
        }
        let set = Arc::new(set);
        if cache.len() >= CACHE {
            cache.clear();
        }
        cache.insert(positions, Arc::clone(&set));
        set
    }
}
