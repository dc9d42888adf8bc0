"""The migration runner, on both backends, with the real schema and with small test ones."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime

import pytest
import trio

from devyard.server.store import MigrationError, open_store
from devyard.server.store.database import Database, Dialect, Tx
from devyard.server.store.factory import parse_target
from devyard.server.store.migrate import applied_versions, migrate
from devyard.server.store.postgres import open_postgres_database
from devyard.server.store.schema import MIGRATIONS, Migration
from devyard.server.store.sqlite import open_sqlite_database

from .conftest import FakeClock


def open_database(target: str) -> AbstractAsyncContextManager[Database]:
    kind, where = parse_target(target)
    if kind == "postgresql":
        return open_postgres_database(where)
    return open_sqlite_database(where)


def table_names(tx: Tx) -> set[str]:
    if tx.dialect is Dialect.POSTGRESQL:
        rows = tx.fetchall(
            "SELECT table_name AS name FROM information_schema.tables"
            " WHERE table_schema = current_schema()"
        )
    else:
        rows = tx.fetchall("SELECT name FROM sqlite_master WHERE type = 'table'")
    return {row["name"] for row in rows}


def fixed_clock() -> datetime:
    return datetime(2030, 1, 1, tzinfo=UTC)


ONE = Migration(1, "t", ("CREATE TABLE t (id INTEGER PRIMARY KEY, at {timestamp})",))
TWO = Migration(2, "u", ("CREATE TABLE u (id INTEGER PRIMARY KEY)", "INSERT INTO u VALUES (7)"))
BROKEN = Migration(
    2, "broken", ("CREATE TABLE half (id INTEGER PRIMARY KEY)", "INSERT INTO nowhere VALUES (1)")
)


@pytest.fixture
async def database(database_target: str) -> AsyncIterator[Database]:
    async with open_database(database_target) as db:
        yield db


async def test_open_store_applies_the_schema_once(database_target: str, clock: FakeClock) -> None:
    latest = [m.version for m in MIGRATIONS]
    async with open_store(database_target, clock=clock) as store:
        org = await store.create_organization("acme")
    async with open_database(database_target) as db:
        assert await applied_versions(db) == latest
        assert {"organizations", "users", "memberships", "api_keys", "feedback"} <= await db.read(
            table_names
        )
        assert await migrate(db, clock=clock) == []  # already up to date
        rows = await db.read(lambda tx: tx.fetchall("SELECT version FROM schema_migrations"))
        assert sorted(row["version"] for row in rows) == latest
    async with open_store(database_target, clock=clock) as store:  # restart
        assert await store.list_organizations() == [org]


async def test_pending_migrations_apply_in_order(database: Database) -> None:
    assert await applied_versions(database) == []
    assert await migrate(database, clock=fixed_clock, migrations=[ONE]) == [1]
    assert await migrate(database, clock=fixed_clock, migrations=[ONE, TWO]) == [2]
    assert await migrate(database, clock=fixed_clock, migrations=[ONE, TWO]) == []
    assert await applied_versions(database) == [1, 2]
    row = await database.read(lambda tx: tx.fetchone("SELECT id FROM u"))
    assert row == {"id": 7}


async def test_a_failing_migration_leaves_no_trace(database: Database) -> None:
    await migrate(database, clock=fixed_clock, migrations=[ONE])
    with pytest.raises(MigrationError, match=r"migration 2 \(broken\) failed"):
        await migrate(database, clock=fixed_clock, migrations=[ONE, BROKEN])
    assert await applied_versions(database) == [1]
    assert "half" not in await database.read(table_names)  # its DDL was rolled back too


async def test_refuses_a_database_from_a_newer_version(database: Database) -> None:
    await migrate(database, clock=fixed_clock, migrations=[ONE, TWO])
    with pytest.raises(MigrationError, match="newer than this devyard"):
        await migrate(database, clock=fixed_clock, migrations=[ONE])


async def test_refuses_an_edited_migration(database: Database) -> None:
    await migrate(database, clock=fixed_clock, migrations=[ONE])
    edited = Migration(1, "t", ("CREATE TABLE t (id INTEGER PRIMARY KEY, at {timestamp}, x INT)",))
    with pytest.raises(MigrationError, match="must not be edited"):
        await migrate(database, clock=fixed_clock, migrations=[edited])


async def test_versions_must_be_contiguous(database: Database) -> None:
    with pytest.raises(ValueError, match="1, 2, 3"):
        await migrate(database, clock=fixed_clock, migrations=[TWO])


async def test_concurrent_starts_apply_each_migration_once(database_target: str) -> None:
    """Several servers starting at once on one fresh database."""
    opened: list[int] = []

    async def start(clock: Callable[[], datetime]) -> None:
        async with open_store(database_target, clock=clock) as store:
            await store.ping()
            opened.append(1)

    async with trio.open_nursery() as nursery:
        for _ in range(4):
            nursery.start_soon(start, FakeClock())
    assert len(opened) == 4
    async with open_database(database_target) as db:
        rows = await db.read(lambda tx: tx.fetchall("SELECT version FROM schema_migrations"))
    assert sorted(row["version"] for row in rows) == [m.version for m in MIGRATIONS]


def test_dialect_differences_are_explicit() -> None:
    (sqlite_sql,) = ONE.render(Dialect.SQLITE)
    (pg_sql,) = ONE.render(Dialect.POSTGRESQL)
    assert "at TEXT" in sqlite_sql
    assert "at TIMESTAMPTZ" in pg_sql
    assert ONE.checksum(Dialect.SQLITE) != ONE.checksum(Dialect.POSTGRESQL)
