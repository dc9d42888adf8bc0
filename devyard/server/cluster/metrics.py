"""The cluster's Prometheus metrics, in the server's one `metrics.REGISTRY`."""

from __future__ import annotations

from typing import Final

from prometheus_client import Counter, Histogram

from ..metrics import REGISTRY

__all__ = [
    "LEASE_EXPIRIES",
    "LEASE_RENEWALS",
    "LEASE_TAKEOVERS",
    "NOTIFY_DROPPED",
    "NOTIFY_LAG",
    "NOTIFY_RECONNECTS",
    "ORDERS",
    "ORDER_SECONDS",
    "RESERVATIONS",
]

LEASE_RENEWALS: Final = Counter(
    "devyard_cluster_lease_renewals_total",
    "Lease renewals by this replica, by lease kind (replica, host).",
    ["kind"],
    registry=REGISTRY,
)
LEASE_EXPIRIES: Final = Counter(
    "devyard_cluster_lease_expiries_total",
    "Expired leases this replica's reaper won, by lease kind (replica, host).",
    ["kind"],
    registry=REGISTRY,
)
LEASE_TAKEOVERS: Final = Counter(
    "devyard_cluster_host_lease_takeovers_total",
    "Host leases this replica took over from another replica (the host re-linked here).",
    registry=REGISTRY,
)
RESERVATIONS: Final = Counter(
    "devyard_cluster_reservations_total",
    "Capacity reservations, by outcome (reserved, full, released).",
    ["outcome"],
    registry=REGISTRY,
)
NOTIFY_LAG: Final = Histogram(
    "devyard_cluster_notify_lag_seconds",
    "Time from a NOTIFY's send (sender's clock) to its dispatch on this replica.",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
    registry=REGISTRY,
)
NOTIFY_DROPPED: Final = Counter(
    "devyard_cluster_notify_dropped_total",
    "Events a full subscriber buffer dropped (the subscriber then resynchronizes).",
    registry=REGISTRY,
)
NOTIFY_RECONNECTS: Final = Counter(
    "devyard_cluster_notify_reconnects_total",
    "Times the LISTEN connection was re-established.",
    registry=REGISTRY,
)
ORDERS: Final = Counter(
    "devyard_cluster_orders_total",
    "Start orders this replica handed to another through their row, by outcome (sent, failed,"
    " withdrawn, unsettled), and stops (stop).",
    ["outcome"],
    registry=REGISTRY,
)
ORDER_SECONDS: Final = Histogram(
    "devyard_cluster_order_seconds",
    "Time from addressing a start order's row to its holder's answer (sent or failed).",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
    registry=REGISTRY,
)
