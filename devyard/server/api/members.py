"""The users a key can see by name: the members of its own organization, and nobody else.

User names are unique across the server, but a lookup by name searches only the caller's
organization (one query over its members), so the user of another organization and a name
nobody has are answered alike, with the same message and the same work: no answer of a
lookup tells a key which names exist elsewhere.
"""

from __future__ import annotations

from ..store.base import Member, User
from ._errors import NotFound
from .auth import Principal
from .context import state

__all__ = ["visible_member", "visible_user"]


async def _find(caller: Principal, name: str) -> Member | None:
    for member in await state().store.list_members(caller.org_id):
        if member.user.name == name:
            return member
    return None


async def visible_user(caller: Principal, name: str) -> User:
    """The user called *name* if it is a member of the caller's organization, else 404."""
    member = await _find(caller, name)
    if member is None:
        raise NotFound(f"user {name!r} not found")
    return member.user


async def visible_member(caller: Principal, name: str) -> Member:
    """The caller organization's member called *name*, else 404."""
    member = await _find(caller, name)
    if member is None:
        raise NotFound(f"member {name!r} not found")
    return member
