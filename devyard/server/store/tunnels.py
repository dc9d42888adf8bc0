"""Tunnels in SQL: the `Store` methods of persistent tunnels (migration 5).

A tunnel is named uniquely within its organization (the API addresses it by name). Its token
is kept as the lookup id (indexed, unique: authentication finds the row with it) and a hash of
the whole token (`store.tokens.hash_secret`); rotation replaces both in one update, so the old
token stops matching at once. Selectors are stored as the JSON list the API echoes, with a
version that every change bumps (instances keep the version they attached with).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Final

from .base import Tunnel, TunnelCredential
from .database import Database, Dialect, Row, Tx, as_datetime
from .errors import Conflict, NotFound
from .ids import new_ulid
from .org_guard import require_live_organization

__all__ = ["SqlTunnels"]

_COLUMNS: Final = (
    "id, org_id, name, selectors, selector_version, ephemeral, token_lookup,"
    " token_expires_at, token_issued_at, created_at"
)
_SELECT: Final = f"SELECT {_COLUMNS} FROM tunnels"  # noqa: S608 - constants only


def _tunnel(row: Row) -> Tunnel:
    return Tunnel(
        id=row["id"],
        org_id=row["org_id"],
        name=row["name"],
        selectors=tuple(json.loads(row["selectors"])),
        selector_version=int(row["selector_version"]),
        ephemeral=bool(row["ephemeral"]),
        token_lookup=row["token_lookup"],
        token_expires_at=as_datetime(row["token_expires_at"]),
        token_issued_at=as_datetime(row["token_issued_at"]),
        created_at=as_datetime(row["created_at"]),
    )


def _get(tx: Tx, org_id: str, name: str, *, lock: bool = False) -> Tunnel:
    sql = _SELECT + " WHERE org_id = :org_id AND name = :name"
    if lock and tx.dialect is Dialect.POSTGRESQL:
        sql += " FOR UPDATE"
    row = tx.fetchone(sql, {"org_id": org_id, "name": name})
    if row is None:
        raise NotFound("tunnel", name)
    return _tunnel(row)


class SqlTunnels:
    """Mixed into `SqlStore`; see `base.Store` for the contract of each method."""

    _db: Database
    _now: Callable[[], datetime]

    async def create_tunnel(
        self,
        *,
        org_id: str,
        name: str,
        selectors: tuple[str, ...],
        ephemeral: bool,
        token_lookup: str,
        token_hash: str,
        token_expires_at: datetime,
    ) -> Tunnel:
        now = self._now()
        tunnel = Tunnel(
            id=f"tun_{new_ulid()}",
            org_id=org_id,
            name=name,
            selectors=tuple(selectors),
            selector_version=1,
            ephemeral=ephemeral,
            token_lookup=token_lookup,
            token_expires_at=token_expires_at,
            token_issued_at=now,
            created_at=now,
        )

        def create(tx: Tx) -> None:
            require_live_organization(tx, org_id)
            taken = tx.fetchone(
                "SELECT 1 AS ok FROM tunnels WHERE org_id = :org_id AND name = :name",
                {"org_id": org_id, "name": name},
            )
            if taken is not None:
                raise Conflict(f"a tunnel named {name!r} exists", field="name")
            tx.execute(
                f"INSERT INTO tunnels ({_COLUMNS}, token_hash) VALUES (:id, :org_id, :name,"  # noqa: S608
                " :selectors, :selector_version, :ephemeral, :token_lookup, :token_expires_at,"
                " :token_issued_at, :created_at, :token_hash)",
                {
                    "id": tunnel.id,
                    "org_id": org_id,
                    "name": name,
                    "selectors": json.dumps(list(tunnel.selectors)),
                    "selector_version": 1,
                    "ephemeral": ephemeral,
                    "token_lookup": token_lookup,
                    "token_expires_at": token_expires_at,
                    "token_issued_at": now,
                    "created_at": now,
                    "token_hash": token_hash,
                },
            )

        await self._db.write(create)
        return tunnel

    async def get_tunnel(self, org_id: str, name: str) -> Tunnel:
        return await self._db.read(lambda tx: _get(tx, org_id, name))

    async def list_tunnels(self, org_id: str) -> list[Tunnel]:
        found = await self._db.read(
            lambda tx: tx.fetchall(
                _SELECT + " WHERE org_id = :org_id ORDER BY id", {"org_id": org_id}
            )
        )
        return [_tunnel(row) for row in found]

    async def set_tunnel_selectors(
        self, org_id: str, name: str, selectors: tuple[str, ...]
    ) -> Tunnel:
        def update(tx: Tx) -> Tunnel:
            old = _get(tx, org_id, name, lock=True)
            tx.execute(
                "UPDATE tunnels SET selectors = :selectors,"
                " selector_version = selector_version + 1 WHERE id = :id",
                {"id": old.id, "selectors": json.dumps(list(selectors))},
            )
            return _get(tx, org_id, name)

        return await self._db.write(update)

    async def rotate_tunnel_token(
        self,
        org_id: str,
        name: str,
        *,
        token_lookup: str,
        token_hash: str,
        token_expires_at: datetime,
    ) -> Tunnel:
        now = self._now()

        def rotate(tx: Tx) -> Tunnel:
            old = _get(tx, org_id, name, lock=True)
            tx.execute(
                "UPDATE tunnels SET token_lookup = :lookup, token_hash = :hash,"
                " token_expires_at = :expires, token_issued_at = :now WHERE id = :id",
                {
                    "id": old.id,
                    "lookup": token_lookup,
                    "hash": token_hash,
                    "expires": token_expires_at,
                    "now": now,
                },
            )
            return _get(tx, org_id, name)

        return await self._db.write(rotate)

    async def delete_tunnel(self, org_id: str, name: str) -> Tunnel:
        def delete(tx: Tx) -> Tunnel:
            tunnel = _get(tx, org_id, name, lock=True)
            tx.execute("DELETE FROM tunnels WHERE id = :id", {"id": tunnel.id})
            return tunnel

        return await self._db.write(delete)

    async def get_tunnel_by_token(self, token_lookup: str) -> TunnelCredential:
        def read(tx: Tx) -> TunnelCredential:
            row = tx.fetchone(
                _SELECT.replace(" FROM", ", token_hash FROM", 1) + " WHERE token_lookup = :l",
                {"l": token_lookup},
            )
            if row is None:
                raise NotFound("tunnel token", "…")
            return TunnelCredential(tunnel=_tunnel(row), token_hash=row["token_hash"])

        return await self._db.read(read)
