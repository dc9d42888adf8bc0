"""A test peer for the client side of a link: a raw-upgrade edge on 127.0.0.1 whose every
answer the test chooses (refuse, never answer, register and then act), so `run_link`, hostd
and the connector can be driven into each of their ends with real sockets."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import attrs
import trio

from devyard.core import ControlChannel, Session, UpgradeRequest, accept_upgrade, open_session

#: What the peer does with the n-th connection (0-based) once its upgrade request is read.
Handler = Callable[[int, UpgradeRequest], Awaitable[None]]


@attrs.define
class LinkPeer:
    port: int
    connections: int = 0
    hellos: list[dict[str, Any]] = attrs.field(factory=list)
    changed: trio.Event = attrs.field(factory=trio.Event)

    def url(self, path: str = "/v1/host_connections") -> str:
        return f"tcp://127.0.0.1:{self.port}{path}"

    def note(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    async def wait_for(self, condition: Callable[[], bool]) -> None:
        while not condition():
            await self.changed.wait()


async def _serve_one(peer: LinkPeer, handler: Handler, stream: trio.SocketStream) -> None:
    number = peer.connections
    peer.connections += 1
    peer.note()
    request = await accept_upgrade(stream)
    if request is None:
        return
    try:
        await handler(number, request)
    finally:
        await trio.aclose_forcefully(stream)


@asynccontextmanager
async def open_link_peer(handler: Handler) -> AsyncIterator[LinkPeer]:
    async with trio.open_nursery() as nursery:
        peer = LinkPeer(port=0)
        listeners = await nursery.start(
            partial(trio.serve_tcp, partial(_serve_one, peer, handler), 0, host="127.0.0.1")
        )
        peer.port = listeners[0].socket.getsockname()[1]
        yield peer
        nursery.cancel_scope.cancel()


async def register(
    peer: LinkPeer,
    request: UpgradeRequest,
    reply: dict[str, Any],
    then: Callable[[Session, ControlChannel], Awaitable[None]],
) -> None:
    """Accept the upgrade, read the ``hello`` (recorded on *peer*), send *reply*, run *then*."""
    stream = await request.accept()
    async with open_session(stream, client=False) as session:
        control = ControlChannel(await session.accept_stream())
        peer.hellos.append(await control.receive())
        peer.note()
        await control.send(reply)
        await then(session, control)
