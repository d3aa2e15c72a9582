//! "The web" is not the machine itself: the proxy resolves a request's host
//! once, the monitor decides on the addresses and their kinds, and the
//! connection goes to those addresses only.

use std::path::Path;

use crate::support::{Monitor, Proxy, asked, bundled, curl, found_or_skip, raw};
use crate::upstream::Upstream;

/// The bundled schema, entities and HTTP policies into `dir` (the other
/// policy files are about other actions, and may be mid-edit in a working
/// tree).
fn copy_bundled(dir: &Path) {
    for file in ["schema.cedarschema", "entities.json", "http.cedar"] {
        std::fs::copy(bundled().join(file), dir.join(file)).unwrap();
    }
}

/// The schema and entities of the bundled folder, and `policies`.
fn own(dir: &Path, policies: &str) {
    for file in ["schema.cedarschema", "entities.json"] {
        std::fs::copy(bundled().join(file), dir.join(file)).unwrap();
    }
    std::fs::write(dir.join("own.cedar"), policies).unwrap();
}

/// The bundled `http.non-public-address` forbid, as written.
fn bundled_forbid() -> String {
    let text = std::fs::read_to_string(bundled().join("http.cedar")).unwrap();
    let start = text.find("@id(\"http.non-public-address\")").expect("the bundled rule");
    let end = start + text[start..].find("};").unwrap() + 2;
    text[start..end].to_owned()
}

fn policy_ids(answer: &str) -> Vec<String> {
    let body = answer.split_once("\r\n\r\n").map_or(answer, |(_, body)| body);
    let body: serde_json::Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {answer}"));
    body["policy_ids"].as_array().unwrap().iter().map(|id| id.as_str().unwrap().to_owned()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_the_bundled_http_policies_this_machine_is_refused_by_its_address() {
    if !found_or_skip("curl") {
        return;
    }
    let monitor = Monitor::start_in(copy_bundled).await;
    let tls = Upstream::start().await;
    let plain = Upstream::plain().await;
    let proxy = tokio::task::block_in_place(|| Proxy::start(&monitor, &tls.ca_pem));

    // A name for this machine, over TLS: refused for where it points.
    let got = curl(&proxy, &format!("https://localhost:{}/admin", tls.port()), &[]).await;
    assert_eq!(got.status, 403, "{}", got.headers);
    let ids = policy_ids(&got.body);
    assert!(ids.contains(&"http.non-public-address".to_owned()), "{}", got.body);
    // Loopback written as a number, in hex, as IPv4 inside IPv6: the same
    // address, the same refusal.
    let port = plain.port();
    for host in [format!("2130706433:{port}"), format!("0x7f.1:{port}"), format!("[::ffff:127.0.0.1]:{port}")] {
        let answer =
            raw(&proxy, &format!("GET http://{host}/admin HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"))
                .await;
        assert!(answer.starts_with("HTTP/1.1 403"), "{host}: {answer}");
        assert!(policy_ids(&answer).contains(&"http.non-public-address".to_owned()), "{host}: {answer}");
    }
    assert_eq!(tls.connections() + plain.connections(), 0, "the loopback servers were reached");
    // The monitor was told the addresses and their kinds.
    let decided = asked(&monitor, "http.request").await;
    assert_eq!(decided.len(), 4, "{decided:?}");
    for request in &decided {
        assert_eq!(request.pointer("/context/address_kinds"), Some(&serde_json::json!(["loopback"])), "{request}");
    }
    assert_eq!(decided[1].pointer("/context/addresses"), Some(&serde_json::json!(["127.0.0.1"])));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_internal_destination_can_be_allowed_and_is_reached_at_its_decided_address() {
    if !found_or_skip("curl") {
        return;
    }
    // The bundled rule with the exception its comment shows, for the test's
    // loopback server, and a permit for it.
    let policies = format!(
        "{}\n\n@id(\"http.internal\") @reason(\"the internal service\")\n\
         permit (principal, action == Action::\"http.request\", resource) when {{ resource in Domain::\"localhost\" }};\n",
        bundled_forbid().replace(
            "};",
            "}\nunless {\n  resource in Domain::\"localhost\" &&\n  [\"loopback\"].containsAll(context.address_kinds)\n};"
        )
    );
    let monitor = Monitor::start_in(|dir| own(dir, &policies)).await;
    let tls = Upstream::start().await;
    let proxy = tokio::task::block_in_place(|| Proxy::start(&monitor, &tls.ca_pem));
    let port = tls.port();

    let got = curl(&proxy, &format!("https://localhost:{port}/wiki"), &[]).await;
    assert_eq!(got.status, 200, "{}", got.body);
    assert_eq!(tls.seen().len(), 1);
    let decided = asked(&monitor, "http.request").await;
    let context = &decided[0]["context"];
    assert_eq!(context["address_kinds"], serde_json::json!(["loopback"]), "{context}");
    let addresses: Vec<&str> = context["addresses"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    assert!(addresses.contains(&"127.0.0.1"), "the server's address was not decided: {addresses:?}");

    // Another loopback address is not the named destination.
    let connections = tls.connections();
    let got = curl(&proxy, &format!("https://127.0.0.2:{port}/wiki"), &[]).await;
    assert_eq!(got.status, 403, "{}", got.body);
    assert_eq!(got.json()["policy_ids"], serde_json::json!(["http.non-public-address"]));
    assert_eq!(tls.connections(), connections);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_schema_that_cannot_see_addresses_gets_public_ones_only() {
    // Another policy set: its schema gives http.request no context of its
    // own; it allows everything but port 9.
    let monitor = Monitor::start_in(|dir| {
        let schema = std::fs::read_to_string(bundled().join("schema.cedarschema")).unwrap();
        let old = schema.replace("context: HttpContext", "context: RequestContext");
        assert_ne!(old, schema, "the bundled schema gives http.request a context of its own");
        own(
            dir,
            "@id(\"all\") @reason(\"test\") permit (principal, action == Action::\"http.request\", resource);\n\
             @id(\"not-9\") @reason(\"not port 9\") forbid (principal, action == Action::\"http.request\", resource) when { resource.port == 9 };",
        );
        std::fs::write(dir.join("schema.cedarschema"), old).unwrap();
    })
    .await;
    let tls = Upstream::start().await;
    let plain = Upstream::plain().await;
    let proxy = tokio::task::block_in_place(|| Proxy::start(&monitor, &tls.ca_pem));
    let port = plain.port();

    // The policies would allow it, but cannot see where it points: the
    // proxy refuses a loopback address itself, however it is written.
    for host in [format!("localhost:{port}"), format!("2130706433:{port}"), format!("[::ffff:127.0.0.1]:{port}")] {
        let answer =
            raw(&proxy, &format!("GET http://{host}/old HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")).await;
        assert!(answer.starts_with("HTTP/1.1 403"), "{host}: {answer}");
        assert!(answer.contains("127.0.0.1 (loopback)"), "{host}: {answer}");
        assert!(answer.contains("not a public address"), "{host}: {answer}");
        assert!(answer.contains("does not declare http.request's context.address_kinds"), "{host}: {answer}");
    }
    assert_eq!(plain.connections(), 0, "the loopback server was reached");
    // A public address is asked about without the context (here, denied
    // for its port: nothing is sent anywhere).
    let answer =
        raw(&proxy, "GET http://93.184.215.14:9/x HTTP/1.1\r\nHost: 93.184.215.14:9\r\nConnection: close\r\n\r\n")
            .await;
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    assert_eq!(policy_ids(&answer), ["not-9"]);
    let decided = asked(&monitor, "http.request").await;
    assert_eq!(decided.len(), 1, "{decided:?}");
    assert_eq!(decided[0].get("context"), Some(&serde_json::json!({})), "{decided:?}");
    // Said once in the log.
    assert_eq!(proxy.log().matches("does not declare http.request's context").count(), 1, "{}", proxy.log());
}
