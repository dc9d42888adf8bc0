"""Billing (admins): the plan and the plan catalog with change actions, the upcoming invoice
and payment method, the past invoices (up to 6), and the provider's portal.

Reads ``/organizations/{id}/plans``, ``/subscriptions``, ``/billing-details``, ``/invoices``
and ``/plan/schedule``. Changing plan (``POST .../plan``) and the portal (``GET
.../billing``) answer a URL at the payment provider: the console redirects the browser
there. With the provider ``none`` the API says what it cannot do, and the page shows that
message (no portal, no payment method) and what it can (plans, invoices by usage).
"""

from __future__ import annotations

from typing import Any

from quart import Blueprint, Response

from ..context import api, checked_form, form_csrf, redirect_to, render, viewer
from ..inprocess import ApiFailure
from ..nav import NavEntry

__all__ = ["NAV", "blueprint", "money"]

blueprint = Blueprint("billing", __name__, url_prefix="/console/billing")
NAV = NavEntry("Billing", "/console/billing/", least_role="admin")


def money(amount: int | None, currency: str | None) -> str:
    """Minor units as ``12.50 USD``."""
    if amount is None:
        return "—"
    return f"{amount / 100:,.2f} {(currency or '').upper()}".strip()


async def _optional(path: str) -> Any:
    """A read that the provider may not offer: its JSON, or the API's message."""
    answer = await api().call("GET", path)
    if answer.status == 401:
        raise ApiFailure(401, "signed out", None)
    if answer.status >= 400:
        body = answer.json() or {}
        return {"unavailable": body.get("message", f"the API answered {answer.status}")}
    return answer.json()


async def _index(error: str | None = None, status: int = 200) -> Any:
    who = await viewer()
    org = f"/organizations/{who.org_id}"
    plans = await api().json("GET", f"{org}/plans")
    page = await render(
        "console/billing/index.html",
        who=who,
        plans=plans,
        current=next((p["plan"] for p in plans if p["action"] == "current"), None),
        subscriptions=await _optional(f"{org}/subscriptions"),
        details=await _optional(f"{org}/billing-details"),
        invoices=await _optional(f"{org}/invoices"),
        schedule=await _optional(f"{org}/plan/schedule"),
        error=error,
        money=money,
    )
    return page, status


@blueprint.get("/")
async def index() -> Any:
    return await _index()


async def _to_provider(method: str, path: str, body: object = None) -> Any:
    try:
        answer = await api().json(method, path, body=body, csrf=form_csrf())
    except ApiFailure as exc:
        if exc.status == 401:
            raise
        return await _index(exc.message, exc.status)
    return redirect_to(str(answer["url"]))


@blueprint.post("/plan")
async def change_plan() -> Any:
    form = await checked_form()
    who = await viewer()
    body = {"priceId": form.get("priceId", "")}
    return await _to_provider("POST", f"/organizations/{who.org_id}/plan", body)


@blueprint.post("/portal")
async def portal() -> Any:
    await checked_form()
    who = await viewer()
    return await _to_provider("GET", f"/organizations/{who.org_id}/billing")


@blueprint.post("/schedule/release")
async def release() -> Response:
    await checked_form()
    who = await viewer()
    await api().json("DELETE", f"/organizations/{who.org_id}/plan/schedule", csrf=form_csrf())
    return redirect_to("/console/billing/")
