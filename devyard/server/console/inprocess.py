"""The public API, called in-process with the browser's own credential.

The console shows nothing the signed-in user could not fetch with the API because it *is*
the API: every read and write of a page is an ASGI request to the API app, made inside this
process, carrying the browser's session cookie (and, for a write, the CSRF token the form
brought). The request pipeline then authenticates, scopes, authorizes and validates it
exactly as it would a request from ``curl``; the console never reads the store.

Only headers that describe the original request travel (``Host``, ``User-Agent``, the
forwarding headers): the API builds its URLs and rate-limits by client address as for the
browser. Bodies are bounded (an answer larger than ``MAX_ANSWER_BYTES`` is an error) and so
is time: a call that has not answered in ``CALL_TIMEOUT_S`` fails (no streaming operation is
called this way: the browser opens those itself).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import quote, urlencode

import attrs
import trio
from quart import request

from ..accounts import sessions

__all__ = ["ApiAnswer", "ApiFailure", "InProcessApi"]

MAX_ANSWER_BYTES: Final = 8 * 1024 * 1024
CALL_TIMEOUT_S: Final = 60.0
_PASSED_HEADERS: Final = frozenset(
    {
        b"host",
        b"user-agent",
        b"x-forwarded-for",
        b"x-forwarded-proto",
        b"x-forwarded-host",
        b"forwarded",
        b"accept-language",
    }
)

Asgi = Any  # an ASGI application: (scope, receive, send) -> None


@attrs.frozen
class ApiAnswer:
    status: int
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes = attrs.field(repr=False)

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None

    def set_cookies(self) -> list[str]:
        return [v.decode("latin-1") for k, v in self.headers if k.lower() == b"set-cookie"]


class ApiFailure(Exception):
    """The API refused: its status and its ``APIError`` message and reason, for the page."""

    def __init__(self, status: int, message: str, reason: str | None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.reason = reason


class InProcessApi:
    """Calls the API app *asgi* in-process on behalf of the current console request."""

    def __init__(self, asgi: Asgi) -> None:
        self._asgi = asgi

    def __repr__(self) -> str:
        return "<InProcessApi>"

    async def call(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: object = None,
        authorization: str | None = None,
        csrf: str | None = None,
    ) -> ApiAnswer:
        """One API request as the browser: its session cookie, unless *authorization* (an
        API key being signed in with) is given; *csrf* goes in ``X-CSRF-Token``."""
        source = request.scope
        headers = [(k, v) for k, v in source.get("headers", ()) if k.lower() in _PASSED_HEADERS]
        if authorization is not None:
            headers.append((b"authorization", authorization.encode("latin-1")))
        else:
            cookie = request.cookies.get(sessions.SESSION_COOKIE)
            if cookie:
                headers.append((b"cookie", f"{sessions.SESSION_COOKIE}={cookie}".encode()))
        if csrf is not None:
            headers.append((sessions.CSRF_HEADER.lower().encode(), csrf.encode("latin-1")))
        payload = b"" if body is None else json.dumps(body).encode()
        if body is not None:
            headers.append((b"content-type", b"application/json"))
        headers.append((b"content-length", str(len(payload)).encode()))
        scope: dict[str, Any] = {
            "type": "http",
            "asgi": source.get("asgi", {"version": "3.0"}),
            "http_version": source.get("http_version", "1.1"),
            "method": method,
            "scheme": source.get("scheme", "http"),
            "path": path,
            "raw_path": quote(path).encode(),
            "query_string": urlencode(dict(params or {})).encode(),
            "root_path": "",
            "headers": headers,
            "client": source.get("client"),
            "server": source.get("server"),
            "extensions": {},
        }
        return await self._exchange(scope, payload)

    async def json(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: object = None,
        csrf: str | None = None,
    ) -> Any:
        """The answer's JSON, or :class:`ApiFailure` with the API's message."""
        answer = await self.call(method, path, params=params, body=body, csrf=csrf)
        if answer.status >= 400:
            raise failure(answer)
        return answer.json()

    async def _exchange(self, scope: dict[str, Any], payload: bytes) -> ApiAnswer:
        sent = False
        status = 500
        headers: tuple[tuple[bytes, bytes], ...] = ()
        chunks: list[bytes] = []
        size = 0
        done = trio.Event()

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": payload, "more_body": False}
            await done.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            nonlocal status, headers, size
            if message["type"] == "http.response.start":
                status = int(message["status"])
                headers = tuple((bytes(k), bytes(v)) for k, v in message.get("headers", ()))
            elif message["type"] == "http.response.body":
                chunk = bytes(message.get("body", b""))
                size += len(chunk)
                if size > MAX_ANSWER_BYTES:
                    raise ApiFailure(502, "the API's answer is too large for a page", None)
                chunks.append(chunk)
                if not message.get("more_body", False):
                    done.set()

        with trio.fail_after(CALL_TIMEOUT_S):
            await self._asgi(scope, receive, send)
        done.set()
        return ApiAnswer(status=status, headers=headers, body=b"".join(chunks))


def failure(answer: ApiAnswer) -> ApiFailure:
    try:
        error = answer.json()
    except ValueError:
        error = None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        reason = error.get("reason")
        reason = reason if isinstance(reason, str) else None
        return ApiFailure(answer.status, error["message"], reason)
    return ApiFailure(answer.status, f"the API answered {answer.status}", None)
