"""One link prologue for both kinds of link (host, connector) over both transports.

Theory of operation. A link is "authenticate the upgrade, accept it, open a mux session,
read the ``hello`` on the first stream within `HELLO_TIMEOUT`, then serve" (docs/protocol.md
7, 10). `serve_link` is that prologue, written once; a `LinkRoute` (the edge's host links,
the connector hub) supplies only what differs: which token it takes (`authenticate`, which
raises `Refusal`) and what a registered link does (`serve`, which checks the hello and may
`refuse_hello`). Two thin adapters feed it: `serve_asgi_link` (the API port's WebSocket
routes) and `serve_upgraded_link` (the raw link port's HTTP/1.1 upgrade). Both refuse with the
API's ``{"message", "reason"}`` body before the upgrade.

Containment: whatever ends one link (a lost peer, a missing hello, a bug in its handler)
ends that link only; it is logged here and never reaches the listener or the server.
"""

from __future__ import annotations

import json
import logging
from collections.abc import MutableMapping
from typing import Any, Final, Generic, Protocol, TypeVar

import attrs
import trio

from ...core import ControlChannel, GoAwayCode, Session, UpgradeRequest, open_session
from ...core.link import HELLO_TIMEOUT
from ...core.versions import VERSION_UNSUPPORTED, peer_refusal
from .. import metrics
from .asgi import bearer_from, error_headers, reject_websocket
from .asgi_stream import ASGIWebSocketStream, Receive, Send
from .rawlinks import accept_either

log = logging.getLogger(__name__)

__all__ = [
    "LinkRequest",
    "LinkRoute",
    "Refusal",
    "refuse_hello",
    "serve_asgi_link",
    "serve_link",
    "serve_upgraded_link",
]

_T = TypeVar("_T")

#: What a link that simply went away raises (logged at INFO, not as an error).
_LOST: Final = (
    trio.BrokenResourceError,
    trio.ClosedResourceError,
    trio.EndOfChannel,
    trio.TooSlowError,
)


@attrs.frozen
class LinkRequest:
    """An upgrade request to a link route, whichever transport carried it."""

    path: str
    headers: tuple[tuple[bytes, bytes], ...]
    token: str | None  # the ``Authorization: Bearer`` credential


class Refusal(Exception):
    """A link refused before the upgrade: HTTP *status* and the API's ``{message, reason}``."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message


class LinkRoute(Protocol, Generic[_T]):
    """What differs between host links and connector links."""

    async def authenticate(self, request: LinkRequest) -> _T:
        """Who dials (raises `Refusal`)."""
        ...

    async def serve(
        self, who: _T, session: Session, control: ControlChannel, hello: dict[str, Any]
    ) -> None:
        """Check the hello (`refuse_hello` when it is bad) and serve the registered link
        until it ends."""
        ...


class _Transport(Protocol):
    async def refuse(self, refusal: Refusal) -> None: ...

    async def accept(self) -> trio.abc.Stream: ...


async def serve_link(route: LinkRoute[_T], request: LinkRequest, transport: _Transport) -> None:
    """The prologue: authenticate, accept, session, bounded hello, then ``route.serve``."""
    try:
        who = await route.authenticate(request)
    except Refusal as refusal:
        log.info("link to %s refused: %s", request.path, refusal.message)
        await transport.refuse(refusal)
        return
    stream = await transport.accept()
    try:
        async with open_session(stream, client=False) as session:
            with trio.fail_after(HELLO_TIMEOUT):
                control = ControlChannel(await session.accept_stream())
                hello = await control.receive()
            if (too_old := peer_refusal(hello)) is not None:  # docs/operations.md, versions
                await refuse_hello(session, control, VERSION_UNSUPPORTED, too_old)
                return
            with metrics.link_open(request.path):
                await route.serve(who, session, control, hello)
    except* _LOST as lost:
        log.info("link %r to %s ended: %r", who, request.path, lost.exceptions[0])
    except* Exception:
        log.exception("link %r to %s ended with an error (this link only)", who, request.path)
    finally:
        await trio.aclose_forcefully(stream)


async def refuse_hello(session: Session, control: ControlChannel, code: str, message: str) -> None:
    """A hello this route cannot take: a permanent ``error``, then GO_AWAY(protocol error)."""
    await control.send({"type": "error", "code": code, "message": message, "permanent": True})
    await session.aclose(GoAwayCode.PROTOCOL_ERROR)


# ---- the two transports -----------------------------------------------------------------


def _refusal_body(refusal: Refusal) -> bytes:
    """The API's ``{message, reason}``, plus ``code`` (the same value) for connectors released
    before the shared link client read ``reason``."""
    body = {"message": refusal.message, "reason": refusal.reason, "code": refusal.reason}
    return json.dumps(body).encode()


class _AsgiTransport:
    def __init__(self, scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        self._scope, self._receive, self._send = scope, receive, send

    async def refuse(self, refusal: Refusal) -> None:
        await reject_websocket(
            self._scope,
            self._send,
            refusal.status,
            refusal.message,
            refusal.reason,
            body=_refusal_body(refusal),
        )

    async def accept(self) -> trio.abc.Stream:
        await self._send({"type": "websocket.accept"})
        return ASGIWebSocketStream(self._receive, self._send)


class _UpgradeTransport:
    def __init__(self, upgrade: UpgradeRequest) -> None:
        self._upgrade = upgrade

    async def refuse(self, refusal: Refusal) -> None:
        body = _refusal_body(refusal)
        headers = [(k, v) for k, v in error_headers(refusal.status, body) if k != b"content-length"]
        await self._upgrade.reject(refusal.status, body, headers)

    async def accept(self) -> trio.abc.Stream:
        return await accept_either(self._upgrade)


async def serve_asgi_link(
    route: LinkRoute[_T], scope: MutableMapping[str, Any], receive: Receive, send: Send
) -> None:
    """A link route as an ASGI app (the API port's WebSocket routes)."""
    if scope.get("type") != "websocket":
        raise RuntimeError("a link route takes websocket connections only")
    first = await receive()
    if first.get("type") != "websocket.connect":
        return
    headers = tuple((bytes(k), bytes(v)) for k, v in scope.get("headers", []))
    request = LinkRequest(str(scope.get("path", "")), headers, bearer_from(headers))
    await serve_link(route, request, _AsgiTransport(scope, receive, send))


async def serve_upgraded_link(route: LinkRoute[_T], upgrade: UpgradeRequest) -> None:
    """A link route on the raw link port (an HTTP/1.1 upgrade to devyard-mux, or a WebSocket
    framed by the core)."""
    headers = tuple(upgrade.headers)
    request = LinkRequest(upgrade.path, headers, bearer_from(headers))
    await serve_link(route, request, _UpgradeTransport(upgrade))
