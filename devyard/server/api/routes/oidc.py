"""An organization's single sign-on connection (spec 4.4): ``GET/PUT/DELETE
.../oidcConnection``, admins only (docs/accounts.md).

The client secret is write-only: ``PUT`` seals it (`accounts.secretbox`, AES-GCM with the
data directory's key and the organization id as associated data) and no answer shows it,
only ``clientSecretSet``. A ``PUT`` without ``clientSecret`` keeps the stored one; ``null``
removes it (a public client, PKCE only). ``allowedDomains`` names the email domains whose
users may sign in through this provider; one takes effect only while the organization has it
verified (``verifiedDomains`` in the answer). The login flow itself (discovery, PKCE, nonce,
id-token validation) builds on this record in a later session.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from quart import Blueprint, Response, jsonify

from ...accounts.secretbox import load_secret_box
from ...store import errors as store_errors
from ...store.accounts import DomainStatus, OidcConnection
from ...store.base import Role
from .._errors import BadRequest, NotFound
from ..context import body, same_organization, state
from ..views import timestamp
from .audit import record
from .domains import normalize_domain

__all__ = ["blueprint"]

blueprint = Blueprint("oidc", __name__)

_LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})


def _issuer(text: str) -> str:
    """An https URL (http only on loopback, for development), without query or fragment."""
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - raises for a port out of range
    except ValueError:
        raise BadRequest("issuer: not a URL", reason="invalid_issuer") from None
    plain_ok = parts.scheme == "http" and (parts.hostname or "") in _LOOPBACK
    if not (parts.scheme == "https" or plain_ok) or not parts.hostname:
        raise BadRequest("issuer: an https:// URL", reason="invalid_issuer")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise BadRequest("issuer: no query, fragment or credentials", reason="invalid_issuer")
    return text.rstrip("/")


async def _view(connection: OidcConnection) -> dict[str, object]:
    domains = await state().store.list_domains(connection.org_id)
    verified = {d.domain for d in domains if d.status is DomainStatus.VERIFIED}
    return {
        "issuer": connection.issuer,
        "clientId": connection.client_id,
        "clientSecretSet": connection.secret_sealed is not None,
        "allowedDomains": list(connection.allowed_domains),
        "verifiedDomains": [d for d in connection.allowed_domains if d in verified],
        "defaultRole": str(connection.default_role),
        "createdAt": timestamp(connection.created_at),
        "updatedAt": timestamp(connection.updated_at),
    }


async def _connection(org_id: str) -> OidcConnection:
    try:
        return await state().store.get_oidc_connection(org_id)
    except store_errors.NotFound:
        raise NotFound("this organization has no OIDC connection") from None


@blueprint.get("/organizations/<organizationId>/oidcConnection")
async def get_oidc_connection(organizationId: str) -> Response:
    caller = same_organization(organizationId)
    return jsonify(await _view(await _connection(caller.org_id)))


@blueprint.put("/organizations/<organizationId>/oidcConnection")
async def put_oidc_connection(organizationId: str) -> Response:
    caller = same_organization(organizationId)
    api = state()
    data = body()
    issuer = _issuer(str(data["issuer"]))
    keep = "clientSecret" not in data
    sealed = None
    if not keep and data["clientSecret"] is not None:
        box = await load_secret_box(api.config.data_dir)
        sealed = box.seal(str(data["clientSecret"]), context=caller.org_id)
    domains = tuple(sorted({normalize_domain(d) for d in data.get("allowedDomains", [])}))
    connection = await api.store.put_oidc_connection(
        caller.org_id,
        issuer=issuer,
        client_id=str(data["clientId"]),
        allowed_domains=domains,
        default_role=Role(data.get("defaultRole", Role.MEMBER)),
        secret_sealed=sealed,
        keep_secret=keep,
    )
    await record(
        caller,
        "oidc_connection_set",
        subject=issuer,
        detail={"clientId": connection.client_id, "secretChanged": not keep},
    )
    return jsonify(await _view(connection))


@blueprint.delete("/organizations/<organizationId>/oidcConnection")
async def delete_oidc_connection(organizationId: str) -> Response:
    caller = same_organization(organizationId)
    try:
        await state().store.delete_oidc_connection(caller.org_id)
    except store_errors.NotFound:
        raise NotFound("this organization has no OIDC connection") from None
    await record(caller, "oidc_connection_deleted")
    return jsonify({"success": True})
