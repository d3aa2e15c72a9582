"""The approval page in a real browser: Debian's Chromium, headless, driven
over the DevTools protocol with a virtual authenticator (WebAuthn domain).

Enrol, sign in, approve a pending request held by an ``@approval("passkey")``
policy, and the harness's ``check()`` returns allowed; without user
verification nothing resolves; an assertion made for one approval replayed
for another, or for the same one again, is refused; a token alone cannot
approve; an approver of another group cannot approve.

Skips when chromium or websocket-client is missing, unless
``WARDEN_REQUIRE_BROWSER`` is set (``.ci/run`` sets it). Screenshots go to
``$WARDEN_SCREENSHOTS`` when set.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import secrets
import shutil
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

import warden
from conftest import BUNDLED, EVENTUALLY, Wardend, eventually
from warden.v1 import admin_pb2 as admin
from warden.v1 import admin_pb2_grpc
from warden.v1 import approvals_pb2 as apb
from warden.v1 import approvals_pb2_grpc

try:
    import websocket
except ImportError:  # pragma: no cover - the skip below says so
    websocket = None

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if not CHROMIUM or websocket is None:
    missing = "chromium" if not CHROMIUM else "websocket-client"
    if os.environ.get("WARDEN_REQUIRE_BROWSER"):
        raise RuntimeError(f"WARDEN_REQUIRE_BROWSER is set but {missing} is missing")
    pytest.skip(f"the approval page's browser tests need {missing}", allow_module_level=True)

POLICIES = """
@id("deploy.allowed") permit (principal, action == Action::"exec", resource in Program::"deploy");
@id("deploy.production") @reason("production needs a person at a passkey")
@approval("passkey") @approvers("ops")
forbid (principal, action == Action::"exec", resource in Program::"deploy")
when { resource.args.contains("production") } unless { context.approved };
"""


class Browser:
    """One headless Chromium and its page, over the DevTools websocket."""

    def __init__(self, profile: Path) -> None:
        self.process = subprocess.Popen(
            [
                CHROMIUM,
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                f"--user-data-dir={profile}",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
                "--window-size=420,900",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        port_file = profile / "DevToolsActivePort"
        port = eventually("chromium's DevTools port", lambda: port_file.read_text().split()[0] if port_file.exists() and port_file.read_text().strip() else None)
        targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json", timeout=10))
        page = next(t for t in targets if t["type"] == "page")
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=EVENTUALLY, suppress_origin=True)
        self.ids = itertools.count(1)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        message_id = next(self.ids)
        self.ws.send(json.dumps({"id": message_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == message_id:
                if "error" in message:
                    raise AssertionError(f"{method}: {message['error']}")
                return message["result"]

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, awaitPromise=True, userGesture=True, returnByValue=True)
        if "exceptionDetails" in result:
            raise AssertionError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def open(self, url: str) -> None:
        self.call("Page.enable")
        self.call("Page.navigate", url=url)
        eventually(f"{url} loaded", lambda: self.evaluate("document.readyState === 'complete' && !!document.body.dataset.page") or None)

    def text(self, selector: str) -> str:
        return self.evaluate(f"(document.querySelector({json.dumps(selector)}) || {{}}).textContent || ''")

    def wait_text(self, selector: str, *starts: str) -> str:
        def probe() -> str | None:
            text = self.text(selector)
            return text if any(text.startswith(s) for s in starts) else None

        return eventually(f"{selector} saying {starts}", probe)

    def screenshot(self, name: str) -> None:
        folder = os.environ.get("WARDEN_SCREENSHOTS")
        if not folder:
            return
        import base64

        # The whole page at a phone's width: laid out at that width first,
        # then measured, then taken at its full height.
        self.call("Emulation.setDeviceMetricsOverride", width=420, height=900, deviceScaleFactor=1, mobile=True)
        height = self.evaluate("Math.ceil(document.documentElement.scrollHeight)")
        self.call("Emulation.setDeviceMetricsOverride", width=420, height=int(height), deviceScaleFactor=1, mobile=True)
        shot = self.call("Page.captureScreenshot", format="png")
        self.call("Emulation.clearDeviceMetricsOverride")
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / f"{name}.png").write_bytes(base64.b64decode(shot["data"]))

    def authenticator(self, verified: bool = True) -> str:
        self.call("WebAuthn.enable", enableUI=False)
        options = {
            "protocol": "ctap2",
            "ctap2Version": "ctap2_1",
            "transport": "internal",
            "hasResidentKey": True,
            "hasUserVerification": True,
            "isUserVerified": verified,
            "automaticPresenceSimulation": True,
        }
        return self.call("WebAuthn.addVirtualAuthenticator", options=options)["authenticatorId"]

    def close(self) -> None:
        try:
            self.ws.close()
        finally:
            self.process.kill()
            self.process.wait(timeout=EVENTUALLY)


def token_entry(name: str, role: str, token: str, extra: str = "") -> str:
    digest = hashlib.sha256(token.encode()).hexdigest()
    return f'[[credentials]]\nname = "{name}"\nrole = "{role}"\ntoken_sha256 = "{digest}"\n{extra}\n'


@pytest.fixture
def page(tmp_path: Path) -> Iterator[tuple[Wardend, dict[str, str], str]]:
    """A wardend with a passkey policy and the approval page on loopback,
    and the tokens of its credentials."""
    policies = tmp_path / "policies"
    policies.mkdir()
    for name in ("schema.cedarschema", "entities.json"):
        shutil.copy(BUNDLED / name, policies / name)
    (policies / "deploy.cedar").write_text(POLICIES)
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    tokens = {name: "wdn_" + secrets.token_urlsafe(24) for name in ("harness", "ops", "release", "admin")}
    (data / "credentials.toml").write_text(
        token_entry("harness", "harness", tokens["harness"], 'users = ["*"]')
        + token_entry("ops", "approver", tokens["ops"], 'groups = ["ops"]')
        + token_entry("release", "approver", tokens["release"], 'groups = ["release-managers"]')
        + token_entry("admin", "admin", tokens["admin"])
    )
    os.chmod(data / "credentials.toml", 0o600)
    monitor = Wardend(data, policies, ["--web", "127.0.0.1:0"]).start()
    log = data.parent / f"{data.name}.log"

    def origin() -> str | None:
        for line in log.read_text().splitlines():
            if line.startswith("wardend approval page on "):
                return line.split()[-1]
        return None

    try:
        yield monitor, tokens, eventually("the approval page serving", origin)
    finally:
        monitor.stop()


def stubs(monitor: Wardend, token: str) -> tuple[Any, Any, tuple[tuple[str, str], ...]]:
    channel = grpc.insecure_channel(monitor.address)
    return admin_pb2_grpc.AdminStub(channel), approvals_pb2_grpc.ApprovalsStub(channel), (("authorization", f"Bearer {token}"),)


def register(browser: Browser, monitor: Wardend, tokens: dict[str, str], name: str) -> str:
    """Opens an enrolment link for `name` and registers a passkey: its key id."""
    admin_stub, _, metadata = stubs(monitor, tokens["admin"])
    link = admin_stub.EnrollApprover(admin.EnrollApproverRequest(name=name), metadata=metadata).url
    browser.open(link)
    browser.evaluate("document.getElementById('enroll-button').click()")
    status = browser.wait_text("#status", "Enrolled", "Not enrolled")
    assert status.startswith(f"Enrolled: approver {name}, passkey "), status
    # The link is spent: opened again, it registers nothing.
    browser.open(link)
    browser.evaluate("document.getElementById('enroll-button').click()")
    again = browser.wait_text("#status", "Enrolled", "Not enrolled")
    assert again.startswith("Not enrolled") and "ask an admin for a new one" in again, again
    return status.split("passkey ", 1)[1].split(".", 1)[0]


def enroll(browser: Browser, monitor: Wardend, tokens: dict[str, str], name: str) -> str:
    """Registers a passkey for `name` and confirms it, as the admin does on
    hearing its key id: the key id."""
    key_id = register(browser, monitor, tokens, name)
    admin_stub, _, metadata = stubs(monitor, tokens["admin"])
    confirmed = admin_stub.ConfirmApprover(admin.ConfirmApproverRequest(name=name, key_id=key_id), metadata=metadata)
    assert confirmed.confirmed and confirmed.key_id == key_id
    return key_id


def sign_in(browser: Browser, origin: str, name: str) -> None:
    browser.open(origin + "/")
    # Settled: signed in as someone, or offering to sign in.
    signed_out = "!document.getElementById('sign-in').hidden"
    eventually("the page settled", lambda: browser.evaluate(f"document.getElementById('who').textContent !== '' || {signed_out}") or None)
    if not browser.evaluate(signed_out):
        browser.evaluate("document.getElementById('sign-out').click()")
        eventually("signed out", lambda: browser.evaluate("document.readyState === 'complete' && !!document.getElementById('sign-in') && !document.getElementById('sign-in').hidden") or None)
    browser.evaluate("document.getElementById('sign-in-button').click()")
    eventually("signed in, or refused", lambda: browser.text("#who") or (browser.text("#status").startswith("Not signed in") or None))
    who = browser.text("#who")
    assert who == f"signed in as {name}", (who, browser.text("#status"))


def pending_on_page(browser: Browser, origin: str, approval_id: str) -> None:
    browser.open(origin + "/")
    selector = f'li[data-approval-id="{approval_id}"]'
    eventually(f"approval {approval_id} listed", lambda: browser.evaluate(f"!!document.querySelector({json.dumps(selector)})") or None)


def click(browser: Browser, approval_id: str, button: str) -> str:
    card = f'li[data-approval-id="{approval_id}"]'
    browser.evaluate(f"document.querySelector({json.dumps(card + ' button.' + button)}).click()")
    return browser.wait_text(card + " .result", "APPROVED", "DENIED", "Not resolved")


def test_a_passkey_approves_on_the_page_and_nothing_else_does(page, tmp_path: Path) -> None:
    monitor, tokens, origin = page
    assert origin.startswith("http://localhost:"), origin
    browser = Browser(tmp_path / "profile")
    try:
        authenticator = browser.authenticator()
        # Registered but not confirmed by an admin: it does not sign in.
        key_id = register(browser, monitor, tokens, "ops")
        browser.open(origin + "/")
        browser.evaluate("document.getElementById('sign-in-button').click()")
        refused = browser.wait_text("#status", "Not signed in")
        assert "no confirmed passkey" in refused, refused
        admin_stub, _, admin_md = stubs(monitor, tokens["admin"])
        listed = admin_stub.ListApprovers(admin.ListApproversRequest(), metadata=admin_md).passkeys
        assert [(p.name, list(p.groups), p.key_id, p.confirmed) for p in listed] == [("ops", ["ops"], key_id, False)]
        with pytest.raises(grpc.RpcError) as wrong_key:
            admin_stub.ConfirmApprover(admin.ConfirmApproverRequest(name="ops", key_id="0" * 16), metadata=admin_md)
        assert wrong_key.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        admin_stub.ConfirmApprover(admin.ConfirmApproverRequest(name="ops", key_id=key_id), metadata=admin_md)

        harness = warden.Client(endpoint=monitor.endpoint, token=tokens["harness"])
        actor = warden.Actor("alice", "claude-code", "s1")
        checked: dict[str, Any] = {}
        waiting = threading.Thread(
            target=lambda: checked.update(decision=harness.check(actor, warden.run(["deploy", "production"]))), daemon=True
        )
        waiting.start()
        _, approvals_stub, ops_md = stubs(monitor, tokens["ops"])
        first = eventually("the deploy pending", lambda: next(iter(approvals_stub.ListPending(apb.ListPendingRequest(), metadata=ops_md).approvals), None))
        assert list(first.passkey_policies) == ["deploy.production"]

        # A token alone, even the right approver's, cannot approve it.
        with pytest.raises(grpc.RpcError) as refused:
            approvals_stub.Resolve(apb.ResolveRequest(approval_id=first.approval_id, approve=True), metadata=ops_md)
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "deploy.production" in refused.value.details()

        # What the agent wrote cannot reorder what the approver reads.
        canary = harness.authorize(actor, warden.run(["deploy", "production", "--canary"]), justification="canary first \u202eevil")
        assert canary.outcome is warden.Outcome.PENDING
        sign_in(browser, origin, "ops")
        # The cookie alone (as another port of localhost would send it) reads
        # nothing: the CSRF token lives in this origin's session storage.
        statuses = browser.evaluate(
            "Promise.all([fetch('/api/me').then(r => r.status),"
            " fetch('/api/me', { headers: { 'X-Warden-CSRF': csrf } }).then(r => r.status)])"
        )
        assert statuses == [401, 200], statuses
        pending_on_page(browser, origin, first.approval_id)
        pending_on_page(browser, origin, canary.approval_id)
        shown = browser.text(f'li[data-approval-id="{canary.approval_id}"]')
        assert "canary first \\u{202e}evil" in shown and "\u202e" not in shown, shown
        card = browser.text(f'li[data-approval-id="{first.approval_id}"]')
        assert "passkey required: deploy.production" in card and '"deploy"' in card and '"production"' in card, card
        browser.screenshot("approval-list")

        # The link a notification opens shows that approval alone.
        browser.open(origin + "/#" + first.approval_id)
        eventually("one approval shown", lambda: browser.evaluate("document.querySelectorAll('li.approval').length === 1 && !document.getElementById('all').hidden") or None)
        browser.screenshot("approval-one")

        # Without user verification the browser refuses and nothing resolves.
        browser.call("WebAuthn.setUserVerified", authenticatorId=authenticator, isUserVerified=False)
        result = click(browser, first.approval_id, "approve")
        assert result.startswith("Not resolved"), result
        still = approvals_stub.GetApproval(apb.GetApprovalRequest(approval_id=first.approval_id), metadata=ops_md)
        assert still.state == apb.APPROVAL_STATE_PENDING
        browser.call("WebAuthn.setUserVerified", authenticatorId=authenticator, isUserVerified=True)

        result = click(browser, first.approval_id, "approve")
        assert result.startswith("APPROVED"), result
        waiting.join(EVENTUALLY)
        decision = checked["decision"]
        assert decision.allowed and decision.resolved_by == "ops", decision
        assert f"approved by `ops` with passkey {key_id}" in decision.reasons, decision.reasons

        # Replays: an assertion made for approval A, offered for B, for a
        # fresh ceremony of A, and for its own ceremony twice.
        a = harness.authorize(actor, warden.run(["deploy", "production", "a"]))
        b = harness.authorize(actor, warden.run(["deploy", "production", "b"]))
        assert a.outcome is warden.Outcome.PENDING and b.outcome is warden.Outcome.PENDING
        replays = browser.evaluate(
            """(async () => {
              const A = %s, B = %s;
              const outcome = async (path, body) => {
                try { const done = await api(path, body); return done.state || "accepted"; }
                catch (e) { return `${e.status} ${e.message}`; }
              };
              const sA = await api(`/api/approvals/${A}/start`, { approve: true });
              const signed = await assert(sA.options);
              const sA2 = await api(`/api/approvals/${A}/start`, { approve: true });
              const sB = await api(`/api/approvals/${B}/start`, { approve: true });
              const sADeny = await api(`/api/approvals/${A}/start`, { approve: false });
              return {
                fresh: await outcome(`/api/approvals/${A}/finish`, { ceremony: sA2.ceremony, credential: signed }),
                other: await outcome(`/api/approvals/${B}/finish`, { ceremony: sB.ceremony, credential: signed }),
                deny: await outcome(`/api/approvals/${A}/finish`, { ceremony: sADeny.ceremony, credential: signed }),
                crossed: await outcome(`/api/approvals/${B}/finish`, { ceremony: sA.ceremony, credential: signed }),
                again: await outcome(`/api/approvals/${A}/finish`, { ceremony: sA.ceremony, credential: signed }),
              };
            })()"""
            % (json.dumps(a.approval_id), json.dumps(b.approval_id))
        )
        for attempt in ("fresh", "other", "deny"):
            assert replays[attempt].startswith("403 "), replays
        # A's own ceremony offered on B's path was spent, refused there, and
        # so is gone for A too.
        assert replays["crossed"].startswith("403 "), replays
        assert replays["again"].startswith("401 "), replays
        for approval in (a, b):
            state = approvals_stub.GetApproval(apb.GetApprovalRequest(approval_id=approval.approval_id), metadata=ops_md).state
            assert state == apb.APPROVAL_STATE_PENDING, replays

        # A's own ceremony used once, the right way: approved.
        once = browser.evaluate(
            """(async () => {
              const s = await api(`/api/approvals/${%s}/start`, { approve: true });
              const signed = await assert(s.options);
              const first = await api(`/api/approvals/${%s}/finish`, { ceremony: s.ceremony, credential: signed });
              let second;
              try { await api(`/api/approvals/${%s}/finish`, { ceremony: s.ceremony, credential: signed }); second = "accepted"; }
              catch (e) { second = `${e.status}`; }
              return [first.state, second];
            })()"""
            % (json.dumps(a.approval_id), json.dumps(a.approval_id), json.dumps(a.approval_id))
        )
        assert once == ["APPROVED", "401"], once

        # An approver of another group, with a passkey of its own, cannot approve.
        browser.call("WebAuthn.removeVirtualAuthenticator", authenticatorId=authenticator)
        browser.authenticator()
        enroll(browser, monitor, tokens, "release")
        sign_in(browser, origin, "release")
        pending_on_page(browser, origin, b.approval_id)
        result = click(browser, b.approval_id, "approve")
        assert result.startswith("Not resolved") and "ops" in result, result
        state = approvals_stub.GetApproval(apb.GetApprovalRequest(approval_id=b.approval_id), metadata=ops_md).state
        assert state == apb.APPROVAL_STATE_PENDING

        # Denying needs no passkey: a token does it.
        approvals_stub.Resolve(apb.ResolveRequest(approval_id=b.approval_id, approve=False, note="no"), metadata=ops_md)

        # Revoked: the passkey signs in no more.
        admin_stub.RevokeApprover(admin.RevokeApproverRequest(name="release"), metadata=admin_md)
        browser.open(origin + "/")
        eventually("a revoked approver signed out", lambda: browser.evaluate("!document.getElementById('sign-in').hidden") or None)

        kinds = [r.kind for r in admin_stub.TailAudit(admin.TailAuditRequest(count=200), metadata=admin_md, timeout=10)]
        for kind in ("approver.enroll-link", "approver.enrolled", "approver.confirmed", "approver.signed-in", "approval.approved", "approver.revoked"):
            assert kind in kinds, kinds
    finally:
        browser.close()


def test_the_page_refuses_other_origins_and_missing_csrf(page) -> None:
    monitor, _, origin = page
    # A state change from another origin (a page the agent serves) is refused.
    request = urllib.request.Request(
        origin + "/api/signin/start", data=b"{}", method="POST",
        headers={"Content-Type": "application/json", "Origin": "http://localhost:1"},
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 403
    # Headers of every answer.
    with urllib.request.urlopen(origin + "/", timeout=10) as answer:
        csp = answer.headers["Content-Security-Policy"]
        assert "default-src 'none'" in csp and "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
        assert answer.headers["X-Content-Type-Options"] == "nosniff"
    # Without a sign-in, nothing is listed.
    with pytest.raises(urllib.error.HTTPError) as unsigned:
        urllib.request.urlopen(origin + "/api/approvals", timeout=10)
    assert unsigned.value.code == 401
    assert monitor.process is not None and monitor.process.poll() is None


def test_a_loopback_page_holds_its_port_on_both_localhost_addresses(tmp_path: Path) -> None:
    """A browser opening http://localhost:PORT may go to ::1 first: if
    another process holds [::1]:PORT, the page does not start."""
    import socket

    squatter = socket.socket(socket.AF_INET6)
    try:
        squatter.bind(("::1", 0))
    except OSError:
        pytest.skip("this machine has no ::1")
    squatter.listen()
    port = squatter.getsockname()[1]
    data = tmp_path / "data"
    process = subprocess.run(
        [str(conftest_binary()), "--listen", "127.0.0.1:0", "--policies", str(BUNDLED), "--data", str(data), "--web", f"127.0.0.1:{port}"],
        capture_output=True, text=True, timeout=EVENTUALLY,
    )  # fmt: skip
    squatter.close()
    assert process.returncode != 0, process.stdout
    assert f"[::1]:{port}" in process.stderr and "localhost" in process.stderr, process.stderr


def test_the_page_over_tls_on_a_name(tmp_path: Path) -> None:
    """HTTPS with the monitor's certificate, at the configured origin."""
    import socket
    import ssl

    from test_tls import _issue

    ca = _issue(tmp_path, "ca", None)
    _issue(tmp_path, "server", ca, server=True)
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    config = tmp_path / "wardend.toml"
    config.write_text(f'web = "127.0.0.1:{port}"\nweb_origin = "https://localhost:{port}"\n')
    data = tmp_path / "data"
    monitor = Wardend(
        data, BUNDLED, ["--config", str(config), "--tls-cert", str(tmp_path / "server.pem"), "--tls-key", str(tmp_path / "server.key")]
    ).start()
    try:
        context = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
        answer = eventually("the page over TLS", lambda: _get(f"https://localhost:{port}/", context))
        assert answer.status == 200
        assert "default-src 'none'" in answer.headers["Content-Security-Policy"]
        # Plain HTTP to the TLS port gets no page.
        with pytest.raises(Exception):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5)
    finally:
        monitor.stop()


def _get(url: str, context: Any) -> Any:
    try:
        return urllib.request.urlopen(url, context=context, timeout=5)
    except urllib.error.URLError:
        return None


def conftest_binary() -> Path:
    from conftest import wardend_binary

    return wardend_binary()
