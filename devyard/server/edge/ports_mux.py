"""Raw TCP to a device port, many connections in one WebSocket (the SDKs' multiplexed tunnel).

The commercial SDKs' tunnel (``startTcpTunnel(..., {mode: 'multiplexed'})`` in
`@limrun/api`, ``tunnel.NewMultiplexed`` in the Go SDK) dials the port prefix as a WebSocket:
``{targetHttpPortUrlPrefix}{port}?mode=multiplexed`` (TypeScript) or
``{targetHttpPortUrlPrefix}?port={port}`` (Go). Every binary message is
``[4-byte big-endian connection id][payload]``, both ways: the first message with a new id
opens a connection to the device port (the SDK connects on the first bytes, so the
protocols it carries are client-first), a message with the header alone closes that id.
docs/ports.md, "The multiplexed TCP mode".

Theory of operation. The reader takes the caller's messages; each connection id is a task
with its own ``http`` stream to the host (the same kind as an HTTP request to the port,
ports.py) that copies bytes both ways. What the caller sends a connection waits in that
connection's queue, bounded by `MAX_PENDING` bytes: a connection that falls behind by more is
closed (its id gets the header-only message) and the others go on. Everything to the caller
goes through one bounded channel to one writer. A message shorter than the header, a text
message, or a close for an id that is not open is dropped; an open the host refuses (nothing
listens, a timeout) is the close message for that id. At most `MAX_CONNECTIONS` ids are open
at once; one more is closed at once. Ids closed lately are remembered (`_RECENT`) so bytes
that were in flight when a connection closed do not open a new one.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import math
import struct
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final
from urllib.parse import parse_qs

import trio

from ...core import RemoteProtocolError
from .asgi_stream import Receive, Send

log = logging.getLogger(__name__)

__all__ = ["MAX_CONNECTIONS", "MAX_PENDING", "mux_port", "serve_multiplexed"]

MAX_CONNECTIONS: Final = 64
MAX_PENDING: Final = 16 * 1024 * 1024  # bytes one connection may have waiting for the device
_HEADER: Final = struct.Struct(">I")
_CHUNK: Final = 64 * 1024
_OUTGOING: Final = 16  # messages waiting for the caller's WebSocket
_RECENT: Final = 1024
_GONE: Final = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)

#: Opens the ``http`` stream of one connection; raises the caller's refusal when it cannot.
Opener = Callable[[], Awaitable[trio.abc.Stream]]


class BadMuxPort(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def mux_port(scope: MutableMapping[str, Any], path_port: bytes) -> int | None:
    """The device port when the WebSocket asks for the multiplexed mode, else None.

    *path_port* is what follows the prefix in the path (the port's digits, or empty).
    `BadMuxPort` for a bad or doubly named port."""
    query = parse_qs(bytes(scope.get("query_string", b"")).decode("latin-1"))
    named = query.get("port", [None])[0]
    if named is None and query.get("mode", [""])[0] != "multiplexed":
        return None
    digits = path_port.decode("latin-1")
    if named is not None and digits and named != digits:
        raise BadMuxPort("name the device port once: in the path or as ?port=")
    text = named if named is not None else digits
    port = int(text) if text.isdigit() and len(text) <= 5 else 0
    if not 0 < port < 65536:
        raise BadMuxPort(f"bad device port {text[:16]!r}: 1 to 65535")
    return port


class _Connection:
    def __init__(self) -> None:
        self.inbox, self.outbox = trio.open_memory_channel[bytes](math.inf)  # bounded by bytes
        self.pending = 0
        self.scope = trio.CancelScope()


async def serve_multiplexed(receive: Receive, send: Send, open_stream: Opener) -> None:
    """After the upgrade was accepted: the connections until the caller leaves."""
    tunnel = _Tunnel(open_stream)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(tunnel.writer, send)
            await tunnel.read(receive, nursery)
            nursery.cancel_scope.cancel()  # the caller left: every connection ends with it
    except* (*_GONE, RemoteProtocolError) as group:
        log.info("multiplexed tunnel ended: %r", group.exceptions[0])


class _Tunnel:
    def __init__(self, open_stream: Opener) -> None:
        self._open = open_stream
        self._to_caller, self._outgoing = trio.open_memory_channel[bytes](_OUTGOING)
        self._connections: dict[int, _Connection] = {}
        self._recent: collections.OrderedDict[int, None] = collections.OrderedDict()

    async def writer(self, send: Send) -> None:
        """The one task that sends to the caller."""
        async for message in self._outgoing:
            await send({"type": "websocket.send", "bytes": message})

    async def read(self, receive: Receive, nursery: trio.Nursery) -> None:
        """The caller's messages, until it leaves."""
        async with self._to_caller:
            while True:
                message = await receive()
                if message["type"] != "websocket.receive":
                    return
                data = message.get("bytes")
                if data is None or len(data) < _HEADER.size:
                    continue  # text, or no id: not a frame of this protocol
                (conn_id,) = _HEADER.unpack_from(data)
                self._take(conn_id, bytes(data[_HEADER.size :]), nursery)

    def _take(self, conn_id: int, payload: bytes, nursery: trio.Nursery) -> None:
        conn = self._connections.get(conn_id)
        if not payload:  # the caller closed this id
            if conn is not None:
                conn.scope.cancel()
            return
        if conn is None:
            if conn_id in self._recent:
                return  # in flight when it closed
            conn = self._connections[conn_id] = _Connection()
            if len(self._connections) > MAX_CONNECTIONS:
                log.info("multiplexed connection %d: over %d open", conn_id, MAX_CONNECTIONS)
                conn.scope.cancel()
            nursery.start_soon(self._run, conn_id, conn, self._to_caller.clone())
        conn.pending += len(payload)
        if conn.pending > MAX_PENDING:
            log.info("multiplexed connection %d: over %d bytes behind", conn_id, MAX_PENDING)
            conn.scope.cancel()
            return
        conn.inbox.send_nowait(payload)

    async def _run(
        self, conn_id: int, conn: _Connection, out: trio.MemorySendChannel[bytes]
    ) -> None:
        header = _HEADER.pack(conn_id)
        async with out:
            with conn.scope:
                try:
                    stream = await self._open()
                except Exception as exc:  # the caller's refusal (closed port, timeout, host)
                    log.info("multiplexed connection %d: %s", conn_id, exc)
                else:
                    await _copy(stream, conn, header, out)
            self._connections.pop(conn_id, None)
            self._recent[conn_id] = None
            while len(self._recent) > _RECENT:
                self._recent.popitem(last=False)
            with contextlib.suppress(*_GONE):
                await out.send(header)  # the close for this id (also after a reset)


async def _copy(
    stream: trio.abc.Stream, conn: _Connection, header: bytes, out: trio.MemorySendChannel[bytes]
) -> None:
    async def to_device() -> None:
        async for payload in conn.outbox:
            await stream.send_all(payload)
            conn.pending -= len(payload)

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(to_device)
            while data := await stream.receive_some(_CHUNK):
                await out.send(header + data)
            nursery.cancel_scope.cancel()  # the device closed: so does this id
    except* _GONE as group:
        log.debug("multiplexed connection ended: %r", group.exceptions[0])
    finally:
        await trio.aclose_forcefully(stream)
