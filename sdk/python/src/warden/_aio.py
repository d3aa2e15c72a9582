"""``AsyncClient``: the asyncio client (grpc.aio), with ``Client``'s rules."""

from __future__ import annotations

import asyncio

import grpc

from ._client import _Base
from ._model import Actor, Decision, Request
from ._waiting import AWAIT_SLACK, Retry, Waiting, answer_to, error_of
from .v1 import authority_pb2 as pb
from .v1 import authority_pb2_grpc


class AsyncClient(_Base):
    """Like :class:`warden.Client`, for asyncio harnesses: the same arguments,
    environment and semantics, with ``await``.

    It may be made outside an event loop and used from several in turn
    (``asyncio.run`` twice, a framework's own loop): its channel is made in
    the loop of the first call, and anew when the loop changes."""

    def _open(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._channel: grpc.aio.Channel | None = None
        self._stub: authority_pb2_grpc.AuthorityStub | None = None

    @property
    def _authority(self) -> authority_pb2_grpc.AuthorityStub:
        # grpc.aio channels belong to the loop they were made in.
        loop = asyncio.get_running_loop()
        if self._stub is None or self._loop is not loop:
            self._loop = loop
            self._channel = self._settings.aio_channel()
            self._stub = authority_pb2_grpc.AuthorityStub(self._channel)  # type: ignore[no-untyped-call]
        return self._stub

    async def close(self) -> None:
        if self._channel is not None and self._loop is asyncio.get_running_loop():
            await self._channel.close()
        self._channel = self._stub = self._loop = None

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def authorize(
        self,
        actor: Actor,
        request: Request,
        *,
        request_id: str | None = None,
        justification: str = "",
    ) -> Decision:
        """See :meth:`warden.Client.authorize`."""
        message = self._message(actor, request, request_id, justification)
        return await self._authorize(message)

    async def check(
        self,
        actor: Actor,
        request: Request,
        *,
        request_id: str | None = None,
        justification: str = "",
    ) -> Decision:
        """See :meth:`warden.Client.check`: returns only when allowed."""
        message = self._message(actor, request, request_id, justification)
        waiting = Waiting(message.request_id, await self._authorize(message))
        while (seconds := waiting.pending()) is not None:
            try:
                answer = await self._authority.AwaitDecision(
                    waiting.await_request(seconds), timeout=seconds + AWAIT_SLACK, metadata=self._metadata
                )
            except grpc.RpcError as error:
                await asyncio.sleep(waiting.failed(error))
                continue
            waiting.answered(answer)
        return waiting.result()

    async def await_decision(self, approval_id: str, timeout: float) -> Decision:
        """See :meth:`warden.Client.await_decision`."""
        request = pb.AwaitDecisionRequest(approval_id=approval_id, timeout_ms=max(int(timeout * 1000), 1))
        try:
            answer = await self._authority.AwaitDecision(
                request, timeout=timeout + AWAIT_SLACK, metadata=self._metadata
            )
        except grpc.RpcError as error:
            raise error_of(error) from None
        return Decision.from_proto(answer)

    async def _authorize(self, message: pb.AuthorizeRequest) -> Decision:
        retry = Retry(self.timeout)
        while True:
            try:
                answer = await self._authority.Authorize(message, timeout=retry.remaining(), metadata=self._metadata)
            except grpc.RpcError as error:
                await asyncio.sleep(retry.failed(error))
                continue
            return answer_to(message.request_id, answer)
