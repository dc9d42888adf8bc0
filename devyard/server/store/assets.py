"""Assets in SQL: the `Store` methods of ``/v1/assets``.

An asset is unique by ``(org_id, name)``; the upsert is ``INSERT ... ON CONFLICT DO NOTHING``
then a read, which both dialects support and which two concurrent upserts of one name cannot
turn into a `Conflict`. The bytes are not here: ``blob_key`` names them in the blob store, and
``set_asset_blob`` switches it in one transaction and hands back the previous key, so the
database row is the single point that says which bytes an asset has.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Final

from .base import Asset
from .database import Database, Dialect, Row, Tx, as_datetime
from .errors import NotFound
from .ids import new_ulid
from .org_guard import require_live_organization

__all__ = ["SqlAssets"]

_COLUMNS: Final = (
    "id, org_id, name, os, created_at, ttl_s, expires_at, md5, size, blob_key, uploaded_at"
)
# Built from constants only (hence S608); every value is a bound parameter.
_SELECT: Final = f"SELECT {_COLUMNS} FROM assets"  # noqa: S608


def _opt(value: object) -> datetime | None:
    return None if value is None else as_datetime(value)


def _asset(row: Row) -> Asset:
    return Asset(
        id=row["id"],
        org_id=row["org_id"],
        name=row["name"],
        os=row["os"],
        created_at=as_datetime(row["created_at"]),
        ttl_s=row["ttl_s"],
        expires_at=_opt(row["expires_at"]),
        md5=row["md5"],
        size=row["size"],
        blob_key=row["blob_key"],
        uploaded_at=_opt(row["uploaded_at"]),
    )


def _get(tx: Tx, asset_id: str, org_id: str | None, *, lock: bool = False) -> Asset:
    sql = _SELECT + " WHERE id = :id"
    if org_id is not None:
        sql += " AND org_id = :org_id"
    if lock and tx.dialect is Dialect.POSTGRESQL:
        sql += " FOR UPDATE"
    row = tx.fetchone(sql, {"id": asset_id, "org_id": org_id})
    if row is None:
        raise NotFound("asset", asset_id)
    return _asset(row)


class SqlAssets:
    """Mixed into `SqlStore`; see `base.Store` for the contract of each method."""

    _db: Database
    _now: Callable[[], datetime]

    async def upsert_asset(
        self, *, org_id: str, name: str, os: str | None = None, ttl_s: int | None = None
    ) -> Asset:
        now = self._now()
        expires_at = None if ttl_s is None else now + timedelta(seconds=ttl_s)
        params: dict[str, object] = {
            "id": f"asset_{new_ulid()}",
            "org_id": org_id,
            "name": name,
            "os": os,
            "created_at": now,
            "ttl_s": ttl_s,
            "expires_at": expires_at,
        }

        def upsert(tx: Tx) -> Asset:
            require_live_organization(tx, org_id)
            tx.execute(
                "INSERT INTO assets (id, org_id, name, os, created_at, ttl_s, expires_at)"
                " VALUES (:id, :org_id, :name, :os, :created_at, :ttl_s, :expires_at)"
                " ON CONFLICT (org_id, name) DO NOTHING",
                params,
            )
            if os is not None:
                tx.execute(
                    "UPDATE assets SET os = :os WHERE org_id = :org_id AND name = :name", params
                )
            if ttl_s is not None:
                tx.execute(
                    "UPDATE assets SET ttl_s = :ttl_s, expires_at = :expires_at"
                    " WHERE org_id = :org_id AND name = :name",
                    params,
                )
            row = tx.fetchone(_SELECT + " WHERE org_id = :org_id AND name = :name", params)
            if row is None:  # deleted between the statements (PostgreSQL, READ COMMITTED)
                raise NotFound("asset", name)
            return _asset(row)

        return await self._db.write(upsert)

    async def get_asset(self, asset_id: str, *, org_id: str | None = None) -> Asset:
        return await self._db.read(lambda tx: _get(tx, asset_id, org_id))

    async def list_assets(
        self,
        org_id: str,
        *,
        name: str | None = None,
        name_prefix: str | None = None,
        limit: int = 50,
        starting_after: str | None = None,
    ) -> list[Asset]:
        sql = _SELECT + " WHERE org_id = :org_id"
        params: dict[str, object] = {"org_id": org_id, "limit": limit}
        if starting_after is not None:
            sql += " AND id > :after"
            params["after"] = starting_after
        if name is not None:
            sql += " AND name = :name"
            params["name"] = name
        if name_prefix:
            # substr, not LIKE: no wildcard characters to escape, same on both dialects.
            sql += " AND substr(name, 1, :prefix_len) = :prefix"
            params["prefix"] = name_prefix
            params["prefix_len"] = len(name_prefix)
        sql += " ORDER BY id LIMIT :limit"
        found = await self._db.read(lambda tx: tx.fetchall(sql, params))
        return [_asset(row) for row in found]

    async def delete_asset(self, org_id: str, asset_id: str) -> Asset:
        def delete(tx: Tx) -> Asset:
            asset = _get(tx, asset_id, org_id, lock=True)
            tx.execute("DELETE FROM assets WHERE id = :id", {"id": asset_id})
            return asset

        return await self._db.write(delete)

    async def set_asset_blob(
        self, asset_id: str, *, blob_key: str, md5: str, size: int
    ) -> tuple[Asset, str | None]:
        now = self._now()

        def update(tx: Tx) -> tuple[Asset, str | None]:
            old = _get(tx, asset_id, None, lock=True)
            expires_at = None if old.ttl_s is None else now + timedelta(seconds=old.ttl_s)
            tx.execute(
                "UPDATE assets SET blob_key = :blob_key, md5 = :md5, size = :size,"
                " uploaded_at = :now, expires_at = :expires_at WHERE id = :id",
                {
                    "id": asset_id,
                    "blob_key": blob_key,
                    "md5": md5,
                    "size": size,
                    "now": now,
                    "expires_at": expires_at,
                },
            )
            return _get(tx, asset_id, None), old.blob_key

        return await self._db.write(update)

    async def list_expired_assets(self, *, limit: int = 100) -> list[Asset]:
        params: dict[str, object] = {"now": self._now(), "limit": limit}
        found = await self._db.read(
            lambda tx: tx.fetchall(
                _SELECT + " WHERE expires_at <= :now ORDER BY expires_at, id LIMIT :limit",
                params,
            )
        )
        return [_asset(row) for row in found]
