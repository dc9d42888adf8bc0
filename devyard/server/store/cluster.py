"""What the replicas of one deployment share about each other (issue 23, docs/scale-out.md):
records of the cluster tables of migration 14. `sql_cluster.SqlCluster` reads and writes
them; only the PostgreSQL backend has a cluster (SQLite is the single-process path).

- A **replica lease** (`cluster_replicas`): a server replica is alive while its row's expiry
  is in the future; it renews it by heartbeat, and any replica may delete an expired one.
- A **host lease** (`host_leases`): the replica that holds a host's link holds the lease and
  renews it while the link lives. It carries what the host's hello said (region, platforms,
  capacity) and ``used``, the capacity reserved on it (`capacity_reservations`), so any
  replica can schedule on it. An expired host lease is deleted by exactly one replica's
  conditional DELETE, and that replica alone ends the host's instances (host lost).
- **Link holders** (`link_holders`): which replica holds each host and connector link now.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

import attrs

__all__ = ["HOLD_PREFIX", "HostLease", "LinkKind", "ReplicaRow"]

#: The key a create holds its slot under (`capacity_reservations`) until its instance is
#: written, when the slot moves to the instance id: this prefix and random hex. A hold older
#: than `cluster.hosts.HOLD_S` is a dead replica's and is freed.
HOLD_PREFIX: Final = "hold-"

#: the kinds of link the registry records
LinkKind = str  # "host" | "connector"


@attrs.frozen
class ReplicaRow:
    replica_id: str
    peer_url: str
    expires_at: datetime


@attrs.frozen
class HostLease:
    """A linked host as every replica sees it."""

    host_id: str
    holder: str | None  # the replica holding its link; None between links
    name: str
    region: str
    platforms: frozenset[str]
    drivers: frozenset[str]
    version: str
    capacity: int
    used: int  # capacity reserved on it (instances placed there and not ended)
    linked_at: datetime
    expires_at: datetime
