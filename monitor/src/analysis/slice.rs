//! Which policies a comparison needs. Two sets that share most policies
//! differ only on requests some changed policy matches; a shared policy
//! whose scope cannot match any request a changed policy's scope matches
//! never takes part there, so it is left out of both sides. What "cannot"
//! means is what [`facts`](super::facts) tells the solver of every real
//! request (a session in one user and that user's groups, a file in the
//! folders above it, a command in one program, a URL in its host's
//! domains, a tool in one server and its groups), read from the scopes
//! alone: conditions never make two policies disjoint here. Pure.

use std::collections::BTreeSet;

use cedar_policy::{
    ActionConstraint, EntityTypeName, EntityUid, Policy, PrincipalConstraint, RequestEnv, ResourceConstraint, Schema,
};

use super::facts::Hierarchy;

/// The entity a scope constraint names, and whether it is `==` (else `in`).
fn scope_entity(principal: bool, policy: &Policy) -> Option<(EntityUid, bool)> {
    if principal {
        match policy.principal_constraint() {
            PrincipalConstraint::Eq(uid) => Some((uid, true)),
            PrincipalConstraint::In(uid) | PrincipalConstraint::IsIn(_, uid) => Some((uid, false)),
            PrincipalConstraint::Any | PrincipalConstraint::Is(_) => None,
        }
    } else {
        match policy.resource_constraint() {
            ResourceConstraint::Eq(uid) => Some((uid, true)),
            ResourceConstraint::In(uid) | ResourceConstraint::IsIn(_, uid) => Some((uid, false)),
            ResourceConstraint::Any | ResourceConstraint::Is(_) => None,
        }
    }
}

fn parts(uid: &EntityUid) -> (String, String) {
    (uid.type_name().to_string(), uid.id().unescaped().to_owned())
}

/// `path` is `dir` or below it.
fn under(path: &str, dir: &str) -> bool {
    dir == "/" || path == dir || path.strip_prefix(dir).is_some_and(|rest| rest.starts_with('/'))
}

/// `host` is `domain` or below it.
fn in_domain(host: &str, domain: &str) -> bool {
    host == domain || host.strip_suffix(domain).is_some_and(|rest| rest.ends_with('.'))
}

impl Hierarchy {
    /// Whether no request's principal can be in (or be) both.
    fn principals_disjoint(&self, a: &(EntityUid, bool), b: &(EntityUid, bool)) -> bool {
        let ((ta, ia), (tb, ib)) = (parts(&a.0), parts(&b.0));
        let groups_of = |user: &str| self.ancestors("User", user);
        match (ta.as_str(), tb.as_str()) {
            ("Session", "Session") if a.1 && b.1 => ia != ib,
            ("User", "User") => self.users_pinned && ia != ib,
            ("Agent", "Agent") => self.agents_pinned && ia != ib,
            ("User", "Group") | ("Group", "User") if self.users_pinned => {
                let (user, group) = if ta == "User" { (&ia, &ib) } else { (&ib, &ia) };
                !groups_of(user).contains(&("Group".to_owned(), group.clone()))
            }
            ("Group", "Group") if self.users_pinned => !self.users().any(|user| {
                let groups = groups_of(&user);
                groups.contains(&("Group".to_owned(), ia.clone())) && groups.contains(&("Group".to_owned(), ib.clone()))
            }),
            _ => false,
        }
    }

    /// Whether no request's resource can be in (or be) both.
    fn resources_disjoint(&self, a: &(EntityUid, bool), b: &(EntityUid, bool)) -> bool {
        let ((ta, ia), (tb, ib)) = (parts(&a.0), parts(&b.0));
        let path_types = ["Dir", "File"];
        if path_types.contains(&ta.as_str()) && path_types.contains(&tb.as_str()) {
            if !self.dirs_pinned {
                return false;
            }
            // A File scope is the file itself (== ) or, with `in`, nothing
            // but itself; a Dir scope is every path below it.
            let a_file = ta == "File";
            let b_file = tb == "File";
            return match (a_file, b_file) {
                (true, true) => ia != ib,
                (true, false) => !under(&ia, &ib),
                (false, true) => !under(&ib, &ia),
                (false, false) => !under(&ia, &ib) && !under(&ib, &ia),
            };
        }
        match (ta.as_str(), tb.as_str()) {
            ("Program", "Program") => self.programs_pinned && ia != ib,
            ("Domain", "Domain") => self.domains_pinned && !in_domain(&ia, &ib) && !in_domain(&ib, &ia),
            ("McpServer", "McpServer") => self.servers_pinned && ia != ib,
            ("McpServer", "ToolGroup") | ("ToolGroup", "McpServer") if self.tool_groups_pinned => {
                let (server, group) = if ta == "McpServer" { (&ia, &ib) } else { (&ib, &ia) };
                !self.ancestors("McpServer", server).contains(&("ToolGroup".to_owned(), group.clone()))
            }
            ("ToolGroup", "ToolGroup") if self.tool_groups_pinned => !self.servers().any(|server| {
                let groups = self.ancestors("McpServer", &server);
                groups.contains(&("ToolGroup".to_owned(), ia.clone()))
                    && groups.contains(&("ToolGroup".to_owned(), ib.clone()))
            }),
            ("Tool", "Tool") if a.1 && b.1 => ia != ib,
            _ => false,
        }
    }

    /// Whether no request can match both policies' scopes.
    pub(crate) fn disjoint(&self, a: &Policy, b: &Policy) -> bool {
        let pair = |principal: bool| (scope_entity(principal, a), scope_entity(principal, b));
        let principals = match pair(true) {
            (Some(x), Some(y)) => self.principals_disjoint(&x, &y),
            _ => false,
        };
        principals
            || match pair(false) {
                (Some(x), Some(y)) => self.resources_disjoint(&x, &y),
                _ => false,
            }
    }
}

/// Whether `policy` can match a request of `env`: its action scope names
/// the action (or an action group), and the entity types its principal and
/// resource scopes name can be, or be above, the environment's types.
pub(crate) fn can_apply(policy: &Policy, env: &RequestEnv, schema: &Schema) -> bool {
    let groups: Vec<&EntityUid> = schema.action_groups().collect();
    let action = |uid: &EntityUid| uid == env.action() || groups.contains(&uid);
    let action_ok = match policy.action_constraint() {
        ActionConstraint::Any => true,
        ActionConstraint::Eq(uid) => action(&uid),
        ActionConstraint::In(uids) => uids.iter().any(action),
    };
    // `in E`: E's type is the request's type or one that can be above it.
    let above = |kind: &EntityTypeName, of: &EntityTypeName| {
        kind == of || schema.ancestors(of).is_some_and(|mut a| a.any(|t| t == kind))
    };
    let principal = env.principal();
    let principal_ok = match policy.principal_constraint() {
        PrincipalConstraint::Any => true,
        PrincipalConstraint::Eq(uid) => uid.type_name() == principal,
        PrincipalConstraint::In(uid) => above(uid.type_name(), principal),
        PrincipalConstraint::Is(kind) => &kind == principal,
        PrincipalConstraint::IsIn(kind, uid) => &kind == principal && above(uid.type_name(), principal),
    };
    let resource = env.resource();
    let resource_ok = match policy.resource_constraint() {
        ResourceConstraint::Any => true,
        ResourceConstraint::Eq(uid) => uid.type_name() == resource,
        ResourceConstraint::In(uid) => above(uid.type_name(), resource),
        ResourceConstraint::Is(kind) => &kind == resource,
        ResourceConstraint::IsIn(kind, uid) => &kind == resource && above(uid.type_name(), resource),
    };
    action_ok && principal_ok && resource_ok
}

/// The shared policies that can take part where a changed one does, by
/// their position in `shared`.
pub(crate) fn relevant(shared: &[&Policy], changed: &[&Policy], hierarchy: &Hierarchy) -> BTreeSet<usize> {
    shared
        .iter()
        .enumerate()
        .filter(|(_, policy)| changed.iter().any(|c| !hierarchy.disjoint(policy, c)))
        .map(|(at, _)| at)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::facts::facts;
    use cedar_policy::{Entities, PolicyId, Schema};

    /// The hierarchy as the facts for these entities and policies pin it.
    fn hierarchy(entities: &Entities, policies: &[&Policy]) -> Hierarchy {
        let text =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../policies/schema.cedarschema")).unwrap();
        let schema = Schema::from_cedarschema_str(&text).unwrap().0;
        let named = crate::analysis::facts::Referenced::of(policies.iter().copied());
        Hierarchy::new(entities, &facts(&schema, entities, &named).kept)
    }

    fn policy(text: &str) -> Policy {
        Policy::parse(Some(PolicyId::new("p")), text).unwrap()
    }

    fn entities() -> Entities {
        Entities::from_json_str(
            r#"[
              {"uid": {"type": "Group", "id": "ops"}, "attrs": {}, "parents": []},
              {"uid": {"type": "Group", "id": "dev"}, "attrs": {}, "parents": []},
              {"uid": {"type": "User", "id": "alice"}, "attrs": {}, "parents": [{"type": "Group", "id": "ops"}]},
              {"uid": {"type": "User", "id": "bob"}, "attrs": {}, "parents": [{"type": "Group", "id": "dev"}]}
            ]"#,
            None,
        )
        .unwrap()
    }

    #[test]
    fn a_resource_entities_json_gives_parents_of_its_own_unpins_its_kind() {
        // Warden keeps a resource's declared parents: this file is in
        // /secrets whatever its path says, and so are commands, URLs and
        // tools given parents.
        let declared = |kind: &str, id: &str, parent: (&str, &str)| {
            Entities::from_json_str(
                &format!(
                    r#"[{{"uid": {{"type": "{kind}", "id": "{id}"}}, "attrs": {{}},
                         "parents": [{{"type": "{}", "id": "{}"}}]}}]"#,
                    parent.0, parent.1
                ),
                None,
            )
            .unwrap()
        };
        let srv = policy(r#"permit (principal, action, resource in Dir::"/srv");"#);
        let secrets = policy(r#"forbid (principal, action, resource in Dir::"/secrets");"#);
        let h = hierarchy(&declared("File", "/srv/app/.env", ("Dir", "/secrets")), &[&srv, &secrets]);
        assert!(!h.disjoint(&srv, &secrets));
        let git = policy(r#"permit (principal, action, resource in Program::"git");"#);
        let npm = policy(r#"permit (principal, action, resource in Program::"npm");"#);
        let h = hierarchy(&declared("Command", "git status", ("Program", "npm")), &[&git, &npm]);
        assert!(!h.disjoint(&git, &npm));
        let api = policy(r#"permit (principal, action, resource in Domain::"api.example.com");"#);
        let other = policy(r#"permit (principal, action, resource in Domain::"other.com");"#);
        let h = hierarchy(&declared("Url", "https://api.example.com/", ("Domain", "other.com")), &[&api, &other]);
        assert!(!h.disjoint(&api, &other));
        let docs = policy(r#"permit (principal, action, resource in McpServer::"docs");"#);
        let mail = policy(r#"permit (principal, action, resource in McpServer::"mail");"#);
        let h = hierarchy(&declared("Tool", "docs/search", ("McpServer", "mail")), &[&docs, &mail]);
        assert!(!h.disjoint(&docs, &mail));
        // Without declared parents, each of these pairs is disjoint.
        let h = hierarchy(&entities(), &[&srv, &secrets, &git, &npm, &api, &other, &docs, &mail]);
        assert!(h.disjoint(&srv, &secrets) && h.disjoint(&git, &npm) && h.disjoint(&api, &other));
        assert!(h.disjoint(&docs, &mail));
    }

    #[test]
    fn scopes_that_no_request_matches_together_are_disjoint() {
        let etc = policy(r#"permit (principal, action, resource in Dir::"/etc");"#);
        let srv = policy(r#"permit (principal, action, resource in Dir::"/srv");"#);
        let srv_keys = policy(r#"forbid (principal, action, resource in Dir::"/srv/keys");"#);
        let srvx = policy(r#"forbid (principal, action, resource in Dir::"/srvx");"#);
        let any = policy("permit (principal, action, resource);");
        let ops = policy(r#"permit (principal in Group::"ops", action, resource);"#);
        let dev = policy(r#"permit (principal in Group::"dev", action, resource);"#);
        let alice = policy(r#"permit (principal in User::"alice", action, resource);"#);
        let git = policy(r#"permit (principal, action, resource in Program::"git");"#);
        let npm = policy(r#"permit (principal, action, resource in Program::"npm");"#);
        let api = policy(r#"permit (principal, action, resource in Domain::"api.example.com");"#);
        let example = policy(r#"permit (principal, action, resource in Domain::"example.com");"#);
        let other = policy(r#"permit (principal, action, resource in Domain::"other.com");"#);
        let all = [&etc, &srv, &srv_keys, &srvx, &any, &ops, &dev, &alice, &git, &npm, &api, &example, &other];
        let h = hierarchy(&entities(), &all);
        assert!(h.disjoint(&etc, &srv));
        assert!(!h.disjoint(&srv, &srv_keys));
        assert!(h.disjoint(&srv, &srvx), "/srvx is not under /srv");
        assert!(!h.disjoint(&any, &etc));
        assert!(h.disjoint(&ops, &dev), "no user is in both");
        assert!(!h.disjoint(&ops, &alice));
        assert!(h.disjoint(&dev, &alice));
        assert!(h.disjoint(&git, &npm));
        assert!(!h.disjoint(&api, &example));
        assert!(h.disjoint(&api, &other));
    }

    #[test]
    fn declared_folder_parents_keep_every_folder_policy() {
        let entities = Entities::from_json_str(
            r#"[{"uid": {"type": "Dir", "id": "/srv"}, "attrs": {}, "parents": [{"type": "Dir", "id": "/etc"}]}]"#,
            None,
        )
        .unwrap();
        let etc = policy(r#"permit (principal, action, resource in Dir::"/etc");"#);
        let srv = policy(r#"permit (principal, action, resource in Dir::"/srv");"#);
        let h = hierarchy(&entities, &[&etc, &srv]);
        assert!(!h.disjoint(&etc, &srv));
    }
}
