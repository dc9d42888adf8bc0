"""``/v1/instances/{id}/cdp``: the browser sandbox's Chrome DevTools Protocol (docs/sandbox.md).

``status.sandbox.playwrightAndroid.url`` is this path as a WebSocket URL. Two ways in, as
Chrome's own DevTools port offers them, so `connect_over_cdp` works with either URL form:

    WebSocket  cdp[/devtools/...]   -> ``cdp`` stream to the host, CDP messages relayed both
                                       ways (the host holds the WebSocket to Chromium)
    HTTP GET   cdp/json/version[/]  -> Chromium's version document, its
                                       ``webSocketDebuggerUrl`` rewritten to this edge

A client given an ``http(s)://`` URL fetches ``{url}/json/version/`` and connects to the
``webSocketDebuggerUrl`` it names; given ``ws(s)://`` it connects directly. Either way the
token comes as ``Authorization: Bearer`` (Playwright's ``headers=``) or as ``?token=``, which is
then kept in the ``webSocketDebuggerUrl`` it answers (a tool that takes a bare CDP URL works).
One CDP message is at most 4 MiB (the relay's frame limit).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final
from urllib.parse import urlencode

import trio

from ...core import MuxStream, RemoteProtocolError
from ...core.channel import RelayChannel
from .asgi import send_http, send_http_error
from .asgi_stream import Send

__all__ = ["CDP_ENDPOINT", "is_discovery", "serve_discovery"]

CDP_ENDPOINT: Final = "cdp"
_DISCOVERY: Final = frozenset({"json/version", "json/version/"})
_ANSWER_TIMEOUT_S: Final = 15.0
_HEADERS: Final = [(b"content-type", b"application/json"), (b"cache-control", b"no-store")]

OpenCdp = Callable[[str], Awaitable[MuxStream]]


def is_discovery(rest: str) -> bool:
    """Whether *rest* (the path after ``cdp/``) is the version document."""
    return rest in _DISCOVERY


def _public_ws_url(scope: MutableMapping[str, Any], rest: str, query_token: str | None) -> str:
    host = "localhost"
    for key, value in scope.get("headers", []):
        if bytes(key).lower() == b"host":
            host = bytes(value).decode("latin-1")
    scheme = "wss" if scope.get("scheme") in ("https", "wss") else "ws"
    path = str(scope["path"])
    path = path[: len(path) - len(rest)].rstrip("/")
    query = "" if query_token is None else "?" + urlencode({"token": query_token})
    return f"{scheme}://{host}{path}{query}"


async def serve_discovery(
    scope: MutableMapping[str, Any],
    send: Send,
    open_cdp: OpenCdp,
    rest: str,
    *,
    query_token: str | None,
) -> None:
    """Answer ``GET cdp/json/version``: the host's document, pointing at this edge."""
    if scope["method"] not in ("GET", "HEAD"):
        await send_http_error(send, 405, "the version document takes GET", "method_not_allowed")
        return
    stream = await open_cdp("json/version")
    try:
        with trio.fail_after(_ANSWER_TIMEOUT_S):
            message = await RelayChannel(stream).receive()
        document = json.loads(message)
        if not isinstance(document, dict):
            raise ValueError("not an object")
    except (trio.TooSlowError, trio.EndOfChannel, RemoteProtocolError, ValueError) as exc:
        await send_http_error(
            send, 502, f"the browser sandbox did not answer: {exc}", "bad_gateway"
        )
        return
    finally:
        await trio.aclose_forcefully(stream)
    document["webSocketDebuggerUrl"] = _public_ws_url(scope, rest, query_token)
    await send_http(send, 200, json.dumps(document).encode(), _HEADERS)
