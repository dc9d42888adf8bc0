"""The key's organization, its members and support messages (spec 4.4).

The pipeline has already answered 404 for any ``organizationId`` other than the key's own and
403 below the operation's role, so the handlers here only apply the rules that depend on the
data: an organization keeps at least one admin (422), names are unique (409).
"""

from __future__ import annotations

import attrs
from quart import Blueprint, Response, jsonify

from ...accounts.notify import notify_operators
from ...accounts.settings import OrganizationCreation
from ...deletion import OrganizationDeletion
from ...store import errors as store_errors
from ...store import tokens
from ...store.base import FeedbackKind, Member, Role
from .._errors import Conflict, Forbidden, Unprocessable
from ..auth import Principal
from ..context import body, principal, same_organization, state
from ..members import visible_member
from ..views import api_key_view, member_view, organization_view
from .audit import record

__all__ = ["blueprint"]

blueprint = Blueprint("organizations", __name__)

_SUCCESS = {"success": True}


def _taken(exc: store_errors.Conflict, default: str) -> Conflict:
    field = exc.field or default
    return Conflict(f"that {field} is already taken", reason="taken")


@blueprint.post("/organizations")
async def create_organization() -> Response:
    """A new organization with the caller's user as its admin (docs/accounts.md). Who may:
    the operators, or any user with a full key (``accounts.organization_creation``). The
    answer carries a first API key of that user in the new organization, shown once: the
    caller's own key stays bound to its organization."""
    caller = principal()
    api = state()
    policy = api.config.accounts.organization_creation
    if policy is OrganizationCreation.OPERATORS and not await api.store.is_operator(caller.user_id):
        raise Forbidden(
            "only the operators of this deployment create organizations", reason="not_operator"
        )
    try:
        created = await api.store.create_organization_for(body()["name"], caller.user_id)
    except store_errors.Conflict as exc:
        raise _taken(exc, "name") from exc
    secret = tokens.new_api_key()
    key = await api.store.create_api_key(
        org_id=created.id,
        user_id=caller.user_id,
        name="organization creator",
        lookup_id=secret.lookup_id,
        secret_hash=secret.secret_hash,
    )
    await record(
        caller,
        "organization_created",
        org_id=created.id,
        subject=created.id,
        detail={"from": caller.org_id},
    )
    return jsonify(
        {**organization_view(created), "apiKey": {**api_key_view(key), "key": secret.plaintext}}
    )


@blueprint.get("/organizations/<organizationId>")
async def get_organization(organizationId: str) -> Response:
    return jsonify(organization_view(same_organization(organizationId).organization))


@blueprint.patch("/organizations/<organizationId>")
async def update_organization(organizationId: str) -> Response:
    caller = same_organization(organizationId)
    data = body()
    settings = None
    if "settings" in data:
        changes = data["settings"]
        settings = caller.organization.settings
        if "inactivityTimeoutSeconds" in changes:
            settings = attrs.evolve(
                settings, inactivity_timeout_s=changes["inactivityTimeoutSeconds"]
            )
    try:
        updated = await state().store.update_organization(
            caller.org_id, name=data.get("name"), settings=settings
        )
    except store_errors.Conflict as exc:
        raise _taken(exc, "name") from exc
    await record(caller, "organization_updated", subject=caller.org_id, detail=data)
    return jsonify(organization_view(updated))


@blueprint.delete("/organizations/<organizationId>")
async def delete_organization(organizationId: str) -> Response:
    """Ends everything of the organization, then deletes it (`deletion`); a retry after a
    failure resumes where the failed attempt stopped."""
    caller = same_organization(organizationId)
    api = state()
    deletion = OrganizationDeletion(api.store, api.instances, api.tunnels, api.assets)
    deleted = await deletion.delete(caller.org_id)
    return jsonify(organization_view(deleted))


# -- members ----------------------------------------------------------------------------------


async def _member(caller: Principal, user_name: str) -> Member:
    return await visible_member(caller, user_name)


async def _keep_an_admin(caller: Principal, member: Member, what: str) -> None:
    """422 when *member* is the organization's only admin."""
    if member.role != Role.ADMIN:
        return
    members = await state().store.list_members(caller.org_id)
    if sum(1 for m in members if m.role == Role.ADMIN) <= 1:
        raise Unprocessable(
            f"cannot {what} the last admin of the organization; make another admin first",
            reason="last_admin",
        )


@blueprint.get("/organizations/<organizationId>/members")
async def list_members(organizationId: str) -> Response:
    caller = same_organization(organizationId)
    members = await state().store.list_members(caller.org_id)
    return jsonify([member_view(m) for m in members])


@blueprint.post("/organizations/<organizationId>/members")
async def add_member(organizationId: str) -> Response:
    caller = same_organization(organizationId)
    data = body()
    store = state().store
    role = Role(data["role"])
    try:
        user = await store.create_user(data["userName"], email=data.get("email"))
    except store_errors.Conflict as exc:
        raise _taken(exc, "name") from exc
    await store.add_membership(caller.org_id, user.id, role)
    await record(caller, "member_added", subject=user.id, detail={"role": str(role)})
    return jsonify(member_view(Member(user=user, role=role)))


@blueprint.get("/organizations/<organizationId>/members/<userName>")
async def get_member(organizationId: str, userName: str) -> Response:
    return jsonify(member_view(await _member(same_organization(organizationId), userName)))


@blueprint.patch("/organizations/<organizationId>/members/<userName>")
async def update_member(organizationId: str, userName: str) -> Response:
    caller = same_organization(organizationId)
    member = await _member(caller, userName)
    role = Role(body()["role"])
    if role != member.role:
        if role != Role.ADMIN:
            await _keep_an_admin(caller, member, "demote")
        await state().store.set_membership_role(caller.org_id, member.user.id, role)
        detail = {"from": str(member.role), "to": str(role)}
        await record(caller, "member_role_changed", subject=member.user.id, detail=detail)
    return jsonify(member_view(Member(user=member.user, role=role)))


@blueprint.delete("/organizations/<organizationId>/members/<userName>")
async def remove_member(organizationId: str, userName: str) -> Response:
    caller = same_organization(organizationId)
    member = await _member(caller, userName)
    await _keep_an_admin(caller, member, "remove")
    await state().store.remove_membership(caller.org_id, member.user.id)
    await record(
        caller, "member_removed", subject=member.user.id, detail={"role": str(member.role)}
    )
    return jsonify(_SUCCESS)


# -- support ----------------------------------------------------------------------------------


@blueprint.post("/organizations/<organizationId>/support")
async def send_support_message(organizationId: str) -> Response:
    """Stored, then mailed to the operators when SMTP is configured (`accounts.notify`)."""
    caller = same_organization(organizationId)
    api = state()
    feedback = await api.store.add_feedback(
        body()["message"],
        email=caller.user.email,
        kind=FeedbackKind.SUPPORT,
        org_id=caller.org_id,
        user_id=caller.user_id,
    )
    await notify_operators(
        api.store, api.config.accounts, feedback, org_name=caller.organization.name
    )
    return jsonify(_SUCCESS)
