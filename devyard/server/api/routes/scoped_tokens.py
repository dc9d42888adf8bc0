"""Scoped tokens: mint (shown once) and revoke, ``/v1/scoped_tokens`` (docs/scoped-tokens.md).

A token is minted by an API key and acts for that key's user in that key's organization,
limited to its scopes; its secret is in the create response and nowhere else (the store keeps
its hash). A scope never grants more than the minter's role allows (`scopes.MINT_ROLE`), and a
scoped token cannot mint or revoke tokens (these operations declare no ``x-devyard-scope``).
Revoking ends that one token from the next request on; admins may revoke any token of the
organization, everyone else only the tokens minted by their own user (others are 404).
"""

from __future__ import annotations

from typing import Any

from quart import Blueprint, Response, jsonify

from ...store import errors as store_errors
from ...store import tokens
from ...store.base import Role, ScopedToken
from .._errors import NotFound
from ..auth import Principal, require_role, role_at_least
from ..context import body, principal, state
from ..scopes import parse_scope
from ..views import timestamp

__all__ = ["blueprint", "scoped_token_view"]

blueprint = Blueprint("scoped_tokens", __name__)

DEFAULT_TTL_SECONDS = 3600


def scoped_token_view(token: ScopedToken) -> dict[str, Any]:
    return {
        "id": token.id,
        "scopes": list(token.scopes),
        "userId": token.user_id,
        "apiKeyId": token.api_key_id,
        "createdAt": timestamp(token.created_at),
        "expiresAt": timestamp(token.expires_at),
        "revokedAt": None if token.revoked_at is None else timestamp(token.revoked_at),
    }


@blueprint.post("/v1/scoped_tokens")
async def create_scoped_token() -> Response:
    caller = principal()
    data = body()
    scopes = tuple(data["scopes"])
    for i, text in enumerate(scopes):
        # The document's pattern admits only known scopes; parse_scope cannot fail here.
        require_role(caller, parse_scope(text).least_role, f"scopes[{i}] ({text})")
    secret = tokens.new_scoped_token()
    try:
        token = await state().store.create_scoped_token(
            org_id=caller.org_id,
            api_key_id=caller.api_key.id,
            scopes=scopes,
            ttl_seconds=int(data.get("ttlSeconds", DEFAULT_TTL_SECONDS)),
            lookup_id=secret.lookup_id,
            secret_hash=secret.secret_hash,
        )
    except store_errors.NotFound:
        # The key was revoked between authentication and now.
        raise NotFound("the API key minting the token no longer exists") from None
    return jsonify({**scoped_token_view(token), "token": secret.plaintext})


async def _visible_token(caller: Principal, token_id: str) -> ScopedToken:
    try:
        token = await state().store.get_scoped_token(caller.org_id, token_id)
    except store_errors.NotFound:
        token = None
    if token is None or not (
        role_at_least(caller.role, Role.ADMIN) or token.user_id == caller.user_id
    ):
        raise NotFound(f"scoped token {token_id!r} not found")
    return token


@blueprint.delete("/v1/scoped_tokens/<id>")
async def revoke_scoped_token(id: str) -> Response:
    caller = principal()
    token = await _visible_token(caller, id)
    revoked = await state().store.revoke_scoped_token(caller.org_id, token.id)
    return jsonify(scoped_token_view(revoked))
