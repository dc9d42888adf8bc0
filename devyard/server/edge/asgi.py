"""Small raw-ASGI helpers for the edge's routes (which need no web framework).

Errors have the API's shape, ``{"message": ..., "reason": ...}`` (docs/api.md), so a client
handles a refused upgrade the same way as any other API error.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, MutableMapping
from typing import Any, Final
from urllib.parse import parse_qs

import trio

from ..hosts import AccessReason
from .asgi_stream import Send

__all__ = [
    "ACCESS_REFUSALS",
    "bearer_from",
    "error_body",
    "error_headers",
    "reject_websocket",
    "send_http",
    "send_http_error",
]

#: The edge's HTTP answer to each `AccessReason`: (status, the APIError ``reason``).
ACCESS_REFUSALS: Final[dict[AccessReason, tuple[int, str]]] = {
    AccessReason.UNKNOWN: (404, "not_found"),
    AccessReason.GONE: (410, "gone"),
    AccessReason.WRONG_TOKEN: (401, "unauthorized"),
    AccessReason.NOT_READY: (409, "not_ready"),
    AccessReason.NOT_ON_HOST: (404, "not_found"),
    AccessReason.NOT_ON_TUNNEL: (400, "bad_request"),
}


def error_body(message: str, reason: str) -> bytes:
    return json.dumps({"message": message, "reason": reason}).encode()


def error_headers(status: int, body: bytes) -> list[tuple[bytes, bytes]]:
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"cache-control", b"no-store"),
    ]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    return headers


def bearer_from(
    headers: Iterable[tuple[bytes, bytes]], query_string: bytes | None = None
) -> str | None:
    """The ``Authorization: Bearer`` credential, or the password of ``Authorization: Basic``
    (Gradle's HTTP build cache can send only Basic: any user name, the token as password,
    docs/builds.md), else (given a *query_string*) its ``token`` parameter."""
    for name, value in headers:
        if bytes(name).lower() == b"authorization":
            scheme, _, credential = bytes(value).decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and credential.strip():
                return credential.strip()
            if scheme.lower() == "basic" and (password := _basic_password(credential)):
                return password
    if query_string is not None:
        params = parse_qs(bytes(query_string).decode("latin-1"))
        values = params.get("token")
        if values and values[0]:
            return values[0]
    return None


def _basic_password(credential: str) -> str | None:
    try:
        decoded = base64.b64decode(credential.strip(), validate=True).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return None
    _, colon, password = decoded.partition(":")
    return password if colon and password else None


async def reject_websocket(
    scope: MutableMapping[str, Any],
    send: Send,
    status: int,
    message: str,
    reason: str,
    *,
    body: bytes | None = None,
) -> None:
    """Refuse an upgrade with an HTTP response (ASGI websocket.http.response), else close.
    The body is `error_body` unless given."""
    if "websocket.http.response" in scope.get("extensions", {}):
        body = error_body(message, reason) if body is None else body
        await send(
            {
                "type": "websocket.http.response.start",
                "status": status,
                "headers": error_headers(status, body),
            }
        )
        await send({"type": "websocket.http.response.body", "body": body})
    else:
        await send({"type": "websocket.close", "code": 1008})


async def send_http(
    send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]
) -> None:
    """A whole HTTP response; shielded, as Hypercorn closes connections inside ``send``."""
    with trio.CancelScope(shield=True):
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


async def send_http_error(send: Send, status: int, message: str, reason: str) -> None:
    body = error_body(message, reason)
    await send_http(send, status, body, error_headers(status, body))
