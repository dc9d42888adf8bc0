"""Instances in SQL: the `Store` methods of the four instance collections.

One ``instances`` table holds all four platforms. Labels are stored twice: as the JSON the API
echoes, with ``labels_key`` (the canonical JSON, sorted keys) for the exact match of
``reuseIfExists``, and as rows of ``instance_labels`` for ``labelSelector``, where every pair
must match (one indexed ``EXISTS`` per pair). Lists page by id (``startingAfter`` /
``endingBefore``), which is a total order and an index prefix, so a page costs the same with
10,000 rows as with 10. State changes are compare-and-set inside one transaction: the caller
(the pure table in `devyard.server.instances.lifecycle`) says which states it may leave.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any, Final

from .base import (
    LIVE_STATES,
    Instance,
    InstanceState,
    Platform,
    TerminationReason,
)
from .database import Database, Dialect, Row, Tx, as_datetime, in_list
from .errors import Conflict, LimitReached, NotFound
from .ids import new_ulid
from .instance_runs import RunRows
from .org_guard import require_live_organization
from .usage import record_usage

__all__ = ["SqlInstances", "labels_key"]

_COLUMNS: Final = (
    "id, org_id, platform, region, host_id, display_name, labels, spec, state, error_message,"
    " termination_reason, token, stream_token, created_at, assigned_at, ready_at, terminated_at,"
    " created_by"
)
# SQL text here is built from constants and generated placeholder names only (hence the
# S608 waivers); every value is a bound parameter.
_SELECT: Final = f"SELECT {_COLUMNS} FROM instances"  # noqa: S608
_STAMP: Final = {
    InstanceState.ASSIGNED: "assigned_at",
    InstanceState.READY: "ready_at",
    InstanceState.TERMINATED: "terminated_at",
}


def labels_key(labels: dict[str, str]) -> str:
    return json.dumps(labels, sort_keys=True, separators=(",", ":"))


def _opt(value: object) -> datetime | None:
    return None if value is None else as_datetime(value)


def _instance(row: Row) -> Instance:
    reason = row["termination_reason"]
    return Instance(
        id=row["id"],
        org_id=row["org_id"],
        platform=Platform(row["platform"]),
        region=row["region"],
        host_id=row["host_id"],
        display_name=row["display_name"],
        labels=json.loads(row["labels"]),
        spec=json.loads(row["spec"]),
        state=InstanceState(row["state"]),
        error_message=row["error_message"],
        termination_reason=None if reason is None else TerminationReason(reason),
        token=row["token"],
        stream_token=row["stream_token"],
        created_at=as_datetime(row["created_at"]),
        assigned_at=_opt(row["assigned_at"]),
        ready_at=_opt(row["ready_at"]),
        terminated_at=_opt(row["terminated_at"]),
        created_by=row["created_by"],
    )


def _get(tx: Tx, instance_id: str, org_id: str | None, *, lock: bool = False) -> Instance:
    sql = _SELECT + " WHERE id = :id"
    if org_id is not None:
        sql += " AND org_id = :org_id"
    if lock and tx.dialect is Dialect.POSTGRESQL:
        sql += " FOR UPDATE"
    row = tx.fetchone(sql, {"id": instance_id, "org_id": org_id})
    if row is None:
        raise NotFound("instance", instance_id)
    return _instance(row)


class SqlInstances:
    """Mixed into `SqlStore`; see `base.Store` for the contract of each method."""

    _db: Database
    _now: Callable[[], datetime]

    async def create_instance(
        self,
        *,
        org_id: str,
        platform: Platform,
        region: str,
        labels: dict[str, str],
        spec: dict[str, Any],
        display_name: str | None,
        token: str,
        stream_token: str,
        max_live: int | None = None,
        created_by: str | None = None,
        with_rows: RunRows | None = None,
    ) -> Instance:
        instance = Instance(
            id=f"{platform.value}_{region}_{new_ulid()}",
            org_id=org_id,
            platform=platform,
            region=region,
            labels=dict(labels),
            spec=spec,
            state=InstanceState.CREATING,
            created_at=self._now(),
            display_name=display_name,
            token=token,
            stream_token=stream_token,
            created_by=created_by,
        )

        def create(tx: Tx) -> None:
            if max_live is not None and tx.dialect is Dialect.POSTGRESQL:
                # the plan's limit: creates of one organization queue on its row (taken for
                # update first: upgrading the guard's share lock would deadlock two creates)
                tx.execute("SELECT id FROM organizations WHERE id = :id FOR UPDATE", {"id": org_id})
            require_live_organization(tx, org_id)  # locks the organization row on PostgreSQL
            if max_live is not None:
                row = tx.fetchone(
                    "SELECT COUNT(*) AS n FROM instances WHERE org_id = :org_id"
                    " AND platform = :platform AND state <> :terminated",
                    {"org_id": org_id, "platform": platform, "terminated": "terminated"},
                )
                if row is not None and int(row["n"]) >= max_live:
                    raise LimitReached(str(platform), max_live)
            tx.execute(
                f"INSERT INTO instances ({_COLUMNS}, labels_key) VALUES (:id, :org_id,"  # noqa: S608
                " :platform, :region, NULL, :display_name, :labels, :spec, :state, NULL, NULL,"
                " :token, :stream_token, :created_at, NULL, NULL, NULL, :created_by,"
                " :labels_key)",
                {
                    "id": instance.id,
                    "org_id": org_id,
                    "platform": platform,
                    "region": region,
                    "display_name": display_name,
                    "labels": json.dumps(instance.labels),
                    "labels_key": labels_key(instance.labels),
                    "spec": json.dumps(spec),
                    "state": instance.state,
                    "token": token,
                    "stream_token": stream_token,
                    "created_at": instance.created_at,
                    "created_by": created_by,
                },
            )
            for key, value in instance.labels.items():
                tx.execute(
                    "INSERT INTO instance_labels (instance_id, key, value)"
                    " VALUES (:id, :key, :value)",
                    {"id": instance.id, "key": key, "value": value},
                )
            if with_rows is not None:  # its timers and order (instance_runs), atomically
                with_rows(tx, instance.id)

        await self._db.write(create)
        return instance

    async def get_instance(self, instance_id: str, *, org_id: str | None = None) -> Instance:
        return await self._db.read(lambda tx: _get(tx, instance_id, org_id))

    async def list_instances(
        self,
        org_id: str,
        platform: Platform,
        *,
        labels: dict[str, str] | None = None,
        states: frozenset[InstanceState] | None = None,
        region: str | None = None,
        limit: int = 50,
        starting_after: str | None = None,
        ending_before: str | None = None,
    ) -> list[Instance]:
        params: dict[str, object] = {"org_id": org_id, "platform": platform, "limit": limit}
        sql = _SELECT + " WHERE org_id = :org_id AND platform = :platform"
        if region is not None:
            sql += " AND region = :region"
            params["region"] = region
        for i, (key, value) in enumerate(sorted((labels or {}).items())):
            params[f"lk{i}"], params[f"lv{i}"] = key, value
            sql += (
                " AND EXISTS (SELECT 1 FROM instance_labels l WHERE l.instance_id = instances.id"  # noqa: S608
                f" AND l.key = :lk{i} AND l.value = :lv{i})"
            )
        if states:
            sql += f" AND state IN ({in_list('st', sorted(states), params)})"
        if starting_after is not None:
            sql += " AND id > :after"
            params["after"] = starting_after
        backwards = ending_before is not None and starting_after is None
        if ending_before is not None:
            sql += " AND id < :before"
            params["before"] = ending_before
        sql += (" ORDER BY id DESC" if backwards else " ORDER BY id") + " LIMIT :limit"
        found = [_instance(row) for row in await self._db.read(lambda tx: tx.fetchall(sql, params))]
        return found[::-1] if backwards else found

    async def find_live_instance(
        self, org_id: str, platform: Platform, region: str, labels: dict[str, str]
    ) -> Instance:
        params: dict[str, object] = {
            "org_id": org_id,
            "platform": platform,
            "region": region,
            "labels_key": labels_key(labels),
        }
        live = in_list("st", sorted(LIVE_STATES), params)
        sql = (
            _SELECT + " WHERE org_id = :org_id AND platform = :platform AND region = :region"
            f" AND labels_key = :labels_key AND state IN ({live}) ORDER BY id LIMIT 1"
        )
        row = await self._db.read(lambda tx: tx.fetchone(sql, params))
        if row is None:
            raise NotFound("instance", labels_key(labels))
        return _instance(row)

    async def list_live_instances(self, *, host_id: str | None = None) -> list[Instance]:
        params: dict[str, object] = {"host_id": host_id}
        sql = _SELECT + f" WHERE state IN ({in_list('st', sorted(LIVE_STATES), params)})"
        if host_id is not None:
            sql += " AND host_id = :host_id"
        found = await self._db.read(
            lambda tx: tx.fetchall(sql + " ORDER BY created_at, id", params)
        )
        return [_instance(row) for row in found]

    async def transition_instance(
        self,
        instance_id: str,
        to: InstanceState,
        *,
        expected: frozenset[InstanceState],
        host_id: str | None = None,
        error_message: str | None = None,
        termination_reason: TerminationReason | None = None,
    ) -> Instance:
        now = self._now()

        def transition(tx: Tx) -> Instance:
            old = _get(tx, instance_id, None, lock=True)
            if old.state not in expected:
                raise Conflict(f"instance {instance_id} is {old.state}, not {sorted(expected)}")
            sets = ["state = :state"]
            params: dict[str, object] = {"id": instance_id, "state": to, "now": now}
            if host_id is not None:
                sets.append("host_id = :host_id")
                params["host_id"] = host_id
            if to in _STAMP:
                sets.append(f"{_STAMP[to]} = :now")
            if to is InstanceState.TERMINATED:
                sets += [
                    "token = NULL",
                    "stream_token = NULL",
                    "error_message = :error_message",
                    "termination_reason = :reason",
                ]
                params["error_message"] = error_message
                params["reason"] = termination_reason
            sql = f"UPDATE instances SET {', '.join(sets)} WHERE id = :id"  # noqa: S608
            tx.execute(sql, params)
            new = _get(tx, instance_id, None)
            if to is InstanceState.TERMINATED:
                record_usage(tx, new, now)  # billed in the same transaction (usage.py)
            return new

        return await self._db.write(transition)

    async def get_instance_by_token(self, token: str) -> tuple[Instance, bool]:
        def read(tx: Tx) -> tuple[Instance, bool]:
            row = tx.fetchone(_SELECT + " WHERE token = :t", {"t": token})
            stream_only = False
            if row is None:
                row = tx.fetchone(_SELECT + " WHERE stream_token = :t", {"t": token})
                stream_only = True
            if row is None:
                raise NotFound("instance token", "…")
            return _instance(row), stream_only

        return await self._db.read(read)
