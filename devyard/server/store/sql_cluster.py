"""`SqlCluster`: the cluster tables (migration 14) in SQL, on PostgreSQL only.

Every decision two replicas could race on is one conditional statement, so PostgreSQL's row
locks pick the winner: an expired lease is taken by ``DELETE ... WHERE expires_at < now()
RETURNING`` (a second reaper blocks on the row, re-checks the condition after the first
commits, and finds nothing), and a slot by ``UPDATE ... SET used = used + 1 WHERE used <
capacity RETURNING``. Times are the database's clock (``now()``), never a replica's, so
replicas with skewed clocks agree on what has expired.

Events a change implies go out with ``pg_notify`` in the same transaction, so PostgreSQL
delivers them at commit and never for a change that rolled back.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any, Final

from .cluster import HOLD_PREFIX, HostLease, ReplicaRow
from .database import Database, Row, Tx, as_datetime

__all__ = ["Notice", "SqlCluster"]

_LEASE: Final = (
    "SELECT host_id, holder, name, region, platforms, drivers, version, capacity, used,"
    " linked_at, expires_at FROM host_leases"
)

#: an event to publish with a change: (channel, JSON payload)
Notice = tuple[str, str]


def _lease(row: Row) -> HostLease:
    return HostLease(
        host_id=row["host_id"],
        holder=row["holder"],
        name=row["name"],
        region=row["region"],
        platforms=frozenset(json.loads(row["platforms"])),
        drivers=frozenset(json.loads(row["drivers"])),
        version=row["version"],
        capacity=int(row["capacity"]),
        used=int(row["used"]),
        linked_at=as_datetime(row["linked_at"]),
        expires_at=as_datetime(row["expires_at"]),
    )


def _notify(tx: Tx, notices: Iterable[Notice]) -> None:
    for channel, payload in notices:
        tx.fetchone(
            "SELECT pg_notify(:channel, :payload) AS sent", {"channel": channel, "payload": payload}
        )


def _release_reservation(tx: Tx, key: str) -> str | None:
    # Locks in the reaper's order (`expire_hosts`): the host's lease row, then its
    # reservations; the other order deadlocked with it under a burst of creates.
    found = tx.fetchone(
        "SELECT host_id FROM capacity_reservations WHERE holder_key = :key", {"key": key}
    )
    if found is None:
        return None
    tx.fetchone(
        "SELECT host_id FROM host_leases WHERE host_id = :host FOR UPDATE",
        {"host": found["host_id"]},
    )
    row = tx.fetchone(
        "DELETE FROM capacity_reservations WHERE holder_key = :key AND host_id = :host"
        " RETURNING host_id",
        {"key": key, "host": found["host_id"]},
    )
    if row is None:  # reaped or moved meanwhile
        return None
    host_id: str = row["host_id"]
    tx.execute(
        "UPDATE host_leases SET used = used - 1 WHERE host_id = :host AND used > 0",
        {"host": host_id},
    )
    return host_id


class SqlCluster:
    """The cluster's shared state over a PostgreSQL `Database` (its own small pool: lease
    renewals must not wait behind API traffic)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    # ---- replicas --------------------------------------------------------------------------

    async def register_replica(self, replica_id: str, peer_url: str, ttl: float) -> None:
        await self._db.write(
            lambda tx: tx.execute(
                "INSERT INTO cluster_replicas (replica_id, peer_url, started_at, expires_at)"
                " VALUES (:id, :peer, now(), now() + make_interval(secs => :ttl))"
                " ON CONFLICT (replica_id) DO UPDATE SET peer_url = EXCLUDED.peer_url,"
                " expires_at = EXCLUDED.expires_at",
                {"id": replica_id, "peer": peer_url, "ttl": ttl},
            )
        )

    async def renew_replica(self, replica_id: str, ttl: float) -> bool:
        """False: the row is gone (another replica expired it); register again."""
        changed = await self._db.write(
            lambda tx: tx.execute(
                "UPDATE cluster_replicas SET expires_at = now() + make_interval(secs => :ttl)"
                " WHERE replica_id = :id",
                {"id": replica_id, "ttl": ttl},
            )
        )
        return changed == 1

    async def leave(self, replica_id: str, notices: Sequence[Notice] = ()) -> None:
        """A clean stop: the replica's row and what it holds go now; its host leases keep
        their expiry, so each host has the rest of its grace to link to another replica."""

        def leave(tx: Tx) -> None:
            tx.execute("DELETE FROM cluster_replicas WHERE replica_id = :id", {"id": replica_id})
            tx.execute("DELETE FROM link_holders WHERE replica_id = :id", {"id": replica_id})
            tx.execute(
                "UPDATE host_leases SET holder = NULL WHERE holder = :id", {"id": replica_id}
            )
            _notify(tx, notices)

        await self._db.write(leave)

    async def expire_replicas(self) -> list[str]:
        """Delete the replicas whose lease expired, with what they held; their ids (each
        expired replica is returned to exactly one caller). Their host leases lose their
        holder and keep their expiry: they run out unless a host links elsewhere first."""

        def expire(tx: Tx) -> list[str]:
            rows = tx.fetchall(
                "DELETE FROM cluster_replicas WHERE expires_at < now() RETURNING replica_id"
            )
            dead = [str(r["replica_id"]) for r in rows]
            if dead:
                tx.execute("DELETE FROM link_holders WHERE replica_id = ANY(:dead)", {"dead": dead})
                tx.execute(
                    "UPDATE host_leases SET holder = NULL WHERE holder = ANY(:dead)", {"dead": dead}
                )
            return dead

        return await self._db.write(expire)

    async def replicas(self) -> list[ReplicaRow]:
        rows = await self._db.read(
            lambda tx: tx.fetchall(
                "SELECT replica_id, peer_url, expires_at FROM cluster_replicas"
                " WHERE expires_at > now() ORDER BY replica_id"
            )
        )
        return [
            ReplicaRow(r["replica_id"], r["peer_url"], as_datetime(r["expires_at"])) for r in rows
        ]

    # ---- host leases -----------------------------------------------------------------------

    async def claim_host(
        self, replica_id: str, lease: HostLease, ttl: float, notices: Sequence[Notice] = ()
    ) -> str | None:
        """This replica holds the host's link now: take (or take over) its lease and its
        registry row. ``used`` is recounted from the reservations. Returns the previous
        holder (None: none, or this replica)."""

        def claim(tx: Tx) -> str | None:
            before = tx.fetchone(
                "SELECT holder FROM host_leases WHERE host_id = :host FOR UPDATE",
                {"host": lease.host_id},
            )
            tx.execute(
                "INSERT INTO host_leases (host_id, holder, name, region, platforms, drivers,"
                " version, capacity, used, linked_at, expires_at)"
                " VALUES (:host, :holder, :name, :region, :platforms, :drivers, :version,"
                " :capacity, (SELECT count(*) FROM capacity_reservations WHERE host_id = :host),"
                " now(), now() + make_interval(secs => :ttl))"
                " ON CONFLICT (host_id) DO UPDATE SET holder = EXCLUDED.holder,"
                " name = EXCLUDED.name, region = EXCLUDED.region,"
                " platforms = EXCLUDED.platforms, drivers = EXCLUDED.drivers,"
                " version = EXCLUDED.version, capacity = EXCLUDED.capacity,"
                " used = EXCLUDED.used, linked_at = EXCLUDED.linked_at,"
                " expires_at = EXCLUDED.expires_at",
                {
                    "host": lease.host_id,
                    "holder": replica_id,
                    "name": lease.name,
                    "region": lease.region,
                    "platforms": json.dumps(sorted(lease.platforms)),
                    "drivers": json.dumps(sorted(lease.drivers)),
                    "version": lease.version,
                    "capacity": lease.capacity,
                    "ttl": ttl,
                },
            )
            _claim_link(tx, "host", lease.host_id, replica_id)
            _notify(tx, notices)
            previous = None if before is None else before["holder"]
            return None if previous in (None, replica_id) else str(previous)

        return await self._db.write(claim)

    async def expect_hosts(self, host_ids: Iterable[str], ttl: float) -> None:
        """Hosts that should link (the store has live instances on them): each without a
        lease gets one that nobody holds, so it runs out after *ttl* unless the host links."""
        ids = sorted(set(host_ids))
        if not ids:
            return
        await self._db.write(
            lambda tx: tx.execute(
                "INSERT INTO host_leases (host_id, holder, name, region, platforms, drivers,"
                " version, capacity, used, linked_at, expires_at)"
                " SELECT h, NULL, '', '', '[]', '[]', '', 0, 0, now(),"
                " now() + make_interval(secs => :ttl)"
                " FROM unnest(CAST(:ids AS TEXT[])) AS h ON CONFLICT (host_id) DO NOTHING",
                {"ids": ids, "ttl": ttl},
            )
        )

    async def renew_hosts(self, replica_id: str, host_ids: Sequence[str], ttl: float) -> list[str]:
        """Renew the leases of the hosts this replica links; the ids it still holds."""
        if not host_ids:
            return []
        rows = await self._db.write(
            lambda tx: tx.fetchall(
                "UPDATE host_leases SET expires_at = now() + make_interval(secs => :ttl)"
                " WHERE holder = :me AND host_id = ANY(:ids) RETURNING host_id",
                {"me": replica_id, "ids": list(host_ids), "ttl": ttl},
            )
        )
        return [str(r["host_id"]) for r in rows]

    async def expire_hosts(self, notices: Sequence[Notice] = ()) -> list[str]:
        """Delete the host leases that ran out, with their reservations and registry rows;
        the host ids, each returned to exactly one caller (who ends its instances).
        *notices* go out only when something expired."""

        def expire(tx: Tx) -> list[str]:
            rows = tx.fetchall("DELETE FROM host_leases WHERE expires_at < now() RETURNING host_id")
            lost = [str(r["host_id"]) for r in rows]
            if lost:
                tx.execute(
                    "DELETE FROM capacity_reservations WHERE host_id = ANY(:lost)", {"lost": lost}
                )
                tx.execute(
                    "DELETE FROM link_holders WHERE kind = 'host' AND key = ANY(:lost)",
                    {"lost": lost},
                )
                _notify(tx, notices)
            return lost

        return await self._db.write(expire)

    async def host_leases(self) -> list[HostLease]:
        """The hosts linked to some replica now (held and not expired)."""
        rows = await self._db.read(
            lambda tx: tx.fetchall(
                _LEASE + " WHERE holder IS NOT NULL AND expires_at > now() ORDER BY host_id"
            )
        )
        return [_lease(r) for r in rows]

    # ---- the registry of who holds what ------------------------------------------------------

    async def claim_link(
        self,
        kind: str,
        key: str,
        replica_id: str,
        notices: Sequence[Notice] = (),
        *,
        info: str = "{}",
    ) -> None:
        """*info*: what other replicas may show of the link (JSON; a connector's tunnel and
        identity)."""

        def claim(tx: Tx) -> None:
            _claim_link(tx, kind, key, replica_id, info)
            _notify(tx, notices)

        await self._db.write(claim)

    async def links(self, kind: str) -> list[tuple[str, str, dict[str, Any]]]:
        """(key, replica, info) of every link of *kind* held by a live replica."""
        rows = await self._db.read(
            lambda tx: tx.fetchall(
                "SELECT h.key, h.replica_id, h.info FROM link_holders h"
                " JOIN cluster_replicas r ON r.replica_id = h.replica_id"
                " WHERE h.kind = :kind AND r.expires_at > now() ORDER BY h.key",
                {"kind": kind},
            )
        )
        return [(str(r["key"]), str(r["replica_id"]), json.loads(r["info"])) for r in rows]

    async def release_link(
        self, kind: str, key: str, replica_id: str, notices: Sequence[Notice] = ()
    ) -> bool:
        """The link ended here: forget it if this replica still holds it (a newer link on
        another replica may have taken it over). A host's lease stays, unrenewed."""

        def release(tx: Tx) -> bool:
            gone = tx.execute(
                "DELETE FROM link_holders WHERE kind = :kind AND key = :key AND replica_id = :me",
                {"kind": kind, "key": key, "me": replica_id},
            )
            if kind == "host":
                tx.execute(
                    "UPDATE host_leases SET holder = NULL WHERE host_id = :key AND holder = :me",
                    {"key": key, "me": replica_id},
                )
            if gone:
                _notify(tx, notices)
            return gone == 1

        return await self._db.write(release)

    async def holder(self, kind: str, key: str) -> ReplicaRow | None:
        """The live replica holding the link, or None."""
        row = await self._db.read(
            lambda tx: tx.fetchone(
                "SELECT r.replica_id, r.peer_url, r.expires_at FROM link_holders h"
                " JOIN cluster_replicas r ON r.replica_id = h.replica_id"
                " WHERE h.kind = :kind AND h.key = :key AND r.expires_at > now()",
                {"kind": kind, "key": key},
            )
        )
        if row is None:
            return None
        return ReplicaRow(row["replica_id"], row["peer_url"], as_datetime(row["expires_at"]))

    # ---- capacity ----------------------------------------------------------------------------

    async def reserve(
        self, key: str, host_ids: Sequence[str], notices: Sequence[Notice] = ()
    ) -> str | None:
        """Reserve one slot for *key* on the first of *host_ids* with room (a reservation
        *key* already held elsewhere moves); the host, or None when none has room."""

        def reserve(tx: Tx) -> str | None:
            held = tx.fetchone(
                "SELECT host_id FROM capacity_reservations WHERE holder_key = :key", {"key": key}
            )
            if held is not None:  # a move holds two leases: lock them in one order (host id),
                tx.fetchall(  # or two moves in opposite directions deadlock
                    "SELECT host_id FROM host_leases WHERE host_id = ANY(:ids)"
                    " ORDER BY host_id FOR UPDATE",
                    {"ids": sorted({held["host_id"], *host_ids})},
                )
            _release_reservation(tx, key)
            for host_id in host_ids:
                row = tx.fetchone(
                    "UPDATE host_leases SET used = used + 1 WHERE host_id = :host"
                    " AND used < capacity AND holder IS NOT NULL AND expires_at > now()"
                    " RETURNING host_id",
                    {"host": host_id},
                )
                if row is not None:
                    tx.execute(
                        "INSERT INTO capacity_reservations (holder_key, host_id, created_at)"
                        " VALUES (:key, :host, now())",
                        {"key": key, "host": host_id},
                    )
                    _notify(tx, notices)
                    return host_id
            return None

        return await self._db.write(reserve)

    async def expire_holds(self, older_than_s: float, notices: Sequence[Notice] = ()) -> int:
        """Free the create holds (keys starting with `HOLD_PREFIX`) older than *older_than_s*:
        a create holds its slot under such a key only until its instance is written, so an
        old one is the hold of a replica that died in between. How many went (each in its own
        transaction, which locks one host lease: the order `reserve` keeps)."""
        rows = await self._db.read(
            lambda tx: tx.fetchall(
                "SELECT holder_key FROM capacity_reservations WHERE holder_key LIKE :prefix"
                " AND created_at < now() - make_interval(secs => :age) ORDER BY holder_key",
                {"prefix": HOLD_PREFIX + "%", "age": older_than_s},
            )
        )
        freed = [await self.release(str(r["holder_key"]), notices) for r in rows]
        return sum(1 for host in freed if host is not None)

    async def rebind(self, old_key: str, new_key: str) -> bool:
        """The reservation *old_key* (a create's hold) belongs to *new_key* (its instance)."""
        changed = await self._db.write(
            lambda tx: tx.execute(
                "UPDATE capacity_reservations SET holder_key = :new WHERE holder_key = :old",
                {"old": old_key, "new": new_key},
            )
        )
        return changed == 1

    async def release(self, key: str, notices: Sequence[Notice] = ()) -> str | None:
        """Give *key*'s slot back (idempotent); the host it was on, or None."""

        def release(tx: Tx) -> str | None:
            host_id = _release_reservation(tx, key)
            if host_id is not None:
                _notify(tx, notices)
            return host_id

        return await self._db.write(release)

    async def reserved_on(self, key: str) -> str | None:
        row = await self._db.read(
            lambda tx: tx.fetchone(
                "SELECT host_id FROM capacity_reservations WHERE holder_key = :key", {"key": key}
            )
        )
        return None if row is None else str(row["host_id"])

    async def reservations(self, host_id: str) -> int:
        row = await self._db.read(
            lambda tx: tx.fetchone(
                "SELECT count(*) AS n FROM capacity_reservations WHERE host_id = :host",
                {"host": host_id},
            )
        )
        return 0 if row is None else int(row["n"])

    # ---- events ------------------------------------------------------------------------------

    async def notify(self, notices: Sequence[Notice]) -> None:
        await self._db.write(lambda tx: _notify(tx, notices))

    async def current_schema(self) -> str:
        row = await self._db.read(lambda tx: tx.fetchone("SELECT current_schema() AS s"))
        return "public" if row is None or row["s"] is None else str(row["s"])


def _claim_link(tx: Tx, kind: str, key: str, replica_id: str, info: str = "{}") -> None:
    tx.execute(
        "INSERT INTO link_holders (kind, key, replica_id, info, since)"
        " VALUES (:kind, :key, :me, :info, now())"
        " ON CONFLICT (kind, key) DO UPDATE SET replica_id = EXCLUDED.replica_id,"
        " info = EXCLUDED.info, since = EXCLUDED.since",
        {"kind": kind, "key": key, "me": replica_id, "info": info},
    )
