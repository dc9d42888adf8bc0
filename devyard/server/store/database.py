"""What the SQL store needs from a backend: transactions run in worker threads.

A `Database` (SQLite or PostgreSQL) runs a plain sync function ``fn(tx)`` inside one
transaction on one of its connections, in a worker thread, and returns its result: `read`
for functions that only read, `write` for the rest (SQLite serializes those). Commit on
return, roll back on any exception. The function talks to the database only through `Tx`,
which speaks one SQL text for both dialects: named parameters written ``:name``, values as
Python objects (`datetime`, `bool`, `str` enums), rows as mappings by column name. What
differs between the dialects (parameter style, how a timestamp is stored, how an error
looks) stays inside the two backends; what cannot be hidden (DDL types) is explicit in
`schema.py` through `Dialect`.

Driver errors are translated once, here at the boundary, through the helpers below.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

from .errors import Conflict

__all__ = [
    "Database",
    "Dialect",
    "Params",
    "Row",
    "Tx",
    "as_datetime",
    "in_list",
    "plain_params",
    "unique_conflict",
]

T = TypeVar("T")
Row = Mapping[str, Any]
Params = Mapping[str, object]


class Dialect(enum.StrEnum):
    SQLITE = "sqlite"
    POSTGRESQL = "postgresql"


class Tx(Protocol):
    """One open transaction, used from the worker thread that runs it."""

    @property
    def dialect(self) -> Dialect: ...

    def execute(self, sql: str, params: Params | None = None) -> int:
        """Runs a statement; returns the number of rows it changed."""

    def fetchone(self, sql: str, params: Params | None = None) -> Row | None: ...

    def fetchall(self, sql: str, params: Params | None = None) -> list[Row]: ...


class Database(Protocol):
    @property
    def dialect(self) -> Dialect: ...

    async def read(self, fn: Callable[[Tx], T]) -> T: ...

    async def write(self, fn: Callable[[Tx], T]) -> T: ...

    async def aclose(self) -> None: ...


def in_list(prefix: str, values: Iterable[object], params: dict[str, object]) -> str:
    """``:p0, :p1, ...`` for an ``IN (...)`` list of *values*, each put in *params*."""
    names = []
    for n, value in enumerate(values):
        params[f"{prefix}{n}"] = value
        names.append(f":{prefix}{n}")
    return ", ".join(names)


def plain_params(params: Params | None, *, datetime_as_text: bool) -> dict[str, object]:
    """Parameters as the drivers take them: enums by value; datetimes as aware UTC, or as
    fixed-width ISO text (which sorts like time) for SQLite."""
    return {
        name: _plain(name, value, datetime_as_text=datetime_as_text)
        for name, value in (params or {}).items()
    }


def _plain(name: str, value: object, *, datetime_as_text: bool) -> object:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError(f"naive datetime for :{name}")
        utc = value.astimezone(UTC)
        return utc.isoformat(timespec="microseconds") if datetime_as_text else utc
    return value


def as_datetime(value: object) -> datetime:
    """A stored timestamp as an aware UTC datetime (PostgreSQL gives datetimes, SQLite the
    ISO text its backend wrote)."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if not isinstance(value, datetime):
        raise TypeError(f"not a timestamp: {value!r}")
    return value.astimezone(UTC)


# Readable messages for the uniqueness rules of the schema, by (table, columns). A rule not
# listed still becomes a Conflict, with a generic message.
_UNIQUE_MESSAGES: dict[tuple[str, tuple[str, ...]], tuple[str, str | None]] = {
    ("organizations", ("name",)): ("an organization with this name already exists", "name"),
    ("users", ("name",)): ("a user with this name already exists", "name"),
    ("users", ("email",)): ("a user with this email already exists", "email"),
    ("memberships", ("org_id", "user_id")): ("the user is already a member", None),
    ("api_keys", ("lookup_id",)): ("an API key with this lookup id already exists", None),
}


def unique_conflict(table: str, columns: Sequence[str]) -> Conflict:
    key = (table, tuple(columns))
    message, field = _UNIQUE_MESSAGES.get(
        key, (f"{table} ({', '.join(columns)}) already exists", None)
    )
    return Conflict(message, field=field)


_SQLITE_UNIQUE_RE = re.compile(r"UNIQUE constraint failed: (.+)")
_PG_KEY_RE = re.compile(r"Key \(([^)]*)\)=")


def sqlite_unique_columns(message: str) -> tuple[str, list[str]] | None:
    """``"UNIQUE constraint failed: t.a, t.b"`` -> ``("t", ["a", "b"])``."""
    match = _SQLITE_UNIQUE_RE.match(message)
    if match is None:
        return None
    qualified = [part.strip() for part in match.group(1).split(",")]
    table = qualified[0].partition(".")[0]
    return table, [part.partition(".")[2] for part in qualified]


def postgres_unique_columns(detail: str | None) -> list[str]:
    """``"Key (a, b)=(x, y) already exists."`` -> ``["a", "b"]``."""
    match = _PG_KEY_RE.match(detail or "")
    return [c.strip() for c in match.group(1).split(",")] if match else []
