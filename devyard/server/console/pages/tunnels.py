"""Tunnels: the organization's persistent and quick tunnels, live (online or offline, the
active connector and the standbys), create, edit the selectors, rotate the token, delete.

Every call goes through ``/v1/tunnels`` (admins only: the API answers 403 to anyone else,
and the menu shows the page to admins only). A token (create, rotate) is rendered once, in
the answer to the post that made it, with the exact ``devyard connector run`` command; it is
never redirected to, stored or rendered again (the page is ``no-store`` like every page).
"""

from __future__ import annotations

import shlex
from typing import Any, Final
from urllib.parse import quote

from quart import Blueprint

from ...api.views import base_url
from ..context import api, checked_form, form_csrf, redirect_to, render, viewer
from ..inprocess import ApiFailure
from ..nav import NavEntry
from .instances import age

__all__ = ["NAV", "blueprint", "connector_command", "parse_selectors"]

blueprint = Blueprint("tunnels", __name__, url_prefix="/console/tunnels")
NAV = NavEntry("Tunnels", "/console/tunnels/", least_role="admin")

_MONTHS: Final = (1, 3, 6, 12, 24, 36, 60)


def parse_selectors(text: str) -> list[str]:
    """Selectors, one a line or comma/space-separated (the API validates each)."""
    return [s for s in text.replace(",", " ").split() if s]


def connector_command(token: str, server: str) -> str:
    """The command that runs the tunnel's connector, as ``devyard tunnels create`` prints it."""
    return (
        f"DEVYARD_TUNNEL_TOKEN={shlex.quote(token)} devyard connector run "
        f"--server {shlex.quote(server)}"
    )


def _path(name: str) -> str:
    return f"/v1/tunnels/{quote(name, safe='')}"


async def _index(values: Any = None, error: str | None = None, status: int = 200) -> Any:
    who = await viewer()
    tunnels = await api().json("GET", "/v1/tunnels")
    page = await render(
        "console/tunnels/index.html",
        who=who,
        tunnels=tunnels,
        values=values or {},
        error=error,
        months=_MONTHS,
        age=age,
    )
    return page, status


@blueprint.get("/")
async def index() -> Any:
    return await _index()


@blueprint.get("/table")
async def table() -> str:
    """The table alone: what the page polls."""
    who = await viewer()
    tunnels = await api().json("GET", "/v1/tunnels")
    return await render("console/tunnels/_table.html", who=who, tunnels=tunnels, age=age)


async def _token_page(tunnel: dict[str, Any], said: str) -> str:
    who = await viewer()
    return await render(
        "console/tunnels/token.html",
        who=who,
        tunnel=tunnel,
        said=said,
        command=connector_command(str(tunnel["token"]), base_url()),
    )


@blueprint.post("/new")
async def create() -> Any:
    form = await checked_form()
    body: dict[str, Any] = {
        "name": form.get("name", "").strip(),
        "selectors": parse_selectors(form.get("selectors", "")),
    }
    months = form.get("tokenExpiryMonths", "").strip()
    if months:
        if not months.isdigit():
            return await _index(form, "The token expiry is a number of months.", 400)
        body["tokenExpiryMonths"] = int(months)
    if form.get("ephemeral"):
        body["ephemeral"] = True
    try:
        made = await api().json("POST", "/v1/tunnels", body=body, csrf=form_csrf())
    except ApiFailure as exc:
        if exc.status == 401:
            raise
        return await _index(form, exc.message, exc.status)
    return await _token_page(made, "Created")


async def _show(name: str, error: str | None = None, status: int = 200) -> Any:
    who = await viewer()
    tunnel = await api().json("GET", _path(name))
    page = await render(
        "console/tunnels/show.html", who=who, tunnel=tunnel, error=error, months=_MONTHS, age=age
    )
    return page, status


@blueprint.get("/<name>")
async def show(name: str) -> Any:
    return await _show(name)


@blueprint.post("/<name>/selectors")
async def edit(name: str) -> Any:
    form = await checked_form()
    body = {"selectors": parse_selectors(form.get("selectors", ""))}
    try:
        await api().json("PATCH", _path(name), body=body, csrf=form_csrf())
    except ApiFailure as exc:
        if exc.status in (401, 404):
            raise
        return await _show(name, exc.message, exc.status)
    return redirect_to(f"/console/tunnels/{quote(name, safe='')}")


@blueprint.post("/<name>/rotate")
async def rotate(name: str) -> Any:
    form = await checked_form()
    params = {}
    months = form.get("tokenExpiryMonths", "").strip()
    if months.isdigit():
        params["tokenExpiryMonths"] = months
    rotated = await api().json("POST", f"{_path(name)}/rotate", params=params, csrf=form_csrf())
    return await _token_page(rotated, "Rotated the token of")


@blueprint.post("/<name>/delete")
async def delete(name: str) -> Any:
    await checked_form()
    await api().json("DELETE", _path(name), csrf=form_csrf())
    return redirect_to("/console/tunnels/")
