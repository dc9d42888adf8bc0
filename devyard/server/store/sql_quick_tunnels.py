"""`SqlQuickTunnels`: the shared deletion deadlines of quick (ephemeral) tunnels (migration
17), on PostgreSQL only (docs/scale-out.md).

A quick tunnel with a connector linked to some replica has a row whose deadline that replica
keeps pushing ``grace`` seconds ahead (`renew`). When its last connector there stops cleanly
the deadline is brought close (`shorten`); when the link is lost, or the replica dies, the
renewals simply stop. Any replica's sweeper takes the rows whose deadline passed with one
conditional ``DELETE ... WHERE deadline < now() RETURNING`` (`take_due`): PostgreSQL's row
locks give each row to exactly one replica, which deletes the tunnel. Times are the database's
``now()``.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from .database import Database, Tx

__all__ = ["DueQuickTunnel", "SqlQuickTunnels"]


@attrs.frozen
class DueQuickTunnel:
    tunnel_id: str
    org_id: str
    name: str


class SqlQuickTunnels:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def renew(self, tunnels: Sequence[DueQuickTunnel], grace: float) -> None:
        """Each of *tunnels* (connectors linked here) is deleted no sooner than *grace*
        seconds from now. A tunnel deleted meanwhile is skipped."""
        if not tunnels:
            return
        await self._db.write(
            lambda tx: tx.execute(
                "INSERT INTO quick_tunnel_deadlines (tunnel_id, org_id, name, deadline)"
                " SELECT t.id, t.org_id, t.name, now() + make_interval(secs => :grace)"
                " FROM tunnels t WHERE t.id = ANY(:ids) AND t.ephemeral"
                " ON CONFLICT (tunnel_id) DO UPDATE SET deadline = EXCLUDED.deadline",
                {"ids": [t.tunnel_id for t in tunnels], "grace": grace},
            )
        )

    async def shorten(self, tunnel_id: str, delay: float) -> None:
        """The deadline comes within *delay* seconds (a clean stop of the last connector
        here); a replica that still has a connector of the tunnel renews it before then."""
        await self._db.write(
            lambda tx: tx.execute(
                "UPDATE quick_tunnel_deadlines"
                " SET deadline = LEAST(deadline, now() + make_interval(secs => :delay))"
                " WHERE tunnel_id = :id",
                {"id": tunnel_id, "delay": delay},
            )
        )

    async def take_due(self) -> list[DueQuickTunnel]:
        """The quick tunnels whose deadline passed, each returned to exactly one caller."""

        def take(tx: Tx) -> list[DueQuickTunnel]:
            rows = tx.fetchall(
                "DELETE FROM quick_tunnel_deadlines WHERE deadline < now()"
                " RETURNING tunnel_id, org_id, name"
            )
            return [DueQuickTunnel(r["tunnel_id"], r["org_id"], r["name"]) for r in rows]

        return await self._db.write(take)

    async def deadline_in(self, tunnel_id: str) -> float | None:
        """Seconds until the tunnel's deadline (negative: passed), or None without one."""
        row = await self._db.read(
            lambda tx: tx.fetchone(
                "SELECT EXTRACT(EPOCH FROM deadline - now()) AS left_s"
                " FROM quick_tunnel_deadlines WHERE tunnel_id = :id",
                {"id": tunnel_id},
            )
        )
        return None if row is None else float(row["left_s"])
