"""Plans, invoices, subscriptions and the payment provider's pages (spec 4.2 ``/plans/{planTid}``,
4.5; docs/billing.md).

An organization is on the catalog's default plan until a subscription moves it
(`BillingService.current`); ``/plans`` marks each plan ``current``, ``upgrade`` or
``downgrade`` by rank. Invoices are per UTC calendar month, up to the last six that overlap
``[from, to)``, amounts in integer minor units; ``timezone`` only formats the boundaries.
The portal, checkout and plan-change endpoints answer ``{url}`` of a provider page; with
``billing.provider = none`` the portal and checkout are 409 ``no_payment_provider`` and a plan
change is applied (upgrade) or scheduled (downgrade) by devyard itself.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from quart import Blueprint, Response, jsonify

from ...billing.invoices import Invoice, compute_invoice, month_of, periods_between
from ...billing.plans import Plan
from ...billing.provider import BillingError, BillingReason, NoProvider
from ...store.base import UsageFilter
from ...store.billing import Subscription
from .._errors import APIError, BadRequest, Conflict, NotFound, Unavailable, Unprocessable
from ..context import body, same_organization, state, str_param
from ..views import timestamp

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


async def _current_plan(org_id: str) -> Plan:
    return (await state().billing.current(org_id))[0]


@blueprint.get("/plans/<planTid>")
async def get_plan(planTid: str) -> Response:
    plan = state().config.billing.get(planTid)
    if plan is None:
        raise NotFound(f"plan {planTid!r} not found")
    return jsonify(plan_view(plan))


@blueprint.get("/organizations/<organizationId>/plans")
async def list_plan_options(organizationId: str) -> Response:
    caller = same_organization(organizationId)
    current = await _current_plan(caller.org_id)
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
    plan = await _current_plan(caller.org_id)
    store = state().store
    invoices = []
    for period in periods_between(start, end):
        minutes = await store.billed_minutes_by_platform(
            caller.org_id, UsageFilter(started_from=period.start, started_before=period.end)
        )
        invoices.append(_invoice_view(compute_invoice(plan, period, minutes), zone, now))
    invoices.reverse()  # newest first
    return jsonify({"timezone": name, "currency": plan.currency, "invoices": invoices})


# -- subscriptions, billing details, the provider's pages, plan changes -----------------------

_STATUS: dict[BillingReason, type[APIError]] = {
    BillingReason.NO_PAYMENT_PROVIDER: Conflict,  # the deployment's state, not the input
    BillingReason.PROVIDER_REJECTED: Unprocessable,
    BillingReason.UNKNOWN_PRICE: NotFound,
    BillingReason.PRICE_REQUIRED: Conflict,  # the current plan has no price to check out
    BillingReason.ALREADY_ON_PLAN: Conflict,
}


def _api_error(exc: BillingError) -> APIError:
    if exc.reason is BillingReason.PROVIDER_UNAVAILABLE:
        error: APIError = Unavailable(exc.message, retry_after=30)
    else:
        error = _STATUS.get(exc.reason, Unprocessable)(exc.message)
    error.reason = exc.reason.value
    return error


def _subscription_view(sub: Subscription) -> dict[str, Any]:
    view: dict[str, Any] = {
        "id": sub.id,
        "provider": sub.provider,
        "planTid": sub.plan_tid,
        "priceId": sub.price_id,
        "status": sub.status,
        "currentPeriodEnd": None if sub.current_period_end is None
        else timestamp(sub.current_period_end),
        "scheduledChange": None,
    }  # fmt: skip
    if sub.scheduled_plan_tid is not None:
        view["scheduledChange"] = {
            "planTid": sub.scheduled_plan_tid,
            "effectiveAt": None if sub.scheduled_at is None else timestamp(sub.scheduled_at),
        }
    return view


@blueprint.get("/organizations/<organizationId>/subscriptions")
async def list_subscriptions(organizationId: str) -> Response:
    caller = same_organization(organizationId)
    subs = await state().billing.subscriptions(caller.org_id)
    return jsonify([_subscription_view(s) for s in subs])


async def _local_preview(org_id: str, plan: Plan) -> dict[str, Any]:
    """The none provider's next invoice: the open month's, computed as /invoices does."""
    period = month_of(datetime.now(UTC))
    minutes = await state().store.billed_minutes_by_platform(
        org_id, UsageFilter(started_from=period.start, started_before=period.end)
    )
    invoice = compute_invoice(plan, period, minutes)
    return {
        "amountDue": invoice.total,
        "currency": invoice.currency,
        "periodStart": timestamp(period.start),
        "periodEnd": timestamp(period.end),
    }


def _present(fields: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


def _optional_time(value: datetime | None) -> str | None:
    return None if value is None else timestamp(value)


@blueprint.get("/organizations/<organizationId>/billing-details")
async def billing_details(organizationId: str) -> Response:
    caller = same_organization(organizationId)
    billing = state().billing
    account = await state().store.get_billing_account(caller.org_id)
    view: dict[str, Any] = {
        "provider": billing.provider.name,
        "billingEnabled": account is not None,
        "unpaid": bool(account is not None and account.unpaid),
    }
    if isinstance(billing.provider, NoProvider):
        plan = await _current_plan(caller.org_id)
        view["upcomingInvoice"] = await _local_preview(caller.org_id, plan)
        return jsonify(view)
    details = await billing.details(caller.org_id)
    if (m := details.payment_method) is not None:
        view["defaultPaymentMethod"] = _present(
            {"id": m.id, "type": m.type, "brand": m.brand, "last4": m.last4,
             "expMonth": m.exp_month, "expYear": m.exp_year}
        )  # fmt: skip
    if (u := details.upcoming) is not None:
        view["upcomingInvoice"] = _present(
            {"amountDue": u.amount_due, "currency": u.currency,
             "periodStart": _optional_time(u.period_start),
             "periodEnd": _optional_time(u.period_end),
             "nextPaymentAttempt": _optional_time(u.next_payment_attempt)}
        )  # fmt: skip
    return jsonify(view)


@blueprint.get("/organizations/<organizationId>/billing")
async def billing_portal(organizationId: str) -> Response:
    caller = same_organization(organizationId)
    email = str_param("emailAddress") or caller.user.email
    try:
        url = await state().billing.portal(caller.org_id, email)
    except BillingError as exc:
        raise _api_error(exc) from None
    return jsonify({"url": url})


@blueprint.get("/organizations/<organizationId>/checkout")
async def checkout(organizationId: str) -> Response:
    caller = same_organization(organizationId)
    try:
        url = await state().billing.checkout(caller.org_id, caller.user.email, str_param("priceId"))
    except BillingError as exc:
        raise _api_error(exc) from None
    return jsonify({"url": url})


async def _schedule_view(org_id: str) -> dict[str, Any]:
    plan, sub = await state().billing.current(org_id)
    view: dict[str, Any] = {"currentPlanTid": plan.tid, "scheduled": False}
    if sub is not None and sub.scheduled_plan_tid is not None:
        view.update(
            scheduled=True,
            planTid=sub.scheduled_plan_tid,
            effectiveAt=_optional_time(sub.scheduled_at),
        )
    return view


@blueprint.get("/organizations/<organizationId>/plan/schedule")
async def get_plan_schedule(organizationId: str) -> Response:
    caller = same_organization(organizationId)
    return jsonify(await _schedule_view(caller.org_id))


@blueprint.delete("/organizations/<organizationId>/plan/schedule")
async def release_plan_schedule(organizationId: str) -> Response:
    caller = same_organization(organizationId)
    try:
        await state().billing.release(caller.org_id)
    except BillingError as exc:
        raise _api_error(exc) from None
    return jsonify(await _schedule_view(caller.org_id))


@blueprint.post("/organizations/<organizationId>/plan")
async def change_plan(organizationId: str) -> Response:
    caller = same_organization(organizationId)
    price_id = str(body()["priceId"])
    try:
        change = await state().billing.change_plan(caller.org_id, caller.user.email, price_id)
    except BillingError as exc:
        raise _api_error(exc) from None
    return jsonify({"url": change.url, "scheduled": change.scheduled})
