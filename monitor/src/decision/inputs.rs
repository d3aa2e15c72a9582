//! What Cedar is given: a request's context (the clock, approval, justification, harness context) and its entities (the principal, the resource and their ancestors).

use super::*;

/// The context every request carries, built without JSON. Building it
/// evaluates `datetime(now)`, which parses the timestamp (6 % of wardend's
/// CPU at 32 callers): the contexts of the current millisecond, with and
/// without approval, are kept per thread and cloned (a clone shares them).
pub(super) fn base_context(request: &NormalizedRequest, now: &str, approved: bool) -> Result<Context, RequestError> {
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
pub(super) fn datetime(now: &str) -> RestrictedExpression {
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
pub(super) fn full_context(
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
pub(super) fn request_entities(
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
pub(super) fn parts_entities(
    snapshot: &PolicySnapshot,
    requests: &[&NormalizedRequest],
    facts: &SessionFacts,
) -> Option<(Entities, Vec<Ancestors>)> {
    build_entities(snapshot, requests, facts, true).ok().flatten()
}

/// The entities of `requests` (one actor): the session, each resource with
/// its ancestors, each action. `shared`: several requests' resources in one
/// set, `None` if two of them conflict.
pub(super) fn build_entities(
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
pub(super) fn add_built(side: &Entities, built: impl IntoIterator<Item = Entity>) -> Result<Entities, String> {
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
pub(super) fn resource_shape(resource: &Resource) -> (Vec<&str>, HashMap<String, RestrictedExpression>) {
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
