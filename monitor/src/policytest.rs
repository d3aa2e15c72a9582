//! Policy tests as data: a suite file holds requests and the decision each
//! must get. `check_case` runs one case through the monitor's own
//! normalization and decision code, without a server, so `cargo test` and
//! `wardenctl policy test` judge policies exactly as the monitor does.
//!
//! ```json
//! { "suite": "files", "now": "2026-06-01T12:00:00Z",
//!   "cases": [ { "name": "alice reads her workspace",
//!                "actor": { "user": "alice", "agent": "claude-code", "session": "s1" },
//!                "action": "fs.read",
//!                "resource": { "file": { "path": "/home/alice/project/src/main.rs" } },
//!                "expect": "ALLOW", "policy_ids": ["files.workspace-read-write"] } ] }
//! ```

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use time::OffsetDateTime;

use crate::decision::{DecisionConfig, Outcome, SessionFacts, decide};
use crate::duration::parse_duration;
use crate::grants::{Grant, GrantBook};
use crate::normalize::{Actor, RequestInput, ResourceInput, normalize};
use crate::policy::PolicySnapshot;

/// One suite file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Suite {
    /// The suite's name.
    pub suite: String,
    /// The clock for every case without its own, RFC 3339 (default: now).
    #[serde(default)]
    pub(crate) now: Option<String>,
    /// The cases.
    pub(crate) cases: Vec<Case>,
}

/// A resource as in the proto's `resource` oneof.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub(crate) enum CaseResource {
    /// `{"file": {"path": …, "cwd": …, "pattern": true}}`
    File {
        /// The path.
        path: String,
        /// For a relative path.
        #[serde(default)]
        cwd: String,
        /// The path is a pattern of names (a search tool's).
        #[serde(default)]
        pattern: bool,
    },
    /// `{"command": {"argv": […], "cwd": …}}`
    Command {
        /// The command line.
        argv: Vec<String>,
        /// The working directory.
        #[serde(default)]
        cwd: String,
    },
    /// `{"http": {"method": …, "url": …}}`
    Http {
        /// The method.
        method: String,
        /// The URL.
        url: String,
    },
    /// `{"secret": {"name": …}}`
    Secret {
        /// The secret.
        name: String,
    },
    /// `{"tool": {"server": …, "name": …, "arguments_json": …}}`
    Tool {
        /// The MCP server.
        server: String,
        /// The tool.
        name: String,
        /// Its arguments.
        #[serde(default)]
        arguments_json: String,
    },
}

/// A grant in a test case.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CaseGrant {
    /// Actions.
    pub(crate) actions: Vec<String>,
    /// `KIND:ID`.
    pub(crate) resource_scope: String,
    /// Only this session.
    #[serde(default)]
    pub(crate) session: String,
    /// Only this agent kind.
    #[serde(default)]
    pub(crate) agent: String,
}

/// What a case expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub(crate) enum Expected {
    /// The outcome ALLOW.
    #[serde(rename = "ALLOW")]
    Allow,
    /// The outcome DENY.
    #[serde(rename = "DENY")]
    Deny,
    /// The outcome PENDING.
    #[serde(rename = "PENDING")]
    Pending,
    /// The request is bad input (the monitor answers INVALID_ARGUMENT).
    #[serde(rename = "INVALID_ARGUMENT")]
    InvalidArgument,
}

/// One test case.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Case {
    /// What the case shows, in words.
    pub(crate) name: String,
    /// Who acts.
    pub(crate) actor: Actor,
    /// The action.
    pub(crate) action: String,
    /// On what.
    pub(crate) resource: CaseResource,
    /// Extra schema-declared context.
    #[serde(default)]
    pub(crate) context: serde_json::Map<String, serde_json::Value>,
    /// Labels the session holds.
    #[serde(default)]
    pub(crate) labels: BTreeSet<String>,
    /// The agent's justification.
    #[serde(default)]
    pub(crate) justification: String,
    /// The clock, RFC 3339 (default: the suite's).
    #[serde(default)]
    pub(crate) now: Option<String>,
    /// Grants the case's user holds (valid for a day from `now`).
    #[serde(default)]
    pub(crate) grants: Vec<CaseGrant>,
    /// The expected outcome.
    pub(crate) expect: Expected,
    /// When given, exactly these determining policies.
    #[serde(default)]
    pub(crate) policy_ids: Option<Vec<String>>,
    /// When given, each must appear within some reason.
    #[serde(default)]
    pub(crate) reasons_contain: Vec<String>,
    /// For PENDING: exactly these approver groups.
    #[serde(default)]
    pub(crate) approvers: Option<Vec<String>>,
    /// For PENDING: the approval's timeout, e.g. `15m`.
    #[serde(default)]
    pub(crate) timeout: Option<String>,
    /// For INVALID_ARGUMENT: the field named.
    #[serde(default)]
    pub(crate) field: Option<String>,
    /// For ALLOW: exactly these labels the session gains, sorted.
    #[serde(default)]
    pub(crate) labels_gained: Option<Vec<String>>,
    /// For a command: exactly these parts, in order, as
    /// [`crate::command::Part::summary`] writes them (`exec cat a`,
    /// `fs.read /w/a`, `exec eval x opaque`, `fs.read /w/*.rs pattern`).
    #[serde(default)]
    pub(crate) parts: Option<Vec<String>>,
}

/// What happened to one case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaseResult {
    /// The case's name.
    pub name: String,
    /// Every mismatch; empty when the case passed.
    pub failures: Vec<String>,
    /// What the monitor decided, for display: outcome, policies, reasons.
    pub actual: String,
}

impl CaseResult {
    /// Whether the case passed.
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

/// A suite file that does not load.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {message}")]
pub struct SuiteError {
    /// The file.
    pub(crate) path: PathBuf,
    /// Why.
    pub(crate) message: String,
}

/// Reads every `*.json` suite in `dir`, sorted by file name.
pub fn load_suites(dir: &Path) -> Result<Vec<(PathBuf, Suite)>, SuiteError> {
    let error = |path: &Path, message: String| SuiteError { path: path.to_owned(), message };
    let entries = std::fs::read_dir(dir).map_err(|e| error(dir, e.to_string()))?;
    let mut paths: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    paths.sort();
    let mut suites = Vec::new();
    for path in paths {
        let text = std::fs::read_to_string(&path).map_err(|e| error(&path, e.to_string()))?;
        let suite: Suite = serde_json::from_str(&text).map_err(|e| error(&path, e.to_string()))?;
        suites.push((path, suite));
    }
    Ok(suites)
}

/// Runs every case of `suite`.
pub fn run_suite(snapshot: &PolicySnapshot, suite: &Suite, config: &DecisionConfig) -> Vec<CaseResult> {
    suite.cases.iter().map(|case| check_case(snapshot, case, suite.now.as_deref(), config)).collect()
}

/// Runs one case through normalization and the decision.
pub(crate) fn check_case(
    snapshot: &PolicySnapshot,
    case: &Case,
    suite_now: Option<&str>,
    config: &DecisionConfig,
) -> CaseResult {
    let mut failures = Vec::new();
    let now = match case.now.as_deref().or(suite_now) {
        Some(text) => match OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339) {
            Ok(now) => now,
            Err(e) => {
                return CaseResult {
                    name: case.name.clone(),
                    failures: vec![format!("now `{text}`: {e}")],
                    actual: String::new(),
                };
            }
        },
        None => OffsetDateTime::now_utc(),
    };
    let input = RequestInput {
        request_id: String::new(),
        actor: case.actor.clone(),
        action: case.action.clone(),
        resource: match &case.resource {
            CaseResource::File { path, cwd, pattern } => {
                ResourceInput::File { path: path.clone(), cwd: cwd.clone(), pattern: *pattern }
            }
            CaseResource::Command { argv, cwd } => ResourceInput::Command { argv: argv.clone(), cwd: cwd.clone() },
            CaseResource::Http { method, url } => ResourceInput::Http { method: method.clone(), url: url.clone() },
            CaseResource::Secret { name } => ResourceInput::Secret { name: name.clone() },
            CaseResource::Tool { server, name, arguments_json } => ResourceInput::Tool {
                server: server.clone(),
                name: name.clone(),
                arguments_json: arguments_json.clone(),
            },
        },
        justification: case.justification.clone(),
        context_json: if case.context.is_empty() {
            String::new()
        } else {
            serde_json::Value::Object(case.context.clone()).to_string()
        },
    };
    let grants: Vec<Grant> = case
        .grants
        .iter()
        .enumerate()
        .map(|(n, g)| Grant {
            grant_id: format!("test-grant-{n}"),
            user: case.actor.user.clone(),
            session: g.session.clone(),
            agent: g.agent.clone(),
            actions: g.actions.clone(),
            resource_scope: g.resource_scope.clone(),
            expires_unix_ns: i64::try_from((now + time::Duration::days(1)).unix_timestamp_nanos()).unwrap_or(i64::MAX),
            reason: String::new(),
            created_by: "policy-test".into(),
            created_unix_ns: 0,
            approver_groups: None,
            harness: String::new(),
            passkey: false,
        })
        .collect();
    let (book, problems) = GrantBook::load(grants, snapshot);
    if let Some((id, problem)) = problems.first() {
        return CaseResult {
            name: case.name.clone(),
            failures: vec![format!("{id}: {problem}")],
            actual: String::new(),
        };
    }
    let facts = SessionFacts {
        labels: case.labels.clone(),
        harness: "policy-test".into(),
        grants: book.for_user(&case.actor.user),
        ..SessionFacts::default()
    };
    let normalized = normalize(&input);
    if let (Some(want), Ok(request)) = (&case.parts, &normalized) {
        let request = crate::decision::identified(snapshot, request);
        match crate::decision::command_parts(snapshot, &request) {
            Ok(Some(parts)) => {
                let got: Vec<String> = parts.iter().map(|(part, _)| part.summary()).collect();
                if &got != want {
                    failures.push(format!("expected parts {want:?}, got {got:?}"));
                }
            }
            Ok(None) => failures.push("expected parts, but the request is not a command".into()),
            Err(e) => failures.push(format!("expected parts, got {e}")),
        }
    }
    let decided = normalized.and_then(|request| decide(snapshot, &request, &facts, now, config));
    let evaluation = match decided {
        Err(invalid) => {
            let actual = format!("INVALID_ARGUMENT {invalid}");
            if case.expect != Expected::InvalidArgument {
                failures.push(format!("expected {:?}, got {actual}", case.expect));
            } else if let Some(field) = &case.field
                && &invalid.field != field
            {
                failures.push(format!("expected the field `{field}`, got `{}`", invalid.field));
            }
            return CaseResult { name: case.name.clone(), failures, actual };
        }
        Ok(evaluation) => evaluation,
    };
    let actual = format!(
        "{} policies [{}] grants [{}] reasons [{}]",
        evaluation.outcome.as_str(),
        evaluation.policy_ids.join(", "),
        evaluation.grant_ids.join(", "),
        evaluation.reasons.join("; ")
    );
    let outcome = match evaluation.outcome {
        Outcome::Allow => Expected::Allow,
        Outcome::Deny => Expected::Deny,
        Outcome::Pending => Expected::Pending,
    };
    if outcome != case.expect {
        failures.push(format!("expected {:?}, got {:?}", case.expect, outcome));
    }
    if let Some(ids) = &case.policy_ids {
        let mut want = ids.clone();
        want.sort();
        if want != evaluation.policy_ids {
            failures.push(format!(
                "expected policies [{}], got [{}]",
                want.join(", "),
                evaluation.policy_ids.join(", ")
            ));
        }
    }
    for text in &case.reasons_contain {
        if !evaluation.reasons.iter().any(|reason| reason.contains(text.as_str())) {
            failures.push(format!("no reason contains `{text}`"));
        }
    }
    let terms = evaluation.approval.as_ref();
    if let Some(approvers) = &case.approvers {
        let got = terms.map(|t| t.approvers.clone()).unwrap_or_default();
        if &got != approvers {
            failures.push(format!("expected approvers {approvers:?}, got {got:?}"));
        }
    }
    if let Some(labels) = &case.labels_gained
        && labels != &evaluation.labels
    {
        failures.push(format!("expected labels {labels:?}, got {:?}", evaluation.labels));
    }
    if let Some(timeout) = &case.timeout {
        match parse_duration(timeout) {
            Ok(want) => {
                let got = terms.map(|t| t.timeout).unwrap_or(Duration::ZERO);
                if got != want {
                    failures.push(format!("expected timeout {timeout}, got {}s", got.as_secs()));
                }
            }
            Err(e) => failures.push(e.to_string()),
        }
    }
    CaseResult { name: case.name.clone(), failures, actual }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs every suite in `<dir>/tests` against `dir`; panics listing failures.
    fn run_folder(dir: &Path) -> usize {
        run_suites(dir, &dir.join("tests"))
    }

    /// Runs every suite in `suites` against the policy folder `policies`.
    fn run_suites(policies: &Path, suites: &Path) -> usize {
        let snapshot = PolicySnapshot::load(policies).unwrap_or_else(|e| panic!("{e}"));
        let config = DecisionConfig::default();
        let mut failed = Vec::new();
        let mut count = 0;
        for (path, suite) in load_suites(suites).unwrap_or_else(|e| panic!("{e}")) {
            for result in run_suite(&snapshot, &suite, &config) {
                count += 1;
                if !result.passed() {
                    failed.push(format!(
                        "{} / {}: {} (got {})",
                        path.display(),
                        result.name,
                        result.failures.join("; "),
                        result.actual
                    ));
                }
            }
        }
        assert!(failed.is_empty(), "{} of {count} cases failed:\n{}", failed.len(), failed.join("\n"));
        count
    }

    #[test]
    fn the_bundled_policy_suites_pass() {
        let count = run_folder(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies"));
        assert!(count >= 20, "only {count} cases");
    }

    #[test]
    fn every_bundled_policy_is_covered_by_a_case() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies");
        let snapshot = PolicySnapshot::load(&dir).unwrap();
        let covered: BTreeSet<String> = load_suites(&dir.join("tests"))
            .unwrap()
            .into_iter()
            .flat_map(|(_, suite)| suite.cases)
            .flat_map(|case| case.policy_ids.unwrap_or_default())
            .collect();
        let missing: Vec<&String> = snapshot.meta.values().map(|m| &m.id).filter(|id| !covered.contains(*id)).collect();
        assert!(missing.is_empty(), "no case expects these policies: {missing:?}");
    }

    /// Real-world agent commands, their parts and their outcomes under the
    /// bundled policies (`monitor/testdata/commands`).
    #[test]
    fn the_command_corpus_passes() {
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
        let count = run_suites(&manifest.join("../policies"), &manifest.join("testdata/commands"));
        assert!(count >= 150, "only {count} commands in the corpus");
    }

    #[test]
    fn the_decision_corpus_passes() {
        run_folder(&Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/decision"));
    }

    #[test]
    fn a_wrong_expectation_fails() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies");
        let snapshot = PolicySnapshot::load(&dir).unwrap();
        let case: Case = serde_json::from_value(serde_json::json!({
            "name": "wrong on purpose",
            "actor": { "user": "alice", "agent": "claude-code", "session": "s1" },
            "action": "fs.read",
            "resource": { "file": { "path": "/home/alice/.ssh/id_rsa" } },
            "expect": "ALLOW",
            "policy_ids": ["files.workspace-read-write"]
        }))
        .unwrap();
        let result = check_case(&snapshot, &case, None, &DecisionConfig::default());
        assert_eq!(result.failures.len(), 2, "{result:?}");
    }
}
