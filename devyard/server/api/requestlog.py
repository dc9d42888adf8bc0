"""Request ids, the access log and the per-route metrics: one ASGI middleware in front of all.

`RequestLog` wraps everything the API port serves (the API, the edge's link routes, the
instance gateway). For each HTTP request or WebSocket it:

- takes a sane incoming ``X-Request-Id`` (1-128 of ``[A-Za-z0-9._:-]``; a proxy's id is kept so
  logs join up) or makes one, sets it in `devyard._process.REQUEST_ID` for every log line the
  request causes (the logging filter reads it), and sends it back on the response (on the
  upgrade response or refusal, for a WebSocket);
- writes one access-log line (logger ``devyard.access``) when the request ends: method, the
  path with every credential redacted (`redact_target`), status, duration, client;
- counts it in `devyard.server.metrics` by route *template* (`ROUTE_SCOPE_KEY`, set by the
  request pipeline; a mounted prefix or path otherwise): label values stay bounded.
"""

from __future__ import annotations

import logging
import re
import secrets
import time
from collections.abc import Iterable
from typing import Any, Final
from urllib.parse import parse_qsl, quote

from hypercorn.typing import ASGIFramework, ASGIReceiveCallable, ASGISendCallable, Scope

from ..._process import REQUEST_ID
from .. import metrics

__all__ = ["REQUEST_ID_HEADER", "ROUTE_SCOPE_KEY", "RequestLog", "mark_route", "redact_target"]

access_log = logging.getLogger("devyard.access")

#: Where the request pipeline leaves the matched route's rule for this middleware.
ROUTE_SCOPE_KEY: Final = "devyard.route"
REQUEST_ID_HEADER: Final = "X-Request-Id"
_HEADER_BYTES: Final = REQUEST_ID_HEADER.lower().encode()
_SANE_ID: Final = re.compile(r"[A-Za-z0-9._:-]{1,128}")
#: Query parameters whose value is a secret, whatever the endpoint.
_SECRET_PARAMS: Final = re.compile(r"token|key|secret|sig|password|auth|credential", re.I)
#: The one-time values of single sign-on's redirects (docs/accounts.md), under /auth/ only.
_SSO_SECRET_PARAMS: Final = frozenset({"code", "state", "nonce", "session_state"})
#: devyard's own credentials (``dy``, ``dyst``, ``dyt``, ``dyi``, ``dys``, ``dyh`` prefixes).
_TOKEN_SHAPE: Final = re.compile(r"\bdy[a-z]{0,3}_[A-Za-z0-9]+_[A-Za-z0-9]+")
REDACTED: Final = "REDACTED"
_METHODS: Final = frozenset(
    {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "WEBSOCKET"}
)


def redact_target(path: str, query: bytes | str) -> str:
    """*path* and *query* for a log line: secret parameters and token-shaped text redacted."""
    shown = _TOKEN_SHAPE.sub(REDACTED, path)
    raw = query.decode("latin-1") if isinstance(query, bytes) else query
    if not raw:
        return shown
    pairs = parse_qsl(raw, keep_blank_values=True)
    parts = [
        f"{quote(name, safe='')}="
        + (
            REDACTED
            if _SECRET_PARAMS.search(name)
            or (path.startswith("/auth/") and name in _SSO_SECRET_PARAMS)
            else quote(_TOKEN_SHAPE.sub(REDACTED, value), safe="")
        )
        for name, value in pairs
    ]
    return f"{shown}?{'&'.join(parts)}" if parts else shown


def mark_route(scope: Any, rule: str) -> None:
    """Leave the matched route's rule (a template) for the access log and the metrics."""
    scope[ROUTE_SCOPE_KEY] = rule


def _incoming_id(scope: Any) -> str | None:
    for name, value in scope.get("headers", []):
        if bytes(name).lower() == _HEADER_BYTES:
            text = bytes(value).decode("latin-1").strip()
            return text if _SANE_ID.fullmatch(text) else None
    return None


class RequestLog:
    """The middleware; *mounted* are the paths and prefixes served outside the API's routes
    (their metric label when the pipeline set none)."""

    def __init__(self, app: ASGIFramework, mounted: Iterable[str] = ()) -> None:
        self.app = app
        self._mounted = tuple(sorted(mounted, key=len, reverse=True))

    def _route(self, scope: Any) -> str:
        rule = scope.get(ROUTE_SCOPE_KEY)
        if isinstance(rule, str):
            return rule
        path = str(scope.get("path", ""))
        for mount in self._mounted:
            if path == mount or (mount.endswith("/") and path.startswith(mount)):
                return mount + "*" if mount.endswith("/") else mount
        return "unmatched"

    async def __call__(
        self, scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable
    ) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        request_id = _incoming_id(scope) or secrets.token_hex(12)
        header = (_HEADER_BYTES, request_id.encode())
        status = [0]

        async def send_with_id(message: Any) -> None:
            kind = message["type"]
            if kind in ("http.response.start", "websocket.http.response.start"):
                message = {**message, "headers": [*message.get("headers", []), header]}
                status[0] = int(message["status"])
            elif kind == "websocket.accept":
                message = {**message, "headers": [*message.get("headers", []), header]}
                status[0] = 101
            elif kind == "websocket.close" and not status[0]:
                status[0] = 403  # closed before the accept: the server's refusal
            await send(message)

        reset = REQUEST_ID.set(request_id)
        start = time.perf_counter()
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            elapsed = time.perf_counter() - start
            self._record(scope, status[0] or 500, elapsed)
            REQUEST_ID.reset(reset)

    def _record(self, scope: Any, status: int, elapsed: float) -> None:
        http = scope["type"] == "http"
        method = str(scope.get("method", "GET")) if http else "WEBSOCKET"
        route = self._route(scope)
        label = method if method in _METHODS else "other"  # a client picks methods: bounded
        metrics.HTTP_REQUESTS.labels(route, label, str(status)).inc()
        if http:
            metrics.HTTP_DURATION.labels(route, label).observe(elapsed)
        client = scope.get("client") or ("-", 0)
        access_log.info(
            "%s %s %d %.1fms %s",
            method,
            redact_target(str(scope.get("path", "")), scope.get("query_string", b"")),
            status,
            elapsed * 1000,
            client[0],
        )
