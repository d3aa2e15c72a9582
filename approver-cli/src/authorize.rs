//! `wardenctl authorize`: one decision from the command line, online or offline (`--explain`).

use std::process::ExitCode;

use anyhow::bail;
use warden_proto::v1 as pb;
use warden_sdk::{ActionRequest, Actor, Decision, Outcome};

use crate::cli::*;
use crate::connection::*;
use crate::format::*;
use crate::out::{StdoutError, outln};

pub(crate) async fn authorize(connection: &Connection, args: AuthorizeArgs, json: bool) -> anyhow::Result<ExitCode> {
    let kind = match args.kind {
        Some(kind) => kind,
        None => kind_of(&args.action)?,
    };
    let resource = resource(kind, &args.resource)?;
    let mut request = ActionRequest::new(&args.action, resource);
    if let Some(cwd) = args.cwd {
        request = request.cwd(cwd);
    }
    if let Some(text) = args.justification {
        request = request.justification(text);
    }
    if let Some(context) = args.context_json {
        request = request.context_json(context);
    }
    if let Some(id) = args.request_id {
        request = request.request_id(id);
    }
    if args.explain {
        let message = pb::AuthorizeRequest {
            request_id: String::new(),
            actor: Some(pb::Actor { user: args.user, agent: args.agent, session: args.session }),
            ..request.into_proto_request()
        };
        let explanation = match &args.policies {
            Some(dir) => explain_offline(dir, message, &args.labels)?,
            None => connection.admin().await?.explain(message).await?.into_inner(),
        };
        print_explanation(&explanation, json)?;
        // The same codes as a decision asked for: a script may try a
        // request offline and act on the answer.
        let outcome = explanation.decision.as_ref().map(|d| d.outcome);
        return match outcome.map(pb::Outcome::try_from) {
            Some(Ok(pb::Outcome::Allow)) => Ok(ExitCode::from(0)),
            Some(Ok(pb::Outcome::Deny)) => Ok(ExitCode::from(2)),
            Some(Ok(pb::Outcome::Pending)) => Ok(ExitCode::from(3)),
            _ => bail!("the explanation carries no outcome"),
        };
    }
    let client = connection.harness().await?;
    let actor = Actor::new(args.user, args.agent, args.session);
    let decision = client.authorize(&actor, request).await?;
    if json {
        outln!("{}", decision_json(&decision))?;
    } else {
        print_decision(&decision)?;
    }
    Ok(ExitCode::from(match decision.outcome {
        Outcome::Allow => 0,
        Outcome::Deny => 2,
        Outcome::Pending => 3,
    }))
}

pub(crate) fn kind_of(action: &str) -> anyhow::Result<Kind> {
    Ok(match action {
        a if a.starts_with("fs.") => Kind::File,
        "exec" => Kind::Command,
        a if a.starts_with("http.") => Kind::Http,
        a if a.starts_with("secret.") => Kind::Secret,
        a if a.starts_with("tool.") => Kind::Tool,
        other => bail!("cannot tell the resource kind of action `{other}`: give --kind"),
    })
}

pub(crate) fn resource(kind: Kind, args: &[String]) -> anyhow::Result<pb::authorize_request::Resource> {
    use pb::authorize_request::Resource as R;
    Ok(match (kind, args) {
        (Kind::File, [path]) => {
            R::File(pb::FileResource { path: path.clone(), cwd: String::new(), ..Default::default() })
        }
        (Kind::File, _) => bail!("a file action takes one PATH"),
        (Kind::Command, argv) => R::Command(pb::CommandResource { argv: argv.to_vec(), cwd: String::new() }),
        (Kind::Http, [method, url]) => R::Http(pb::HttpResource { method: method.clone(), url: url.clone() }),
        (Kind::Http, _) => bail!("an http action takes METHOD URL"),
        (Kind::Secret, [name]) => R::Secret(pb::SecretResource { name: name.clone() }),
        (Kind::Secret, _) => bail!("a secret action takes one NAME"),
        (Kind::Tool, [server, name]) => {
            R::Tool(pb::ToolResource { server: server.clone(), name: name.clone(), arguments_json: String::new() })
        }
        (Kind::Tool, [server, name, arguments]) => {
            R::Tool(pb::ToolResource { server: server.clone(), name: name.clone(), arguments_json: arguments.clone() })
        }
        (Kind::Tool, _) => bail!("a tool action takes SERVER TOOL [ARGS_JSON]"),
    })
}

pub(crate) fn print_decision(decision: &Decision) -> Result<(), StdoutError> {
    outln!("{}", outcome_str(decision.outcome))?;
    let policies = if decision.policy_ids.is_empty() { "(none)".to_owned() } else { decision.policy_ids.join(", ") };
    outln!("  policies: {policies}")?;
    for reason in &decision.reasons {
        outln!("  reason:   {reason}")?;
    }
    if !decision.approval_id.is_empty() {
        outln!("  approval: {}", decision.approval_id)?;
    }
    if let Some(expires) = decision.expires_at {
        outln!("  expires:  {}", rfc3339(expires))?;
    }
    outln!("  audit:    #{}", decision.audit_seq)?;
    outln!("  request:  {}", decision.request_id)?;
    outln!("  policy version: {}", decision.policy_version)?;
    Ok(())
}

pub(crate) fn decision_json(decision: &Decision) -> serde_json::Value {
    serde_json::json!({
        "request_id": decision.request_id,
        "outcome": outcome_str(decision.outcome),
        "policy_ids": decision.policy_ids,
        "reasons": decision.reasons,
        "approval_id": decision.approval_id,
        "expires_at": decision.expires_at.map(rfc3339),
        "grant_ids": decision.grant_ids,
        "policy_version": decision.policy_version,
        "audit_seq": decision.audit_seq,
        "resolved_by": decision.resolved_by,
        "note": decision.note,
    })
}

pub(crate) fn explain_offline(
    dir: &std::path::Path,
    message: pb::AuthorizeRequest,
    labels: &[String],
) -> anyhow::Result<pb::Explanation> {
    use warden_monitor::decision::{DecisionConfig, SessionFacts, explain};
    let snapshot =
        warden_monitor::policy::PolicySnapshot::load(dir).map_err(|e| anyhow::anyhow!("{}:\n{e}", dir.display()))?;
    let input = warden_monitor::grpc::request_input(message).map_err(|e| anyhow::anyhow!("{e}"))?;
    let request = warden_monitor::normalize::normalize(&input).map_err(|e| anyhow::anyhow!("{e}"))?;
    let facts = SessionFacts {
        labels: labels.iter().cloned().collect(),
        harness: "wardenctl".into(),
        ..SessionFacts::default()
    };
    let (evaluation, traces) =
        explain(&snapshot, &request, &facts, time::OffsetDateTime::now_utc(), &DecisionConfig::default())
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(warden_monitor::grpc::explanation_to_proto(String::new(), evaluation, traces))
}

pub(crate) fn print_explanation(explanation: &pb::Explanation, json: bool) -> Result<(), StdoutError> {
    let decision = explanation.decision.clone().unwrap_or_default();
    let outcome = match pb::Outcome::try_from(decision.outcome) {
        Ok(pb::Outcome::Allow) => "ALLOW",
        Ok(pb::Outcome::Deny) => "DENY",
        Ok(pb::Outcome::Pending) => "PENDING",
        _ => "?",
    };
    if json {
        let policies: Vec<serde_json::Value> = explanation
            .policies
            .iter()
            .map(|p| {
                serde_json::json!({ "id": p.id, "effect": p.effect, "file": p.file, "matches": p.matches,
                "matches_approved": p.matches_approved, "error": p.error })
            })
            .collect();
        outln!(
            "{}",
            serde_json::json!({ "outcome": outcome, "policy_ids": decision.policy_ids, "reasons": decision.reasons,
                "grant_ids": decision.grant_ids, "policies": policies })
        )?;
        return Ok(());
    }
    outln!("{outcome}  (what-if: nothing was recorded)")?;
    for reason in &decision.reasons {
        outln!("  reason: {reason}")?;
    }
    outln!("  {:<7} {:<6} {:<9} {:<36} FILE", "MATCHES", "IF OK", "EFFECT", "POLICY")?;
    for p in &explanation.policies {
        let yes = |b: bool| if b { "yes" } else { "-" };
        outln!("  {:<7} {:<6} {:<9} {:<36} {}", yes(p.matches), yes(p.matches_approved), p.effect, p.id, p.file)?;
        if !p.error.is_empty() {
            outln!("          ERROR: {}", p.error)?;
        }
    }
    Ok(())
}
