"""WebSocket framing of our own (RFC 6455) for links: `FramedWebSocket`, a `MessageStream`.

Why: over trio-websocket a session paid for a reader task and a message queue per link, and for
wsproto building every frame (three copies of each message) and parsing it (more copies, and
unmasking byte by byte through `bytes.translate`): over loopback a WebSocket link moved about half
what a TCP link did (bench/README.md). Here a frame is a header in front of the payload, sent
with the payload as it is (one `sendmsg` of header and pieces over plain TCP; the client masks,
as RFC 6455 requires, with wsaccel's C masker when it is installed); a received frame's payload
is handed to the session as it arrives, cut by reads like any byte stream, and unmasked only
where the client masked it. No task of its own: the session's reader parses the frames, and
answers a PING with a PONG itself.

What it speaks: binary data messages (each `send_all` one unfragmented message: whole mux
frames, docs/protocol.md 8), fragmented messages on receive, PING/PONG, CLOSE both ways; a text
message is a protocol error. The handshake is HTTP/1.1 through h11 (`dial_websocket` for the
client, `accept_websocket` for an `UpgradeRequest` on the server side), so any standard
WebSocket server (the edge's Hypercorn) or client (trio-websocket, browsers) is a peer.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import importlib
import os
import struct
from collections.abc import Callable
from typing import Any, Final

import h11
import trio

from ._message_stream import MessageStream
from .upgrade import MAX_HEAD, UpgradeRejected, UpgradeRequest, _next_event
from .vectored import Pieces, piece_sender

__all__ = [
    "FramedWebSocket",
    "WebSocketHandshakeError",
    "accept_websocket",
    "dial_websocket",
    "is_websocket_upgrade",
]

_GUID: Final = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_READ: Final = 1024 * 1024  # one read from the socket, as the session's own read_size
_CONTINUATION, _TEXT, _BINARY, _CLOSE, _PING, _PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
_CLEAN_CLOSE: Final = (1000, 1001, 1005)  # normal, going away, no code given
_SHORT: Final = struct.Struct(">BB")
_MEDIUM: Final = struct.Struct(">BBH")
_LONG: Final = struct.Struct(">BBQ")


def _masker_class() -> Callable[[bytes], Any]:
    """XOR-masker with wsproto's interface (`cls(key).process(data)`, stateful across calls):
    wsaccel's C one (a dependency: about 3x faster here, and masking is most of a WebSocket
    client's CPU per byte), else wsproto's where wsaccel has no wheel."""
    try:
        from wsaccel.xormask import XorMaskerSimple  # noqa: PLC0415 - the fallback below
    except ImportError:
        module = importlib.import_module("wsproto.frame_protocol")
        fallback: Callable[[bytes], Any] = module.XorMaskerSimple
        return fallback
    masker: Callable[[bytes], Any] = XorMaskerSimple
    return masker


_Masker: Final = _masker_class()


class WebSocketHandshakeError(ConnectionError):
    """The peer did not complete a WebSocket handshake (not a WebSocket server, a bad key)."""


def _accept_key(key: bytes) -> bytes:
    return base64.b64encode(hashlib.sha1(key + _GUID).digest())  # noqa: S324 (RFC 6455)


def _header(opcode: int, length: int, mask: bytes | None) -> bytes:
    first = 0x80 | opcode  # FIN: every message we send is one frame
    bit = 0x80 if mask is not None else 0
    if length < 126:
        head = _SHORT.pack(first, bit | length)
    elif length < 0x10000:
        head = _MEDIUM.pack(first, bit | 126, length)
    else:
        head = _LONG.pack(first, bit | 127, length)
    return head if mask is None else head + mask


class FramedWebSocket(MessageStream):
    """A WebSocket connection (after its handshake) as a byte stream of binary messages.

    `client=True` masks what it sends (and expects unmasked frames); the server side the
    opposite. `prefix`: bytes already read past the handshake. Like any trio stream, one task
    sends and one receives at a time; the receiving task may answer a PING while the sender
    is mid-write, and its PONG then follows that write.
    """

    #: A message costs us a header, not copies: whole frames up to the session's read size
    #: per message, as over TCP (a peer accepts up to transports.WS_MAX_MESSAGE, 4 MiB).
    max_send = 1024 * 1024

    def __init__(
        self,
        stream: trio.abc.Stream,
        *,
        client: bool,
        prefix: bytes = b"",
        handshake_headers: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        super().__init__()
        self.stream = stream
        self._client = client
        self.handshake_headers = handshake_headers or []
        self._send = piece_sender(stream)
        self._sending = False
        self._queued: Pieces = []  # control frames that wait for the write under way
        self._close_sent = False
        # receive side: the last chunk read and how far into it we are
        self._rx = prefix
        self._pos = 0
        self._left = 0  # payload bytes of the current data frame still to come
        self._unmask: Any = None  # masker of the current data frame, if masked

    # ---- sending ----------------------------------------------------------------------------

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.send_pieces([data if isinstance(data, bytes) else bytes(data)])

    async def send_pieces(self, pieces: Pieces) -> None:
        """One binary message of the pieces, in order, without joining them where unmasked."""
        if self._closed:
            raise trio.ClosedResourceError("websocket closed")
        if self._close_sent:
            raise trio.BrokenResourceError("websocket closed")
        await self._write(self._frame(_BINARY, pieces))

    def _frame(self, opcode: int, pieces: Pieces) -> Pieces:
        length = sum(map(len, pieces))
        if not self._client:
            return [_header(opcode, length, None), *pieces]
        mask = os.urandom(4)  # a fresh key per frame (RFC 6455 5.3)
        masker = _Masker(mask)
        return [_header(opcode, length, mask), *(masker.process(p) for p in pieces if len(p))]

    async def _write(self, pieces: Pieces) -> None:
        if self._sending:  # only a PONG or CLOSE from the receiving task gets here
            self._queued.extend(pieces)
            await trio.lowlevel.checkpoint()
            return
        self._sending = True
        try:
            await self._send(pieces)
            while self._queued:
                queued, self._queued = self._queued, []
                await self._send(queued)
        finally:
            self._sending = False

    async def wait_send_all_might_not_block(self) -> None:
        await self.stream.wait_send_all_might_not_block()

    # ---- receiving --------------------------------------------------------------------------

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if max_bytes is not None and max_bytes < 1:
            raise ValueError("max_bytes must be >= 1")
        if self._closed:
            raise trio.ClosedResourceError("websocket closed")
        limit = _READ if max_bytes is None else max_bytes
        while True:
            if self._left:
                if self._pos >= len(self._rx):
                    await self._read_more()
                return self._take_payload(limit)
            if self._eof:
                await trio.lowlevel.checkpoint()
                return b""
            await self._next_frame()

    async def _read_more(self) -> None:
        """Read the next chunk, keeping what is left of the current one in front of it."""
        data = await self.stream.receive_some(_READ)
        if not data:
            raise trio.BrokenResourceError("the websocket peer hung up inside a frame")
        rest = self._rx[self._pos :]
        self._rx = rest + data if rest else bytes(data)
        self._pos = 0

    def _take_payload(self, limit: int) -> bytes:
        take = min(self._left, len(self._rx) - self._pos, limit)
        start = self._pos
        piece = self._rx if start == 0 and take == len(self._rx) else self._rx[start : start + take]
        self._pos = start + take
        self._left -= take
        if self._unmask is not None:
            piece = bytes(self._unmask.process(piece))
        return piece

    async def _need(self, n: int) -> bytes:
        """The next n bytes of the connection (header or control payload), consumed."""
        while len(self._rx) - self._pos < n:
            await self._read_more()
        start = self._pos
        self._pos = start + n
        return self._rx[start : start + n]

    async def _next_frame(self) -> None:
        """Read one frame header; set up a data frame's payload, or handle a control frame."""
        first, second = await self._need(2)
        if first & 0x70:
            raise await self._fail(1002, "reserved bits set (no extension was agreed)")
        opcode = first & 0x0F
        length = second & 0x7F
        if length == 126:
            (length,) = struct.unpack(">H", await self._need(2))
        elif length == 127:
            (length,) = struct.unpack(">Q", await self._need(8))
        masked = bool(second & 0x80)
        if masked == self._client:
            raise await self._fail(1002, "masked frame from a server, or unmasked from a client")
        mask = await self._need(4) if masked else None
        if opcode in (_BINARY, _CONTINUATION):
            self._left = length
            self._unmask = _Masker(mask) if mask is not None else None
            return
        if opcode == _TEXT:
            raise await self._fail(1003, "text message on a binary websocket transport")
        if opcode < _CLOSE or length > 125 or not first & 0x80:
            raise await self._fail(1002, f"bad control frame (opcode {opcode})")
        payload = await self._need(length)
        if mask is not None:
            payload = bytes(_Masker(mask).process(payload))
        if opcode == _PING:
            if not self._close_sent:
                await self._write(self._frame(_PONG, [payload]))
        elif opcode == _CLOSE:
            await self._on_close(payload)

    async def _on_close(self, payload: bytes) -> None:
        code = struct.unpack(">H", payload[:2])[0] if len(payload) >= 2 else 1005
        if not self._close_sent:  # answer it, echoing the code (RFC 6455 5.5.1)
            self._close_sent = True
            echo = payload[:2] if len(payload) >= 2 else b""
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await self._write(self._frame(_CLOSE, [echo]))
        self._eof = True
        if code not in _CLEAN_CLOSE:
            reason = payload[2:].decode("utf-8", "replace")
            raise trio.BrokenResourceError(f"websocket closed: {code} {reason}".rstrip())

    async def _fail(self, code: int, message: str) -> trio.BrokenResourceError:
        await self._send_close(code)
        self._eof = True
        return trio.BrokenResourceError(f"websocket protocol error: {message}")

    async def _send_close(self, code: int) -> None:
        if self._close_sent:
            return
        self._close_sent = True
        with trio.move_on_after(1):
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await self._write(self._frame(_CLOSE, [struct.pack(">H", code)]))

    async def aclose(self) -> None:
        """Send CLOSE (1000) if nothing was, then close the connection (not waiting for the
        peer's CLOSE: the session has said GO_AWAY and flushed before it gets here)."""
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        self._closed = True
        try:
            if not self._sending:
                await self._send_close(1000)
        finally:
            await trio.aclose_forcefully(self.stream)


# ---- handshakes -------------------------------------------------------------------------------


async def dial_websocket(
    stream: trio.abc.Stream,
    *,
    host: str,
    resource: str,
    headers: list[tuple[bytes, bytes]] | None = None,
) -> FramedWebSocket:
    """The client handshake on *stream*: a `FramedWebSocket`, `UpgradeRejected` (any status
    but 101, with the body), or `WebSocketHandshakeError`. The caller bounds the time."""
    key = base64.b64encode(os.urandom(16))
    connection = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)
    request = h11.Request(
        method="GET",
        target=resource or "/",
        headers=[
            (b"host", host.encode("idna")),
            (b"upgrade", b"websocket"),
            (b"connection", b"Upgrade"),
            (b"sec-websocket-key", key),
            (b"sec-websocket-version", b"13"),
            *(headers or []),
        ],
    )
    data = (connection.send(request) or b"") + (connection.send(h11.EndOfMessage()) or b"")
    try:
        await stream.send_all(data)
        response = await _next_event(connection, stream)
        if isinstance(response, h11.InformationalResponse) and response.status_code == 101:
            got = dict(response.headers)
            if got.get(b"sec-websocket-accept") != _accept_key(key):
                raise WebSocketHandshakeError("the server's Sec-WebSocket-Accept does not match")
            leftover, _closed = connection.trailing_data
            return FramedWebSocket(
                stream,
                client=True,
                prefix=bytes(leftover),
                handshake_headers=[(bytes(k), bytes(v)) for k, v in response.headers],
            )
        if not isinstance(response, h11.Response):
            raise WebSocketHandshakeError(f"unexpected handshake response {response!r}")
        body = bytearray()
        while len(body) <= MAX_HEAD:
            event = await _next_event(connection, stream)
            if isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
                break
        raise UpgradeRejected(response.status_code, list(response.headers), bytes(body))
    except h11.RemoteProtocolError as exc:
        raise WebSocketHandshakeError(f"not a WebSocket server: {exc}") from exc
    except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
        raise WebSocketHandshakeError(f"the connection ended in the handshake: {exc}") from exc


def is_websocket_upgrade(request: UpgradeRequest) -> bool:
    """Whether *request* asks for a WebSocket (version 13, with a key)."""
    upgrade = (request.header(b"upgrade") or b"").decode("latin-1").lower()
    return (
        "websocket" in (p.strip() for p in upgrade.split(","))
        and request.header(b"sec-websocket-version") == b"13"
        and request.header(b"sec-websocket-key") is not None
    )


async def accept_websocket(request: UpgradeRequest) -> FramedWebSocket:
    """The server handshake for a request `is_websocket_upgrade` said yes to."""
    key = request.header(b"sec-websocket-key")
    if key is None:
        raise ValueError("not a WebSocket upgrade request")
    stream, leftover = await request.accept_with(
        b"websocket", [(b"sec-websocket-accept", _accept_key(key))]
    )
    return FramedWebSocket(stream, client=False, prefix=leftover)
