"""Builds: the build instances (Gradle, Xcode), each one's execs with the live log, their
artifacts, and the logs of ended builds.

- Ended execs come from the API (``GET /v1/<platform>_instances/{id}/build_logs``: kept
  after the instance ends); a log is shown in the page by fetching its signed
  ``downloadUrl`` through the API in-process (the signature, handed out by that authorized
  list, is its credential).
- Live execs are on the instance's own ``apiUrl`` (docs/builds.md), which takes the
  instance token, not a session: the page gets the token only when the API shows it to the
  signed-in user (members and admins: ``status.token``) and ``static/builds.js`` lists the
  execs (``GET {apiUrl}/exec``) and follows each running one's event stream
  (``GET {apiUrl}/exec/{id}/events?token=``, an EventSource cannot send a header). A viewer
  sees the ended builds only, as with the API.
"""

from __future__ import annotations

from typing import Any, Final
from urllib.parse import parse_qsl, urlsplit

from quart import Blueprint

from ..context import api, render, viewer
from ..inprocess import failure
from ..nav import NavEntry
from .instances import age, platform_of

__all__ = ["BUILD_PLATFORMS", "NAV", "blueprint"]

blueprint = Blueprint("builds", __name__, url_prefix="/console/builds")
NAV = NavEntry("Builds", "/console/builds/")

BUILD_PLATFORMS: Final = ("gradle", "xcode")
_MAX_LOG_CHARS: Final = 2_000_000


@blueprint.get("/")
async def index() -> str:
    who = await viewer()
    instances: list[tuple[str, dict[str, Any]]] = []
    for platform in BUILD_PLATFORMS:
        page = await api().json("GET", f"/v1/{platform}_instances", params={"limit": "100"})
        instances.extend((platform, item) for item in page["items"])
    instances.sort(key=lambda pair: pair[1]["metadata"]["createdAt"], reverse=True)
    return await render("console/builds/index.html", who=who, instances=instances, age=age)


async def _instance(instance_id: str) -> tuple[str, dict[str, Any]]:
    platform = platform_of(instance_id)
    if platform not in BUILD_PLATFORMS:
        platform = "gradle"  # the API answers 404 for an id of another platform
    found: dict[str, Any] = await api().json("GET", f"/v1/{platform}_instances/{instance_id}")
    return platform, found


@blueprint.get("/<instance_id>")
async def show(instance_id: str) -> str:
    who = await viewer()
    platform, instance = await _instance(instance_id)
    ended = await api().json("GET", f"/v1/{platform}_instances/{instance_id}/build_logs")
    status = instance["status"]
    live = status.get("state") == "ready" and status.get("token") and status.get("apiUrl")
    return await render(
        "console/builds/show.html",
        who=who,
        instance=instance,
        platform=platform,
        ended=list(reversed(ended)),
        live=bool(live),
        age=age,
    )


@blueprint.get("/<instance_id>/logs/<exec_id>")
async def log(instance_id: str, exec_id: str) -> str | tuple[str, int]:
    """An ended exec's log, read through its signed ``downloadUrl``."""
    who = await viewer()
    platform, instance = await _instance(instance_id)
    ended = await api().json("GET", f"/v1/{platform}_instances/{instance_id}/build_logs")
    record = next((r for r in ended if r.get("id") == exec_id), None)
    if record is None:
        message = f"no ended build {exec_id!r}"
        return await render("console/error.html", who=who, status=404, message=message), 404
    url = urlsplit(record["downloadUrl"])
    params = dict(parse_qsl(url.query))
    answer = await api().call("GET", url.path, params=params)
    if answer.status >= 400:
        raise failure(answer)
    text = answer.body.decode("utf-8", "replace")
    truncated = len(text) > _MAX_LOG_CHARS
    return await render(
        "console/builds/log.html",
        who=who,
        instance=instance,
        record=record,
        text=text[-_MAX_LOG_CHARS:],
        truncated=truncated,
    )
