"""Concurrent callers and cancellation, on both backends.

Cancellation must stop the query on the database, not abandon it: a cancelled call returns
promptly, leaves nothing behind, and the connections stay usable.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest
import trio

from devyard.server.store import Conflict, Store, StoreUnavailable, open_store
from devyard.server.store.factory import parse_target
from devyard.server.store.postgres import open_postgres_database
from devyard.server.store.sqlite import open_sqlite_database
from tests.ports import free_port

PROMPTLY = 15.0  # seconds, loose for a loaded machine; the queries below would run 30 s or forever
SLEEP_30 = "SELECT pg_sleep(30) AS slept"
FOREVER = (
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) AS n FROM c"
)


async def test_fifty_concurrent_creates(store: Store) -> None:
    async with trio.open_nursery() as nursery:
        for i in range(50):
            nursery.start_soon(store.create_organization, f"org-{i:02}")
    orgs = await store.list_organizations()
    assert sorted(o.name for o in orgs) == [f"org-{i:02}" for i in range(50)]
    assert len({o.id for o in orgs}) == 50


async def test_concurrent_creates_of_one_name_let_exactly_one_win(store: Store) -> None:
    outcomes: list[str] = []

    async def attempt() -> None:
        try:
            await store.create_user("same")
            outcomes.append("created")
        except Conflict:
            outcomes.append("conflict")

    async with trio.open_nursery() as nursery:
        for _ in range(50):
            nursery.start_soon(attempt)
    assert sorted(outcomes) == ["conflict"] * 49 + ["created"]


async def test_readers_and_writers_interleave(store: Store) -> None:
    org = await store.create_organization("acme")
    seen: list[int] = []

    async def reader() -> None:
        for _ in range(10):
            seen.append(len(await store.list_organizations()))
            await store.get_organization(org.id)

    async with trio.open_nursery() as nursery:
        for i in range(20):
            nursery.start_soon(store.create_user, f"u{i}")
            nursery.start_soon(reader)
    assert seen == [1] * 200
    assert (await store.get_user_by_name("u19")).name == "u19"


async def test_a_call_cancelled_before_it_starts_does_nothing(store: Store) -> None:
    with trio.CancelScope() as scope:
        scope.cancel()
        await store.create_organization("never")
    assert scope.cancelled_caught
    assert await store.list_organizations() == []


async def test_closed_store_refuses_calls(database_target: str) -> None:
    async with open_store(database_target) as store:
        await store.ping()
    with pytest.raises(trio.ClosedResourceError):
        await store.ping()
    await store.aclose()  # idempotent


@pytest.mark.postgres
async def test_cancel_stops_a_running_postgres_query(postgres_url: str) -> None:
    async with open_postgres_database(postgres_url, max_connections=3) as db:
        start = trio.current_time()
        with trio.move_on_after(0.5) as scope:
            await db.read(lambda tx: tx.fetchone(SLEEP_30))
        assert scope.cancelled_caught
        assert trio.current_time() - start < PROMPTLY

        # The query is gone from the server, not running on in the background.
        query = "SELECT count(*) AS n FROM pg_stat_activity WHERE query = :q AND state = 'active'"
        row = await db.read(lambda tx: tx.fetchone(query, {"q": SLEEP_30}))
        assert row == {"n": 0}

        # Every connection of the pool still works, at once.
        results: list[object] = []

        async def ping() -> None:
            results.append(await db.read(lambda tx: tx.fetchone("SELECT 1 AS ok")))

        async with trio.open_nursery() as nursery:
            for _ in range(6):
                nursery.start_soon(ping)
        assert results == [{"ok": 1}] * 6


async def test_cancel_stops_a_running_sqlite_query(tmp_path: object) -> None:
    async with open_sqlite_database(f"{tmp_path}/x.db", readers=1) as db:
        start = trio.current_time()
        with trio.move_on_after(0.5) as scope:
            await db.read(lambda tx: tx.fetchone(FOREVER))
        assert scope.cancelled_caught
        assert trio.current_time() - start < PROMPTLY
        # The one reader connection is free and works.
        assert await db.read(lambda tx: tx.fetchone("SELECT 1 AS ok")) == {"ok": 1}


@contextmanager
def fresh_sqlite_file_locked(path: str) -> Iterator[sqlite3.Connection]:
    """Another process writing a new SQLite file: an exclusive lock, still in rollback-journal
    mode (as while a first server creates and migrates it). Commit to release it."""
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN EXCLUSIVE")
        other.execute("CREATE TABLE t (x INTEGER)")
        yield other
    finally:
        other.close()


async def test_opening_sqlite_waits_for_another_process_lock(tmp_path: object) -> None:
    path = f"{tmp_path}/x.db"
    with fresh_sqlite_file_locked(path) as other:
        async with trio.open_nursery() as nursery:
            opened = trio.Event()

            async def open_it() -> None:
                async with open_sqlite_database(path, readers=1) as db:
                    opened.set()
                    rows = await db.read(lambda tx: tx.fetchall("PRAGMA journal_mode"))
                    assert rows == [{"journal_mode": "wal"}]

            nursery.start_soon(open_it)
            await trio.sleep(0.3)  # it waits: switching to WAL needs the lock
            assert not opened.is_set()
            other.execute("COMMIT")
    assert opened.is_set()


async def test_opening_sqlite_locked_past_the_busy_timeout_is_unavailable(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("devyard.server.store.sqlite.BUSY_TIMEOUT_S", 0.3)
    path = f"{tmp_path}/x.db"
    with (
        fresh_sqlite_file_locked(path),
        pytest.raises(StoreUnavailable, match="database is locked"),
    ):
        async with open_sqlite_database(path, readers=1):
            pytest.fail("opened a file another process holds locked")


@contextmanager
def lock_held_elsewhere(target: str, org_id: str) -> Iterator[None]:
    """Another process's transaction holding the lock a store write needs."""
    kind, where = parse_target(target)
    if kind == "postgresql":
        with psycopg.connect(where) as conn:  # a transaction until the block ends
            conn.execute("SELECT id FROM organizations WHERE id = %s FOR UPDATE", [org_id])
            yield
            conn.rollback()
    else:
        other = sqlite3.connect(where, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")
            yield
            other.execute("ROLLBACK")
        finally:
            other.close()


async def test_cancel_stops_a_store_call_waiting_for_a_lock(
    store: Store, database_target: str
) -> None:
    org = await store.create_organization("acme")
    with lock_held_elsewhere(database_target, org.id):
        start = trio.current_time()
        with trio.move_on_after(0.5) as scope:
            await store.update_organization(org.id, name="renamed")
        assert scope.cancelled_caught
        assert trio.current_time() - start < PROMPTLY
    assert (await store.get_organization(org.id)).name == "acme"
    assert (await store.update_organization(org.id, name="renamed")).name == "renamed"


async def test_opening_an_unreachable_postgres_can_be_cancelled() -> None:
    port = free_port()  # nobody listens there
    start = trio.current_time()
    with trio.move_on_after(0.5) as scope:
        async with open_store(f"postgresql://devyard@127.0.0.1:{port}/none"):
            pytest.fail("opened a store on a closed port")
    assert scope.cancelled_caught
    assert trio.current_time() - start < PROMPTLY


@pytest.mark.postgres
async def test_lost_connections_are_unavailable_then_replaced(postgres_url: str) -> None:
    async with open_store(postgres_url, max_connections=4) as store:
        await store.ping()
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        failures = 0
        for _ in range(6):  # at most one failure per connection the pool held
            try:
                await store.ping()
                break
            except StoreUnavailable:
                failures += 1
        else:
            pytest.fail("the store never recovered")
        assert failures <= 4
        await store.ping()
