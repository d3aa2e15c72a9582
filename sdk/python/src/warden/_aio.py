"""``AsyncClient``: the asyncio client (grpc.aio), with ``Client``'s rules."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc

from ._client import _Base
from ._errors import ConfigurationError
from ._model import Actor, Decision, Request
from ._waiting import AWAIT_SLACK, Retry, Waiting, answer_to, error_of, replica_down
from .v1 import authority_pb2 as pb
from .v1 import authority_pb2_grpc

T = TypeVar("T")


class AsyncClient(_Base):
    """Like :class:`warden.Client`, for asyncio harnesses: the same arguments,
    environment and semantics, with ``await``.

    It may be made outside an event loop and used from several in turn
    (``asyncio.run`` twice, a framework's own loop): its channel is made in
    the loop of the first call, and anew when the loop changes."""

    def _open(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._channels: list[grpc.aio.Channel] = []
        self._stubs: list[authority_pb2_grpc.AuthorityStub] = []

    def _replicas(self) -> list[authority_pb2_grpc.AuthorityStub]:
        # grpc.aio channels belong to the loop they were made in.
        loop = asyncio.get_running_loop()
        if not self._stubs or self._loop is not loop:
            self._loop = loop
            self._channels = self._settings.aio_channels()
            self._stubs = [
                authority_pb2_grpc.AuthorityStub(channel)  # type: ignore[no-untyped-call]
                for channel in self._channels
            ]
        return self._stubs

    async def _on_replicas(self, call: Callable[[authority_pb2_grpc.AuthorityStub], Awaitable[T]]) -> T:
        """See :meth:`warden.Client._on_replicas`."""
        stubs = self._replicas()
        order = self._rotation.order()
        for step, index in enumerate(order, 1):
            try:
                answer = await call(stubs[index])
            except grpc.RpcError as error:
                if not replica_down(error):
                    self._rotation.answered(index)
                elif step < len(order):
                    continue
                raise
            self._rotation.answered(index)
            return answer
        raise ConfigurationError("no endpoint")

    async def close(self) -> None:
        if self._channels and self._loop is asyncio.get_running_loop():
            for channel in self._channels:
                await channel.close()
        self._channels, self._stubs, self._loop = [], [], None

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
                asked = waiting.await_request(seconds)
                answer = await self._on_replicas(
                    lambda stub: stub.AwaitDecision(asked, timeout=seconds + AWAIT_SLACK, metadata=self._metadata)
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
            answer = await self._on_replicas(
                lambda stub: stub.AwaitDecision(request, timeout=timeout + AWAIT_SLACK, metadata=self._metadata)
            )
        except grpc.RpcError as error:
            raise error_of(error) from None
        return Decision.from_proto(answer)

    async def _authorize(self, message: pb.AuthorizeRequest) -> Decision:
        retry = Retry(self.timeout)
        while True:
            try:
                answer = await self._on_replicas(
                    lambda stub: stub.Authorize(message, timeout=retry.remaining(), metadata=self._metadata)
                )
            except grpc.RpcError as error:
                await asyncio.sleep(retry.failed(error))
                continue
            return answer_to(message.request_id, answer)
