"""A tunnel-attached instance's way out: an HTTP CONNECT and SOCKS5 proxy on one loopback port.

Each instance on a tunnel gets its own `EgressProxy` (docs/tunnels.md "Egress"). The device's
network is pointed at it (Android: the global ``http_proxy`` setting, which real apps and the
virtual device's ``curl`` / ``nc`` honour). A destination that matches the tunnel's selectors
goes through the tunnel — an ``egress`` stream to the edge, which relays it to the connector
(docs/protocol.md 6) — and anything else is dialled directly from the host, like a device on
an ordinary network. The selectors are the ones the instance attached with: a change made
afterwards reaches instances attached afterwards.

Speaks, on the same port (told apart by the first byte):

- SOCKS5 (RFC 1928), no authentication, CONNECT only, IPv4 / domain / IPv6 addresses;
- HTTP/1.1 ``CONNECT host:port``, and absolute-form requests (``GET http://host/path``) that
  plain-HTTP proxy clients send, forwarded in origin form.
"""

from __future__ import annotations

import ipaddress
import logging
import struct
from collections.abc import Awaitable, Callable, Sequence
from typing import Final
from urllib.parse import urlsplit

import trio

from ..core import OpenError, splice
from ..core.selectors import Selector, matches

log = logging.getLogger(__name__)

__all__ = ["EgressProxy", "TunnelDialer"]

TunnelDialer = Callable[[str, int], Awaitable[trio.abc.Stream]]

_MAX_HEAD: Final = 16 * 1024
_HEAD_TIMEOUT_S: Final = 30.0
_DIRECT_TIMEOUT_S: Final = 15.0

# SOCKS5 reply codes (RFC 1928 section 6)
_SOCKS_OK: Final = 0
_SOCKS_FAILURE: Final = 1
_SOCKS_NOT_ALLOWED: Final = 2
_SOCKS_HOST_UNREACHABLE: Final = 4
_SOCKS_REFUSED: Final = 5
_SOCKS_COMMAND: Final = 7
_SOCKS_ADDRESS: Final = 8


class _DialError(Exception):
    def __init__(self, http_status: int, socks_code: int, message: str) -> None:
        super().__init__(message)
        self.http_status = http_status
        self.socks_code = socks_code


class _Reader:
    """Exact reads over a stream, keeping what was read past the caller's need."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.buffer = bytearray()

    async def fill(self) -> None:
        data = await self.stream.receive_some()
        if not data:
            raise EOFError("the client closed the connection")
        self.buffer += data

    async def exactly(self, n: int) -> bytes:
        while len(self.buffer) < n:
            await self.fill()
        out = bytes(self.buffer[:n])
        del self.buffer[:n]
        return out

    async def head(self) -> bytes:
        while (end := self.buffer.find(b"\r\n\r\n")) < 0:
            if len(self.buffer) > _MAX_HEAD:
                raise ValueError("request head too large")
            await self.fill()
        out = bytes(self.buffer[: end + 4])
        del self.buffer[: end + 4]
        return out


class EgressProxy:
    """One instance's proxy. `serve` listens; `dial` is the routing decision, also usable
    directly by a driver that has no network stack of its own."""

    def __init__(
        self, instance_id: str, selectors: Sequence[Selector], tunnel: TunnelDialer | None
    ) -> None:
        self.instance_id = instance_id
        self.selectors = tuple(selectors)
        self._tunnel = tunnel
        self.port = 0

    def __repr__(self) -> str:
        return f"EgressProxy({self.instance_id}, port={self.port})"

    def through_tunnel(self, host: str, port: int) -> bool:
        return self._tunnel is not None and matches(self.selectors, host, port)

    async def dial(self, host: str, port: int) -> trio.abc.Stream:
        """A connection to host:port, through the tunnel when the selectors say so."""
        if self._tunnel is not None and self.through_tunnel(host, port):
            try:
                return await self._tunnel(host, port)
            except OpenError as exc:
                raise _dial_error(exc) from exc
            except OSError as exc:
                raise _DialError(502, _SOCKS_FAILURE, f"the tunnel is unavailable: {exc}") from exc
        try:
            with trio.fail_after(_DIRECT_TIMEOUT_S):
                return await trio.open_tcp_stream(host, port)
        except trio.TooSlowError:
            raise _DialError(504, _SOCKS_HOST_UNREACHABLE, f"{host}:{port} timed out") from None
        except OSError as exc:
            raise _DialError(502, _SOCKS_REFUSED, f"{host}:{port}: {exc.strerror or exc}") from exc

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1", backlog=64)
        self.port = int(listeners[0].socket.getsockname()[1])
        log.info("instance %s: egress proxy on 127.0.0.1:%d", self.instance_id, self.port)
        async with trio.open_nursery() as nursery:
            await nursery.start(trio.serve_listeners, self._handle, listeners)
            task_status.started(self.port)

    async def _handle(self, client: trio.SocketStream) -> None:
        reader = _Reader(client)
        try:
            with trio.fail_after(_HEAD_TIMEOUT_S):
                await reader.fill()
                if reader.buffer[0] == 5:
                    upstream = await self._socks5(reader)
                else:
                    upstream = await self._http(reader)
            if upstream is None:
                return
            if reader.buffer:
                await upstream.send_all(bytes(reader.buffer))
            await splice(client, upstream)
        except (EOFError, ValueError, trio.TooSlowError, trio.BrokenResourceError) as exc:
            log.debug("egress client of %s: %s", self.instance_id, exc)
        finally:
            await trio.aclose_forcefully(client)

    async def _socks5(self, reader: _Reader) -> trio.abc.Stream | None:
        client = reader.stream
        _, count = await reader.exactly(2)
        methods = await reader.exactly(count)
        if 0 not in methods:
            await client.send_all(b"\x05\xff")  # only "no authentication"
            return None
        await client.send_all(b"\x05\x00")
        version, command, _, kind = await reader.exactly(4)
        if kind == 1:
            host = str(ipaddress.IPv4Address(await reader.exactly(4)))
        elif kind == 3:
            (length,) = await reader.exactly(1)
            host = (await reader.exactly(length)).decode("idna")
        elif kind == 4:
            host = str(ipaddress.IPv6Address(await reader.exactly(16)))
        else:
            await client.send_all(_socks_reply(_SOCKS_ADDRESS))
            return None
        (port,) = struct.unpack(">H", await reader.exactly(2))
        if version != 5 or command != 1:
            await client.send_all(_socks_reply(_SOCKS_COMMAND))
            return None
        try:
            upstream = await self.dial(host, port)
        except _DialError as exc:
            log.info("instance %s: %s:%d refused: %s", self.instance_id, host, port, exc)
            await client.send_all(_socks_reply(exc.socks_code))
            return None
        await client.send_all(_socks_reply(_SOCKS_OK))
        return upstream

    async def _http(self, reader: _Reader) -> trio.abc.Stream | None:
        client = reader.stream
        head = await reader.head()
        request_line, _, rest = head.partition(b"\r\n")
        try:
            method, target, version = request_line.decode("latin-1").split(" ")
        except ValueError:
            await _http_error(client, 400, "malformed request line")
            return None
        if method == "CONNECT":
            host, _, port_text = target.rpartition(":")
            host = host.strip("[]")
            forward = b""
        else:
            url = urlsplit(target)
            if url.scheme != "http" or not url.hostname:
                await _http_error(client, 400, "a proxy request needs an absolute http:// URL")
                return None
            host, port_text = url.hostname, str(url.port or 80)
            path = (url.path or "/") + (f"?{url.query}" if url.query else "")
            forward = f"{method} {path} {version}\r\n".encode("latin-1") + rest
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            await _http_error(client, 400, f"bad destination {target!r}")
            return None
        try:
            upstream = await self.dial(host, int(port_text))
        except _DialError as exc:
            log.info("instance %s: %s refused: %s", self.instance_id, target, exc)
            await _http_error(client, exc.http_status, str(exc))
            return None
        if method == "CONNECT":
            await client.send_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        else:
            await upstream.send_all(forward)
        return upstream


def _socks_reply(code: int) -> bytes:
    return bytes([5, code, 0, 1, 0, 0, 0, 0, 0, 0])


async def _http_error(client: trio.abc.Stream, status: int, message: str) -> None:
    reasons = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway", 504: "Gateway Timeout"}
    body = (message + "\n").encode()
    head = (
        f"HTTP/1.1 {status} {reasons.get(status, 'Error')}\r\nContent-Type: text/plain\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    await client.send_all(head.encode() + body)


def _dial_error(exc: OpenError) -> _DialError:
    if exc.code == "forbidden":
        return _DialError(403, _SOCKS_NOT_ALLOWED, f"not allowed by the tunnel: {exc.message}")
    if exc.code in ("refused", "nxdomain"):
        return _DialError(502, _SOCKS_REFUSED, f"{exc.code}: {exc.message}")
    if exc.code == "timeout":
        return _DialError(504, _SOCKS_HOST_UNREACHABLE, f"timeout: {exc.message}")
    return _DialError(502, _SOCKS_FAILURE, f"{exc.code}: {exc.message}")
