"""The operator port: a tiny HTTP/1.1 server for ``/metrics`` and readiness probes.

Every daemon (server, host daemon, connector) can answer Prometheus and a load balancer on a
port of its own, apart from the public API port, so that what it reveals (counts, versions,
host names) is reachable only where the operator binds it (docs/operations.md). One request
per connection, ``GET``/``HEAD`` only, the request line read with a bounded buffer under a
deadline; headers are not read (the port takes no credentials: bind it to a private address).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Final

import attrs
import trio

log = logging.getLogger(__name__)

__all__ = ["PROMETHEUS_TEXT", "OpsAnswer", "OpsHandler", "render_response", "serve_ops_port"]

_MAX_REQUEST: Final = 8192
_REQUEST_DEADLINE: Final = 5.0
_REASONS: Final = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 503: "Unavailable"}

#: The content type of the Prometheus text exposition format.
PROMETHEUS_TEXT: Final = "text/plain; version=0.0.4; charset=utf-8"


@attrs.frozen
class OpsAnswer:
    status: int
    content_type: str
    body: bytes


#: The daemon's answer to one path (the query string is dropped); None is a 404.
OpsHandler = Callable[[str], Awaitable[OpsAnswer | None]]


def render_response(answer: OpsAnswer) -> bytes:
    reason = _REASONS.get(answer.status, "")
    head = (
        f"HTTP/1.1 {answer.status} {reason}\r\nContent-Type: {answer.content_type}\r\n"
        f"Content-Length: {len(answer.body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + answer.body


async def _answer(handler: OpsHandler, request_line: str) -> OpsAnswer:
    parts = request_line.split()
    if len(parts) < 2 or parts[0] not in ("GET", "HEAD"):
        return OpsAnswer(405, "text/plain", b"only GET\n")
    found = await handler(parts[1].partition("?")[0])
    return found if found is not None else OpsAnswer(404, "text/plain", b"not found\n")


async def _handle(handler: OpsHandler, stream: trio.SocketStream) -> None:
    try:
        with trio.move_on_after(_REQUEST_DEADLINE):
            data = b""
            while b"\r\n" not in data and len(data) < _MAX_REQUEST:
                chunk = await stream.receive_some(_MAX_REQUEST - len(data))
                if not chunk:
                    break
                data += chunk
            line = data.partition(b"\r\n")[0].decode("latin-1")
            await stream.send_all(render_response(await _answer(handler, line)))
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        await trio.aclose_forcefully(stream)


async def serve_ops_port(
    handler: OpsHandler,
    host: str,
    port: int,
    *,
    what: str = "metrics",
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Answer GETs with *handler* on host:port until cancelled; reports the bound port."""
    listeners = await trio.open_tcp_listeners(port, host=host)
    bound = listeners[0].socket.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    log.info("%s on http://%s:%d/metrics", what, shown, bound)
    task_status.started(bound)

    async def serve_one(stream: trio.SocketStream) -> None:
        await _handle(handler, stream)

    await trio.serve_listeners(serve_one, listeners)
