"""Who holds what: which replica holds each host link and each connector link.

Rows of ``link_holders`` (kind, key, replica): claimed when a link registers on a replica,
released when it ends there, cleared with the holder's replica lease. Keys: a host's id for
``host``; a tunnel's id for ``connector`` (the replica where the tunnel has its active
connector). `HolderLookup` is the structural protocol the forwarding code asks; `Holders`
answers it from the tables, joined with the live replica leases, so a holder whose replica
lease ran out is never returned.
"""

from __future__ import annotations

import trio

from ..edge.forward import Holder, HolderLookup
from ..store.sql_cluster import SqlCluster

__all__ = ["DeferredHolders", "Holder", "HolderLookup", "Holders"]


class Holders:
    """`HolderLookup` over the cluster tables."""

    def __init__(self, cluster: SqlCluster) -> None:
        self._cluster = cluster

    async def holder(self, kind: str, key: str) -> Holder | None:
        row = await self._cluster.holder(kind, key)
        return None if row is None else Holder(row.replica_id, row.peer_url)


class DeferredHolders:
    """A `HolderLookup` for the forwarding that serve.py opens before the cluster runs: it
    knows no holder (forwarding answers "not connected") until `run_cluster` sets *target*."""

    def __init__(self) -> None:
        self.target: HolderLookup | None = None

    async def holder(self, kind: str, key: str) -> Holder | None:
        if self.target is None:
            await trio.lowlevel.checkpoint()
            return None
        return await self.target.holder(kind, key)
