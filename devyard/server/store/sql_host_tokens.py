"""`SqlHostTokens`: the ``host_tokens`` table (migration 18), the host tokens of a cluster.

One row per token: the key id (the host is ``host_<key id>``) and the SHA-256 of the whole
token, as ``DATA_DIR/host-tokens`` holds them on a single server, so a file imports as it is.
A revocation sets ``revoked_at`` and keeps the row (a tombstone): `import_entries` inserts only
key ids the table has never seen (``ON CONFLICT DO NOTHING``), so a revoked or rotated token
cannot come back from an old copy of a replica's file. Only the hash is stored; nothing here
sees a token.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta

import attrs

from .database import Database, Tx
from .rows import utc_now

__all__ = ["HostTokenRow", "SqlHostTokens"]


@attrs.frozen
class HostTokenRow:
    key_id: str
    token_hash: str
    revoked: bool


class SqlHostTokens:
    """The host tokens of a cluster over a `Database` (the table exists on both dialects)."""

    def __init__(self, db: Database, *, clock: Callable[[], datetime] = utc_now) -> None:
        self._db = db
        self._clock = clock

    def __repr__(self) -> str:
        return f"<SqlHostTokens {self._db.dialect}>"

    async def get(self, key_id: str) -> HostTokenRow | None:
        """The row of *key_id*, revoked or not; None when the table never had it."""

        def read(tx: Tx) -> HostTokenRow | None:
            row = tx.fetchone(
                "SELECT key_id, token_hash, revoked_at FROM host_tokens WHERE key_id = :key",
                {"key": key_id},
            )
            if row is None:
                return None
            return HostTokenRow(row["key_id"], row["token_hash"], row["revoked_at"] is not None)

        return await self._db.read(read)

    async def live_key_ids(self) -> list[str]:
        """The key ids of the tokens not revoked, oldest first."""

        def read(tx: Tx) -> list[str]:
            rows = tx.fetchall(
                "SELECT key_id FROM host_tokens WHERE revoked_at IS NULL"
                " ORDER BY created_at, key_id"
            )
            return [str(row["key_id"]) for row in rows]

        return await self._db.read(read)

    async def add(self, key_id: str, token_hash: str) -> None:
        now = self._clock()
        await self._db.write(
            lambda tx: tx.execute(
                "INSERT INTO host_tokens (key_id, token_hash, created_at)"
                " VALUES (:key, :hash, :now)",
                {"key": key_id, "hash": token_hash, "now": now},
            )
        )

    async def revoke(self, key_id: str) -> bool:
        """Tombstones *key_id*'s token; False when it has no live one."""
        now = self._clock()
        changed = await self._db.write(
            lambda tx: tx.execute(
                "UPDATE host_tokens SET revoked_at = :now"
                " WHERE key_id = :key AND revoked_at IS NULL",
                {"key": key_id, "now": now},
            )
        )
        return changed > 0

    async def rotate(self, key_id: str, token_hash: str) -> bool:
        """Replaces the hash of *key_id*'s live token; False when it has none."""
        now = self._clock()
        changed = await self._db.write(
            lambda tx: tx.execute(
                "UPDATE host_tokens SET token_hash = :hash, rotated_at = :now"
                " WHERE key_id = :key AND revoked_at IS NULL",
                {"key": key_id, "hash": token_hash, "now": now},
            )
        )
        return changed > 0

    async def import_entries(self, entries: Mapping[str, str]) -> int:
        """Inserts the ``key id -> hash`` entries whose key id the table has never seen (a
        revoked or rotated one keeps its row); how many were new."""
        if not entries:
            return 0
        now = self._clock()

        def insert(tx: Tx) -> int:
            added = 0
            for order, (key_id, token_hash) in enumerate(entries.items()):
                added += tx.execute(  # a microsecond apart: listed in the file's order
                    "INSERT INTO host_tokens (key_id, token_hash, created_at)"
                    " VALUES (:key, :hash, :at) ON CONFLICT (key_id) DO NOTHING",
                    {"key": key_id, "hash": token_hash, "at": now + timedelta(microseconds=order)},
                )
            return added

        return await self._db.write(insert)
