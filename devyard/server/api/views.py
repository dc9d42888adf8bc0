"""Store records as the JSON objects of ``openapi.yaml`` (camelCase, RFC 3339 timestamps),
and the base URL the URLs inside them start with.

One function per schema, named after it; the conformance tests check the output against the
document, so a field added here without the document (or the reverse) fails a test.

`base_url` is the configured ``public_url``, else the address of *our* socket that accepted
the request (the ASGI ``server``: the listening address, with the port actually bound), else
the configured listen address. Never the request's ``Host`` header: a URL the API hands out
(an instance's ``apiUrl``, a signed upload URL) must not point where a client said it should.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Final

from quart import request

from ..config import ListenAddress
from ..store import tokens
from ..store.base import ApiKey, Member, Organization, User
from .auth import Principal
from .context import state

__all__ = [
    "api_key_view",
    "base_url",
    "member_view",
    "organization_view",
    "timestamp",
    "user_view",
    "whoami_view",
]

JSON = dict[str, Any]


_WILDCARDS: Final = frozenset({"", "0.0.0.0", "::"})  # noqa: S104 - comparing, not binding


def base_url() -> str:
    """Where clients reach this server, for the URLs of the request being answered."""
    config = state().config
    if config.public_url is not None:
        return config.public_url.rstrip("/")
    server = request.scope.get("server")
    if not server or server[1] is None:  # not a TCP socket (the in-process test client)
        return config.base_url
    local_host, port = str(server[0]), int(server[1])
    host = config.listen.host
    if host in _WILDCARDS:
        host = local_host
    scheme = "https" if config.tls_enabled else "http"
    return f"{scheme}://{ListenAddress(host, port)}"


def timestamp(value: datetime) -> str:
    """RFC 3339 in UTC with a ``Z``."""
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _optional_timestamp(value: datetime | None) -> str | None:
    return None if value is None else timestamp(value)


def user_view(user: User) -> JSON:
    return {
        "id": user.id,
        "name": user.name,
        "email": user.email,
        "createdAt": timestamp(user.created_at),
    }


def organization_view(organization: Organization) -> JSON:
    settings = organization.settings
    return {
        "id": organization.id,
        "name": organization.name,
        "createdAt": timestamp(organization.created_at),
        "settings": {
            "inactivityTimeoutSeconds": settings.inactivity_timeout_s,
            "iphoneDuoEnabled": settings.iphone_duo_enabled,
        },
    }


def member_view(member: Member) -> JSON:
    return {"user": user_view(member.user), "role": str(member.role)}


def api_key_view(key: ApiKey) -> JSON:
    return {
        "id": key.id,
        "name": key.name,
        "userId": key.user_id,
        "prefix": f"{tokens.API_KEY_PREFIX}_{key.lookup_id}",
        "readOnly": key.read_only,
        "createdAt": timestamp(key.created_at),
        "lastUsedAt": _optional_timestamp(key.last_used_at),
        "revokedAt": _optional_timestamp(key.revoked_at),
    }


def _credential_view(caller: Principal) -> JSON:
    """Which credential made the request (docs/accounts.md): the key, a scoped token minted
    by it, or a browser session made from it."""
    if caller.scoped_token is not None:
        token = caller.scoped_token
        return {
            "kind": "scopedToken",
            "id": token.id,
            "scopes": list(token.scopes),
            "expiresAt": timestamp(token.expires_at),
        }
    if caller.session is not None:
        return {
            "kind": "session",
            "id": caller.session.id,
            "expiresAt": timestamp(caller.session.expires_at),
        }
    return {"kind": "apiKey", "id": caller.api_key.id}


def whoami_view(caller: Principal) -> JSON:
    return {
        "user": user_view(caller.user),
        "organization": organization_view(caller.organization),
        "role": str(caller.role),
        "apiKey": api_key_view(caller.api_key),
        "credential": _credential_view(caller),
    }
