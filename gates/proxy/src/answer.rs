//! The proxy's own answers to a client: JSON bodies saying what Warden
//! decided (or why it could not be asked), never a request upstream.

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt as _, Full};
use serde_json::{Map, Value, json};
use warden_sdk::{Decision, Error as WardenError};

/// The body of every response the proxy gives.
pub type Body = BoxBody<Bytes, hyper::Error>;

/// The header that says what Warden decided, on the proxy's own answers.
pub const DECISION_HEADER: &str = "x-warden-decision";

/// The header naming the approval a PENDING answer waits for.
pub const APPROVAL_HEADER: &str = "warden-approval";

/// What a PENDING answer suggests as the time before sending the request
/// again (`Retry-After`), at most: a person may answer at any moment.
pub const RETRY_AFTER: Duration = Duration::from_secs(10);

/// An empty body.
pub fn empty() -> Body {
    Full::new(Bytes::new()).map_err(|never| match never {}).boxed()
}

/// A JSON answer of the proxy's own.
pub fn answer(status: StatusCode, outcome: &str, policy_ids: &[String], reasons: &[String]) -> Response<Body> {
    answer_with(status, outcome, policy_ids, reasons, Map::new())
}

/// A JSON answer of the proxy's own, with fields besides `outcome`,
/// `policy_ids` and `reasons`.
fn answer_with(
    status: StatusCode,
    outcome: &str,
    policy_ids: &[String],
    reasons: &[String],
    mut fields: Map<String, Value>,
) -> Response<Body> {
    fields.insert("outcome".into(), json!(outcome));
    fields.insert("policy_ids".into(), json!(policy_ids));
    fields.insert("reasons".into(), json!(reasons));
    let body = Value::Object(fields).to_string();
    let mut response = Response::new(Full::new(Bytes::from(body)).map_err(|never| match never {}).boxed());
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(DECISION_HEADER, HeaderValue::from_str(outcome).unwrap_or(HeaderValue::from_static("ERROR")));
    response
}

/// The client's answer for a request Warden did not allow, or could not
/// be asked about.
pub fn refusal(error: &WardenError) -> Response<Body> {
    match error {
        WardenError::Denied(decision) => denied(decision),
        WardenError::NotApproved(decision) => not_approved(decision),
        other => {
            answer(StatusCode::SERVICE_UNAVAILABLE, "ERROR", &[], &[format!("Warden could not be asked: {other}")])
        }
    }
}

/// 403 DENY, with the approver's note when a person denied it.
pub fn denied(decision: &Decision) -> Response<Body> {
    let mut reasons = decision.reasons.clone();
    let mut fields = Map::new();
    if !decision.approval_id.is_empty() {
        fields.insert("approval_id".into(), json!(decision.approval_id));
    }
    if !decision.note.is_empty() {
        let by = if decision.resolved_by.is_empty() { "the approver" } else { decision.resolved_by.as_str() };
        reasons.push(format!("note from `{by}`: {}", decision.note));
        fields.insert("note".into(), json!(decision.note));
    }
    answer_with(StatusCode::FORBIDDEN, "DENY", &decision.policy_ids, &reasons, fields)
}

/// 403 DENY for an approval whose deadline passed with nobody's answer.
pub fn not_approved(decision: &Decision) -> Response<Body> {
    let mut reasons = decision.reasons.clone();
    reasons.push(format!("not approved in time (approval {})", decision.approval_id));
    let fields = Map::from_iter([("approval_id".to_owned(), json!(decision.approval_id))]);
    answer_with(StatusCode::FORBIDDEN, "DENY", &decision.policy_ids, &reasons, fields)
}

/// 403 PENDING: a person must approve `what` (approval `decision`, which
/// expires at `deadline`); the same request sent again once it is approved
/// goes through. `Warden-Approval` names the approval, `Retry-After` says
/// when to look again.
pub fn pending(decision: &Decision, deadline: SystemTime, what: &str, now: SystemTime) -> Response<Body> {
    let id = &decision.approval_id;
    let until = rfc3339(deadline);
    let mut reasons = decision.reasons.clone();
    reasons.push(format!(
        "a person must approve {what} (approval {id}, until {until}): send the same request again once it is approved, and it goes through (once)"
    ));
    let fields = Map::from_iter([
        ("approval_id".to_owned(), json!(id)),
        ("expires_at".to_owned(), json!(until)),
        ("pending".to_owned(), json!(what)),
    ]);
    let mut response = answer_with(StatusCode::FORBIDDEN, "PENDING", &decision.policy_ids, &reasons, fields);
    let retry = deadline.duration_since(now).unwrap_or_default().min(RETRY_AFTER).as_secs().max(1);
    let headers = response.headers_mut();
    headers.insert(header::RETRY_AFTER, HeaderValue::from(retry));
    // The approval id was checked to be a header value before it was
    // remembered; should it not be one, the body still names it.
    if let Ok(value) = HeaderValue::from_str(id) {
        headers.insert(APPROVAL_HEADER, value);
    }
    response
}

/// `2025-01-31T12:00:00Z`.
fn rfc3339(at: SystemTime) -> String {
    time::OffsetDateTime::from(at)
        .replace_nanosecond(0)
        .ok()
        .and_then(|at| at.format(&time::format_description::well_known::Rfc3339).ok())
        .unwrap_or_else(|| format!("{at:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decision(id: &str) -> Decision {
        Decision {
            request_id: "r".into(),
            outcome: warden_sdk::Outcome::Pending,
            policy_ids: vec!["http.post-needs-approval".into()],
            reasons: vec!["sending data out needs a person's approval".into()],
            approval_id: id.into(),
            expires_at: None,
            grant_ids: vec![],
            policy_version: "v".into(),
            audit_seq: 1,
            resolved_by: String::new(),
            note: String::new(),
            labels: vec![],
        }
    }

    async fn body(response: Response<Body>) -> Value {
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[tokio::test]
    async fn a_pending_answer_names_its_approval_and_deadline() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let response = pending(&decision("apr-1"), now + Duration::from_secs(120), "this request", now);
        assert_eq!(response.status(), StatusCode::FORBIDDEN);
        assert_eq!(response.headers()[APPROVAL_HEADER], "apr-1");
        assert_eq!(response.headers()[header::RETRY_AFTER], "10");
        assert_eq!(response.headers()[DECISION_HEADER], "PENDING");
        let body = body(response).await;
        assert_eq!(body["outcome"], "PENDING");
        assert_eq!(body["approval_id"], "apr-1");
        assert_eq!(body["expires_at"], "2023-11-14T22:15:20Z");
        assert_eq!(body["policy_ids"], json!(["http.post-needs-approval"]));
        assert!(body["reasons"][1].as_str().unwrap().contains("send the same request again"), "{body}");
        // Close to the deadline, sooner.
        let response = pending(&decision("apr-1"), now + Duration::from_millis(2500), "this request", now);
        assert_eq!(response.headers()[header::RETRY_AFTER], "2");
    }

    #[tokio::test]
    async fn a_denial_carries_the_approvers_note() {
        let mut denial = decision("apr-2");
        denial.outcome = warden_sdk::Outcome::Deny;
        denial.resolved_by = "oncall".into();
        denial.note = "not on a Friday".into();
        let body = body(denied(&denial)).await;
        assert_eq!(body["outcome"], "DENY");
        assert_eq!(body["note"], "not on a Friday");
        assert_eq!(body["approval_id"], "apr-2");
        assert!(body["reasons"][1].as_str().unwrap().contains("note from `oncall`: not on a Friday"), "{body}");
    }
}
