"""Prometheus metrics of replica-to-replica forwarding and peer links (docs/scale-out.md,
Metrics), in the server's one `metrics.REGISTRY`.

Label values are fixed words: *kind* is what a forward opens (``instance``: a stream to a host
for an instance; ``tunnel``: a ``tunnel-dial`` to a tunnel's active connector; ``probe``: a
tunnel probe), *outcome* one of the words `Forwarder` and `ForwardServer` tell apart.

Forwarded bytes are counted by the replica that serves the forward (the holder of the host's or
connector's link), so summed over replicas each byte counts once. They are read at scrape time:
a splice registers its two running byte counts (the ones the core's splice keeps anyway) while
it runs and adds them to the finished totals when it ends, so a long stream's bytes show while
it runs and the splice itself makes no metric call per chunk (`ForwardBytes`).
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Final

from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from ..metrics import REGISTRY

__all__ = [
    "FORWARD_BYTES",
    "FORWARD_OPENS",
    "FORWARD_OPEN_SECONDS",
    "FORWARD_SERVED",
    "PEER_LINKS",
    "PEER_LINK_DIALS",
    "PEER_LINK_LOSSES",
    "ForwardBytes",
]

FORWARD_OPENS: Final = Counter(
    "devyard_forward_opens",
    "Streams this replica opened through another replica, by kind (instance, tunnel, probe) "
    "and outcome (ok, no_holder, lookup_failed, peer_unreachable, timeout, not_linked, "
    "refused, cancelled, error).",
    ["kind", "outcome"],
    registry=REGISTRY,
)
FORWARD_OPEN_SECONDS: Final = Histogram(
    "devyard_forward_open_seconds",
    "Time from a forwarded open's start (holder lookup included) to the holder's acceptance, "
    "for opens that succeeded, by kind.",
    ["kind"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0),
    registry=REGISTRY,
)
FORWARD_SERVED: Final = Counter(
    "devyard_forward_served",
    "Forwards other replicas opened here, by kind (instance, tunnel, probe, other) and outcome "
    "(ok, not_linked, refused, timeout, bad_request).",
    ["kind", "outcome"],
    registry=REGISTRY,
)
PEER_LINKS: Final = Gauge(
    "devyard_peer_links",
    "Links to other replicas up now, by side (out: dialled by this replica; in: accepted).",
    ["side"],
    registry=REGISTRY,
)
PEER_LINK_DIALS: Final = Counter(
    "devyard_peer_link_dials",
    "Dials of links to other replicas, by outcome (ok, failed, refused).",
    ["outcome"],
    registry=REGISTRY,
)
PEER_LINK_LOSSES: Final = Counter(
    "devyard_peer_link_losses",
    "Links this replica dialled to another replica that were lost (not closed by shutdown).",
    registry=REGISTRY,
)

#: The two running counts of one splice: (toward the host or connector, back from it).
Counts = tuple[list[int], list[int]]

_DIRECTIONS: Final = ("to_target", "from_target")


class ForwardBytes(Collector):
    """``devyard_forward_bytes_total{kind, direction}``: the finished splices' bytes plus the
    running splices' counts, summed at scrape time (monotonic: a splice's counts only grow, and
    move to the totals in one step when it ends)."""

    def __init__(self) -> None:
        self._done: Tally[tuple[str, str]] = Tally()
        self._running: dict[int, tuple[str, Counts]] = {}

    @contextmanager
    def counting(self, kind: str) -> Iterator[Counts]:
        """Two counts for a splice's directions, shown while the block runs and kept after."""
        counts: Counts = ([0], [0])
        key = id(counts)
        self._running[key] = (kind, counts)
        try:
            yield counts
        finally:
            del self._running[key]
            self._add(self._done, kind, counts)

    @staticmethod
    def _add(tally: Tally[tuple[str, str]], kind: str, counts: Counts) -> None:
        for direction, count in zip(_DIRECTIONS, counts, strict=True):
            tally[kind, direction] += count[0]

    def collect(self) -> Iterable[CounterMetricFamily]:
        now = Tally(self._done)
        for kind, counts in self._running.values():
            self._add(now, kind, counts)
        family = CounterMetricFamily(
            "devyard_forward_bytes",
            "Bytes spliced by this replica for forwards it serves, by kind (instance, tunnel) "
            "and direction (to_target: toward the host or connector; from_target: back).",
            labels=["kind", "direction"],
        )
        for (kind, direction), value in sorted(now.items()):
            family.add_metric([kind, direction], value)
        yield family


FORWARD_BYTES: Final = ForwardBytes()
REGISTRY.register(FORWARD_BYTES)
