"""The statements of the replica-set migration (issue 23, "two links", docs/scale-out.md):
where hosts and connectors reach each replica directly, beside its peer address.

Data only, like `schema`. The column exists on both dialects; only the PostgreSQL backend
uses it (SQLite is the single-process path).
"""

from __future__ import annotations

from typing import Final

__all__ = ["REPLICA_SET_STATEMENTS"]

REPLICA_SET_STATEMENTS: Final[tuple[str, ...]] = (
    "ALTER TABLE cluster_replicas ADD COLUMN advertise_url TEXT NOT NULL DEFAULT ''",
)
