"""The audit log in SQL: the `Store` methods of ``audit_events`` (migration 6).

An audit event is a fact an organization should learn about its own credentials or objects
that happened without its request, today the revocation of a credential reported as leaked
(docs/security.md). A row names the organization, a kind (``token_leaked``...), the id of the
object it is about and a small JSON detail; it never holds a secret. Rows go with their
organization.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Final

import attrs

from .database import Database, Row, Tx, as_datetime
from .ids import Kind, new_id

__all__ = ["AuditEvent", "SqlAudit"]

_SELECT: Final = "SELECT id, org_id, kind, subject, detail, created_at FROM audit_events"
MAX_LIST: Final = 500


@attrs.frozen
class AuditEvent:
    id: str
    org_id: str
    kind: str
    subject: str | None
    detail: Mapping[str, Any]
    created_at: datetime


def _event(row: Row) -> AuditEvent:
    return AuditEvent(
        id=row["id"],
        org_id=row["org_id"],
        kind=row["kind"],
        subject=row["subject"],
        detail=json.loads(row["detail"]),
        created_at=as_datetime(row["created_at"]),
    )


class SqlAudit:
    """Mixed into `SqlStore`; see `base.Store` for the contract of each method."""

    _db: Database
    _now: Callable[[], datetime]

    async def add_audit_event(
        self, *, org_id: str, kind: str, subject: str | None, detail: Mapping[str, Any]
    ) -> AuditEvent:
        event = AuditEvent(
            id=new_id(Kind.AUDIT_EVENT),
            org_id=org_id,
            kind=kind,
            subject=subject,
            detail=dict(detail),
            created_at=self._now(),
        )

        def add(tx: Tx) -> AuditEvent:
            tx.execute(
                "INSERT INTO audit_events (id, org_id, kind, subject, detail, created_at)"
                " VALUES (:id, :org_id, :kind, :subject, :detail, :created_at)",
                {
                    "id": event.id,
                    "org_id": org_id,
                    "kind": kind,
                    "subject": subject,
                    "detail": json.dumps(event.detail, sort_keys=True),
                    "created_at": event.created_at,
                },
            )
            return event

        return await self._db.write(add)

    async def list_audit_events(self, org_id: str, *, limit: int = 100) -> list[AuditEvent]:
        params = {"org_id": org_id, "limit": max(1, min(limit, MAX_LIST))}
        sql = _SELECT + " WHERE org_id = :org_id ORDER BY id DESC LIMIT :limit"
        rows = await self._db.read(lambda tx: tx.fetchall(sql, params))
        return [_event(row) for row in rows]
