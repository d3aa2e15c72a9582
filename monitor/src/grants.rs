//! Grants, pure: what a grant may name, the Cedar `permit` the monitor
//! generates for it, and an index so that a request evaluates only those of
//! its own user whose resource scope can match it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::str::FromStr;
use std::sync::Arc;

use cedar_policy::{EntityId, EntityTypeName, EntityUid, Policy, PolicyId, PolicySet, ValidationMode, Validator};

use crate::entities::cedar_datetime_ns;
use crate::normalize::{InvalidInput, Resource, ResourceInput, clean_path, normalize_resource};
use crate::policy::PolicySnapshot;

/// A time-bounded permission, as stored.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Grant {
    /// `grt-…`.
    pub grant_id: String,
    /// Whose sessions it is for.
    pub user: String,
    /// Only this session, when set.
    pub session: String,
    /// Only this agent kind, when set.
    pub agent: String,
    /// Cedar action ids.
    pub actions: Vec<String>,
    /// `KIND:ID`, canonical.
    pub resource_scope: String,
    /// Until when, nanoseconds since the Unix epoch.
    pub expires_unix_ns: i64,
    /// Why, in the creator's words.
    pub reason: String,
    /// The credential that created it.
    pub created_by: String,
    /// When, nanoseconds since the Unix epoch.
    pub created_unix_ns: i64,
    /// For a window an approver granted: the approver groups that approver
    /// held (`*`: every group). Such a grant counts as approval only for
    /// the forbids whose `@approvers` group is among them. `None`: an
    /// admin's grant, approval for every forbid that a person may lift.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approver_groups: Option<Vec<String>>,
    /// Only the sessions of this harness credential, when set: a window an
    /// approver grants is for the session that asked, and a session id is
    /// scoped to its harness and user.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub harness: String,
    /// For a window an approver granted: whether that approval was given
    /// with a passkey. A window approved with a token alone never counts as
    /// approval for a forbid marked `@approval("passkey")`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub passkey: bool,
}

/// What a grant covers on the resource side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    /// `true`: everything `in` the entity; `false`: the entity itself.
    pub(crate) within: bool,
    /// The Cedar entity type.
    pub(crate) entity_type: &'static str,
    /// The entity id, normalized like a request's.
    pub(crate) id: String,
}

impl Scope {
    /// `KIND:ID` as written back to people.
    pub fn canonical(&self) -> String {
        let kind = match (self.entity_type, self.within) {
            ("File", _) => "file",
            ("Dir", _) => "dir",
            ("Program", _) => "program",
            ("Domain", _) => "domain",
            ("Url", _) => "url",
            ("Secret", _) => "secret",
            ("McpServer", _) => "mcp",
            ("Tool", _) => "tool",
            ("Command", _) => "command",
            _ => "unknown",
        };
        format!("{kind}:{}", self.id)
    }

    /// The scope of "this resource" or "its parent" (approve for a window).
    pub(crate) fn of_resource(resource: &Resource, parent: bool) -> Result<Self, InvalidInput> {
        let exact = |entity_type: &'static str| Scope { within: false, entity_type, id: resource.entity_id() };
        if !parent {
            return Ok(exact(resource.entity_type()));
        }
        let within = |entity_type: &'static str, id: &str| Scope { within: true, entity_type, id: id.to_owned() };
        match resource {
            // Every file is in `/`: a window over it would be a window over everything.
            Resource::File { dirs, .. } => match dirs.first() {
                Some(dir) if dir != "/" => Ok(within("Dir", dir)),
                _ => Err(InvalidInput::new(
                    "grant_scope",
                    "the parent would be `/`, which holds every file: use `exact`",
                )),
            },
            Resource::Command { program, .. } => Ok(within("Program", program)),
            Resource::Url { host, .. } => Ok(within("Domain", host)),
            Resource::Tool { server, .. } => Ok(within("McpServer", server)),
            Resource::Secret { .. } => Err(InvalidInput::new("grant_scope", "a secret has no parent: use `exact`")),
        }
    }
}

/// Reads `KIND:ID` (`file:/x`, `dir:/home/alice/project`, `program:git`,
/// `domain:github.com`, `url:https://…`, `secret:NAME`, `mcp:SERVER`,
/// `tool:SERVER/TOOL`, `command:git push origin main`), normalizing the id
/// the way requests are.
pub fn parse_scope(text: &str) -> Result<Scope, InvalidInput> {
    const FIELD: &str = "resource_scope";
    let Some((kind, id)) = text.split_once(':') else {
        return Err(InvalidInput::new(FIELD, format!("`{text}` is not KIND:ID (e.g. dir:/home/alice/project)")));
    };
    if id.is_empty() {
        return Err(InvalidInput::new(FIELD, "the id after `:` is empty"));
    }
    let from_resource =
        |input: ResourceInput| normalize_resource(&input).map_err(|e| InvalidInput::new(FIELD, e.message));
    let scope = |within: bool, entity_type: &'static str, id: String| Scope { within, entity_type, id };
    Ok(match kind {
        "file" => match from_resource(ResourceInput::File { path: id.into(), cwd: String::new(), pattern: false })? {
            resource @ Resource::File { .. } => scope(false, "File", resource.entity_id()),
            _ => return Err(InvalidInput::new(FIELD, "not a file")),
        },
        "dir" => {
            from_resource(ResourceInput::File { path: id.into(), cwd: String::new(), pattern: false })?;
            scope(true, "Dir", clean_path(id))
        }
        "url" => match from_resource(ResourceInput::Http { method: "GET".into(), url: id.into() })? {
            resource @ Resource::Url { .. } => scope(false, "Url", resource.entity_id()),
            _ => return Err(InvalidInput::new(FIELD, "not a URL")),
        },
        "domain" => match from_resource(ResourceInput::Http { method: "GET".into(), url: format!("https://{id}/") })? {
            Resource::Url { host, .. } => scope(true, "Domain", host),
            _ => return Err(InvalidInput::new(FIELD, "not a domain")),
        },
        "program" if !id.contains('/') => scope(true, "Program", id.to_owned()),
        "program" => return Err(InvalidInput::new(FIELD, "a program is a basename, without `/`")),
        "secret" => scope(false, "Secret", id.to_owned()),
        // The exact command line as in `Command::"…"`: argv with each element
        // shell-quoted where needed (`git commit -m 'a b'`).
        "command" => scope(false, "Command", id.to_owned()),
        "mcp" if !id.contains('/') => scope(true, "McpServer", id.to_owned()),
        "mcp" => return Err(InvalidInput::new(FIELD, "an MCP server name has no `/`")),
        "tool" => match id.split_once('/') {
            Some((server, tool)) if !server.is_empty() && !tool.is_empty() => scope(false, "Tool", id.to_owned()),
            _ => return Err(InvalidInput::new(FIELD, "a tool is SERVER/TOOL")),
        },
        other => {
            return Err(InvalidInput::new(
                FIELD,
                format!("unknown kind `{other}`: use file, dir, program, domain, url, secret, mcp, tool or command"),
            ));
        }
    })
}

/// A Cedar string literal.
pub(crate) fn quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&c.escape_unicode().to_string()),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The Cedar policy of a grant: a `permit` for its principal, actions and
/// resource, with the expiry in the condition so that it stops matching at
/// once.
pub(crate) fn grant_policy(grant: &Grant, scope: &Scope) -> String {
    let principal = if grant.session.is_empty() {
        format!("principal in User::{}", quote(&grant.user))
    } else {
        format!("principal == Session::{}", quote(&grant.session))
    };
    let actions: Vec<String> = grant.actions.iter().map(|a| format!("Action::{}", quote(a))).collect();
    let resource =
        format!("resource {} {}::{}", if scope.within { "in" } else { "==" }, scope.entity_type, quote(&scope.id));
    let mut conditions = vec![format!("context.now < datetime({})", quote(&cedar_datetime_ns(grant.expires_unix_ns)))];
    if !grant.session.is_empty() {
        conditions.push(format!("principal in User::{}", quote(&grant.user)));
    }
    if !grant.agent.is_empty() {
        conditions.push(format!("principal in Agent::{}", quote(&grant.agent)));
    }
    format!(
        "@grant({})\npermit (\n  {principal},\n  action in [{}],\n  {resource}\n)\nwhen {{ {} }};",
        quote(&grant.grant_id),
        actions.join(", "),
        conditions.join(" && ")
    )
}

/// Parses and strictly validates a grant's policy against the snapshot's
/// schema; the message names what is wrong.
pub(crate) fn compile(grant: &Grant, snapshot: &PolicySnapshot) -> Result<CompiledGrant, InvalidInput> {
    let scope = parse_scope(&grant.resource_scope)?;
    let text = grant_policy(grant, &scope);
    let policy = Policy::parse(Some(PolicyId::new(&grant.grant_id)), &text)
        .map_err(|e| InvalidInput::new("resource_scope", format!("cannot express this grant in Cedar: {e}")))?;
    let mut set = PolicySet::new();
    set.add(policy.clone()).map_err(|e| InvalidInput::new("resource_scope", e.to_string()))?;
    let result = Validator::new(snapshot.schema.clone()).validate(&set, ValidationMode::Strict);
    if let Some(error) = result.validation_errors().next() {
        return Err(InvalidInput::new("actions", format!("the grant does not fit the policy schema: {error}")));
    }
    if result.validation_warnings().next().is_some() {
        return Err(InvalidInput::new(
            "actions",
            "the grant could never match: none of its actions applies to its resource scope",
        ));
    }
    let entity_type = EntityTypeName::from_str(scope.entity_type)
        .map_err(|e| InvalidInput::new("resource_scope", format!("entity type `{}`: {e}", scope.entity_type)))?;
    Ok(CompiledGrant {
        policy,
        scope: EntityUid::from_type_name_and_id(entity_type, EntityId::new(&scope.id)),
        within: scope.within,
        session: grant.session.clone(),
        harness: grant.harness.clone(),
        approver_groups: grant.approver_groups.clone(),
        passkey: grant.passkey,
    })
}

/// A forbid in the way that a person's approval would lift, as a window
/// grant sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Liftable {
    /// Its `@approvers` group; none: any approver.
    pub(crate) approvers: Option<String>,
    /// Whether it is marked `@approval("passkey")`.
    pub(crate) passkey: bool,
}

/// A grant's Cedar policy, with what of its scope is checked before Cedar
/// runs.
#[derive(Debug)]
pub(crate) struct CompiledGrant {
    /// The generated permit.
    pub(crate) policy: Policy,
    /// The entity its resource scope names.
    scope: EntityUid,
    /// `resource in` the entity (`true`) or `resource ==` it.
    within: bool,
    /// Only this session, when set.
    session: String,
    /// Only the sessions of this harness, when set.
    harness: String,
    /// See [`Grant::approver_groups`].
    approver_groups: Option<Vec<String>>,
    /// See [`Grant::passkey`].
    passkey: bool,
}

impl CompiledGrant {
    /// Whether this grant lifts only the forbids of some approver groups
    /// (an approver's window), not every one (an admin's grant).
    pub(crate) fn restricted(&self) -> bool {
        self.approver_groups.is_some()
    }

    /// Whether this grant counts as approval for a forbid whose
    /// `@approvers` group is `approvers` (none: any approver) and that
    /// needs a passkey or not.
    pub(crate) fn lifts(&self, forbid: &Liftable) -> bool {
        match (&self.approver_groups, &forbid.approvers) {
            (None, _) => true,
            (Some(_), _) if forbid.passkey && !self.passkey => false,
            (Some(_), None) => true,
            (Some(groups), Some(group)) => groups.iter().any(|g| g == "*" || g == group),
        }
    }

    /// Whether the harness credential `harness` may use this grant: a
    /// grant bound to a harness (a window approved for its session) is
    /// never evaluated for another, whatever the session id. This is
    /// outside Cedar because the schema need not declare `Session.harness`.
    fn for_harness(&self, harness: &str) -> bool {
        self.harness.is_empty() || self.harness == harness
    }

    /// Whether the grant's session and resource scope let it match a
    /// request at all. When they do not, its policy is never satisfied, so
    /// leaving it out of the evaluation changes nothing.
    fn may_match(&self, session: &str, resource: &EntityUid, resource_ancestors: &HashSet<EntityUid>) -> bool {
        (self.session.is_empty() || self.session == session)
            && (&self.scope == resource || (self.within && resource_ancestors.contains(&self.scope)))
    }
}

/// One user's grants, by the entity their resource scope names.
#[derive(Debug, Default)]
pub struct UserGrants {
    grants: Vec<Arc<CompiledGrant>>,
    by_scope: HashMap<EntityUid, Vec<Arc<CompiledGrant>>>,
    by_id: HashMap<String, Arc<CompiledGrant>>,
}

impl UserGrants {
    fn new(grants: Vec<Arc<CompiledGrant>>) -> Self {
        let mut by_scope: HashMap<EntityUid, Vec<Arc<CompiledGrant>>> = HashMap::new();
        for grant in &grants {
            by_scope.entry(grant.scope.clone()).or_default().push(Arc::clone(grant));
        }
        let by_id = grants.iter().map(|g| (g.policy.id().to_string(), Arc::clone(g))).collect();
        Self { grants, by_scope, by_id }
    }

    /// The grant whose policy id (its grant id) is `id`.
    pub(crate) fn get(&self, id: &str) -> Option<&CompiledGrant> {
        self.by_id.get(id).map(Arc::as_ref)
    }

    /// Every grant's policy.
    pub(crate) fn policies(&self) -> impl Iterator<Item = &Policy> {
        self.grants.iter().map(|g| &g.policy)
    }

    /// Every grant's policy that the harness credential `harness` may use,
    /// as a set.
    pub(crate) fn all(&self, harness: &str) -> PolicySet {
        let mut set = PolicySet::new();
        for grant in self.grants.iter().filter(|g| g.for_harness(harness)) {
            let _ = set.add(grant.policy.clone());
        }
        set
    }

    /// The policies of the grants that can match a request of `session` on
    /// `resource` (whose ancestors are given); Cedar evaluates only these.
    /// A few map lookups (the resource and its ancestors), whatever the
    /// number of grants.
    pub(crate) fn candidates(
        &self,
        session: &str,
        harness: &str,
        resource: &EntityUid,
        resource_ancestors: &HashSet<EntityUid>,
    ) -> PolicySet {
        let mut set = PolicySet::new();
        for uid in std::iter::once(resource).chain(resource_ancestors) {
            for grant in self.by_scope.get(uid).into_iter().flatten() {
                if grant.for_harness(harness) && grant.may_match(session, resource, resource_ancestors) {
                    // Grant ids are unique, so adding cannot clash.
                    let _ = set.add(grant.policy.clone());
                }
            }
        }
        set
    }
}

/// Every active grant with its compiled policy, and the per-user index that
/// requests read. A change rebuilds only its user's list (of shared
/// pointers: no policy is copied).
#[derive(Debug, Default)]
pub struct GrantBook {
    by_user: HashMap<String, BTreeMap<String, (Grant, Arc<CompiledGrant>)>>,
    index: HashMap<String, Arc<UserGrants>>,
}

impl GrantBook {
    /// Compiles stored grants; one that no longer fits the policies (after
    /// a policy change) is left out and reported.
    pub fn load(grants: Vec<Grant>, snapshot: &PolicySnapshot) -> (Self, Vec<(String, InvalidInput)>) {
        let mut book = Self::default();
        let mut problems = Vec::new();
        let mut users = Vec::new();
        for grant in grants {
            match compile(&grant, snapshot) {
                Ok(compiled) => {
                    users.push(grant.user.clone());
                    book.by_user
                        .entry(grant.user.clone())
                        .or_default()
                        .insert(grant.grant_id.clone(), (grant, Arc::new(compiled)));
                }
                Err(e) => problems.push((grant.grant_id, e)),
            }
        }
        users.sort();
        users.dedup();
        for user in users {
            book.rebuild(&user);
        }
        (book, problems)
    }

    /// Adds a compiled grant.
    pub(crate) fn insert(&mut self, grant: Grant, compiled: CompiledGrant) {
        let user = grant.user.clone();
        self.by_user.entry(user.clone()).or_default().insert(grant.grant_id.clone(), (grant, Arc::new(compiled)));
        self.rebuild(&user);
    }

    /// Removes a grant.
    pub(crate) fn remove(&mut self, grant_id: &str) -> Option<Grant> {
        let user =
            self.by_user.iter().find(|(_, grants)| grants.contains_key(grant_id)).map(|(user, _)| user.clone())?;
        let removed = self.by_user.get_mut(&user).and_then(|grants| grants.remove(grant_id)).map(|(grant, _)| grant);
        self.rebuild(&user);
        removed
    }

    fn rebuild(&mut self, user: &str) {
        match self.by_user.get(user) {
            Some(grants) if !grants.is_empty() => {
                let grants = grants.values().map(|(_, compiled)| Arc::clone(compiled)).collect();
                self.index.insert(user.to_owned(), Arc::new(UserGrants::new(grants)));
            }
            _ => {
                self.by_user.remove(user);
                self.index.remove(user);
            }
        }
    }

    /// The grants of `user`, for a request.
    pub fn for_user(&self, user: &str) -> Option<Arc<UserGrants>> {
        self.index.get(user).cloned()
    }

    /// Every grant.
    pub(crate) fn all(&self) -> impl Iterator<Item = &Grant> {
        self.by_user.values().flat_map(|grants| grants.values().map(|(grant, _)| grant))
    }

    /// One grant.
    pub(crate) fn get(&self, grant_id: &str) -> Option<&Grant> {
        self.by_user.values().find_map(|grants| grants.get(grant_id).map(|(grant, _)| grant))
    }

    /// How many grants.
    pub fn len(&self) -> usize {
        self.by_user.values().map(BTreeMap::len).sum()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.by_user.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_are_normalized_like_requests() {
        let dir = parse_scope("dir:/home/alice/project/../project/").unwrap();
        assert_eq!((dir.within, dir.entity_type, dir.id.as_str()), (true, "Dir", "/home/alice/project"));
        let domain = parse_scope("domain:GitHub.COM.").unwrap();
        assert_eq!(domain.id, "github.com");
        let url = parse_scope("url:https://API.github.com:443/x").unwrap();
        assert_eq!((url.within, url.id.as_str()), (false, "https://api.github.com/x"));
        assert_eq!(parse_scope("tool:docs/search").unwrap().canonical(), "tool:docs/search");
        for bad in ["nope", "dir:", "dir:relative", "program:/usr/bin/git", "tool:docs", "colour:blue"] {
            assert_eq!(parse_scope(bad).err().map(|e| e.field), Some("resource_scope".to_owned()), "{bad}");
        }
    }

    #[test]
    fn the_generated_policy_quotes_everything() {
        let grant = Grant {
            grant_id: "grt-1".into(),
            user: "al\"ice".into(),
            session: "s1".into(),
            agent: "codex".into(),
            actions: vec!["fs.write".into()],
            resource_scope: "dir:/tmp".into(),
            expires_unix_ns: 0,
            reason: String::new(),
            created_by: String::new(),
            created_unix_ns: 0,
            approver_groups: None,
            harness: String::new(),
            passkey: false,
        };
        let text = grant_policy(&grant, &parse_scope("dir:/tmp").unwrap());
        assert!(text.contains(r#"principal in User::"al\"ice""#), "{text}");
        assert!(text.contains(r#"principal == Session::"s1""#), "{text}");
        assert!(text.contains(r#"resource in Dir::"/tmp""#), "{text}");
        assert!(text.contains(r#"context.now < datetime("1970-01-01T00:00:00.000Z")"#), "{text}");
        assert!(Policy::parse(None, &text).is_ok(), "{text}");
    }
}
