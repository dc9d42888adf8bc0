"""The statements of the cluster migration (issue 23, docs/scale-out.md): replica leases, host
leases with their capacity, the registry of who holds which link, and capacity reservations.

Data only, like `schema`; `schema.MIGRATIONS` appends them as one migration. The tables exist
on both dialects (one schema text, as the rules in `schema` want), but only the PostgreSQL
backend uses them: SQLite is the single-process path and never reads or writes them.
"""

from __future__ import annotations

from typing import Final

__all__ = ["CLUSTER_STATEMENTS"]

CLUSTER_STATEMENTS: Final[tuple[str, ...]] = (
    """
    CREATE TABLE cluster_replicas (
        replica_id TEXT PRIMARY KEY,
        peer_url   TEXT NOT NULL,
        started_at {timestamp} NOT NULL,
        expires_at {timestamp} NOT NULL
    )
    """,
    """
    CREATE TABLE host_leases (
        host_id    TEXT PRIMARY KEY,
        holder     TEXT,
        name       TEXT NOT NULL,
        region     TEXT NOT NULL,
        platforms  TEXT NOT NULL,
        drivers    TEXT NOT NULL,
        version    TEXT NOT NULL,
        capacity   INTEGER NOT NULL CHECK (capacity >= 0),
        used       INTEGER NOT NULL DEFAULT 0 CHECK (used >= 0),
        linked_at  {timestamp} NOT NULL,
        expires_at {timestamp} NOT NULL
    )
    """,
    "CREATE INDEX host_leases_by_expiry ON host_leases (expires_at)",
    """
    CREATE TABLE link_holders (
        kind       TEXT NOT NULL CHECK (kind IN ('host', 'connector')),
        key        TEXT NOT NULL,
        replica_id TEXT NOT NULL,
        info       TEXT NOT NULL DEFAULT '{{}}',
        since      {timestamp} NOT NULL,
        PRIMARY KEY (kind, key)
    )
    """,
    "CREATE INDEX link_holders_by_replica ON link_holders (replica_id)",
    """
    CREATE TABLE capacity_reservations (
        holder_key TEXT PRIMARY KEY,
        host_id    TEXT NOT NULL,
        created_at {timestamp} NOT NULL
    )
    """,
    "CREATE INDEX capacity_reservations_by_host ON capacity_reservations (host_id)",
)
