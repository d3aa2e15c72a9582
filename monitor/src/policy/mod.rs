//! Loads a policy folder (`schema.cedarschema`, `*.cedar`, `entities.json`)
//! into an immutable, strictly validated [`PolicySnapshot`], with file:line
//! diagnostics for everything that is wrong.
//!
//! Pure apart from reading the folder: no tonic, no sled, no tokio.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use cedar_policy::{
    ActionConstraint, Effect, Entities, Entity, EntityTypeName, EntityUid, PolicyId, PolicySet, Schema, ValidationMode,
    Validator,
};

use crate::duration::parse_duration;
use crate::entities::{DomainTypes, PrincipalCache};
use crate::programs::{PROGRAMS_FILE, Programs};

mod files;
pub(crate) use files::PolicyFiles;
pub use files::write_files;

/// The schema file of a policy folder.
pub(crate) const SCHEMA_FILE: &str = "schema.cedarschema";
/// The entities file of a policy folder (users, groups, agents).
pub(crate) const ENTITIES_FILE: &str = "entities.json";

/// One problem found while loading, located in a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceDiagnostic {
    /// File name relative to the policy folder.
    pub(crate) file: String,
    /// 1-based line, 0 when the problem has no location.
    pub(crate) line: usize,
    /// 1-based column, 0 when the problem has no location.
    pub(crate) column: usize,
    /// What is wrong.
    pub(crate) message: String,
    /// How to fix it, when Cedar says.
    pub(crate) help: Option<String>,
    /// The source line at fault, for display.
    pub(crate) source_line: Option<String>,
}

impl SourceDiagnostic {
    pub(crate) fn whole_file(file: &str, message: impl Into<String>) -> Self {
        Self { file: file.to_owned(), line: 0, column: 0, message: message.into(), help: None, source_line: None }
    }

    /// Builds a diagnostic from a Cedar (miette) diagnostic whose spans point
    /// into `source`, the text of `file`.
    fn from_miette(file: &str, source: &str, diagnostic: &dyn miette::Diagnostic) -> Self {
        let offset = diagnostic.labels().and_then(|mut labels| labels.next()).map(|label| label.offset());
        let message = diagnostic_message(diagnostic);
        let help = diagnostic.help().map(|h| h.to_string());
        match offset {
            Some(offset) => {
                let (line, column, text) = locate(source, offset);
                Self { file: file.to_owned(), line, column, message, help, source_line: Some(text) }
            }
            None => Self { file: file.to_owned(), line: 0, column: 0, message, help, source_line: None },
        }
    }

    /// A multi-line rendering with the source line and a caret.
    pub fn render(&self) -> String {
        let mut out = self.to_string();
        if let Some(text) = &self.source_line {
            let gutter = self.line.to_string().len();
            out.push_str(&format!(
                "\n {:gutter$} |\n {} | {}\n {:gutter$} | {}^",
                "",
                self.line,
                text,
                "",
                " ".repeat(self.column.saturating_sub(1))
            ));
        }
        if let Some(help) = &self.help {
            out.push_str(&format!("\n  help: {help}"));
        }
        out
    }
}

impl fmt::Display for SourceDiagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.file, self.message)
        } else {
            write!(f, "{}:{}:{}: {}", self.file, self.line, self.column, self.message)
        }
    }
}

/// Cedar's top-level message plus the causes it wraps.
fn diagnostic_message(diagnostic: &dyn miette::Diagnostic) -> String {
    let mut message = diagnostic.to_string();
    if let Some(related) = diagnostic.related() {
        for inner in related {
            message.push_str("; ");
            message.push_str(&inner.to_string());
        }
    }
    message
}

/// 1-based line and column of a byte offset, and the text of that line.
fn locate(source: &str, offset: usize) -> (usize, usize, String) {
    let offset = offset.min(source.len());
    let before = source.get(..offset).unwrap_or_default();
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before.get(line_start..).map_or(0, |s| s.chars().count()) + 1;
    let text = source.get(line_start..).and_then(|rest| rest.lines().next()).unwrap_or_default();
    (line, column, text.to_owned())
}

/// A policy folder that cannot be loaded, with every problem found.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}", render_list(.diagnostics))]
pub struct LoadError {
    /// The problems, in file order.
    pub diagnostics: Vec<SourceDiagnostic>,
}

fn render_list(diagnostics: &[SourceDiagnostic]) -> String {
    diagnostics.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n")
}

impl LoadError {
    pub(crate) fn one(diagnostic: SourceDiagnostic) -> Self {
        Self { diagnostics: vec![diagnostic] }
    }
}

/// The value of `@approval` that asks for a passkey (the only one).
pub(crate) const PASSKEY: &str = "passkey";

/// The folder of invariants inside the policy folder.
pub(crate) const INVARIANTS_DIR: &str = "invariants";

/// A statement every policy set of the folder must keep, from
/// `invariants/*.cedar`: a forbid whose scope and conditions pick the
/// requests it speaks of, with `@invariant("…")` saying what must hold for
/// them (proved by `analysis::invariants` on `policy check` and on every
/// load).
#[derive(Debug, Clone)]
pub struct Invariant {
    /// `@id`.
    pub id: String,
    /// `@invariant`.
    pub kind: InvariantKind,
    /// `@reason`: the promise in words.
    pub reason: Option<String>,
    /// The file it is in (`invariants/x.cedar`).
    pub file: String,
    /// The statement itself.
    pub(crate) policy: cedar_policy::Policy,
}

/// What an invariant says of the requests it picks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum InvariantKind {
    /// `@invariant("needs-a-person")`: never ALLOW without a person (a
    /// person's approval, or a grant someone made).
    NeedsAPerson,
    /// `@invariant("needs-a-passkey")`: never ALLOW without a person, and
    /// when it waits for one, a forbid marked `@approval("passkey")` is in
    /// the way.
    NeedsAPasskey,
    /// `@invariant("denied")`: DENY, even approved, even under a grant.
    Denied,
}

impl InvariantKind {
    /// The annotation's word.
    pub fn as_str(self) -> &'static str {
        match self {
            InvariantKind::NeedsAPerson => "needs-a-person",
            InvariantKind::NeedsAPasskey => "needs-a-passkey",
            InvariantKind::Denied => "denied",
        }
    }
}

/// What the monitor reads from a policy's annotations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PolicyMeta {
    /// `@id`.
    pub(crate) id: String,
    /// `permit` or `forbid`.
    pub(crate) effect: Effect,
    /// `@reason`: words for people.
    pub(crate) reason: Option<String>,
    /// `@approvers`: the group whose members may resolve an approval.
    pub(crate) approvers: Option<String>,
    /// `@timeout`: how long an approval may wait.
    pub(crate) timeout: Option<Duration>,
    /// `@label`: a label the session gains when this policy allows an action.
    pub(crate) label: Option<String>,
    /// `@approval("passkey")`: approving what this policy holds needs a
    /// passkey assertion on the approval page, not a token.
    pub(crate) passkey: bool,
    /// The file the policy came from.
    pub(crate) file: String,
}

/// What the schema says about one action.
#[derive(Debug, Clone)]
pub(crate) struct ActionInfo {
    /// `Action::"<id>"`.
    pub(crate) uid: EntityUid,
    /// The resource entity types it applies to.
    pub(crate) resource_types: Vec<String>,
    /// Its entity, with its action groups as ancestors.
    pub(crate) entity: Option<Entity>,
}

/// An immutable, validated set of policies, schema and entities. Requests in
/// flight keep the snapshot they started with.
#[derive(Debug)]
pub struct PolicySnapshot {
    /// Hash of the loaded files: names and contents.
    pub version: String,
    /// The loaded files, relative to the folder.
    pub files: Vec<String>,
    /// Validator warnings (impossible policies and the like).
    pub warnings: Vec<SourceDiagnostic>,
    pub(crate) schema: Schema,
    /// Every policy; also what is evaluated without the index.
    pub(crate) policies: Arc<PolicySet>,
    pub(crate) meta: HashMap<PolicyId, PolicyMeta>,
    pub(crate) entities: Entities,
    pub(crate) actions: HashMap<String, ActionInfo>,
    pub(crate) types: DomainTypes,
    pub(crate) index: crate::index::PolicyIndex,
    /// Users' and agents' entities, built on first use.
    pub(crate) principals: PrincipalCache,
    /// `programs.toml`: how commands are read.
    pub programs: Programs,
    /// `invariants/*.cedar`: what every set of this folder must keep.
    pub invariants: Vec<Invariant>,
    /// The files it was built from, as read.
    source: PolicyFiles,
}

impl PolicySnapshot {
    /// Loads and strictly validates the policy folder `dir`.
    pub fn load(dir: &Path) -> Result<Self, LoadError> {
        let files = PolicyFiles::read(dir)?;
        Self::from_files(&files)
    }

    /// Builds a snapshot from already read files.
    pub(crate) fn from_files(files: &PolicyFiles) -> Result<Self, LoadError> {
        let schema = parse_schema(&files.schema)?;
        let mut diagnostics = Vec::new();
        let mut annotation_warnings = Vec::new();
        let (policies, meta, sources) = parse_policies(&files.policies, &mut diagnostics, &mut annotation_warnings);
        if !diagnostics.is_empty() {
            return Err(LoadError { diagnostics });
        }
        let result = Validator::new(schema.clone()).validate(&policies, ValidationMode::Strict);
        let locate_policy = |id: &PolicyId| {
            let file = meta.get(id).map_or("", |m| m.file.as_str());
            (file.to_owned(), sources.get(file).map_or("", String::as_str))
        };
        for error in result.validation_errors() {
            let (file, source) = locate_policy(error.policy_id());
            diagnostics.push(SourceDiagnostic::from_miette(&file, source, error));
        }
        if !diagnostics.is_empty() {
            return Err(LoadError { diagnostics });
        }
        let mut warnings: Vec<SourceDiagnostic> = result
            .validation_warnings()
            .map(|warning| {
                let (file, source) = locate_policy(warning.policy_id());
                SourceDiagnostic::from_miette(&file, source, warning)
            })
            .collect();
        warnings.extend(annotation_warnings);
        let invariants = parse_invariants(&files.invariants, &schema)?;
        let entities = match &files.entities {
            Some(text) => Entities::from_json_str(text, Some(&schema))
                .map_err(|e| LoadError::one(SourceDiagnostic::whole_file(ENTITIES_FILE, diagnostic_message(&e))))?,
            None => Entities::empty(),
        };
        let programs = match &files.programs {
            Some(text) => {
                Programs::parse(text).map_err(|e| LoadError::one(SourceDiagnostic::whole_file(PROGRAMS_FILE, e)))?
            }
            None => Programs::default(),
        };
        let actions = action_table(&schema)?;
        let types = DomainTypes::new().map_err(|e| LoadError::one(SourceDiagnostic::whole_file(SCHEMA_FILE, e)))?;
        let action_entities = schema
            .action_entities()
            .map_err(|e| LoadError::one(SourceDiagnostic::whole_file(SCHEMA_FILE, diagnostic_message(&e))))?;
        let action_uids: Vec<EntityUid> = actions.values().map(|a| a.uid.clone()).collect();
        let index = crate::index::PolicyIndex::build(&policies, &action_uids, &action_entities);
        Ok(Self {
            version: files.version(),
            files: files.names(),
            warnings,
            schema,
            policies: Arc::new(policies),
            meta,
            entities,
            actions,
            types,
            index,
            principals: PrincipalCache::default(),
            programs,
            invariants,
            source: files.clone(),
        })
    }

    /// Every file it was built from: name (relative to the folder) and
    /// text, of which `version` is the hash.
    pub fn texts(&self) -> Vec<(String, String)> {
        self.source.texts()
    }

    /// Counts for people: policies per effect and per action, and which
    /// lack a `@reason`.
    pub fn summary(&self) -> PolicySummary {
        let mut summary = PolicySummary::default();
        for policy in self.policies.policies() {
            summary.policies += 1;
            match policy.effect() {
                Effect::Permit => summary.permits += 1,
                Effect::Forbid => summary.forbids += 1,
            }
            let actions = match policy.action_constraint() {
                ActionConstraint::Any => vec!["(any action)".to_owned()],
                ActionConstraint::Eq(uid) => vec![uid.id().unescaped().to_owned()],
                ActionConstraint::In(uids) => uids.iter().map(|uid| uid.id().unescaped().to_owned()).collect(),
            };
            for action in actions {
                *summary.by_action.entry(action).or_default() += 1;
            }
            if let Some(meta) = self.meta(policy.id())
                && meta.reason.is_none()
            {
                summary.missing_reason.push(meta.id.clone());
            }
        }
        summary.missing_reason.sort();
        summary
    }

    /// Annotations of the policy `id`.
    pub(crate) fn meta(&self, id: &PolicyId) -> Option<&PolicyMeta> {
        self.meta.get(id)
    }

    /// The number of policies.
    pub fn len(&self) -> usize {
        self.meta.len()
    }

    /// Whether there are no policies at all.
    pub fn is_empty(&self) -> bool {
        self.meta.is_empty()
    }
}

/// See [`PolicySnapshot::summary`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PolicySummary {
    /// Number of policies.
    pub policies: usize,
    /// Of which `permit`.
    pub permits: usize,
    /// Of which `forbid`.
    pub forbids: usize,
    /// Policies that name each action in their scope.
    pub by_action: BTreeMap<String, usize>,
    /// Ids of policies without `@reason`.
    pub missing_reason: Vec<String>,
}

/// The invariants of `files`, each a forbid with `@id` and a known
/// `@invariant`, typed strictly against `schema` like a policy.
fn parse_invariants(files: &BTreeMap<String, String>, schema: &Schema) -> Result<Vec<Invariant>, LoadError> {
    if files.is_empty() {
        return Ok(vec![]);
    }
    let mut diagnostics = Vec::new();
    // Their annotations are not policies' (@invariant): no warnings for them.
    let (set, meta, sources) = parse_policies(files, &mut diagnostics, &mut Vec::new());
    let locate = |id: &PolicyId, message: String| {
        let file = meta.get(id).map_or("", |m| m.file.as_str());
        let text = sources.get(file).map_or("", String::as_str);
        let at = text.find(&format!("\"{}\"", id.to_string().replace('"', "\\\""))).unwrap_or(0);
        let (line, column, source_line) = locate(text, at);
        SourceDiagnostic { file: file.to_owned(), line, column, message, help: None, source_line: Some(source_line) }
    };
    let result = Validator::new(schema.clone()).validate(&set, ValidationMode::Strict);
    for error in result.validation_errors() {
        let file = meta.get(error.policy_id()).map_or("", |m| m.file.as_str());
        diagnostics.push(SourceDiagnostic::from_miette(file, sources.get(file).map_or("", String::as_str), error));
    }
    let mut out = Vec::new();
    for policy in set.policies() {
        let Some(m) = meta.get(policy.id()) else { continue };
        let kind = match policy.annotation("invariant").map(str::trim) {
            Some("needs-a-person") => InvariantKind::NeedsAPerson,
            Some("needs-a-passkey") => InvariantKind::NeedsAPasskey,
            Some("denied") => InvariantKind::Denied,
            other => {
                let said = other.map_or_else(|| "none".to_owned(), |o| format!("@invariant(\"{o}\")"));
                diagnostics.push(locate(
                    policy.id(),
                    format!(
                        "invariant `{}` says {said}: give @invariant(\"needs-a-person\"), \
                         @invariant(\"needs-a-passkey\") or @invariant(\"denied\")",
                        m.id
                    ),
                ));
                continue;
            }
        };
        if policy.effect() != Effect::Forbid {
            diagnostics.push(locate(
                policy.id(),
                format!(
                    "invariant `{}` is a permit: write it as a forbid whose scope and conditions pick the requests it speaks of",
                    m.id
                ),
            ));
            continue;
        }
        out.push(Invariant {
            id: m.id.clone(),
            kind,
            reason: m.reason.clone(),
            file: m.file.clone(),
            policy: policy.clone(),
        });
    }
    if !diagnostics.is_empty() {
        return Err(LoadError { diagnostics });
    }
    out.sort_by(|a, b| (&a.file, &a.id).cmp(&(&b.file, &b.id)));
    Ok(out)
}

fn parse_schema(text: &str) -> Result<Schema, LoadError> {
    Schema::from_cedarschema_str(text)
        .map(|(schema, _warnings)| schema)
        .map_err(|e| LoadError::one(SourceDiagnostic::from_miette(SCHEMA_FILE, text, &e)))
}

type Parsed = (PolicySet, HashMap<PolicyId, PolicyMeta>, HashMap<String, String>);

/// Parses every policy file, re-keys each policy by its `@id` and reads its
/// annotations. Problems go to `diagnostics`.
/// The annotations the monitor reads; any other is reported as a warning
/// (a misspelt `@approval` would otherwise leave a forbid approvable by token).
const ANNOTATIONS: [&str; 6] = ["id", "reason", "approvers", "timeout", "label", "approval"];

fn parse_policies(
    files: &BTreeMap<String, String>,
    diagnostics: &mut Vec<SourceDiagnostic>,
    warnings: &mut Vec<SourceDiagnostic>,
) -> Parsed {
    let mut set = PolicySet::new();
    let mut meta: HashMap<PolicyId, PolicyMeta> = HashMap::new();
    let mut sources = HashMap::new();
    for (file, text) in files {
        sources.insert(file.clone(), text.clone());
        let parsed = match PolicySet::from_str(text) {
            Ok(parsed) => parsed,
            Err(errors) => {
                for error in errors.iter() {
                    diagnostics.push(SourceDiagnostic::from_miette(file, text, error));
                }
                continue;
            }
        };
        let starts = statement_starts(text);
        // Cedar names the policies of one text `policy0`, `policy1`, … in order.
        let start_of = |id: &PolicyId| {
            id.to_string()
                .strip_prefix("policy")
                .and_then(|n| n.parse::<usize>().ok())
                .and_then(|n| starts.get(n).copied())
                .unwrap_or(0)
        };
        if let Some(template) = parsed.templates().next() {
            let at = start_of(template.id());
            let (line, column, source_line) = locate(text, at);
            diagnostics.push(SourceDiagnostic {
                file: file.clone(),
                line,
                column,
                message: "templates are not supported: write a static policy (grants come from the monitor)".into(),
                help: None,
                source_line: Some(source_line),
            });
            continue;
        }
        for policy in parsed.policies() {
            let at = start_of(policy.id());
            let mut problem = |message: String| {
                let (line, column, source_line) = locate(text, at);
                diagnostics.push(SourceDiagnostic {
                    file: file.clone(),
                    line,
                    column,
                    message,
                    help: None,
                    source_line: Some(source_line),
                });
            };
            let Some(id) = policy.annotation("id").map(str::to_owned) else {
                problem("policy has no @id annotation: every policy needs a unique @id(\"…\")".into());
                continue;
            };
            if id.trim().is_empty() {
                problem("@id must not be empty".into());
                continue;
            }
            let policy_id = PolicyId::new(&id);
            if let Some(other) = meta.get(&policy_id) {
                problem(format!("duplicate @id `{id}`: also used in {}", other.file));
                continue;
            }
            let timeout = match policy.annotation("timeout") {
                Some(text) => match parse_duration(text) {
                    Ok(d) if !d.is_zero() => Some(d),
                    Ok(_) => {
                        problem("@timeout must be longer than zero".into());
                        continue;
                    }
                    Err(e) => {
                        problem(format!("@timeout: {e}"));
                        continue;
                    }
                },
                None => None,
            };
            for (key, _) in policy.annotations() {
                if !ANNOTATIONS.contains(&key) {
                    let (line, column, source_line) = locate(text, at);
                    warnings.push(SourceDiagnostic {
                        file: file.clone(),
                        line,
                        column,
                        message: format!(
                            "unknown annotation @{key} on `{id}`: the monitor reads only @{}; this one changes nothing",
                            ANNOTATIONS.join(", @")
                        ),
                        help: None,
                        source_line: Some(source_line),
                    });
                }
            }
            let passkey = match policy.annotation("approval").map(str::trim) {
                None => false,
                Some(PASSKEY) => true,
                Some(other) => {
                    problem(format!("@approval(\"{other}\") is not known: the only kind is @approval(\"{PASSKEY}\")"));
                    continue;
                }
            };
            if passkey && policy.effect() != Effect::Forbid {
                problem(format!(
                    "@approval(\"{PASSKEY}\") belongs on a forbid that an approval lifts, not on a permit"
                ));
                continue;
            }
            let nonempty =
                |key: &str| policy.annotation(key).map(str::trim).filter(|v| !v.is_empty()).map(str::to_owned);
            meta.insert(
                policy_id.clone(),
                PolicyMeta {
                    id: id.clone(),
                    effect: policy.effect(),
                    reason: nonempty("reason"),
                    approvers: nonempty("approvers"),
                    timeout,
                    label: nonempty("label"),
                    passkey,
                    file: file.clone(),
                },
            );
            if let Err(e) = set.add(policy.new_id(policy_id)) {
                problem(e.to_string());
            }
        }
    }
    (set, meta, sources)
}

/// Byte offsets where each top-level statement (a policy with its
/// annotations) starts: after the start of the text or a `;`, skipping white
/// space and comments. Cedar's API does not expose policy locations.
fn statement_starts(text: &str) -> Vec<usize> {
    let mut starts = Vec::new();
    let mut expecting = true;
    let mut chars = text.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        match c {
            '/' if chars.peek().is_some_and(|(_, next)| *next == '/') => {
                for (_, c) in chars.by_ref() {
                    if c == '\n' {
                        break;
                    }
                }
            }
            c if c.is_whitespace() => {}
            _ => {
                if expecting {
                    starts.push(at);
                    expecting = false;
                }
                match c {
                    ';' => expecting = true,
                    '"' => {
                        while let Some((_, c)) = chars.next() {
                            match c {
                                '\\' => {
                                    chars.next();
                                }
                                '"' => break,
                                _ => {}
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    starts
}

/// Which resource types each action applies to, and its entity.
fn action_table(schema: &Schema) -> Result<HashMap<String, ActionInfo>, LoadError> {
    let action_entities = schema
        .action_entities()
        .map_err(|e| LoadError::one(SourceDiagnostic::whole_file(SCHEMA_FILE, diagnostic_message(&e))))?;
    let mut table = HashMap::new();
    for uid in schema.actions() {
        let resource_types = schema
            .resources_for_action(uid)
            .map(|types| types.map(EntityTypeName::to_string).collect())
            .unwrap_or_default();
        let entity = action_entities.get(uid).cloned();
        table.insert(uid.id().unescaped().to_owned(), ActionInfo { uid: uid.clone(), resource_types, entity });
    }
    Ok(table)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCHEMA: &str = r#"
        entity User; entity Session in [User] { user: String };
        entity File { path: String };
        type Ctx = { now: datetime, approved: Bool, justification: String };
        action "fs.read" appliesTo { principal: Session, resource: File, context: Ctx };
    "#;

    fn files(policies: &[(&str, &str)]) -> PolicyFiles {
        PolicyFiles {
            schema: SCHEMA.into(),
            policies: policies.iter().map(|(n, t)| ((*n).to_owned(), (*t).to_owned())).collect(),
            entities: None,
            programs: None,
            invariants: BTreeMap::new(),
        }
    }

    fn errors(policies: &[(&str, &str)]) -> Vec<String> {
        match PolicySnapshot::from_files(&files(policies)) {
            Ok(_) => vec![],
            Err(e) => e.diagnostics.iter().map(ToString::to_string).collect(),
        }
    }

    #[test]
    fn policies_are_keyed_by_their_id() {
        let snapshot = PolicySnapshot::from_files(&files(&[(
            "a.cedar",
            "@id(\"read-all\")\n@reason(\"ok\")\n@timeout(\"15m\")\npermit(principal, action, resource);",
        )]))
        .unwrap();
        let meta = snapshot.meta(&PolicyId::new("read-all")).unwrap();
        assert_eq!(meta.reason.as_deref(), Some("ok"));
        assert_eq!(meta.timeout, Some(Duration::from_secs(900)));
        assert_eq!(meta.file, "a.cedar");
        assert!(snapshot.version.starts_with("sha256:"));
    }

    #[test]
    fn missing_and_duplicate_ids_name_the_file_and_line() {
        assert_eq!(
            errors(&[("a.cedar", "\n\npermit(principal, action, resource);")]),
            ["a.cedar:3:1: policy has no @id annotation: every policy needs a unique @id(\"…\")"]
        );
        let errs = errors(&[
            ("a.cedar", "@id(\"x\") permit(principal, action, resource);"),
            ("b.cedar", "@id(\"x\") forbid(principal, action, resource);"),
        ]);
        assert_eq!(errs, ["b.cedar:1:1: duplicate @id `x`: also used in a.cedar"]);
    }

    #[test]
    fn parse_and_validation_errors_name_the_file_and_line() {
        let errs = errors(&[("bad.cedar", "@id(\"x\")\npermit(principal, action, resource) when { resource.nope };")]);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].starts_with("bad.cedar:2:"), "{errs:?}");
        let errs = errors(&[("syntax.cedar", "@id(\"x\")\npermit(principal, action resource);")]);
        assert!(errs[0].starts_with("syntax.cedar:2:"), "{errs:?}");
        let errs = errors(&[("t.cedar", "@id(\"x\")\n@timeout(\"soon\")\npermit(principal, action, resource);")]);
        assert!(errs[0].starts_with("t.cedar:1:1: @timeout:"), "{errs:?}");
    }

    #[test]
    fn the_bundled_policies_load() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies");
        let snapshot = PolicySnapshot::load(&dir).unwrap_or_else(|e| panic!("{e}"));
        assert!(snapshot.len() >= 10);
        for meta in snapshot.meta.values() {
            assert!(meta.reason.is_some(), "{} has no @reason", meta.id);
        }
    }
}
