"""Byte-stream transports for a session: TCP, TLS, and WebSocket (docs/protocol.md section 8).

TCP and TLS are trio's own streams. `WebSocketStream` presents a trio-websocket connection as a
`trio.abc.Stream`: each `send_all` is one binary message (the session writer always sends whole
frames, so a message carries one or more whole frames), and `receive_some` hands out message
bytes, keeping the rest of a large message for the next call.

trio-websocket is 2-3x slower with its default 4 KiB receive buffer: every connection made here
uses `WS_RECEIVE_BUFFER` (64 KiB or more) and allows messages up to `WS_MAX_MESSAGE`.
"""

from __future__ import annotations

import ipaddress
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final
from urllib.parse import urlsplit

import trio
import trio_websocket

from ._groups import collapse_single_group
from .upgrade import UpgradeRejected, dial_upgrade

__all__ = [
    "DIAL_TIMEOUT",
    "WS_MAX_MESSAGE",
    "WS_MAX_SEND",
    "WS_RECEIVE_BUFFER",
    "MessageStream",
    "WebSocketStream",
    "check_link_url",
    "is_loopback_host",
    "link_url",
    "open_transport",
]

#: Connecting plus the upgrade handshake, at most (both link kinds, both transports).
DIAL_TIMEOUT: Final = 10.0
_CLOSE_TIMEOUT: Final = 5.0
WS_RECEIVE_BUFFER: Final = 256 * 1024
WS_MAX_MESSAGE: Final = 4 * 1024 * 1024
#: Largest message a session sends over a WebSocketStream (whole frames up to this size). A
#: peer with the default read_size then takes each message whole, where a larger one is copied
#: out in read_size slices, and wsproto, which copies a message three times to frame it and
#: once more to parse it, works on buffers a quarter the size of a 1 MiB batch: over loopback,
#: 4 streams at once moved ~20% more with this limit (TCP, without those copies, does better
#: with the 1 MiB batches of max_write_batch).
WS_MAX_SEND: Final = 256 * 1024


class MessageStream(trio.abc.Stream):
    """Binary messages presented as a byte stream: the base of every WebSocket transport.

    Each `send_all` is one message (`_send_message`); `receive_some` hands out message bytes,
    keeping the rest of a large message for the next call. Subclasses supply the two message
    hooks (`_receive_message` returns None at a clean end) and `aclose`.
    """

    #: The session writer sends at most this much per send_all, that is per message.
    max_send: Final = WS_MAX_SEND

    def __init__(self) -> None:
        self._pending = memoryview(b"")
        self._eof = False
        self._closed = False

    async def _send_message(self, data: bytes) -> None:
        raise NotImplementedError

    async def _receive_message(self) -> bytes | None:
        raise NotImplementedError

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if self._closed:
            raise trio.ClosedResourceError("websocket closed")
        await self._send_message(bytes(data))

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.checkpoint()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if max_bytes is not None and max_bytes < 1:
            raise ValueError("max_bytes must be >= 1")
        if self._closed:
            raise trio.ClosedResourceError("websocket closed")
        if not self._pending:
            if self._eof:
                await trio.lowlevel.checkpoint()
                return b""
            message = await self._receive_message()
            if message is None:
                self._eof = True
                return b""
            if max_bytes is None or len(message) <= max_bytes:
                return message
            self._pending = memoryview(message)
        else:
            await trio.lowlevel.checkpoint()
        size = len(self._pending) if max_bytes is None else max_bytes
        chunk = bytes(self._pending[:size])
        self._pending = self._pending[size:]
        return chunk


class WebSocketStream(MessageStream):
    """A trio-websocket connection as a byte stream of binary messages."""

    def __init__(self, connection: trio_websocket.WebSocketConnection) -> None:
        super().__init__()
        self.connection = connection

    async def _send_message(self, data: bytes) -> None:
        try:
            await self.connection.send_message(data)
        except trio_websocket.ConnectionClosed as exc:
            raise trio.BrokenResourceError(f"websocket closed: {exc.reason}") from exc

    async def _receive_message(self) -> bytes | None:
        try:
            message = await self.connection.get_message()
        except trio_websocket.ConnectionClosed as exc:
            self._eof = True
            reason = exc.reason
            if reason is None or reason.code in (1000, 1001):
                return None
            raise trio.BrokenResourceError(f"websocket closed: {reason}") from exc
        if isinstance(message, str):
            raise trio.BrokenResourceError("text message on a binary websocket transport")
        return message

    async def aclose(self) -> None:
        self._closed = True
        await self.connection.aclose()


_LINK_SCHEMES: Final = ("tcp", "tls", "ws", "wss")


def check_link_url(url: str) -> str:
    """*url* if it can be a link's ``--link`` (``tcp|tls|ws|wss://HOST:PORT``), else ValueError."""
    parts = urlsplit(url)
    if parts.scheme not in _LINK_SCHEMES or not parts.hostname:
        raise ValueError(f"expected tcp://, tls://, ws:// or wss://HOST:PORT, got {url!r}")
    if parts.scheme in ("tcp", "tls") and (parts.port is None or parts.path not in ("", "/")):
        raise ValueError(f"a raw link URL is just tcp|tls://HOST:PORT, got {url!r}")
    return url.rstrip("/")


def is_loopback_host(host: str | None) -> bool:
    """Whether *host* (a URL's hostname) names this machine's loopback."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host or "").is_loopback
    except ValueError:
        return False


def link_url(server_url: str, path: str, link: str | None = None) -> str:
    """Where a link to *path* dials: *link* (a raw link port, or a WebSocket base) when given,
    else the server's base URL with ``http(s)`` turned into ``ws(s)``."""
    base = link if link is not None else server_url
    parts = urlsplit(base)
    scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
    return f"{scheme}://{parts.netloc}{parts.path.rstrip('/')}{path}"


async def _open_tls(
    host: str, port: int, tls: ssl.SSLContext, *, https_compatible: bool
) -> trio.SSLStream[trio.SocketStream]:
    """A TLS stream whose handshake is done here, so that a certificate the context does not
    trust fails the dial at once as `ssl.SSLCertVerificationError` (which says why), rather
    than later inside a reader task that reports it as a dead connection or not at all."""
    stream = await trio.open_ssl_over_tcp_stream(
        host, port, ssl_context=tls, https_compatible=https_compatible
    )
    try:
        await stream.do_handshake()
    except trio.BrokenResourceError as exc:
        await trio.aclose_forcefully(stream)
        if isinstance(exc.__cause__, ssl.SSLError):
            raise exc.__cause__ from None
        raise
    except BaseException:
        await trio.aclose_forcefully(stream)
        raise
    return stream


async def _dial_raw(
    host: str,
    port: int,
    path: str,
    *,
    tls: ssl.SSLContext | None,
    extra_headers: list[tuple[bytes, bytes]] | None,
) -> trio.abc.Stream:
    stream: trio.abc.Stream
    if tls is None:
        stream = await trio.open_tcp_stream(host, port)
    else:
        stream = await _open_tls(host, port, tls, https_compatible=False)
    try:
        if path not in ("", "/"):
            return await dial_upgrade(
                stream, host=f"{host}:{port}", path=path, headers=extra_headers
            )
    except BaseException:
        await trio.aclose_forcefully(stream)
        raise
    return stream


@asynccontextmanager
async def _open_websocket(
    url: str,
    tls: ssl.SSLContext | None,
    extra_headers: list[tuple[bytes, bytes]] | None,
    dial_timeout: float,
) -> AsyncIterator[trio_websocket.WebSocketConnection]:
    """trio-websocket's client over a stream this function owns and always closes
    (``open_websocket_url`` leaves the socket of a refused upgrade to the garbage collector)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if tls is not None else 80)
    resource = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    deadline = trio.current_time() + dial_timeout
    stream: trio.SocketStream | trio.SSLStream[trio.SocketStream]
    try:
        with trio.fail_at(deadline):
            if tls is None:
                stream = await trio.open_tcp_stream(host, port)
            else:
                stream = await _open_tls(host, port, tls, https_compatible=True)
    except trio.TooSlowError:
        raise TimeoutError(f"{url}: no answer within {dial_timeout:g} s") from None
    try:
        with collapse_single_group():
            async with trio.open_nursery() as nursery:
                try:
                    with trio.fail_at(deadline):
                        connection = await trio_websocket.wrap_client_stream(
                            nursery,
                            stream,
                            host if port in (80, 443) else f"{host}:{port}",
                            resource,
                            extra_headers=extra_headers or [],
                            message_queue_size=4,
                            max_message_size=WS_MAX_MESSAGE,
                            receive_buffer_size=WS_RECEIVE_BUFFER,
                        )
                except trio.TooSlowError:
                    raise TimeoutError(f"{url}: no answer within {dial_timeout:g} s") from None
                try:
                    yield connection
                finally:
                    with trio.move_on_after(_CLOSE_TIMEOUT, shield=True):
                        await connection.aclose()
                    nursery.cancel_scope.cancel()
    except trio_websocket.ConnectionRejected as exc:  # raised by the connection's reader task
        raise _rejected(exc) from None
    finally:
        await trio.aclose_forcefully(stream)


def _rejected(exc: trio_websocket.ConnectionRejected) -> UpgradeRejected:
    return UpgradeRejected(exc.status_code or 0, list(exc.headers or []), bytes(exc.body or b""))


@asynccontextmanager
async def open_transport(
    url: str,
    *,
    ssl_context: ssl.SSLContext | None = None,
    extra_headers: list[tuple[bytes, bytes]] | None = None,
    dial_timeout: float = DIAL_TIMEOUT,
) -> AsyncIterator[trio.abc.Stream]:
    """Dial `tcp://host:port`, `tls://host:port`, `ws://...` or `wss://...`; close on exit.

    WebSocket URLs may carry a path; `extra_headers` go on the upgrade request (credentials go
    here, never in the URL). A `tcp://` or `tls://` URL with a path is a raw link: the upgrade
    handshake of `devyard.core.upgrade` first, then bare frames; without a path the stream is
    bare from the start. A refused upgrade is `UpgradeRejected` for both kinds.

    Connecting and the upgrade together take at most *dial_timeout* seconds, else
    `TimeoutError`: a server that accepts TCP and never answers does not hang the caller.
    (The bound is a parameter, not the caller's cancel scope, because the WebSocket's entry
    opens a nursery, which a scope around ``__aenter__`` alone may not contain.)
    """
    parts = urlsplit(url)
    scheme = parts.scheme
    host = parts.hostname
    if not host:
        raise ValueError(f"no host in transport URL {url!r}")
    if scheme in ("tcp", "tls"):
        if parts.port is None:
            raise ValueError(f"no port in transport URL {url!r}")
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        try:
            with trio.fail_after(dial_timeout):
                tls = None
                if scheme == "tls":
                    tls = ssl_context or ssl.create_default_context()
                stream = await _dial_raw(
                    host, parts.port, target, tls=tls, extra_headers=extra_headers
                )
        except trio.TooSlowError:
            raise TimeoutError(f"{url}: no answer within {dial_timeout:g} s") from None
        try:
            yield stream
        finally:
            await trio.aclose_forcefully(stream)
    elif scheme in ("ws", "wss"):
        context = ssl_context if scheme == "wss" else None
        if scheme == "wss" and context is None:
            context = ssl.create_default_context()
        async with _open_websocket(url, context, extra_headers, dial_timeout) as connection:
            yield WebSocketStream(connection)
    else:
        raise ValueError(f"unsupported transport scheme {scheme!r} in {url!r}")
