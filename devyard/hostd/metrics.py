"""The host daemon's Prometheus metrics, with the official ``prometheus-client``.

Counters call sites bump (driver errors, egress streams and bytes) live in the process-wide
`REGISTRY`; the instances running here and the capacity are read from the supervisor at
scrape time. ``/metrics`` is served on the host's operator port (``devyard hostd
--metrics-listen``), never on a port devices can reach.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, Protocol

import trio
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily

from .. import __version__
from ..core.opsport import PROMETHEUS_TEXT, OpsAnswer, serve_ops_port

if TYPE_CHECKING:
    from ..core.splice import SpliceResult


class Supervisor(Protocol):
    """What a scrape reads of the supervisor (a protocol: the egress proxy imports this
    module, and the drivers sit below the supervisor)."""

    def running(self) -> list[str]: ...


__all__ = [
    "DRIVER_ERRORS",
    "EGRESS_BYTES",
    "EGRESS_STREAMS",
    "REGISTRY",
    "STREAM_BYTES",
    "STREAM_ENCODE_SECONDS",
    "STREAM_FRAMES",
    "count_egress_splice",
    "render",
    "serve_metrics",
]

REGISTRY: Final = CollectorRegistry()
ProcessCollector(registry=REGISTRY)

DRIVER_ERRORS: Final = Counter(
    "devyard_host_driver_errors",
    "Instances that ended with an error, by kind (device: the driver said why; crash: a bug).",
    ["kind"],
    registry=REGISTRY,
)
EGRESS_STREAMS: Final = Counter(
    "devyard_host_egress_streams",
    "Device connections carried by the egress proxies (ended).",
    registry=REGISTRY,
)
STREAM_FRAMES: Final = Counter(
    "devyard_host_stream_frames",
    "Frames sent to live viewers, by codec (its rate is the frames per second viewers get).",
    ["codec"],
    registry=REGISTRY,
)
STREAM_BYTES: Final = Counter(
    "devyard_host_stream_bytes",
    "Bytes of frames sent to live viewers, by codec.",
    ["codec"],
    registry=REGISTRY,
)
STREAM_ENCODE_SECONDS: Final = Histogram(
    "devyard_host_stream_encode_seconds",
    "Time to draw, scale and encode one H.264 frame of a shared encoder (one per tier).",
    buckets=(0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0),
    registry=REGISTRY,
)
EGRESS_BYTES: Final = Counter(
    "devyard_host_egress_bytes",
    "Bytes the egress proxies carried: out = from devices, in = back to them.",
    ["direction"],
    registry=REGISTRY,
)


def count_egress_splice(result: SpliceResult) -> None:
    """One device connection ended (the device is side a)."""
    EGRESS_STREAMS.inc()
    EGRESS_BYTES.labels("out").inc(result.a_to_b)
    EGRESS_BYTES.labels("in").inc(result.b_to_a)


def render(supervisor: Supervisor, capacity: int) -> bytes:
    """The text exposition: the counters plus what runs here now."""
    now = CollectorRegistry(auto_describe=False)
    instances = GaugeMetricFamily("devyard_host_instances", "Instances running on this host.")
    instances.add_metric([], len(supervisor.running()))
    slots = GaugeMetricFamily("devyard_host_capacity", "Instances this host runs at once.")
    slots.add_metric([], capacity)
    build = GaugeMetricFamily("devyard_host_build_info", "This host daemon.", labels=["version"])
    build.add_metric([__version__], 1)
    fixed = [instances, slots, build]

    class _Now:
        def collect(self) -> list[GaugeMetricFamily]:
            return fixed

    now.register(_Now())
    return generate_latest(REGISTRY) + generate_latest(now)


async def serve_metrics(
    supervisor: Supervisor,
    capacity: int,
    host: str,
    port: int,
    *,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """``GET /metrics`` on the operator port host:port until cancelled; reports the port."""

    async def handler(path: str) -> OpsAnswer | None:
        await trio.lowlevel.checkpoint()
        if path != "/metrics":
            return None
        return OpsAnswer(200, PROMETHEUS_TEXT, render(supervisor, capacity))

    await serve_ops_port(handler, host, port, what="host metrics", task_status=task_status)
