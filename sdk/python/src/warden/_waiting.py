"""The fail-closed rules both clients follow, without I/O: which errors are
worth retrying, which mean a replica is down and the call goes to the next,
how long to back off, what a final decision means, and how ``check`` waits
through PENDING. ``Client`` and ``AsyncClient`` only make the
calls and sleep."""

from __future__ import annotations

import time
from datetime import datetime, timezone

import grpc

from ._errors import ApprovalExpired, Denied, ProtocolError, Refused, Unavailable
from ._model import Decision, Outcome
from .v1 import authority_pb2 as pb

# Worth asking again soon: the monitor is restarting, or a call timed out.
TRANSIENT = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED})
# After an approval's deadline the monitor denies it; wait this long for the
# monitor to say so (with its reason) before giving up by ourselves.
EXPIRY_GRACE = 2.0
# The longest single AwaitDecision call; a longer wait is several.
MAX_AWAIT = 30.0
# AwaitDecision's own timeout is the server's; the call's deadline is later.
AWAIT_SLACK = 10.0


def replica_down(error: grpc.RpcError) -> bool:
    """Whether a call failed because its replica is down (not reached, the
    connection lost, or shutting down or without its store, which another
    replica may have): then the same call goes to the next replica. Every
    call of this client may go twice: ``Authorize`` always carries a request
    id (the next replica answers the decision recorded for it again), and
    ``AwaitDecision`` reads an approval of the shared store."""
    return bool(error.code() == grpc.StatusCode.UNAVAILABLE)


class Rotation:
    """Which replica a call goes to: the one that answered last, then each
    other once, in the order of the endpoint list."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.current = 0

    def order(self) -> list[int]:
        return [(self.current + step) % self.count for step in range(self.count)]

    def answered(self, index: int) -> None:
        """The replica at ``index`` answered (anything but down): the next
        call starts there."""
        self.current = index


def error_of(error: grpc.RpcError) -> Unavailable | Refused:
    """The package's error for a failed call."""
    code = error.code()
    details = error.details() or ""
    if code in TRANSIENT:
        return Unavailable(f"cannot reach the monitor ({code.name}): {details}", code)
    return Refused(code, details)


def denial(decision: Decision) -> Denied | ApprovalExpired:
    """The error a DENY is."""
    # An approval that ends with nobody's name on it expired: a person's
    # denial or a lockdown carries who did it.
    if decision.approval_id and not decision.resolved_by:
        return ApprovalExpired(decision)
    return Denied(decision)


def final(decision: Decision) -> Decision:
    """The decision when it is ALLOW; raises the error a DENY is."""
    if decision.outcome is Outcome.ALLOW:
        return decision
    if decision.outcome is Outcome.DENY:
        raise denial(decision)
    raise ProtocolError(f"{decision.outcome.value} is not a final decision")


class Retry:
    """Backoff for one call, bounded by a deadline."""

    def __init__(self, timeout: float) -> None:
        self.deadline = time.monotonic() + timeout
        self.backoff = 0.05

    def remaining(self) -> float:
        return max(self.deadline - time.monotonic(), 0.001)

    def failed(self, error: grpc.RpcError) -> float:
        """How long to sleep before the next try; raises when there is none."""
        if error.code() not in TRANSIENT or time.monotonic() + self.backoff >= self.deadline:
            raise error_of(error) from None
        delay, self.backoff = self.backoff, min(self.backoff * 2, 1.0)
        return delay


def answer_to(request_id: str, answer: pb.Decision) -> Decision:
    """The decision in ``answer``, which must be about ``request_id``: an
    answer about another request is no answer."""
    decision = Decision.from_proto(answer)
    if decision.request_id != request_id:
        raise ProtocolError(f"asked about request {request_id} and got an answer about {decision.request_id!r}")
    return decision


class Waiting:
    """``check`` after its first answer: while PENDING, wait on that
    approval (``AwaitDecision``; approvals survive a monitor restart, so after
    a lost connection it asks again about the same one) until the deadline
    the first answer gave. An answer about another request or approval is a
    protocol error: the wait never moves to a new approval."""

    def __init__(self, request_id: str, decision: Decision) -> None:
        self.request_id = request_id
        self.decision = decision
        self.approval_id = decision.approval_id
        self.deadline = decision.expires_at
        self.last_error: grpc.RpcError | None = None
        self.backoff = 0.05

    def pending(self) -> float | None:
        """Seconds to wait on the approval now, or None when the decision is
        final. Raises when the approval's deadline has passed."""
        decision = self.decision
        if decision.outcome is not Outcome.PENDING:
            return None
        if not self.approval_id:
            raise ProtocolError("PENDING without an approval id")
        if self.deadline is None:
            raise ProtocolError(f"approval {self.approval_id} is PENDING without a deadline")
        remaining = (self.deadline - datetime.now(timezone.utc)).total_seconds() + EXPIRY_GRACE
        if remaining <= 0:
            if self.last_error is not None:
                raise error_of(self.last_error) from None
            raise ApprovalExpired(decision)
        return min(remaining, MAX_AWAIT)

    def await_request(self, seconds: float) -> pb.AwaitDecisionRequest:
        return pb.AwaitDecisionRequest(approval_id=self.approval_id, timeout_ms=max(int(seconds * 1000), 1))

    def answered(self, answer: pb.Decision) -> None:
        decision = answer_to(self.request_id, answer)
        if decision.approval_id != self.approval_id:
            raise ProtocolError(
                f"asked about approval {self.approval_id} and got an answer about {decision.approval_id!r}"
            )
        self.decision = decision
        self.last_error = None
        self.backoff = 0.05

    def failed(self, error: grpc.RpcError) -> float:
        """How long to sleep before asking again; raises for a final error."""
        if error.code() not in TRANSIENT:
            raise error_of(error) from None
        self.last_error = error
        delay, self.backoff = self.backoff, min(self.backoff * 2, 1.0)
        return delay

    def result(self) -> Decision:
        return final(self.decision)
