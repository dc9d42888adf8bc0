"""`run_cluster`: the one call `serve.py` makes to take part in a cluster of replicas.

Without ``[cluster] enabled`` (or on SQLite) it hands back the edge and the connector hub
themselves and returns: the single-process path is unchanged. With it, it opens the cluster's
own small pool and LISTEN connection, hangs `ClusterHosts` on the edge (host leases) and the
connector hub (who holds which tunnel), and hands back `ClusterHosts` as the instances
service's `HostRegistry` and `ClusterTunnels` as the services' view of connectors.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from typing import Final

import attrs
import trio

from ..config import ServerConfig
from ..drain import CURRENT
from ..edge.connectors import ConnectorHub
from ..edge.links import Edge
from ..hosts import HostEvent, HostRegistry
from ..store import Store
from ..store.order_delivery import SqlOrderDelivery
from ..store.postgres import open_postgres_database
from ..store.sql_cluster import SqlCluster
from ..store.sql_replicas import SqlReplicaSet
from ..tunnels import TunnelConnections
from .bus import channel_name, open_bus
from .hosts import ClusterHosts
from .registry import DeferredHolders, HolderLookup, Holders
from .tunnels import ClusterTunnels

__all__ = ["Parts", "cluster_holders", "clustered", "replica_id_of", "run_cluster", "wire_service"]

_POOL: Final = 4  # reservations and lookups: their own connections
#: Lease renewals and the reaper: one connection of their own, so that a burst of creates
#: (hundreds of reservations queued on the pool) can never starve them into expiring.
_LEASE_POOL: Final = 1
#: Events published outside a transaction (orders and their answers, instance changes): their
#: own connections too, or an order's answer waits behind the burst's reservations and the
#: creator gives up on a host that did start the instance (then takes it back).
_BUS_POOL: Final = 2


@attrs.frozen
class Parts:
    """What the services use: the registry of hosts, and the view of tunnels' connectors."""

    registry: HostRegistry
    tunnels: TunnelConnections


def clustered(config: ServerConfig) -> bool:
    url = config.database_url or ""
    return config.cluster.enabled and url.startswith(("postgresql://", "postgres://"))


def cluster_holders(config: ServerConfig) -> HolderLookup | None:
    """What forwarding asks who holds a link: the cluster's registry when this server is a
    replica with peer links (``[cluster]`` and ``[peers]``), else None (no forwarding)."""
    return DeferredHolders() if clustered(config) and config.peers is not None else None


def replica_id_of(config: ServerConfig) -> str:
    """The configured ``replica_id`` (docs/operations.md), else a random one per start."""
    configured = getattr(config, "replica_id", None)  # the top-level key (issue 23, operations)
    return str(configured) if configured else f"replica-{secrets.token_hex(4)}"


async def run_cluster(  # noqa: PLR0917 - nursery.start passes arguments by position
    config: ServerConfig,
    store: Store,
    edge: Edge,
    connectors: ConnectorHub,
    events: trio.MemorySendChannel[HostEvent],
    expected: Iterable[str],
    grace: float,
    *,
    holders: HolderLookup | None = None,
    task_status: trio.TaskStatus[Parts] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Start with the `Parts` the services use; run until cancelled. A `DeferredHolders`
    given as *holders* (`cluster_holders`) is pointed at the cluster's link registry."""
    if not clustered(config) or config.database_url is None:
        task_status.started(Parts(edge, connectors))
        return
    replica_id = replica_id_of(config)
    url = config.database_url
    drain = CURRENT.get()
    async with (
        open_postgres_database(url, max_connections=_POOL) as db,
        open_postgres_database(url, max_connections=_LEASE_POOL) as lease_db,
        open_postgres_database(url, max_connections=_BUS_POOL) as bus_db,
    ):
        cluster = SqlCluster(db)
        if isinstance(holders, DeferredHolders):
            holders.target = Holders(cluster)
        channel = channel_name(await cluster.current_schema())
        publisher = SqlCluster(bus_db)
        async with open_bus(url, channel, replica_id, publisher) as bus, trio.open_nursery() as n:
            hosts = ClusterHosts(
                cluster,
                bus,
                edge,
                events,
                replica_id=replica_id,
                peer_url=config.cluster.peer_url,
                config=config.cluster,
                grace=grace,
                replica_store=SqlReplicaSet(lease_db),
                leases=SqlCluster(lease_db),
                draining=lambda: drain is not None and drain.draining,
                orders=SqlOrderDelivery(db),
            )
            edge.leases = hosts
            hosts.hub = connectors
            connectors.on_active_changed = hosts.connectors_changed
            tunnels = ClusterTunnels(connectors, hosts, bus, store.get_tunnel, url=url, db=db)
            await n.start(tunnels.run)
            await n.start(lambda task_status: hosts.run(expected=expected, task_status=task_status))
            task_status.started(Parts(hosts, tunnels))
            await trio.sleep_forever()


def wire_service(registry: HostRegistry, service: object) -> None:
    """Other replicas' instance changes go to *service* (``on_instance_changed``)."""
    if not isinstance(registry, ClusterHosts):
        return
    handler = getattr(service, "on_instance_changed", None)
    if handler is not None:
        registry.on_instance_changed = handler
