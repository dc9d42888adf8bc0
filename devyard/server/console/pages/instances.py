"""Instances: a live table per platform, filters, create, delete, and the instance page.

Everything is read and written through the API (``/v1/<platform>_instances``) as the
signed-in session; the table refreshes itself by htmx polling its fragment
(``/console/instances/table``) every few seconds.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Final

from quart import Blueprint, request

from ..context import api, render, viewer
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
    )


@blueprint.get("/table")
async def table() -> str:
    """The table's rows alone: what the page polls."""
    who = await viewer()
    filters = _filters()
    page = await _list(filters)
    return await render(
        "console/instances/_table.html", who=who, filters=filters, page=page, age=age
    )
