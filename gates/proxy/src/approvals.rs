//! Asking Warden about one part of a request (`http.request`, a
//! `secret.use`), PENDING included: a request that needs a person is held
//! at most `--approval-wait`, then answered 403 PENDING naming the
//! approval; the same request sent again by the same client awaits that
//! approval instead of asking afresh, and goes through once it is
//! approved (an approval lets one request through: the monitor answers its
//! ALLOW once). A request that took an approval's ALLOW and was then not
//! sent (another part of it still waits) puts it back, held: the next
//! identical request uses it without asking.
//!
//! ```text
//! remembered approval for (actor, what was asked)? ─held─▶ taken ─▶ go on
//!        │ no                          │ yes
//!        │                             ▼
//!        │                       AwaitDecision ─┐
//!        ▼                                      ▼
//!  Authorize ─ALLOW─▶ go on                ALLOW ─▶ taken (used once; held again if not sent) ─▶ go on
//!        │ DENY ─▶ 403                     DENY  ─▶ forgotten, 403 with the note
//!        │ PENDING ─▶ remembered ─▶ AwaitDecision ─▶ PENDING after the wait ─▶ 403 PENDING
//! ```

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime};

use http::Response;
use tokio::time::Instant;
use warden_sdk::{ActionRequest, Actor, Decision, Error as WardenError, Outcome};

use crate::answer::{self, Body};
use crate::pending::{Asked, Awaited, Pending};

/// Past an approval's deadline the monitor denies it; a moment to say so
/// (with its reason) before the proxy gives up on its own.
const EXPIRY_GRACE: Duration = Duration::from_secs(2);

/// One `AwaitDecision` call waits at most this long (the monitor's own
/// bound is longer); a longer wait is several calls.
const AWAIT_AT_MOST: Duration = Duration::from_secs(60);

/// Between tries while the monitor is restarting.
const RETRY_EVERY: Duration = Duration::from_millis(200);

/// How long a request that needs a person's approval is held before the
/// proxy answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApprovalWait {
    /// At most this long (zero: answer at once).
    For(Duration),
    /// Until the approval's own deadline.
    Deadline,
}

impl Default for ApprovalWait {
    fn default() -> Self {
        Self::For(Duration::ZERO)
    }
}

impl ApprovalWait {
    /// What is left of the wait after `waited`.
    fn left(self, waited: Duration) -> Duration {
        match self {
            Self::For(wait) => wait.saturating_sub(waited),
            Self::Deadline => Duration::MAX,
        }
    }
}

/// A `--approval-wait` that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{0}` is not a wait: `deadline`, or a number with a unit, e.g. `0s`, `90s`, `5m`, `1h30m` (a bare number is seconds)"
)]
pub struct ApprovalWaitError(String);

impl FromStr for ApprovalWait {
    type Err = ApprovalWaitError;

    /// `deadline`, or `<number><unit>` pairs with units `s`, `m`, `h`
    /// (`1h30m`), or a bare number of seconds.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let error = || ApprovalWaitError(text.to_owned());
        let text = text.trim();
        if text.eq_ignore_ascii_case("deadline") {
            return Ok(Self::Deadline);
        }
        if text.is_empty() {
            return Err(error());
        }
        if let Ok(seconds) = text.parse::<u64>() {
            return Ok(Self::For(Duration::from_secs(seconds)));
        }
        let mut total: u64 = 0;
        let mut number: Option<u64> = None;
        for c in text.chars() {
            if let Some(digit) = c.to_digit(10) {
                let value = number.unwrap_or(0).checked_mul(10).and_then(|n| n.checked_add(u64::from(digit)));
                number = Some(value.ok_or_else(error)?);
                continue;
            }
            let unit = match c {
                's' => 1,
                'm' => 60,
                'h' => 3600,
                _ => return Err(error()),
            };
            let value = number.take().ok_or_else(error)?;
            total = value.checked_mul(unit).and_then(|v| total.checked_add(v)).ok_or_else(error)?;
        }
        if number.is_some() {
            return Err(error());
        }
        Ok(Self::For(Duration::from_secs(total)))
    }
}

impl fmt::Display for ApprovalWait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::For(wait) => write!(f, "{}s", wait.as_secs()),
            Self::Deadline => f.write_str("deadline"),
        }
    }
}

/// Why a part of a request may not go ahead.
pub(crate) enum Refused {
    /// The client's answer (denied, pending, the monitor unreachable).
    Answer(Response<Body>),
    /// The monitor's policy schema does not take the context the proxy
    /// sent (another policy set than the bundled one): the monitor's words.
    Unfit(String),
}

impl Refused {
    /// The client's answer; for context the schema does not take, 503
    /// naming `what` was asked and the monitor's words.
    pub(crate) fn into_answer(self, fields: &str) -> Response<Body> {
        match self {
            Self::Answer(response) => response,
            Self::Unfit(message) => answer::answer(
                http::StatusCode::SERVICE_UNAVAILABLE,
                "ERROR",
                &[],
                &[format!(
                    "Warden could not be asked: the policy schema does not declare the context the proxy sends ({fields}): {message}"
                )],
            ),
        }
    }
}

/// Whether `error` says that the schema does not take the request's
/// `context_json`.
fn unfit(error: &WardenError) -> Option<String> {
    match error {
        WardenError::Status(status)
            if status.code() == tonic::Code::InvalidArgument && status.message().starts_with("context_json:") =>
        {
            Some(status.message().to_owned())
        }
        _ => None,
    }
}

/// The monitor, the approvals the proxy's clients were told to wait for,
/// and how long a request is held.
pub(crate) struct Approvals {
    warden: warden_sdk::Client,
    pending: Pending,
    wait: ApprovalWait,
}

/// Approvals a request has taken from the remembered ones on its way: put
/// back if it is refused before it is sent (a later part was denied or is
/// pending), used up once it is sent.
pub(crate) struct Claims<'a> {
    pending: &'a Pending,
    actor: &'a Actor,
    taken: Vec<(Asked, Awaited)>,
    spent: bool,
}

impl Claims<'_> {
    /// The request is going upstream: the approvals it took are used.
    pub(crate) fn spend(&mut self) {
        self.spent = true;
        for (_, awaited) in &self.taken {
            tracing::info!(approval_id = %awaited.approval_id, "approval used");
        }
    }
}

impl Drop for Claims<'_> {
    fn drop(&mut self) {
        if self.spent {
            return;
        }
        let now = SystemTime::now();
        for (asked, awaited) in self.taken.drain(..) {
            self.pending.restore(self.actor, asked, awaited, now);
        }
    }
}

impl Approvals {
    /// Asks `warden`, holding a request that needs approval for `wait`,
    /// remembering at most `per_client` approvals for each client.
    pub(crate) fn new(warden: warden_sdk::Client, wait: ApprovalWait, per_client: usize) -> Self {
        Self { warden, pending: Pending::new(per_client), wait }
    }

    /// A request's claims, none yet.
    pub(crate) fn claims<'a>(&'a self, actor: &'a Actor) -> Claims<'a> {
        Claims { pending: &self.pending, actor, taken: Vec::new(), spent: false }
    }

    /// `Ok` when `request` may go ahead for `actor` (taking a remembered
    /// approval into `claims` when that is what allowed it); otherwise the
    /// client's answer, or [`Refused::Unfit`] when the monitor's schema
    /// does not take the request's context. `what` names the part asked
    /// about, for the answer.
    pub(crate) async fn ask(
        &self,
        actor: &Actor,
        request: ActionRequest,
        what: &str,
        claims: &mut Claims<'_>,
    ) -> Result<(), Refused> {
        let asked = Asked::of(&request);
        let started = Instant::now();
        let (settled, awaited) = match self.pending.find(actor, &asked, SystemTime::now()) {
            // The ALLOW this proxy was given for an identical request that
            // was not sent: this one uses it (asked again, the monitor
            // would refuse an approval it answered once).
            Some(awaited) if awaited.held => {
                return match self.pending.take(actor, &asked, &awaited.approval_id, SystemTime::now()) {
                    Some(taken) => {
                        tracing::info!(approval_id = %awaited.approval_id, %what, "asked again: its approval's ALLOW is held");
                        claims.taken.push((asked, taken));
                        Ok(())
                    }
                    None => Err(Refused::Answer(used_by_another(&[], &awaited.approval_id))),
                };
            }
            Some(awaited) => {
                tracing::info!(approval_id = %awaited.approval_id, %what, "asked again: awaiting its approval");
                (self.settle(&awaited, None, started).await, awaited)
            }
            None => {
                let decision = self.warden.authorize(actor, request).await.map_err(|e| match unfit(&e) {
                    Some(message) => Refused::Unfit(message),
                    None => Refused::Answer(answer::refusal(&e)),
                })?;
                match decision.outcome {
                    Outcome::Allow => return Ok(()),
                    Outcome::Deny => return Err(Refused::Answer(answer::denied(&decision))),
                    Outcome::Pending => {}
                }
                let awaited = awaited_of(&decision).map_err(|e| Refused::Answer(answer::refusal(&e)))?;
                tracing::info!(approval_id = %awaited.approval_id, %what, "pending: waits for a person");
                self.pending.remember(actor, asked.clone(), awaited.clone(), SystemTime::now());
                (self.settle(&awaited, Some(decision), started).await, awaited)
            }
        };
        let now = SystemTime::now();
        let forget = || {
            self.pending.take(actor, &asked, &awaited.approval_id, now);
        };
        let decision = match settled {
            Ok(decision) => decision,
            Err(e) => {
                // An approval the monitor cannot answer about (unknown,
                // another harness's): the next try asks afresh.
                if !e.is_transient() {
                    forget();
                }
                return Err(Refused::Answer(answer::refusal(&e)));
            }
        };
        let answered: Result<(), Response<Body>> = match decision.outcome {
            Outcome::Allow => match self.pending.take(actor, &asked, &awaited.approval_id, now) {
                Some(taken) => {
                    claims.taken.push((asked, taken));
                    Ok(())
                }
                None => Err(used_by_another(&decision.policy_ids, &awaited.approval_id)),
            },
            Outcome::Deny => {
                forget();
                tracing::info!(approval_id = %awaited.approval_id, %what, "approval denied");
                Err(answer::denied(&decision))
            }
            Outcome::Pending if past_grace(&awaited, now) => {
                forget();
                Err(answer::not_approved(&decision))
            }
            Outcome::Pending => Err(answer::pending(&decision, awaited.expires_at, what, now)),
        };
        answered.map_err(Refused::Answer)
    }

    /// Awaits approval `awaited` for what is left of the wait (and no
    /// longer than its deadline); `decision`: its state as last seen, if
    /// any (without one the monitor is asked at least once, even with no
    /// wait).
    async fn settle(
        &self,
        awaited: &Awaited,
        mut decision: Option<Decision>,
        started: Instant,
    ) -> Result<Decision, WardenError> {
        loop {
            let until_deadline = awaited
                .expires_at
                .checked_add(EXPIRY_GRACE)
                .and_then(|end| end.duration_since(SystemTime::now()).ok())
                .unwrap_or_default();
            let left = self.wait.left(started.elapsed()).min(until_deadline);
            match decision {
                Some(decision) if decision.outcome != Outcome::Pending || left.is_zero() => return Ok(decision),
                _ => {}
            }
            match self.warden.await_decision(&awaited.approval_id, left.min(AWAIT_AT_MOST)).await {
                Ok(next) if next.approval_id == awaited.approval_id => decision = Some(next),
                Ok(other) => {
                    return Err(WardenError::Protocol(format!(
                        "asked about approval {} and got an answer about {}",
                        awaited.approval_id, other.approval_id
                    )));
                }
                // The monitor may be restarting; the approval survives it.
                Err(e) if e.is_transient() && !left.is_zero() => tokio::time::sleep(RETRY_EVERY.min(left)).await,
                Err(e) => return Err(e),
            }
        }
    }
}

/// The answer to a request whose approval another identical request took.
fn used_by_another(policy_ids: &[String], approval_id: &str) -> Response<Body> {
    answer::answer(
        http::StatusCode::FORBIDDEN,
        "DENY",
        policy_ids,
        &[format!(
            "approval {approval_id} let another identical request through (an approval is used once): send this one again to ask afresh"
        )],
    )
}

/// Whether the monitor has had its moment to say that `awaited` expired.
fn past_grace(awaited: &Awaited, now: SystemTime) -> bool {
    awaited.expires_at.checked_add(EXPIRY_GRACE).is_none_or(|end| now >= end)
}

/// The approval a PENDING decision waits for, if the answer makes sense:
/// an id that can go in a header, and a deadline.
fn awaited_of(decision: &Decision) -> Result<Awaited, WardenError> {
    let id = &decision.approval_id;
    if id.is_empty() || http::HeaderValue::from_str(id).is_err() {
        return Err(WardenError::Protocol(format!("PENDING with approval id `{id}`")));
    }
    let Some(expires_at) = decision.expires_at else {
        return Err(WardenError::Protocol(format!("PENDING approval {id} without a deadline")));
    };
    Ok(Awaited { approval_id: id.clone(), expires_at, held: false })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_is_a_duration_or_the_deadline() {
        let secs = |s| Ok(ApprovalWait::For(Duration::from_secs(s)));
        assert_eq!("0s".parse(), secs(0));
        assert_eq!("0".parse(), secs(0));
        assert_eq!("45".parse(), secs(45));
        assert_eq!("90s".parse(), secs(90));
        assert_eq!("5m".parse(), secs(300));
        assert_eq!("1h30m".parse(), secs(5400));
        assert_eq!("deadline".parse(), Ok(ApprovalWait::Deadline));
        for bad in ["", "m", "5x", "-1s", "1.5m", "5m3", "99999999999999999999s"] {
            assert!(bad.parse::<ApprovalWait>().is_err(), "{bad:?}");
        }
        assert_eq!(ApprovalWait::default().to_string(), "0s");
        assert_eq!(ApprovalWait::For(Duration::from_secs(30)).left(Duration::from_secs(10)), Duration::from_secs(20));
        assert_eq!(ApprovalWait::For(Duration::from_secs(30)).left(Duration::from_secs(40)), Duration::ZERO);
    }
}
