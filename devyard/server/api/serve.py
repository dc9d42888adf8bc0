"""Serving the control API with Hypercorn's trio worker, inside the caller's nursery.

``serve_api`` binds the listener, reports the bound URL through ``task_status`` (so tests
bind port 0 and learn the port) and serves until cancelled or until ``shutdown_trigger``
returns. On the trigger Hypercorn stops accepting, gives requests in flight
``config.shutdown_grace`` seconds, then returns; cancellation stops everything at once.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, Final, TypeAlias
from urllib.parse import urlsplit

import attrs
import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve
from hypercorn.typing import (
    ASGIFramework,
    ASGIReceiveCallable,
    ASGISendCallable,
    ASGISendEvent,
    Scope,
)

from ...core.transports import WS_MAX_MESSAGE
from ..config import ListenAddress, ServerConfig
from ..hosts import HostRegistry
from ..tls import ServerTLS
from ..tunnels import TunnelConnections
from .app import create_app
from .context import ApiState
from .requestlog import RequestLog

log = logging.getLogger(__name__)

#: An ASGI callable typed loosely: what a framework-free module (the edge) can offer.
RawASGI: TypeAlias = Callable[[Any, Any, Any], Awaitable[None]]

__all__ = ["BoundServer", "ShieldedSend", "WebSocketRoutes", "serve_api"]

_KEEP_ALIVE_S: Final = 75.0  # longer than common proxies' idle timeouts (60 s)


@attrs.frozen
class BoundServer:
    """Where a started server listens."""

    local_url: str  # http://HOST:PORT actually bound
    base_url: str  # what clients are told: public_url, else local_url
    port: int
    hosts: HostRegistry | None = None  # the edge's host links, when the server runs an edge
    tunnels: TunnelConnections | None = None  # the edge's connector links, if any
    link_port: int | None = None  # the raw link listener's port, when link_listen is set


class ShieldedSend:
    """ASGI middleware: the server's ``send`` runs shielded from the app's cancellation.

    Why: Quart-Trio cancels its per-request nursery as soon as the response is out, and Hypercorn
    does connection bookkeeping inside that ``send`` call. When a response completes before the
    request body has arrived (a 401 or 413 that never reads it), Hypercorn must close the
    connection from inside ``send``; the cancellation interrupts the close at its first
    checkpoint and leaves the connection open and dead, so a keep-alive client's next request
    hangs. Hypercorn already shields the socket write itself; this extends the shield to the
    rest of ``send`` (a few non-blocking steps). Regression test:
    tests/server/api/test_serve.py::test_an_unread_body_closes_the_connection_not_hangs.
    """

    def __init__(self, app: ASGIFramework) -> None:
        self.app = app

    async def __call__(
        self, scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable
    ) -> None:
        async def shielded_send(message: ASGISendEvent) -> None:
            with trio.CancelScope(shield=True):
                await send(message)

        await self.app(scope, receive, shielded_send)


class WebSocketRoutes:
    """ASGI dispatcher in front of the app for routes that need no web framework: WebSocket
    connections to a mounted path (the edge's host links), and every request, HTTP or
    WebSocket, under a mounted prefix (the per-instance endpoints). Everything else goes to
    the app."""

    def __init__(
        self,
        app: ASGIFramework,
        routes: dict[str, RawASGI],
        prefixes: dict[str, RawASGI] | None = None,
    ) -> None:
        self.app = app
        self.routes = routes
        self.prefixes = prefixes or {}

    async def __call__(
        self, scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable
    ) -> None:
        if scope["type"] in ("http", "websocket"):
            path = scope["path"]
            for prefix, handler in self.prefixes.items():
                if path.startswith(prefix):
                    await handler(scope, receive, send)
                    return
        if scope["type"] == "websocket":
            route = self.routes.get(scope["path"])
            if route is not None:
                await route(scope, receive, send)
                return
        await self.app(scope, receive, send)


#: RFC 6797: once a browser has seen the API over HTTPS it uses nothing else for a year.
_HSTS: Final = (b"strict-transport-security", b"max-age=31536000")


class StrictTransport:
    """ASGI middleware: every HTTP response carries ``Strict-Transport-Security`` (TLS on)."""

    def __init__(self, app: ASGIFramework) -> None:
        self.app = app

    async def __call__(
        self, scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable
    ) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_hsts(message: ASGISendEvent) -> None:
            if message["type"] == "http.response.start":
                headers = [h for h in message.get("headers", ()) if h[0].lower() != _HSTS[0]]
                message = {**message, "headers": [*headers, _HSTS]}
            await send(message)

        await self.app(scope, receive, send_with_hsts)


class _TLSConfig(HypercornConfig):
    """Hypercorn's config serving with our `ServerTLS` context (which a SIGHUP reloads in
    place) instead of a context of its own made once from file names."""

    def __init__(self, tls: ServerTLS) -> None:
        super().__init__()
        self._tls = tls
        self.certfile = str(tls.cert)  # Hypercorn's ssl_enabled looks at these two
        self.keyfile = str(tls.key)

    def create_ssl_context(self) -> ssl.SSLContext | None:
        return self._tls.context


def _hypercorn_config(config: ServerConfig, tls: ServerTLS | None = None) -> HypercornConfig:
    hyper = HypercornConfig() if tls is None else _TLSConfig(tls)
    hyper.bind = [str(config.listen)]
    hyper.graceful_timeout = config.shutdown_grace
    hyper.keep_alive_timeout = _KEEP_ALIVE_S
    hyper.accesslog = None  # request lines could be logged by a proxy; we keep none
    hyper.errorlog = logging.getLogger("hypercorn.error")
    hyper.include_server_header = False
    hyper.websocket_max_message_size = WS_MAX_MESSAGE  # docs/protocol.md 8.2
    return hyper


async def serve_api(
    state: ApiState,
    *,
    shutdown_trigger: Callable[[], Awaitable[None]] | None = None,
    websockets: dict[str, RawASGI] | None = None,
    prefixes: dict[str, RawASGI] | None = None,
    link_port: int | None = None,
    tls: ServerTLS | None = None,
    task_status: trio.TaskStatus[BoundServer] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the control API over *state* (whose store the caller owns) until shut down.

    *websockets* mounts ASGI callables on WebSocket paths in front of the API (the edge's
    ``/v1/host_connections``), *prefixes* on path prefixes for HTTP and WebSocket alike (the
    per-instance endpoints); the state's ``hosts`` and ``connectors`` and *link_port* are
    passed through to the ``BoundServer``. With *tls* the port speaks HTTPS only (HTTP/2 or
    HTTP/1.1 by ALPN, WebSockets over either) and every response carries HSTS.
    """
    config = state.config
    app: ASGIFramework = ShieldedSend(create_app(state))
    if websockets or prefixes:
        app = WebSocketRoutes(app, websockets or {}, prefixes)
    if tls is not None:
        app = StrictTransport(app)
    app = RequestLog(app, mounted=[*(websockets or {}), *(prefixes or {})])  # ids, access log
    async with trio.open_nursery() as nursery:
        binds: list[str] = await nursery.start(
            partial(
                serve,
                app,
                _hypercorn_config(config, tls),
                shutdown_trigger=shutdown_trigger,
                mode="asgi",
            )
        )
        local_url = binds[0]  # https:// when TLS is on
        port = urlsplit(local_url).port or 0
        # With port 0 the configured listen address does not say where clients go: the bind does.
        base_url = attrs.evolve(config, listen=ListenAddress(config.listen.host, port)).base_url
        bound = BoundServer(
            local_url=local_url,
            base_url=base_url,
            port=port,
            hosts=state.hosts,
            tunnels=state.connectors,
            link_port=link_port,
        )
        log.info("control API listening on %s (base URL %s)", local_url, base_url)
        task_status.started(bound)
