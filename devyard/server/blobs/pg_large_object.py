"""`PgLargeObjectStore`: blobs as PostgreSQL large objects, for deployments that have the
database every replica shares and no S3 (docs/blobs.md).

Why large objects through the server-side functions: psycopg 3 has no client-side large-object
API (psycopg2's ``lobject`` is gone), but ``lo_put(oid, offset, bytes)`` and ``lo_get(oid,
offset, length)`` are ordinary SQL functions taking and returning ``bytea``, sent in binary.
Each moves one chunk in one short statement, with no large-object descriptor to keep open, so
no connection or transaction is held while a slow client sends or drains (descriptors of
``lo_open`` live only inside a transaction). A bytea chunk table would move the same bytes the
same way; large objects are PostgreSQL's own facility for this (2 KiB pages in
``pg_largeobject``, never TOAST-compressed, no 1 GB value limit), dumped and restored with the
database (``pg_dump`` includes them).

Tables (made at open, under an advisory lock so replicas starting together do not race):
``devyard_blobs (namespace, key) -> oid, size, md5, modified`` names the finished blobs, and
``devyard_blob_writes (oid, namespace, touched)`` the large objects being written. A write
creates its large object and its ``devyard_blob_writes`` row in one transaction, appends
chunks with ``lo_put`` (each also touching the row), then in one transaction inserts the
``devyard_blobs`` row and deletes the write's: before that commit nothing is under the key.
A re-upload does not unlink the bytes it replaced (a download reading them chunk by chunk
would be cut): `retire` dates the row (``retired``), `list_blobs` reports that date, and the
orphan sweep deletes the blob only its grace after the re-upload.
A failed, cancelled or too large write unlinks its object (shielded). A process killed
mid-write leaves an object whose write row stops being touched: `sweep_temporary` unlinks
those older than the grace that this process is not writing. Deleting a blob deletes its row
and unlinks its object in one transaction.

The pool is psycopg_pool's, in worker threads admitted by a `trio.CapacityLimiter` of its size
(as the store's own backend, store/postgres.py). Errors: a full disk (``53100``) is
`BlobStoreFull`; a connection or pool failure and any other database error are
`BlobStoreUnavailable`; a key without a row is `BlobNotFound`.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Any, Final, TypeVar

import psycopg
import psycopg.errors as pg_errors
import trio
from psycopg_pool import ConnectionPool, PoolTimeout

from .base import (
    BlobNotFound,
    BlobStoreFull,
    BlobStoreUnavailable,
    BlobTooLarge,
    StoredBlob,
    WrittenBlob,
)

__all__ = ["CHUNK", "PgLargeObjectStore", "open_pg_store"]

log = logging.getLogger(__name__)

T = TypeVar("T")

CHUNK: Final = 1024 * 1024  # bytes per lo_put / lo_get
_PROBE_CONNECT: Final = 2.0  # seconds a readiness probe waits for a pooled connection
_KEY_RE: Final = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,199}")
_NAMESPACE_RE: Final = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
_SCHEMA_LOCK: Final = 0x64657679_626C6F62  # "devyblob": one replica creates the tables
_SCHEMA: Final = (
    """CREATE TABLE IF NOT EXISTS devyard_blobs (
        namespace text NOT NULL,
        key text NOT NULL,
        oid oid NOT NULL,
        size bigint NOT NULL,
        md5 text NOT NULL,
        modified timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (namespace, key)
    )""",
    """CREATE TABLE IF NOT EXISTS devyard_blob_writes (
        oid oid PRIMARY KEY,
        namespace text NOT NULL,
        touched timestamptz NOT NULL DEFAULT now()
    )""",
    # when a re-upload replaced the blob (`retire`): the orphan sweep's grace counts from it
    "ALTER TABLE devyard_blobs ADD COLUMN IF NOT EXISTS retired timestamptz",
)


def translate(exc: Exception) -> Exception:
    """The blob store's error for a database error (others are returned as they are)."""
    if isinstance(exc, pg_errors.DiskFull):
        return BlobStoreFull("the database has no room left for blobs")
    if isinstance(exc, PoolTimeout | psycopg.OperationalError):
        return BlobStoreUnavailable(f"the database is unavailable: {type(exc).__name__}")
    if isinstance(exc, psycopg.Error):
        return BlobStoreUnavailable(f"the database failed: {type(exc).__name__}")
    return exc


class PgLargeObjectStore:
    """A `BlobStore` of the large objects named in ``devyard_blobs`` for *namespace*."""

    def __init__(
        self, pool: ConnectionPool[Any], *, namespace: str, limiter: trio.CapacityLimiter
    ) -> None:
        if _NAMESPACE_RE.fullmatch(namespace) is None:
            raise ValueError(f"invalid namespace {namespace!r}")
        self.pool = pool
        self.namespace = namespace
        self._limiter = limiter
        self._probe_limiter = trio.CapacityLimiter(1)  # readiness probes, beside the pool's
        self._writing: set[int] = set()  # oids of this process's writes

    def __repr__(self) -> str:
        return f"PgLargeObjectStore(namespace={self.namespace!r})"

    def sibling(self, namespace: str) -> PgLargeObjectStore:
        return PgLargeObjectStore(self.pool, namespace=namespace, limiter=self._limiter)

    @staticmethod
    def _check(key: str) -> str:
        if _KEY_RE.fullmatch(key) is None:
            raise ValueError(f"invalid blob key {key!r}")
        return key

    async def _run(
        self, fn: Callable[[psycopg.Connection[Any]], T], *, transaction: bool = True
    ) -> T:
        """*fn* with a pooled (autocommit) connection in a worker thread, in a transaction
        unless *fn* is one statement (a chunk: two round trips fewer)."""

        def work() -> T:
            with self.pool.connection() as conn:
                if not transaction:
                    return fn(conn)
                with conn.transaction():
                    return fn(conn)

        try:
            return await trio.to_thread.run_sync(work, limiter=self._limiter)
        except Exception as exc:
            translated = translate(exc)
            if translated is exc:
                raise
            raise translated from exc

    # ---- write -------------------------------------------------------------------------------

    async def write(self, key: str, chunks: AsyncIterable[bytes], *, max_size: int) -> WrittenBlob:
        self._check(key)
        namespace = self.namespace

        def create(conn: psycopg.Connection[Any]) -> int:
            row = conn.execute("SELECT lo_create(0)").fetchone()
            assert row is not None
            oid = int(row[0])
            conn.execute(
                "INSERT INTO devyard_blob_writes (oid, namespace) VALUES (%s, %s)", (oid, namespace)
            )
            return oid

        oid = await self._run(create)
        self._writing.add(oid)
        digest = hashlib.md5(usedforsecurity=False)
        size = 0
        done = False
        try:
            buffer = bytearray()

            def put(data: bytes, offset: int, conn: psycopg.Connection[Any]) -> None:
                digest.update(data)
                conn.execute(  # one round trip: the chunk, and the write's sign of life
                    "WITH touch AS (UPDATE devyard_blob_writes SET touched = now()"
                    " WHERE oid = %s) SELECT lo_put(%s, %s, %s)",
                    (oid, oid, offset, data),
                )

            written = 0
            async for chunk in chunks:
                size += len(chunk)
                if size > max_size:
                    raise BlobTooLarge(max_size)
                buffer += chunk
                if len(buffer) >= CHUNK:
                    data, buffer = bytes(buffer), bytearray()
                    await self._run(partial(put, data, written), transaction=False)
                    written += len(data)
            if buffer:
                await self._run(partial(put, bytes(buffer), written), transaction=False)

            def commit(conn: psycopg.Connection[Any]) -> None:
                conn.execute(
                    "INSERT INTO devyard_blobs (namespace, key, oid, size, md5)"
                    " VALUES (%s, %s, %s, %s, %s)",
                    (namespace, key, oid, size, digest.hexdigest()),
                )
                conn.execute("DELETE FROM devyard_blob_writes WHERE oid = %s", (oid,))

            await self._run(commit)
            done = True
        finally:
            self._writing.discard(oid)
            if not done:
                with trio.CancelScope(shield=True):
                    await self._discard(oid)
        return WrittenBlob(key=key, md5=digest.hexdigest(), size=size)

    async def _discard(self, oid: int) -> None:
        def unlink(conn: psycopg.Connection[Any]) -> None:
            conn.execute("DELETE FROM devyard_blob_writes WHERE oid = %s", (oid,))
            conn.execute(
                "SELECT lo_unlink(oid) FROM pg_largeobject_metadata WHERE oid = %s", (oid,)
            )

        try:
            await self._run(unlink)
        except (BlobStoreUnavailable, BlobStoreFull) as exc:  # the sweep retries
            log.warning("could not remove the large object %s, the sweep will: %s", oid, exc)

    # ---- read --------------------------------------------------------------------------------

    async def _row(self, key: str) -> tuple[int, int]:
        namespace = self.namespace

        def find(conn: psycopg.Connection[Any]) -> tuple[int, int] | None:
            row = conn.execute(
                "SELECT oid, size FROM devyard_blobs WHERE namespace = %s AND key = %s",
                (namespace, key),
            ).fetchone()
            return None if row is None else (int(row[0]), int(row[1]))

        found = await self._run(find)
        if found is None:
            raise BlobNotFound(key)
        return found

    async def read(self, key: str) -> AsyncGenerator[bytes, None]:
        oid, size = await self._row(self._check(key))

        def get(offset: int, conn: psycopg.Connection[Any]) -> bytes:
            row = conn.execute(
                "SELECT lo_get(%s, %s, %s)", (oid, offset, CHUNK), binary=True
            ).fetchone()
            assert row is not None
            return bytes(row[0])

        offset = 0
        while offset < size:
            try:
                data = await self._run(partial(get, offset), transaction=False)
            except BlobStoreUnavailable as exc:
                if isinstance(exc.__cause__, pg_errors.UndefinedObject):
                    raise BlobNotFound(key) from None  # deleted under the read
                raise
            if not data:
                return
            offset += len(data)
            yield data

    async def size(self, key: str) -> int:
        """The size of the blob under *key*; `BlobNotFound` if none."""
        return (await self._row(self._check(key)))[1]

    # ---- delete, list, sweep -----------------------------------------------------------------

    async def delete(self, key: str) -> None:
        self._check(key)
        namespace = self.namespace

        def delete(conn: psycopg.Connection[Any]) -> None:
            conn.execute(
                "WITH d AS (DELETE FROM devyard_blobs WHERE namespace = %s AND key = %s"
                " RETURNING oid) SELECT lo_unlink(d.oid) FROM d"
                " JOIN pg_largeobject_metadata m ON m.oid = d.oid",
                (namespace, key),
            )

        await self._run(delete)

    async def probe(self) -> None:
        """One short read of the blobs table on a pooled connection, in a thread of its own
        (abandoned if the caller gives up; at most one at a time), so a pool busy with
        transfers or a database that does not answer cannot hold readiness."""

        def query() -> None:
            with self.pool.connection(timeout=_PROBE_CONNECT) as conn:
                conn.execute("SELECT 1 FROM devyard_blobs LIMIT 1").fetchall()

        try:
            await trio.to_thread.run_sync(
                query, limiter=self._probe_limiter, abandon_on_cancel=True
            )
        except Exception as exc:
            translated = translate(exc)
            if translated is exc:
                raise
            raise translated from exc

    async def retire(self, key: str) -> None:
        """Dates *key* retired now; its bytes stay until the orphan sweep's grace has passed
        since (module docstring)."""
        self._check(key)
        namespace = self.namespace

        def retire(conn: psycopg.Connection[Any]) -> None:
            conn.execute(
                "UPDATE devyard_blobs SET retired = now() WHERE namespace = %s AND key = %s",
                (namespace, key),
            )

        await self._run(retire, transaction=False)

    async def list_blobs(self) -> list[StoredBlob]:
        namespace = self.namespace

        def scan(conn: psycopg.Connection[Any]) -> list[StoredBlob]:
            rows = conn.execute(  # greatest() skips a NULL retired
                "SELECT key, extract(epoch FROM greatest(modified, retired))"
                " FROM devyard_blobs WHERE namespace = %s",
                (namespace,),
            ).fetchall()
            return [StoredBlob(str(key), float(modified)) for key, modified in rows]

        return await self._run(scan)

    async def sweep_temporary(self, *, older_than: float) -> int:
        """Unlink the objects of writes that no longer run: not this process's, untouched
        since *older_than* (epoch seconds); how many."""
        writing = sorted(self._writing)
        namespace = self.namespace

        def sweep(conn: psycopg.Connection[Any]) -> int:
            rows = conn.execute(
                "DELETE FROM devyard_blob_writes WHERE namespace = %s"
                " AND touched < to_timestamp(%s) AND NOT (oid = ANY(%s::oid[])) RETURNING oid",
                (namespace, older_than, writing),
            ).fetchall()
            for (oid,) in rows:
                conn.execute(
                    "SELECT lo_unlink(oid) FROM pg_largeobject_metadata WHERE oid = %s", (oid,)
                )
            return len(rows)

        return await self._run(sweep)


def _create_schema(pool: ConnectionPool[Any]) -> None:
    with pool.connection() as conn, conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
        for statement in _SCHEMA:
            conn.execute(statement)


@asynccontextmanager
async def open_pg_store(
    url: str, namespace: str, *, max_connections: int = 4, connect_timeout: float = 10.0
) -> AsyncIterator[PgLargeObjectStore]:
    """The *namespace* of the blobs in the database at *url* (tables made if missing), with a
    pool of *max_connections* closed at the end."""
    pool: ConnectionPool[Any] = ConnectionPool(
        url,
        min_size=1,
        max_size=max_connections,
        kwargs={"autocommit": True},
        timeout=connect_timeout,
        open=False,
        name="devyard-blobs",
    )
    await trio.to_thread.run_sync(partial(pool.open, wait=False))
    try:
        try:
            await trio.to_thread.run_sync(_create_schema, pool)
        except (psycopg.Error, PoolTimeout) as exc:
            raise translate(exc) from exc
        yield PgLargeObjectStore(
            pool, namespace=namespace, limiter=trio.CapacityLimiter(max_connections)
        )
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(partial(pool.close, timeout=5.0))
