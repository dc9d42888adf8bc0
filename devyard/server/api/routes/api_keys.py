"""API keys of the key's organization: list, create (shown once), get, revoke.

Admins manage every key of the organization and may create keys that act as another member.
Everyone else sees and manages only the keys of their own user; another user's key is as
invisible to them as another organization's (404). A created key's secret is in the response
of the create call and nowhere else: the store keeps its hash.
"""

from __future__ import annotations

from quart import Blueprint, Response, jsonify

from ...store import errors as store_errors
from ...store import tokens
from ...store.base import ApiKey, Role
from .._errors import NotFound
from ..auth import Principal, require_role, role_at_least
from ..context import body, bool_param, same_organization, state
from ..members import visible_user
from ..views import api_key_view
from .audit import record

__all__ = ["blueprint"]

blueprint = Blueprint("api_keys", __name__)


def _is_admin(caller: Principal) -> bool:
    return role_at_least(caller.role, Role.ADMIN)


async def _visible_key(caller: Principal, key_id: str) -> ApiKey:
    try:
        key = await state().store.get_api_key(caller.org_id, key_id)
    except store_errors.NotFound:
        key = None
    if key is None or not (_is_admin(caller) or key.user_id == caller.user_id):
        raise NotFound(f"API key {key_id!r} not found")
    return key


@blueprint.get("/organizations/<organizationId>/apiKeys")
async def list_api_keys(organizationId: str) -> Response:
    caller = same_organization(organizationId)
    keys = await state().store.list_api_keys(
        caller.org_id,
        user_id=None if _is_admin(caller) else caller.user_id,
        include_revoked=bool_param("includeRevoked"),
    )
    return jsonify([api_key_view(k) for k in keys])


@blueprint.post("/organizations/<organizationId>/apiKeys")
async def create_api_key(organizationId: str) -> Response:
    caller = same_organization(organizationId)
    data = body()
    user_id = caller.user_id
    user_name = data.get("userName")
    if user_name is not None and user_name != caller.user.name:
        require_role(caller, Role.ADMIN, "creating a key for another member")
        user_id = (await visible_user(caller, user_name)).id
    secret = tokens.new_api_key()
    key = await state().store.create_api_key(
        org_id=caller.org_id,
        user_id=user_id,
        name=data["name"],
        lookup_id=secret.lookup_id,
        secret_hash=secret.secret_hash,
        read_only=bool(data.get("readOnly", False)),
    )
    detail = {"name": key.name, "userId": user_id, "readOnly": key.read_only}
    await record(caller, "api_key_created", subject=key.id, detail=detail)
    return jsonify({**api_key_view(key), "key": secret.plaintext})


@blueprint.get("/organizations/<organizationId>/apiKeys/<apiKeyId>")
async def get_api_key(organizationId: str, apiKeyId: str) -> Response:
    caller = same_organization(organizationId)
    return jsonify(api_key_view(await _visible_key(caller, apiKeyId)))


@blueprint.delete("/organizations/<organizationId>/apiKeys/<apiKeyId>")
async def revoke_api_key(organizationId: str, apiKeyId: str) -> Response:
    caller = same_organization(organizationId)
    key = await _visible_key(caller, apiKeyId)
    revoked = await state().store.revoke_api_key(caller.org_id, key.id)
    await record(caller, "api_key_revoked", subject=key.id, detail={"userId": key.user_id})
    return jsonify(api_key_view(revoked))
