"""The client against a real wardend: the behaviours the Rust SDK's tests
cover, for ``Client`` and ``AsyncClient`` both (``flavour``)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pytest

import warden
from conftest import Approver, Wardend, policy_dir
from warden.v1 import authority_pb2 as pb

ALICE = warden.Actor("alice", "python-harness", "py-session-1")
PUSH = ["git", "push", "origin", "main"]
# Waits for a person whom an approver token may answer (a push to main
# needs a passkey on the approval page: test_passkey_page.py).
DELETE = ["rm", "-r", "build"]


class AsyncAsSync:
    """AsyncClient behind Client's blocking interface: each call runs on a
    fresh event loop with a client made inside it, as a harness would."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args, self.kwargs = args, kwargs

    def _run(self, name: str, *args: Any, **kwargs: Any) -> Any:
        async def call() -> Any:
            async with warden.AsyncClient(*self.args, **self.kwargs) as client:
                return await getattr(client, name)(*args, **kwargs)

        return asyncio.run(call())

    def authorize(self, *args: Any, **kwargs: Any) -> warden.Decision:
        return self._run("authorize", *args, **kwargs)

    def check(self, *args: Any, **kwargs: Any) -> warden.Decision:
        return self._run("check", *args, **kwargs)

    def close(self) -> None:
        pass


@pytest.fixture(params=["sync", "async"])
def connect(request: pytest.FixtureRequest) -> Callable[..., Any]:
    """Makes a client of the test's flavour."""
    made: list[Any] = []

    def make(*args: Any, **kwargs: Any) -> Any:
        client = warden.Client(*args, **kwargs) if request.param == "sync" else AsyncAsSync(*args, **kwargs)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


def harness(monitor: Wardend, connect: Callable[..., Any], **kwargs: Any) -> Any:
    return connect(monitor.endpoint, monitor.token("harness"), **kwargs)


def in_background(call: Callable[[], warden.Decision]) -> Future[warden.Decision]:
    pool = ThreadPoolExecutor(max_workers=1)
    future = pool.submit(call)
    pool.shutdown(wait=False)
    return future


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_allowed_read_returns_the_decision(wardend: Wardend, connect) -> None:
    client = harness(wardend, connect)
    decision = client.check(ALICE, warden.read_file("src/main.rs", cwd="/home/alice/project"))
    assert decision.outcome is warden.Outcome.ALLOW and decision.allowed
    assert decision.policy_ids, "an ALLOW names the permits that allowed it"
    assert decision.audit_seq > 0
    assert decision.policy_version


def test_a_denied_read_raises_denied_naming_the_policy(wardend: Wardend, connect) -> None:
    client = harness(wardend, connect)
    with pytest.raises(warden.Denied) as denied:
        client.check(ALICE, warden.read_file("/home/alice/project/.env"))
    assert type(denied.value) is warden.Denied
    assert denied.value.policy_ids and denied.value.reasons
    # What an agent is told names the policy and its reason.
    assert denied.value.policy_ids[0] in str(denied.value)
    assert denied.value.reasons[0] in str(denied.value)
    # authorize answers the same DENY as a value.
    decision = client.authorize(ALICE, warden.read_file("/etc/shadow"))
    assert decision.outcome is warden.Outcome.DENY


def test_the_same_request_id_is_one_decision(wardend: Wardend, connect) -> None:
    client = harness(wardend, connect)
    request = warden.read_file("/home/alice/project/README.md")
    request_id = warden.new_request_id()
    first = client.authorize(ALICE, request, request_id=request_id)
    again = client.authorize(ALICE, request, request_id=request_id)
    assert first.request_id == again.request_id == request_id
    assert (again.outcome, again.policy_ids, again.reasons) == (first.outcome, first.policy_ids, first.reasons)
    # A retry is an answer too: a replay record of its own, naming the first.
    (replay,) = [r for r in wardend.audit() if r.seq == again.audit_seq]
    assert replay.kind == "replay" and replay.request_id == request_id
    assert replay.reasons[0].startswith(f"repeats audit record #{first.audit_seq}:"), replay.reasons
    # The same id for another request is refused, naming the field.
    with pytest.raises(warden.Refused) as refused:
        client.authorize(ALICE, warden.read_file("/home/alice/project/other"), request_id=request_id)
    assert "request_id" in refused.value.details


def test_pending_then_approved_returns_allowed(wardend: Wardend, approver: Approver, connect) -> None:
    client = harness(wardend, connect)
    request_id = warden.new_request_id()
    waiting = in_background(lambda: client.check(ALICE, warden.run(DELETE, cwd="/home/alice/project"), request_id=request_id, justification="1.2"))
    approval = approver.pending(lambda a: a.request.request_id == request_id)
    assert approval.request.justification == "1.2"
    assert not waiting.done(), "check returned before anyone approved"
    approver.resolve(approval.approval_id, True, "go ahead")
    decision = waiting.result(timeout=30)
    assert decision.outcome is warden.Outcome.ALLOW
    assert decision.approval_id == approval.approval_id
    assert (decision.resolved_by, decision.note) == ("approver", "go ahead")


def test_pending_then_denied_raises_denied_with_the_note(wardend: Wardend, approver: Approver, connect) -> None:
    client = harness(wardend, connect)
    request_id = warden.new_request_id()
    waiting = in_background(lambda: client.check(ALICE, warden.run(PUSH), request_id=request_id))
    approval = approver.pending(lambda a: a.request.request_id == request_id)
    approver.resolve(approval.approval_id, False, "not on a Friday")
    with pytest.raises(warden.Denied) as denied:
        waiting.result(timeout=30)
    assert denied.value.resolved_by == "approver"
    assert denied.value.note == "not on a Friday"
    assert "not on a Friday" in str(denied.value)


def test_authorize_returns_pending_as_it_is(wardend: Wardend, connect) -> None:
    decision = harness(wardend, connect).authorize(ALICE, warden.run(PUSH))
    assert decision.outcome is warden.Outcome.PENDING
    assert decision.approval_id and decision.expires_at is not None
    assert "commands.protected-branch-push" in decision.policy_ids


def test_silence_denies_at_the_deadline(own_wardend, tmp_path: Path, connect) -> None:
    policies = policy_dir(
        tmp_path / "policies",
        """
        @id("read") permit (principal, action == Action::"fs.read", resource);
        @id("quick") @reason("needs a quick yes") @timeout("2s")
        forbid (principal, action == Action::"fs.read", resource) unless { context.approved };
        """,
    )
    monitor = own_wardend(policies)
    started = time.monotonic()
    with pytest.raises(warden.ApprovalExpired) as expired:
        harness(monitor, connect).check(ALICE, warden.read_file("/tmp/x"))
    assert time.monotonic() - started >= 1.5, "expired before the approval's 2 s deadline"
    assert expired.value.policy_ids == ("quick",)
    assert any(r.startswith("no approver answered before") for r in expired.value.reasons), expired.value.reasons
    assert expired.value.decision.outcome is warden.Outcome.DENY


def test_waiting_survives_a_monitor_restart(own_wardend, connect) -> None:
    monitor = own_wardend()
    client = harness(monitor, connect)
    request_id = warden.new_request_id()
    waiting = in_background(lambda: client.check(ALICE, warden.run(DELETE, cwd="/home/alice/project"), request_id=request_id))
    person = monitor.approver()
    approval = person.pending(lambda a: a.request.request_id == request_id)
    person.close()
    # A crash while the harness waits; the same monitor comes back on the
    # same port and data, and the approver answers there.
    # (The kill may come before check() has its first answer: then it asks
    # again with the same request id and gets the same approval.)
    monitor.kill()
    monitor.start()
    assert not waiting.done(), f"check returned while the monitor was down: {waiting.result()}"
    person = monitor.approver()
    person.resolve(approval.approval_id, True, "after the restart")
    person.close()
    decision = waiting.result(timeout=60)
    assert decision.outcome is warden.Outcome.ALLOW
    assert decision.note == "after the restart"
    assert decision.approval_id == approval.approval_id


def test_an_approval_given_across_a_crash_answers_the_waiting_harness_once(own_wardend, connect) -> None:
    """SIGKILL between the approval and the answer: the waiting harness
    gets the ALLOW once when the monitor is back, and the request id asked
    again after that is refused, naming the approval's use."""
    monitor = own_wardend()
    client = harness(monitor, connect)
    request_id = warden.new_request_id()
    delete = warden.run(DELETE, cwd="/home/alice/project")
    waiting = in_background(lambda: client.check(ALICE, delete, request_id=request_id))
    person = monitor.approver()
    approval = person.pending(lambda a: a.request.request_id == request_id)
    person.close()
    monitor.kill()
    # The person approves on a monitor of the same data at another address,
    # which the harness does not know of, and which dies (SIGKILL) before
    # anyone is told; then the harness's monitor comes back.
    other = Wardend(monitor.data, monitor.policies).start()
    person = other.approver()
    person.resolve(approval.approval_id, True, "across a crash")
    person.close()
    other.kill()
    monitor.start()
    decision = waiting.result(timeout=60)
    assert decision.outcome is warden.Outcome.ALLOW
    assert decision.note == "across a crash"
    again = client.authorize(ALICE, delete, request_id=request_id)
    assert again.outcome is warden.Outcome.DENY
    assert again.reasons[0].startswith(f"approval `{approval.approval_id}` was used"), again.reasons
    answers = [r.kind for r in monitor.audit() if r.approval_id == approval.approval_id and r.kind != "decision"]
    assert answers[:2] == ["approval.approved", "approval.used"] or answers[:2] == ["approval.approved", "replay"], answers
    assert answers[2:] == ["replay"], answers
    allowed = [r for r in monitor.audit() if r.approval_id == approval.approval_id and r.outcome == pb.ALLOW]
    assert [r.kind for r in allowed] == ["approval.approved", answers[1]], allowed


def test_an_unreachable_monitor_raises_unavailable(connect) -> None:
    client = connect(f"http://127.0.0.1:{free_port()}", "wdn_some_token", timeout=1.0)
    started = time.monotonic()
    with pytest.raises(warden.Unavailable) as unavailable:
        client.check(ALICE, warden.read_file("/home/alice/project/README.md"))
    assert unavailable.value.code is grpc.StatusCode.UNAVAILABLE
    assert time.monotonic() - started < 20, "retries are bounded by the client's timeout"


def test_a_wrong_token_is_refused_clearly(wardend: Wardend, connect) -> None:
    with pytest.raises(warden.Refused) as refused:
        connect(wardend.endpoint, "wdn_not_a_token").check(ALICE, warden.read_file("/home/alice/project/README.md"))
    assert refused.value.code is grpc.StatusCode.UNAUTHENTICATED
    assert "unknown token" in str(refused.value)
    # An approver's token is not a harness's.
    with pytest.raises(warden.Refused) as refused:
        connect(wardend.endpoint, wardend.token("approver")).check(ALICE, warden.read_file("/x"))
    assert refused.value.code is grpc.StatusCode.PERMISSION_DENIED


def test_bad_input_is_refused_naming_the_field(wardend: Wardend, connect) -> None:
    with pytest.raises(warden.Refused) as refused:
        harness(wardend, connect).check(ALICE, warden.read_file("relative/path"))
    assert refused.value.code is grpc.StatusCode.INVALID_ARGUMENT
    assert "path" in refused.value.details and "cwd" in refused.value.details


def test_configuration_errors_name_what_is_wrong(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("WARDEN_ENDPOINT", "WARDEN_TOKEN", "WARDEN_TOKEN_FILE", "WARDEN_CA_CERT", "WARDEN_CLIENT_CERT"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(warden.ConfigurationError, match="WARDEN_TOKEN"):
        warden.Client()
    with pytest.raises(warden.ConfigurationError, match="token_file"):
        warden.Client(token_file=tmp_path / "missing")
    # A token file others can read is refused, as ssh refuses such a key.
    shared = tmp_path / "shared.token"
    shared.write_text("wdn_abc\n")
    shared.chmod(0o644)
    with pytest.raises(warden.ConfigurationError, match=r"read or written by others \(mode 0644\): chmod 600"):
        warden.Client(token_file=shared)
    shared.chmod(0o600)
    warden.Client(token_file=shared)
    with pytest.raises(warden.ConfigurationError, match="endpoint `127.0.0.1:1`"):
        warden.Client("127.0.0.1:1", "t")
    with pytest.raises(warden.ConfigurationError, match="unix:/absolute/path"):
        warden.AsyncClient("unix:relative.sock", "t")
    with pytest.raises(warden.ConfigurationError, match="client_cert and client_key"):
        warden.Client("https://localhost:1", "t", client_cert=tmp_path / "c.pem")
    with pytest.raises(TypeError, match="not one string"):
        warden.run("git push")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="argv"):
        warden.run([])


def test_endpoint_and_token_file_from_the_environment(
    wardend: Wardend, monkeypatch: pytest.MonkeyPatch, connect
) -> None:
    monkeypatch.delenv("WARDEN_TOKEN", raising=False)
    monkeypatch.setenv("WARDEN_ENDPOINT", wardend.endpoint)
    monkeypatch.setenv("WARDEN_TOKEN_FILE", str(wardend.data / "harness.token"))
    assert connect().check(ALICE, warden.read_file("/home/alice/project/README.md")).allowed


def test_a_unix_socket_endpoint(own_wardend, tmp_path: Path, connect) -> None:
    socket_path = tmp_path / "wardend.sock"
    monitor = own_wardend(args=["--socket", str(socket_path)])
    client = connect(f"unix:{socket_path}", monitor.token("harness"))
    assert client.check(ALICE, warden.read_file("/home/alice/project/README.md")).allowed
    with pytest.raises(warden.Denied):
        client.check(ALICE, warden.read_file("/etc/shadow"))


def test_many_async_checks_at_once(wardend: Wardend) -> None:
    async def main() -> list[warden.Decision]:
        async with warden.AsyncClient(wardend.endpoint, wardend.token("harness")) as client:
            actors = [warden.Actor("alice", "python-harness", f"py-many-{i}") for i in range(50)]
            return await asyncio.gather(
                *(client.check(a, warden.read_file("/home/alice/project/README.md")) for a in actors)
            )

    decisions = asyncio.run(main())
    assert all(d.allowed for d in decisions)
    assert len({d.audit_seq for d in decisions}) == 50, "one audit record each"


def test_one_client_from_many_threads(wardend: Wardend) -> None:
    client = warden.Client(wardend.endpoint, wardend.token("harness"))
    results: list[bool] = []
    lock = threading.Lock()

    def work(i: int) -> None:
        actor = warden.Actor("alice", "python-harness", f"py-thread-{i}")
        allowed = client.check(actor, warden.read_file("/home/alice/project/README.md")).allowed
        with lock:
            results.append(allowed)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    client.close()
    assert results == [True] * 8
