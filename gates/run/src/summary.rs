//! What happened in a run, as the run's doors saw it: every decision by
//! gate and outcome, the approvals asked and how they ended, the labels
//! the session gained and through what, what was refused and why. Pure: the doors record, the run prints at the end.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use warden_proto::v1 as pb;
use warden_sdk::{Decision, Outcome};

/// One decision a gate of the run was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// Which gate asked (`proxy`, `hook`).
    pub gate: &'static str,
    /// The action and what it was on.
    pub what: String,
    /// The outcome.
    pub outcome: Outcome,
    /// The determining policies.
    pub policy_ids: Vec<String>,
    /// Their reasons.
    pub reasons: Vec<String>,
}

/// How an approval asked in the run ended, as far as the run saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asked {
    /// Which gate asked.
    pub gate: &'static str,
    /// The action and what it was on.
    pub what: String,
    /// The final outcome, once a gate was told it.
    pub ended: Option<Outcome>,
    /// Who resolved it, and their note.
    pub resolved_by: String,
    /// The approver's note.
    pub note: String,
}

/// Everything the doors saw.
#[derive(Debug, Default, Clone)]
pub struct Tally {
    decisions: Vec<Seen>,
    approvals: BTreeMap<String, Asked>,
    /// Each label the session gained, with the gate and the request that
    /// first gave it.
    labels: BTreeMap<String, (&'static str, String)>,
}

/// A request's action and what it is on, for a person to read.
pub fn what(request: &pb::AuthorizeRequest) -> String {
    use pb::authorize_request::Resource as R;
    let on = match &request.resource {
        Some(R::File(file)) => file.path.clone(),
        Some(R::Command(command)) => command.argv.join(" "),
        Some(R::Http(http)) => format!("{} {}", http.method, http.url),
        Some(R::Secret(secret)) => secret.name.clone(),
        Some(R::Tool(tool)) => format!("{}/{}", tool.server, tool.name),
        None => String::new(),
    };
    format!("{} {on}", request.action)
}

fn outcome_name(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Allow => "ALLOW",
        Outcome::Deny => "DENY",
        Outcome::Pending => "PENDING",
    }
}

impl Tally {
    /// A decision `gate` was given for `what`.
    pub fn decided(&mut self, gate: &'static str, what: String, decision: &Decision) {
        self.gained(&decision.labels, gate, &what);
        if decision.outcome == Outcome::Pending && !decision.approval_id.is_empty() {
            self.approvals.entry(decision.approval_id.clone()).or_insert_with(|| Asked {
                gate,
                what: what.clone(),
                ended: None,
                resolved_by: String::new(),
                note: String::new(),
            });
        }
        self.decisions.push(Seen {
            gate,
            what,
            outcome: decision.outcome,
            policy_ids: decision.policy_ids.clone(),
            reasons: decision.reasons.clone(),
        });
    }

    /// What a wait on an approval answered.
    pub fn awaited(&mut self, decision: &Decision) {
        if decision.outcome == Outcome::Pending {
            return;
        }
        if let Some(asked) = self.approvals.get_mut(&decision.approval_id) {
            asked.ended = Some(decision.outcome);
            asked.resolved_by.clone_from(&decision.resolved_by);
            asked.note.clone_from(&decision.note);
            let (gate, what) = (asked.gate, asked.what.clone());
            self.gained(&decision.labels, gate, &what);
        }
    }

    fn gained(&mut self, labels: &[String], gate: &'static str, what: &str) {
        for label in labels {
            self.labels.entry(label.clone()).or_insert_with(|| (gate, what.to_owned()));
        }
    }

    /// Decisions by gate and outcome: `gate → (ALLOW, DENY, PENDING)`.
    fn counts(&self) -> BTreeMap<&'static str, [usize; 3]> {
        let mut counts: BTreeMap<&'static str, [usize; 3]> = BTreeMap::new();
        for seen in &self.decisions {
            let at = match seen.outcome {
                Outcome::Allow => 0,
                Outcome::Deny => 1,
                Outcome::Pending => 2,
            };
            if let Some(count) = counts.entry(seen.gate).or_default().get_mut(at) {
                *count += 1;
            }
        }
        counts
    }

    fn ended(asked: &Asked) -> String {
        match (asked.ended, asked.resolved_by.is_empty()) {
            (None, _) => "no answer reached the run".into(),
            (Some(outcome), true) => outcome_name(outcome).into(),
            (Some(outcome), false) => format!("{} by {}", outcome_name(outcome), asked.resolved_by),
        }
    }

    /// The summary for a person.
    pub fn text(&self, session: &str, code: u8) -> String {
        let mut out =
            format!("warden-run: session {session} ended with exit code {code}: {} decisions", self.decisions.len());
        let gates: Vec<String> = self
            .counts()
            .iter()
            .map(|(gate, [allow, deny, pending])| format!("{gate} {allow} ALLOW, {deny} DENY, {pending} PENDING"))
            .collect();
        if !gates.is_empty() {
            let _ = write!(out, " ({})", gates.join("; "));
        }
        out.push('\n');
        for (id, asked) in &self.approvals {
            let _ = writeln!(out, "  approval {id} ({}, {}): {}", asked.gate, asked.what, Self::ended(asked));
        }
        for (label, (gate, what)) in &self.labels {
            let _ = writeln!(out, "  label {label} gained ({gate}, {what})");
        }
        for seen in self.decisions.iter().filter(|s| s.outcome == Outcome::Deny) {
            let by =
                if seen.policy_ids.is_empty() { String::new() } else { format!(" by {}", seen.policy_ids.join(", ")) };
            let _ = writeln!(out, "  refused ({}): {}{by}: {}", seen.gate, seen.what, seen.reasons.join("; "));
        }
        out
    }

    /// The summary as one JSON object.
    pub fn json(&self, session: &str, code: u8) -> serde_json::Value {
        let counts: serde_json::Map<String, serde_json::Value> = self
            .counts()
            .into_iter()
            .map(|(gate, [allow, deny, pending])| {
                (gate.to_owned(), serde_json::json!({"ALLOW": allow, "DENY": deny, "PENDING": pending}))
            })
            .collect();
        let approvals: Vec<serde_json::Value> = self
            .approvals
            .iter()
            .map(|(id, asked)| {
                serde_json::json!({"approval_id": id, "gate": asked.gate, "what": asked.what,
                    "outcome": asked.ended.map(outcome_name), "resolved_by": asked.resolved_by, "note": asked.note})
            })
            .collect();
        let refused: Vec<serde_json::Value> = self
            .decisions
            .iter()
            .filter(|s| s.outcome == Outcome::Deny)
            .map(|s| serde_json::json!({"gate": s.gate, "what": s.what, "policy_ids": s.policy_ids, "reasons": s.reasons}))
            .collect();
        let labels: Vec<serde_json::Value> = self
            .labels
            .iter()
            .map(|(label, (gate, what))| serde_json::json!({"label": label, "gate": gate, "what": what}))
            .collect();
        serde_json::json!({"session": session, "exit_code": code, "decisions": self.decisions.len(),
            "by_gate": counts, "approvals": approvals, "labels": labels, "refused": refused})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decision(outcome: Outcome, approval_id: &str) -> Decision {
        Decision {
            request_id: "r".into(),
            outcome,
            policy_ids: vec!["p".into()],
            reasons: vec!["because".into()],
            approval_id: approval_id.into(),
            expires_at: None,
            grant_ids: vec![],
            policy_version: "v".into(),
            audit_seq: 1,
            resolved_by: String::new(),
            note: String::new(),
            labels: vec![],
        }
    }

    #[test]
    fn a_run_is_told_by_gate_with_its_approvals_and_refusals() {
        let mut tally = Tally::default();
        let read = Decision { labels: vec!["untrusted-input".into()], ..decision(Outcome::Allow, "") };
        tally.decided("proxy", "http.request GET https://x/".into(), &read);
        tally.decided("proxy", "http.request GET https://x/2".into(), &read);
        tally.decided("hook", "exec rm -r build".into(), &decision(Outcome::Pending, "apr-1"));
        tally.decided("proxy", "http.request POST https://x/up".into(), &decision(Outcome::Deny, ""));
        tally.decided("proxy", "http.request POST https://x/p".into(), &decision(Outcome::Pending, "apr-2"));
        let approved = Decision {
            resolved_by: "alice".into(),
            labels: vec!["private-data".into()],
            ..decision(Outcome::Allow, "apr-1")
        };
        tally.awaited(&approved);
        let text = tally.text("run-1", 0);
        assert!(text.starts_with("warden-run: session run-1 ended with exit code 0: 5 decisions"), "{text}");
        assert!(text.contains("hook 0 ALLOW, 0 DENY, 1 PENDING; proxy 2 ALLOW, 1 DENY, 1 PENDING"), "{text}");
        assert!(text.contains("label untrusted-input gained (proxy, http.request GET https://x/)\n"), "{text}");
        assert!(text.contains("label private-data gained (hook, exec rm -r build)\n"), "{text}");
        assert!(text.contains("approval apr-1 (hook, exec rm -r build): ALLOW by alice"), "{text}");
        assert!(
            text.contains("approval apr-2 (proxy, http.request POST https://x/p): no answer reached the run"),
            "{text}"
        );
        assert!(text.contains("refused (proxy): http.request POST https://x/up by p: because"), "{text}");
        let json = tally.json("run-1", 0);
        assert_eq!(json["by_gate"]["proxy"]["DENY"], 1);
        assert_eq!(json["approvals"][0]["outcome"], "ALLOW");
        assert_eq!(json["refused"][0]["policy_ids"][0], "p");
        assert_eq!(json["labels"][0]["label"], "private-data");
        assert_eq!(json["labels"][1]["gate"], "proxy");
    }
}
