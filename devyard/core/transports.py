"""Byte-stream transports for a session: TCP, TLS, and WebSocket (docs/protocol.md section 8).

TCP and TLS are trio's own streams. `open_transport` dials ``ws(s)://`` with devyard's own
WebSocket framing (wsframe.FramedWebSocket: no task of its own, no message queue, payloads
passed on as they arrive). `WebSocketStream` presents a trio-websocket connection the same way
(tests and tools that serve WebSockets with trio-websocket): each `send_all` is one binary
message (the session writer always sends whole frames, so a message carries one or more whole
frames), and `receive_some` hands out message bytes, keeping the rest of a large message for
the next call. trio-websocket is 2-3x slower with its default 4 KiB receive buffer: connections
made with it should use `WS_RECEIVE_BUFFER` (64 KiB or more) and allow `WS_MAX_MESSAGE`.
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

from ._message_stream import WS_MAX_SEND, MessageStream
from .upgrade import dial_upgrade
from .wsframe import FramedWebSocket, dial_websocket

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


class WebSocketStream(MessageStream):
    """A trio-websocket connection as a byte stream of binary messages."""

    def __init__(self, connection: trio_websocket.WebSocketConnection) -> None:
        super().__init__()
        self.connection = connection
        self.handshake_headers = list(connection.handshake_headers)

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


async def _dial_websocket(
    url: str,
    tls: ssl.SSLContext | None,
    extra_headers: list[tuple[bytes, bytes]] | None,
    dial_timeout: float,
) -> FramedWebSocket:
    """Connect and do the WebSocket handshake (wsframe.py: our own framing, no task)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if tls is not None else 80)
    resource = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        with trio.fail_after(dial_timeout):
            stream: trio.abc.Stream
            if tls is None:
                stream = await trio.open_tcp_stream(host, port)
            else:
                stream = await _open_tls(host, port, tls, https_compatible=True)
            try:
                return await dial_websocket(
                    stream,
                    host=host if port in (80, 443) else f"{host}:{port}",
                    resource=resource,
                    headers=extra_headers,
                )
            except BaseException:
                await trio.aclose_forcefully(stream)
                raise
    except trio.TooSlowError:
        raise TimeoutError(f"{url}: no answer within {dial_timeout:g} s") from None


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
        websocket = await _dial_websocket(url, context, extra_headers, dial_timeout)
        try:
            yield websocket
        finally:
            await trio.aclose_forcefully(websocket)
    else:
        raise ValueError(f"unsupported transport scheme {scheme!r} in {url!r}")
