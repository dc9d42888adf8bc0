"""Usage analytics, ``/v1/analytics`` (totals in buckets by start time) and
``/v1/analytics/instances`` (billing details per ended instance), with the rules of spec 4.1
(docs/analytics.md):

- every bound given applies: ``startedAt[gte|lte]``, ``stoppedAt[gte|lte]`` (inclusive) and the
  older ``from`` (start >= from) and ``to`` (start < to), which intersect with the others and
  are echoed in the answer, with the other bounds given;
- at least one of the six is required (400); one-sided bounds work;
- ``labels=k=v,...``: every pair must match the instance's labels;
- buckets group by start time in minutes, hours, days or weeks (from Monday) of the IANA
  ``timezone`` (UTC when not given; ``region`` selects one region); with a lower and an
  upper bound on the start (``startedAt[gte]`` or ``from``, and ``startedAt[lte]`` or
  ``to``) every bucket of the range is listed, empty ones with zeros; otherwise only
  buckets with instances;
- the answers carry devyard's fields and, beside them, the commercial service's SDKs' shape
  (``series``, ``summary``, ``asOf``, ``timezone``; docs/compatibility.md): both read theirs.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import attrs
from quart import Blueprint, Response, jsonify

from ...store.base import UsageFilter, UsageRecord
from .._errors import BadRequest
from ..context import int_param, principal, state, str_param
from ..views import timestamp

__all__ = ["blueprint", "floor_bucket", "group_records", "platform_stats", "series_starts"]

blueprint = Blueprint("analytics", __name__)

MAX_BUCKETS: Final = 10_000
MAX_PAGE: Final = 1000
MAX_RECORDS: Final = 100_000  # instances one totals request reads; more is a 400
_FIXED_STEP: Final = {"minute": timedelta(minutes=1), "hour": timedelta(hours=1)}
_PLATFORMS: Final = ("android", "ios", "xcode", "gradle")
_RESOLUTION: Final = timedelta(microseconds=1)  # stored timestamps' resolution
# Query parameter -> UsageFilter field. ``from`` and ``startedAt[gte]`` are both lower bounds
# (inclusive) and intersect as the later of the two.
_BOUNDS: Final = (
    ("startedAt[gte]", "started_from"),
    ("from", "started_from"),
    ("startedAt[lte]", "started_until"),
    ("to", "started_before"),
    ("stoppedAt[gte]", "stopped_from"),
    ("stoppedAt[lte]", "stopped_until"),
)


@attrs.frozen
class UsageQuery:
    """One analytics request's checked parameters."""

    usage_filter: UsageFilter
    echo: dict[str, str]  # the bounds given, as RFC 3339 UTC

    @property
    def start_range(self) -> tuple[datetime, datetime] | None:
        """The first and last instant a selected start can have, if bounded on both sides."""
        f = self.usage_filter
        lower = f.started_from
        uppers = [f.started_until] if f.started_until is not None else []
        if f.started_before is not None:
            uppers.append(f.started_before - _RESOLUTION)
        if lower is None or not uppers:
            return None
        return lower, min(uppers)


def _instant(name: str, text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        value = None
    if value is None or value.tzinfo is None:
        raise BadRequest(
            f"query parameter {name} must be an RFC 3339 time with an offset",
            reason="invalid_parameter",
        )
    return value.astimezone(UTC)


def _labels(text: str | None) -> dict[str, str]:
    labels: dict[str, str] = {}
    for pair in (text or "").split(","):
        if pair:
            key, _, value = pair.partition("=")  # the document's pattern guarantees k=v pairs
            labels[key] = value
    return labels


def usage_query(query: Callable[[str], str | None]) -> UsageQuery:
    """The bounds and labels of the request, read through *query* (``str_param``)."""
    bounds: dict[str, datetime] = {}
    echo: dict[str, str] = {}
    for name, field in _BOUNDS:
        text = query(name)
        if text is None:
            continue
        value = _instant(name, str(text))
        echo[name] = timestamp(value)
        bounds[field] = max(value, bounds[field]) if field in bounds else value
    if not bounds:
        raise BadRequest(
            "at least one time bound is required: startedAt[gte], startedAt[lte],"
            " stoppedAt[gte], stoppedAt[lte], from or to",
            reason="missing_parameter",
        )
    labels = _labels(query("labels"))
    return UsageQuery(usage_filter=UsageFilter(**bounds, labels=labels), echo=echo)


def _zone(name: str | None) -> ZoneInfo:
    """The IANA time zone buckets follow; UTC when none is given (spec 4.1 buckets in UTC)."""
    try:
        return ZoneInfo(name or "UTC")
    except (ZoneInfoNotFoundError, ValueError):
        raise BadRequest(
            f"query parameter timezone: unknown IANA time zone {name!r}",
            reason="invalid_parameter",
        ) from None


async def _records(org_id: str, usage_filter: UsageFilter, region: str | None) -> list[UsageRecord]:
    """Every selected usage row (in pages of the store), at most `MAX_RECORDS`."""
    found: list[UsageRecord] = []
    after: str | None = None
    while True:
        page = await state().store.list_usage(
            org_id, usage_filter, limit=MAX_PAGE, starting_after=after
        )
        found.extend(r for r in page if region is None or r.region == region)
        if len(found) > MAX_RECORDS:
            raise BadRequest(
                f"more than {MAX_RECORDS} instances match: narrow the time range",
                reason="invalid_parameter",
            )
        if len(page) < MAX_PAGE:
            return found
        after = page[-1].instance_id


def floor_bucket(value: datetime, size: str, zone: ZoneInfo) -> datetime:
    """The start (as UTC) of the bucket of *size* holding *value*, in *zone*'s wall time;
    weeks start on Monday."""
    local = value.astimezone(zone).replace(second=0, microsecond=0)
    if size != "minute":
        local = local.replace(minute=0)
    if size in ("day", "week"):
        local = local.replace(hour=0)
    if size == "week":
        local -= timedelta(days=local.weekday())
    return local.replace(tzinfo=zone).astimezone(UTC)


def _next_bucket(start: datetime, size: str, zone: ZoneInfo) -> datetime:
    if size in _FIXED_STEP:
        return start + _FIXED_STEP[size]
    days = 7 if size == "week" else 1  # wall-clock days: DST days are 23 or 25 hours
    local = start.astimezone(zone)
    return (local + timedelta(days=days)).replace(tzinfo=zone).astimezone(UTC)


def group_records(
    records: list[UsageRecord], size: str, zone: ZoneInfo
) -> dict[datetime, list[UsageRecord]]:
    grouped: dict[datetime, list[UsageRecord]] = {}
    for record in records:
        grouped.setdefault(floor_bucket(record.started_at, size, zone), []).append(record)
    return grouped


def series_starts(
    found: list[datetime],
    start_range: tuple[datetime, datetime] | None,
    size: str,
    zone: ZoneInfo,
) -> list[datetime]:
    """*found* (populated bucket starts, in order), with the empty buckets of a bounded
    start range."""
    if start_range is None:
        return found
    first, last = (floor_bucket(value, size, zone) for value in start_range)
    starts: list[datetime] = []
    at = first
    while at <= last:
        if len(starts) >= MAX_BUCKETS:
            raise BadRequest(
                f"the start range spans more than {MAX_BUCKETS} buckets of one {size};"
                " narrow it or use a larger bucket (bucket=day or bucket=week)",
                reason="invalid_parameter",
            )
        starts.append(at)
        at = _next_bucket(at, size, zone)
    return starts


def _local_stamp(start: datetime, zone: ZoneInfo) -> str:
    return timestamp(start) if zone.key == "UTC" else start.astimezone(zone).isoformat()


def _runtime_minutes(record: UsageRecord) -> float:
    return (record.stopped_at - record.started_at).total_seconds() / 60


def _region_stats(records: list[UsageRecord]) -> dict[str, Any]:
    """The SDKs' RegionStats. Costs are 0: devyard prices minutes on the monthly invoice
    through the plan's tiers, not per instance (docs/compatibility.md)."""
    runtime = sum(_runtime_minutes(r) for r in records)
    billed = sum(r.billed_minutes for r in records)
    return {
        "runtimeMinutes": round(runtime, 2),
        "billedMinutes": billed,
        "avgDurationMinutes": round(runtime / len(records), 2) if records else 0,
        "count": len(records),
        "cost": 0,
        "creditsBilledMinutes": 0,
        "creditsCost": 0,
        "onDemandBilledMinutes": billed,
        "onDemandCost": 0,
    }


def platform_stats(records: list[UsageRecord]) -> dict[str, dict[str, Any]]:
    """``{platform: {region: RegionStats}}`` for every platform (the SDKs require each key)."""
    by_platform: dict[str, dict[str, list[UsageRecord]]] = {p: {} for p in _PLATFORMS}
    for record in records:
        by_platform.setdefault(record.platform, {}).setdefault(record.region, []).append(record)
    return {
        platform: {region: _region_stats(rs) for region, rs in regions.items()}
        for platform, regions in by_platform.items()
    }


def _usage_view(record: UsageRecord) -> dict[str, Any]:
    view: dict[str, Any] = {
        "instanceTid": record.instance_id,
        "platform": record.platform,
        "region": record.region,
        "labels": record.labels,
        "startedAt": timestamp(record.started_at),
        "stoppedAt": timestamp(record.stopped_at),
        "billedMinutes": record.billed_minutes,
        # the SDKs' AnalyticsInstance (docs/compatibility.md; costs are 0, see _region_stats)
        "runtimeMinutes": round(_runtime_minutes(record), 2),
        "cost": 0,
        "billedBreakdown": {
            "creditsBilledMinutes": 0,
            "onDemandBilledMinutes": record.billed_minutes,
        },
        "costBreakdown": {"creditsCost": 0, "onDemandCost": 0},
    }
    if record.ready_at is not None:
        view["readyAt"] = timestamp(record.ready_at)
    if record.termination_reason is not None:
        view["terminationReason"] = record.termination_reason
    return view


@blueprint.get("/v1/analytics")
async def get_analytics() -> Response:
    caller = principal()
    query = usage_query(str_param)
    size = str_param("bucket") or "day"
    zone = _zone(str_param("timezone"))
    records = await _records(caller.org_id, query.usage_filter, str_param("region"))
    grouped = group_records(records, size, zone)
    starts = series_starts(sorted(grouped), query.start_range, size, zone)
    totals = [_totals(grouped.get(start, [])) for start in starts]
    return jsonify(
        {
            **query.echo,
            # devyard's spec 4.1
            "bucket": size,
            "instances": len(records),
            "billedMinutes": sum(r.billed_minutes for r in records),
            "buckets": [
                {"start": timestamp(start), "instances": count, "billedMinutes": billed}
                for start, (count, billed) in zip(starts, totals, strict=True)
            ],
            # the commercial service's SDKs (docs/compatibility.md)
            "timezone": zone.key,
            "asOf": timestamp(datetime.now(UTC)),
            "series": [
                {"timestamp": _local_stamp(start, zone), **platform_stats(grouped.get(start, []))}
                for start in starts
            ],
            "summary": platform_stats(records),
        }
    )


def _totals(records: list[UsageRecord]) -> tuple[int, int]:
    return len(records), sum(r.billed_minutes for r in records)


@blueprint.get("/v1/analytics/instances")
async def list_instance_analytics() -> Response:
    caller = principal()
    query = usage_query(str_param)
    limit = min(MAX_PAGE, int_param("limit"))
    after = str_param("startingAfter")
    found = await state().store.list_usage(
        caller.org_id,
        query.usage_filter,
        limit=limit + 1,
        starting_after=after,
    )
    region, zone = str_param("region"), _zone(str_param("timezone"))
    page = [r for r in found[:limit] if region is None or r.region == region]
    by_minute = group_records(page, "minute", zone)
    return jsonify(
        {
            **query.echo,
            "items": [_usage_view(r) for r in page],
            "hasMore": len(found) > limit,
            # the SDKs' shape: this page's instances by the minute they started
            "timezone": zone.key,
            "asOf": timestamp(datetime.now(UTC)),
            "series": [
                {"timestamp": _local_stamp(start, zone), "instances": [_usage_view(r) for r in rs]}
                for start, rs in sorted(by_minute.items())
            ],
        }
    )
