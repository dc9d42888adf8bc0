"""The PostgreSQL large-object backend's own behaviour: replicas opening it together, the sweep
of a write a killed process left, an unreachable database."""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator

import psycopg
import pytest
import trio

from devyard.server.blobs import BlobStoreUnavailable
from devyard.server.blobs.pg_large_object import PgLargeObjectStore, open_pg_store
from devyard.server.store.pgcluster import TemporaryCluster
from tests.ports import free_port

pytestmark = pytest.mark.postgres


async def _chunks(*parts: bytes) -> AsyncGenerator[bytes, None]:
    for part in parts:
        await trio.lowlevel.checkpoint()
        yield part


async def test_replicas_opening_together_share_one_set_of_tables(postgres_url: str) -> None:
    stores: list[PgLargeObjectStore] = []

    async def replica(done: trio.Event) -> None:
        async with open_pg_store(postgres_url, "blobs", max_connections=1) as store:
            stores.append(store)
            await done.wait()

    done = trio.Event()
    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(replica, done)
        while len(stores) < 3:  # noqa: ASYNC110 - three tasks opening, no event to wait on
            await trio.sleep(0.01)
        await stores[0].write("one.1", _chunks(b"written on replica 0"), max_size=100)
        chunks = [c async for c in stores[2].read("one.1")]
        assert b"".join(chunks) == b"written on replica 0"
        done.set()


async def test_a_killed_writers_large_object_is_swept(postgres_cluster: TemporaryCluster) -> None:
    # a database of its own: large objects are per database, not per schema
    postgres_url = postgres_cluster.create_database()
    async with open_pg_store(postgres_url, "blobs") as store:
        await store.write("kept.1", _chunks(b"kept"), max_size=100)
        # what a process killed mid-write leaves: an object and its write row, never finished
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            row = conn.execute("SELECT lo_from_bytea(0, 'half'::bytea)").fetchone()
            assert row is not None
            dead = int(row[0])
            conn.execute(
                "INSERT INTO devyard_blob_writes (oid, namespace, touched)"
                " VALUES (%s, 'blobs', now() - interval '2 hours')",
                (dead,),
            )
        assert await store.sweep_temporary(older_than=time.time() - 3 * 3600) == 0  # young
        assert await store.sweep_temporary(older_than=time.time() - 3600) == 1
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            left = conn.execute(
                "SELECT count(*) FROM pg_largeobject_metadata WHERE oid = %s", (dead,)
            ).fetchone()
            assert left == (1 - 1,)
            objects = conn.execute("SELECT count(*) FROM pg_largeobject_metadata").fetchone()
            assert objects == (1,)  # "kept.1" only
        assert [b.key for b in await store.list_blobs()] == ["kept.1"]
        await store.delete("kept.1")
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            objects = conn.execute("SELECT count(*) FROM pg_largeobject_metadata").fetchone()
            assert objects == (0,)  # deleting a blob unlinks its object


async def test_an_unreachable_database_is_unavailable() -> None:
    url = f"postgresql://devyard@127.0.0.1:{free_port()}/nothing"
    with pytest.raises(BlobStoreUnavailable, match="database"):
        async with open_pg_store(url, "blobs", connect_timeout=1):
            pass
