"""The raw link listener: host and connector links without WebSocket framing (docs/edge.md).

Links dial the API port's WebSocket routes by default. With ``link_listen`` set, the server
also listens on a port of its own (TLS when ``link_tls_cert`` is set) for the raw mode of
`devyard.core.upgrade`: one HTTP/1.1 upgrade request, then mux frames on the bare socket. The
same route objects serve both: each request is handed to the route's ASGI app as a websocket
scope whose ``devyard.raw_link`` extension accepts onto the socket itself, so authentication,
refusals (status and JSON body) and the link's life are one code path.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any, Final

import trio

from ...core import UpgradeRequest, accept_upgrade
from .asgi import error_body
from .asgi_stream import RAW_LINK_EXTENSION, Receive, Send

log = logging.getLogger(__name__)

__all__ = ["HANDSHAKE_TIMEOUT", "LinkApp", "open_raw_listeners", "serve_raw_links"]

LinkApp = Callable[[MutableMapping[str, Any], Receive, Send], Awaitable[None]]

#: A connection that has not sent its whole request by then is dropped (and a TLS handshake).
HANDSHAKE_TIMEOUT: Final = 10.0


class _RawLink:
    """The ASGI side of one raw connection: ``accept`` for the app, ``send`` for refusals."""

    def __init__(self, request: UpgradeRequest) -> None:
        self.request = request
        self.accepted: trio.abc.Stream | None = None
        self._status = 500
        self._headers: list[tuple[bytes, bytes]] = []
        self._answered = False

    async def accept(self) -> trio.abc.Stream:
        self._answered = True
        self.accepted = await self.request.accept()
        return self.accepted

    async def receive(self) -> MutableMapping[str, Any]:
        if not self._answered:
            await trio.lowlevel.checkpoint()
            return {"type": "websocket.connect"}
        await trio.sleep_forever()  # a raw app reads the stream, never this
        raise AssertionError("unreachable")

    async def send(self, message: MutableMapping[str, Any]) -> None:
        kind = message.get("type")
        if kind == "websocket.http.response.start":
            self._status = int(message["status"])
            self._headers = [(bytes(k), bytes(v)) for k, v in message.get("headers", [])]
            await trio.lowlevel.checkpoint()
        elif kind == "websocket.http.response.body":
            self._answered = True
            headers = [(k, v) for k, v in self._headers if k.lower() != b"content-length"]
            await self.request.reject(self._status, bytes(message.get("body", b"")), headers)
        elif kind == "websocket.close" and not self._answered:
            self._answered = True
            await _refuse(self.request, 403, "the link was refused", "forbidden")
        else:
            raise RuntimeError(f"raw link: {kind!r} is not supported before/after accept")


async def _refuse(request: UpgradeRequest, status: int, message: str, reason: str) -> None:
    await request.reject(status, error_body(message, reason))


def _scope(request: UpgradeRequest, link: _RawLink, client: Any) -> dict[str, Any]:
    path, _, query = request.target.partition("?")
    return {
        "type": "websocket",
        "asgi": {"version": "3.0"},
        "scheme": "devyard-mux",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "headers": request.headers,
        "client": client,
        "extensions": {"websocket.http.response": {}, RAW_LINK_EXTENSION: link},
    }


def _route(routes: Mapping[str, LinkApp], path: str) -> LinkApp | None:
    """The app of *path*: an exact route, else the longest prefix route (keys ending in /)."""
    app = routes.get(path)
    if app is None:
        prefixes = [p for p in routes if p.endswith("/") and path.startswith(p)]
        app = routes[max(prefixes, key=len)] if prefixes else None
    return app


async def _handle(stream: trio.abc.Stream, routes: Mapping[str, LinkApp]) -> None:
    request: UpgradeRequest | None = None
    with trio.move_on_after(HANDSHAKE_TIMEOUT):
        try:
            if isinstance(stream, trio.SSLStream):
                await stream.do_handshake()
            request = await accept_upgrade(stream)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            request = None
    if request is None:
        await trio.aclose_forcefully(stream)
        return
    app = _route(routes, request.path)
    if request.method != "GET" or not request.wants_upgrade:
        await _refuse(request, 426, "this port takes devyard-mux/1 upgrades only", "bad-request")
        return
    if app is None:
        await _refuse(request, 404, f"no link route {request.path}", "not-found")
        return
    link = _RawLink(request)
    client = None
    socket_stream = stream.transport_stream if isinstance(stream, trio.SSLStream) else stream
    try:
        if isinstance(socket_stream, trio.SocketStream):
            client = socket_stream.socket.getpeername()[:2]
        await app(_scope(request, link, client), link.receive, link.send)
    except Exception:
        # What Hypercorn does for the WebSocket routes: one connection's error (a hello that
        # never comes, a bug) ends that connection, never the listener and the server.
        log.exception("raw link %s from %s ended with an error", request.path, client)
    finally:
        await trio.aclose_forcefully(link.accepted or stream)


async def open_raw_listeners(
    host: str, port: int, *, ssl_context: ssl.SSLContext | None = None
) -> tuple[list[trio.abc.Listener[Any]], int]:
    """Bind the raw link port (before its routes exist: they may need to know the port);
    returns the listeners and the bound port. `serve_raw_links` serves and closes them."""
    tcp = await trio.open_tcp_listeners(port, host=host)
    bound = int(tcp[0].socket.getsockname()[1])
    listeners: list[trio.abc.Listener[Any]] = list(tcp)
    if ssl_context is not None:
        listeners = [trio.SSLListener(t, ssl_context, https_compatible=False) for t in tcp]
    log.info("raw links on %s:%d (%s)", host, bound, "TLS" if ssl_context else "TCP")
    return listeners, bound


async def serve_raw_links(
    listeners: list[trio.abc.Listener[Any]],
    routes: Mapping[str, LinkApp],
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve raw links to *routes* (path -> app; a path ending in ``/`` is a prefix) on
    *listeners* (`open_raw_listeners`) until cancelled."""

    async def handle(stream: trio.abc.Stream) -> None:
        await _handle(stream, routes)

    async with trio.open_nursery() as nursery:
        await nursery.start(trio.serve_listeners, handle, listeners)
        task_status.started()
