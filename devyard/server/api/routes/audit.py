"""The audit log of an organization (issue 18): who changed what, when, from where.

``record`` is how the account handlers write an entry (the caller's user as actor, the
client's address); ``GET /organizations/{id}/audit`` (admins) lists entries newest first,
filtered by time (``from`` inclusive, ``to`` exclusive) and ``actor`` (a user id), a page at
a time: pass the last id seen as ``before`` for the next page. The older
``/organizations/{id}/auditEvents`` stays as it was (same rows, without actor or address).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from quart import Blueprint, Response, jsonify, request

from ...store.accounts import AuditEntry, AuditQuery
from .._errors import BadRequest
from ..auth import Principal
from ..context import int_param, same_organization, state, str_param
from ..views import timestamp

__all__ = ["blueprint", "record"]

blueprint = Blueprint("audit", __name__)


async def record(
    caller: Principal | None,
    kind: str,
    *,
    org_id: str | None = None,
    subject: str | None = None,
    detail: Mapping[str, Any] | None = None,
    actor: str | None = None,
) -> None:
    """An entry in *org_id* (default: the caller's organization) done by *actor* (default:
    the caller's user)."""
    target = org_id or (caller.org_id if caller is not None else None)
    assert target is not None
    await state().store.record_audit(
        org_id=target,
        kind=kind,
        subject=subject,
        detail=dict(detail or {}),
        actor=actor if actor is not None else (None if caller is None else caller.user_id),
        address=request.remote_addr,
    )


def _view(entry: AuditEntry) -> dict[str, object]:
    return {
        "id": entry.id,
        "kind": entry.kind,
        "subject": entry.subject,
        "detail": dict(entry.detail),
        "actor": entry.actor,
        "address": entry.address,
        "createdAt": timestamp(entry.created_at),
    }


def _time(name: str) -> datetime | None:
    text = str_param(name)
    if text is None:
        return None
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise BadRequest(f"{name}: not an RFC 3339 date-time", reason="invalid_parameter") from None
    if value.tzinfo is None:
        raise BadRequest(f"{name}: needs a time zone offset", reason="invalid_parameter")
    return value


@blueprint.get("/organizations/<organizationId>/audit")
async def list_audit(organizationId: str) -> Response:
    caller = same_organization(organizationId)
    query = AuditQuery(
        since=_time("from"),
        until=_time("to"),
        actor=str_param("actor"),
        before=str_param("before"),
        limit=int_param("limit"),
    )
    entries = await state().store.list_audit(caller.org_id, query)
    return jsonify([_view(e) for e in entries])
