"""Assets: the organization's app files (name, platform, size, md5, expiry), upload by drag
and drop with a progress bar, download, delete.

An upload is two steps, as for every client (docs/assets.md): the page posts the name,
platform and lifetime here (``/console/assets/new``), which upserts the record through
``PUT /v1/assets`` and answers its signed upload URL; the browser then PUTs the bytes
straight to that URL (``static/assets.js``, XHR upload progress events), so the bytes never
pass through a console handler. Without JavaScript the same form answers a page with the
signed URL and the ``curl`` command that uploads the file. Download redirects to the
asset's signed download URL, asked for at the moment of the click.
"""

from __future__ import annotations

import shlex
from typing import Any, Final
from urllib.parse import quote

from quart import Blueprint, Response, jsonify, request

from ..context import api, checked_form, form_csrf, redirect_to, render, viewer
from ..inprocess import ApiFailure
from ..nav import NavEntry

__all__ = ["NAV", "blueprint", "human_size"]

blueprint = Blueprint("assets", __name__, url_prefix="/console/assets")
NAV = NavEntry("Assets", "/console/assets/")

PLATFORMS: Final = ("", "android", "ios")
_PAGE: Final = 500


def human_size(size: int | None) -> str:
    if size is None:
        return "—"
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"  # pragma: no cover - the loop returns


async def _list() -> list[Any]:
    assets: list[Any] = await api().json("GET", "/v1/assets", params={"limit": str(_PAGE)})
    return assets


async def _index(values: Any = None, error: str | None = None, status: int = 200) -> Any:
    who = await viewer()
    page = await render(
        "console/assets/index.html",
        who=who,
        assets=await _list(),
        values=values or {},
        error=error,
        platforms=PLATFORMS,
        human_size=human_size,
        more=_PAGE,
    )
    return page, status


@blueprint.get("/")
async def index() -> Any:
    return await _index()


@blueprint.get("/table")
async def table() -> str:
    who = await viewer()
    return await render(
        "console/assets/_table.html", who=who, assets=await _list(), human_size=human_size
    )


def upsert_body(form: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"name": form.get("name", "").strip()}
    platform = form.get("platform", "")
    if platform:
        body["platform"] = platform
    ttl = form.get("ttl", "").strip()
    if ttl:
        body["ttl"] = int(ttl) if ttl.isdigit() else ttl
    return body


@blueprint.post("/new")
async def create() -> Any:
    """Upsert the record; JSON ``{id, name, signedUploadUrl}`` for the page's script, else a
    page with the URL and the ``curl`` command."""
    form = await checked_form()
    wants_json = "application/json" in request.headers.get("Accept", "")
    try:
        asset = await api().json("PUT", "/v1/assets", body=upsert_body(form), csrf=form_csrf())
    except ApiFailure as exc:
        if exc.status == 401 or not wants_json:
            if exc.status == 401:
                raise
            return await _index(form, exc.message, exc.status)
        response = jsonify({"message": exc.message, "reason": exc.reason})
        response.status_code = exc.status
        return response
    if wants_json:
        return jsonify(
            {"id": asset["id"], "name": asset["name"], "signedUploadUrl": asset["signedUploadUrl"]}
        )
    who = await viewer()
    url = asset["signedUploadUrl"]
    command = (
        "curl --fail -X PUT -H 'Content-Type: application/octet-stream' "
        f"--data-binary @FILE {shlex.quote(url)}"
    )
    return await render("console/assets/upload.html", who=who, asset=asset, command=command)


@blueprint.get("/<asset_id>/download")
async def download(asset_id: str) -> Response:
    await viewer()
    asset = await api().json(
        "GET", f"/v1/assets/{quote(asset_id, safe='')}", params={"includeDownloadUrl": "true"}
    )
    if not asset.get("md5"):
        return redirect_to("/console/assets/")
    return redirect_to(str(asset["signedDownloadUrl"]), 303)


@blueprint.post("/<asset_id>/delete")
async def delete(asset_id: str) -> Response:
    await checked_form()
    await api().json("DELETE", f"/v1/assets/{quote(asset_id, safe='')}", csrf=form_csrf())
    return redirect_to("/console/assets/")
