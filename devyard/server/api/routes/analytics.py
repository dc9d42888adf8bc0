"""Usage analytics, ``/v1/analytics`` (totals in buckets by start time) and
``/v1/analytics/instances`` (billing details per ended instance), with the rules of spec 4.1
(docs/analytics.md):

- every bound given applies: ``startedAt[gte|lte]``, ``stoppedAt[gte|lte]`` (inclusive) and the
  older ``from`` (start >= from) and ``to`` (start < to), which intersect with the others and
  are echoed in the answer, with the other bounds given;
- at least one of the six is required (400); one-sided bounds work;
- ``labels=k=v,...``: every pair must match the instance's labels;
- buckets group by start time in UTC hours or days; with a lower and an upper bound on the
  start (``startedAt[gte]`` or ``from``, and ``startedAt[lte]`` or ``to``) every bucket of the
  range is listed, empty ones with zeros; otherwise only buckets with instances.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import attrs
from quart import Blueprint, Response, jsonify

from ...store.base import BucketSize, UsageBucket, UsageFilter, UsageRecord
from .._errors import BadRequest
from ..context import int_param, principal, state, str_param
from ..views import timestamp

__all__ = ["blueprint", "fill_buckets", "floor_bucket"]

blueprint = Blueprint("analytics", __name__)

MAX_BUCKETS: Final = 10_000
MAX_PAGE: Final = 1000
_STEP: Final = {BucketSize.HOUR: timedelta(hours=1), BucketSize.DAY: timedelta(days=1)}
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


def floor_bucket(value: datetime, size: BucketSize) -> datetime:
    value = value.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    return value.replace(hour=0) if size is BucketSize.DAY else value


def fill_buckets(
    found: list[UsageBucket], start_range: tuple[datetime, datetime] | None, size: BucketSize
) -> list[UsageBucket]:
    """*found* (populated buckets, in order), with the empty buckets of a bounded range."""
    if start_range is None:
        return found
    first, last = (floor_bucket(value, size) for value in start_range)
    if last < first:
        return []
    step = _STEP[size]
    if (last - first) // step >= MAX_BUCKETS:
        raise BadRequest(
            f"the start range spans more than {MAX_BUCKETS} buckets of one {size};"
            " narrow it or use bucket=day",
            reason="invalid_parameter",
        )
    by_start = {bucket.start: bucket for bucket in found}
    filled = []
    at = first
    while at <= last:
        filled.append(by_start.get(at, UsageBucket(start=at, instances=0, billed_minutes=0)))
        at += step
    return filled


def _bucket_view(bucket: UsageBucket) -> dict[str, Any]:
    return {
        "start": timestamp(bucket.start),
        "instances": bucket.instances,
        "billedMinutes": bucket.billed_minutes,
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
    size = BucketSize(str_param("bucket") or BucketSize.DAY)
    found = await state().store.usage_buckets(caller.org_id, query.usage_filter, size)
    buckets = fill_buckets(found, query.start_range, size)
    return jsonify(
        {
            **query.echo,
            "bucket": str(size),
            "instances": sum(b.instances for b in found),
            "billedMinutes": sum(b.billed_minutes for b in found),
            "buckets": [_bucket_view(b) for b in buckets],
        }
    )


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
    return jsonify(
        {
            **query.echo,
            "items": [_usage_view(r) for r in found[:limit]],
            "hasMore": len(found) > limit,
        }
    )
