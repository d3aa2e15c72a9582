"""A real ``wardend`` per test session on a free loopback port, with the
bundled policies, started and stopped by PID; ``Wardend`` for tests that need
their own (other policies, a restart).

The binary: ``$WARDEN_WARDEND``, else ``target/debug/wardend`` of this
repository (``scripts/test`` builds it first).
"""

from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

import grpc
import pytest

from warden.v1 import admin_pb2, admin_pb2_grpc
from warden.v1 import approvals_pb2 as apb
from warden.v1 import approvals_pb2_grpc

REPO = Path(__file__).resolve().parents[3]
BUNDLED = REPO / "policies"
# How long a test waits for an event (the monitor up, an approval listed):
# generous, because it waits for the event, not for speed.
EVENTUALLY = 30.0

T = TypeVar("T")


def wardend_binary() -> Path:
    configured = os.environ.get("WARDEN_WARDEND")
    if configured:
        return Path(configured)
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    return target / "debug" / "wardend"


def eventually(what: str, probe: Callable[[], T | None], within: float = EVENTUALLY) -> T:
    """Asks ``probe`` every 20 ms until it gives something; fails naming
    ``what`` after ``within`` seconds. The one way these tests poll."""
    deadline = time.monotonic() + within
    while True:
        found = probe()
        if found is not None:
            return found
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {within:.0f} s")
        time.sleep(0.02)


class Wardend:
    """One wardend process: its data folder, address and first-start tokens."""

    def __init__(self, data: Path, policies: Path = BUNDLED, args: Sequence[str] = ()) -> None:
        self.data = data
        self.policies = policies
        self.args = list(args)
        self.process: subprocess.Popen[str] | None = None
        self.address = "127.0.0.1:0"

    def start(self) -> Wardend:
        binary = wardend_binary()
        if not binary.exists():
            pytest.fail(f"no wardend at {binary}: run `cargo build -p warden-monitor --bin wardend` (or set WARDEN_WARDEND)")
        self.process = subprocess.Popen(
            [str(binary), "--listen", self.address, "--policies", str(self.policies), "--data", str(self.data), *self.args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "WARDEN_LOG": os.environ.get("WARDEN_TEST_LOG", "warn")},
        )
        lines: queue.Queue[str] = queue.Queue()
        log = (self.data.parent / f"{self.data.name}.log").open("a")

        def read(stream):  # keeps the pipe drained for the process's life, into the log
            for line in stream:
                lines.put(line)
                log.write(line)
                log.flush()

        threading.Thread(target=read, args=(self.process.stdout,), daemon=True).start()
        output = []
        deadline = time.monotonic() + EVENTUALLY
        while True:
            try:
                line = lines.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                self.kill()
                pytest.fail(f"wardend did not start within {EVENTUALLY:.0f} s: {''.join(output)}")
            output.append(line)
            if line.startswith("wardend listening on "):
                self.address = line.split()[3]
                return self
            if self.process.poll() is not None and lines.empty():
                pytest.fail(f"wardend exited with {self.process.returncode}: {''.join(output)}")

    @property
    def endpoint(self) -> str:
        return f"http://{self.address}"

    def token(self, role: str) -> str:
        return (self.data / f"{role}.token").read_text().strip()

    def stop(self) -> None:
        """SIGTERM, and wait for a clean exit."""
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=EVENTUALLY)

    def kill(self) -> None:
        """SIGKILL: a crash."""
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=EVENTUALLY)

    def approver(self) -> Approver:
        return Approver(self.endpoint, self.token("approver"))

    def audit(self) -> list[admin_pb2.AuditRecord]:
        """Every record of the audit log, read with the admin token."""
        with grpc.insecure_channel(self.address) as channel:
            stub = admin_pb2_grpc.AdminStub(channel)
            metadata = (("authorization", f"Bearer {self.token('admin')}"),)
            return list(stub.TailAudit(admin_pb2.TailAuditRequest(all=True), metadata=metadata, timeout=EVENTUALLY))


class Approver:
    """The person on call, over gRPC with the approver token."""

    def __init__(self, endpoint: str, token: str) -> None:
        self.channel = grpc.insecure_channel(endpoint.removeprefix("http://"))
        self.stub = approvals_pb2_grpc.ApprovalsStub(self.channel)
        self.metadata = (("authorization", f"Bearer {token}"),)

    def pending(self, match: Callable[[apb.Approval], bool] = lambda _: True) -> apb.Approval:
        """The first pending approval that matches, as WatchPending reports
        it (the current ones, then each new one): an event, not a poll."""
        events = self.stub.WatchPending(apb.WatchPendingRequest(), metadata=self.metadata, timeout=EVENTUALLY)
        try:
            for event in events:
                if event.approval.state == apb.APPROVAL_STATE_PENDING and match(event.approval):
                    return event.approval
        except grpc.RpcError as e:
            pytest.fail(f"no matching approval within {EVENTUALLY:.0f} s: {e.code().name} {e.details()}")
        finally:
            events.cancel()
        pytest.fail("WatchPending ended without a matching approval")

    def listed(self, match: Callable[[apb.Approval], bool] = lambda _: True) -> list[apb.Approval]:
        """The pending approvals that match, from ListPending."""
        listed = self.stub.ListPending(apb.ListPendingRequest(), metadata=self.metadata)
        return [a for a in listed.approvals if match(a)]

    def resolve(self, approval_id: str, approve: bool, note: str = "") -> apb.Approval:
        return self.stub.Resolve(
            apb.ResolveRequest(approval_id=approval_id, approve=approve, note=note), metadata=self.metadata
        )

    def close(self) -> None:
        self.channel.close()


def policy_dir(into: Path, cedar: str) -> Path:
    """A policy folder: the bundled schema and entities with other policies."""
    into.mkdir(parents=True, exist_ok=True)
    for name in ("schema.cedarschema", "entities.json"):
        shutil.copy(BUNDLED / name, into / name)
    (into / "policies.cedar").write_text(cedar)
    return into


@pytest.fixture(scope="session")
def wardend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Wardend]:
    """The session's monitor, with the bundled policies."""
    monitor = Wardend(tmp_path_factory.mktemp("wardend")).start()
    yield monitor
    monitor.stop()


@pytest.fixture
def approver(wardend: Wardend) -> Iterator[Approver]:
    person = wardend.approver()
    yield person
    person.close()


@pytest.fixture
def own_wardend(tmp_path: Path) -> Iterator[Callable[..., Wardend]]:
    """Starts monitors of the test's own (stopped at the end)."""
    started: list[Wardend] = []

    def start(policies: Path = BUNDLED, args: Sequence[str] = ()) -> Wardend:
        monitor = Wardend(tmp_path / f"data-{len(started)}", policies, args).start()
        started.append(monitor)
        return monitor

    yield start
    for monitor in started:
        monitor.kill()
