"""Who holds what: which replica holds each host link and each connector link.

Rows of ``link_holders`` (kind, key, replica): claimed when a link registers on a replica,
released when it ends there, cleared with the holder's replica lease. Keys: a host's id for
``host``; a tunnel's id for ``connector`` (the replica where the tunnel has its active
connector). `HolderLookup` is the structural protocol the forwarding code asks; `Holders`
answers it from the tables, joined with the live replica leases, so a holder whose replica
lease ran out is never returned.
"""

from __future__ import annotations

from typing import Protocol

import attrs

from ..store.sql_cluster import SqlCluster

__all__ = ["Holder", "HolderLookup", "Holders"]


@attrs.frozen
class Holder:
    replica_id: str
    peer_url: str  # the holder replica's peer URL


class HolderLookup(Protocol):
    async def holder(self, kind: str, key: str) -> Holder | None: ...  # kind "host" or "connector"


class Holders:
    """`HolderLookup` over the cluster tables."""

    def __init__(self, cluster: SqlCluster) -> None:
        self._cluster = cluster

    async def holder(self, kind: str, key: str) -> Holder | None:
        row = await self._cluster.holder(kind, key)
        return None if row is None else Holder(row.replica_id, row.peer_url)
