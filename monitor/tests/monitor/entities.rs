//! Another schema than the bundled one: users who sit under a resource
//! entity (`User in [Group, Secret]`). The resource a request names is then
//! also among the user's ancestors; the decision must see both the
//! request's own resource and the user's membership in it.

use std::path::Path;

use warden_monitor::decision::{DecisionConfig, Outcome, SessionFacts, decide};
use warden_monitor::normalize::{Actor, RequestInput, ResourceInput, normalize};
use warden_monitor::policy::PolicySnapshot;

#[test]
fn a_user_under_the_requested_resource_is_decided_like_any_other() {
    let bundled = Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies");
    let dir = tempfile::tempdir().unwrap();
    let schema = std::fs::read_to_string(bundled.join("schema.cedarschema")).unwrap();
    assert!(schema.contains("entity User in [Group] {"));
    std::fs::write(
        dir.path().join("schema.cedarschema"),
        schema.replace("entity User in [Group] {", "entity User in [Group, Secret] {"),
    )
    .unwrap();
    let entities = serde_json::json!([
        // Attributes that differ from the request's: the request's win.
        { "uid": { "type": "Secret", "id": "vault" }, "attrs": { "name": "declared" }, "parents": [] },
        { "uid": { "type": "User", "id": "alice" }, "attrs": {}, "parents": [{ "type": "Secret", "id": "vault" }] },
        { "uid": { "type": "User", "id": "bob" }, "attrs": {}, "parents": [] },
    ]);
    std::fs::write(dir.path().join("entities.json"), entities.to_string()).unwrap();
    std::fs::write(
        dir.path().join("vault.cedar"),
        "@id(\"vault-owners\") @reason(\"owners of the vault use it\")\n\
         permit (principal, action == Action::\"secret.use\", resource == Secret::\"vault\")\n\
         when { principal.owner in resource && resource.name == \"vault\" };\n",
    )
    .unwrap();
    let snapshot = PolicySnapshot::load(dir.path()).unwrap_or_else(|e| panic!("{e}"));
    let now = time::OffsetDateTime::now_utc();
    let facts = SessionFacts { harness: "test".into(), ..SessionFacts::default() };
    for (user, want) in [("alice", Outcome::Allow), ("bob", Outcome::Deny)] {
        let input = RequestInput {
            request_id: String::new(),
            actor: Actor { user: user.into(), agent: "claude-code".into(), session: format!("s-{user}") },
            action: "secret.use".into(),
            resource: ResourceInput::Secret { name: "vault".into() },
            justification: String::new(),
            context_json: String::new(),
        };
        let request = normalize(&input).unwrap();
        for config in [DecisionConfig::default(), DecisionConfig { use_index: false, ..DecisionConfig::default() }] {
            let evaluation = decide(&snapshot, &request, &facts, now, &config).unwrap();
            assert_eq!(evaluation.outcome, want, "{user}: {evaluation:?}");
        }
    }
}
