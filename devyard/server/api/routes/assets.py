"""``/v1/assets``: get-or-create by name (``PUT``), list, get, delete; the JSON side of assets.

The upsert also takes what the commercial service's SDKs send (docs/compatibility.md):
``platform`` as an alias of ``os`` (``xcode`` is an iOS build product: stored as ``ios``),
``ttl`` as a duration string (``24h``, ``1h30m``) as well as seconds, and ``kind``,
``displayName`` and the bundle metadata, which are accepted and not stored (devyard keeps
app files only and reads an app's identity from the file when it installs it); the answer
echoes ``kind`` (``App`` unless another was sent) and ``platform``.

The bytes do not pass through here: the records carry signed URLs of the ``/blobs/`` endpoint
(`devyard.server.blobs.http`), which ``create_app`` mounts in front of the app together with
the expiry sweep, run by the app's lifespan while it serves.
"""

from __future__ import annotations

from typing import Any, Final

from quart import Blueprint, Response, jsonify

from ...blobs import Operation
from ...instances.durations import InvalidDuration, parse_duration
from ...store import errors as store_errors
from ...store.base import Asset, Role
from .._errors import BadRequest, Forbidden, NotFound
from ..auth import role_at_least
from ..context import body, bool_param, int_param, principal, state, str_param
from ..views import base_url, timestamp

__all__ = ["asset_view", "blueprint"]

blueprint = Blueprint("assets", __name__)

_KIND: Final = "App"  # what every devyard asset is: an app file
# ``platform`` values of the SDKs -> the stored ``os``
_MIN_TTL: Final = 60  # the SDKs' documented minimum for a duration string
_PLATFORM_OS: Final = {"ios": "ios", "android": "android", "xcode": "ios"}


def asset_view(
    asset: Asset, *, upload_url: bool = False, download_url: bool = False
) -> dict[str, Any]:
    view: dict[str, Any] = {"id": asset.id, "name": asset.name, "kind": _KIND}
    if asset.os is not None:
        view["os"] = asset.os
        view["platform"] = asset.os
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
        view["signedDownloadUrl"] = blobs.signed_url(
            base_url(), Operation.DOWNLOAD, asset.id, blob_key=asset.blob_key
        )
    return view


def _upload_url_param() -> bool:
    """``includeUploadUrl``, for a caller that may write assets (an upload URL writes)."""
    if not bool_param("includeUploadUrl"):
        return False
    caller = principal()
    if caller.read_only or not role_at_least(caller.role, Role.MEMBER):
        raise Forbidden(
            "includeUploadUrl needs a key that may write assets (member or above, not read-only)"
        )
    return True


async def _visible(asset_id: str) -> Asset:
    try:
        return await state().store.get_asset(asset_id, org_id=principal().org_id)
    except store_errors.NotFound as exc:
        raise NotFound(f"asset {asset_id!r} not found") from exc


@blueprint.put("/v1/assets")
async def upsert_asset() -> Response:
    data = body()
    os_name, platform = data.get("os"), data.get("platform")
    if platform is not None:
        if os_name is not None:  # the document already refuses both
            raise BadRequest("send os or its alias platform, not both", reason="invalid_body")
        os_name = _PLATFORM_OS[platform]
    asset = await state().store.upsert_asset(
        org_id=principal().org_id, name=data["name"], os=os_name, ttl_s=_ttl(data.get("ttl"))
    )
    view = asset_view(asset, upload_url=True, download_url=True)
    view["kind"] = data.get("kind", _KIND)
    if platform is not None:
        view["platform"] = platform
    return jsonify(view)


def _ttl(value: int | str | None) -> int | None:
    """Seconds, from seconds or a duration string (``24h``; the document checks the form and
    bounds its size). Strings under the SDKs' documented minimum of 1m are raised to it."""
    if not isinstance(value, str):
        return value
    try:
        seconds = parse_duration("ttl", value)
    except InvalidDuration:
        # Over a week is fine for an asset: count the parts without the instances' limit.
        seconds = _long_duration(value)
    return max(_MIN_TTL, seconds)


def _long_duration(value: str) -> int:
    total, number = 0, ""
    for char in value:
        if char.isdigit():
            number += char
        else:
            total += int(number) * {"h": 3600, "m": 60, "s": 1}[char]
            number = ""
    return total


@blueprint.get("/v1/assets")
async def list_assets() -> Response:
    if str_param("kindFilter") not in (None, _KIND):
        return jsonify([])  # devyard keeps app files only
    found = await state().store.list_assets(
        principal().org_id,
        name=str_param("nameFilter"),
        name_prefix=str_param("namePrefixFilter"),
        limit=int_param("limit"),
        starting_after=str_param("startingAfter"),
    )
    upload, download = _upload_url_param(), bool_param("includeDownloadUrl")
    return jsonify([asset_view(a, upload_url=upload, download_url=download) for a in found])


@blueprint.get("/v1/assets/<id>")
async def get_asset(id: str) -> Response:
    asset = await _visible(id)
    return jsonify(
        asset_view(
            asset,
            upload_url=_upload_url_param(),
            download_url=bool_param("includeDownloadUrl"),
        )
    )


@blueprint.delete("/v1/assets/<id>")
async def delete_asset(id: str) -> Response:
    try:
        asset = await state().assets.delete(principal().org_id, id)
    except store_errors.NotFound as exc:
        raise NotFound(f"asset {id!r} not found") from exc
    return jsonify(asset_view(asset))
