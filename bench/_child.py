"""What every Python helper process of the bench shares: argument parsing of addresses, the
`LISTEN host:port` announcement, the stdin lifeline, and the server loop that keeps going
when one connection breaks.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Awaitable, Callable
from typing import Final

import trio

LOOPBACK: Final = "127.0.0.1"

# The errors one proxied connection may end with when a peer resets or the harness tears the
# path down; they end that connection, never the server.
CONNECTION_ERRORS: Final = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)


def parse_addr(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port)


def announce(host: str, port: int) -> None:
    print(f"LISTEN {host}:{port}", flush=True)


async def open_listener() -> trio.SocketListener:
    """One TCP listener on loopback, an ephemeral port."""
    (listener,) = await trio.open_tcp_listeners(0, host=LOOPBACK)
    return listener


def listener_port(listener: trio.SocketListener) -> int:
    port: int = listener.socket.getsockname()[1]
    return port


async def _lifeline(scope: trio.CancelScope) -> None:
    """Cancel `scope` when stdin reaches EOF: the harness is gone."""
    stdin = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
    async with stdin:
        while await stdin.receive_some(4096):
            pass
    scope.cancel()


async def run_with_lifeline(body: Callable[[], Awaitable[None]]) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_lifeline, nursery.cancel_scope)
        await body()
        nursery.cancel_scope.cancel()


async def serve(
    listener: trio.SocketListener, handler: Callable[[trio.SocketStream], Awaitable[None]]
) -> None:
    """Accept forever; each connection's handler runs in its own task, and a connection that
    breaks only ends itself. (serve_listeners closes each stream after its handler.)"""

    async def guarded(stream: trio.SocketStream) -> None:
        try:
            await handler(stream)
        except* CONNECTION_ERRORS:
            pass

    await trio.serve_listeners(guarded, [listener])
