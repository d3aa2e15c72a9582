//! An approval ceremony (a challenge bound to one approval) starts only for
//! an approval that still waits, and finishes only for one that still does.

use super::*;
use crate::decision::Outcome;
use crate::service::Resolution;

fn path(approval_id: &str, step: &str) -> String {
    format!("/api/approvals/{approval_id}/{step}")
}

/// Signs `ops` in with a confirmed passkey: the tab and its authenticator.
async fn signed_in_ops(fixture: &Fixture) -> (Tab, Authenticator) {
    let mut ops = Authenticator::new(ORIGIN);
    fixture.enrol(&mut ops, "ops", "ops").await;
    let (status, me, tab) = fixture.sign_in(&mut ops, 0).await;
    assert_eq!(status, StatusCode::OK, "{me}");
    (tab.unwrap(), ops)
}

async fn pending(fixture: &Fixture, argv: &[&str]) -> String {
    let decision = fixture.ask(argv).await;
    assert_eq!(decision.outcome, Outcome::Pending, "{decision:?}");
    decision.approval_id
}

/// Denies `approval_id` as approver `ops` with its token (no passkey needed).
async fn deny_with_token(fixture: &Fixture, approval_id: &str) {
    let ops = fixture.credentials.approver("ops").unwrap();
    let resolution =
        Resolution { approval_id: approval_id.to_owned(), approve: false, note: "no".into(), ..Resolution::default() };
    fixture.monitor.resolve(&ops, resolution).await.unwrap();
}

/// Moves the clock past `approval_id`'s deadline (the sweeper not run).
async fn past_deadline(fixture: &Fixture, approval_id: &str) {
    let deadline = fixture.monitor.approval(approval_id).await.unwrap().expires_unix_ns;
    let left = deadline - crate::service::unix_ns(fixture.monitor.now());
    fixture.advance(std::time::Duration::from_nanos(u64::try_from(left).unwrap()) + std::time::Duration::from_secs(1));
}

#[tokio::test]
async fn no_ceremony_starts_for_an_approval_approved_denied_or_expired() {
    let fixture = Fixture::new();
    let (tab, mut ops) = signed_in_ops(&fixture).await;

    // Approved on the page, with a passkey.
    let approved = pending(&fixture, &["deploy", "production", "a"]).await;
    let (status, started, _) =
        fixture.call(&path(&approved, "start"), Some(json!({ "approve": true })), Some(&tab)).await;
    assert_eq!(status, StatusCode::OK, "{started}");
    let credential = ops.get(&started["options"], 0);
    let body = json!({ "ceremony": started["ceremony"], "credential": credential });
    let (status, done, _) = fixture.call(&path(&approved, "finish"), Some(body), Some(&tab)).await;
    assert_eq!((status, &done["state"]), (StatusCode::OK, &json!("APPROVED")), "{done}");
    // Denied with a token.
    let denied = pending(&fixture, &["deploy", "production", "b"]).await;
    deny_with_token(&fixture, &denied).await;
    // Past its deadline, still PENDING in the store until the sweeper runs.
    let expired = pending(&fixture, &["deploy", "production", "c"]).await;
    past_deadline(&fixture, &expired).await;
    assert_eq!(fixture.monitor.approval(&expired).await.unwrap().state, crate::model::ApprovalState::Pending);

    for (approval_id, how) in [(&approved, "approved by `ops`"), (&denied, "denied by `ops`"), (&expired, "expired at")]
    {
        for approve in [true, false] {
            let (status, refused, _) =
                fixture.call(&path(approval_id, "start"), Some(json!({ "approve": approve })), Some(&tab)).await;
            assert_eq!(status, StatusCode::CONFLICT, "{approval_id}: {refused}");
            let error = refused["error"].as_str().unwrap();
            assert!(error.contains(&format!("approval `{approval_id}` is no longer pending")), "{error}");
            assert!(error.contains(how), "{error}");
            // No challenge was made for it.
            assert!(refused.get("ceremony").is_none() && refused.get("options").is_none(), "{refused}");
        }
    }
    assert_eq!(fixture.monitor.passkeys().ceremonies_open(), 0);
}

#[tokio::test]
async fn a_ceremony_started_while_pending_resolves_nothing_once_the_approval_is_resolved_or_expired() {
    let fixture = Fixture::new();
    let (tab, mut ops) = signed_in_ops(&fixture).await;
    let denied = pending(&fixture, &["deploy", "production", "d"]).await;
    let expired = pending(&fixture, &["deploy", "production", "e"]).await;
    let mut signed = Vec::new();
    for approval_id in [&denied, &expired] {
        let (status, started, _) =
            fixture.call(&path(approval_id, "start"), Some(json!({ "approve": true })), Some(&tab)).await;
        assert_eq!(status, StatusCode::OK, "{started}");
        let credential = ops.get(&started["options"], 0);
        signed.push(json!({ "ceremony": started["ceremony"], "credential": credential }));
    }
    deny_with_token(&fixture, &denied).await;
    past_deadline(&fixture, &expired).await;
    for ((approval_id, how), body) in [(&denied, "denied by `ops`"), (&expired, "expired at")].into_iter().zip(signed) {
        let (status, refused, _) = fixture.call(&path(approval_id, "finish"), Some(body), Some(&tab)).await;
        assert_eq!(status, StatusCode::CONFLICT, "{approval_id}: {refused}");
        assert!(refused["error"].as_str().unwrap().contains(how), "{refused}");
        assert_ne!(fixture.monitor.approval(approval_id).await.unwrap().state, crate::model::ApprovalState::Approved);
    }
}
