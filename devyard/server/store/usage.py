"""Usage in SQL: the billing rows of ended instances (migration 4) and the analytics queries.

`record_usage` runs inside the transaction of `transition_instance` that terminates the
instance, so an ended instance has exactly one usage row and no row exists for a live one:
"instances appear after billing is recorded" (spec 4.1) holds by construction, and the stop
time is the termination time. Rows copy what analytics filters on (platform, region, labels,
the times) instead of joining ``instances``, so they survive whatever later happens to the
instance rows. Labels are stored twice, as for instances: the JSON the API echoes and
``usage_labels`` rows for the ``labels`` filter (one indexed ``EXISTS`` per pair).

Billing (docs/analytics.md): ``started_at`` is the creation time, billed minutes are the time
from ``ready`` to the stop rounded up to whole minutes, 0 for an instance that never became
ready. Buckets are grouped in SQL by a UTC hour or day key, per dialect, and parsed back here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Final

from .base import BucketSize, Instance, UsageBucket, UsageFilter, UsageRecord
from .database import Database, Dialect, Row, Tx, as_datetime

__all__ = ["SqlUsage", "billed_minutes", "record_usage"]

_COLUMNS: Final = (
    "instance_id, org_id, platform, region, labels, termination_reason, started_at, ready_at,"
    " stopped_at, billed_minutes"
)
# The bucket key of a start time: "YYYY-MM-DDTHH" or "YYYY-MM-DD" in UTC. SQLite stores
# fixed-width ISO text in UTC (database.py), so a prefix of it is the key.
_BUCKET_KEY: Final = {
    (Dialect.SQLITE, BucketSize.HOUR): "substr(started_at, 1, 13)",
    (Dialect.SQLITE, BucketSize.DAY): "substr(started_at, 1, 10)",
    (Dialect.POSTGRESQL, BucketSize.HOUR): (
        "to_char(started_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24')"
    ),
    (Dialect.POSTGRESQL, BucketSize.DAY): "to_char(started_at AT TIME ZONE 'UTC', 'YYYY-MM-DD')",
}
_BOUNDS: Final = (
    ("started_from", "started_at >="),
    ("started_until", "started_at <="),
    ("started_before", "started_at <"),
    ("stopped_from", "stopped_at >="),
    ("stopped_until", "stopped_at <="),
)


def billed_minutes(ready_at: datetime | None, stopped_at: datetime) -> int:
    """Whole minutes from ready to stop, rounded up; 0 if never ready."""
    if ready_at is None or stopped_at <= ready_at:
        return 0
    return math.ceil((stopped_at - ready_at).total_seconds() / 60)


def record_usage(tx: Tx, instance: Instance, stopped_at: datetime) -> None:
    """Write the usage row of *instance*, which this transaction is terminating."""
    tx.execute(
        f"INSERT INTO usage_records ({_COLUMNS}) VALUES (:instance_id, :org_id, :platform,"  # noqa: S608
        " :region, :labels, :reason, :started_at, :ready_at, :stopped_at, :billed)",
        {
            "instance_id": instance.id,
            "org_id": instance.org_id,
            "platform": instance.platform,
            "region": instance.region,
            "labels": json.dumps(instance.labels),
            "reason": instance.termination_reason,
            "started_at": instance.created_at,
            "ready_at": instance.ready_at,
            "stopped_at": stopped_at,
            "billed": billed_minutes(instance.ready_at, stopped_at),
        },
    )
    for key, value in instance.labels.items():
        tx.execute(
            "INSERT INTO usage_labels (instance_id, key, value) VALUES (:id, :key, :value)",
            {"id": instance.id, "key": key, "value": value},
        )


def _record(row: Row) -> UsageRecord:
    ready = row["ready_at"]
    return UsageRecord(
        instance_id=row["instance_id"],
        org_id=row["org_id"],
        platform=row["platform"],
        region=row["region"],
        labels=json.loads(row["labels"]),
        termination_reason=row["termination_reason"],
        started_at=as_datetime(row["started_at"]),
        ready_at=None if ready is None else as_datetime(ready),
        stopped_at=as_datetime(row["stopped_at"]),
        billed_minutes=int(row["billed_minutes"]),
    )


def _where(org_id: str, usage_filter: UsageFilter) -> tuple[str, dict[str, object]]:
    params: dict[str, object] = {"org_id": org_id}
    sql = " WHERE u.org_id = :org_id"
    for name, test in _BOUNDS:
        value = getattr(usage_filter, name)
        if value is not None:
            sql += f" AND u.{test} :{name}"
            params[name] = value
    for i, (key, value) in enumerate(sorted(usage_filter.labels.items())):
        params[f"lk{i}"], params[f"lv{i}"] = key, value
        sql += (
            " AND EXISTS (SELECT 1 FROM usage_labels l WHERE l.instance_id = u.instance_id"  # noqa: S608
            f" AND l.key = :lk{i} AND l.value = :lv{i})"
        )
    return sql, params


def _bucket_start(key: str, size: BucketSize) -> datetime:
    text = f"{key}:00:00" if size is BucketSize.HOUR else f"{key}T00:00:00"
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


class SqlUsage:
    """Mixed into `SqlStore`; see `base.Store` for the contract of each method."""

    _db: Database
    _now: Callable[[], datetime]

    async def list_usage(
        self,
        org_id: str,
        usage_filter: UsageFilter,
        *,
        limit: int = 100,
        starting_after: str | None = None,
    ) -> list[UsageRecord]:
        where, params = _where(org_id, usage_filter)
        params["limit"] = limit
        if starting_after is not None:
            # Keyset paging on (started_at, instance_id); an unknown id gives an empty page.
            params["after"] = starting_after
            where += (
                " AND (u.started_at, u.instance_id) > (SELECT a.started_at, a.instance_id"
                " FROM usage_records a WHERE a.instance_id = :after AND a.org_id = :org_id)"
            )
        sql = (
            f"SELECT {', '.join('u.' + c.strip() for c in _COLUMNS.split(','))}"  # noqa: S608
            f" FROM usage_records u{where} ORDER BY u.started_at, u.instance_id LIMIT :limit"
        )
        found = await self._db.read(lambda tx: tx.fetchall(sql, params))
        return [_record(row) for row in found]

    async def usage_buckets(
        self, org_id: str, usage_filter: UsageFilter, size: BucketSize
    ) -> list[UsageBucket]:
        where, params = _where(org_id, usage_filter)

        def read(tx: Tx) -> list[Row]:
            key = _BUCKET_KEY[tx.dialect, size]
            sql = (
                f"SELECT {key} AS bucket, COUNT(*) AS instances,"  # noqa: S608
                f" SUM(u.billed_minutes) AS minutes FROM usage_records u{where}"
                " GROUP BY bucket ORDER BY bucket"
            )
            return tx.fetchall(sql, params)

        found = await self._db.read(read)
        return [
            UsageBucket(
                start=_bucket_start(str(row["bucket"]), size),
                instances=int(row["instances"]),
                billed_minutes=int(row["minutes"]),
            )
            for row in found
        ]

    async def billed_minutes_by_platform(
        self, org_id: str, usage_filter: UsageFilter
    ) -> dict[str, int]:
        where, params = _where(org_id, usage_filter)
        sql = (
            "SELECT u.platform AS platform, SUM(u.billed_minutes) AS minutes"  # noqa: S608
            f" FROM usage_records u{where} GROUP BY u.platform"
        )
        found = await self._db.read(lambda tx: tx.fetchall(sql, params))
        return {str(row["platform"]): int(row["minutes"] or 0) for row in found}
