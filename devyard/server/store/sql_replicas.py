"""`SqlReplicaSet`: the replica set hosts and connectors hold their two links to (migration 17,
``cluster_replicas.advertise_url``), and the leases of hosts linked to several replicas, in
SQL, on PostgreSQL only (docs/scale-out.md, "Two links").
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from .database import Database

__all__ = ["AdvertisedReplica", "SqlReplicaSet"]


@attrs.frozen
class AdvertisedReplica:
    replica_id: str
    url: str  # where hosts and connectors dial this replica directly


class SqlReplicaSet:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def advertise(self, replica_id: str, url: str) -> None:
        """Record where clients reach *replica_id* (its row must exist: registered)."""
        await self._db.write(
            lambda tx: tx.execute(
                "UPDATE cluster_replicas SET advertise_url = :url"
                " WHERE replica_id = :id AND advertise_url <> :url",
                {"id": replica_id, "url": url},
            )
        )

    async def advertised(self) -> list[AdvertisedReplica]:
        """The live replicas that advertise a link address, by id."""
        rows = await self._db.read(
            lambda tx: tx.fetchall(
                "SELECT replica_id, advertise_url FROM cluster_replicas"
                " WHERE expires_at > now() AND advertise_url <> '' ORDER BY replica_id"
            )
        )
        return [AdvertisedReplica(str(r["replica_id"]), str(r["advertise_url"])) for r in rows]

    async def co_renew_hosts(
        self, replica_id: str, host_ids: Sequence[str], ttl: float
    ) -> list[str]:
        """Hosts linked here whose lease another live replica holds (the host holds a link
        there too): extend the lease without taking it. The ids renewed; the others (no
        holder, or a holder whose replica lease ran out) are for this replica to claim."""
        if not host_ids:
            return []
        rows = await self._db.write(
            lambda tx: tx.fetchall(
                "UPDATE host_leases SET expires_at = GREATEST(expires_at,"
                " now() + make_interval(secs => :ttl))"
                " WHERE host_id = ANY(:ids) AND holder IS NOT NULL AND holder <> :me"
                " AND holder IN (SELECT replica_id FROM cluster_replicas"
                " WHERE expires_at > now()) RETURNING host_id",
                {"me": replica_id, "ids": list(host_ids), "ttl": ttl},
            )
        )
        return [str(r["host_id"]) for r in rows]
