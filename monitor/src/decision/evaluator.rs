//! One request against the policy set with Cedar: the evaluations with and without approval, grants, and what the determining policies say (reasons, approvers, labels).

use super::*;

/// A request ready for Cedar: its entities, principal, action and resource,
/// and the policies whose scope can match it.
pub(super) struct Evaluator<'a> {
    pub(super) snapshot: &'a PolicySnapshot,
    pub(super) request: &'a NormalizedRequest,
    pub(super) action: &'a EntityUid,
    pub(super) principal: EntityUid,
    pub(super) resource: EntityUid,
    pub(super) entities: Arc<Entities>,
    pub(super) ancestors: Ancestors,
    pub(super) policies: Arc<cedar_policy::PolicySet>,
    /// Evaluate only the grants whose scope can match (else all of the
    /// user's, to check that both agree).
    pub(super) use_index: bool,
    pub(super) now: String,
}

impl<'a> Evaluator<'a> {
    /// `Err` is bad input; `Ok(Err(denial))` a request that is denied before
    /// Cedar runs (unknown user, entities that cannot be built).
    pub(super) fn new(
        snapshot: &'a PolicySnapshot,
        request: &'a NormalizedRequest,
        facts: &SessionFacts,
        now: OffsetDateTime,
        use_index: bool,
    ) -> Result<Result<Self, Evaluation>, InvalidInput> {
        Self::with_entities(snapshot, request, facts, now, use_index, None)
    }

    /// As [`Evaluator::new`], with the entities built already (for the
    /// parts of a command, which share them).
    pub(super) fn with_entities(
        snapshot: &'a PolicySnapshot,
        request: &'a NormalizedRequest,
        facts: &SessionFacts,
        now: OffsetDateTime,
        use_index: bool,
        built: Option<(Arc<Entities>, Ancestors)>,
    ) -> Result<Result<Self, Evaluation>, InvalidInput> {
        let Some(action) = snapshot.actions.get(&request.action) else {
            return Err(InvalidInput::new(
                "action",
                format!("`{}` is not an action of the policy schema", request.action),
            ));
        };
        let resource_type = request.resource.entity_type();
        if !action.resource_types.iter().any(|t| t == resource_type) {
            return Err(InvalidInput::new(
                "resource",
                format!(
                    "action `{}` does not apply to a {} resource (it applies to {})",
                    request.action,
                    request.resource.kind(),
                    if action.resource_types.is_empty() {
                        "nothing".to_owned()
                    } else {
                        action.resource_types.join(", ")
                    }
                ),
            ));
        }
        for key in request.context.keys() {
            if RESERVED_CONTEXT.contains(&key.as_str()) {
                return Err(InvalidInput::new("context_json", format!("`{key}` is set by the monitor")));
            }
        }
        let types = &snapshot.types;
        let user = uid(&types.user, &request.actor.user);
        if snapshot.entities.get(&user).is_none() {
            return Ok(Err(Evaluation::deny(
                vec![],
                vec![format!("unknown user `{}`: not in the policy entities", request.actor.user)],
            )));
        }
        let (entities, ancestors) = match built {
            Some(built) => built,
            None => match request_entities(snapshot, request, facts) {
                Ok((entities, ancestors)) => (Arc::new(entities), ancestors),
                Err(reason) => return Ok(Err(Evaluation::deny(vec![], vec![reason]))),
            },
        };
        let principal = uid(&types.session, &request.actor.session);
        let resource = uid(types.of(&request.resource).0, &request.resource.entity_id());
        // Only the policies whose scope can match: the same decision as the
        // whole set (a policy out of scope is never satisfied, never errs).
        let policies = if use_index {
            snapshot.index.slice(&request.action, &principal, &resource, &ancestors)
        } else {
            Arc::clone(&snapshot.policies)
        };
        Ok(Ok(Self {
            snapshot,
            request,
            action: &action.uid,
            principal,
            resource,
            entities,
            ancestors,
            policies,
            use_index,
            now: cedar_datetime(now),
        }))
    }

    /// The grants (of the request's user) that match this request. An
    /// erroring grant denies, like any erroring policy.
    pub(super) fn matching_grants(
        &self,
        facts: &SessionFacts,
    ) -> Result<Result<Vec<String>, Box<Evaluation>>, InvalidInput> {
        let Some(grants) = &facts.grants else { return Ok(Ok(vec![])) };
        // Only the grants whose session and scope can match (the rest are
        // never satisfied): usually none, and then Cedar does not run.
        let candidates = if self.use_index {
            grants.candidates(&self.request.actor.session, &facts.harness, &self.resource, &self.ancestors.resource)
        } else {
            grants.all(&facts.harness)
        };
        if candidates.is_empty() {
            return Ok(Ok(vec![]));
        }
        let request = match self.request(false) {
            Ok(request) => request,
            // Bad context is bad input, as without grants.
            Err(e) => return e.into_result().map(|denial| Err(Box::new(denial))),
        };
        let response = Authorizer::new().is_authorized(&request, &candidates, &self.entities);
        if let Some(error) = response.diagnostics().errors().next() {
            return Ok(Err(Box::new(Evaluation::deny(
                vec![],
                vec![format!("a grant could not be evaluated, so the request is denied: {error}")],
            ))));
        }
        let mut ids: Vec<String> = response.diagnostics().reason().map(ToString::to_string).collect();
        ids.sort();
        Ok(Ok(ids))
    }

    /// The `@approvers` group and passkey mark of each forbid in the way
    /// that a person's approval would lift (satisfied without approval, not
    /// with it).
    pub(super) fn liftable_forbids(&self, snapshot: &PolicySnapshot) -> Result<Vec<Liftable>, RequestError> {
        let forbids = |response: &Response| -> BTreeSet<PolicyId> {
            response
                .diagnostics()
                .reason()
                .filter(|id| snapshot.meta(id).is_some_and(|m| m.effect == Effect::Forbid))
                .cloned()
                .collect()
        };
        let unapproved = forbids(&self.evaluate(false)?);
        let approved = forbids(&self.evaluate(true)?);
        Ok(unapproved
            .difference(&approved)
            .filter_map(|id| snapshot.meta(id))
            .map(|meta| Liftable { approvers: meta.approvers.clone(), passkey: meta.passkey })
            .collect())
    }

    pub(super) fn evaluate(&self, approved: bool) -> Result<Response, RequestError> {
        let request = self.request(approved)?;
        Ok(Authorizer::new().is_authorized(&request, &self.policies, &self.entities))
    }

    pub(super) fn request(&self, approved: bool) -> Result<Request, RequestError> {
        let new_request = |context, blame: fn(String) -> RequestError| {
            Request::new(
                self.principal.clone(),
                self.action.clone(),
                self.resource.clone(),
                context,
                Some(&self.snapshot.schema),
            )
            .map_err(|e| blame(e.to_string()))
        };
        let base = base_context(self.request, &self.now, approved)?;
        if self.request.context.is_empty() {
            return new_request(base, RequestError::Schema);
        }
        // The monitor's own fields must fit before the harness's are blamed.
        new_request(base, RequestError::Schema)?;
        let full = full_context(self.snapshot, self.request, self.action, &self.now, approved)?;
        new_request(full, RequestError::Context)
    }
}

/// Why a Cedar request could not be built.
pub(super) enum RequestError {
    /// The harness's `context_json` does not fit the schema.
    Context(String),
    /// The monitor's own request does not fit the schema: the schema does not
    /// follow Warden's domain model. Fail closed.
    Schema(String),
}

impl RequestError {
    pub(super) fn into_result(self) -> Result<Evaluation, InvalidInput> {
        match self {
            RequestError::Context(message) => Err(InvalidInput::new("context_json", message)),
            RequestError::Schema(message) => Ok(Evaluation::deny(
                vec![],
                vec![format!("the request does not conform to the policy schema: {message}")],
            )),
        }
    }
}

/// Any policy that errored denies the request (Cedar would skip it).
pub(super) fn errors_deny(snapshot: &PolicySnapshot, response: &Response) -> Option<Evaluation> {
    let mut policy_ids = Vec::new();
    let mut reasons = Vec::new();
    for error in response.diagnostics().errors() {
        let cedar_policy::AuthorizationError::PolicyEvaluationError(error) = error;
        let id = snapshot.meta(error.policy_id()).map_or_else(|| error.policy_id().to_string(), |m| m.id.clone());
        reasons.push(format!("policy `{id}` could not be evaluated, so the request is denied: {}", error.inner()));
        policy_ids.push(id);
    }
    (!policy_ids.is_empty()).then(|| Evaluation::deny(policy_ids, reasons))
}

/// The `@id`s and `@reason`s of `ids`, sorted by id for stable output.
pub(super) fn describe(snapshot: &PolicySnapshot, ids: &[PolicyId]) -> (Vec<String>, Vec<String>) {
    let mut metas: Vec<_> = ids.iter().filter_map(|id| snapshot.meta(id)).collect();
    metas.sort_by(|a, b| a.id.cmp(&b.id));
    let policy_ids = metas.iter().map(|m| m.id.clone()).collect();
    let reasons = metas.iter().filter_map(|m| m.reason.clone()).collect();
    (policy_ids, reasons)
}

pub(super) fn approval_terms(
    snapshot: &PolicySnapshot,
    in_the_way: &[PolicyId],
    permit_ids: Vec<String>,
    config: &DecisionConfig,
) -> ApprovalTerms {
    let metas: Vec<_> = in_the_way.iter().filter_map(|id| snapshot.meta(id)).collect();
    let approvers: BTreeSet<String> = metas.iter().filter_map(|m| m.approvers.clone()).collect();
    let timeout = metas.iter().filter_map(|m| m.timeout).min().unwrap_or(config.default_approval_timeout);
    let passkey: BTreeSet<String> = metas.iter().filter(|m| m.passkey).map(|m| m.id.clone()).collect();
    ApprovalTerms {
        approvers: approvers.into_iter().collect(),
        timeout,
        permit_ids,
        passkey: passkey.into_iter().collect(),
    }
}

/// The `@label`s of the policies `ids`.
pub(super) fn labels_of(snapshot: &PolicySnapshot, ids: &[PolicyId]) -> Vec<String> {
    let labels: BTreeSet<String> =
        ids.iter().filter_map(|id| snapshot.meta(id)).filter_map(|m| m.label.clone()).collect();
    labels.into_iter().collect()
}
