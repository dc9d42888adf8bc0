"""The `trio_proxy` bench path: a plain trio TCP proxy in the tunnel's shape, the ceiling a
Python relay reaches on this machine.

    python -m bench._trio_proxy entry --carrier HOST:PORT   # each client -> its own TCP to exit
    python -m bench._trio_proxy exit --sink HOST:PORT       # each carrier connection -> sink

No multiplexing: each accepted connection gets its own connection to the next hop, and bytes
are copied with `receive_some` / `send_all` of up to BUFFER bytes, half-close propagated:
`devyard.core.splice`'s pump between two TCP sockets, with its read size.
"""

from __future__ import annotations

import argparse
import sys
from functools import partial
from typing import Final

import trio

from bench._child import (
    announce,
    listener_port,
    open_listener,
    parse_addr,
    run_with_lifeline,
    serve,
)
from devyard.core.splice import _CHUNK

#: One read, and so at most one write: the read size of devyard.core.splice (like for like).
BUFFER: Final = _CHUNK


async def _pump(src: trio.SocketStream, dst: trio.SocketStream) -> None:
    while data := await src.receive_some(BUFFER):
        await dst.send_all(data)
    await dst.send_eof()


async def relay(a: trio.SocketStream, b: trio.SocketStream) -> None:
    """Copy both ways until both directions reached EOF; a broken side cancels the other."""
    async with a, b, trio.open_nursery() as nursery:
        nursery.start_soon(_pump, a, b)
        nursery.start_soon(_pump, b, a)


async def _forward(next_hop: tuple[str, int], client: trio.SocketStream) -> None:
    upstream = await trio.open_tcp_stream(*next_hop)
    await relay(client, upstream)


async def _main(next_hop: tuple[str, int]) -> None:
    listener = await open_listener()
    announce("127.0.0.1", listener_port(listener))
    await serve(listener, partial(_forward, next_hop))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench._trio_proxy")
    parser.add_argument("role", choices=["entry", "exit"])
    parser.add_argument("--carrier", help="entry: the exit's address")
    parser.add_argument("--sink", help="exit: the sink's address")
    args = parser.parse_args(argv)
    target = args.carrier if args.role == "entry" else args.sink
    if not target:
        parser.error("entry needs --carrier, exit needs --sink")
    trio.run(run_with_lifeline, partial(_main, parse_addr(target)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
