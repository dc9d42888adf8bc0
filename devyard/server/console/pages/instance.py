"""The instance page: state and facts, the live device view, its URLs (each with a copy
button), a view-only share link, its logs, delete.

- The live view is the viewer page of ``signedStreamUrl`` in an iframe (the edge's
  ``viewer.html``: H.264 or JPEG, pointer and touch input), the very stream and input a
  ``signedStreamUrl`` gives; a viewer's URL carries a view token, so it only watches.
- Share view: a view-only link (``…/watch?token=dyv_…``). For a caller that only views, that
  is its ``signedStreamUrl`` already. For a caller that controls the instance it is the view
  token of the instance's stream token made for the session's API key (``viewing.view_token``,
  pure): it opens the stream and nothing else, and stops when the instance ends or the key
  is revoked (docs/security.md, "The stream-token model").
- Logs: a build instance's execs (the builds page); for a device, the instance's lifecycle
  (created, state, termination reason and error) as the API reports it.
"""

from __future__ import annotations

from typing import Any, Final
from urllib.parse import urlsplit

from quart import Blueprint, Response, request

from ...viewing import view_token
from ..context import api, render, viewer
from .instances import PLATFORMS, age, people, platform_of

__all__ = ["NAV", "blueprint"]

blueprint = Blueprint("instance", __name__, url_prefix="/console/instances")
NAV = None  # reached from the instances table

#: The URLs of ``status`` shown with a copy button, in this order.
URL_FIELDS: Final = (
    ("apiUrl", "Device API"),
    ("endpointWebSocketUrl", "Stream WebSocket"),
    ("adbWebSocketUrl", "ADB WebSocket"),
    ("mcpUrl", "MCP"),
    ("targetHttpPortUrlPrefix", "Device ports (prefix)"),
    ("signedStreamUrl", "Signed stream URL"),
)
_BUILDS: Final = ("gradle", "xcode")


def share_url(instance: dict[str, Any], who_key_prefix: str | None) -> str | None:
    """The view-only link of a ready instance with a stream, or None."""
    status = instance.get("status", {})
    signed = status.get("signedStreamUrl")
    if not signed:
        return None
    query = urlsplit(signed).query
    if "token=dyv_" in query:  # a view token already: the caller only views
        return str(signed)
    stream = status.get("streamToken")
    if not stream or not who_key_prefix:
        return None
    lookup = who_key_prefix.partition("_")[2]
    base = signed.partition("?")[0]
    return f"{base}?token={view_token(stream, lookup)}"


@blueprint.get("/<instance_id>")
async def show(instance_id: str) -> str:
    who = await viewer()
    platform = platform_of(instance_id)
    instance = await api().json("GET", f"/v1/{platform}_instances/{instance_id}")
    builds: list[Any] = []
    if platform in _BUILDS:
        builds = await api().json("GET", f"/v1/{platform}_instances/{instance_id}/build_logs")
    status = instance["status"]
    urls = [(label, status[field]) for field, label in URL_FIELDS if status.get(field)]
    return await render(
        "console/instances/show.html",
        who=who,
        instance=instance,
        platform=platform,
        urls=urls,
        share=share_url(instance, who.key_prefix),
        builds=builds,
        is_build=platform in _BUILDS,
        age=age,
        platforms=PLATFORMS,
        people=await people(who.org_id),
    )


@blueprint.get("/<instance_id>/state")
async def state_fragment(instance_id: str) -> Response:
    """The facts box alone, polled while the instance is not ready yet; once its state is
    not the one the page shows (``?was=``), the whole page reloads (the live view, URLs)."""
    who = await viewer()
    platform = platform_of(instance_id)
    instance = await api().json("GET", f"/v1/{platform}_instances/{instance_id}")
    body = await render(
        "console/instances/_facts.html",
        who=who,
        instance=instance,
        platform=platform,
        age=age,
        people=await people(who.org_id),
    )
    response = Response(body, content_type="text/html; charset=utf-8")
    if instance["status"]["state"] != request.args.get("was"):
        response.headers["HX-Refresh"] = "true"
    return response
