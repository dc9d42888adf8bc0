"""Invoices from usage: pure arithmetic on integers (minor units, whole minutes).

A billing period is a calendar month in UTC, ``[start, end)``; an instance counts in the
period its ``started_at`` falls in, as analytics buckets it (so an invoice's minutes equal the
analytics sum for the same period, docs/billing.md). Per platform, billed minutes are weighted
by the plan's percentage and rounded up; the plan's included minutes come off the total; the
rest is priced through the graduated tiers in order (each tier prices only the minutes that
fall inside it); the monthly fee is added; the period's credits pay what they can.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Final

import attrs

from .plans import Plan

__all__ = [
    "MAX_INVOICES",
    "Invoice",
    "Period",
    "PlatformUsage",
    "TierLine",
    "compute_invoice",
    "month_of",
    "periods_between",
]

MAX_INVOICES: Final = 6  # spec 8: "up to the last 6"


@attrs.frozen
class Period:
    start: datetime  # inclusive, UTC
    end: datetime  # exclusive, UTC


def month_of(moment: datetime) -> Period:
    """The calendar month (UTC) that *moment* falls in."""
    moment = moment.astimezone(UTC)
    start = datetime(moment.year, moment.month, 1, tzinfo=UTC)
    year, month = (moment.year + 1, 1) if moment.month == 12 else (moment.year, moment.month + 1)
    return Period(start, datetime(year, month, 1, tzinfo=UTC))


def periods_between(start: datetime, end: datetime) -> list[Period]:
    """The months overlapping ``[start, end)``, newest last, at most the last `MAX_INVOICES`."""
    if end <= start:
        return []
    periods = [month_of(start)]
    while periods[-1].end < end:
        periods.append(month_of(periods[-1].end))
    return periods[-MAX_INVOICES:]


@attrs.frozen
class PlatformUsage:
    platform: str
    minutes: int  # billed minutes, as analytics counts them
    weight: int  # percent
    weighted_minutes: int  # ceil(minutes * weight / 100)


@attrs.frozen
class TierLine:
    first_minute: int  # 1-based, of the billable minutes
    up_to: int | None
    unit_amount: int
    quantity: int
    amount: int


@attrs.frozen
class Invoice:
    period: Period
    plan_tid: str
    currency: str
    usage: tuple[PlatformUsage, ...]
    included_minutes: int
    billable_minutes: int
    tiers: tuple[TierLine, ...]
    monthly_fee: int
    subtotal: int
    credits_available: int
    credits_used: int
    total: int

    @property
    def minutes(self) -> int:
        return sum(u.minutes for u in self.usage)


def _weighted(minutes: int, weight: int) -> int:
    return -(-minutes * weight // 100)  # ceiling division, integers only


def compute_invoice(plan: Plan, period: Period, minutes: Mapping[str, int]) -> Invoice:
    """The invoice of *plan* for *period*, given billed minutes per platform."""
    usage = tuple(
        PlatformUsage(p, m, plan.weight(p), _weighted(m, plan.weight(p)))
        for p, m in sorted(minutes.items())
        if m > 0
    )
    weighted = sum(u.weighted_minutes for u in usage)
    billable = max(0, weighted - plan.included_minutes)
    lines: list[TierLine] = []
    floor = 0
    for tier in plan.tiers:
        if floor >= billable:
            break
        ceiling = billable if tier.up_to is None else min(billable, tier.up_to)
        quantity = ceiling - floor
        if quantity > 0:
            lines.append(
                TierLine(
                    floor + 1, tier.up_to, tier.unit_amount, quantity, quantity * tier.unit_amount
                )
            )
        floor = ceiling
    subtotal = plan.monthly_fee + sum(line.amount for line in lines)
    credits_used = min(plan.credits, subtotal)
    return Invoice(
        period=period,
        plan_tid=plan.tid,
        currency=plan.currency,
        usage=usage,
        included_minutes=plan.included_minutes,
        billable_minutes=billable,
        tiers=tuple(lines),
        monthly_fee=plan.monthly_fee,
        subtotal=subtotal,
        credits_available=plan.credits,
        credits_used=credits_used,
        total=subtotal - credits_used,
    )
