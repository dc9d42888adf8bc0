"""``devyard usage``: what the organization ran, as a small terminal chart.

    devyard usage                       the last 7 days, a bar per day
    devyard usage --since 48h --bucket hour --label team=ios
    devyard usage --json                the API's UsageTotals (docs/analytics.md)

Counts ended instances by start time (``GET /v1/analytics``); ``devyard analytics`` keeps the
raw table and the per-instance list. A bar is scaled to the busiest bucket; empty buckets
between two busy ones are shown, so the chart reads as a time axis.
"""

from __future__ import annotations

import argparse
import json
import re
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Final, TextIO

from .commands import UsageError, _leaf

if TYPE_CHECKING:
    from .client import AsyncClient
    from .resources import UsageTotals

__all__ = ["add_usage", "chart"]

_WIDTH: Final = 40
_SPAN = re.compile(r"^(\d+)([hdw])$")
_UNIT: Final = {"h": "hours", "d": "days", "w": "weeks"}


def _since(text: str, now: datetime) -> str:
    """``7d``, ``48h``, ``2w`` or an RFC 3339 time, as an RFC 3339 time."""
    match = _SPAN.match(text)
    if match:
        start = now - timedelta(**{_UNIT[match.group(2)]: int(match.group(1))})
        return start.strftime("%Y-%m-%dT%H:%M:%SZ")
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(
            f"--since takes 7d, 48h, 2w or a time like 2026-01-31, not {text!r}"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def chart(totals: UsageTotals, *, width: int = _WIDTH) -> list[str]:
    """One line per bucket: its start, a bar of billed minutes, and the counts."""
    hourly = totals.bucket == "hour"
    peak = max((b.billed_minutes for b in totals.buckets), default=0)
    lines = []
    for bucket in totals.buckets:
        label = bucket.start.strftime("%Y-%m-%d %H:00" if hourly else "%Y-%m-%d")
        cells = round(width * bucket.billed_minutes / peak) if peak else 0
        if bucket.billed_minutes and not cells:
            cells = 1  # a bucket with any use shows
        bar = ("█" * cells).ljust(width)
        lines.append(f"{label}  {bar}  {bucket.billed_minutes} min, {bucket.instances} instances")
    lines.append(f"total: {totals.billed_minutes} billed minutes, {totals.instances} instances")
    return lines


async def _usage(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    now = datetime.now(UTC)
    labels = ",".join(args.label) or None
    until = _since(args.until, now) if args.until else None
    totals = await client.usage(
        start=_since(args.since, now), end=until, labels=labels, bucket=args.bucket
    )
    if args.json:
        json.dump(totals.raw, out, indent=2)
        out.write("\n")
        return
    for line in chart(totals):
        out.write(line + "\n")


def add_usage(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    usage = _leaf(sub, "usage", _usage, "billed minutes and instances as a chart", common)
    usage.add_argument(
        "--since", default="7d", metavar="WHEN", help="7d, 48h, 2w or a time (default 7d)"
    )
    usage.add_argument("--until", metavar="WHEN", help="a time (default: now)")
    usage.add_argument("--bucket", choices=("hour", "day"), default="day")
    usage.add_argument("--label", action="append", default=[], metavar="KEY=VALUE")
