"""Plans and invoices (spec 4.2 ``/plans/{planTid}``, 4.5): the catalog of the server config and
invoices computed from the same usage rows analytics reads (docs/billing.md).

An organization is on the catalog's default plan until a subscription moves it (the payment
provider's half, a later step); ``/plans`` marks each plan ``current``, ``upgrade`` or
``downgrade`` by rank. Invoices are per UTC calendar month, up to the last six that overlap
``[from, to)``, amounts in integer minor units; ``timezone`` only formats the boundaries.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from quart import Blueprint, Response, jsonify

from ...billing.invoices import Invoice, compute_invoice, month_of, periods_between
from ...billing.plans import Plan
from ...store.base import UsageFilter
from .._errors import BadRequest, NotFound
from ..context import same_organization, state, str_param

__all__ = ["blueprint"]

blueprint = Blueprint("billing", __name__)

DEFAULT_TIMEZONE: Final = "America/Los_Angeles"  # spec 4.5


def plan_view(plan: Plan) -> dict[str, Any]:
    view: dict[str, Any] = {
        "tid": plan.tid,
        "name": plan.name,
        "description": plan.description,
        "rank": plan.rank,
        "currency": plan.currency,
        "monthlyFee": plan.monthly_fee,
        "includedMinutes": plan.included_minutes,
        "tiers": [{"upTo": t.up_to, "unitAmount": t.unit_amount} for t in plan.tiers],
        "credits": plan.credits,
        "concurrency": dict(plan.concurrency),
        "weights": dict(plan.weights),
    }
    if plan.price_id is not None:
        view["priceId"] = plan.price_id
    return view


def _current_plan() -> Plan:
    return state().config.billing.default


@blueprint.get("/plans/<planTid>")
async def get_plan(planTid: str) -> Response:
    plan = state().config.billing.get(planTid)
    if plan is None:
        raise NotFound(f"plan {planTid!r} not found")
    return jsonify(plan_view(plan))


@blueprint.get("/organizations/<organizationId>/plans")
async def list_plan_options(organizationId: str) -> Response:
    same_organization(organizationId)
    current = _current_plan()
    options = []
    for plan in sorted(state().config.billing.plans, key=lambda p: (p.rank, p.tid)):
        if plan.tid == current.tid:
            action = "current"
        else:
            action = "upgrade" if plan.rank > current.rank else "downgrade"
        options.append({"plan": plan_view(plan), "action": action})
    return jsonify(options)


def _moment(name: str) -> datetime | None:
    text = str_param(name)
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise BadRequest(f"{name}: expected an RFC 3339 date-time, got {text!r}") from None
    if moment.tzinfo is None:
        raise BadRequest(f"{name}: give a time zone offset (e.g. Z), got {text!r}")
    return moment.astimezone(UTC)


def _zone() -> tuple[str, ZoneInfo]:
    name = str_param("timezone") or DEFAULT_TIMEZONE
    try:
        return name, ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise BadRequest(f"timezone: not an IANA time zone name: {name!r}") from None


def _invoice_view(invoice: Invoice, zone: ZoneInfo, now: datetime) -> dict[str, Any]:
    return {
        "periodStart": invoice.period.start.astimezone(zone).isoformat(),
        "periodEnd": invoice.period.end.astimezone(zone).isoformat(),
        "status": "open" if invoice.period.end > now else "final",
        "planTid": invoice.plan_tid,
        "currency": invoice.currency,
        "minutes": invoice.minutes,
        "usage": [
            {
                "platform": u.platform,
                "minutes": u.minutes,
                "weightPercent": u.weight,
                "weightedMinutes": u.weighted_minutes,
            }
            for u in invoice.usage
        ],
        "includedMinutes": invoice.included_minutes,
        "billableMinutes": invoice.billable_minutes,
        "tiers": [
            {
                "firstMinute": t.first_minute,
                "upTo": t.up_to,
                "unitAmount": t.unit_amount,
                "quantity": t.quantity,
                "amount": t.amount,
            }
            for t in invoice.tiers
        ],
        "monthlyFee": invoice.monthly_fee,
        "subtotal": invoice.subtotal,
        "credits": {"available": invoice.credits_available, "used": invoice.credits_used},
        "total": invoice.total,
    }


@blueprint.get("/organizations/<organizationId>/invoices")
async def list_invoices(organizationId: str) -> Response:
    caller = same_organization(organizationId)
    name, zone = _zone()
    now = datetime.now(UTC)
    end = _moment("to") or now
    start = _moment("from") or month_of(month_of(end).start - timedelta(days=150)).start
    # from >= to selects no month: an empty list, as analytics answers an empty range
    plan = _current_plan()
    store = state().store
    invoices = []
    for period in periods_between(start, end):
        minutes = await store.billed_minutes_by_platform(
            caller.org_id, UsageFilter(started_from=period.start, started_before=period.end)
        )
        invoices.append(_invoice_view(compute_invoice(plan, period, minutes), zone, now))
    invoices.reverse()  # newest first
    return jsonify({"timezone": name, "currency": plan.currency, "invoices": invoices})
