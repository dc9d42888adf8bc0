"""The migration runner: brings a database's schema to the latest `schema.MIGRATIONS`.

Applied migrations are rows of ``schema_migrations`` (version, name, checksum, applied_at).
Each pending migration runs in its own transaction together with the insertion of its row,
so a migration is applied entirely or not at all (both PostgreSQL and SQLite have
transactional DDL), and a crash leaves the schema at a known version. Every step first takes
the database's migration lock: PostgreSQL's transaction-scoped advisory lock, SQLite's
write lock (``BEGIN IMMEDIATE``, which every write transaction takes), and re-reads the
applied versions under it, so several servers starting at once against one database apply
each migration once. Re-running on an up-to-date database changes nothing.

It refuses to run (`MigrationError`) when the database holds a version this code does not
know (the database was migrated by a newer devyard) or an applied migration's checksum no
longer matches its text (someone edited a released migration).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from functools import partial
from typing import Final

from .database import Database, Dialect, Tx
from .errors import MigrationError
from .schema import MIGRATIONS, Migration
from .threads import Interrupted

__all__ = ["applied_versions", "migrate"]

# pg_advisory_xact_lock key: "devyard" in ASCII, a constant no other program is likely to use.
_LOCK_KEY: Final = 0x64657679617264

_CREATE_TABLE: Final = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT NOT NULL,
    checksum   TEXT NOT NULL,
    applied_at {timestamp} NOT NULL
)
"""


def _check_sequence(migrations: Sequence[Migration]) -> None:
    versions = [m.version for m in migrations]
    if versions != list(range(1, len(versions) + 1)):
        raise ValueError(f"migration versions must be 1, 2, 3...; got {versions}")


def _applied(tx: Tx) -> dict[int, str]:
    rows = tx.fetchall("SELECT version, checksum FROM schema_migrations ORDER BY version")
    return {int(row["version"]): str(row["checksum"]) for row in rows}


def _step(tx: Tx, migrations: Sequence[Migration], now: datetime) -> int | None:
    """Apply the first pending migration; its version, or None when there is none."""
    dialect = tx.dialect
    if dialect is Dialect.POSTGRESQL:
        tx.fetchone("SELECT pg_advisory_xact_lock(:key)", {"key": _LOCK_KEY})
    timestamp = "TIMESTAMPTZ" if dialect is Dialect.POSTGRESQL else "TEXT"
    tx.execute(_CREATE_TABLE.format(timestamp=timestamp))
    applied = _applied(tx)
    known = {m.version: m for m in migrations}
    for version, checksum in applied.items():
        migration = known.get(version)
        if migration is None:
            raise MigrationError(
                f"the database has schema version {version}, newer than this devyard "
                f"(which knows up to {len(migrations)}): upgrade devyard"
            )
        if migration.checksum(dialect) != checksum:
            raise MigrationError(
                f"migration {version} ({migration.name}) differs from the one applied to "
                "this database: released migrations must not be edited"
            )
    for migration in migrations:
        if migration.version in applied:
            continue
        try:
            for statement in migration.render(dialect):
                tx.execute(statement)
        except Interrupted:
            raise
        except Exception as exc:  # the driver's error, before translation: say which step
            raise MigrationError(
                f"migration {migration.version} ({migration.name}) failed: {exc}"
            ) from exc
        tx.execute(
            "INSERT INTO schema_migrations (version, name, checksum, applied_at)"
            " VALUES (:version, :name, :checksum, :applied_at)",
            {
                "version": migration.version,
                "name": migration.name,
                "checksum": migration.checksum(dialect),
                "applied_at": now,
            },
        )
        return migration.version
    return None


async def migrate(
    db: Database,
    *,
    clock: Callable[[], datetime],
    migrations: Sequence[Migration] = MIGRATIONS,
) -> list[int]:
    """Apply every pending migration, one transaction each; the versions applied now."""
    _check_sequence(migrations)
    done: list[int] = []
    while True:
        step = partial(_step, migrations=migrations, now=clock())
        version = await db.write(step)
        if version is None:
            return done
        done.append(version)


async def applied_versions(db: Database) -> list[int]:
    """The versions recorded in ``schema_migrations`` (empty before the first migration)."""

    def read(tx: Tx) -> list[int]:
        exists = tx.fetchone(
            "SELECT 1 AS x FROM information_schema.tables WHERE table_name = 'schema_migrations'"
            " AND table_schema = current_schema()"
            if tx.dialect is Dialect.POSTGRESQL
            else "SELECT 1 AS x FROM sqlite_master WHERE name = 'schema_migrations'"
        )
        return sorted(_applied(tx)) if exists else []

    return await db.read(read)
