"""The raw link handshake: one HTTP/1.1 Upgrade request, then mux frames on the bare socket.

Links dial ``ws(s)://`` by default so they pass HTTP proxies; the raw mode (``tcp://`` or
``tls://`` to the server's link port, docs/protocol.md section 8.3) drops the WebSocket
framing and, above all, the client-to-server masking that the edge would otherwise undo on
every byte. The handshake keeps what the WebSocket upgrade gives: a path that names the route,
``Authorization: Bearer`` for the credential (never the URL), and an HTTP status with the API's
JSON error body when the server refuses, so callers tell 401 from 404 exactly as before::

    GET /v1/host_connections HTTP/1.1
    Host: server:7443
    Connection: Upgrade
    Upgrade: devyard-mux/1
    Authorization: Bearer ...

    HTTP/1.1 101 Switching Protocols
    Connection: Upgrade
    Upgrade: devyard-mux/1

The client sends nothing after its request until it has the 101; the server's first frames may
arrive in the same read as the 101, and `PrefixedStream` hands those out first.
"""

from __future__ import annotations

from typing import Final

import h11
import trio

__all__ = [
    "MAX_HEAD",
    "UPGRADE_PROTOCOL",
    "PrefixedStream",
    "UpgradeRejected",
    "UpgradeRequest",
    "accept_upgrade",
    "dial_upgrade",
]

UPGRADE_PROTOCOL: Final = "devyard-mux/1"
#: Request or response head (and a refusal's body) larger than this is a protocol error.
MAX_HEAD: Final = 16 * 1024
_READ: Final = 16 * 1024


class UpgradeRejected(Exception):
    """The server answered the upgrade with a status other than 101."""

    def __init__(self, status_code: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        super().__init__(f"upgrade rejected with HTTP {status_code}")
        self.status_code = status_code
        self.headers = headers
        self.body = body


class PrefixedStream(trio.abc.HalfCloseableStream):
    """*stream* with *prefix* (bytes already read past the handshake) handed out first."""

    def __init__(self, stream: trio.abc.Stream, prefix: bytes) -> None:
        self.stream = stream
        self._prefix = prefix
        max_send = getattr(stream, "max_send", None)
        if max_send is not None:
            self.max_send = max_send

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.stream.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        if self._prefix:
            await trio.lowlevel.checkpoint()
            size = len(self._prefix) if max_bytes is None else max_bytes
            chunk, self._prefix = self._prefix[:size], self._prefix[size:]
            return chunk
        return await self.stream.receive_some(max_bytes)

    async def send_eof(self) -> None:
        if isinstance(self.stream, trio.abc.HalfCloseableStream):
            await self.stream.send_eof()
        else:
            await trio.lowlevel.checkpoint()

    async def aclose(self) -> None:
        await self.stream.aclose()


def _wrap(stream: trio.abc.Stream, leftover: bytes) -> trio.abc.Stream:
    return PrefixedStream(stream, leftover) if leftover else stream


async def _next_event(connection: h11.Connection, stream: trio.abc.Stream) -> h11.Event:
    while True:
        event = connection.next_event()
        if event is not h11.NEED_DATA:
            return event  # type: ignore[return-value]
        data = await stream.receive_some(_READ)
        connection.receive_data(bytes(data))  # b"" is EOF: h11 then raises or says so


async def dial_upgrade(
    stream: trio.abc.Stream,
    *,
    host: str,
    path: str,
    headers: list[tuple[bytes, bytes]] | None = None,
) -> trio.abc.Stream:
    """Ask for the raw link on *path*; the stream to run a session on, or `UpgradeRejected`.

    Raises `trio.BrokenResourceError` when the peer is not an HTTP server or hangs up.
    """
    connection = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)
    request = h11.Request(
        method="GET",
        target=path or "/",
        headers=[
            (b"host", host.encode("idna")),
            (b"connection", b"Upgrade"),
            (b"upgrade", UPGRADE_PROTOCOL.encode()),
            *(headers or []),
        ],
    )
    data = (connection.send(request) or b"") + (connection.send(h11.EndOfMessage()) or b"")
    await stream.send_all(data)
    try:
        response = await _next_event(connection, stream)
        if isinstance(response, h11.InformationalResponse) and response.status_code == 101:
            leftover, _closed = connection.trailing_data
            return _wrap(stream, bytes(leftover))
        if not isinstance(response, h11.Response):
            raise trio.BrokenResourceError(f"unexpected upgrade response {response!r}")
        body = bytearray()
        while True:
            event = await _next_event(connection, stream)
            if isinstance(event, h11.Data):
                body += event.data
                if len(body) > MAX_HEAD:
                    break
            elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
                break
        raise UpgradeRejected(response.status_code, list(response.headers), bytes(body))
    except h11.RemoteProtocolError as exc:
        raise trio.BrokenResourceError(f"not a devyard link server: {exc}") from exc


class UpgradeRequest:
    """A received upgrade request: `accept` it (the raw stream) or `reject` it (a response)."""

    def __init__(
        self, stream: trio.abc.Stream, connection: h11.Connection, request: h11.Request
    ) -> None:
        self._stream = stream
        self._connection = connection
        self.method = request.method.decode("ascii", "replace")
        self.target = request.target.decode("ascii", "replace")
        self.headers = [(bytes(name), bytes(value)) for name, value in request.headers]

    @property
    def path(self) -> str:
        return self.target.partition("?")[0]

    def header(self, name: bytes) -> bytes | None:
        for key, value in self.headers:
            if key == name:
                return value
        return None

    @property
    def wants_upgrade(self) -> bool:
        protocols = (self.header(b"upgrade") or b"").decode("latin-1")
        return UPGRADE_PROTOCOL in (p.strip() for p in protocols.split(","))

    async def accept(self) -> trio.abc.Stream:
        stream, leftover = await self.accept_with(UPGRADE_PROTOCOL.encode(), [])
        return _wrap(stream, leftover)

    async def accept_with(
        self, upgrade: bytes, headers: list[tuple[bytes, bytes]]
    ) -> tuple[trio.abc.Stream, bytes]:
        """Answer 101 with ``Upgrade: upgrade`` and *headers*; the stream, and the bytes
        already read past the request (wsframe.accept_websocket)."""
        response = h11.InformationalResponse(
            status_code=101,
            headers=[(b"connection", b"Upgrade"), (b"upgrade", upgrade), *headers],
        )
        await self._stream.send_all(self._connection.send(response) or b"")
        leftover, _closed = self._connection.trailing_data
        return self._stream, bytes(leftover)

    async def reject(
        self, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None
    ) -> None:
        """Answer with *status* and *body* and close the connection."""
        all_headers = [
            *(headers or [(b"content-type", b"application/json")]),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        try:
            data = self._connection.send(h11.Response(status_code=status, headers=all_headers))
            data = (data or b"") + (self._connection.send(h11.Data(data=body)) or b"")
            data += self._connection.send(h11.EndOfMessage()) or b""
            await self._stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await trio.aclose_forcefully(self._stream)


async def accept_upgrade(stream: trio.abc.Stream) -> UpgradeRequest | None:
    """Read one request head; None when the peer hung up or sent something that is not HTTP
    (the stream is then closed). The caller bounds the time this may take."""
    connection = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
    event: h11.Event | None = None
    end: h11.Event | None = None
    try:
        event = await _next_event(connection, stream)
        if isinstance(event, h11.Request):
            end = await _next_event(connection, stream)
    except (h11.RemoteProtocolError, trio.BrokenResourceError, trio.ClosedResourceError):
        event = None
    if not isinstance(event, h11.Request) or not isinstance(end, h11.EndOfMessage):
        await trio.aclose_forcefully(stream)  # not HTTP, or a request body: not a link
        return None
    return UpgradeRequest(stream, connection, event)
