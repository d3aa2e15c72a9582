//! The binary forms of the records written on every decision (`codec::Record`), and the idempotency record.

use super::*;

impl Record for AuditRecord {
    fn write(&self, out: &mut Encoder) {
        out.u64(self.seq);
        out.i64(self.time_unix_ns);
        self.texts_before_lists().into_iter().for_each(|value| out.str(value));
        out.strs(self.policy_ids.iter());
        out.strs(self.reasons.iter());
        self.texts_after_lists().into_iter().for_each(|value| out.str(value));
        out.str(&self.hash);
    }

    fn read(input: &mut Decoder<'_>) -> Result<Self, CodecError> {
        Ok(Self {
            seq: input.u64("seq")?,
            time_unix_ns: input.i64("time_unix_ns")?,
            kind: input.str("kind")?,
            caller: input.str("caller")?,
            actor: Actor {
                user: input.str("actor.user")?,
                agent: input.str("actor.agent")?,
                session: input.str("actor.session")?,
            },
            action: input.str("action")?,
            resource: input.str("resource")?,
            request: input.str("request")?,
            outcome: input.str("outcome")?,
            policy_ids: input.strs("policy_ids")?,
            reasons: input.strs("reasons")?,
            policy_version: input.str("policy_version")?,
            request_id: input.str("request_id")?,
            approval_id: input.str("approval_id")?,
            prev_hash: input.str("prev_hash")?,
            hash: input.str("hash")?,
        })
    }
}

impl Record for SessionRecord {
    fn write(&self, out: &mut Encoder) {
        out.str(&self.session);
        out.str(&self.user);
        out.str(&self.agent);
        out.strs(self.labels.iter());
        out.str(&self.harness);
    }

    fn read(input: &mut Decoder<'_>) -> Result<Self, CodecError> {
        Ok(Self {
            session: input.str("session")?,
            user: input.str("user")?,
            agent: input.str("agent")?,
            labels: input.str_set("labels")?,
            // Records written before sessions were scoped end here.
            harness: if input.is_empty() { String::new() } else { input.str("harness")? },
        })
    }
}

/// A decision kept under an idempotency key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Remembered {
    /// Hash of the request the key was first used for.
    pub request_hash: String,
    /// When it was decided, nanoseconds since the Unix epoch.
    #[serde(default)]
    pub(crate) decided_unix_ns: i64,
    /// The decision given then.
    pub(crate) decision: DecisionRecord,
}

impl Remembered {
    /// Whether this decision is still the answer for its request id.
    pub(crate) fn replayable(&self, now_unix_ns: i64, policy_version: &str) -> bool {
        now_unix_ns.saturating_sub(self.decided_unix_ns) < REPLAY_WINDOW_NS
            && self.decision.policy_version == policy_version
    }
}

impl Record for Remembered {
    fn write(&self, out: &mut Encoder) {
        let d = &self.decision;
        out.str(&self.request_hash);
        out.i64(self.decided_unix_ns);
        out.str(&d.request_id);
        out.str(d.outcome.as_str());
        out.strs(d.policy_ids.iter());
        out.strs(d.reasons.iter());
        out.str(&d.approval_id);
        out.opt_i64(d.expires_at_unix_ns);
        out.strs(d.grant_ids.iter());
        out.str(&d.policy_version);
        out.u64(d.audit_seq);
        out.str(&d.resolved_by);
        out.str(&d.note);
    }

    fn read(input: &mut Decoder<'_>) -> Result<Self, CodecError> {
        let request_hash = input.str("request_hash")?;
        let decided_unix_ns = input.i64("decided_unix_ns")?;
        let request_id = input.str("decision.request_id")?;
        let outcome = input.str("decision.outcome")?;
        let outcome = Outcome::from_name(&outcome)
            .ok_or_else(|| CodecError::new(format!("unknown outcome `{outcome}` in decision.outcome")))?;
        let decision = DecisionRecord {
            request_id,
            outcome,
            policy_ids: input.strs("decision.policy_ids")?,
            reasons: input.strs("decision.reasons")?,
            approval_id: input.str("decision.approval_id")?,
            expires_at_unix_ns: input.opt_i64("decision.expires_at_unix_ns")?,
            grant_ids: input.strs("decision.grant_ids")?,
            policy_version: input.str("decision.policy_version")?,
            audit_seq: input.u64("decision.audit_seq")?,
            resolved_by: input.str("decision.resolved_by")?,
            note: input.str("decision.note")?,
            labels: vec![],
        };
        Ok(Self { request_hash, decided_unix_ns, decision })
    }
}
