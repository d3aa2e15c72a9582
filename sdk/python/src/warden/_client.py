"""``Client``: the blocking client."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import grpc

from . import _connection
from ._errors import ConfigurationError
from ._model import Actor, Decision, Request, new_request_id
from ._waiting import AWAIT_SLACK, Retry, Rotation, Waiting, answer_to, error_of, replica_down
from .v1 import authority_pb2 as pb
from .v1 import authority_pb2_grpc

T = TypeVar("T")

DEFAULT_TIMEOUT = 10.0


class _Base:
    """What both clients share: the resolved connection and the requests."""

    def __init__(
        self,
        endpoint: str | None = None,
        token: str | None = None,
        token_file: _connection.PathLike | None = None,
        *,
        ca_cert: _connection.PathLike | None = None,
        client_cert: _connection.PathLike | None = None,
        client_key: _connection.PathLike | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        self._settings = _connection.resolve(endpoint, token, token_file, ca_cert, client_cert, client_key)
        self.endpoint = self._settings.endpoint
        self.timeout = timeout
        self._metadata = self._settings.metadata
        self._rotation = Rotation(len(self._settings.replicas))
        self._open()

    def _open(self) -> None:
        """Makes the channel (or readies to)."""
        raise NotImplementedError

    @staticmethod
    def _message(actor: Actor, request: Request, request_id: str | None, justification: str) -> pb.AuthorizeRequest:
        return request.to_proto(actor, request_id=request_id or new_request_id(), justification=justification)


class Client(_Base):
    """A harness's connection to the monitor (blocking; thread-safe).

    ``endpoint`` is ``http://HOST:PORT``, ``https://HOST:PORT`` (TLS;
    ``ca_cert`` for a private CA, ``client_cert`` and ``client_key`` for
    mutual TLS) or ``unix:/path/to/wardend.sock``. The token is a harness
    token. Every argument left out is read from the environment
    (``WARDEN_ENDPOINT``, ``WARDEN_TOKEN`` / ``WARDEN_TOKEN_FILE``,
    ``WARDEN_CA_CERT``, ``WARDEN_CLIENT_CERT``, ``WARDEN_CLIENT_KEY``).
    ``timeout`` bounds how long ``authorize`` keeps retrying an unreachable
    monitor.

    Several endpoints separated by commas are replicas of one monitor: a
    call that fails because its replica is down (``UNAVAILABLE``) goes to
    the next with the same request id, each replica at most once per call;
    the next call starts at the replica that answered last.

    Connecting is lazy: a client made while the monitor is down refuses
    (raises :class:`warden.Unavailable`) until it is up.
    """

    def _open(self) -> None:
        self._channels = self._settings.channels()
        self._stubs = [
            authority_pb2_grpc.AuthorityStub(channel)  # type: ignore[no-untyped-call]
            for channel in self._channels
        ]

    def close(self) -> None:
        for channel in self._channels:
            channel.close()

    def _on_replicas(self, call: Callable[[authority_pb2_grpc.AuthorityStub], T]) -> T:
        """``call`` on the replica that answered last, then on each other
        while the one asked is down; the last one's error when all are."""
        order = self._rotation.order()
        for step, index in enumerate(order, 1):
            try:
                answer = call(self._stubs[index])
            except grpc.RpcError as error:
                if not replica_down(error):
                    self._rotation.answered(index)
                elif step < len(order):
                    continue
                raise
            self._rotation.answered(index)
            return answer
        raise ConfigurationError("no endpoint")

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def authorize(
        self,
        actor: Actor,
        request: Request,
        *,
        request_id: str | None = None,
        justification: str = "",
    ) -> Decision:
        """Asks for a decision and returns it as it is, PENDING included.
        Retries while the monitor is unavailable, up to the client's timeout;
        the request id (fresh unless given) makes the retries safe."""
        message = self._message(actor, request, request_id, justification)
        return self._authorize(message)

    def check(
        self,
        actor: Actor,
        request: Request,
        *,
        request_id: str | None = None,
        justification: str = "",
    ) -> Decision:
        """Fail-closed: returns only when the action is allowed, after waiting
        through PENDING until the approval's deadline. Raises
        :class:`warden.Denied`, :class:`warden.ApprovalExpired`,
        :class:`warden.Unavailable`, or another :class:`warden.WardenError`
        (bad input, a wrong token) otherwise.

        While waiting it survives a monitor restart: after a lost
        connection it asks about the same approval again (approvals are
        durable), until the deadline the first answer gave."""
        message = self._message(actor, request, request_id, justification)
        waiting = Waiting(message.request_id, self._authorize(message))
        while (seconds := waiting.pending()) is not None:
            try:
                asked = waiting.await_request(seconds)
                answer = self._on_replicas(
                    lambda stub: stub.AwaitDecision(asked, timeout=seconds + AWAIT_SLACK, metadata=self._metadata)
                )
            except grpc.RpcError as error:
                time.sleep(waiting.failed(error))
                continue
            waiting.answered(answer)
        return waiting.result()

    def await_decision(self, approval_id: str, timeout: float) -> Decision:
        """Waits up to ``timeout`` seconds for an approval; returns the
        decision, still PENDING if nobody answered."""
        request = pb.AwaitDecisionRequest(approval_id=approval_id, timeout_ms=max(int(timeout * 1000), 1))
        try:
            answer = self._on_replicas(
                lambda stub: stub.AwaitDecision(request, timeout=timeout + AWAIT_SLACK, metadata=self._metadata)
            )
        except grpc.RpcError as error:
            raise error_of(error) from None
        return Decision.from_proto(answer)

    def _authorize(self, message: pb.AuthorizeRequest) -> Decision:
        retry = Retry(self.timeout)
        while True:
            try:
                answer = self._on_replicas(
                    lambda stub: stub.Authorize(message, timeout=retry.remaining(), metadata=self._metadata)
                )
            except grpc.RpcError as error:
                time.sleep(retry.failed(error))
                continue
            return answer_to(message.request_id, answer)

