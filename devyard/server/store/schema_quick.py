"""The statement of migration 19 (issue 23, docs/scale-out.md): the shared deadlines of quick
(ephemeral) tunnels, so that a quick tunnel left without a connector is deleted by whichever
replica is alive when its deadline passes, not by a timer in the memory of one replica.

Data only, like `schema`; `schema.MIGRATIONS` appends it as one migration. The table exists on
both dialects (one schema text), but only the PostgreSQL cluster uses it: SQLite is the
single-process path, whose hub keeps its in-memory timer.
"""

from __future__ import annotations

from typing import Final

__all__ = ["QUICK_DEADLINE_STATEMENTS"]

QUICK_DEADLINE_STATEMENTS: Final[tuple[str, ...]] = (
    """
    CREATE TABLE quick_tunnel_deadlines (
        tunnel_id TEXT PRIMARY KEY REFERENCES tunnels (id) ON DELETE CASCADE,
        org_id    TEXT NOT NULL,
        name      TEXT NOT NULL,
        deadline  {timestamp} NOT NULL
    )
    """,
    "CREATE INDEX quick_tunnel_deadlines_by_deadline ON quick_tunnel_deadlines (deadline)",
)
