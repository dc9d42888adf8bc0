"""`ReplicaSet`: the replicas hosts and connectors hold their second link to (issue 23, "two
links", docs/scale-out.md).

Each replica records where clients reach it directly (``[cluster] advertise_url``) in its
``cluster_replicas`` row, and rereads the live replicas that advertise one every heartbeat.
A link's ``registered`` carries the set (`message`): this replica's id and every
``{id, url}``; each link then gets ``{"type": "replicas", ...}`` whenever the set changes
(`edge.links.send_replica_updates`: one message per change, the newest only, so a slow link
never queues).
A replica without an advertised address sends nothing, and its clients hold one link.
"""

from __future__ import annotations

import logging
from typing import Any

import trio

from ..store.sql_replicas import AdvertisedReplica, SqlReplicaSet

log = logging.getLogger(__name__)

__all__ = ["ReplicaSet"]


class ReplicaSet:
    """The replica set as this replica last read it; the edge's and the hub's `replica_set`."""

    def __init__(self, store: SqlReplicaSet, replica_id: str, advertise_url: str) -> None:
        self._store = store
        self.replica_id = replica_id
        self.advertise_url = advertise_url
        self.members: tuple[AdvertisedReplica, ...] = ()
        self.version = 0
        self._changed = trio.Event()

    def __repr__(self) -> str:
        return f"ReplicaSet({self.replica_id}, {[m.replica_id for m in self.members]})"

    def message(self) -> dict[str, Any]:
        """The fields ``registered`` and ``replicas`` carry (empty: nothing to advertise)."""
        if not self.advertise_url:
            return {}
        members = self.members or (AdvertisedReplica(self.replica_id, self.advertise_url),)
        return {
            "replica": self.replica_id,
            "replicas": [{"id": m.replica_id, "url": m.url} for m in members],
        }

    async def refresh(self) -> None:
        """Advertise this replica (again: its row may have been registered anew) and reread
        the set; a change wakes every link's `serve_updates`."""
        if not self.advertise_url:
            await trio.lowlevel.checkpoint()
            return
        await self._store.advertise(self.replica_id, self.advertise_url)
        members = tuple(await self._store.advertised())
        if members != self.members:
            log.info("replica set: %s", ", ".join(m.replica_id for m in members) or "none")
            self.members = members
            self.version += 1
            self._changed.set()
            self._changed = trio.Event()

    async def wait_changed(self, seen: int) -> int:
        """Until the set is newer than version *seen*; the new version."""
        while self.version == seen:
            await self._changed.wait()
        return self.version
