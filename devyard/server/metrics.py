"""The server's Prometheus metrics, with the official ``prometheus-client``.

Two kinds. Counters and histograms that call sites bump as things happen (requests, store
transactions, tunnel streams and bytes, open instance streams, link counts, rate-limit
refusals) live in one process-wide `REGISTRY`: a call site is one line (``metrics.X.inc()``).
Gauges of what *is* (instances by state and platform, linked hosts and their capacity) are read
at scrape time from the live objects (`render`), so they can never drift from the truth.

Label values are bounded: routes are the OpenAPI templates (never a raw path), link kinds and
directions are fixed words. ``/metrics`` is served on the operator port (``metrics_listen``,
docs/operations.md), never on the public API port.
"""

from __future__ import annotations

import time
from collections import Counter as Tally
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Final, Protocol, TypeVar

import trio
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily

from .. import __version__
from ..core.opsport import PROMETHEUS_TEXT, OpsAnswer, serve_ops_port

if TYPE_CHECKING:
    from ..core.splice import SpliceResult
    from .hosts import HostRegistry
    from .store.base import Store

__all__ = [
    "DRAINING",
    "HTTP_DURATION",
    "HTTP_REQUESTS",
    "INSTANCE_STREAMS",
    "LINKS",
    "RATE_LIMITED",
    "REGISTRY",
    "REPLICA_INFO",
    "STORE_DURATION",
    "TUNNEL_BYTES",
    "TUNNEL_STREAMS",
    "count_tunnel_splice",
    "link_open",
    "render",
    "serve_metrics",
    "timed_store",
]

T = TypeVar("T")

REGISTRY: Final = CollectorRegistry()
ProcessCollector(registry=REGISTRY)

_LATENCY_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

HTTP_REQUESTS: Final = Counter(
    "devyard_http_requests",
    "HTTP requests answered, by route template, method and status.",
    ["route", "method", "status"],
    registry=REGISTRY,
)
HTTP_DURATION: Final = Histogram(
    "devyard_http_request_duration_seconds",
    "Time to answer an HTTP request (to the end of the response), by route template.",
    ["route", "method"],
    buckets=_LATENCY_BUCKETS,
    registry=REGISTRY,
)
STORE_DURATION: Final = Histogram(
    "devyard_store_transaction_duration_seconds",
    "Time of one store transaction (waiting for a connection included), by backend.",
    ["backend"],
    buckets=_LATENCY_BUCKETS,
    registry=REGISTRY,
)
TUNNEL_STREAMS: Final = Counter(
    "devyard_tunnel_streams",
    "Streams from instances carried through tunnels (ended).",
    registry=REGISTRY,
)
TUNNEL_BYTES: Final = Counter(
    "devyard_tunnel_bytes",
    "Bytes carried through tunnels: out = from the instance, in = back to it.",
    ["direction"],
    registry=REGISTRY,
)
INSTANCE_STREAMS: Final = Gauge(
    "devyard_instance_streams",
    "Open WebSocket streams to instances (stream viewers and adb).",
    registry=REGISTRY,
)
LINKS: Final = Gauge(
    "devyard_links",
    "Registered links at the edge, by kind (host, connector).",
    ["kind"],
    registry=REGISTRY,
)
DRAINING: Final = Gauge(
    "devyard_server_draining",
    "1 while this replica drains (refuses new links and requests), else 0 (server/drain.py).",
    registry=REGISTRY,
)
REPLICA_INFO: Final = Gauge(
    "devyard_server_replica_info",
    "This replica's id (docs/operations.md, Several replicas).",
    ["replica"],
    registry=REGISTRY,
)
RATE_LIMITED: Final = Counter(
    "devyard_rate_limit_refusals",
    "Requests refused by the rate limit (429), by limiter (key, client).",
    ["limiter"],
    registry=REGISTRY,
)


def _link_kind(path: str) -> str:
    return "host" if "host" in path else "connector" if "connector" in path else "other"


@contextmanager
def link_open(path: str) -> Iterator[None]:
    """Count a link (by its route's path) while the block runs."""
    with LINKS.labels(_link_kind(path)).track_inprogress():
        yield


async def timed_store(backend: str, work: Awaitable[T]) -> T:
    """Await one store transaction and observe its time."""
    start = time.perf_counter()
    try:
        return await work
    finally:
        STORE_DURATION.labels(backend).observe(time.perf_counter() - start)


def count_tunnel_splice(result: SpliceResult) -> None:
    """One tunnel stream ended (instance is side a, the tunnel side b)."""
    TUNNEL_STREAMS.inc()
    TUNNEL_BYTES.labels("out").inc(result.a_to_b)
    TUNNEL_BYTES.labels("in").inc(result.b_to_a)


class _Live(Protocol):
    @property
    def store(self) -> Store: ...

    @property
    def hosts(self) -> HostRegistry | None: ...


def _families(live_instances: Tally[tuple[str, str]], hosts: HostRegistry | None) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    instances = GaugeMetricFamily(
        "devyard_instances",
        "Live instances, by platform and state.",
        labels=["platform", "state"],
    )
    for (platform, state), count in sorted(live_instances.items()):
        instances.add_metric([platform, state], count)
    host_links = GaugeMetricFamily(
        "devyard_hosts", "Linked host daemons, by region.", labels=["region"]
    )
    capacity = GaugeMetricFamily(
        "devyard_host_capacity", "Instance slots of linked hosts, by region.", labels=["region"]
    )
    by_region: Tally[str] = Tally()
    slots: Tally[str] = Tally()
    for host in hosts.hosts() if hosts is not None else []:
        by_region[host.region] += 1
        slots[host.region] += host.capacity
    for region in sorted(by_region):
        host_links.add_metric([region], by_region[region])
        capacity.add_metric([region], slots[region])
    build = GaugeMetricFamily("devyard_server_build_info", "This server.", labels=["version"])
    build.add_metric([__version__], 1)
    fixed = [instances, host_links, capacity, build]

    class _Now:
        def collect(self) -> list[GaugeMetricFamily]:
            return fixed

    registry.register(_Now())
    return generate_latest(registry)


async def render(live: _Live) -> bytes:
    """The text exposition: the process-wide counters plus what is live now."""
    tally: Tally[tuple[str, str]] = Tally(
        (str(i.platform), str(i.state)) for i in await live.store.list_live_instances()
    )
    return generate_latest(REGISTRY) + _families(tally, live.hosts)


async def serve_metrics(
    live: _Live,
    host: str,
    port: int,
    *,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """``GET /metrics`` on the operator port host:port until cancelled; reports the port."""

    async def handler(path: str) -> OpsAnswer | None:
        if path != "/metrics":
            await trio.lowlevel.checkpoint()
            return None
        return OpsAnswer(200, PROMETHEUS_TEXT, await render(live))

    await serve_ops_port(handler, host, port, what="server metrics", task_status=task_status)
