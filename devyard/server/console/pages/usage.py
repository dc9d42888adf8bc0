"""Usage: billed minutes and instances per platform and region over time (``GET
/v1/analytics``), for a time range and bucket chosen on the page, and a CSV export.

The page renders the figures as a table (every bucket, platform and region: readable without
JavaScript and by a screen reader); ``static/usage.js`` draws the two uPlot charts from that
table's ``data-*`` attributes. The CSV is the same rows. Instances count in the bucket of
their start and appear once billed (ended), as the analytics API says (docs/analytics.md).
"""

from __future__ import annotations

import csv
import io
from datetime import UTC, date, datetime, timedelta
from typing import Any, Final

import attrs
from quart import Blueprint, Response, request

from ..context import api, render, viewer
from ..nav import NavEntry

__all__ = ["NAV", "Query", "blueprint", "rows_of"]

blueprint = Blueprint("usage", __name__, url_prefix="/console/usage")
NAV = NavEntry("Usage", "/console/usage/")

BUCKETS: Final = ("hour", "day", "week", "minute")
PLATFORMS: Final = ("android", "ios", "xcode", "gradle")
_DEFAULT_DAYS: Final = 7


@attrs.frozen
class Query:
    start: date
    end: date  # inclusive
    bucket: str
    labels: str
    error: str | None = None

    def params(self) -> dict[str, str]:
        params = {
            "startedAt[gte]": f"{self.start.isoformat()}T00:00:00Z",
            "startedAt[lte]": f"{self.end.isoformat()}T23:59:59Z",
            "bucket": self.bucket,
        }
        if self.labels:
            params["labels"] = self.labels
        return params

    def query_string(self) -> dict[str, str]:
        values = {"from": self.start.isoformat(), "to": self.end.isoformat(), "bucket": self.bucket}
        if self.labels:
            values["labels"] = self.labels
        return values


def read_query(args: Any, today: date | None = None) -> Query:
    """The page's range (``from`` and ``to`` days, UTC, inclusive), bucket and labels."""
    today = today or datetime.now(UTC).date()
    error = None
    try:
        end = date.fromisoformat(args.get("to") or today.isoformat())
        start = date.fromisoformat(
            args.get("from") or (end - timedelta(days=_DEFAULT_DAYS - 1)).isoformat()
        )
    except ValueError:
        end, start = today, today - timedelta(days=_DEFAULT_DAYS - 1)
        error = "The range is two days such as 2030-03-01."
    if start > end:
        start, end = end, start
    bucket = args.get("bucket") or "day"
    if bucket not in BUCKETS:
        bucket, error = "day", f"The bucket is one of {', '.join(BUCKETS)}."
    return Query(start, end, bucket, (args.get("labels") or "").strip(), error)


@attrs.frozen
class Row:
    start: str  # the bucket's first instant (RFC 3339, UTC)
    platform: str
    region: str
    instances: int
    billed_minutes: int
    runtime_minutes: float


def rows_of(answer: dict[str, Any]) -> list[Row]:
    """One row per bucket, platform and region with figures (from ``series``)."""
    rows = []
    for bucket, point in zip(answer["buckets"], answer["series"], strict=True):
        for platform in PLATFORMS:
            for region, figures in sorted(point.get(platform, {}).items()):
                rows.append(
                    Row(
                        start=bucket["start"],
                        platform=platform,
                        region=region,
                        instances=int(figures["count"]),
                        billed_minutes=int(figures["billedMinutes"]),
                        runtime_minutes=float(figures["runtimeMinutes"]),
                    )
                )
    return rows


async def _usage(query: Query) -> dict[str, Any]:
    answer: dict[str, Any] = await api().json("GET", "/v1/analytics", params=query.params())
    return answer


@blueprint.get("/")
async def index() -> Any:
    who = await viewer()
    query = read_query(request.args)
    answer = await _usage(query)
    return await render(
        "console/usage/index.html",
        who=who,
        query=query,
        answer=answer,
        rows=rows_of(answer),
        buckets=BUCKETS,
    ), (400 if query.error else 200)


@blueprint.get("/usage.csv")
async def export() -> Response:
    await viewer()
    query = read_query(request.args)
    answer = await _usage(query)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(
        ["bucketStart", "platform", "region", "instances", "billedMinutes", "runtimeMinutes"]
    )
    for row in rows_of(answer):
        writer.writerow(
            [row.start, row.platform, row.region, row.instances, row.billed_minutes,
             f"{row.runtime_minutes:g}"]
        )  # fmt: skip
    name = f"devyard-usage-{query.start.isoformat()}-{query.end.isoformat()}-{query.bucket}.csv"
    return Response(
        out.getvalue(),
        content_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{name}"'},
    )
