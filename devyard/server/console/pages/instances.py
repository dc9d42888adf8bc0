"""Instances: a live table per platform, filters, create, delete, and the instance page.

Everything is read and written through the API (``/v1/<platform>_instances``) as the
signed-in session; the table refreshes itself by htmx polling its fragment
(``/console/instances/table``) every few seconds.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Final

from quart import Blueprint, request

from ..context import api, checked_form, form_csrf, redirect_to, render, viewer
from ..inprocess import ApiFailure
from ..nav import NavEntry

__all__ = ["NAV", "PLATFORMS", "STATES", "blueprint"]

blueprint = Blueprint("instances", __name__, url_prefix="/console/instances")
NAV = NavEntry("Instances", "/console/instances/")

PLATFORMS: Final = ("android", "ios", "xcode", "gradle")
STATES: Final = ("creating", "assigned", "ready", "terminated")
_PAGE: Final = "100"


def platform_of(instance_id: str) -> str:
    kind = instance_id.partition("_")[0]
    return kind if kind in PLATFORMS else "android"


def age(created_at: str, now: datetime | None = None) -> str:
    """``3 min``, ``2 h``, ``5 d``: how long ago *created_at* (RFC 3339) was."""
    try:
        then = datetime.fromisoformat(created_at.replace("Z", "+00:00"))
    except ValueError:
        return ""
    seconds = max(0, int(((now or datetime.now(UTC)) - then).total_seconds()))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min"
    if seconds < 86400:
        return f"{seconds // 3600} h"
    return f"{seconds // 86400} d"


def _filters() -> dict[str, str]:
    platform = request.args.get("platform", "android")
    values = {
        "platform": platform if platform in PLATFORMS else "android",
        "labelSelector": request.args.get("labelSelector", "").strip(),
        "state": request.args.get("state", "").strip(),
    }
    if values["state"] and values["state"] not in STATES:
        values["state"] = ""
    return values


async def _list(filters: dict[str, str]) -> dict[str, Any]:
    params = {"limit": _PAGE}
    if filters["labelSelector"]:
        params["labelSelector"] = filters["labelSelector"]
    if filters["state"]:
        params["state"] = filters["state"]
    else:  # live ones by default; terminated ones when asked for
        params["state"] = "creating,assigned,ready"
    page: dict[str, Any] = await api().json(
        "GET", f"/v1/{filters['platform']}_instances", params=params
    )
    return page


async def people(org_id: str) -> dict[str, str]:
    """The organization's members by user id, for ``metadata.createdBy`` (viewers may list
    them); empty when the API refuses."""
    try:
        members = await api().json("GET", f"/organizations/{org_id}/members")
    except ApiFailure as exc:
        if exc.status == 401:
            raise
        return {}
    return {m["user"]["id"]: m["user"]["name"] for m in members}


@blueprint.get("/")
async def index() -> str:
    who = await viewer()
    filters = _filters()
    page = await _list(filters)
    return await render(
        "console/instances/index.html",
        who=who,
        filters=filters,
        page=page,
        platforms=PLATFORMS,
        states=STATES,
        age=age,
        people=await people(who.org_id),
    )


@blueprint.get("/table")
async def table() -> str:
    """The table's rows alone: what the page polls."""
    who = await viewer()
    filters = _filters()
    page = await _list(filters)
    return await render(
        "console/instances/_table.html",
        who=who,
        filters=filters,
        page=page,
        age=age,
        people=await people(who.org_id),
    )


# ---- create -------------------------------------------------------------------------------


def parse_labels(text: str) -> dict[str, str]:
    """``key=value`` pairs, one a line or comma-separated; a pair without ``=`` is an error."""
    labels: dict[str, str] = {}
    for raw in text.replace(",", "\n").splitlines():
        pair = raw.strip()
        if not pair:
            continue
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"label {pair!r} is not key=value")
        labels[key.strip()] = value.strip()
    return labels


def create_body(form: Any) -> tuple[str, dict[str, Any]]:
    """The platform and the ``InstanceCreate`` body of the create form (ValueError: a field
    the page itself can tell is wrong; everything else the API judges)."""
    platform = form.get("platform", "android")
    if platform not in PLATFORMS:
        raise ValueError(f"unknown platform {platform!r}")
    spec: dict[str, Any] = {}
    for field in ("model", "region", "inactivityTimeout", "hardTimeout", "tunnel"):
        value = form.get(field, "").strip()
        if value:
            spec[field] = value
    assets = [a for a in form.getlist("asset") if a]
    if assets:
        spec["initialAssets"] = [{"kind": "App", "source": "AssetIDs", "assetIds": assets}]
    metadata: dict[str, Any] = {}
    labels = parse_labels(form.get("labels", ""))
    if labels:
        metadata["labels"] = labels
    name = form.get("displayName", "").strip()
    if name:
        metadata["displayName"] = name
    body: dict[str, Any] = {"spec": spec}
    if metadata:
        body["metadata"] = metadata
    return platform, body


async def _choices(who: Any) -> dict[str, Any]:
    """Regions, assets and (for admins, who may list them) tunnels for the create form."""
    regions = await api().json("GET", "/regions")
    assets = await api().json("GET", "/v1/assets", params={"limit": "200"})
    tunnels: list[Any] = []
    if who.admin:
        tunnels = await api().json("GET", "/v1/tunnels")
    return {"regions": regions, "assets": assets, "tunnels": tunnels}


async def _create_page(values: Any, error: str | None = None, status: int = 200) -> Any:
    who = await viewer()
    page = await render(
        "console/instances/new.html",
        who=who,
        values=values,
        selected_assets=values.getlist("asset") if hasattr(values, "getlist") else [],
        error=error,
        platforms=PLATFORMS,
        **await _choices(who),
    )
    return page, status


@blueprint.get("/new")
async def new() -> Any:
    return await _create_page({"platform": request.args.get("platform", "android")})


@blueprint.post("/new")
async def create() -> Any:
    form = await checked_form()
    try:
        platform, body = create_body(form)
    except ValueError as exc:
        return await _create_page(form, str(exc), 400)
    try:
        made = await api().json("POST", f"/v1/{platform}_instances", body=body, csrf=form_csrf())
    except ApiFailure as exc:
        if exc.status == 401:
            raise
        return await _create_page(form, exc.message, exc.status)
    return redirect_to(f"/console/instances/{made['id']}")


# ---- delete -------------------------------------------------------------------------------


@blueprint.post("/delete")
async def delete() -> Any:
    """Delete one instance or a selection; each through ``DELETE /v1/<platform>_instances``."""
    form = await checked_form()
    ids = [i for i in form.getlist("id") if i]
    back = form.get("back", "")
    platform = form.get("platform", "android")
    target = back if back.startswith("/console/") else f"/console/instances/?platform={platform}"
    if not ids:
        return redirect_to(target)
    failures: list[str] = []
    for instance_id in ids[:100]:
        try:
            await api().json(
                "DELETE", f"/v1/{platform_of(instance_id)}_instances/{instance_id}",
                csrf=form_csrf(),
            )  # fmt: skip
        except ApiFailure as exc:
            if exc.status == 401:
                raise
            failures.append(f"{instance_id}: {exc.message}")
    if failures:
        who = await viewer()
        return await render(
            "console/error.html", who=who, status=409, message="; ".join(failures)
        ), 409
    return redirect_to(target)
