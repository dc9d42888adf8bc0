"""Operators (the deployment's operators, docs/accounts.md): the host daemons linked to this
server (capacity, platforms, drivers, running instances, version, linked since) and the
support messages of every organization with their answers, answered from the page.

Reads ``GET /operator/hosts`` and ``GET /operator/supportMessages``; answers with ``POST
/operator/supportMessages/{id}/answer``. Operators are no organization role: the menu shows
the page to admins, and for anyone the API does not know as an operator the page says so
(the API's 403 message) and shows nothing else.
"""

from __future__ import annotations

from typing import Any

from quart import Blueprint

from ..context import api, checked_form, form_csrf, redirect_to, render, viewer
from ..inprocess import ApiFailure
from ..nav import NavEntry

__all__ = ["NAV", "blueprint"]

blueprint = Blueprint("operators", __name__, url_prefix="/console/operators")
NAV = NavEntry("Operators", "/console/operators/", least_role="admin")


async def _index(error: str | None = None, status: int = 200) -> Any:
    who = await viewer()
    try:
        hosts = await api().json("GET", "/operator/hosts")
        messages = await api().json("GET", "/operator/supportMessages")
    except ApiFailure as exc:
        if exc.status != 403:
            raise
        page = await render("console/operators/index.html", who=who, refused=exc.message)
        return page, 403
    page = await render(
        "console/operators/index.html",
        who=who,
        refused=None,
        hosts=hosts,
        messages=messages,
        error=error,
    )
    return page, status


@blueprint.get("/")
async def index() -> Any:
    return await _index()


@blueprint.post("/messages/<message_id>/answer")
async def answer(message_id: str) -> Any:
    form = await checked_form()
    text = str(form.get("message", "")).strip()
    if not text:
        return await _index("write an answer first", 400)
    try:
        await api().json(
            "POST",
            f"/operator/supportMessages/{message_id}/answer",
            body={"message": text},
            csrf=form_csrf(),
        )
    except ApiFailure as exc:
        if exc.status == 401:
            raise
        return await _index(exc.message, exc.status)
    return redirect_to("/console/operators/")
