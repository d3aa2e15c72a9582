//! The Cedar entities of Warden's domain model (pure): the entity types,
//! the user's and agent's side of a request (built once per snapshot and
//! pair), the ancestors the index reads, and Cedar's datetime form. Below
//! `policy`, `index`, `grants` and `decision`, which all use it.

use std::collections::{HashMap, HashSet};
use std::str::FromStr;
use std::sync::Arc;

use cedar_policy::{Entities, Entity, EntityId, EntityTypeName, EntityUid};
use time::OffsetDateTime;

use crate::normalize::Resource;

/// The ancestors of the request's principal and resource, for the index.
pub(crate) struct Ancestors {
    pub(crate) principal: HashSet<EntityUid>,
    pub(crate) resource: HashSet<EntityUid>,
}

/// The entity types of Warden's domain model, parsed once per snapshot.
#[derive(Debug, Clone)]
pub(crate) struct DomainTypes {
    pub(crate) session: EntityTypeName,
    pub(crate) user: EntityTypeName,
    pub(crate) agent: EntityTypeName,
    pub(crate) file: EntityTypeName,
    pub(crate) dir: EntityTypeName,
    pub(crate) command: EntityTypeName,
    pub(crate) program: EntityTypeName,
    pub(crate) url: EntityTypeName,
    pub(crate) domain: EntityTypeName,
    pub(crate) secret: EntityTypeName,
    pub(crate) tool: EntityTypeName,
    pub(crate) mcp_server: EntityTypeName,
}

impl DomainTypes {
    pub(crate) fn new() -> Result<Self, String> {
        let parse = |name: &str| EntityTypeName::from_str(name).map_err(|e| format!("entity type `{name}`: {e}"));
        Ok(Self {
            session: parse("Session")?,
            user: parse("User")?,
            agent: parse("Agent")?,
            file: parse("File")?,
            dir: parse("Dir")?,
            command: parse("Command")?,
            program: parse("Program")?,
            url: parse("Url")?,
            domain: parse("Domain")?,
            secret: parse("Secret")?,
            tool: parse("Tool")?,
            mcp_server: parse("McpServer")?,
        })
    }

    /// The resource's own type, and the type of its ancestors.
    pub(crate) fn of(&self, resource: &Resource) -> (&EntityTypeName, &EntityTypeName) {
        match resource {
            Resource::File { .. } => (&self.file, &self.dir),
            Resource::Command { .. } => (&self.command, &self.program),
            Resource::Url { .. } => (&self.url, &self.domain),
            Resource::Secret { .. } => (&self.secret, &self.secret),
            Resource::Tool { .. } => (&self.tool, &self.mcp_server),
        }
    }
}

pub(crate) fn uid(type_name: &EntityTypeName, id: &str) -> EntityUid {
    EntityUid::from_type_name_and_id(type_name.clone(), EntityId::new(id))
}

/// [`cedar_datetime`] of nanoseconds since the Unix epoch (clamped to the
/// range Cedar and `time` accept).
pub(crate) fn cedar_datetime_ns(unix_ns: i64) -> String {
    let at = OffsetDateTime::from_unix_timestamp_nanos(i128::from(unix_ns)).unwrap_or(OffsetDateTime::UNIX_EPOCH);
    cedar_datetime(at)
}

/// Cedar's datetime form, in UTC with milliseconds: `2026-05-10T12:00:00.000Z`.
pub(crate) fn cedar_datetime(now: OffsetDateTime) -> String {
    let now = now.to_offset(time::UtcOffset::UTC);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        now.year(),
        u8::from(now.month()),
        now.day(),
        now.hour(),
        now.minute(),
        now.second(),
        now.millisecond()
    )
}

/// Most (user, agent) pairs whose entities a snapshot keeps built.
const PRINCIPAL_CACHE: usize = 4096;

/// The entities of a user and an agent, with their ancestors from
/// entities.json, built once per snapshot and pair: Cedar computes the
/// transitive closure of whatever it is given, and that was the largest
/// part of building a request's entities.
#[derive(Debug, Default)]
pub(crate) struct PrincipalCache {
    built: std::sync::Mutex<HashMap<(String, String), Arc<PrincipalSide>>>,
}

#[derive(Debug)]
pub(crate) struct PrincipalSide {
    /// User, agent and their ancestors, closed.
    pub(crate) entities: Entities,
    /// User, agent and their ancestors: the session's parents.
    pub(crate) parents: HashSet<EntityUid>,
}

impl PrincipalCache {
    /// The side of `user` and `agent`, from the policy folder's entities
    /// `file`.
    pub(crate) fn get(
        &self,
        file: &Entities,
        types: &DomainTypes,
        user: &str,
        agent: &str,
    ) -> Result<Arc<PrincipalSide>, String> {
        let key = (user.to_owned(), agent.to_owned());
        let lock = || self.built.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(found) = lock().get(&key) {
            return Ok(Arc::clone(found));
        }
        // Built without the lock held; two requests racing build it twice.
        let mut out = HashMap::new();
        let mut parents = add_known(file, uid(&types.user, user), &[], &mut out, None);
        parents.extend(add_known(file, uid(&types.agent, agent), &[], &mut out, None));
        let entities = Entities::from_entities(out.into_values(), None)
            .map_err(|e| format!("cannot build the entities of user `{user}` and agent `{agent}`: {e}"))?;
        let side = Arc::new(PrincipalSide { entities, parents });
        let mut built = lock();
        if built.len() >= PRINCIPAL_CACHE {
            built.clear();
        }
        built.insert(key, Arc::clone(&side));
        Ok(side)
    }
}

/// Adds to `out` an entity from entities.json with its ancestors, or a bare
/// one whose parents are `bare_parents`, unless `known` already holds them.
/// Returns the entity and its ancestors.
pub(crate) fn add_known(
    file: &Entities,
    uid: EntityUid,
    bare_parents: &[EntityUid],
    out: &mut HashMap<EntityUid, Entity>,
    known: Option<&Entities>,
) -> HashSet<EntityUid> {
    let mut ancestors: HashSet<EntityUid> = HashSet::new();
    if let Some(found) = file.ancestors(&uid) {
        ancestors.extend(found.cloned());
    }
    let present = |out: &HashMap<EntityUid, Entity>, uid: &EntityUid| {
        out.contains_key(uid) || known.is_some_and(|k| k.get(uid).is_some())
    };
    for ancestor in &ancestors {
        if !present(out, ancestor) {
            let entity = file.get(ancestor).cloned().unwrap_or_else(|| Entity::with_uid(ancestor.clone()));
            out.insert(ancestor.clone(), entity);
        }
    }
    if !present(out, &uid) {
        let entity = file
            .get(&uid)
            .cloned()
            .unwrap_or_else(|| Entity::new_no_attrs(uid.clone(), bare_parents.iter().cloned().collect()));
        out.insert(uid.clone(), entity);
    }
    ancestors.insert(uid);
    ancestors
}
