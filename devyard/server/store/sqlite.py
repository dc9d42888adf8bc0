"""The SQLite backend: the embedded default, one database file.

Theory of operation. The file is in WAL mode, so readers never block the writer nor each
other. The backend owns one writer connection and a few reader connections (``query_only``),
each used by one worker thread at a time. A `trio.CapacityLimiter` guards each set, sized to
it, so a task holding a token always finds a free connection in the free list, and writes
are serialized in this process by the writer's limiter of 1 (SQLite allows one writer; queueing
in trio is cheaper and fairer than spinning in ``busy_timeout``). Write transactions start with
``BEGIN IMMEDIATE`` so a second process on the same file (``devyard admin bootstrap`` beside a
running server) waits for the lock up to the busy timeout instead of failing half-way.
Connections are opened in autocommit mode (``isolation_level=None``): the backend issues
BEGIN/COMMIT/ROLLBACK itself, the driver none. A cancelled call is stopped with
``sqlite3_interrupt`` (see `threads.py`).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any, Final, TypeVar

import trio

from ..metrics import timed_store
from .database import Dialect, Params, Row, Tx, plain_params, sqlite_unique_columns, unique_conflict
from .errors import Conflict, InvalidValue, StoreUnavailable
from .threads import Interruptible, run_interruptible

__all__ = ["SqliteDatabase", "open_sqlite_database"]

T = TypeVar("T")

DEFAULT_READERS: Final = 4
BUSY_TIMEOUT_S: Final = 10.0  # how long a transaction waits for another process's lock
_BUSY_SLICE_S: Final = 0.05  # SQLite's own busy wait, which sqlite3_interrupt cannot cut


def _dict_row(cursor: sqlite3.Cursor, row: tuple[Any, ...]) -> dict[str, Any]:
    return {column[0]: value for column, value in zip(cursor.description, row, strict=True)}


def _connect(path: str, *, writer: bool) -> sqlite3.Connection:
    conn = sqlite3.connect(
        path, timeout=_BUSY_SLICE_S, isolation_level=None, check_same_thread=False
    )
    try:
        conn.row_factory = _dict_row
        if writer:
            # Switching a new file to WAL needs it exclusively: servers starting at once on
            # one file (or while another migrates it) take turns. The sleep is in case SQLite
            # gives up at once, without its own busy wait.
            wal = partial(conn.execute, "PRAGMA journal_mode = WAL")
            mode = _while_busy(wal, partial(time.sleep, _BUSY_SLICE_S)).fetchone()
            if mode is None or str(mode["journal_mode"]).lower() != "wal":
                raise StoreUnavailable(f"{path}: cannot use WAL mode (got {mode!r})")
        conn.execute("PRAGMA foreign_keys = ON")
        # NORMAL is durable in WAL mode except for the last commits on power loss.
        conn.execute("PRAGMA synchronous = NORMAL")
        if not writer:
            conn.execute("PRAGMA query_only = ON")
    except BaseException:
        conn.close()
        raise
    return conn


def _while_busy(action: Callable[[], T], between: Callable[[], object]) -> T:
    """``action()``, tried again while another process holds the file's lock (SQLITE_BUSY),
    up to the busy timeout; ``between`` runs between tries."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            return action()
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY or time.monotonic() > deadline:
                raise
        between()


def _translate(exc: sqlite3.Error) -> Exception:
    """A driver error as the store's vocabulary, or unchanged if it is a bug of ours."""
    message = str(exc)
    if isinstance(exc, sqlite3.IntegrityError):
        unique = sqlite_unique_columns(message)
        if unique is not None:
            return unique_conflict(*unique)
        if "FOREIGN KEY" in message:
            return Conflict("a referenced object does not exist (deleted meanwhile?)")
        return InvalidValue(message)
    if isinstance(exc, sqlite3.OperationalError):
        return StoreUnavailable(message)
    return exc


class _SqliteTx:
    dialect: Final = Dialect.SQLITE

    def __init__(self, conn: sqlite3.Connection, interruptible: Interruptible[Any]) -> None:
        self._conn = conn
        self._interruptible = interruptible

    def _cursor(self, sql: str, params: Params | None) -> sqlite3.Cursor:
        self._interruptible.check()
        return self._conn.execute(sql, plain_params(params, datetime_as_text=True))

    def execute(self, sql: str, params: Params | None = None) -> int:
        return self._cursor(sql, params).rowcount

    def fetchone(self, sql: str, params: Params | None = None) -> Row | None:
        row: Row | None = self._cursor(sql, params).fetchone()
        return row

    def fetchall(self, sql: str, params: Params | None = None) -> list[Row]:
        return list(self._cursor(sql, params).fetchall())


def _begin(conn: sqlite3.Connection, begin: str, interruptible: Interruptible[Any]) -> None:
    """BEGIN, waiting for another process's lock in short slices so that an interrupt
    (which does not reach SQLite's busy handler) is noticed between them."""
    _while_busy(partial(conn.execute, begin), interruptible.check)


def _interrupt(conn: sqlite3.Connection) -> None:
    conn.interrupt()


def _transaction(
    conn: sqlite3.Connection,
    fn: Callable[[Tx], T],
    interruptible: Interruptible[sqlite3.Connection],
    begin: str,
) -> T:
    """Worker thread: run ``fn`` in one transaction on ``conn``."""
    try:
        interruptible.attach(conn)
        try:
            _begin(conn, begin, interruptible)
            try:
                result = fn(_SqliteTx(conn, interruptible))
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        finally:
            interruptible.detach()
    except sqlite3.Error as exc:
        raise _translate(exc) from exc
    return result


class SqliteDatabase:
    """A `database.Database` on one SQLite file; made by `open_sqlite_database`."""

    dialect: Final = Dialect.SQLITE

    def __init__(self, writer: sqlite3.Connection, readers: list[sqlite3.Connection]) -> None:
        self._free_writers = [writer]
        self._free_readers = readers
        self._write_limiter = trio.CapacityLimiter(1)
        self._read_limiter = trio.CapacityLimiter(len(readers))
        self._closed = False

    async def _run(
        self,
        fn: Callable[[Tx], T],
        limiter: trio.CapacityLimiter,
        free: list[sqlite3.Connection],
        begin: str,
    ) -> T:
        if self._closed:
            raise trio.ClosedResourceError("the store is closed")
        async with limiter:
            conn = free.pop()  # the limiter's size is the list's: never empty here
            try:
                interruptible = Interruptible(_interrupt)
                work = partial(_transaction, conn, fn, interruptible, begin)
                return await timed_store("sqlite", run_interruptible(work, interruptible))
            finally:
                free.append(conn)

    async def read(self, fn: Callable[[Tx], T]) -> T:
        return await self._run(fn, self._read_limiter, self._free_readers, "BEGIN")

    async def write(self, fn: Callable[[Tx], T]) -> T:
        return await self._run(fn, self._write_limiter, self._free_writers, "BEGIN IMMEDIATE")

    async def aclose(self) -> None:
        """Closes every connection. Call it once no task uses the database any more."""
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        self._closed = True
        connections = self._free_writers + self._free_readers
        self._free_writers, self._free_readers = [], []
        with trio.CancelScope(shield=True):
            for conn in connections:
                await trio.to_thread.run_sync(conn.close)


@asynccontextmanager
async def open_sqlite_database(
    path: str | Path, *, readers: int = DEFAULT_READERS
) -> AsyncIterator[SqliteDatabase]:
    """Open (creating if needed) the SQLite file at ``path``; close it on exit."""
    if readers < 1:
        raise ValueError("readers must be at least 1")
    connections: list[sqlite3.Connection] = []

    def connect_all() -> None:
        connections.append(_connect(str(path), writer=True))
        for _ in range(readers):
            connections.append(_connect(str(path), writer=False))

    try:
        await trio.to_thread.run_sync(connect_all)
    except BaseException as exc:
        for conn in connections:
            conn.close()
        if isinstance(exc, sqlite3.Error):
            raise StoreUnavailable(f"{path}: {exc}") from exc
        raise
    db = SqliteDatabase(connections[0], connections[1:])
    try:
        yield db
    finally:
        await db.aclose()
