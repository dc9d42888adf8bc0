"""The PostgreSQL backend: psycopg 3 with a `psycopg_pool.ConnectionPool`, in worker threads.

Theory of operation. The pool holds up to ``max_connections`` autocommit connections; the
backend issues each transaction with ``conn.transaction()``. A `trio.CapacityLimiter` of the
same size admits calls, so a worker that holds a token finds a connection without waiting
(except while the pool reconnects after a database restart: then the call waits up to
`CONNECT_TIMEOUT_S`, in short slices so that cancellation is noticed, and fails with
`StoreUnavailable`). Reads and writes share the
pool: PostgreSQL handles concurrent writers itself.

Cancellation: when the calling task is cancelled, `threads.run_interruptible` sends a cancel
request for the connection's running query (``cancel_safe``, from another thread), the query
fails with ``QueryCanceled``, the transaction rolls back, and the worker returns. That
connection is then closed rather than given back to the pool: a cancel request is
asynchronous on the server, and one that arrives late must not hit the next borrower's query.
The pool opens a replacement in the background.

SQL arrives in the common ``:name`` parameter style and is rewritten once per text to
psycopg's ``%(name)s``.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Any, Final, TypeVar

import psycopg
import psycopg.errors as pg_errors
import trio
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from ..metrics import timed_store
from .database import (
    Dialect,
    Params,
    Row,
    Tx,
    plain_params,
    postgres_unique_columns,
    unique_conflict,
)
from .errors import Conflict, InvalidValue, StoreUnavailable
from .threads import Interruptible, run_interruptible

__all__ = ["PostgresDatabase", "open_postgres_database"]

T = TypeVar("T")

DEFAULT_MAX_CONNECTIONS: Final = 10
CONNECT_TIMEOUT_S: Final = 10.0
_CONNECT_SLICE_S: Final = 0.1
CANCEL_TIMEOUT_S: Final = 5.0

_NAMED_PARAM: Final = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")


@functools.lru_cache(maxsize=512)
def to_pyformat(sql: str) -> str:
    """``WHERE id = :id`` -> ``WHERE id = %(id)s`` (``%`` escaped, ``::`` casts left alone)."""
    return _NAMED_PARAM.sub(r"%(\1)s", sql.replace("%", "%%"))


def _translate(exc: psycopg.Error) -> Exception:
    """A driver error as the store's vocabulary, or unchanged if it is a bug of ours."""
    if isinstance(exc, pg_errors.UniqueViolation):
        diag = exc.diag
        return unique_conflict(diag.table_name or "?", postgres_unique_columns(diag.message_detail))
    if isinstance(exc, pg_errors.ForeignKeyViolation):
        return Conflict("a referenced object does not exist (deleted meanwhile?)")
    if isinstance(exc, psycopg.IntegrityError):
        return InvalidValue(exc.diag.message_primary or str(exc))
    if isinstance(exc, psycopg.DataError):  # e.g. a NUL in text, which SQLite would store
        return InvalidValue(str(exc).strip())
    if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
        return StoreUnavailable(str(exc).strip())
    return exc


class _PostgresTx:
    dialect: Final = Dialect.POSTGRESQL

    def __init__(self, conn: psycopg.Connection[Any], interruptible: Interruptible[Any]) -> None:
        self._conn = conn
        self._interruptible = interruptible

    def _cursor(self, sql: str, params: Params | None) -> psycopg.Cursor[dict[str, Any]]:
        self._interruptible.check()
        cursor = self._conn.cursor(row_factory=dict_row)
        if params is None:
            cursor.execute(sql)  # DDL: no parameters, no %-rewriting
        else:
            cursor.execute(to_pyformat(sql), plain_params(params, datetime_as_text=False))
        return cursor

    def execute(self, sql: str, params: Params | None = None) -> int:
        with self._cursor(sql, params) as cursor:
            return cursor.rowcount

    def fetchone(self, sql: str, params: Params | None = None) -> Row | None:
        with self._cursor(sql, params) as cursor:
            return cursor.fetchone()

    def fetchall(self, sql: str, params: Params | None = None) -> list[Row]:
        with self._cursor(sql, params) as cursor:
            return list(cursor.fetchall())


def _cancel(conn: psycopg.Connection[Any]) -> None:
    conn.cancel_safe(timeout=CANCEL_TIMEOUT_S)


def _getconn(pool: ConnectionPool[Any], interruptible: Interruptible[Any]) -> Any:
    """Borrow a connection, checking for an interrupt between short waits: a wait happens
    only while the pool (re)connects, and the caller's cancel scope must still work then."""
    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    while True:
        interruptible.check()
        try:
            return pool.getconn(timeout=_CONNECT_SLICE_S)
        except PoolTimeout as exc:
            if time.monotonic() > deadline:
                raise StoreUnavailable(f"no database connection: {exc}") from exc


def _transaction(
    pool: ConnectionPool[Any],
    fn: Callable[[Tx], T],
    interruptible: Interruptible[psycopg.Connection[Any]],
) -> T:
    """Worker thread: borrow a connection and run ``fn`` in one transaction on it."""
    conn = _getconn(pool, interruptible)
    try:
        interruptible.attach(conn)
        try:
            with conn.transaction():
                return fn(_PostgresTx(conn, interruptible))
        finally:
            interruptible.detach()
    except psycopg.Error as exc:
        raise _translate(exc) from exc
    finally:
        if interruptible.interrupted:
            conn.close()
        pool.putconn(conn)


class PostgresDatabase:
    """A `database.Database` on a PostgreSQL pool; made by `open_postgres_database`."""

    dialect: Final = Dialect.POSTGRESQL

    def __init__(self, pool: ConnectionPool[Any], max_connections: int) -> None:
        self._pool = pool
        self._limiter = trio.CapacityLimiter(max_connections)
        self._closed = False

    def statistics(self) -> dict[str, int]:
        """The pool's counters (connections opened, waiting requests...), for metrics."""
        stats: dict[str, int] = self._pool.get_stats()
        return stats

    async def _run(self, fn: Callable[[Tx], T]) -> T:
        if self._closed:
            raise trio.ClosedResourceError("the store is closed")
        async with self._limiter:
            interruptible: Interruptible[psycopg.Connection[Any]] = Interruptible(_cancel)
            return await timed_store(
                "postgres",
                run_interruptible(
                    partial(_transaction, self._pool, fn, interruptible), interruptible
                ),
            )

    async def read(self, fn: Callable[[Tx], T]) -> T:
        return await self._run(fn)

    async def write(self, fn: Callable[[Tx], T]) -> T:
        return await self._run(fn)

    async def aclose(self) -> None:
        """Closes the pool. Call it once no task uses the database any more."""
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        self._closed = True
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(partial(self._pool.close, timeout=CANCEL_TIMEOUT_S))


@asynccontextmanager
async def open_postgres_database(
    url: str, *, max_connections: int = DEFAULT_MAX_CONNECTIONS
) -> AsyncIterator[PostgresDatabase]:
    """Connect a pool to ``url`` (a libpq URL or conninfo); close it on exit.

    Raises `StoreUnavailable` if no connection can be made within `CONNECT_TIMEOUT_S`; the
    caller's cancel scope can give up sooner.
    """
    if max_connections < 1:
        raise ValueError("max_connections must be at least 1")
    pool: ConnectionPool[Any] = ConnectionPool(
        url,
        min_size=min(2, max_connections),
        max_size=max_connections,
        kwargs={"autocommit": True},
        open=False,
        timeout=CONNECT_TIMEOUT_S,
        name="devyard-store",
    )
    await trio.to_thread.run_sync(partial(pool.open, wait=False))
    db = PostgresDatabase(pool, max_connections)
    try:
        await db.read(lambda tx: tx.fetchone("SELECT 1 AS ok"))  # reachable, or fail now
        yield db
    finally:
        await db.aclose()
