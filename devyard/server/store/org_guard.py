"""The organization a write belongs to is alive: checked in the write's own transaction.

A deletion marks the organization ``deleting`` (`mark_organization_deleting`, which locks the
row ``FOR UPDATE`` on PostgreSQL) and then sweeps what the organization owns. A create that
checked the flag before the mark and inserted after the sweep would leave a live instance (a
running device, held capacity) that nothing ends. So every create of an organization-owned row
(instances, tunnels, assets, API keys, scoped tokens) calls `require_live_organization` inside
its insert transaction:

- PostgreSQL: ``SELECT ... FOR SHARE`` on the organization row. The mark's ``FOR UPDATE``
  conflicts with it, so either the create commits first (and the mark, then the sweep that
  follows it, sees the new row) or the mark commits first (and the create, re-reading the
  locked row, sees ``deleting_at``). The foreign key alone does not do this: it takes
  ``FOR KEY SHARE``, which an update of a non-key column does not wait for.
- SQLite: every write transaction is ``BEGIN IMMEDIATE``, so writes are serialized already.
"""

from __future__ import annotations

from typing import Final

from .database import Dialect, Tx
from .errors import NotFound, OrganizationDeleting

__all__ = ["require_live_organization"]

_SELECT: Final = "SELECT deleting_at FROM organizations WHERE id = :id"
_SELECT_SHARED: Final = _SELECT + " FOR SHARE"


def require_live_organization(tx: Tx, org_id: str) -> None:
    """Raises NotFound when *org_id* does not exist, OrganizationDeleting when a deletion of
    it is under way; otherwise the organization stays alive until *tx* ends."""
    sql = _SELECT_SHARED if tx.dialect is Dialect.POSTGRESQL else _SELECT
    row = tx.fetchone(sql, {"id": org_id})
    if row is None:
        raise NotFound("organization", org_id)
    if row["deleting_at"] is not None:
        raise OrganizationDeleting(org_id)
