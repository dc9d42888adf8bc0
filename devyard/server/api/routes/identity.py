"""The caller and the users it can see (spec 4.4: whoami, users, a user's memberships).

A key sees the users of its own organization; any other user name is 404, the same answer
for a user of another organization as for a name nobody has (`members.visible_user`). A user's own
record and organizations are changed and listed only by that user (403 for the others).
"""

from __future__ import annotations

from quart import Blueprint, Response, jsonify

from ...store import errors as store_errors
from ...store.base import UNSET, Unset, User
from .._errors import Conflict, Forbidden
from ..auth import Principal
from ..context import body, principal, state
from ..members import visible_user
from ..views import organization_view, user_view, whoami_view

__all__ = ["blueprint"]

blueprint = Blueprint("identity", __name__)


def _require_self(caller: Principal, user: User, what: str) -> None:
    if user.id != caller.user_id:
        raise Forbidden(f"only {user.name!r} may {what}", reason="not_self")


@blueprint.get("/whoami")
async def whoami() -> Response:
    return jsonify(whoami_view(principal()))


@blueprint.get("/users/<userName>")
async def get_user(userName: str) -> Response:
    return jsonify(user_view(await visible_user(principal(), userName)))


@blueprint.patch("/users/<userName>")
async def update_user(userName: str) -> Response:
    caller = principal()
    user = await visible_user(caller, userName)
    _require_self(caller, user, "change this user")
    data = body()
    email: str | Unset | None = data.get("email", UNSET)
    try:
        updated = await state().store.update_user(user.id, name=data.get("name"), email=email)
    except store_errors.Conflict as exc:
        field = "name" if exc.field == "name" else ("email" if exc.field == "email" else None)
        what = f"that {field}" if field else "that value"
        raise Conflict(f"{what} is taken by another user", reason="taken") from exc
    return jsonify(user_view(updated))


@blueprint.get("/users/<userName>/memberships")
async def list_user_memberships(userName: str) -> Response:
    caller = principal()
    user = await visible_user(caller, userName)
    _require_self(caller, user, "list this user's organizations")
    affiliations = await state().store.list_affiliations(user.id)
    return jsonify([organization_view(a.organization) for a in affiliations])
