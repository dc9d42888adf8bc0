"""The connector's numbers and its operator endpoint: ``/ready`` and ``/metrics``.

`Metrics` is plain counters the link updates (cheap: no locks, no label lookups on the data
path); `render` exposes them with the official ``prometheus-client`` (a collector that reads
`Metrics` at scrape time, written by the library's text exposition). `serve_metrics` answers
``GET /ready`` (200 with the role while this connector is the tunnel's active one, else 503)
and ``GET /metrics`` on the operator port (`devyard.core.opsport`).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING

import attrs
import trio

from .. import __version__
from ..core.opsport import PROMETHEUS_TEXT, OpsAnswer, serve_ops_port

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

__all__ = ["Metrics", "render", "serve_metrics"]


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


class _Collector:
    """A prometheus-client collector over one `Metrics` value."""

    def __init__(self, metrics: Metrics) -> None:
        self._m = metrics

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import (  # noqa: PLC0415 - only when scraped
            CounterMetricFamily,
            GaugeMetricFamily,
            InfoMetricFamily,
        )

        m = self._m
        yield InfoMetricFamily(
            "devyard_connector_build", "This connector.", {"version": __version__}
        )
        sessions = GaugeMetricFamily(
            "devyard_connector_sessions", "Sessions held, by role.", labels=["role"]
        )
        for role in ("active", "standby"):
            sessions.add_metric([role], int(m.role == role))
        yield sessions
        yield CounterMetricFamily(
            "devyard_connector_reconnects", "Links re-established.", value=m.reconnects
        )
        yield GaugeMetricFamily(
            "devyard_connector_rtt_seconds", "Last measured round trip to the edge.", m.rtt or 0.0
        )
        yield GaugeMetricFamily(
            "devyard_connector_active_streams", "Tunnel streams open now.", m.active_streams
        )
        yield CounterMetricFamily(
            "devyard_connector_opened_streams", "Tunnel streams opened.", value=m.opened_streams
        )
        dials = CounterMetricFamily(
            "devyard_connector_dial_failures", "Refused or failed dials, by code.", labels=["code"]
        )
        for code, count in sorted(m.dial_failures.items()):
            dials.add_metric([code], count)
        yield dials
        carried = CounterMetricFamily(
            "devyard_connector_bytes", "Bytes carried, by direction.", labels=["direction"]
        )
        carried.add_metric(["in"], m.bytes_in)
        carried.add_metric(["out"], m.bytes_out)
        yield carried
        go_away = CounterMetricFamily(
            "devyard_connector_go_away", "GO_AWAY received, by code.", labels=["code"]
        )
        for code, count in sorted(m.go_away_received.items()):
            go_away.add_metric([code], count)
        yield go_away


def render(metrics: Metrics) -> str:
    """*metrics* in the Prometheus text exposition format."""
    from prometheus_client import CollectorRegistry, generate_latest  # noqa: PLC0415

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(metrics))
    return generate_latest(registry).decode()


async def serve_metrics(
    metrics: Metrics,
    host: str,
    port: int,
    *,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``/ready`` and ``/metrics`` on host:port; reports the bound port."""

    async def handler(path: str) -> OpsAnswer | None:
        await trio.lowlevel.checkpoint()
        if path == "/metrics":
            return OpsAnswer(200, PROMETHEUS_TEXT, render(metrics).encode())
        if path == "/ready":
            active = metrics.role == "active"
            body = json.dumps(
                {"ready": active, "role": metrics.role or None, "version": __version__}
            )
            return OpsAnswer(200 if active else 503, "application/json", body.encode() + b"\n")
        return None

    await serve_ops_port(handler, host, port, task_status=task_status)
