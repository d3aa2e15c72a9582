"""Several endpoints: the client finds a live replica, and a call that fails
because its replica is down goes to the next with the same request id; a
refusal is an answer, and goes nowhere else. Real wardend processes, each
with its own data folder and the same tokens."""

from __future__ import annotations

import asyncio
import shutil
import socket
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

import warden
from conftest import Wardend, eventually

ALICE = warden.Actor("alice", "python-harness", "py-replicas")
READ = warden.read_file("src/main.rs", cwd="/home/alice/project")
# Waits for a person whom an approver token may answer.
DELETE = warden.run(["rm", "-r", "build"], cwd="/home/alice/project")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def dead_endpoint() -> str:
    """A replica that is down: a loopback port nothing listens on."""
    return f"http://127.0.0.1:{free_port()}"


class Replicas:
    """Monitors started by a test, killed at its end; the second and later
    get the first one's credentials (the same tokens), each its own data."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.started: list[Wardend] = []

    def start(self, args: list[str] | None = None, data: Path | None = None, address: str | None = None) -> Wardend:
        if data is None:
            data = self.root / f"replica-{len(self.started)}"
            if self.started:
                data.mkdir(mode=0o700)
                first = self.started[0].data
                for name in ["credentials.toml", *(p.name for p in first.glob("*.token"))]:
                    shutil.copy2(first / name, data / name)
        monitor = Wardend(data, args=args or [])
        if address is not None:
            monitor.address = address
        self.started.append(monitor.start())
        return monitor

    def kill(self) -> None:
        for monitor in self.started:
            monitor.kill()


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[Replicas]:
    made = Replicas(tmp_path)
    yield made
    made.kill()


def decided(monitor: Wardend) -> list[str]:
    """The request ids of the monitor's decision records."""
    return [record.request_id for record in monitor.audit() if record.kind == "decision"]


def test_a_replica_that_is_down_is_passed_over(replicas: Replicas) -> None:
    live = replicas.start()
    endpoints = f"{dead_endpoint()}, {live.endpoint}"
    with warden.Client(endpoints, live.token("harness")) as client:
        assert client.authorize(ALICE, READ, request_id="sync-1").outcome is warden.Outcome.ALLOW
        # No request id given: one is made before the first replica is asked.
        made = client.authorize(ALICE, READ)
        assert made.request_id

    async def asynchronously() -> warden.Decision:
        async with warden.AsyncClient(endpoints, live.token("harness")) as client:
            return await client.authorize(ALICE, READ, request_id="async-1")

    assert asyncio.run(asynchronously()).outcome is warden.Outcome.ALLOW
    assert decided(live) == ["sync-1", made.request_id, "async-1"]


def test_every_replica_down_is_unavailable() -> None:
    with warden.Client(f"{dead_endpoint()},{dead_endpoint()}", "wdn_x", timeout=0.5) as client:
        with pytest.raises(warden.Unavailable):
            client.authorize(ALICE, READ)


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_calls_go_on_at_the_next_replica_when_one_is_killed(replicas: Replicas, flavour: str) -> None:
    first, second = replicas.start(), replicas.start()
    endpoints = f"{first.endpoint},{second.endpoint}"
    token = first.token("harness")

    def session(ids: list[str], between: Callable[[], None]) -> None:
        if flavour == "sync":
            with warden.Client(endpoints, token) as client:
                client.authorize(ALICE, READ, request_id=ids[0])
                between()
                for request_id in ids[1:]:
                    client.authorize(ALICE, READ, request_id=request_id)
            return

        async def run() -> None:
            async with warden.AsyncClient(endpoints, token) as client:
                await client.authorize(ALICE, READ, request_id=ids[0])
                between()
                for request_id in ids[1:]:
                    await client.authorize(ALICE, READ, request_id=request_id)

        asyncio.run(run())

    seen: dict[str, list[str]] = {}

    def crash() -> None:
        seen["first"] = decided(first)
        first.kill()

    session(["before", "after-1", "after-2"], crash)
    assert seen["first"] == ["before"]
    assert decided(second) == ["after-1", "after-2"]


def test_an_empty_entry_is_a_configuration_error() -> None:
    for endpoints, place in [("http://127.0.0.1:1,,http://127.0.0.1:2", "entry 2 of 3"), (",unix:/x", "entry 1 of 2")]:
        for make in (warden.Client, warden.AsyncClient):
            with pytest.raises(warden.ConfigurationError, match=place):
                make(endpoints, "wdn_x")
    # Each entry is checked as a single endpoint is.
    with pytest.raises(warden.ConfigurationError, match="`ftp://x`"):
        warden.Client("http://127.0.0.1:1,ftp://x", "wdn_x")
    with pytest.raises(warden.ConfigurationError, match="plaintext"):
        warden.Client("https://127.0.0.1:1,http://127.0.0.1:2", "wdn_x", ca_cert="/nonexistent.pem")


def test_a_deliberate_refusal_is_not_sent_to_another_replica(replicas: Replicas) -> None:
    ports = [free_port(), free_port()]
    first = replicas.start(["--metrics", f"127.0.0.1:{ports[0]}"])
    second = replicas.start(["--metrics", f"127.0.0.1:{ports[1]}"])
    endpoints = f"{dead_endpoint()},{first.endpoint},{second.endpoint}"

    # An approver's token cannot ask for decisions: PERMISSION_DENIED.
    with warden.Client(endpoints, first.token("approver")) as client:
        with pytest.raises(warden.Refused) as refused:
            client.authorize(ALICE, READ)
    assert refused.value.code is grpc.StatusCode.PERMISSION_DENIED
    # Bad input: INVALID_ARGUMENT, audited where it was refused.
    with warden.Client(endpoints, first.token("harness")) as client:
        with pytest.raises(warden.Refused) as refused:
            client.authorize(ALICE, warden.read_file("relative/path"))
    assert refused.value.code is grpc.StatusCode.INVALID_ARGUMENT

    def metrics(port: int) -> str | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
                return str(answer.read().decode())
        except OSError:
            return None

    asked = [eventually("the metrics", lambda port=port: metrics(port)) for port in ports]
    authorize = [line for line in asked[0].splitlines() if "/warden.v1.Authority/Authorize" in line]
    assert any('code="7"' in line for line in authorize), asked[0]
    assert any('code="3"' in line for line in authorize), asked[0]
    assert "/warden.v1.Authority/Authorize" not in asked[1], "the second replica was asked"
    assert [r.kind for r in first.audit()] == ["invalid-request"]
    assert list(second.audit()) == []


def in_background(call: Callable[[], warden.Decision]) -> Future[warden.Decision]:
    pool = ThreadPoolExecutor(max_workers=1)
    future = pool.submit(call)
    pool.shutdown(wait=False)
    return future


def test_a_wait_for_an_approval_goes_on_at_the_next_replica(replicas: Replicas) -> None:
    """The replica the harness waits on is killed; the next replica, on the
    same store (here: the same data folder, opened once the first is gone),
    has the approval, and the wait goes on there until it is approved."""
    first = replicas.start()
    next_address = f"127.0.0.1:{free_port()}"
    endpoints = f"{first.endpoint},http://{next_address}"
    client = warden.Client(endpoints, first.token("harness"))
    request_id = warden.new_request_id()
    waiting = in_background(lambda: client.check(ALICE, DELETE, request_id=request_id))
    person = first.approver()
    approval = person.pending(lambda a: a.request.request_id == request_id)
    person.close()

    first.kill()
    second = replicas.start(data=first.data, address=next_address)
    assert not waiting.done(), f"check returned while no replica was up: {waiting.result()}"
    person = second.approver()
    person.resolve(approval.approval_id, True, "on the next replica")
    person.close()
    decision = waiting.result(timeout=60)
    client.close()
    assert decision.outcome is warden.Outcome.ALLOW
    assert (decision.approval_id, decision.note) == (approval.approval_id, "on the next replica")
