"""``/v1/assets``: get-or-create by name (``PUT``), list, get, delete; the JSON side of assets.

The bytes do not pass through here: the records carry signed URLs of the ``/blobs/`` endpoint
(`devyard.server.blobs.http`), which ``create_app`` mounts in front of the app together with
the expiry sweep, run by the app's lifespan while it serves.
"""

from __future__ import annotations

from typing import Any

from quart import Blueprint, Response, jsonify

from ...blobs import Operation
from ...store import errors as store_errors
from ...store.base import Asset
from .._errors import NotFound
from ..context import body, bool_param, int_param, principal, state, str_param
from ..views import base_url, timestamp

__all__ = ["asset_view", "blueprint"]

blueprint = Blueprint("assets", __name__)


def asset_view(
    asset: Asset, *, upload_url: bool = False, download_url: bool = False
) -> dict[str, Any]:
    view: dict[str, Any] = {"id": asset.id, "name": asset.name}
    if asset.os is not None:
        view["os"] = asset.os
    if asset.md5 is not None:
        view["md5"] = asset.md5
        view["size"] = asset.size
    if asset.ttl_s is not None:
        view["ttl"] = asset.ttl_s
    if asset.expires_at is not None:
        view["expiresAt"] = timestamp(asset.expires_at)
    view["createdAt"] = timestamp(asset.created_at)
    if asset.uploaded_at is not None:
        view["uploadedAt"] = timestamp(asset.uploaded_at)
    blobs = state().assets
    if upload_url:
        view["signedUploadUrl"] = blobs.signed_url(base_url(), Operation.UPLOAD, asset.id)
    if download_url:
        view["signedDownloadUrl"] = blobs.signed_url(base_url(), Operation.DOWNLOAD, asset.id)
    return view


async def _visible(asset_id: str) -> Asset:
    try:
        return await state().store.get_asset(asset_id, org_id=principal().org_id)
    except store_errors.NotFound as exc:
        raise NotFound(f"asset {asset_id!r} not found") from exc


@blueprint.put("/v1/assets")
async def upsert_asset() -> Response:
    data = body()
    asset = await state().store.upsert_asset(
        org_id=principal().org_id, name=data["name"], os=data.get("os"), ttl_s=data.get("ttl")
    )
    return jsonify(asset_view(asset, upload_url=True, download_url=True))


@blueprint.get("/v1/assets")
async def list_assets() -> Response:
    found = await state().store.list_assets(
        principal().org_id,
        name=str_param("nameFilter"),
        name_prefix=str_param("namePrefixFilter"),
        limit=int_param("limit"),
    )
    upload, download = bool_param("includeUploadUrl"), bool_param("includeDownloadUrl")
    return jsonify([asset_view(a, upload_url=upload, download_url=download) for a in found])


@blueprint.get("/v1/assets/<id>")
async def get_asset(id: str) -> Response:
    asset = await _visible(id)
    return jsonify(asset_view(asset, download_url=bool_param("includeDownloadUrl")))


@blueprint.delete("/v1/assets/<id>")
async def delete_asset(id: str) -> Response:
    try:
        asset = await state().assets.delete(principal().org_id, id)
    except store_errors.NotFound as exc:
        raise NotFound(f"asset {id!r} not found") from exc
    return jsonify(asset_view(asset))
