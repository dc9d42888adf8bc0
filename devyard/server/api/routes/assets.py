"""``/v1/assets``: get-or-create by name (``PUT``), list, get, delete; the JSON side of assets.

The bytes do not pass through here: the records carry signed URLs of the ``/blobs/`` endpoint
(`devyard.server.blobs.http`), which `install_assets` mounts in front of the app together with
the expiry sweep, run by the app's lifespan while it serves.
"""

from __future__ import annotations

from typing import Any

from quart import Blueprint, Response, jsonify, request
from quart_trio import QuartTrio

from ...blobs import (
    AssetBlobs,
    BlobEndpoint,
    BlobRoutes,
    LocalBlobStore,
    Operation,
    UrlSigner,
    load_signing_key,
)
from ...config import ServerConfig
from ...store import errors as store_errors
from ...store.base import Asset, Store
from .._errors import NotFound
from ..context import body, params, principal, state
from ..views import timestamp

__all__ = ["asset_view", "blueprint", "install_assets", "local_asset_blobs"]

blueprint = Blueprint("assets", __name__)

_EXTENSION_KEY = "devyard.assets"


def local_asset_blobs(store: Store, config: ServerConfig) -> AssetBlobs:
    """The default: blobs in ``<data_dir>/blobs``, the signing key in the data dir."""
    signer = UrlSigner(load_signing_key(config.data_dir))
    return AssetBlobs(store, LocalBlobStore(config.data_dir / "blobs"), signer)


def install_assets(app: QuartTrio, assets: AssetBlobs) -> None:
    """Mount the ``/blobs/`` endpoint in front of *app* and run the sweep while it serves."""
    app.extensions[_EXTENSION_KEY] = assets
    app.register_blueprint(blueprint)
    app.asgi_app = BlobRoutes(app.asgi_app, BlobEndpoint(assets))  # type: ignore[method-assign,assignment]

    @app.before_serving
    async def _start_sweeper() -> None:
        app.nursery.start_soon(assets.run_sweeper)

    @app.after_serving
    async def _stop_sweeper() -> None:
        assets.stop_sweeper()


def _assets() -> AssetBlobs:
    from quart import current_app  # noqa: PLC0415 - only inside a request

    found = current_app.extensions[_EXTENSION_KEY]
    assert isinstance(found, AssetBlobs)
    return found


def _base_url() -> str:
    public = state().config.public_url
    return public.rstrip("/") if public is not None else request.host_url.rstrip("/")


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
    if upload_url:
        view["signedUploadUrl"] = _assets().signed_url(_base_url(), Operation.UPLOAD, asset.id)
    if download_url:
        view["signedDownloadUrl"] = _assets().signed_url(_base_url(), Operation.DOWNLOAD, asset.id)
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
    query = params()
    name, prefix = query.get("nameFilter"), query.get("namePrefixFilter")
    found = await state().store.list_assets(
        principal().org_id,
        name=None if name is None else str(name),
        name_prefix=None if prefix is None else str(prefix),
        limit=int(query["limit"]),  # type: ignore[call-overload]
    )
    upload, download = bool(query["includeUploadUrl"]), bool(query["includeDownloadUrl"])
    return jsonify([asset_view(a, upload_url=upload, download_url=download) for a in found])


@blueprint.get("/v1/assets/<id>")
async def get_asset(id: str) -> Response:
    asset = await _visible(id)
    return jsonify(asset_view(asset, download_url=bool(params()["includeDownloadUrl"])))


@blueprint.delete("/v1/assets/<id>")
async def delete_asset(id: str) -> Response:
    try:
        asset = await _assets().delete(principal().org_id, id)
    except store_errors.NotFound as exc:
        raise NotFound(f"asset {id!r} not found") from exc
    return jsonify(asset_view(asset))
