//! Signing in names nobody: the page asks for any discoverable passkey
//! (an empty `allowCredentials`) and finds the approver by the credential
//! the assertion names, among confirmed passkeys only, with every check of
//! an assertion kept.

use super::*;

fn b64(bytes: &[u8]) -> String {
    base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, bytes)
}

#[tokio::test]
async fn starting_a_sign_in_lists_no_credential_and_the_passkey_says_who_signs_in() {
    let fixture = Fixture::new();
    let (mut ops, mut release) = (Authenticator::new(ORIGIN), Authenticator::new(ORIGIN));
    fixture.enrol(&mut ops, "ops", "ops").await;
    fixture.enrol(&mut release, "release", "release-managers").await;
    // Anyone may ask, signed in or not: the answer names no approver and
    // no credential id.
    let (status, started, _) = fixture.call("/api/signin/start", Some(json!({})), None).await;
    assert_eq!(status, StatusCode::OK, "{started}");
    let public_key = &started["options"]["publicKey"];
    assert_eq!(public_key["allowCredentials"], json!([]), "{started}");
    assert_eq!(public_key["userVerification"], "required");
    let text = started.to_string();
    for held in ops.held.iter().chain(&release.held) {
        assert!(!text.contains(&b64(&held.id)), "{text}");
    }
    for name in ["ops", "release"] {
        assert!(!text.contains(&format!("\"{name}\"")), "{text}");
    }
    // The passkey chosen at the authenticator says who signs in.
    let (status, me, tab) = fixture.sign_in(&mut release, 0).await;
    assert_eq!((status, me["name"].as_str()), (StatusCode::OK, Some("release")), "{me}");
    let (status, me, _) = fixture.call("/api/me", None, tab.as_ref()).await;
    assert_eq!((status, me["name"].as_str()), (StatusCode::OK, Some("release")), "{me}");
    let (status, me, tab) = fixture.sign_in(&mut ops, 0).await;
    assert_eq!((status, me["name"].as_str()), (StatusCode::OK, Some("ops")), "{me}");
    let (_, me, _) = fixture.call("/api/me", None, tab.as_ref()).await;
    assert_eq!(me["name"], "ops");
}

#[tokio::test]
async fn enrolment_asks_for_a_discoverable_passkey_and_refuses_one_that_is_not() {
    let fixture = Fixture::new();
    let link = fixture.monitor.passkeys().link("ops", vec!["ops".into()], "admin").unwrap();
    let token = Url::parse(&link).unwrap().fragment().unwrap().to_owned();
    let (status, started, _) = fixture.call("/api/enroll/start", Some(json!({ "token": token })), None).await;
    assert_eq!(status, StatusCode::OK, "{started}");
    let selection = &started["options"]["publicKey"]["authenticatorSelection"];
    assert_eq!((&selection["residentKey"], &selection["requireResidentKey"]), (&json!("required"), &json!(true)));
    // A browser that says it made a credential the authenticator does not
    // keep (`credProps.rk` false): it could never sign in, so it is refused.
    let mut authenticator = Authenticator::new(ORIGIN);
    let mut credential = authenticator.create(&started["options"]);
    credential["clientExtensionResults"]["credProps"]["rk"] = json!(false);
    let (status, refused, _) =
        fixture.call("/api/enroll/finish", Some(json!({ "token": token, "credential": credential })), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");
    assert!(refused["error"].as_str().unwrap().contains("discoverable"), "{refused}");
    assert!(fixture.monitor.passkeys().list().is_empty());
}

#[tokio::test]
async fn a_sign_in_keeps_every_check_of_an_assertion() {
    let fixture = Fixture::new();
    let mut authenticator = Authenticator::new(ORIGIN);
    // Registered, not confirmed: it signs in nobody.
    let (status, _) = fixture.register(&mut authenticator, "ops", "ops").await;
    assert_eq!(status, StatusCode::OK);
    let (status, refused, tab) = fixture.sign_in(&mut authenticator, 0).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");
    assert!(refused["error"].as_str().unwrap().contains("no confirmed passkey"), "{refused}");
    assert!(tab.is_none());
    let key_id = fixture.monitor.passkeys().list()[0].key_id();
    fixture.monitor.passkeys().confirm("ops", &key_id, crate::service::unix_ns(fixture.monitor.now())).unwrap();

    // Without user verification.
    authenticator.user_verified = false;
    let (status, refused, _) = fixture.sign_in(&mut authenticator, 0).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");
    authenticator.user_verified = true;

    // A challenge this process did not make.
    let (_, started, _) = fixture.call("/api/signin/start", Some(json!({})), None).await;
    let mut forged = started["options"].clone();
    forged["publicKey"]["challenge"] = json!(b64(&[7u8; 40]));
    let (status, refused, _) = fixture.finish_sign_in(authenticator.get(&forged, 0)).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");
    assert!(refused["error"].as_str().unwrap().contains("not started here"), "{refused}");

    // Used once only (seen with an authenticator that keeps no counter,
    // which webauthn-rs would otherwise refuse first).
    (authenticator.counts, authenticator.held[0].counter) = (false, 0);
    let (_, started, _) = fixture.call("/api/signin/start", Some(json!({})), None).await;
    let signed = authenticator.get(&started["options"], 0);
    let (status, _, tab) = fixture.finish_sign_in(signed.clone()).await;
    assert!(status == StatusCode::OK && tab.is_some());
    let (status, refused, _) = fixture.finish_sign_in(signed).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");
    assert!(refused["error"].as_str().unwrap().contains("already used"), "{refused}");

    // A counter that goes back: a clone.
    authenticator.counts = true;
    let (status, _, _) = fixture.sign_in(&mut authenticator, 0).await;
    assert_eq!(status, StatusCode::OK);
    authenticator.held[0].counter = 0;
    let (status, refused, _) = fixture.sign_in(&mut authenticator, 0).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");
    let error = refused["error"].as_str().unwrap();
    // webauthn-rs sees it first (the passkey kept holds its counter); the
    // page's own check stands behind it.
    assert!(error.contains("compromised") || error.contains("counter went back"), "{refused}");

    // Revoked: it signs in nobody.
    authenticator.held[0].counter = 100;
    fixture.monitor.passkeys().revoke("ops").unwrap();
    let (status, refused, _) = fixture.sign_in(&mut authenticator, 0).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");
    assert!(refused["error"].as_str().unwrap().contains("no confirmed passkey"), "{refused}");
}
