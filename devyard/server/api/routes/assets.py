"""``/v1/assets``: get-or-create by name (``PUT``), list, get, delete; the JSON side of assets.

The bytes do not pass through here: the records carry signed URLs of the ``/blobs/`` endpoint
(`devyard.server.blobs.http`), which `install_assets` mounts in front of the app together with
the expiry sweep, run by the app's lifespan while it serves.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

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
from .._errors import BadRequest, NotFound, Unprocessable
from ..context import body, params, principal, state
from ..views import timestamp

__all__ = [
    "asset_view",
    "blueprint",
    "install_assets",
    "local_asset_blobs",
    "resolve_initial_assets",
]

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


# -- spec.initialAssets (docs/assets.md "Initial apps") -----------------------------------------

_SOURCE_FIELDS: Final = {
    "AssetName": "assetName",
    "AssetNames": "assetNames",
    "AssetIDs": "assetIds",
    "URL": "url",
    "URLs": "urls",
}


async def _asset_for(org_id: str, *, name: str | None = None, asset_id: str | None = None) -> Asset:
    store = state().store
    what = f"asset {name!r}" if name is not None else f"asset id {asset_id!r}"
    try:
        if asset_id is not None:
            return await store.get_asset(asset_id, org_id=org_id)
        found = await store.list_assets(org_id, name=name, limit=1)
    except store_errors.NotFound as exc:
        raise NotFound(f"spec.initialAssets: {what} not found") from exc
    if not found:
        raise NotFound(f"spec.initialAssets: {what} not found")
    return found[0]


async def resolve_initial_assets(
    org_id: str, platform: str, spec: Mapping[str, Any]
) -> tuple[dict[str, Any], ...]:
    """What a host installs for ``spec.initialAssets``: one entry per file, in order, each with
    a URL it can download without a key (signed for assets). A missing asset is 404, an asset
    without bytes or for the other platform 422, naming it; so is an instance that installs no
    apps (xcode, gradle). The document requires each source's field; checked again here."""
    entries = spec.get("initialAssets") or []
    if entries and platform not in ("ios", "android"):
        raise Unprocessable("spec.initialAssets: only ios and android instances install apps")
    resolved: list[dict[str, Any]] = []
    for index, entry in enumerate(entries):
        source = str(entry["source"])
        field = _SOURCE_FIELDS[source]
        value = entry.get(field)
        if not value:
            raise BadRequest(f"spec.initialAssets[{index}].{field} is required for {source}")
        values = list(value) if isinstance(value, list) else [value]
        common = {
            "kind": entry["kind"],
            "launchMode": entry.get("launchMode"),
            "forceBundleId": entry.get("forceBundleId"),
        }
        for item in values:
            if source in ("URL", "URLs"):
                resolved.append({**common, "name": str(item), "url": str(item), "md5": None})
                continue
            asset = await (
                _asset_for(org_id, asset_id=str(item))
                if source == "AssetIDs"
                else _asset_for(org_id, name=str(item))
            )
            if asset.md5 is None:
                raise Unprocessable(f"spec.initialAssets: asset {asset.name!r} has no bytes yet")
            if asset.os is not None and asset.os != platform:
                raise Unprocessable(
                    f"spec.initialAssets: asset {asset.name!r} is for {asset.os}, not {platform}"
                )
            url = _assets().signed_url(_base_url(), Operation.DOWNLOAD, asset.id)
            resolved.append({**common, "name": asset.name, "url": url, "md5": asset.md5})
    return tuple(resolved)
