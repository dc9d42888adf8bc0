"""The organization build cache's entries in SQL (migration 14, branch h17cache): one row per
(organization, key) with the entry's size and last use, for the per-organization size bound
(least recently used first) and the idle sweep. The bytes are a blob in the ``build-cache``
namespace (`server.build_cache`); the row is written after the blob, so a row names bytes
that exist.

Its own protocol (`BuildCacheStore`), not a method set of `base.Store`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Final, Protocol

import attrs

from .database import Database, Row, Tx, as_datetime

__all__ = ["BuildCacheStore", "CacheEntry", "SqlBuildCache"]

_COLUMNS: Final = "org_id, cache_key, size, used_at"


@attrs.frozen
class CacheEntry:
    org_id: str
    key: str
    size: int
    used_at: datetime


class BuildCacheStore(Protocol):
    async def get_cache_entry(self, org_id: str, key: str) -> CacheEntry | None:
        """The entry, or None."""

    async def put_cache_entry(self, entry: CacheEntry) -> None:
        """Insert the entry, or replace the one of the same (organization, key)."""

    async def touch_cache_entry(self, org_id: str, key: str, when: datetime) -> None:
        """Mark the entry used at *when* (missing is fine)."""

    async def delete_cache_entry(self, org_id: str, key: str) -> None:
        """Remove the row (missing is fine)."""

    async def cache_usage(self, org_id: str) -> int:
        """The bytes of the organization's entries."""

    async def cache_entries_by_use(
        self, org_id: str, *, limit: int, newest_first: bool = False
    ) -> list[CacheEntry]:
        """The organization's entries, least recently used first (or most recent first)."""

    async def idle_cache_entries(self, before: datetime, *, limit: int) -> list[CacheEntry]:
        """Entries of any organization last used before *before*."""


def _entry(row: Row) -> CacheEntry:
    return CacheEntry(
        org_id=row["org_id"],
        key=row["cache_key"],
        size=row["size"],
        used_at=as_datetime(row["used_at"]),
    )


def _put(tx: Tx, entry: CacheEntry) -> None:
    params = {"org_id": entry.org_id, "key": entry.key}
    tx.execute("DELETE FROM build_cache WHERE org_id = :org_id AND cache_key = :key", params)
    tx.execute(
        f"INSERT INTO build_cache ({_COLUMNS}) VALUES (:org_id, :key, :size, :used_at)",  # noqa: S608
        {**params, "size": entry.size, "used_at": entry.used_at},
    )


class SqlBuildCache:
    """Mixed into `SqlStore`; implements `BuildCacheStore`."""

    _db: Database
    _now: Callable[[], datetime]

    async def get_cache_entry(self, org_id: str, key: str) -> CacheEntry | None:
        sql = f"SELECT {_COLUMNS} FROM build_cache WHERE org_id = :org_id AND cache_key = :key"  # noqa: S608
        row = await self._db.read(lambda tx: tx.fetchone(sql, {"org_id": org_id, "key": key}))
        return None if row is None else _entry(row)

    async def put_cache_entry(self, entry: CacheEntry) -> None:
        await self._db.write(lambda tx: _put(tx, entry))

    async def touch_cache_entry(self, org_id: str, key: str, when: datetime) -> None:
        sql = "UPDATE build_cache SET used_at = :when WHERE org_id = :org_id AND cache_key = :key"
        params = {"org_id": org_id, "key": key, "when": when}
        await self._db.write(lambda tx: tx.execute(sql, params))

    async def delete_cache_entry(self, org_id: str, key: str) -> None:
        sql = "DELETE FROM build_cache WHERE org_id = :org_id AND cache_key = :key"
        await self._db.write(lambda tx: tx.execute(sql, {"org_id": org_id, "key": key}))

    async def cache_usage(self, org_id: str) -> int:
        sql = "SELECT COALESCE(SUM(size), 0) AS total FROM build_cache WHERE org_id = :org_id"
        row = await self._db.read(lambda tx: tx.fetchone(sql, {"org_id": org_id}))
        return 0 if row is None else int(row["total"])

    async def cache_entries_by_use(
        self, org_id: str, *, limit: int, newest_first: bool = False
    ) -> list[CacheEntry]:
        order = "DESC" if newest_first else "ASC"
        sql = (
            f"SELECT {_COLUMNS} FROM build_cache WHERE org_id = :org_id"  # noqa: S608
            f" ORDER BY used_at {order}, cache_key LIMIT :limit"
        )
        params = {"org_id": org_id, "limit": limit}
        rows = await self._db.read(lambda tx: tx.fetchall(sql, params))
        return [_entry(row) for row in rows]

    async def idle_cache_entries(self, before: datetime, *, limit: int) -> list[CacheEntry]:
        sql = (
            f"SELECT {_COLUMNS} FROM build_cache WHERE used_at < :before"  # noqa: S608
            " ORDER BY used_at LIMIT :limit"
        )
        params = {"before": before, "limit": limit}
        rows = await self._db.read(lambda tx: tx.fetchall(sql, params))
        return [_entry(row) for row in rows]
