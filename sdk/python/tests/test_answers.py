"""check() against a monitor that answers wrongly: a fake Authority on
loopback. Nothing but an ALLOW for the very request returns."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest

import warden
from warden.v1 import authority_pb2 as pb
from warden.v1 import authority_pb2_grpc

ACTOR = warden.Actor("alice", "python-harness", "py-fake")
Answer = Callable[[pb.AuthorizeRequest], pb.Decision]


class Fake(authority_pb2_grpc.AuthorityServicer):
    def __init__(self) -> None:
        self.authorize: Answer = lambda r: pb.Decision(request_id=r.request_id, outcome=pb.ALLOW)
        self.await_decision: Callable[[pb.AwaitDecisionRequest], pb.Decision] = lambda r: pb.Decision()

    def Authorize(self, request: pb.AuthorizeRequest, context: Any) -> pb.Decision:
        return self.authorize(request)

    def AwaitDecision(self, request: pb.AwaitDecisionRequest, context: Any) -> pb.Decision:
        try:
            return self.await_decision(request)
        except _Unavailable:
            context.abort(grpc.StatusCode.UNAVAILABLE, "restarting")


@pytest.fixture
def fake() -> Iterator[tuple[Fake, warden.Client]]:
    servicer = Fake()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    authority_pb2_grpc.add_AuthorityServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    client = warden.Client(f"http://127.0.0.1:{port}", "wdn_fake", timeout=2.0)
    yield servicer, client
    client.close()
    server.stop(grace=None)


def pending(request: pb.AuthorizeRequest, approval: str = "apr-1", seconds: int = 600) -> pb.Decision:
    import time

    decision = pb.Decision(request_id=request.request_id, outcome=pb.PENDING, approval_id=approval)
    decision.expires_at.seconds = int(time.time()) + seconds
    return decision


def test_an_allow_for_another_request_is_no_allow(fake) -> None:
    servicer, client = fake
    for other in ("someone-elses-request", ""):
        servicer.authorize = lambda r, other=other: pb.Decision(request_id=other, outcome=pb.ALLOW)
        with pytest.raises(warden.ProtocolError, match="answer about"):
            client.check(ACTOR, warden.run(["rm", "-rf", "/"]))
    # The same answer about the request asked about is an ALLOW.
    servicer.authorize = lambda r: pb.Decision(request_id=r.request_id, outcome=pb.ALLOW)
    assert client.check(ACTOR, warden.run(["ls"])).allowed


def test_an_answer_about_another_approval_is_no_answer(fake) -> None:
    servicer, client = fake
    asked: dict[str, str] = {}

    def authorize(request: pb.AuthorizeRequest) -> pb.Decision:
        asked["id"] = request.request_id
        return pending(request)

    servicer.authorize = authorize
    servicer.await_decision = lambda r: pb.Decision(request_id=asked["id"], outcome=pb.ALLOW, approval_id="apr-2")
    with pytest.raises(warden.ProtocolError, match="apr-1"):
        client.check(ACTOR, warden.run(["git", "push"]))


def test_unknown_outcomes_and_impossible_deadlines_are_protocol_errors(fake) -> None:
    servicer, client = fake
    servicer.authorize = lambda r: pb.Decision(request_id=r.request_id, outcome=pb.OUTCOME_UNSPECIFIED)
    with pytest.raises(warden.ProtocolError, match="not ALLOW, DENY or PENDING"):
        client.check(ACTOR, warden.run(["ls"]))

    def far(request: pb.AuthorizeRequest) -> pb.Decision:
        decision = pending(request)
        decision.expires_at.seconds = 10**15
        return decision

    servicer.authorize = far
    with pytest.raises(warden.ProtocolError, match="expires_at"):
        client.check(ACTOR, warden.run(["ls"]))
    servicer.authorize = lambda r: pb.Decision(request_id=r.request_id, outcome=pb.PENDING)
    with pytest.raises(warden.ProtocolError, match="without an approval id"):
        client.check(ACTOR, warden.run(["ls"]))


def test_the_token_is_not_in_a_repr() -> None:
    from warden import _connection

    settings = _connection.resolve("http://127.0.0.1:1", "wdn_s3cr3t", None, None, None, None)
    assert "s3cr3t" not in repr(settings)


def test_after_a_lost_connection_the_wait_stays_on_its_approval(fake) -> None:
    # The monitor restarts with other policies while check() waits: asked
    # afresh, the request would get a new approval with a new deadline. The
    # wait asks about the approval it was given, never Authorize again.
    servicer, client = fake
    asked: list[str] = []
    awaited: list[str] = []

    def authorize(request: pb.AuthorizeRequest) -> pb.Decision:
        asked.append(request.request_id)
        return pending(request, approval="apr-first" if len(asked) == 1 else "apr-second")

    def await_decision(request: pb.AwaitDecisionRequest, context: Any = None) -> pb.Decision:
        awaited.append(request.approval_id)
        if len(awaited) == 1:
            raise _Unavailable()
        return pb.Decision(request_id=asked[0], outcome=pb.ALLOW, approval_id="apr-first", resolved_by="oncall")

    servicer.authorize = authorize
    servicer.await_decision = await_decision
    decision = client.check(ACTOR, warden.run(["git", "push"]))
    assert decision.allowed and decision.approval_id == "apr-first"
    assert len(asked) == 1, "asked Authorize again while waiting"
    assert awaited == ["apr-first", "apr-first"]


class _Unavailable(Exception):
    """Raised by the fake to make its handler answer UNAVAILABLE."""
