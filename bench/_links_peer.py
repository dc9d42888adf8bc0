"""The two sides of `bench links`: many idle links between two processes.

    python -m bench._links_peer server --links N
    python -m bench._links_peer client --connect HOST:PORT --links N [--carrier tcp|ws]

A link is what a connector link is to the edge, without the edge's bookkeeping: one transport
(TCP, or a WebSocket with devyard's own framing), a session, a control stream opened by the
client that says `hello` and gets `registered`, and then nothing but the sessions' keepalives.
The server side per link is the edge's link prologue (`_route.serve_link`): a session, the
accepted control stream, and one task waiting on that stream for the next message.

The server prints `LISTEN host:port`, then `LINKS n` once n links are registered; the client
prints `READY n` once its n links are. Both raise their open-file limit to the hard limit
first (`resource.setrlimit`): 10,000 links are 10,000 sockets on each side.
"""

from __future__ import annotations

import argparse
import gc
import resource
import sys
from contextlib import AsyncExitStack
from functools import partial

import trio

from bench._child import (
    CONNECTION_ERRORS,
    LOOPBACK,
    announce,
    listener_port,
    parse_addr,
    run_with_lifeline,
)
from devyard.core import ControlChannel, open_session, open_transport
from devyard.core._groups import leaves
from devyard.core.upgrade import PrefixedStream, accept_upgrade
from devyard.core.wsframe import accept_websocket, is_websocket_upgrade

_DIALS_AT_ONCE = 64


#: Collector thresholds with --freeze-every: Python's are (700, 10, 10).
GC_THRESHOLDS = (50_000, 20, 100)


class _Freezer:
    """With `every` > 0: the collector's thresholds raised (GC_THRESHOLDS), and gc.freeze()
    each time `every` more links are up, so what a link holds for its whole life leaves the
    collector's generations. With Python's defaults, the full collections of a process holding
    thousands of links took seconds each (4.6 s at 4,000 link pairs in one process at load
    15), ever more often as links were added, and links whose process stalled that long
    missed their keepalives (bench/README.md). A link frozen and then ended leaks what only a
    reference cycle held: fine for a bench."""

    def __init__(self, every: int) -> None:
        self.every = every
        self._next = every
        if every:
            gc.set_threshold(*GC_THRESHOLDS)

    def link_up(self, count: int) -> None:
        if self.every and count >= self._next:
            self._next = count + self.every
            gc.freeze()


def raise_fd_limit() -> int:
    """Raise RLIMIT_NOFILE to its hard limit; return the new soft limit."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


async def _serve_link(
    stream: trio.SocketStream, registered: list[int], target: int, freezer: _Freezer
) -> None:
    transport: trio.abc.Stream = stream
    first = await stream.receive_some(1)  # "G": an HTTP upgrade (a WebSocket); else raw frames
    transport = PrefixedStream(stream, bytes(first))
    if first == b"G":
        request = await accept_upgrade(transport)
        if request is None or not is_websocket_upgrade(request):
            return
        transport = await accept_websocket(request)
    async with open_session(transport, client=False) as session:
        control = ControlChannel(await session.accept_stream())
        hello = await control.receive()
        await control.send({"type": "registered", "id": hello.get("id")})
        registered[0] += 1
        freezer.link_up(registered[0])
        try:
            if registered[0] == target:  # all held at once (a link that ends is not counted)
                print(f"LINKS {target}", flush=True)
            while True:  # the edge's serve loop: wait for the connector's next message
                await control.receive()
        finally:
            registered[0] -= 1


async def _server(target: int, freezer: _Freezer) -> None:
    (listener,) = await trio.open_tcp_listeners(0, host=LOOPBACK, backlog=4096)
    announce(LOOPBACK, listener_port(listener))
    registered = [0]

    async def handler(stream: trio.SocketStream) -> None:
        try:
            await _serve_link(stream, registered, target, freezer)
        except* (*CONNECTION_ERRORS, trio.EndOfChannel):
            pass

    await trio.serve_listeners(handler, [listener])


async def _client(address: tuple[str, int], target: int, carrier: str, freezer: _Freezer) -> None:
    limit = trio.Semaphore(_DIALS_AT_ONCE)
    ready = [0]
    scheme = "tcp" if carrier == "tcp" else "ws"
    url = f"{scheme}://{address[0]}:{address[1]}" + ("" if carrier == "tcp" else "/link")

    async def link(i: int) -> None:
        while True:  # as a connector does: a link that ends is dialled again
            registered = False
            reason = "the session ended"
            try:
                async with AsyncExitStack() as stack:
                    # until registered: a link the server has not taken yet waits in its
                    # listen backlog, and would time out there with thousands in front of it
                    async with limit:
                        transport = await stack.enter_async_context(open_transport(url))
                        session = await stack.enter_async_context(
                            open_session(transport, client=True)
                        )
                        control = ControlChannel(await session.open_stream())
                        await control.send({"type": "hello", "id": i})
                        await control.receive()
                    registered = True
                    ready[0] += 1
                    freezer.link_up(ready[0])
                    if ready[0] == target:
                        print(f"READY {target}", flush=True)
                    await session.wait_ended()
                    reason = f"the session ended: {session.error}"
            except* (*CONNECTION_ERRORS, trio.EndOfChannel) as group:
                reason = "; ".join(repr(exc) for exc in leaves(group))
            if registered:
                ready[0] -= 1
            state = "registered" if registered else "not registered"
            print(f"link {i} ({state}) ended; dialling again: {reason}", file=sys.stderr)

    async with trio.open_nursery() as nursery:
        for i in range(target):
            nursery.start_soon(link, i)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench._links_peer")
    parser.add_argument("role", choices=["server", "client"])
    parser.add_argument("--links", type=int, required=True)
    parser.add_argument("--connect", help="client: the server's address")
    parser.add_argument("--carrier", choices=["tcp", "ws"], default="tcp")
    parser.add_argument(
        "--freeze-every", type=int, default=0, help="raise gc thresholds, gc.freeze() per N links"
    )
    args = parser.parse_args(argv)
    raise_fd_limit()
    freezer = _Freezer(args.freeze_every)
    if args.role == "server":
        body = partial(_server, args.links, freezer)
    else:
        if not args.connect:
            parser.error("client needs --connect")
        body = partial(_client, parse_addr(args.connect), args.links, args.carrier, freezer)
    trio.run(run_with_lifeline, body)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
