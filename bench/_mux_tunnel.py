"""The `mux_tcp` and `mux_ws` bench paths: devyard's session over one carrier connection.

    python -m bench._mux_tunnel exit --carrier tcp|ws --sink HOST:PORT
    python -m bench._mux_tunnel entry --carrier tcp|ws --connect HOST:PORT

The exit listens for exactly one carrier (a TCP connection, or a WebSocket on it), runs the
session as server (even stream ids) and dials the sink for every stream the entry opens. The
entry dials the carrier, runs the session as client (odd ids), listens for load clients and
opens one stream per accepted connection. Both copy with `devyard.core.splice`, so the bench
measures the core as the tunnel will use it. Each announces `LISTEN host:port` once its
listener is bound (the entry only after its session is up).
"""

from __future__ import annotations

import argparse
import sys
from functools import partial
from typing import Final

import trio

from bench._child import (
    CONNECTION_ERRORS,
    LOOPBACK,
    announce,
    listener_port,
    open_listener,
    parse_addr,
    run_with_lifeline,
    serve,
)
from devyard.core import (
    MuxStream,
    Session,
    SessionConfig,
    open_session,
    open_transport,
    splice,
)
from devyard.core.upgrade import accept_upgrade
from devyard.core.wsframe import accept_websocket, is_websocket_upgrade

# The exit's WebSocket server side, with the settings devyard.core.open_transport gives the
# client side (the entry dials with open_transport itself): trio-websocket reads the socket in
# receive_buffer_size chunks (default 4 KiB, several times slower); messages carry whole
# frames, several per message; a queue of a few messages lets its reader task run ahead.
WS_RECEIVE_BUFFER: Final = 256 * 1024
WS_MAX_MESSAGE: Final = 4 * 1024 * 1024
WS_MESSAGE_QUEUE: Final = 4
WS_RESOURCE: Final = "/mux"


async def _run_exit_session(transport: trio.abc.Stream, sink: tuple[str, int]) -> None:
    async with (
        open_session(transport, client=False, config=SessionConfig()) as session,
        trio.open_nursery() as nursery,
    ):
        while True:
            try:
                stream = await session.accept_stream()
            except trio.EndOfChannel:
                break
            nursery.start_soon(_to_sink, stream, sink)


async def _to_sink(stream: MuxStream, sink: tuple[str, int]) -> None:
    try:
        upstream = await trio.open_tcp_stream(*sink)
    except OSError:
        await trio.aclose_forcefully(stream)
        return
    try:
        await splice(stream, upstream)  # closes both
    except* CONNECTION_ERRORS:
        pass


async def _exit_tcp(sink: tuple[str, int]) -> None:
    listener = await open_listener()
    announce(LOOPBACK, listener_port(listener))
    async with listener:
        carrier = await listener.accept()
    async with carrier:
        await _run_exit_session(carrier, sink)


async def _exit_ws(sink: tuple[str, int]) -> None:
    # The server side of devyard's own WebSocket framing (devyard.core.wsframe); the entry
    # dials with open_transport, which speaks it too. (Before issue 21 both ends were
    # trio-websocket, with a 256 KiB receive buffer and 4 MiB messages.)
    listener = await open_listener()
    announce(LOOPBACK, listener_port(listener))
    async with listener:
        carrier = await listener.accept()
    request = await accept_upgrade(carrier)
    if request is None or not is_websocket_upgrade(request):
        raise SystemExit("the carrier is not a WebSocket upgrade")
    transport = await accept_websocket(request)
    async with transport:
        await _run_exit_session(transport, sink)


async def _from_client(session: Session, client: trio.SocketStream) -> None:
    await splice(client, await session.open_stream())  # closes both


async def _run_entry_session(transport: trio.abc.Stream) -> None:
    async with open_session(transport, client=True, config=SessionConfig()) as session:
        listener = await open_listener()
        announce(LOOPBACK, listener_port(listener))
        await serve(listener, partial(_from_client, session))


async def _entry_tcp(carrier: tuple[str, int]) -> None:
    transport = await trio.open_tcp_stream(*carrier)
    async with transport:
        await _run_entry_session(transport)


async def _entry_ws(carrier: tuple[str, int]) -> None:
    # Dialled as a link dials: devyard.core.open_transport and its WebSocket settings.
    async with open_transport(f"ws://{carrier[0]}:{carrier[1]}{WS_RESOURCE}") as transport:
        await _run_entry_session(transport)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench._mux_tunnel")
    parser.add_argument("role", choices=["entry", "exit"])
    parser.add_argument("--carrier", choices=["tcp", "ws"], required=True)
    parser.add_argument("--connect", help="entry: the exit's carrier address")
    parser.add_argument("--sink", help="exit: the sink's address")
    args = parser.parse_args(argv)
    if args.role == "entry":
        if not args.connect:
            parser.error("entry needs --connect")
        entry = _entry_tcp if args.carrier == "tcp" else _entry_ws
        body = partial(entry, parse_addr(args.connect))
    else:
        if not args.sink:
            parser.error("exit needs --sink")
        exit_ = _exit_tcp if args.carrier == "tcp" else _exit_ws
        body = partial(exit_, parse_addr(args.sink))
    trio.run(run_with_lifeline, body)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
