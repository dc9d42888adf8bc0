"""`open_store`: the one way to get a `Store`, choosing the backend from the target.

    async with open_store("/var/lib/devyard/devyard.db") as store: ...     # SQLite file
    async with open_store("sqlite:///var/lib/devyard/devyard.db") as store: ...  # the same
    async with open_store("postgresql://user@db.example/devyard") as store: ...  # PostgreSQL

Opening applies pending schema migrations before yielding; leaving closes every connection.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import datetime
from typing import Final

from .base import Store
from .database import Database
from .migrate import migrate
from .postgres import DEFAULT_MAX_CONNECTIONS, open_postgres_database
from .rows import utc_now
from .sqlite import DEFAULT_READERS, open_sqlite_database
from .sqlstore import SqlStore

__all__ = ["open_store", "parse_target"]

_POSTGRES_SCHEMES: Final = ("postgresql://", "postgres://")
_SQLITE_SCHEME: Final = "sqlite://"


def parse_target(target: str | os.PathLike[str]) -> tuple[str, str]:
    """``("postgresql", url)`` or ``("sqlite", path)``. A bare path means SQLite;
    ``sqlite://`` is followed by the path, so ``sqlite:///abs/file.db`` is absolute."""
    text = os.fspath(target)
    if text.startswith(_POSTGRES_SCHEMES):
        return "postgresql", text
    if text.startswith(_SQLITE_SCHEME):
        path = text.removeprefix(_SQLITE_SCHEME)
        if not path:
            raise ValueError(f"no file path in {text!r}")
        return "sqlite", path
    if "://" in text:
        scheme = text.split("://", 1)[0]
        raise ValueError(
            f"unsupported database URL scheme {scheme!r}: use a file path, "
            "sqlite://PATH or postgresql://..."
        )
    if not text:
        raise ValueError("empty database target")
    return "sqlite", text


@asynccontextmanager
async def open_store(
    target: str | os.PathLike[str],
    *,
    clock: Callable[[], datetime] = utc_now,
    max_connections: int | None = None,
) -> AsyncIterator[Store]:
    """Open the store at ``target``, migrate it, yield it; close it on exit.

    ``max_connections`` sizes the PostgreSQL pool (default 10) or the SQLite reader
    connections (default 4). Raises `StoreUnavailable` when the database cannot be reached
    and `MigrationError` when its schema cannot be brought to this version.
    """
    kind, where = parse_target(target)
    database: AbstractAsyncContextManager[Database]
    if kind == "postgresql":
        database = open_postgres_database(
            where, max_connections=max_connections or DEFAULT_MAX_CONNECTIONS
        )
    else:
        database = open_sqlite_database(where, readers=max_connections or DEFAULT_READERS)
    async with database as db:
        await migrate(db, clock=clock)
        yield SqlStore(db, clock=clock)
