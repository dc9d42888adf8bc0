"""The connector's numbers and its tiny HTTP endpoint: ``/ready`` and ``/metrics``.

`Metrics` is plain counters the link updates; `render` writes them in the Prometheus text
exposition format (version 0.0.4), by hand, so the connector installs without the server's
dependencies. `serve_metrics` answers ``GET /ready`` (200 with the role while this connector
is the tunnel's active one, else 503) and ``GET /metrics``; one request per connection,
bounded reads, a deadline per request.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from typing import Final

import attrs
import trio

log = logging.getLogger(__name__)

__all__ = ["Metrics", "render", "serve_metrics"]

_MAX_REQUEST: Final = 8192
_REQUEST_DEADLINE: Final = 5.0


@attrs.define
class Metrics:
    """What the link counts. ``role`` is "active", "standby" or "" (not registered)."""

    tunnel: str = ""
    role: str = ""
    reconnects: int = 0
    rtt: float | None = None
    active_streams: int = 0
    opened_streams: int = 0
    dial_failures: Counter[str] = attrs.field(factory=Counter)
    bytes_in: int = 0  # from the tunnel towards the destination
    bytes_out: int = 0  # from the destination back into the tunnel
    go_away_received: Counter[str] = attrs.field(factory=Counter)


def _line(name: str, value: float, labels: dict[str, str] | None = None) -> str:
    if labels:
        inner = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
        return f"{name}{{{inner}}} {value}"
    return f"{name} {value}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render(metrics: Metrics) -> str:
    out: list[str] = []

    def family(name: str, kind: str, help_text: str) -> None:
        out.append(f"# HELP {name} {help_text}")
        out.append(f"# TYPE {name} {kind}")

    family("devyard_connector_sessions", "gauge", "Sessions held, by role.")
    for role in ("active", "standby"):
        out.append(_line("devyard_connector_sessions", int(metrics.role == role), {"role": role}))
    family("devyard_connector_reconnects_total", "counter", "Links re-established.")
    out.append(_line("devyard_connector_reconnects_total", metrics.reconnects))
    family("devyard_connector_rtt_seconds", "gauge", "Last measured round trip to the edge.")
    out.append(_line("devyard_connector_rtt_seconds", metrics.rtt or 0.0))
    family("devyard_connector_active_streams", "gauge", "Tunnel streams open now.")
    out.append(_line("devyard_connector_active_streams", metrics.active_streams))
    family("devyard_connector_opened_streams_total", "counter", "Tunnel streams opened.")
    out.append(_line("devyard_connector_opened_streams_total", metrics.opened_streams))
    family("devyard_connector_dial_failures_total", "counter", "Refused or failed dials, by code.")
    for code, count in sorted(metrics.dial_failures.items()):
        out.append(_line("devyard_connector_dial_failures_total", count, {"code": code}))
    family("devyard_connector_bytes_total", "counter", "Bytes carried, by direction.")
    out.append(_line("devyard_connector_bytes_total", metrics.bytes_in, {"direction": "in"}))
    out.append(_line("devyard_connector_bytes_total", metrics.bytes_out, {"direction": "out"}))
    family("devyard_connector_go_away_total", "counter", "GO_AWAY received, by code.")
    for code, count in sorted(metrics.go_away_received.items()):
        out.append(_line("devyard_connector_go_away_total", count, {"code": code}))
    return "\n".join(out) + "\n"


def _response(status: str, content_type: str, body: bytes) -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


def answer(metrics: Metrics, request_line: str) -> bytes:
    """The HTTP response to one request line (``GET /path HTTP/1.1``)."""
    parts = request_line.split()
    if len(parts) < 2 or parts[0] not in ("GET", "HEAD"):
        return _response("405 Method Not Allowed", "text/plain", b"only GET\n")
    path = parts[1].partition("?")[0]
    if path == "/metrics":
        return _response("200 OK", "text/plain; version=0.0.4", render(metrics).encode())
    if path == "/ready":
        body = json.dumps({"ready": metrics.role == "active", "role": metrics.role or None})
        status = "200 OK" if metrics.role == "active" else "503 Service Unavailable"
        return _response(status, "application/json", body.encode() + b"\n")
    return _response("404 Not Found", "text/plain", b"not found\n")


async def _handle(metrics: Metrics, stream: trio.SocketStream) -> None:
    try:
        with trio.move_on_after(_REQUEST_DEADLINE):
            data = b""
            while b"\r\n" not in data and len(data) < _MAX_REQUEST:
                chunk = await stream.receive_some(_MAX_REQUEST - len(data))
                if not chunk:
                    break
                data += chunk
            line = data.partition(b"\r\n")[0].decode("latin-1")
            await stream.send_all(answer(metrics, line))
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        await trio.aclose_forcefully(stream)


async def serve_metrics(
    metrics: Metrics,
    host: str,
    port: int,
    *,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``/ready`` and ``/metrics`` on host:port; reports the bound port."""
    listeners = await trio.open_tcp_listeners(port, host=host)
    bound = listeners[0].socket.getsockname()[1]
    log.info("metrics on http://%s:%d/metrics", host, bound)
    task_status.started(bound)

    async def handler(stream: trio.SocketStream) -> None:
        await _handle(metrics, stream)

    await trio.serve_listeners(handler, listeners)
