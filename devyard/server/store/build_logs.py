"""Build logs in SQL (migration 8): one row per exec of a build instance, as its host reported
it when the exec ended, kept after the instance ends.

Its own protocol (`BuildLogStore`), not a method set of `base.Store`: the build-log service
and route need only this. The log's bytes are a blob (``blob_key``) in the build-log blob
store; the row is written after the blob, so a row always names bytes that exist (a crash in
between leaves an unnamed blob, which the build-log store may sweep). A host that reports the
same exec again (a retry after a lost answer) replaces the row: the report is idempotent.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any, Final, Protocol

import attrs

from .database import Database, Row, Tx, as_datetime
from .errors import NotFound

__all__ = ["BuildLogRecord", "BuildLogStore", "SqlBuildLogs"]

_COLUMNS: Final = (
    "instance_id, exec_id, org_id, command, status, exit_code, started_at, finished_at,"
    " duration_ms, error, blob_key, log_size, artifacts, created_at"
)


@attrs.frozen
class BuildLogRecord:
    instance_id: str
    exec_id: str
    org_id: str
    command: str
    status: str  # SUCCEEDED | FAILED | CANCELLED
    exit_code: int | None
    started_at: datetime | None
    finished_at: datetime | None
    duration_ms: int | None
    error: str | None
    blob_key: str | None
    log_size: int
    artifacts: tuple[dict[str, Any], ...]
    created_at: datetime


class BuildLogStore(Protocol):
    async def put_build_log(self, record: BuildLogRecord) -> None:
        """Insert the record, or replace the one of the same (instance, exec)."""

    async def list_build_logs(self, org_id: str, instance_id: str) -> list[BuildLogRecord]:
        """The instance's records, oldest first (none for another organization's)."""

    async def get_build_log(self, instance_id: str, exec_id: str) -> BuildLogRecord:
        """One record; `NotFound` if there is none."""


def _record(row: Row) -> BuildLogRecord:
    def when(value: Any) -> datetime | None:
        return None if value is None else as_datetime(value)

    return BuildLogRecord(
        instance_id=row["instance_id"],
        exec_id=row["exec_id"],
        org_id=row["org_id"],
        command=row["command"],
        status=row["status"],
        exit_code=row["exit_code"],
        started_at=when(row["started_at"]),
        finished_at=when(row["finished_at"]),
        duration_ms=row["duration_ms"],
        error=row["error"],
        blob_key=row["blob_key"],
        log_size=row["log_size"],
        artifacts=tuple(json.loads(row["artifacts"])),
        created_at=as_datetime(row["created_at"]),
    )


def _put(tx: Tx, record: BuildLogRecord) -> None:
    tx.execute(
        "DELETE FROM build_logs WHERE instance_id = :instance_id AND exec_id = :exec_id",
        {"instance_id": record.instance_id, "exec_id": record.exec_id},
    )
    tx.execute(
        f"INSERT INTO build_logs ({_COLUMNS}) VALUES (:instance_id, :exec_id, :org_id,"  # noqa: S608
        " :command, :status, :exit_code, :started_at, :finished_at, :duration_ms, :error,"
        " :blob_key, :log_size, :artifacts, :created_at)",
        {
            **attrs.asdict(record, recurse=False),
            "artifacts": json.dumps(list(record.artifacts)),
        },
    )


class SqlBuildLogs:
    """Mixed into `SqlStore`; implements `BuildLogStore`."""

    _db: Database
    _now: Callable[[], datetime]

    async def put_build_log(self, record: BuildLogRecord) -> None:
        await self._db.write(lambda tx: _put(tx, record))

    async def list_build_logs(self, org_id: str, instance_id: str) -> list[BuildLogRecord]:
        sql = (
            f"SELECT {_COLUMNS} FROM build_logs"  # noqa: S608
            " WHERE org_id = :org_id AND instance_id = :instance_id ORDER BY exec_id"
        )
        params = {"org_id": org_id, "instance_id": instance_id}
        rows = await self._db.read(lambda tx: tx.fetchall(sql, params))
        return [_record(row) for row in rows]

    async def get_build_log(self, instance_id: str, exec_id: str) -> BuildLogRecord:
        sql = (
            f"SELECT {_COLUMNS} FROM build_logs"  # noqa: S608
            " WHERE instance_id = :instance_id AND exec_id = :exec_id"
        )
        params = {"instance_id": instance_id, "exec_id": exec_id}
        row = await self._db.read(lambda tx: tx.fetchone(sql, params))
        if row is None:
            raise NotFound("build log", f"{instance_id}/{exec_id}")
        return _record(row)
