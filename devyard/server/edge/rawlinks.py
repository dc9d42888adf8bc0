"""The raw link listener: host and connector links without WebSocket framing (docs/edge.md).

Links dial the API port's WebSocket routes by default. With ``link_listen`` set, the server
also listens on a port of its own (TLS when ``link_tls_cert`` is set) for the raw mode of
`devyard.core.upgrade`: one HTTP/1.1 upgrade request, then mux frames on the bare socket. The
same route objects serve both: each upgrade request goes to the route's raw entry point
(`Edge.serve_upgrade`, `ConnectorHub.serve_upgrade`, `InstanceGateway.serve_upgrade`), which
shares authentication, refusals (status and JSON body) and the link's life with the
WebSocket entry point (`devyard.server.edge._route`).

The port also takes WebSocket upgrades to the same routes (`accept_either`), framed by the
core's own WebSocket code (`devyard.core.wsframe`) rather than Hypercorn's wsproto: a
deployment whose load balancer passes only HTTP and WebSockets points the links' WebSocket
routes at this port and gets the cheaper framing (``ws://`` / ``wss://`` link URLs).
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

import trio

from ...core import UpgradeRequest, accept_upgrade
from ...core.wsframe import accept_websocket, is_websocket_upgrade
from .asgi import error_body

log = logging.getLogger(__name__)

__all__ = [
    "HANDSHAKE_TIMEOUT",
    "RawRoute",
    "accept_either",
    "open_raw_listeners",
    "serve_raw_links",
]

#: A route on the raw link port: it answers the upgrade (`accept` or `reject`) and serves it.
RawRoute = Callable[[UpgradeRequest], Awaitable[None]]

#: A connection that has not sent its whole request by then is dropped (and a TLS handshake).
HANDSHAKE_TIMEOUT: Final = 10.0


async def _refuse(request: UpgradeRequest, status: int, message: str, reason: str) -> None:
    await request.reject(status, error_body(message, reason))


def _route(routes: Mapping[str, RawRoute], path: str) -> RawRoute | None:
    """The app of *path*: an exact route, else the longest prefix route (keys ending in /)."""
    app = routes.get(path)
    if app is None:
        prefixes = [p for p in routes if p.endswith("/") and path.startswith(p)]
        app = routes[max(prefixes, key=len)] if prefixes else None
    return app


async def _handle(stream: trio.abc.Stream, routes: Mapping[str, RawRoute]) -> None:
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
    if request.method != "GET" or not (request.wants_upgrade or is_websocket_upgrade(request)):
        message = "this port takes devyard-mux/1 or WebSocket upgrades only"
        await _refuse(request, 426, message, "bad-request")
        return
    if app is None:
        await _refuse(request, 404, f"no link route {request.path}", "not-found")
        return
    client = None
    socket_stream = stream.transport_stream if isinstance(stream, trio.SSLStream) else stream
    try:
        if isinstance(socket_stream, trio.SocketStream):
            client = socket_stream.socket.getpeername()[:2]
        await app(request)
    except Exception:
        # What Hypercorn does for the WebSocket routes: one connection's error (a bug) ends
        # that connection, never the listener and the server.
        log.exception("raw link %s from %s ended with an error", request.path, client)
    finally:
        await trio.aclose_forcefully(stream)


async def accept_either(upgrade: UpgradeRequest) -> trio.abc.Stream:
    """Answer *upgrade* with 101 in the protocol it asked for: a WebSocket (its messages as a
    byte stream) or devyard-mux's bare socket."""
    if is_websocket_upgrade(upgrade):
        return await accept_websocket(upgrade)
    return await upgrade.accept()


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
    routes: Mapping[str, RawRoute],
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
