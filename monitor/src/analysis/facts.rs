//! What holds of every request Warden builds, written as forbids the solver
//! is given beside both policy sets, so that it looks only at requests that
//! can happen: a session is in its owner and in that user's groups from
//! `entities.json`, and in no other user; the owner is a known user with
//! the attributes the file gives (of the users no policy names and that
//! the policies cannot tell apart, one stands for all); a file is in exactly the folders above
//! it; a URL in its host's domains; a command in its program; a tool in its
//! server and that server's groups.
//!
//! Without these the solver treats the entity hierarchy as free, and its
//! counterexamples can be requests Warden never builds (a file under
//! `/tmp` and `/etc` at once). Each fact is true of how `decision` builds
//! entities, so a proof with the facts is a proof for every real request;
//! a fact the schema cannot type (another domain model) is left out, which
//! only widens what the solver considers. Pure.

use std::collections::{BTreeMap, BTreeSet};

use cedar_policy::{Entities, EntityUid, Policy, PolicyId, PolicySet, Schema, ValidationMode, Validator};
use serde_json::Value;

pub(crate) use crate::grants::quote;

/// Entity references, `(type, id)`, that `json` (a policy's or an
/// entity file's JSON form) names.
pub(crate) fn literals(json: &Value, out: &mut BTreeSet<(String, String)>) {
    match json {
        Value::Object(map) => {
            if let (Some(Value::String(kind)), Some(Value::String(id))) = (map.get("type"), map.get("id")) {
                out.insert((kind.clone(), id.clone()));
            }
            for inner in map.values() {
                literals(inner, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|item| literals(item, out)),
        _ => {}
    }
}

/// What policies refer to: entities by name, and attributes by name.
#[derive(Debug, Default)]
pub(crate) struct Referenced {
    /// Entity references, `(type, id)`.
    pub(crate) entities: BTreeSet<(String, String)>,
    /// Attribute names read (`x.name`, `x has name`).
    pub(crate) attrs: BTreeSet<String>,
}

impl Referenced {
    /// What `policies` refer to.
    pub(crate) fn of<'a>(policies: impl IntoIterator<Item = &'a Policy>) -> Self {
        let mut out = Self::default();
        for policy in policies {
            if let Ok(json) = policy.to_json() {
                literals(&json, &mut out.entities);
                attributes(&json, &mut out.attrs);
            }
        }
        out
    }
}

/// Attribute names `json` (a policy's JSON form) reads.
fn attributes(json: &Value, out: &mut BTreeSet<String>) {
    match json {
        Value::Object(map) => {
            for (key, inner) in map {
                if (key == "." || key == "has")
                    && let Some(Value::String(name)) = inner.get("attr")
                {
                    out.insert(name.clone());
                }
                attributes(inner, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|item| attributes(item, out)),
        _ => {}
    }
}

/// A `like` pattern matching `text` literally, then `suffix` (`*` or nothing).
fn like(prefix: &str, text: &str, suffix: &str) -> String {
    let quoted = quote(text);
    let inner = quoted.get(1..quoted.len() - 1).unwrap_or_default().replace('*', "\\*");
    format!("\"{prefix}{inner}{suffix}\"")
}

fn entity(kind: &str, id: &str) -> String {
    format!("{kind}::{}", quote(id))
}

/// An attribute value of `entities.json` as a Cedar expression, when it is
/// a string, a number, a boolean or an entity.
fn value(json: &Value) -> Option<String> {
    match json {
        Value::String(s) => Some(quote(s)),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => n.as_i64().map(|n| n.to_string()),
        Value::Object(map) => {
            let reference = map.get("__entity").unwrap_or(json);
            match (reference.get("type"), reference.get("id")) {
                (Some(Value::String(kind)), Some(Value::String(id))) => Some(entity(kind, id)),
                _ => None,
            }
        }
        _ => None,
    }
}

/// One entity of the file: its attributes and its ancestors (closed).
struct Known {
    attrs: BTreeMap<String, Value>,
    ancestors: BTreeSet<(String, String)>,
    has_parents: bool,
}

fn known(entities: &Entities) -> BTreeMap<(String, String), Known> {
    let mut out = BTreeMap::new();
    let Ok(Value::Array(items)) = entities.to_json_value() else { return out };
    for item in items {
        let (Some(Value::String(kind)), Some(Value::String(id))) = (
            item.pointer("/uid/type").or(item.pointer("/uid/__entity/type")),
            item.pointer("/uid/id").or(item.pointer("/uid/__entity/id")),
        ) else {
            continue;
        };
        let attrs = match item.get("attrs") {
            Some(Value::Object(map)) => map.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            _ => BTreeMap::new(),
        };
        let has_parents = item.get("parents").and_then(Value::as_array).is_some_and(|p| !p.is_empty());
        let uid: Option<EntityUid> = entity(kind, id).parse().ok();
        let ancestors = uid
            .and_then(|uid| {
                entities
                    .ancestors(&uid)
                    .map(|found| found.map(|a| (a.type_name().to_string(), a.id().unescaped().to_owned())).collect())
            })
            .unwrap_or_default();
        out.insert((kind.clone(), id.clone()), Known { attrs, ancestors, has_parents });
    }
    out
}

/// The facts, as policy text, for the entities of the policy folder and
/// the entity references `named` by the policies compared.
fn fact_texts(entities: &Entities, referenced: &Referenced) -> Vec<(Fact, String)> {
    let file = known(entities);
    let named = &referenced.entities;
    // Attributes no policy reads change no decision: neither they nor the
    // entities they name are facts the solver needs.
    let read = |name: &String| referenced.attrs.contains(name);
    // Only the groups policies name: no other changes a decision.
    let groups: Vec<String> = named.iter().filter(|(k, _)| k == "Group").map(|(_, id)| id.clone()).collect();
    // Users that no policy names and that the policies cannot tell apart
    // (members of the same named groups, the same values of the attributes
    // policies read) are decided alike: one of each kind stands for all of
    // them, which keeps the solver's questions small on a folder of many
    // users.
    let users: Vec<String> = {
        let mut kinds = BTreeSet::new();
        file.iter()
            .filter(|((kind, _), _)| kind == "User")
            .filter(|((_, id), entry)| {
                let profile: (Vec<bool>, Vec<(&String, String)>) = (
                    groups.iter().map(|g| entry.ancestors.contains(&("Group".to_owned(), g.clone()))).collect(),
                    entry.attrs.iter().filter(|(name, _)| read(name)).map(|(n, v)| (n, v.to_string())).collect(),
                );
                named.contains(&("User".to_owned(), id.clone())) || kinds.insert(profile)
            })
            .map(|((_, id), _)| id.clone())
            .collect()
    };
    let mut all: BTreeSet<(String, String)> = named.clone();
    all.extend(file.keys().filter(|(k, _)| k != "User" && k != "Group").cloned());
    let standing = |(kind, id): &(String, String)| kind != "User" || users.contains(id);
    for (_, entry) in file.iter().filter(|(key, _)| standing(key)) {
        for (_, attr) in entry.attrs.iter().filter(|(name, _)| read(name)) {
            literals(attr, &mut all);
        }
        all.extend(entry.ancestors.iter().filter(|(k, _)| k != "Group").cloned());
    }
    let of = |kind: &str| -> Vec<String> { all.iter().filter(|(k, _)| k == kind).map(|(_, id)| id.clone()).collect() };
    let parents_declared = |kind: &str| file.iter().any(|((k, _), e)| k == kind && e.has_parents);
    let mut facts = Vec::new();
    let rule = "forbid (principal, action, resource)";

    // The session: in its owner and, through them, their groups; in no other user.
    facts.push((Fact::Session, format!("{rule} unless {{ principal in principal.owner }};")));
    if !users.is_empty() {
        let any: Vec<String> = users.iter().map(|u| format!("principal.owner == {}", entity("User", u))).collect();
        facts.push((Fact::Users, format!("{rule} unless {{ {} }};", any.join(" || "))));
    }
    for user in &users {
        let Some(entry) = file.get(&("User".to_owned(), user.clone())) else { continue };
        let me = entity("User", user);
        let mut holds = vec![];
        for group in &groups {
            let member = entry.ancestors.contains(&("Group".to_owned(), group.clone()));
            let not = if member { "" } else { "!" };
            let group = entity("Group", group);
            holds.push(format!("{not}(principal.owner in {group})"));
            holds.push(format!("{not}(principal in {group})"));
        }
        for (name, attr) in entry.attrs.iter().filter(|(name, _)| read(name)) {
            if let Some(v) = value(attr) {
                let field = quote(name);
                holds.push(format!("(principal.owner has {field} && principal.owner[{field}] == {v})"));
            }
        }
        if !holds.is_empty() {
            let holds = holds.join(" && ");
            facts.push((Fact::Users, format!("{rule} when {{ principal.owner == {me} }} unless {{ {holds} }};")));
        }
        // A session is in no user but its owner (said for the users policies name).
        if named.contains(&("User".to_owned(), user.clone())) {
            facts.push((
                Fact::Users,
                format!("{rule} when {{ principal in {me} }} unless {{ principal.owner == {me} }};"),
            ));
        }
    }
    for agent in of("Agent") {
        let me = entity("Agent", &agent);
        let id = quote(&agent);
        facts
            .push((Fact::Agents, format!("{rule} when {{ principal in {me} }} unless {{ principal.agent == {id} }};")));
        facts
            .push((Fact::Agents, format!("{rule} when {{ principal.agent == {id} }} unless {{ principal in {me} }};")));
    }

    // A file is in the folder of its own path and every folder above it.
    // Not said when entities.json gives a folder, or a file itself, parents
    // of its own: Warden keeps those (`decision::inputs`), so a file can be
    // in a folder its path is not under.
    if !parents_declared("Dir") && !parents_declared("File") {
        let scope = "forbid (principal, action, resource is File)";
        facts.push((Fact::Dirs, format!("{scope} unless {{ resource.path like \"/*\" && resource in Dir::\"/\" }};")));
        for dir in of("Dir").into_iter().filter(|d| d != "/") {
            let me = entity("Dir", &dir);
            let under = format!("(resource.path == {} || resource.path like {})", quote(&dir), like("", &dir, "/*"));
            facts.push((Fact::Dirs, format!("{scope} when {{ resource in {me} }} unless {{ {under} }};")));
            facts.push((Fact::Dirs, format!("{scope} when {{ {under} }} unless {{ resource in {me} }};")));
        }
    }
    // A URL is in its host's domain and every parent domain.
    if !parents_declared("Domain") && !parents_declared("Url") {
        let scope = "forbid (principal, action, resource is Url)";
        for domain in of("Domain") {
            let me = entity("Domain", &domain);
            let under =
                format!("(resource.host == {} || resource.host like {})", quote(&domain), like("*.", &domain, ""));
            facts.push((Fact::Domains, format!("{scope} when {{ resource in {me} }} unless {{ {under} }};")));
            facts.push((Fact::Domains, format!("{scope} when {{ {under} }} unless {{ resource in {me} }};")));
        }
    }
    // A command is in its program.
    if !parents_declared("Program") && !parents_declared("Command") {
        let scope = "forbid (principal, action, resource is Command)";
        for program in of("Program") {
            let me = entity("Program", &program);
            let id = quote(&program);
            facts.push((
                Fact::Programs,
                format!("{scope} when {{ resource in {me} }} unless {{ resource.program == {id} }};"),
            ));
            facts.push((
                Fact::Programs,
                format!("{scope} when {{ resource.program == {id} }} unless {{ resource in {me} }};"),
            ));
        }
    }
    // A tool is in its server and in the groups entities.json puts it in
    // (unless entities.json gives a tool parents of its own).
    let scope = "forbid (principal, action, resource is Tool)";
    let tools_pinned = !parents_declared("Tool");
    for server in of("McpServer").into_iter().filter(|_| tools_pinned) {
        let me = entity("McpServer", &server);
        let id = quote(&server);
        facts.push((
            Fact::Servers,
            format!("{scope} when {{ resource in {me} }} unless {{ resource.server == {id} }};"),
        ));
        facts.push((
            Fact::Servers,
            format!("{scope} when {{ resource.server == {id} }} unless {{ resource in {me} }};"),
        ));
    }
    if tools_pinned && !parents_declared("ToolGroup") {
        for group in of("ToolGroup") {
            let key = ("ToolGroup".to_owned(), group.clone());
            let members: Vec<String> = file
                .iter()
                .filter(|((k, _), e)| k == "McpServer" && e.ancestors.contains(&key))
                .map(|((_, id), _)| id.clone())
                .collect();
            let me = entity("ToolGroup", &group);
            let any: Vec<String> = members.iter().map(|m| format!("resource.server == {}", quote(m))).collect();
            let any = if any.is_empty() { "false".to_owned() } else { any.join(" || ") };
            facts.push((Fact::ToolGroups, format!("{scope} when {{ resource in {me} }} unless {{ {any} }};")));
            facts.push((Fact::ToolGroups, format!("{scope} when {{ {any} }} unless {{ resource in {me} }};")));
        }
    }
    facts
}

/// What a fact is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Fact {
    /// A session is in its owner.
    Session,
    /// The owner is a known user, with its groups and attributes; a session is in no other user.
    Users,
    /// A session is in its agent kind.
    Agents,
    /// A file is in the folders above its path, and in no other.
    Dirs,
    /// A URL is in its host's domains.
    Domains,
    /// A command is in its program.
    Programs,
    /// A tool is in its server.
    Servers,
    /// A tool is in its server's groups.
    ToolGroups,
}

/// The facts kept, and the kinds of which every fact was kept (what
/// [`Hierarchy`] may lean on).
pub(crate) struct Facts {
    pub(crate) set: PolicySet,
    pub(crate) kept: BTreeSet<Fact>,
}

/// The facts for `entities` and the entity references `named`, each a
/// forbid with an id `warden-fact-N`, keeping only those `schema` types
/// strictly.
pub(crate) fn facts(schema: &Schema, entities: &Entities, referenced: &Referenced) -> Facts {
    let validator = Validator::new(schema.clone());
    let mut set = PolicySet::new();
    let mut emitted = BTreeSet::new();
    let mut dropped = BTreeSet::new();
    for (at, (kind, text)) in fact_texts(entities, referenced).into_iter().enumerate() {
        emitted.insert(kind);
        let valid = Policy::parse(Some(PolicyId::new(format!("warden-fact-{at}"))), &text).ok().filter(|policy| {
            let mut one = PolicySet::new();
            one.add(policy.clone()).is_ok() && validator.validate(&one, ValidationMode::Strict).validation_passed()
        });
        // Ids are unique by construction.
        let added = valid.is_some_and(|policy| set.add(policy).is_ok());
        if !added {
            dropped.insert(kind);
        }
    }
    Facts { set, kept: emitted.difference(&dropped).copied().collect() }
}

/// The entity hierarchy of real requests, as far as the facts kept say it,
/// for telling policies apart without the solver (`slice`).
pub(crate) struct Hierarchy {
    file: BTreeMap<(String, String), Known>,
    pub(crate) users_pinned: bool,
    pub(crate) agents_pinned: bool,
    pub(crate) dirs_pinned: bool,
    pub(crate) domains_pinned: bool,
    pub(crate) programs_pinned: bool,
    pub(crate) servers_pinned: bool,
    pub(crate) tool_groups_pinned: bool,
}

impl Hierarchy {
    pub(crate) fn new(entities: &Entities, kept: &BTreeSet<Fact>) -> Self {
        let file = known(entities);
        let pinned = |fact: Fact| kept.contains(&fact);
        Self {
            users_pinned: pinned(Fact::Session) && pinned(Fact::Users),
            agents_pinned: pinned(Fact::Agents),
            dirs_pinned: pinned(Fact::Dirs),
            domains_pinned: pinned(Fact::Domains),
            programs_pinned: pinned(Fact::Programs),
            servers_pinned: pinned(Fact::Servers),
            tool_groups_pinned: pinned(Fact::Servers) && pinned(Fact::ToolGroups),
            file,
        }
    }

    /// The closed ancestors of an entity of the file.
    pub(crate) fn ancestors(&self, kind: &str, id: &str) -> BTreeSet<(String, String)> {
        self.file.get(&(kind.to_owned(), id.to_owned())).map(|k| k.ancestors.clone()).unwrap_or_default()
    }

    fn of(&self, kind: &'static str) -> impl Iterator<Item = String> + '_ {
        self.file.keys().filter(move |(k, _)| k == kind).map(|(_, id)| id.clone())
    }

    /// The known users.
    pub(crate) fn users(&self) -> impl Iterator<Item = String> + '_ {
        self.of("User")
    }

    /// The known MCP servers.
    pub(crate) fn servers(&self) -> impl Iterator<Item = String> + '_ {
        self.of("McpServer")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> Schema {
        let text =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../policies/schema.cedarschema")).unwrap();
        Schema::from_cedarschema_str(&text).unwrap().0
    }

    #[test]
    fn every_fact_for_the_bundled_entities_types_against_the_bundled_schema() {
        let schema = schema();
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../policies/entities.json")).unwrap();
        let entities = Entities::from_json_str(&text, Some(&schema)).unwrap();
        let named = Referenced {
            entities: BTreeSet::from([
                ("Dir".to_owned(), "/etc".to_owned()),
                ("Domain".to_owned(), "github.com".to_owned()),
                ("Program".to_owned(), "git".to_owned()),
                ("Group".to_owned(), "release-managers".to_owned()),
            ]),
            attrs: BTreeSet::from(["workspace".to_owned()]),
        };
        let texts = fact_texts(&entities, &named);
        let kept = facts(&schema, &entities, &named).set;
        let texts: Vec<String> = texts.into_iter().map(|(_, t)| t).collect();
        assert_eq!(kept.policies().count(), texts.len(), "a fact was dropped:\n{}", texts.join("\n"));
        let all = kept.to_string();
        assert!(all.contains("Dir::\"/etc\""), "{all}");
        assert!(all.contains("principal.owner == User::\"alice\""), "{all}");
    }

    #[test]
    fn a_fact_the_schema_cannot_type_is_left_out() {
        let schema =
            Schema::from_cedarschema_str("entity Thing; action go appliesTo { principal: Thing, resource: Thing };")
                .unwrap()
                .0;
        let kept = facts(&schema, &Entities::empty(), &Referenced::default());
        assert_eq!(kept.set.policies().count(), 0, "{}", kept.set);
        assert!(kept.kept.is_empty());
    }

    #[test]
    fn like_patterns_match_their_text_literally() {
        assert_eq!(like("", "/a*b", "/*"), r#""/a\*b/*""#);
        assert_eq!(like("*.", "example.com", ""), r#""*.example.com""#);
        assert_eq!(quote("a\"b\\"), r#""a\"b\\""#);
    }
}
