"""``/v1/tunnels``: create (token shown once), list, get, update selectors, delete, rotate.

Organization admins manage tunnels (``x-devyard-role: admin`` in the document). The rules
live in `devyard.server.tunnels.TunnelService`; this module translates HTTP to it and its
errors to APIErrors: a field that breaks a rule is 400 naming it, a taken name 409. The record
joins the stored tunnel with what the edge knows now (online, active connector, standbys).
"""

from __future__ import annotations

from typing import Any

from quart import Blueprint, Response, jsonify

from ...store import errors as store_errors
from ...store.base import Tunnel
from ...tunnels import ConnectorInfo, InvalidTunnelField, TunnelService, TunnelStatus
from .._errors import BadRequest, Conflict, NotFound
from ..context import body, int_param, principal, state
from ..views import timestamp
from .audit import record

__all__ = ["blueprint", "tunnel_view"]

blueprint = Blueprint("tunnels", __name__)


def _service() -> TunnelService:
    return state().tunnels


def _connector_view(info: ConnectorInfo) -> dict[str, Any]:
    return {
        "id": info.id,
        "hostname": info.hostname,
        "version": info.version,
        "os": info.os,
        "connectedSince": timestamp(info.connected_since),
    }


def tunnel_view(tunnel: Tunnel, status: TunnelStatus) -> dict[str, Any]:
    return {
        "id": tunnel.id,
        "name": tunnel.name,
        "organizationId": tunnel.org_id,
        "selectors": list(tunnel.selectors),
        "selectorVersion": tunnel.selector_version,
        "ephemeral": tunnel.ephemeral,
        "createdAt": timestamp(tunnel.created_at),
        "tokenIssuedAt": timestamp(tunnel.token_issued_at),
        "tokenExpiresAt": timestamp(tunnel.token_expires_at),
        "status": "online" if status.online else "offline",
        "activeConnector": None if status.active is None else _connector_view(status.active),
        "standbys": [_connector_view(s) for s in status.standbys],
    }


def _view(tunnel: Tunnel) -> dict[str, Any]:
    return tunnel_view(tunnel, _service().status(tunnel))


def _not_found(name: str) -> NotFound:
    return NotFound(f"tunnel {name!r} not found")


@blueprint.post("/v1/tunnels")
async def create_tunnel() -> Response:
    caller = principal()
    data = body()
    try:
        tunnel, token = await _service().create(
            caller.org_id,
            data["name"],
            data["selectors"],
            expiry_months=int(data.get("tokenExpiryMonths", 12)),
            ephemeral=bool(data.get("ephemeral", False)),
        )
    except InvalidTunnelField as exc:
        raise BadRequest(str(exc), reason="invalid_body") from exc
    except store_errors.Conflict as exc:
        raise Conflict(f"name: a tunnel named {data['name']!r} exists", reason="taken") from exc
    await record(caller, "tunnel_created", subject=tunnel.name)
    return jsonify({**_view(tunnel), "token": token})


@blueprint.get("/v1/tunnels")
async def list_tunnels() -> Response:
    caller = principal()
    return jsonify([_view(t) for t in await _service().list(caller.org_id)])


@blueprint.get("/v1/tunnels/<tunnelName>")
async def get_tunnel(tunnelName: str) -> Response:
    caller = principal()
    try:
        return jsonify(_view(await _service().get(caller.org_id, tunnelName)))
    except store_errors.NotFound:
        raise _not_found(tunnelName) from None


@blueprint.patch("/v1/tunnels/<tunnelName>")
async def update_tunnel(tunnelName: str) -> Response:
    caller = principal()
    try:
        tunnel = await _service().set_selectors(caller.org_id, tunnelName, body()["selectors"])
    except InvalidTunnelField as exc:
        raise BadRequest(str(exc), reason="invalid_body") from exc
    except store_errors.NotFound:
        raise _not_found(tunnelName) from None
    await record(caller, "tunnel_selectors_set", subject=tunnel.name)
    return jsonify(_view(tunnel))


@blueprint.delete("/v1/tunnels/<tunnelName>")
async def delete_tunnel(tunnelName: str) -> Response:
    caller = principal()
    try:
        tunnel = await _service().delete(caller.org_id, tunnelName)
    except store_errors.NotFound:
        raise _not_found(tunnelName) from None
    await record(caller, "tunnel_deleted", subject=tunnel.name)
    return jsonify(_view(tunnel))


@blueprint.post("/v1/tunnels/<tunnelName>/rotate")
async def rotate_tunnel_token(tunnelName: str) -> Response:
    caller = principal()
    months = int_param("tokenExpiryMonths")
    try:
        tunnel, token = await _service().rotate(caller.org_id, tunnelName, expiry_months=months)
    except InvalidTunnelField as exc:
        raise BadRequest(str(exc), reason="invalid_parameter") from exc
    except store_errors.NotFound:
        raise _not_found(tunnelName) from None
    await record(caller, "tunnel_token_rotated", subject=tunnel.name)
    return jsonify({**_view(tunnel), "token": token})
